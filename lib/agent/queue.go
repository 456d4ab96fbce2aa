package agent

import (
	"sync"

	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

// queue is the agent's one queue of scans, fed by the runtime's events and
// the sweeps, and fair to every sandbox: a crash-looping pod whose scans
// take the whole deadline must not starve the others (issue 18).
//
//   - One scan per sandbox waits or runs at a time. A new event for a
//     sandbox with a scan waiting replaces that scan's job (the scan, not
//     run yet, will see the latest rules); for a sandbox being scanned it
//     waits as its next scan, queued when the running one ends. So a
//     sandbox is never scanned twice at once, and its events never queue
//     more than one scan.
//   - First in, first out across sandboxes, the sweep's jobs in the same
//     line as the events': a sandbox scanned again goes behind everything
//     queued meanwhile, and every queued scan runs after at most one scan
//     of each sandbox queued before it.
//   - Events' jobs are bounded (max); past it an event's scan is dropped,
//     never waited for. A sweep's jobs are bounded by the pods listed.
//   - A sandbox whose last scan ran to its deadline is heavy. Heavy scans
//     and stops given the longer deadline hold at most workers-1 workers
//     (one with a single worker): a worker that may not start a heavy
//     scan takes the oldest job of a sandbox that is not heavy. Without
//     it, two crash-looping pods whose every scan takes the whole
//     deadline held both default workers, and another pod's event waited
//     up to that deadline for its turn.
type queue struct {
	mu   sync.Mutex
	cond *sync.Cond
	// order holds the sandboxes whose next job waits for a worker, oldest
	// first; slots has every sandbox with a job waiting or running.
	order  []string
	slots  map[string]*slot
	events int // waiting jobs from events, bounded by max
	max    int
	// long counts the running scans given the stop's longer deadline.
	long int
	// heavy holds the sandboxes whose last scan ran to its deadline, until
	// one ends in time or the pod stops (at most maxHeavy); hogs counts the
	// running scans that are heavy or long.
	heavy  map[string]bool
	hogs   int
	closed bool
}

// maxHeavy bounds the heavy sandboxes remembered: a pod whose stop the
// agent never saw would stay in the map. Past it the map starts again; a
// heavy pod forgotten is heavy again after its next scan.
const maxHeavy = 4096

// scanEnd is how a job's turn ended, as the queue remembers it.
type scanEnd int

const (
	// notScanned: the job was not run (no longer wanted).
	notScanned scanEnd = iota
	// inTime: the scan ended before its deadline.
	inTime
	// ranOut: the scan ran to its deadline.
	ranOut
)

// slot is one sandbox's place: the job waiting, if any, and whether a scan
// of it runs.
type slot struct {
	next    *job
	running bool
	long    bool
	heavy   bool
}

func newQueue(max int) *queue {
	q := &queue{slots: map[string]*slot{}, max: max, heavy: map[string]bool{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// merged folds the newer job j into the waiting one. A stop stays a stop:
// it is the last look at the container, and it may have the longer
// deadline. The pod's stop stays the pod's, a container's stop coming
// after it too: its stage ends the pod (Agent.scanned). A container's
// event stays that event when the watch's job joins it: the finding then
// still names the container (the watch's job names none) and carries the
// watch's writer. Otherwise the newer job's meta wins, and its writer if
// it has one. One handle is enough, the sandbox having one netns for its
// whole life: the older is closed.
func merged(old, j job) job {
	switch {
	case old.meta.Source == SourceStop && (j.meta.Source != SourceStop || old.meta.Stage == stageStopPod):
		j.meta = old.meta
	case j.meta.Source == SourceWatch && old.meta.Source != SourceWatch && old.meta.ContainerID != "":
		j.meta = old.meta
	}
	// The newest writer the watch saw, whichever job brought it.
	if j.writer == nil {
		j.writer = old.writer
	}
	// Likewise the newest command the exec watch saw.
	if j.exec == nil {
		j.exec = old.exec
	}
	switch {
	case j.h == nil:
		j.h = old.h
	case old.h != nil:
		old.h.Close()
	}
	return j
}

func isEvent(j *job) bool { return j != nil && j.meta.Source != SourceSweep }

// oldSweep tells whether a new sweep replaces j: an earlier sweep's or
// re-sweep's job of a pod, which the new sweep queues again if it still
// runs. Not the node's re-sweep job: no sweep lists the node.
func oldSweep(j *job) bool {
	return j != nil && j.meta.Source == SourceSweep && !isNodeJob(j.meta)
}

// join folds meta into the sandbox's waiting job when that job holds an open
// netns already, so the handler need not open another; false when there is
// none such (nothing waits, or only a sweep's job, which opens at its scan).
func (q *queue) join(m scan.Meta) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.slots[m.SandboxID]
	if q.closed || s == nil || s.next == nil || s.next.h == nil {
		return false
	}
	j := merged(*s.next, job{meta: m})
	q.set(s, &j)
	return true
}

// add queues an event's job; false when it was dropped (the queue is full,
// or the agent stopping), its handle then left to the caller to close.
func (q *queue) add(j job) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	s := q.slots[j.meta.SandboxID]
	if (s == nil || s.next == nil) && q.events >= q.max {
		return false
	}
	q.put(j)
	return true
}

// sweep queues a sweep's jobs behind those waiting, in place of what is
// left of the previous sweep (which listed the pods of an older moment). A
// sandbox with an event's job waiting needs no sweep job: that scan, not
// run yet, will see the latest rules. synced hears how many sweep jobs
// were queued, before any can be taken.
func (q *queue) sweep(jobs []job, synced func(queued int)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		synced(0)
		return
	}
	kept := q.order[:0]
	for _, id := range q.order {
		if s := q.slots[id]; oldSweep(s.next) {
			q.drop(id, s)
			continue
		}
		kept = append(kept, id)
	}
	q.order = kept
	for id, s := range q.slots {
		// The old sweep's next scan of a sandbox being scanned.
		if s.running && oldSweep(s.next) {
			q.drop(id, s)
		}
	}
	queued := 0
	for _, j := range jobs {
		if s := q.slots[j.meta.SandboxID]; s != nil && isEvent(s.next) {
			continue
		}
		q.put(j)
		queued++
	}
	synced(queued)
}

// more queues a re-sweep's jobs behind those waiting, leaving the sweep's
// in place: a sandbox with any job waiting needs none, that scan, not run
// yet, will see the latest rules. A job not queued has its handle closed.
func (q *queue) more(jobs []job) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, j := range jobs {
		if s := q.slots[j.meta.SandboxID]; q.closed || (s != nil && s.next != nil) {
			if j.h != nil {
				j.h.Close()
			}
			continue
		}
		q.put(j)
	}
}

// put queues j, folded into the sandbox's waiting job if there is one.
func (q *queue) put(j job) {
	s := q.slots[j.meta.SandboxID]
	if s == nil {
		s = &slot{}
		q.slots[j.meta.SandboxID] = s
	}
	if s.next != nil {
		j = merged(*s.next, j)
		q.set(s, &j)
		return
	}
	q.set(s, &j)
	if !s.running {
		q.order = append(q.order, j.meta.SandboxID)
		q.cond.Signal()
	}
}

// set makes j (nil: none) the sandbox's waiting job, keeping the events'
// count.
func (q *queue) set(s *slot, j *job) {
	if isEvent(s.next) {
		q.events--
	}
	s.next = j
	if isEvent(s.next) {
		q.events++
	}
}

// drop forgets the sandbox's waiting job, and the sandbox unless a scan of
// it runs.
func (q *queue) drop(id string, s *slot) {
	if s.next.h != nil {
		s.next.h.Close()
	}
	q.set(s, nil)
	if !s.running {
		delete(q.slots, id)
	}
}

// take waits for the oldest waiting job it may start (see next) and
// marks its sandbox running; false once the queue is closed. long is
// whether the scan may take the stop's longer deadline: a stop, with no
// other job waiting, and a worker other than this one left for whatever
// comes meanwhile (at most workers-1 such scans run at once).
func (q *queue) take(workers int) (j job, long, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	i := -1
	for {
		if i = q.next(workers); i >= 0 {
			break
		}
		if q.closed && len(q.order) == 0 {
			return job{}, false, false
		}
		q.cond.Wait()
	}
	id := q.order[i]
	q.order = append(q.order[:i], q.order[i+1:]...)
	s := q.slots[id]
	j = *s.next
	q.set(s, nil)
	s.running = true
	// Not while the agent stops: its stops left get drainWait in all.
	s.long = j.meta.Source == SourceStop && len(q.order) == 0 && q.long < workers-1 && !q.closed
	if s.long {
		q.long++
	}
	s.heavy = q.heavy[id]
	if s.heavy || s.long {
		q.hogs++
	}
	return j, s.long, true
}

// next is the index in order of the job a worker may start, -1 for none:
// the oldest, unless heavy or long scans already run on every worker but
// one (and the queue is open), then the oldest of a sandbox that is not
// heavy.
func (q *queue) next(workers int) int {
	if len(q.order) == 0 {
		return -1
	}
	// Closed, no event can come that a free worker would be kept for,
	// and a stop held back for one may be abandoned (drainStops).
	if q.hogs < max(workers-1, 1) || q.closed {
		return 0
	}
	for i, id := range q.order {
		if !q.heavy[id] {
			return i
		}
	}
	return -1
}

// done ends the sandbox's running scan, queuing its next job (events that
// came during the scan) at the back of the line, and remembers whether the
// sandbox is heavy. idle: nothing waits or runs any more.
func (q *queue) done(j job, end scanEnd) (idle bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	id := j.meta.SandboxID
	s := q.slots[id]
	if s.long {
		q.long--
	}
	if s.heavy || s.long {
		q.hogs--
		// A worker waiting while only heavy jobs wait may take one now.
		q.cond.Broadcast()
	}
	switch {
	case j.meta.Stage == stageStopPod:
		// The pod's last scan.
		delete(q.heavy, id)
	case end == ranOut:
		if len(q.heavy) >= maxHeavy {
			clear(q.heavy)
		}
		q.heavy[id] = true
	case end == inTime:
		delete(q.heavy, id)
	}
	s.running, s.long, s.heavy = false, false, false
	if s.next == nil {
		delete(q.slots, id)
		return len(q.slots) == 0
	}
	// Closed, only a stop can be waiting: it runs too (close).
	q.order = append(q.order, id)
	q.cond.Signal()
	return false
}

// forget drops the sandbox's heaviness: its pod stopped, or is gone.
func (q *queue) forget(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.heavy, id)
}

// close takes no more jobs, and drops the waiting ones but the stops:
// a stop is the last look at a container going away, its netns held open
// since the event, and the agent started again would not find the pod to
// sweep (the pods still running it sweeps, so their other jobs can go).
// take hands out the stops left, then returns false. The agent gives
// them drainWait, then abandons the rest.
func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.dropWaiting(func(j *job) bool { return j.meta.Source == SourceStop })
}

// abandon drops every waiting job, the stops too: the agent's stop ran
// out of time (drainWait). The scans running still end.
func (q *queue) abandon() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.dropWaiting(func(*job) bool { return false })
}

// dropWaiting drops the waiting jobs keep does not keep, closing their
// handles, and wakes the workers: one waiting may now have nothing left.
func (q *queue) dropWaiting(keep func(*job) bool) {
	for id, s := range q.slots {
		if s.next == nil || keep(s.next) {
			continue
		}
		q.drop(id, s)
	}
	kept := q.order[:0]
	for _, id := range q.order {
		if s := q.slots[id]; s != nil && s.next != nil {
			kept = append(kept, id)
		}
	}
	q.order = kept
	q.cond.Broadcast()
}
