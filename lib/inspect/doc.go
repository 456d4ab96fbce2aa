// Package inspect takes one read-only look at a network namespace.
//
// It takes a netns.Handle and gives a Snapshot: nftables tables, chains and
// every rule counted per chain, from streamed netlink dumps (only a bounded
// number of rules kept with their expression data), and the legacy x_tables
// tables listed in the namespace.
//
// A snapshot is complete or says it is not: the deadline, a size bound, a
// dump the kernel ended early (a chain's use count above the rules and
// jumps dumped), or a legacy probe still blocked at the deadline set
// Truncated and return an error.
//
// Inspect returns by its deadline whatever the kernel does: reading legacy
// tables takes the host-wide x_tables mutex, which a neighbour can hold for
// seconds, so that read runs in a probe process (LegacyProbe: this binary
// re-executed, internal/child) that Inspect abandons at the deadline, or,
// for a long-running daemon (Options.LegacyInProcess), on a thread of its
// own it abandons, at most one outstanding.
//
// ReadState gives, for a fraction of that cost, what tells whether the
// rules may have changed since: the namespace's nftables generation and a
// hash of its legacy tables (read the bounded in-process way). An
// in-process look gives the State it read itself (Snapshot.State), the
// same as a ReadState before it: a daemon reads no State apart.
//
// Invariant: it never creates a table, chain or rule in the namespace. It
// sends only dump requests, and queries legacy tables only when the
// namespace already lists them, because *_SO_GET_INFO on any other name
// creates that table.
package inspect
