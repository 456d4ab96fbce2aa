// Package classify decides which parts of a snapshot are iptables usage.
//
// It takes an inspect.Snapshot and gives a Usage: per chain, the rules an
// iptables client made, and the legacy tables holding more than their
// untouched entries; Summarize turns a Usage into a finding's counts and
// fingerprint. It has no side effects.
//
// A table is iptables-shaped when its family and name are ones iptables-nft
// uses and every base chain matches iptables-nft's fixed template (name,
// hook, type, priority). In a shaped table any rule, any user-defined chain
// and any base chain with policy drop is usage; elsewhere only rules holding
// an xt match or target are, since only the xtables clients write those.
// Native nftables tables are never usage.
//
// Each usage rule also gets its RHEL 10 impact level (Level): xt when it
// holds an xt match or target (the kernel needs nft_compat and xt_*
// modules), native otherwise; legacy x_tables entries are legacy. Summarize
// counts them per level (docs/rhel10.md has the facts behind the levels).
package classify
