// Package inspect takes one read-only look at a network namespace.
//
// It takes a netns.Handle and gives a Snapshot: nftables tables and chains
// (through google/nftables), every rule counted per chain from one streamed
// netlink dump (only a bounded number kept with their expression data), and
// the legacy x_tables tables listed in the namespace.
//
// Invariant: it never creates a table, chain or rule in the namespace. It
// sends only dump requests, and queries legacy tables only when the
// namespace already lists them, because *_SO_GET_INFO on any other name
// creates that table.
package inspect
