// Package catalog recognises known rule frameworks (service meshes, agents,
// nested container runtimes and clusters) in a pod's iptables usage and
// gives, for each, what to change so it stops needing iptables.
//
// The recognition is data: one table file, vendors.json, carried in the
// binary as a Go literal (builtin.go, written from it by `make vendors`)
// and extendable by the admin's own file (Load). An entry matches on the
// names of the chains holding usage (every chain classify listed, not only
// the rules kept in detail, so a truncated scan still names its vendors)
// or on one rule's canonical text (rendered by lib/render): its chain,
// target, owner uid, mark, destination, port and NAT destination. The
// matching has no side effects and is bounded by the table's size, which
// Load caps.
package catalog
