// Package findings owns the findings file: the record type, the usage
// summary and fingerprint, the append that concurrent hooks share, and the
// per-sandbox memory that keeps one finding per pod until its usage changes.
//
// Invariants: a line is whole or absent (a failed write is cut back), lines
// never interleave (an exclusive flock around each append), and no path
// component is followed through a symlink.
package findings
