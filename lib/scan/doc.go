// Package scan runs the data flow over one network namespace and turns what
// it saw into a finding: open, inspect, classify, allowlist, examples,
// record. The hook, the render command and the NRI agent share it; each
// entry point only decides when to scan and with what metadata.
//
// It takes a netns path and the metadata of the container that triggered
// the scan; it gives a Result and, through Decide, the record to append (or
// none). Invariant: an inspection that could not see everything is never
// reported as clean. Decide always records it, marked truncated with the
// error, and gives it a fingerprint of its own so that the per-sandbox
// memory never takes it for, and then skips, a later complete scan. Only
// Read and Run have side effects (they read the netns); Decide and Build are
// pure.
package scan
