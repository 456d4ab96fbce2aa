// Package scan runs the data flow over one network namespace and turns what
// it saw into a finding: open, inspect, classify, allowlist, examples,
// record. The hook, the render command and the NRI agent share it; each
// entry point only decides when to scan and with what metadata.
//
// It takes a netns path and the metadata of the container that triggered
// the scan; it gives a Result, through Decide the record to append (or
// none), and through Store.Record what the record step did with it.
// Invariant: an inspection that could not see everything is never
// reported as clean. Decide always gives it a record, marked truncated
// with the error, state unknown when it saw no usage (present when it saw
// some), with a fingerprint of its own so that the per-sandbox memory
// never takes it for, and then skips, a later complete scan; the record
// step writes it unless the sandbox's last record is present or unknown
// and each part the look read whole is as that record had it (Same), or
// the sandbox's limit is reached (Limited). Read and
// Run read the netns, Store.Record writes the findings file and the
// per-sandbox memory; Decide and Build are pure.
package scan
