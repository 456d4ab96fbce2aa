package scan

import "github.com/iptables-alerter/iptables-alerter/lib/findings"

// Decision is what to do with one scan. Record is nil when there is nothing
// to record; Why then says so for the log.
//
// Whether the sandbox already has this finding is not decided here: the
// per-sandbox memory compares Record.Fingerprint under its lock, so two
// containers of one pod starting together give one finding.
type Decision struct {
	Record *findings.Record
	Why    string
}

// Decide turns a scan into what to record. Usage left after the allowlist
// is recorded, state present; so is an incomplete inspection that saw none,
// state unknown, truncated and with its error: unknown is not clean. Only a
// complete scan with nothing left is silent.
func Decide(m Meta, res Result) Decision {
	if res.Usage.Empty() && res.Complete() {
		return Decision{Why: "no iptables usage"}
	}
	rec := Build(m, res)
	return Decision{Record: &rec}
}
