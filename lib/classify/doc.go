// Package classify decides which parts of a snapshot are iptables usage.
//
// It takes an inspect.Snapshot and gives a Usage: per chain, the rules an
// iptables client made, and the legacy tables holding more than their
// untouched entries; Summarize turns a Usage into a finding's counts and
// fingerprint. It has no side effects.
//
// The criterion: an nftables rule is iptables usage when iptables-nft (or
// ip6tables-, arptables-, ebtables-nft) could have written it, that is
// when the matching *-nft-save tool lists it as the rule it is. A table,
// chain or rule iptables could not have written is native and not usage,
// whatever its name. In detail:
//
//   - A table is shaped when its family and name are ones the xtables
//     clients use, every base chain matches their fixed template (name,
//     hook, type, priority), and no rule in it holds an expression the
//     save tools refuse (Native's table verdict: ct, fib, native
//     reject/nat/masq/redir/notrack/tproxy, log without a group, limit by
//     bytes or "over"). The save tools list nothing of any other table
//     ("Table `filter' is incompatible, use 'nft' tool"), so one such
//     rule makes the whole table native: the iptables-translate output of
//     conntrack, LOG or MASQUERADE rules loaded with nft -f is not usage.
//   - In a shaped table a rule is usage unless Native's rule verdict says
//     iptables-nft never writes it (a meta key or meta set it never uses,
//     a payload write, a set lookup outside ebtables' among); the save
//     tools fail on those ("Parsing nftables rule failed", exit 3) or list
//     a line that drops the part they cannot read, so they are decided
//     per rule, and the table's other rules still count. A rule holding
//     an xt match or target is always usage: only the xtables clients
//     write those, in any table.
//   - In a shaped table a user chain and a base chain with policy drop are
//     usage too, unless the chain holds rules and none of them is usage:
//     a chain of native rules is native whatever its name.
//   - A rule of native expressions that iptables-nft does write (-s, -p tcp
//     --dport, -m mark, -j ACCEPT ...) is the same object in the kernel
//     whoever made it: such rules count, translated or not.
//
// Counts therefore equal the save tools' -A lines, except for the lines
// they misread (a lookup they list without its set), which are not the
// rule and not counted. Summarize's per-table chains are the save tools'
// ":" lines: every built-in chain of the table (listed even before a
// client creates it) and every user chain.
//
// Each usage rule also gets its RHEL 10 impact level (Level): xt when it
// holds an xt match or target (the kernel needs nft_compat and xt_*
// modules), native otherwise; legacy x_tables entries are legacy. Summarize
// counts them per level (docs/rhel10.md has the facts behind the levels).
package classify
