package scan

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// TestRecordLog: each outcome of the record step gives the line the
// hook and the agent both log (the end-to-end tests look for some), with
// the record's fields.
func TestRecordLog(t *testing.T) {
	full := findings.Record{Fingerprint: "fp1", Nft: findings.Nft{Rules: 3}}
	cut := findings.Record{Fingerprint: "fp2", Truncated: true, Error: "legacy x_tables busy"}
	gone := findings.Record{Fingerprint: "fp3", State: findings.StateGone}
	tests := []struct {
		name string
		rec  findings.Record
		out  findings.Outcome
		err  error
		// want are the lines' "level msg" in order.
		want []string
	}{
		{name: "recorded", rec: full, out: findings.Recorded, want: []string{"info iptables usage recorded"}},
		{name: "recorded incomplete", rec: cut, out: findings.Recorded, want: []string{"warning iptables usage recorded, incomplete: the counts are a lower bound"}},
		{name: "recorded, memory broken", rec: full, out: findings.Recorded, err: findings.ErrNoMemory, want: []string{
			"error iptables usage recorded; but the findings directory or the per-sandbox memory needs attention"}},
		{name: "same", rec: full, out: findings.Same, want: []string{"debug same usage already recorded for this sandbox"}},
		{name: "limited", rec: full, out: findings.Limited, want: []string{`warning finding dropped: this sandbox wrote its limit of findings this hour; its further drops this hour are logged at debug and counted in iptables_alerter_agent_scans_total{outcome=\"limited\"}`}},
		{name: "gone", rec: gone, out: findings.Recorded, want: []string{"info iptables usage gone, recorded"}},
		{name: "clean", rec: gone, out: findings.Same, want: []string{"debug no iptables usage"}},
		{name: "clean, memory broken", rec: gone, out: findings.Same, err: findings.ErrNoMemory, want: []string{
			"warning clean look, but the per-sandbox memory cannot be read: a usage recorded before for this sandbox may still stand"}},
		{name: "failed", rec: full, out: findings.Failed, err: errors.New("disk full"), want: []string{"error cannot record the finding"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := logrus.New()
			log.SetOutput(&buf)
			log.SetLevel(logrus.DebugLevel)
			log.SetFormatter(&logrus.JSONFormatter{})
			new(RecordLog).Log(log.WithField("sandbox_id", "sb"), "sb", tt.rec, tt.out, tt.err)
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("%d lines, want %d:\n%s", len(lines), len(tt.want), buf.String())
			}
			for i, line := range lines {
				for _, want := range []string{`"level":"` + strings.SplitN(tt.want[i], " ", 2)[0] + `"`,
					`"msg":"` + strings.SplitN(tt.want[i], " ", 2)[1] + `"`,
					`"sandbox_id":"sb"`, `"fingerprint":"` + tt.rec.Fingerprint + `"`, `"truncated":`, `"nft_rules":`, `"legacy_rules":`} {
					if !strings.Contains(line, want) {
						t.Errorf("line %d lacks %s: %s", i, want, line)
					}
				}
				if tt.rec.Error != "" && !strings.Contains(line, `"error":"`+tt.rec.Error+`"`) {
					t.Errorf("line %d lacks the record's error: %s", i, line)
				}
			}
		})
	}
}

// TestRecordLogChurn: a pod over its limit is warned about once per
// sandbox and limit window, then at debug; another sandbox, or the next
// window, is warned about again.
func TestRecordLogChurn(t *testing.T) {
	var buf bytes.Buffer
	log := logrus.New()
	log.SetOutput(&buf)
	log.SetLevel(logrus.DebugLevel)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	g := &RecordLog{Now: func() time.Time { return now }}
	rec := findings.Record{Fingerprint: "fp", Nft: findings.Nft{Rules: 1}}
	warnings := func() int {
		n := strings.Count(buf.String(), "level=warning")
		buf.Reset()
		return n
	}
	for i := 0; i < 1000; i++ {
		g.Log(log.WithField("sandbox_id", "churn"), "churn", rec, findings.Limited, nil)
	}
	if n := warnings(); n != 1 {
		t.Errorf("1000 drops of one sandbox: %d warnings, want 1", n)
	}
	g.Log(log.WithField("sandbox_id", "other"), "other", rec, findings.Limited, nil)
	if n := warnings(); n != 1 {
		t.Errorf("another sandbox's drop: %d warnings, want 1", n)
	}
	now = now.Add(findings.DefaultInterval)
	g.Log(log.WithField("sandbox_id", "churn"), "churn", rec, findings.Limited, nil)
	if n := warnings(); n != 1 {
		t.Errorf("the next window's first drop: %d warnings, want 1", n)
	}
	for i := 0; i < maxWarned+10; i++ {
		g.Log(log.WithField("sandbox_id", "many"), fmt.Sprint("many-", i), rec, findings.Limited, nil)
	}
	if len(g.warned) > maxWarned {
		t.Errorf("%d sandboxes remembered, want at most %d", len(g.warned), maxWarned)
	}
	if n := warnings(); n != maxWarned+10 {
		t.Errorf("%d first drops of distinct sandboxes: %d warnings, want each", maxWarned+10, n)
	}
}
