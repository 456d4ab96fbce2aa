// Package render turns one iptables-nft rule, as the kernel holds it
// (nftables expressions: native payload/meta/cmp/... and xt-compat
// match/target blobs), into canonical iptables-save-like text such as
//
//	-A OUTPUT -p tcp --dport 22623 --syn -j REJECT
//
// It takes an inspect.Rule and gives a string. Canonical means one spelling
// per meaning, whatever iptables version wrote the rule: xt-compat blobs of
// older clients and native expressions of newer ones render alike, defaults
// are omitted, and parts come in a fixed order (see docs/render.md).
//
// Invariant: Text never panics and never drops what it cannot decode; such
// a piece becomes an opaque "unknown:" token, so the rule still counts and
// two different unknown pieces never render alike by accident.
//
// Reading a rule goes one way through the files: text.go (Text: decode
// every expression, order the parts, join them) → decode.go (netlink to a
// typed expression) → native.go, xtmatch.go, xttarget.go (meaning to parts;
// none calls another) → spell.go (the one spelling of each meaning they
// share) → model.go (parts, ranks, registers) → escape.go (names, quoting,
// opaque tokens). A file uses only what the files after it define.
//
// Every attacker-controlled string (comments, chain, interface and set
// names) goes through internal/safetext, so the text is a single line of
// printable ASCII of bounded length per field.
package render
