// Package watch listens to a network namespace's nftables commits: the
// kernel announces every committed change on the NFNLGRP_NFTABLES group,
// each commit ending with a NEWGEN message naming the committing process.
// It takes a netns fd and gives one Change per commit that touched a table
// with an iptables table name in an iptables family (iptables-nft's
// shape), or an Overrun when the kernel dropped announcements.
//
// Invariant: it never holds a commit's objects, only a count of them and
// the names of the iptables-shaped tables touched (at most 14: xtTables), so a
// million-rule restore costs no memory; and it never writes to the
// namespace. Who wrote a change (Writer) is read from the host's /proc, by
// one reader thread for every monitor, at real-time priority when allowed
// (reader.go): a one-shot writer exits within microseconds of its commit.
package watch
