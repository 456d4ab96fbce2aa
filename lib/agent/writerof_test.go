package agent

import (
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
	"github.com/iptables-alerter/iptables-alerter/lib/watch"
)

// TestWriterOf: a start or stop scan names the newest writer whose commit
// it saw, by the generation read before its look; when the watch heard a
// later commit and the look's nftables read was not whole, by the
// generation read again after the look (an init container's restore
// committing during the scan of its start), which is read only then. A
// whole read holds its generation's rules only: a commit after it, read
// again, was named the writer of rules the look did not hold
// (helper-113 #3).
func TestWriterOf(t *testing.T) {
	a := &Agent{cfg: Config{Watch: true}, watches: newWatches()}
	w := &watched{done: make(chan struct{}), ready: make(chan struct{})}
	a.watches.pods["sb"] = w
	one, two, own := &findings.Writer{PID: 1, Comm: "one"}, &findings.Writer{PID: 2, Comm: "two"}, &findings.Writer{PID: 3, Comm: "own"}
	start := job{meta: scan.Meta{SandboxID: "sb", Source: SourcePostStart}}
	for _, tc := range []struct {
		name    string
		pending []pendingWriter
		j       job
		gen     uint32
		stOK    bool
		whole   bool
		after   uint32
		afterOK bool
		want    *findings.Writer
		reads   int
	}{
		{"seen before the look", []pendingWriter{{10, one, false}, {12, two, false}}, start, 12, true, false, 0, false, two, 0},
		{"seen by the look", []pendingWriter{{10, one, false}, {12, two, false}}, start, 11, true, false, 12, true, two, 1},
		{"after the look", []pendingWriter{{10, one, false}, {12, two, false}}, start, 11, true, false, 11, true, one, 1},
		{"after the look, not read again", []pendingWriter{{10, one, false}, {12, two, false}}, start, 11, true, false, 0, false, one, 1},
		{"its window ended while it ran", []pendingWriter{{10, one, true}, {12, two, false}}, start, 11, true, true, 0, false, one, 0},
		{"after a whole look", []pendingWriter{{10, one, false}, {12, two, false}}, start, 11, true, true, 12, true, one, 0},
		{"none seen", []pendingWriter{{10, one, false}}, start, 9, true, false, 9, true, nil, 1},
		{"generations wrap", []pendingWriter{{0xffffffff, one, false}, {1, two, false}}, start, 0, true, false, 0, true, one, 1},
		{"state not read", []pendingWriter{{10, one, false}}, start, 10, false, false, 0, false, nil, 0},
		{"the job's own", []pendingWriter{{10, one, false}}, job{meta: start.meta, writer: own}, 10, true, false, 0, false, own, 0},
		{"a watch scan", []pendingWriter{{10, one, false}}, job{meta: scan.Meta{SandboxID: "sb", Source: SourceWatch}}, 10, true, false, 0, false, nil, 0},
	} {
		w.pending = tc.pending
		reads := 0
		got := a.writerOf(tc.j, inspect.State{Gen: tc.gen}, tc.stOK, tc.whole, func() (uint32, bool) {
			reads++
			return tc.after, tc.afterOK
		})
		if got != tc.want || reads != tc.reads {
			t.Errorf("%s: writer %+v after %d reads, want %+v after %d", tc.name, got, reads, tc.want, tc.reads)
		}
	}
}

// TestOverrunDropsWriters: after an overrun, commits were made that the
// watch did not hear; a scan that saw them names no writer, as the watch's
// own scan after it does.
func TestOverrunDropsWriters(t *testing.T) {
	a := &Agent{cfg: Config{Watch: true}, watches: newWatches()}
	// Armed already: noted arms no window, whose end would queue a scan
	// on this agent without a queue.
	w := &watched{done: make(chan struct{}), ready: make(chan struct{}), armed: true}
	a.watches.pods["sb"] = w
	one := &findings.Writer{PID: 1, Comm: "one"}
	a.noted(w, watch.Change{Gen: 10, Writer: one}, stageCommit)
	start := job{meta: scan.Meta{SandboxID: "sb", Source: SourcePostStart}}
	never := func() (uint32, bool) { return 0, false }
	if got := a.writerOf(start, inspect.State{Gen: 10}, true, true, never); got != one {
		t.Fatalf("before the overrun: writer %+v, want %+v", got, one)
	}
	a.noted(w, watch.Change{Overrun: true}, stageOverrun)
	if got := a.writerOf(start, inspect.State{Gen: 12}, true, true, never); got != nil {
		t.Errorf("after the overrun: writer %+v, want none", got)
	}
}

// TestWriterNotHeardYet (helper-116 #3): a look whose generation is newer
// than every commit the watch's monitor took holds commits whose writers
// the watch has not heard yet: it names none, not the newest heard.
func TestWriterNotHeardYet(t *testing.T) {
	nstest.NeedRoot(t, "nft")
	ns := nstest.New(t)
	h, err := netns.Open(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	mon, err := watch.Open(h.Fd(), watch.Options{})
	h.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	a := &Agent{cfg: Config{Watch: true}, watches: newWatches()}
	one := &findings.Writer{PID: 1, Comm: "one"}
	start := job{meta: scan.Meta{SandboxID: "sb", Source: SourcePostStart}}
	never := func() (uint32, bool) { return 0, false }
	// A writer pending and nothing heard yet: its commit is still being
	// taken, and a later one may be in the look (helper-118 #3).
	a.watches.pods["sb"] = &watched{done: make(chan struct{}), ready: make(chan struct{}), mon: mon,
		pending: []pendingWriter{{5, one, false}}}
	if got := a.writerOf(start, inspect.State{Gen: 5}, true, true, never); got != nil {
		t.Errorf("nothing heard yet: writer %+v, want none", got)
	}
	ns.Run("nft", "add", "table", "inet", "mine")
	var heard uint32
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		g, ok := mon.Heard()
		if ok {
			heard = g
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the monitor heard no commit within a minute")
		}
	}
	a.watches.pods["sb"] = &watched{done: make(chan struct{}), ready: make(chan struct{}), mon: mon,
		pending: []pendingWriter{{heard, one, true}}}
	if got := a.writerOf(start, inspect.State{Gen: heard}, true, true, never); got != one {
		t.Errorf("look at the generation heard: writer %+v, want %+v", got, one)
	}
	if got := a.writerOf(start, inspect.State{Gen: heard + 1}, true, true, never); got != nil {
		t.Errorf("look at a generation not heard yet: writer %+v, want none", got)
	}
}

// TestScanEndedDropsSeen: a scan's end drops the fired writers its look
// saw, and keeps those of commits after it, for the scan that sees them
// (helper-118 #4); writers of a window still open stay.
func TestScanEndedDropsSeen(t *testing.T) {
	a := &Agent{cfg: Config{Watch: true}, watches: newWatches()}
	one, two, three := &findings.Writer{PID: 1}, &findings.Writer{PID: 2}, &findings.Writer{PID: 3}
	w := &watched{done: make(chan struct{}), ready: make(chan struct{}),
		pending: []pendingWriter{{10, one, true}, {12, two, true}, {13, three, false}}}
	a.watches.pods["sb"] = w
	m := scan.Meta{SandboxID: "sb"}
	a.scanEnded(m, 0, 0, 11, true)
	if len(w.pending) != 2 || w.pending[0].writer != two || w.pending[1].writer != three {
		t.Errorf("after a scan of generation 11: pending %+v, want 12's and 13's", w.pending)
	}
	a.scanEnded(m, 0, 0, 0, false)
	if len(w.pending) != 2 {
		t.Errorf("after a scan whose generation is not known: pending %+v, want both kept", w.pending)
	}
	a.scanEnded(m, 0, 0, 13, true)
	if len(w.pending) != 1 || w.pending[0].writer != three {
		t.Errorf("after a scan of generation 13: pending %+v, want 13's (its window open)", w.pending)
	}
}

// TestLookedBeforeKeepsWriters: a scan that looked at a pod before its
// watch, open now, is followed by a scan of the watch's; the writers the
// monitor heard since it opened stand (helper-118 #2: it was an overrun).
func TestLookedBeforeKeepsWriters(t *testing.T) {
	a := &Agent{cfg: Config{Watch: true}, watches: newWatches()}
	one := &findings.Writer{PID: 1, Comm: "one"}
	// Armed already: noted arms no window on this agent without a queue.
	w := &watched{done: make(chan struct{}), ready: make(chan struct{}), armed: true,
		pending: []pendingWriter{{10, one, false}}, writer: one, stage: stageCommit}
	close(w.ready)
	a.lookedBefore(w)
	if len(w.pending) != 1 || w.writer != one || w.stage != stageReopen {
		t.Errorf("pending %+v, writer %+v, stage %q: want the writer kept, stage %q", w.pending, w.writer, w.stage, stageReopen)
	}
}
