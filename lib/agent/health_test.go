package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

// TestHealthDegraded: the agent is degraded when every scan of a finished
// sweep found its netns unreachable, and stays so until a scan reaches a
// netns; a dropped scan tried nothing and changes nothing.
func TestHealthDegraded(t *testing.T) {
	type step struct {
		// synced starts a sweep of that many scans (when > 0); else the
		// step is one scan.
		synced  int
		source  string
		outcome Outcome
		stored  findings.Outcome
		// node makes the scan the node's namespace's (node mode).
		node bool
		// degraded is whether the agent is degraded after the step.
		degraded bool
	}
	sweep := func(o Outcome, degraded bool) step {
		return step{source: SourceSweep, outcome: o, degraded: degraded}
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "every sweep scan unreachable", steps: []step{
			{synced: 2}, sweep(Unreachable, false), sweep(Unreachable, true),
		}},
		{name: "one sweep scan reached its netns", steps: []step{
			{synced: 2}, sweep(Unreachable, false), sweep(Clean, false),
		}},
		{name: "a recorded finding ends it", steps: []step{
			{synced: 1}, sweep(Unreachable, true),
			{source: SourcePostStart, outcome: Found, stored: findings.Recorded, degraded: false},
		}},
		{name: "a gone netns at a stop ends it", steps: []step{
			{synced: 1}, sweep(Unreachable, true),
			{source: SourceStop, outcome: Gone, degraded: false},
		}},
		{name: "a dropped scan changes nothing", steps: []step{
			{synced: 1}, sweep(Unreachable, true),
			{source: SourcePostStart, outcome: Dropped, degraded: true},
		}},
		{name: "an unreachable poststart scan does not count in the sweep", steps: []step{
			{synced: 2}, sweep(Unreachable, false),
			{source: SourcePostStart, outcome: Unreachable, degraded: false},
			sweep(Unreachable, true),
		}},
		{name: "a new sweep starts a new tally", steps: []step{
			{synced: 1}, sweep(Unreachable, true),
			{synced: 2, degraded: true}, sweep(Clean, false), sweep(Unreachable, false),
		}},
		{name: "the node's scans say nothing of the pods' netns", steps: []step{
			{synced: 2}, sweep(Unreachable, false),
			{source: SourceSweep, outcome: Clean, node: true, degraded: false},
			sweep(Unreachable, true),
			{source: SourceWatch, outcome: Found, stored: findings.Recorded, node: true, degraded: true},
		}},
		{name: "an empty sweep says nothing", steps: []step{
			{synced: 0}, sweep(Unreachable, false),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHealth()
			for i, s := range tt.steps {
				if s.synced > 0 || s.source == "" {
					h.Synced(s.synced)
				} else {
					m := scan.Meta{Source: s.source, SandboxID: fmt.Sprint("sb", i)}
					if s.node {
						m.SandboxID, m.Subject = nodeKey, findings.SubjectNode
					}
					h.Scanned(Scan{Meta: m, Outcome: s.outcome, Stored: s.stored})
				}
				if why := h.Degraded(); (why != "") != s.degraded {
					t.Fatalf("step %d %+v: degraded %q, want %v", i, s, why, s.degraded)
				}
			}
		})
	}
}

// TestHealthDegradedReason: the reason names the sweep's size and the
// likely missing mount.
func TestHealthDegradedReason(t *testing.T) {
	h := NewHealth()
	h.Synced(3)
	for i := range 3 {
		h.Scanned(Scan{Meta: scan.Meta{Source: SourceSweep, SandboxID: fmt.Sprint(i)}, Outcome: Unreachable})
	}
	why := h.Degraded()
	for _, want := range []string{"(3)", "/var/run/netns"} {
		if !strings.Contains(why, want) {
			t.Errorf("reason %q lacks %q", why, want)
		}
	}
}

// TestHealthWarnOncePerSandbox: an unreachable sandbox is warned about
// once, however often it is scanned; the set of those warned about is
// bounded and starts over past its bound.
func TestHealthWarnOncePerSandbox(t *testing.T) {
	h := NewHealth()
	unreachable := func(id string) bool {
		return h.Scanned(Scan{Meta: scan.Meta{Source: SourcePostStart, SandboxID: id}, Outcome: Unreachable})
	}
	if !unreachable("a") || unreachable("a") || !unreachable("b") {
		t.Fatal("want one warning for each of a and b")
	}
	if h.Scanned(Scan{Meta: scan.Meta{Source: SourceStop, SandboxID: "c"}, Outcome: Gone}) {
		t.Error("warning for a scan that was not unreachable")
	}
	for i := len(h.warned); i < maxWarned; i++ {
		unreachable(fmt.Sprint("x", i))
	}
	if unreachable("a") {
		t.Fatal("warned again about a before the set was full")
	}
	// Full: the next new sandbox starts the set over.
	if !unreachable("new") || !unreachable("a") {
		t.Error("past its bound, the set does not start over")
	}
	if len(h.warned) != 2 {
		t.Errorf("%d sandboxes in the set after it started over, want 2", len(h.warned))
	}
}

// TestHealthAlive: connected, the agent is alive now; disconnected, as of
// the loss (the retries go on from there).
func TestHealthAlive(t *testing.T) {
	before := time.Now()
	h := NewHealth()
	if h.Connected() || h.Alive().Before(before) || h.Alive().After(time.Now()) {
		t.Fatalf("new: connected %v, alive %v; want not connected, alive since its start", h.Connected(), h.Alive())
	}
	h.Connection(true)
	if !h.Connected() {
		t.Fatal("not connected after Connection(true)")
	}
	lost := time.Now()
	h.Connection(false)
	alive := h.Alive()
	if h.Connected() || alive.Before(lost) || alive.After(time.Now()) {
		t.Fatalf("lost: connected %v, alive %v; want not connected, alive at the loss", h.Connected(), alive)
	}
	// Disconnected, Alive does not move on by itself: /healthz compares
	// it with its limit.
	if again := h.Alive(); !again.Equal(alive) {
		t.Errorf("alive moved from %v to %v while disconnected", alive, again)
	}
}

// TestScanLabel: a scan that reached the record step is labelled by that
// step's outcome, the others by their own.
func TestScanLabel(t *testing.T) {
	tests := []struct {
		name string
		scan Scan
		want string
	}{
		{name: "recorded", scan: Scan{Outcome: Found, Stored: findings.Recorded}, want: "recorded"},
		{name: "same", scan: Scan{Outcome: Found, Stored: findings.Same}, want: "same"},
		{name: "limited", scan: Scan{Outcome: Found, Stored: findings.Limited}, want: "limited"},
		{name: "record failed", scan: Scan{Outcome: Found, Stored: findings.Failed}, want: "failed"},
		{name: "open failed", scan: Scan{Outcome: Failed}, want: "failed"},
		{name: "clean", scan: Scan{Outcome: Clean}, want: "clean"},
		{name: "unreachable", scan: Scan{Outcome: Unreachable}, want: "unreachable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.scan.Label(); got != tt.want {
				t.Errorf("Label() = %q, want %q", got, tt.want)
			}
		})
	}
}
