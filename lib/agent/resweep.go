package agent

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

// The re-sweep. Legacy x_tables tell nobody of a change (nftables commits
// are heard only with the watch on, see watch.go), so a pod that writes
// legacy rules after its containers started is seen only by a later look.
// Every ResweepInterval the agent looks at each sandbox it knows again (in
// node mode the node's namespace too), but scans only those whose rules
// may have changed since their last complete scan: the namespace's
// nftables generation and legacy fingerprint (inspect.State) that scan's
// look read (the generation it began with, the legacy tables it read)
// differ from now, or its last scan did not complete (a finding of state
// unknown, a netns it could not read). Reading a State is a netlink round
// trip plus, with legacy tables listed, one copy of each (no process, no
// parse), so a re-sweep of hundreds of unchanged pods costs next to
// nothing. The scans it wants go through the one fair queue, as a sweep's
// do. Every scan notes its State (noteScan), the watch's too: a pod the
// watch just scanned is skipped, and one whose re-sweep scan waits has the
// watch's folded into it (queue.put).

// DefaultResweepInterval is the time between re-sweeps: legacy rules a pod
// writes after its start are found within it. Ten minutes costs a node of
// 250 unchanged pods about 28 ms of CPU per re-sweep (make bench), 0.2 s an
// hour; it is under the 15 minutes the CRI fallback sweeps at, and short
// against how long a pod that sets up rules at runtime keeps them.
const DefaultResweepInterval = 10 * time.Minute

// StageResweep is the stage of a re-sweep's scans (source "sweep").
const StageResweep = "Resweep"

// maxKnown bounds the sandboxes remembered: sandbox ids come from the
// runtime, one per pod ever started, and a stop may be missed while
// disconnected. Past it a new sandbox is not remembered (its events' scans
// still run; no sweep's, and the re-sweep does not look at it) until a
// sweep lists the pods anew.
const maxKnown = 4096

// ResweepObserver hears about each re-sweep and each CRI sweep: an
// Observer that implements it is told what was skipped. (An optional
// interface, so Observers that do not count re-sweeps need not change.)
type ResweepObserver interface {
	Resweeped(Resweep)
}

// Resweep is the report of one re-sweep (Stage StageResweep) or CRI sweep
// (StageCRI): of Known sandboxes, Skipped were unchanged since their last
// complete scan, Queued were not (or their state could not be read), Gone
// had no netns left and were forgotten, Busy were left for the next look:
// the host-wide x_tables mutex was held (see nextResweep).
type Resweep struct {
	Stage                              string
	Known, Skipped, Queued, Gone, Busy int
	Duration                           time.Duration
	// Blind is set on the re-sweep that found the mutex held for an
	// interval of re-sweeps (see sandboxes.noteBusy): the word is taken
	// back until one gets past it. Told once, not at each re-sweep.
	Blind bool
}

// sandbox is what the agent remembers of a running sandbox: what to queue
// for it, and the State its last complete scan read.
type sandbox struct {
	meta  scan.Meta
	state inspect.State
	// complete is set when state is that of a complete scan; never for a
	// scan that was truncated, unknown, or whose State could not be read,
	// nor for one that began before the sandbox's latest event.
	complete bool
	// events counts what may have changed the sandbox's rules unseen
	// since it became known (a container's start, a fresh list), from 1:
	// a scan notes it as it begins (begin), and its look counts as
	// complete only if none came after (scanned). A scan that began
	// before a container started read the rules from before the
	// container's init wrote any.
	events uint64
	// looked is set once a scan of the sandbox ended, complete or not.
	looked bool
}

// sandboxes is the set of known sandboxes; its methods may be called
// concurrently.
type sandboxes struct {
	mu sync.Mutex
	m  map[string]*sandbox
	// node is the node's namespace in node mode (key nodeKey), nil
	// otherwise: re-swept as a sandbox is, but never listed by a sweep,
	// never stopped nor forgotten. Its legacy rules tell nobody either.
	node *sandbox
	// listed: a sweep listed the runtime's pods since the connection was
	// last lost (unlist). overflow: a sandbox was not remembered
	// (maxKnown) since that sweep. unseen: the sandboxes the runtime says
	// run whose netns a scan could not open (see markUnseen). lastLook:
	// when a scan last completed, or a sweep listed the pods. All for
	// everyLooked.
	listed, overflow bool
	unseen           map[string]bool
	lastLook         time.Time
	// busySince is when the re-sweeps began to find the x_tables
	// mutex held, each one since (zero when the last got past it);
	// legacyBlind once that lasted a re-sweep interval (noteBusy).
	busySince   time.Time
	legacyBlind bool
}

// get is the sandbox remembered under id, nil when none.
func (k *sandboxes) get(id string) *sandbox {
	if id == nodeKey {
		return k.node
	}
	return k.m[id]
}

// watchNode remembers the node's namespace, m being its watch's meta.
func (k *sandboxes) watchNode(m scan.Meta) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.node = &sandbox{meta: podMeta(m, StageResweep), events: 1}
}

func newSandboxes() *sandboxes {
	return &sandboxes{m: map[string]*sandbox{}, unseen: map[string]bool{}}
}

// podMeta is m as a re-sweep's scan of the whole pod records it: no
// container, source sweep.
func podMeta(m scan.Meta, stage string) scan.Meta {
	m.Source, m.Stage = SourceSweep, stage
	m.ContainerID, m.Container, m.Image = "", "", ""
	return m
}

// list makes the listed sandboxes the known ones: a sweep lists every pod
// that runs. What is remembered of those listed before stays, except,
// when fresh (NRI's Synchronize), that their last scans were complete:
// Synchronize follows a (re)connection, and while the agent was not
// connected a container may have restarted and written rules, so each
// listed pod needs a scan after this list (the sweep queues one) before
// the word vouches for it again. The CRI fallback's list (not fresh)
// keeps them: it sees no container start at any time, and skips the pods
// whose State is unchanged since their last complete scan.
//
// unread are the pods the runtime lists whose netns path could not be
// read (a CRI status that failed): not looked at, so unseen, marked under
// the same lock as the list is taken, or the word would vouch for them
// while the sweep reads the others' States.
func (k *sandboxes) list(metas []scan.Meta, unread []string, fresh bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	m := make(map[string]*sandbox, len(metas))
	k.listed, k.overflow, k.lastLook = true, len(metas) > maxKnown, time.Now()
	listed := make(map[string]bool, len(metas))
	for _, meta := range metas {
		listed[meta.SandboxID] = true
	}
	// A pod the runtime no longer lists stopped: not unseen any more.
	for id := range k.unseen {
		if !listed[id] {
			delete(k.unseen, id)
		}
	}
	for _, id := range unread {
		k.unseenLocked(id)
	}
	for _, meta := range metas {
		if len(m) >= maxKnown {
			break
		}
		s := k.m[meta.SandboxID]
		if s == nil {
			s = &sandbox{events: 1}
		}
		s.meta = podMeta(meta, StageResweep)
		if fresh {
			s.event()
		}
		m[meta.SandboxID] = s
	}
	k.m = m
}

// add remembers a sandbox an event named (a pod started since the sweep).
func (k *sandboxes) add(meta scan.Meta) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if s := k.get(meta.SandboxID); s != nil {
		s.meta = podMeta(meta, StageResweep)
		return
	}
	if len(k.m) >= maxKnown {
		k.overflow = true
		return
	}
	k.m[meta.SandboxID] = &sandbox{meta: podMeta(meta, StageResweep), events: 1}
}

// touch notes an event of a known sandbox that may change its rules (a
// container started): its last scan no longer vouches for it, nor does
// one running now (see sandbox.events), until a scan begun after it
// completes.
func (k *sandboxes) touch(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if s := k.get(id); s != nil {
		s.event()
	}
}

func (s *sandbox) event() {
	s.complete = false
	s.events++
}

// begin is what a scan of the sandbox beginning now notes, for scanned:
// its events so far, 0 when it is not known.
func (k *sandboxes) begin(id string) uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	if s := k.get(id); s != nil {
		return s.events
	}
	return 0
}

// unlist notes the connection to the runtime lost: until the next sweep,
// pods may start and stop unseen.
func (k *sandboxes) unlist() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.listed = false
}

// everyLooked tells whether every pod the runtime runs has been looked
// at, how many, and since when every finding the look rests on was
// written (the last complete scan, or the sweep's list, clamped to now: a
// clock set back must not date it ahead): a sweep listed them since the
// connection was last lost, none was left out (maxKnown), none is unseen
// (markUnseen), and each one's last scan, and each one an event named
// since, completed with its finding written (see noteScan); in node mode,
// the node's netns's too.
func (k *sandboxes) everyLooked() (pods int, since time.Time, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	// In node mode, the node's own netns is looked at too.
	if !k.listed || k.overflow || k.legacyBlind || len(k.unseen) > 0 || k.node != nil && !k.node.complete {
		return 0, time.Time{}, false
	}
	for _, s := range k.m {
		if !s.complete {
			return 0, time.Time{}, false
		}
	}
	if now := time.Now(); k.lastLook.After(now) {
		k.lastLook = now
	}
	return len(k.m), k.lastLook, true
}

// noteBusy notes whether the re-sweep that began at start found the
// x_tables mutex held, and tells whether the re-sweeps are now blind to
// legacy tables. Nothing but a re-sweep (and the exec watch) sees a
// legacy write: while a process holding the mutex (a pod reading a huge
// legacy table in a loop, say) keeps every re-sweep from reading the
// pods behind it, their last complete scans grow old unseen. A re-sweep
// interval of that, and the word is taken back until one gets past. It
// tells whether the re-sweeps became blind at this one.
func (k *sandboxes) noteBusy(busy bool, start time.Time, interval time.Duration) (became bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case !busy:
		k.busySince, k.legacyBlind = time.Time{}, false
	case k.busySince.IsZero():
		k.busySince = start
	case start.Sub(k.busySince) >= interval && !k.legacyBlind:
		k.legacyBlind = true
		return true
	}
	return false
}

// has tells whether the sandbox is known (not stopped, not forgotten).
func (k *sandboxes) has(id string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.get(id) != nil
}

// forget drops a sandbox whose netns was found gone (a container's stop,
// the watch): an unseen one stays unseen, since a netns the agent cannot
// see is gone to it too. Only the runtime's word ends it (ended).
func (k *sandboxes) forget(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, id)
}

// ended forgets a sandbox the runtime said stopped (its pod's stop
// scanned, its removal heard), unseen or not.
func (k *sandboxes) ended(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, id)
	delete(k.unseen, id)
}

// markUnseen notes a known sandbox whose netns a scan could not open
// (unreachable, failed): nobody looked at it. Kept until a scan opens its
// netns, the runtime says it stopped, or a sweep no longer lists it; a
// sandbox ended meanwhile (its stop raced the scan) is not marked. It is
// scanned again at the next re-sweep, not skipped as unchanged: a passing
// failure (a descriptor limit) must not keep it unseen for the pod's
// life.
func (k *sandboxes) markUnseen(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.m[id]
	if s == nil {
		return
	}
	s.complete = false
	k.unseenLocked(id)
}

// vanish forgets a known sandbox whose netns path is gone from the
// agent's view at a re-sweep, and marks it unseen: its stop missed while
// disconnected, or its netns out of reach. False when it ended meanwhile.
func (k *sandboxes) vanish(id string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m[id] == nil {
		return false
	}
	delete(k.m, id)
	k.unseenLocked(id)
	return true
}

// blind tells whether a pod the runtime runs is out of the agent's reach
// (unseen), was left out (overflow), or the pods' legacy tables are
// (legacyBlind), and whether the node's netns is watched (node mode).
func (k *sandboxes) blind() (blind, node bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.unseen) > 0 || k.overflow || k.legacyBlind, k.node != nil
}

func (k *sandboxes) unseenLocked(id string) {
	if len(k.unseen) >= maxKnown {
		k.overflow = true
		return
	}
	k.unseen[id] = true
}

// scanned notes the State a scan of the sandbox read, and whether
// that scan completed: only then may a later look skip it, and only if
// no event came since the scan began (began, from begin).
func (k *sandboxes) scanned(id string, st inspect.State, complete bool, began uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.unseen, id)
	if s := k.get(id); s != nil {
		complete = complete && s.events == began
		s.state, s.complete, s.looked = st, complete, true
		if complete {
			k.lastLook = time.Now()
		}
	}
}

// looked tells whether a scan of the sandbox ended since it became known.
func (k *sandboxes) looked(id string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.get(id)
	return s != nil && s.looked
}

// unchanged tells whether the sandbox's last scan completed from State st.
func (k *sandboxes) unchanged(id string, st inspect.State) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.get(id)
	return s != nil && s.complete && s.state == st
}

// all is the known sandboxes' metas, the node's last.
func (k *sandboxes) all() []scan.Meta {
	k.mu.Lock()
	defer k.mu.Unlock()
	metas := make([]scan.Meta, 0, len(k.m)+1)
	for _, s := range k.m {
		metas = append(metas, s.meta)
	}
	if k.node != nil {
		metas = append(metas, k.node.meta)
	}
	return metas
}

// withResweep runs loop with the re-sweep running beside it every
// ResweepInterval (none for 0), sooner after one that backed off or when
// asked (resweepSoon), and returns once both ended.
func (a *Agent) withResweep(ctx context.Context, loop func() error) error {
	if a.cfg.ResweepInterval <= 0 {
		return loop()
	}
	return beside(ctx, loop, func(ctx context.Context) {
		t := time.NewTimer(a.cfg.ResweepInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-a.resweepNow:
			}
			t.Reset(nextResweep(a.cfg.ResweepInterval, a.resweep(ctx).Busy > 0))
		}
	})
}

// beside runs loop with side in a goroutine of its own, whose ctx ends
// when loop returns, and returns once both ended.
func beside(ctx context.Context, loop func() error, side func(context.Context)) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		side(ctx)
	}()
	defer wg.Wait()
	defer cancel()
	return loop()
}

// resweepSoon asks for a re-sweep now, the interval counted again after
// it; false when the re-sweep is off. Asked again before it ran, it runs
// once. It never waits.
func (a *Agent) resweepSoon() bool {
	if a.cfg.ResweepInterval <= 0 {
		return false
	}
	select {
	case a.resweepNow <- struct{}{}:
	default:
	}
	return true
}

// nextResweep is the wait before the next re-sweep, after one that found
// the x_tables mutex busy (or not): the pods it left are looked at again
// after an eighth of the interval. A mutex that stays busy costs one
// State read an eighth (it fails at once while an abandoned read is still
// blocked, see inspect.ReadState), never a scan of every pod.
func nextResweep(interval time.Duration, busy bool) time.Duration {
	if !busy {
		return interval
	}
	return max(interval/8, time.Second)
}

// verdict is what a look at a sandbox's State says to do with it.
type verdict int

const (
	// skip: unchanged since its last complete scan.
	skip verdict = iota
	// rescan: changed, never scanned whole, or its State unreadable.
	rescan
	// vanished: its netns no longer exists; its pod stopped unseen
	// (while disconnected, say).
	vanished
	// busy: its State could not be read because the host-wide x_tables
	// mutex is held. A scan now would read no legacy table either: the
	// look is left for later (nextResweep), and so are the sandboxes after
	// it in the same re-sweep, whose reads would meet the same wall.
	busy
)

// resweep looks at every known sandbox once and queues a scan of those
// that changed or whose last scan did not complete; what it could not
// look at for the x_tables mutex is in Resweep.Busy.
func (a *Agent) resweep(ctx context.Context) Resweep {
	start := time.Now()
	r := Resweep{Stage: StageResweep}
	var jobs []job
	wall := false
	for _, m := range a.known.all() {
		if ctx.Err() != nil {
			closeAll(jobs)
			return r
		}
		r.Known++
		if wall {
			r.Busy++
			continue
		}
		j, v := a.changed(ctx, job{meta: m})
		switch v {
		case vanished:
			// Its stop missed while disconnected, or its netns out
			// of the agent's view: unseen until the runtime says. The
			// CRI fallback hears of no stop, and every pod deleted
			// would take the word back until its next list: it lists
			// now.
			if a.known.vanish(m.SandboxID) {
				a.stopped(m.SandboxID)
				a.listSoon()
			}
			r.Gone++
		case rescan:
			jobs = append(jobs, j)
		case busy:
			r.Busy++
			wall = true
		default:
			r.Skipped++
		}
	}
	r.Queued = len(jobs)
	a.queue.more(jobs)
	r.Duration = time.Since(start)
	r.Blind = a.known.noteBusy(r.Busy > 0, start, a.cfg.ResweepInterval)
	a.resweeped(r)
	return r
}

// changed reads the State of j's namespace and says what to do with j:
// queue it when its rules may have changed since its last complete scan,
// or there was none, or its State cannot be read for any reason but a busy
// x_tables mutex. A job to queue is given the open handle. The node's
// namespace never vanishes: gone, it is scanned, and the scan reports why.
func (a *Agent) changed(ctx context.Context, j job) (job, verdict) {
	h, err := netns.Open(j.meta.Netns)
	if (errors.Is(err, netns.ErrNotExist) || errors.Is(err, netns.ErrNotNetns)) && !isNodeJob(j.meta) {
		return j, vanished
	}
	if err != nil {
		// The scan opens it again and reports why it cannot.
		return j, rescan
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.ScanTimeout)
	st, err := inspect.ReadState(ctx, h)
	cancel()
	switch {
	case err == nil && a.known.unchanged(j.meta.SandboxID, st):
		h.Close()
		return j, skip
	case errors.Is(err, inspect.ErrLegacyBusy):
		h.Close()
		return j, busy
	}
	j.h = h
	return j, rescan
}

// sweepChanged is sweep for the CRI fallback: every listed pod stays
// known and followed, but only those changed since their last complete
// scan are queued; unread are listed pods whose netns path could not be
// read.
func (a *Agent) sweepChanged(ctx context.Context, jobs []job, unread []string, pods int) {
	start := time.Now()
	metas := make([]scan.Meta, len(jobs))
	listed := make(map[string]bool, len(jobs))
	for i, j := range jobs {
		metas[i] = j.meta
		listed[j.meta.SandboxID] = true
	}
	a.known.list(metas, unread, false)
	a.usage.Listed(listed)
	r := Resweep{Stage: StageCRI, Known: len(jobs)}
	var queued []job
	for _, j := range jobs {
		if ctx.Err() != nil {
			closeAll(queued)
			return
		}
		// A pod gone since the list is scanned, and reported gone or
		// unreachable as a sweep's scan always was. One whose State the
		// busy x_tables mutex hides is scanned only if never looked at:
		// a pod nobody saw is looked at, even partly; the others wait
		// for the next sweep.
		j, v := a.changed(ctx, j)
		switch {
		case v == busy && a.known.looked(j.meta.SandboxID):
			r.Busy++
		case v != skip:
			queued = append(queued, j)
		default:
			r.Skipped++
		}
	}
	r.Queued = len(queued)
	a.queue.sweep(queued, func(n int) { a.synced(pods, n) })
	r.Duration = time.Since(start)
	a.resweeped(r)
}

func (a *Agent) resweeped(r Resweep) {
	a.metrics.resweeped(r)
	if o, ok := a.cfg.Observer.(ResweepObserver); ok {
		o.Resweeped(r)
	}
}

func closeAll(jobs []job) {
	for _, j := range jobs {
		if j.h != nil {
			j.h.Close()
		}
	}
}

// noteScan remembers what a scan of the sandbox started from: the State
// read before it (ok: read), kept as the one to compare with only when the
// scan completed and its finding, if any, was stored, and no event came
// since it began (began, see sandboxes.begin). A finding over the
// sandbox's limit was not: noted, every later look would skip the usage
// it dropped (without the watch, nothing else looks again).
func (a *Agent) noteScan(s Scan, st inspect.State, ok, complete bool, began uint64) {
	switch s.Outcome {
	case Clean:
		// With an error (the memory could not be read: a usage recorded
		// before may stand) the next re-sweep looks again.
		complete = complete && s.Err == nil
	case Found:
		complete = complete && s.Stored != findings.Failed && s.Stored != findings.Limited
	default:
		complete = false
	}
	a.known.scanned(s.Meta.SandboxID, st, ok && complete, began)
}
