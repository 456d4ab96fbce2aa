// Package findings owns the findings file: the record type, its parse, the
// append that concurrent hooks share, and the per-sandbox memory that keeps
// one finding per pod until its usage changes. It imports nothing of the
// inspection (the summary and fingerprint are classify's), so the consumers,
// which only parse JSON, do not link netlink or nftables.
//
// Invariants: a line is whole or absent (a failed write is cut back), lines
// never interleave (an exclusive flock around each append), and no path
// component is followed through a symlink.
package findings
