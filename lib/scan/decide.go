package scan

import (
	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// Decision is what to record of one scan, for the record step (Store).
//
// Whether the sandbox already has this finding is not decided here: the
// per-sandbox memory compares Record.Fingerprint and Parts under its lock,
// so two containers of one pod starting together give one finding.
type Decision struct {
	// Record is the record to offer the record step.
	Record findings.Record
	// Parts are what the look read whole (findings.Parts).
	Parts findings.Parts
	// Why says, for a look that found nothing (Clean), why, for the log.
	Why string
}

// Clean tells whether the look was complete and found no usage: its record
// is a gone, which the record step writes only to take back a present or
// unknown record before it.
func (d Decision) Clean() bool { return d.Record.State == findings.StateGone }

// Decide shapes the record of a scan: the one place every record of the
// hook, the agent (its starts, stops, sweeps, re-sweeps and watch) and the
// scan command is made.
//
//   - Usage left after the allowlist: present; a look that did not finish
//     is truncated, its counts a lower bound.
//   - None seen by a look that did not finish: unknown, truncated, with its
//     error: unknown is not clean.
//   - None seen by a complete look: gone. The record step writes it only
//     after a present or unknown record, so a pod's last word is never
//     usage that is no longer there, nor "unknown" once it was seen whole.
//
// A node's record names no pod (Build).
func Decide(m Meta, res Result) Decision {
	rec, sum := build(m, res)
	d := Decision{Record: rec, Parts: parts(res, sum)}
	if res.Usage.Empty() && res.Complete() {
		d.Record.State = findings.StateGone
		d.Why = "no iptables usage"
	}
	return d
}

// parts are the fingerprints of the parts res read whole.
func parts(res Result, sum classify.Summary) findings.Parts {
	var p findings.Parts
	if res.NftWhole() {
		p.Nft = sum.NftFingerprint
	}
	if res.LegacyWhole() {
		p.Legacy = sum.LegacyFingerprint
	}
	return p
}
