package agent

import (
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

func qjob(t *testing.T, id, source string, open bool) job {
	t.Helper()
	j := job{meta: scan.Meta{SandboxID: id, Source: source, Netns: "/proc/self/ns/net"}}
	if open {
		h, err := netns.Open(j.meta.Netns)
		if err != nil {
			t.Fatal(err)
		}
		j.h = h
	}
	return j
}

// closed tells whether h was closed (by the queue).
func closed(h *netns.Handle) bool { return errors.Is(h.Close(), os.ErrClosed) }

// TestQueueOneScanPerSandbox: a sandbox being scanned is not taken again
// before its scan is done, however many events come; they leave one job,
// queued behind the sandboxes that waited meanwhile. Two sandboxes' events
// never share a job.
func TestQueueOneScanPerSandbox(t *testing.T) {
	q := newQueue(10)
	q.add(qjob(t, "slow", SourcePostStart, true))
	j, _, _ := q.take(2)
	if j.meta.SandboxID != "slow" {
		t.Fatalf("took %q", j.meta.SandboxID)
	}
	for range 5 {
		q.add(qjob(t, "slow", SourceStop, true))
		q.add(qjob(t, "slow", SourcePostStart, true))
	}
	q.add(qjob(t, "other", SourcePostStart, true))
	if !slices.Equal(q.order, []string{"other"}) || q.events != 2 {
		t.Fatalf("while slow runs: order %v, %d event jobs; want only other waiting, slow's one next job counted", q.order, q.events)
	}
	next, _, _ := q.take(2)
	if next.meta.SandboxID != "other" {
		t.Fatalf("took %q while slow runs, want other", next.meta.SandboxID)
	}
	q.add(qjob(t, "third", SourcePostStart, true))
	q.done(j, inTime)
	if !slices.Equal(q.order, []string{"third", "slow"}) {
		t.Fatalf("after slow's scan: order %v, want slow behind third", q.order)
	}
	q.done(next, inTime)
	q.take(2)
	j, _, _ = q.take(2)
	if j.meta.SandboxID != "slow" || j.meta.Source != SourceStop {
		t.Fatalf("slow's next job %+v, want one stop", j.meta)
	}
	q.close()
	if _, _, ok := q.take(2); ok {
		t.Fatal("take after close")
	}
}

// TestQueueMerge: the newer event's job replaces the waiting one, except
// that a stop stays a stop, and the pod's stop the pod's; one netns handle
// is kept, the other closed. join folds an event into a waiting job
// holding a handle.
func TestQueueMerge(t *testing.T) {
	for _, tc := range []struct {
		name       string
		old, new   string
		oldStage   string
		wantSource string
		// wantOld: the old job's meta is kept, else the newer's.
		wantOld bool
	}{
		{"poststart then stop", SourcePostStart, SourceStop, "", SourceStop, false},
		{"stop then poststart", SourceStop, SourcePostStart, "", SourceStop, true},
		{"stop then stop", SourceStop, SourceStop, "", SourceStop, false},
		{"pod's stop then a container's", SourceStop, SourceStop, stageStopPod, SourceStop, true},
		{"sweep then poststart", SourceSweep, SourcePostStart, "", SourcePostStart, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(10)
			old, nw := qjob(t, "a", tc.old, tc.old != SourceSweep), qjob(t, "a", tc.new, true)
			old.meta.Stage = tc.oldStage
			nw.meta.ContainerID, nw.meta.Stage = "new", "new"
			q.add(old)
			q.add(nw)
			j, _, _ := q.take(2)
			want := nw.meta
			if tc.wantOld {
				want = old.meta
			}
			if j.meta.Source != tc.wantSource || j.meta != want {
				t.Errorf("job %+v, want %+v", j.meta, want)
			}
			if j.h != nw.h {
				t.Errorf("the newer handle was not kept")
			}
			if old.h != nil && !closed(old.h) {
				t.Errorf("the replaced handle was left open")
			}
			if q.events != 0 || len(q.order) != 0 {
				t.Errorf("%d event jobs, order %v after taking the only one", q.events, q.order)
			}
			closed(j.h)
		})
	}

	// The watch's job joining a container's event keeps the event (the
	// container it names) and brings its writer, in either order.
	for _, watchFirst := range []bool{false, true} {
		q := newQueue(10)
		ev, w := qjob(t, "a", SourcePostStart, true), qjob(t, "a", SourceWatch, true)
		ev.meta.ContainerID = "c1"
		w.writer = &findings.Writer{PID: 42, Comm: "iptables-nft"}
		if watchFirst {
			q.add(w)
			q.add(ev)
		} else {
			q.add(ev)
			q.add(w)
		}
		j, _, _ := q.take(2)
		if j.meta.Source != SourcePostStart || j.meta.ContainerID != "c1" || j.writer == nil || j.writer.PID != 42 {
			t.Errorf("watch first %v: job %+v, writer %+v; want the poststart of c1 with the watch's writer", watchFirst, j.meta, j.writer)
		}
		closed(j.h)
	}

	q := newQueue(10)
	q.sweep([]job{qjob(t, "a", SourceSweep, false)}, func(int) {})
	if q.join(scan.Meta{SandboxID: "a", Source: SourceStop}) {
		t.Fatal("joined a sweep's job, which has no netns open for a stop")
	}
	q.add(qjob(t, "a", SourcePostStart, true))
	if !q.join(scan.Meta{SandboxID: "a", Source: SourceStop, ContainerID: "c2"}) {
		t.Fatal("a stop did not join the waiting poststart")
	}
	if j, _, _ := q.take(2); j.meta.Source != SourceStop || j.meta.ContainerID != "c2" || j.h == nil {
		t.Fatalf("job %+v, want the stop with the poststart's handle", j.meta)
	}
}

// TestQueueSweep: a sweep queues behind the waiting events, replaces what
// is left of the previous sweep, and does not count against the events'
// bound, which drops events past it.
func TestQueueSweep(t *testing.T) {
	q := newQueue(2)
	q.add(qjob(t, "e1", SourcePostStart, true))
	var queued []int
	synced := func(n int) { queued = append(queued, n) }
	q.sweep([]job{qjob(t, "s1", SourceSweep, false), qjob(t, "s2", SourceSweep, false), qjob(t, "e1", SourceSweep, false)}, synced)
	q.sweep([]job{qjob(t, "s3", SourceSweep, false), qjob(t, "s1", SourceSweep, false)}, synced)
	if !slices.Equal(q.order, []string{"e1", "s3", "s1"}) || q.slots["s2"] != nil || q.slots["e1"].next.meta.Source != SourcePostStart {
		t.Fatalf("order %v, want e1's event then the second sweep", q.order)
	}
	if !slices.Equal(queued, []int{2, 2}) {
		t.Fatalf("sweeps queued %v, want 2 and 2 (e1's event covers its sweep)", queued)
	}
	if !q.add(qjob(t, "e2", SourceStop, true)) {
		t.Fatal("second event dropped with the bound at 2")
	}
	e3 := qjob(t, "e3", SourceStop, true)
	if q.add(e3) {
		t.Fatal("third event queued past the bound")
	}
	closed(e3.h)
	if !q.add(qjob(t, "e2", SourcePostStart, true)) {
		t.Fatal("an event joining a waiting job was dropped")
	}
}

// TestQueueSweepKeepsNodeJob: a sweep replaces the pods' waiting sweep and
// re-sweep jobs, which it queues again, but not the node's re-sweep job:
// no sweep lists the node, so its legacy change would wait another
// interval.
func TestQueueSweepKeepsNodeJob(t *testing.T) {
	q := newQueue(10)
	node := qjob(t, nodeKey, SourceSweep, false)
	node.meta.Subject = findings.SubjectNode
	q.more([]job{node, qjob(t, "pod", SourceSweep, false)})
	q.sweep([]job{qjob(t, "other", SourceSweep, false)}, func(int) {})
	if !slices.Equal(q.order, []string{nodeKey, "other"}) || q.slots["pod"] != nil {
		t.Fatalf("order %v, want the node's job kept, the pod's replaced by the sweep's", q.order)
	}
}

// TestQueueLongStop: a stop gets the longer deadline only when no other job
// waits and another worker is left for what comes meanwhile.
func TestQueueLongStop(t *testing.T) {
	q := newQueue(10)
	q.add(qjob(t, "a", SourceStop, true))
	q.add(qjob(t, "b", SourceStop, true))
	if _, long, _ := q.take(2); long {
		t.Error("long deadline with another job waiting")
	}
	b, long, _ := q.take(2)
	if !long {
		t.Error("no long deadline for the last stop, another worker free")
	}
	q.add(qjob(t, "c", SourceStop, true))
	if _, long, _ := q.take(2); long {
		t.Error("a second long scan with two workers")
	}
	q.done(b, inTime)
	q.add(qjob(t, "d", SourceStop, true))
	if _, long, _ := q.take(1); long {
		t.Error("long deadline with a single worker")
	}
	q.close()
}

// TestQueueHeavy: a sandbox whose last scan ran to its deadline is heavy,
// and heavy scans take at most workers-1 workers: with one running on two
// workers, the other takes the oldest job of a sandbox that is not heavy,
// and waits while only heavy ones wait. A stop given the longer deadline
// counts as such a scan. A scan in time, the pod's stop scan or forget
// ends the sandbox's heaviness; a single worker runs heavy scans in turn
// with the others.
func TestQueueHeavy(t *testing.T) {
	q := newQueue(10)
	defer q.close()
	take := func(want string) job {
		t.Helper()
		j, _, ok := q.take(2)
		if !ok || j.meta.SandboxID != want {
			t.Fatalf("took %q (%v), want %q; order %v", j.meta.SandboxID, ok, want, q.order)
		}
		return j
	}
	q.add(qjob(t, "a", SourcePostStart, true))
	q.add(qjob(t, "b", SourcePostStart, true))
	a, b := take("a"), take("b")
	// Crash-looping: each has its next event waiting while it runs.
	q.add(qjob(t, "a", SourcePostStart, true))
	q.add(qjob(t, "b", SourcePostStart, true))
	q.done(a, ranOut)
	a = take("a") // no heavy scan ran: the oldest
	q.done(b, ranOut)
	if i := q.next(2); i != -1 {
		t.Fatalf("a heavy scan runs on one of two workers, yet %q may start", q.order[i])
	}
	// An ordinary pod's event is taken past b's older job.
	got := make(chan job, 1)
	go func() {
		j, _, _ := q.take(2)
		got <- j
	}()
	q.add(qjob(t, "c", SourcePostStart, true))
	c := receive(t, got, "take of the ordinary pod's job")
	if c.meta.SandboxID != "c" || !slices.Equal(q.order, []string{"b"}) {
		t.Fatalf("took %q, order %v: want c, with b left waiting", c.meta.SandboxID, q.order)
	}
	q.done(c, inTime)
	// a's heavy scan ends: b may go.
	go func() {
		j, _, _ := q.take(2)
		got <- j
	}()
	q.done(a, ranOut)
	b = receive(t, got, "take of b once a's scan ended")
	if b.meta.SandboxID != "b" {
		t.Fatalf("took %q, want b", b.meta.SandboxID)
	}
	// b's scan ends in time: no longer heavy. a is, until its pod stops.
	q.done(b, inTime)
	if q.heavy["b"] || !q.heavy["a"] {
		t.Fatalf("heavy %v, want a only", q.heavy)
	}
	// A long stop of a pod that is not heavy holds a worker as a heavy
	// scan does: a heavy job waits, an ordinary one goes.
	q.add(qjob(t, "d", SourceStop, true))
	d, long, _ := q.take(2)
	if d.meta.SandboxID != "d" || !long {
		t.Fatalf("took %q (long %v), want d's stop with the longer deadline", d.meta.SandboxID, long)
	}
	q.add(qjob(t, "a", SourceStop, true))
	if i := q.next(2); i != -1 {
		t.Fatalf("a long stop runs on one of two workers, yet the heavy %q may start", q.order[i])
	}
	q.add(qjob(t, "e", SourcePostStart, true))
	take("e")
	q.done(d, inTime)
	a = take("a")
	a.meta.Stage = stageStopPod
	q.done(a, ranOut)
	if len(q.heavy) != 0 || q.hogs != 0 {
		t.Fatalf("heavy %v (%d running) after the pod's stop, want none", q.heavy, q.hogs)
	}
	q.heavy["gone"] = true
	q.forget("gone")
	if len(q.heavy) != 0 {
		t.Error("a forgotten sandbox is still heavy")
	}
	// One worker: a heavy job is taken in its turn.
	q.heavy["f"] = true
	q.add(qjob(t, "f", SourcePostStart, true))
	if j, _, _ := q.take(1); j.meta.SandboxID != "f" {
		t.Errorf("a single worker took %q, want the heavy f", j.meta.SandboxID)
	}
}

// TestQueueCloseKeepsStops: closed, the queue drops the waiting jobs but
// the stops (their handles closed), hands out the stops left without the
// longer deadline, also one that waited behind its sandbox's running
// scan, then returns false; abandon drops the stops too.
func TestQueueCloseKeepsStops(t *testing.T) {
	q := newQueue(10)
	running := addTake(t, q, qjob(t, "a", SourcePostStart, true))
	q.add(qjob(t, "a", SourceStop, true))
	start := qjob(t, "b", SourcePostStart, true)
	q.add(start)
	q.add(qjob(t, "c", SourceStop, true))
	sweep := qjob(t, "d", SourceSweep, true)
	q.sweep([]job{sweep}, func(int) {})
	q.close()
	if !closed(start.h) || !closed(sweep.h) {
		t.Error("a start's or a sweep's handle left open by close")
	}
	if q.add(qjob(t, "e", SourceStop, false)) {
		t.Error("a job added after close")
	}
	j, long, ok := q.take(2)
	if !ok || j.meta.SandboxID != "c" || long {
		t.Fatalf("took %+v (long %v, %v) after close, want c's stop, not long", j.meta, long, ok)
	}
	q.done(j, inTime)
	// a's stop waited behind its running scan.
	q.done(running, inTime)
	j, _, ok = q.take(2)
	if !ok || j.meta.SandboxID != "a" || j.meta.Source != SourceStop {
		t.Fatalf("took %+v (%v), want a's stop", j.meta, ok)
	}
	q.done(j, inTime)
	if _, _, ok := q.take(2); ok {
		t.Fatal("take with nothing left after close")
	}

	// Closed, a heavy sandbox's stop is taken though heavy or long scans
	// run on every worker but one: no event is left to keep a worker
	// for, and waiting it would be abandoned.
	q = newQueue(10)
	q.heavy["h"] = true
	longStop := addTake(t, q, qjob(t, "s", SourceStop, true))
	q.add(qjob(t, "h", SourceStop, true))
	q.close()
	if j, _, ok := q.take(2); !ok || j.meta.SandboxID != "h" {
		t.Fatalf("took %+v (%v) after close beside a long stop, want h's heavy stop", j.meta, ok)
	}
	q.done(longStop, inTime)

	q = newQueue(10)
	running = addTake(t, q, qjob(t, "a", SourcePostStart, true))
	stop := qjob(t, "b", SourceStop, true)
	q.add(stop)
	q.close()
	q.abandon()
	if _, _, ok := q.take(2); ok {
		t.Error("a job taken after abandon")
	}
	if !closed(stop.h) {
		t.Error("an abandoned stop's handle left open")
	}
	q.done(running, inTime)
}

// addTake queues j and takes it, the queue's only job.
func addTake(t *testing.T, q *queue, j job) job {
	t.Helper()
	if !q.add(j) {
		t.Fatal("job not added")
	}
	got, _, ok := q.take(2)
	if !ok || got.meta.SandboxID != j.meta.SandboxID {
		t.Fatalf("took %+v (%v), want %q's job", got.meta, ok, j.meta.SandboxID)
	}
	return got
}
