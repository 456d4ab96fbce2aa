package agent

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
	"github.com/iptables-alerter/iptables-alerter/lib/watch"
)

// The watch (Config.Watch): from the moment the agent knows a pod sandbox
// until it stops, a monitor in its netns hears every nftables commit
// (lib/watch). A commit touching an iptables-shaped table queues a scan,
// one per debounce window whatever the commit rate, through the one fair
// queue; the record names the committing process (Record.Writer).

// SourceWatch is the source of the watch's scans.
const SourceWatch = "watch"

// Stages of the watch's scans: what made it look.
const (
	stageCommit = "nftables commit"
	// stageOverrun: the kernel dropped announcements; a full scan stands
	// in for whatever they said.
	stageOverrun = "overrun"
	// stageReopen: the monitor's socket failed and was reopened, or its
	// first open came after a scan looked without it (lookedFirst);
	// changes made meanwhile are not known.
	stageReopen = "watch reopened"
	// stageLimit: the sandbox wrote its limit of findings; the interval
	// over, its newest usage is recorded.
	stageLimit = "limit window"
	// stageDoubt: a cut look after the sandbox's gone passed; the one a
	// gap later decides (doubted).
	stageDoubt = "cut look after gone"
)

// DefaultWatchDebounce gathers a burst of commits into one scan: a tool's
// burst (iptables-nft-restore commits each table on its own) ends well
// within it. The window is most of a rule's time to its finding: p50
// 58 ms, p99 70 ms at 250 watched pods, against 208 and 229 ms with
// 200 ms (make bench; issue 19's goal is a p99 of 100 ms). What the
// shorter window costs: a pod rewriting its rules without pause gets one
// scan per window still, 20 a second (19% of one CPU for a 1000-rule pod,
// 6% with 200 ms), and a setup script longer than the window records a
// partial finding before the whole one (20 iptables-nft commands, 36 ms:
// 2 findings, 1 with 200 ms).
const DefaultWatchDebounce = 50 * time.Millisecond

// maxPending bounds the commits a window keeps writers of: a pod
// committing in a flood holds a few, the newest ones.
const maxPending = 8

// pendingWriter is one commit the watch heard, in the window still open
// or in one that ended (fired) since the sandbox's last scan ended.
type pendingWriter struct {
	gen    uint32
	writer *findings.Writer
	fired  bool
}

// costFactor sets a window's length by what reading the sandbox costs: a
// sandbox whose last scan took the debounce or longer waits costFactor
// times that scan, so its watch scans take about a tenth of a worker (at
// most half, for a scan just under the debounce). A pod chooses its
// ruleset's size (rules of no iptables table, not usage, are read all the
// same) and how often it commits: 200,000 rules and a commit every 10 ms
// kept a worker, a core, scanning it for good at one scan per debounce
// window. A scan shorter than the debounce (a few ms at 1,000 rules,
// more under load) leaves the window as it is, and the rule-to-finding
// latency with it; maxWindow bounds what a scan cut off at a long
// deadline sets.
const (
	costFactor = 10
	maxWindow  = 5 * time.Minute
)

// maxOpening bounds the monitors being opened at once: each open switches
// a locked thread into the pod's netns, and a Synchronize lists every pod.
const maxOpening = 4

// watches holds the watched sandboxes and the containers the runtime told
// of, to name a writer's container.
type watches struct {
	mu   sync.Mutex
	pods map[string]*watched
	ctrs map[string]ctrInfo
	// closed: the agent stopped; nothing more is watched.
	closed bool
	// node is the node's watch (node.go), apart from the pods': no
	// runtime list ends it.
	node    *watched
	opening chan struct{}
	wg      sync.WaitGroup
	// failed are the sandboxes whose watch could not be opened
	// (watchFailed), up to maxKnown: the next complete scan watches
	// them again (rewatch), and no other; a sandbox never watched (the
	// CRI fallback's) is not watched by a scan.
	failed map[string]bool
	// nodeRetry is the wait before the node's watch is opened again
	// after its open failed (retryNodeWatch), 0 once it opens.
	nodeRetry time.Duration
}

// The waits before the node's watch is opened again, doubling (vars:
// tests shorten them).
var (
	minNodeRetry = 10 * time.Second
	maxNodeRetry = 5 * time.Minute
)

type ctrInfo struct {
	name    string
	sandbox string
	pod     findings.Pod
}

// watched is one sandbox's watch.
type watched struct {
	meta scan.Meta
	// ino is the netns's inode once a monitor opened it: the exec watch
	// places a command by it (exec.go).
	ino atomic.Uint64
	// node: the node's own netns (node.go).
	node bool
	done chan struct{}
	// ready is closed once the first monitor is open (or could not be),
	// under mu.
	ready chan struct{}

	mu sync.Mutex
	// lookedFirst: a scan looked at the sandbox before its first monitor
	// opened (a watch made again after one failed, rewatch; a scan whose
	// wait for the open ran out, watchOpened). A commit between the two
	// was heard by nobody: the open queues a scan (stageReopen), and
	// later scans need not wait for the open.
	lookedFirst bool
	// mon is the open monitor: whoever takes it out closes it (stop, or
	// a reopen), and a monitor opened after the stop is closed by its
	// opener.
	mon *watch.Monitor
	// ended makes the watch's end (dropWatch, the WaitGroup) happen once.
	ended sync.Once
	// writer and stage are for the next scan: the newest writer seen, and
	// why it looks (an overrun or reopen wins over a commit).
	writer *findings.Writer
	stage  string
	armed  bool
	// pending are the window's commits with their writers, newest last, at
	// most maxPending: a start or stop scan that saw one names its writer
	// (writerOf). A window's end marks its commits fired instead of
	// dropping them: a scan running then may have read them, and the
	// watch's own scan, queued behind it, would only find the same usage
	// and record nothing. The end of the sandbox's next scan that saw
	// them drops them: any scan taken after the window's end either
	// carries its writer (merged with the watch's job) or follows the
	// watch's own scan. Where the watch's job was dropped (the queue
	// full), they stay until a scan that saw them ends, the newest commits
	// heard and not yet recorded: that scan names them. An overrun, or a
	// socket reopened, drops them all: what was committed since is not
	// known.
	pending []pendingWriter
	// retry is the scan at the end of a limited interval (see limited).
	retry *time.Timer
	// cost is how long the sandbox's last scan's nftables read took
	// (window), took the whole scan; heldExec is the scan of the latest
	// legacy write held back while took is the window or more
	// (scanAfterExec).
	cost, took time.Duration
	heldExec   *job
	// shapes are the commands' own records the exec watch made (exec.go),
	// its goroutine's only.
	shapes shapes
}

func newWatches() *watches {
	return &watches{pods: map[string]*watched{}, ctrs: map[string]ctrInfo{}, opening: make(chan struct{}, maxOpening), failed: map[string]bool{}}
}

// The watch's NRI events, besides Synchronize and the container events
// the scans use.
var (
	_ stub.RunPodInterface          = (*Agent)(nil)
	_ stub.RemovePodInterface       = (*Agent)(nil)
	_ stub.StartContainerInterface  = (*Agent)(nil)
	_ stub.RemoveContainerInterface = (*Agent)(nil)
)

// RunPodSandbox: the sandbox and its netns exist, no container runs yet:
// the watch starts before any of them can write.
func (a *Agent) RunPodSandbox(_ context.Context, p *api.PodSandbox) error {
	defer a.handled("RunPodSandbox", time.Now())
	a.watchPod(p)
	return nil
}

// RemovePodSandbox: the sandbox is gone; its watch, if StopPodSandbox did
// not end it, ends, and the re-sweep forgets it.
func (a *Agent) RemovePodSandbox(_ context.Context, p *api.PodSandbox) error {
	defer a.handled("RemovePodSandbox", time.Now())
	a.ended(p.GetId())
	return nil
}

// StartContainer: sent before the container's process starts, so a
// writer in it is named from its first commit.
func (a *Agent) StartContainer(_ context.Context, p *api.PodSandbox, c *api.Container) error {
	defer a.handled("StartContainer", time.Now())
	a.knowContainer(p, c)
	a.watchPod(p)
	return nil
}

// RemoveContainer: the container's id is no longer needed to name writers.
func (a *Agent) RemoveContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	defer a.handled("RemoveContainer", time.Now())
	if a.cfg.Watch {
		a.watches.mu.Lock()
		delete(a.watches.ctrs, c.GetId())
		a.watches.mu.Unlock()
	}
	return nil
}

// knowContainer remembers c's name and pod, for the writers it holds.
func (a *Agent) knowContainer(p *api.PodSandbox, c *api.Container) {
	if !a.cfg.Watch || c == nil {
		return
	}
	a.watches.mu.Lock()
	defer a.watches.mu.Unlock()
	if a.watches.closed {
		return
	}
	a.watches.ctrs[c.GetId()] = ctrInfo{name: c.GetName(), sandbox: p.GetId(),
		pod: findings.Pod{Namespace: p.GetNamespace(), Name: p.GetName(), UID: p.GetUid()}}
}

// watchSynced follows Synchronize's list: every pod listed is watched (a
// sandbox whose netns is gone stops its own watch), every other one is no
// longer, and the containers listed are known.
func (a *Agent) watchSynced(pods []*api.PodSandbox, ctrs []*api.Container) {
	if !a.cfg.Watch {
		return
	}
	byID := map[string]*api.PodSandbox{}
	for _, p := range pods {
		byID[p.GetId()] = p
		a.watchPod(p)
	}
	for _, c := range ctrs {
		if p := byID[c.GetPodSandboxId()]; p != nil {
			a.knowContainer(p, c)
		}
	}
	a.watches.mu.Lock()
	var gone []string
	for id := range a.watches.pods {
		if byID[id] == nil {
			gone = append(gone, id)
		}
	}
	for id := range a.watches.failed {
		if byID[id] == nil {
			delete(a.watches.failed, id)
		}
	}
	a.watches.mu.Unlock()
	for _, id := range gone {
		a.unwatch(id)
	}
}

// watchPod starts watching p's netns unless it is watched already. The
// monitor is opened off the handler (see follow): a handler only queues.
func (a *Agent) watchPod(p *api.PodSandbox) {
	if !a.cfg.Watch {
		return
	}
	if m, ok := a.meta(p, nil, SourceWatch, stageCommit); ok {
		a.watchSandbox(m, false)
	}
}

// rewatch watches again the sandbox a scan just read, if its watch ended
// while the runtime still runs it (see watchFailed): the scan found its
// netns there. A stopped sandbox is not known any more.
func (a *Agent) rewatch(s Scan) {
	if !a.cfg.Watch || (s.Outcome != Clean && s.Outcome != Found) || s.Meta.Source == SourceStop || isNodeJob(s.Meta) {
		return
	}
	ws := a.watches
	ws.mu.Lock()
	failed := ws.failed[s.Meta.SandboxID]
	delete(ws.failed, s.Meta.SandboxID)
	ws.mu.Unlock()
	if !failed || !a.known.has(s.Meta.SandboxID) {
		return
	}
	m := podMeta(s.Meta, stageCommit)
	m.Source = SourceWatch
	a.watchSandbox(m, true)
}

// watchSandbox starts watching m's netns (m as meta gives it a watch's)
// unless it is watched already; lookedFirst: a scan looked at it already,
// unwatched (see watched).
func (a *Agent) watchSandbox(m scan.Meta, lookedFirst bool) {
	ws := a.watches
	ws.mu.Lock()
	if w := ws.pods[m.SandboxID]; w != nil || ws.closed {
		ws.mu.Unlock()
		if w != nil && lookedFirst {
			// Made meanwhile by an event: it may have opened after the
			// scan's look too.
			a.lookedBefore(w)
		}
		return
	}
	w := &watched{meta: m, done: make(chan struct{}), ready: make(chan struct{}), lookedFirst: lookedFirst}
	ws.pods[m.SandboxID] = w
	ws.wg.Add(1)
	ws.mu.Unlock()
	go a.follow(w, true)
}

// maxReadyWait bounds a scan's wait for its sandbox's monitor to open
// (watchOpened): an open is a setns and a socket, at most maxOpening at
// once, and a Synchronize opens every pod's; the bound keeps a worker from
// waiting on an open held up longer, which then queues a scan of its own
// (lookedFirst). A var: a test lengthens it.
var maxReadyWait = time.Second

// watchOpened waits, before a scan's look, until the monitor of m's
// sandbox is open (or could not be), where the sandbox is watched: a
// commit after the look is then heard. A sweep queues its scans and opens
// the monitors at once, off the handler; a scan that looked before its
// monitor opened, followed by a commit before the open, left that commit
// unseen until the next re-sweep, while the scan vouched for the pod. The
// watch's own scans come from an open monitor.
func (a *Agent) watchOpened(m scan.Meta) {
	if !a.cfg.Watch || m.Source == SourceWatch {
		return
	}
	w := a.watchOf(m)
	if w == nil {
		return
	}
	w.mu.Lock()
	queued := w.lookedFirst
	w.mu.Unlock()
	if queued {
		// A scan follows the open already.
		return
	}
	select {
	case <-w.ready:
		return
	default:
	}
	t := time.NewTimer(maxReadyWait)
	defer t.Stop()
	select {
	case <-w.ready:
	case <-w.done:
	case <-t.C:
		// The open queues a scan, unless it came just now, before the
		// look.
		w.lookFirst()
	}
}

// lookedBefore notes that a scan looked at w's sandbox without its
// monitor: if the monitor is not open yet, its open queues a scan
// (lookedFirst); if it is, a scan is queued now, as at an open.
func (a *Agent) lookedBefore(w *watched) {
	if w.lookFirst() {
		// Not an overrun: the writers heard since the open stand.
		a.noted(w, watch.Change{}, stageReopen)
	}
}

// lookFirst sets lookedFirst unless the first monitor's open was decided
// already (ready), and tells whether it was; under mu, as follow's close of
// ready, so the open either sees the flag or came first.
func (w *watched) lookFirst() (opened bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.ready:
		return true
	default:
		w.lookedFirst = true
		return false
	}
}

// watching tells whether the sandbox is watched.
func (a *Agent) watching(id string) bool {
	a.watches.mu.Lock()
	defer a.watches.mu.Unlock()
	return a.watches.pods[id] != nil
}

// unwatch ends the sandbox's watch, and forgets its containers. The
// monitor's socket holds the netns: it is closed promptly (follow), so a
// stopped pod's netns is not kept alive.
func (a *Agent) unwatch(id string) {
	if !a.cfg.Watch {
		return
	}
	ws := a.watches
	ws.mu.Lock()
	w := ws.pods[id]
	delete(ws.pods, id)
	delete(ws.failed, id)
	for cid, c := range ws.ctrs {
		if c.sandbox == id {
			delete(ws.ctrs, cid)
		}
	}
	ws.mu.Unlock()
	if w != nil {
		a.stopWatch(w)
	}
}

// stop ends w's watch: its monitor is closed here, or by the goroutine
// opening one (follow) when it sees the stop.
func (a *Agent) stopWatch(w *watched) {
	close(w.done)
	w.mu.Lock()
	if w.retry != nil {
		w.retry.Stop()
	}
	mon := w.mon
	w.mon = nil
	w.mu.Unlock()
	if mon != nil {
		mon.Close()
		a.endWatch(w)
	}
}

// stopWatches ends every watch and waits for their monitors to close.
func (a *Agent) stopWatches() {
	ws := a.watches
	ws.mu.Lock()
	ws.closed = true
	pods := ws.pods
	ws.pods = map[string]*watched{}
	if ws.node != nil {
		pods[nodeKey] = ws.node
	}
	ws.mu.Unlock()
	for _, w := range pods {
		a.stopWatch(w)
	}
	ws.wg.Wait()
}

// stopped tells whether w's watch ended.
func (w *watched) stopped() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// follow opens w's monitor, then ends: the monitor's reader thread hands
// its changes to handed, so a watched pod holds no goroutine (2.6 MB of
// stacks at 250 pods when each had two). A monitor whose socket failed is
// reopened the same way, a scan queued (stageReopen): what changed
// meanwhile is not known. A netns that cannot be opened ends the watch:
// the sandbox has stopped (its scans report an unreachable one).
func (a *Agent) follow(w *watched, first bool) {
	mon := a.openMonitor(w)
	w.mu.Lock()
	if first {
		close(w.ready)
	}
	if mon == nil || w.stopped() {
		w.mu.Unlock()
		if mon != nil {
			mon.Close()
		}
		a.endWatch(w)
		return
	}
	w.mon = mon
	// The node's first open queues its start scan (below) anyway.
	lookedFirst := first && w.lookedFirst && !w.node
	w.mu.Unlock()
	if w.node {
		a.watches.mu.Lock()
		a.watches.nodeRetry = 0
		a.watches.mu.Unlock()
	}
	// What the reader heard before the monitor was stored: a socket that
	// failed then found no monitor to reopen (reopen), this call does.
	a.handed(w, mon)
	if first && w.node {
		// The re-sweep looks at the node's namespace from now on: legacy
		// rules written there tell the watch nothing either. Known before
		// the first scan is queued, so that scan's State is noted; a
		// re-sweep job queued in between takes this scan's stage
		// (merged).
		a.known.watchNode(w.meta)
		a.queueWatch(w, stageNodeStart, nil)
	}
	switch {
	case !first:
		a.noted(w, watch.Change{Overrun: true}, stageReopen)
	case lookedFirst:
		// What this monitor heard already stands (no overrun).
		a.noted(w, watch.Change{}, stageReopen)
	}
}

// handed takes what mon's reader queued, on the reader thread (see
// watch.Options.Notify): it never waits for a scan. A failed socket is
// reopened off this thread, which may not close it.
func (a *Agent) handed(w *watched, mon *watch.Monitor) {
	changes, open := mon.Take()
	for _, ch := range changes {
		stage := stageCommit
		if ch.Overrun {
			stage = stageOverrun
		}
		a.noted(w, ch, stage)
	}
	if !open {
		go a.reopen(w, mon)
	}
}

// reopen replaces w's failed monitor mon, unless the watch stopped (or
// replaced it) meanwhile.
func (a *Agent) reopen(w *watched, mon *watch.Monitor) {
	w.mu.Lock()
	if w.mon != mon {
		w.mu.Unlock()
		return
	}
	w.mon = nil
	// What was committed since the socket failed is not known: no writer
	// heard before is the newest (as after an overrun), for the armed
	// window's scan either.
	w.forgetWriters()
	w.stage = stageReopen
	w.mu.Unlock()
	mon.Close()
	a.follow(w, false)
}

// endWatch ends w's watch once: forgotten, and no longer waited for.
func (a *Agent) endWatch(w *watched) {
	w.ended.Do(func() {
		a.dropWatch(w)
		a.watches.wg.Done()
	})
}

// dropWatch forgets w if it is still the sandbox's watch (a watch that
// ended on its own: the sandbox may be watched again later).
func (a *Agent) dropWatch(w *watched) {
	ws := a.watches
	ws.mu.Lock()
	if ws.pods[w.meta.SandboxID] == w {
		delete(ws.pods, w.meta.SandboxID)
	}
	ws.mu.Unlock()
}

// openMonitor opens the monitor in w's netns; nil when the netns cannot be
// opened, is the node's, or the watch ended meanwhile.
func (a *Agent) openMonitor(w *watched) *watch.Monitor {
	select {
	case a.watches.opening <- struct{}{}:
	case <-w.done:
		return nil
	}
	defer func() { <-a.watches.opening }()
	if w.stopped() {
		return nil
	}
	h, err := netns.Open(w.meta.Netns)
	if errors.Is(err, netns.ErrNotExist) || errors.Is(err, netns.ErrNotNetns) {
		// The sandbox stopped; its scans say so if it did not.
		return nil
	}
	if err != nil {
		a.watchFailed(w, err)
		return nil
	}
	// The socket holds the netns once open: the handle is not kept.
	defer h.Close()
	if !w.node && a.isNode(h) {
		return nil
	}
	var st unix.Stat_t
	if unix.Fstat(h.Fd(), &st) == nil {
		w.ino.Store(st.Ino)
	}
	// A writer is described once per debounce window: the scan names one.
	mon, err := watch.Open(h.Fd(), watch.Options{Writer: a.describe, Proc: a.cfg.HostProc, WriterWindow: a.cfg.WatchDebounce,
		Notify: func(m *watch.Monitor) { a.handed(w, m) }})
	if err != nil {
		a.watchFailed(w, err)
		return nil
	}
	return mon
}

// WatchObserver hears of a watch that could not be opened in a running
// sandbox's netns (optional, as ResweepObserver).
type WatchObserver interface {
	WatchFailed(m scan.Meta, err error)
}

// watchFailed: w's monitor could not be opened though its netns is there
// (a descriptor or memory limit): the sandbox's nftables commits go
// unheard, and its watch ends. Counted and told, and its last scan no
// longer vouches for it (nor one running now): the next re-sweep scans
// it, and that scan watches it again (rewatch). Not queued at once: a
// limit that stays would make it a loop.
func (a *Agent) watchFailed(w *watched, err error) {
	a.metrics.errors.WithLabelValues("watch").Inc()
	if ws := a.watches; w.node {
		a.retryNodeWatch()
	} else {
		// Only while w is the sandbox's watch (not unwatched meanwhile),
		// and out of pods at once: a scan that ends before w's goroutine
		// drops it would find it watched and not watch it again.
		ws.mu.Lock()
		if id := w.meta.SandboxID; ws.pods[id] == w {
			delete(ws.pods, id)
			if len(ws.failed) < maxKnown {
				ws.failed[id] = true
			}
		}
		ws.mu.Unlock()
	}
	a.known.touch(w.meta.SandboxID)
	if o, ok := a.cfg.Observer.(WatchObserver); ok {
		o.WatchFailed(w.meta, err)
	}
}

// retryNodeWatch opens the node's watch again after a while: no runtime
// event or re-sweep watches the node, so a failed open (a descriptor or
// memory limit) left its commits unheard until the agent restarted, and,
// at the first open, the node never looked at (Looked) and its label
// unknown, with /healthz still 200. Its start scan then looks at what
// changed meanwhile.
func (a *Agent) retryNodeWatch() {
	ws := a.watches
	ws.mu.Lock()
	d := max(ws.nodeRetry, minNodeRetry)
	ws.nodeRetry = min(2*d, maxNodeRetry)
	ws.mu.Unlock()
	time.AfterFunc(d, a.watchNode)
}

// describe names a commit's process: from the host's /proc when the agent
// has it (the pid is the host's; f, its files the watch's reader read
// there as the commit arrived), else only as the kernel named it. It runs
// on the watch's reader thread: it takes only the containers' lock, never
// waits for a scan.
func (a *Agent) describe(pid int, comm string, f *watch.Files) *findings.Writer {
	if a.cfg.HostProc == "" {
		return &findings.Writer{PID: pid, Comm: comm}
	}
	wr := watch.Proc{Root: a.cfg.HostProc}.Describe(pid, comm, f)
	a.nameContainer(wr)
	return wr
}

// nameContainer names wr's container and pod when its cgroup names a
// container the runtime told of.
func (a *Agent) nameContainer(wr *findings.Writer) {
	if wr.ContainerID == "" {
		return
	}
	a.watches.mu.Lock()
	c, ok := a.watches.ctrs[wr.ContainerID]
	a.watches.mu.Unlock()
	if ok {
		wr.Container, wr.Pod = c.name, c.pod
	}
}

// inContainer names in m the container the writer ran in, when it is one
// of m's pod: the writer's cgroup is the pod's to name (a writable
// cgroupfs makes a nested cgroup named after another pod's container), and
// the pod is the one whose netns was changed. The node's records name none.
func inContainer(m *scan.Meta, writer *findings.Writer, node bool) {
	if writer != nil && writer.ContainerID != "" && writer.Pod.UID != "" && writer.Pod.UID == m.Pod.UID && !node {
		m.ContainerID, m.Container = writer.ContainerID, writer.Container
	}
}

// noted takes one change: the newest writer is kept, and the first change
// of a window arms the scan at its end. The window is not extended by
// later changes, so a pod that never pauses still gets its scans; its
// length is the debounce, or costFactor times the sandbox's last scan
// where that scan took the debounce or longer.
func (a *Agent) noted(w *watched, ch watch.Change, stage string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case ch.Overrun:
		w.forgetWriters()
	case ch.Writer != nil:
		w.writer = ch.Writer
	}
	if ch.Writer != nil {
		if len(w.pending) == maxPending {
			w.pending = append(w.pending[:0], w.pending[1:]...)
		}
		w.pending = append(w.pending, pendingWriter{gen: ch.Gen, writer: ch.Writer})
	}
	if w.stage == "" || stage != stageCommit {
		w.stage = stage
	}
	if w.armed {
		return
	}
	w.armed = true
	window, _ := a.costWindow(w.cost)
	time.AfterFunc(window, func() { a.fire(w) })
}

// forgetWriters drops every writer heard, the window's and the pending
// ones: what was committed since (an overrun, a socket that failed) is not
// known. Under w.mu.
func (w *watched) forgetWriters() {
	w.writer = nil
	clear(w.pending)
	w.pending = w.pending[:0]
}

// costWindow is the wait a scan's cost sets before the sandbox's next
// scan of the watch or after a legacy write: the debounce, or, where cost
// is the debounce or more (costly), costFactor times cost, at most
// maxWindow.
func (a *Agent) costWindow(cost time.Duration) (window time.Duration, costly bool) {
	if cost < a.cfg.WatchDebounce {
		return a.cfg.WatchDebounce, false
	}
	return min(costFactor*cost, maxWindow), true
}

// scanEnded notes, once a scan of m's sandbox named its writer and
// recorded, what it cost: its nftables read, for the length of its
// watch's windows (noted), the pod's own rules' cost, not a neighbour's
// hold of the x_tables mutex or the findings file's lock; the whole scan,
// for the wait between scans after its legacy writes (scanAfterExec),
// whose legacy look the pod's own writes make slow. The commits of the
// windows that ended that the scan saw (its look's generation gen, known
// when genOK) are no later scan's to name (pending): dropped.
func (a *Agent) scanEnded(m scan.Meta, nft, whole time.Duration, gen uint32, genOK bool) {
	if w := a.watchOf(m); w != nil {
		w.mu.Lock()
		w.cost, w.took = nft, whole
		kept := w.pending[:0]
		for _, p := range w.pending {
			// Generations wrap: serial number arithmetic.
			if !p.fired || !genOK || int32(p.gen-gen) > 0 {
				kept = append(kept, p)
			}
		}
		clear(w.pending[len(kept):])
		w.pending = kept
		w.mu.Unlock()
	}
}

// fire queues the window's scan.
func (a *Agent) fire(w *watched) {
	w.mu.Lock()
	writer, stage := w.writer, w.stage
	w.writer, w.stage, w.armed = nil, "", false
	for i := range w.pending {
		w.pending[i].fired = true
	}
	w.mu.Unlock()
	a.queueWatch(w, stage, writer)
}

// queueWatch queues a scan of w's sandbox. The scan opens the netns when
// it starts: waiting in the queue holds no fd.
func (a *Agent) queueWatch(w *watched, stage string, writer *findings.Writer) {
	if w.stopped() {
		return
	}
	m := w.meta
	m.Stage = stage
	writer = a.aliveWriter(writer, w)
	inContainer(&m, writer, w.node)
	if !a.queue.add(job{meta: m, writer: writer, exec: a.execOf(writer, w)}) {
		a.scanned(Scan{Meta: m, Outcome: Dropped})
	}
}

// watchOf is the watch of m's sandbox (the node's for a node job), nil
// when none.
func (a *Agent) watchOf(m scan.Meta) *watched {
	a.watches.mu.Lock()
	defer a.watches.mu.Unlock()
	if isNodeJob(m) {
		return a.watches.node
	}
	return a.watches.pods[m.SandboxID]
}

// writerOf is the writer a scan's record names: its job's (the watch's,
// also when merged into an event's job in the queue). For a start, stop or
// sweep scan with none, the newest writer of a commit still in the watch's
// debounce window, or in one that ended since the sandbox's last scan
// that saw it ended (pending), that the scan saw: the generation the scan
// read before its look is that commit's or later, and no newer than every
// commit the watch heard (seenBy). A look whose nftables read was whole
// (nftWhole) read that generation's rules and no later commit's: the
// read looks again when the generation moved under it. A commit the watch
// heard after that read may be in a look that was not whole all the same
// (an init container's one-shot restore, committing while its start's
// scan reads, the read out of time or of looks): then the generation is
// read again (after(), once the look is done), and a commit up to it
// counts as seen. A fast init container's commit is then named by its
// PostStartContainer or StopContainer scan, which the watch's own scan of
// the same commit only repeats (same). Nothing recorded before is changed.
func (a *Agent) writerOf(j job, st inspect.State, stOK, nftWhole bool, after func() (uint32, bool)) *findings.Writer {
	if j.writer != nil || j.meta.Source == SourceWatch || !stOK || !a.cfg.Watch {
		return j.writer
	}
	w := a.watchOf(j.meta)
	if w == nil {
		return nil
	}
	found, newer := w.seenBy(st.Gen)
	if newer && !nftWhole {
		if g, ok := after(); ok {
			found, _ = w.seenBy(g)
		}
	}
	return a.aliveWriter(found, w)
}

// seenBy is the newest pending writer whose commit is gen's or before,
// and whether the window holds a commit after gen. None where gen is newer
// than every commit the monitor took (watch.Monitor.Heard): the look holds
// commits the watch has not heard yet (its reader behind, a commit's end on
// its way), whose writers are not known, and none while the open monitor
// heard nothing yet (its first commit's writer pending, Heard not stored
// yet). Heard is read before pending: it is stored once its commit's
// change went through noted, so the writer of a generation it covers is
// in pending. Before a monitor is stored (follow) its first changes may be
// pending unchecked, a window of a few instructions.
func (w *watched) seenBy(gen uint32) (found *findings.Writer, newer bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mon != nil {
		// Generations wrap: serial number arithmetic. Nothing heard yet
		// while a writer is pending: its commit is being taken (Heard is
		// stored after), and a later one may be in the look.
		if h, ok := w.mon.Heard(); !ok || int32(gen-h) > 0 {
			return nil, false
		}
	}
	for i := len(w.pending) - 1; i >= 0; i-- {
		// Generations wrap: serial number arithmetic.
		if p := w.pending[i]; int32(p.gen-gen) <= 0 {
			return p.writer, newer
		}
		newer = true
	}
	return nil, newer
}

// aliveWriter is wr, or, where ws's watch found wr's process gone, the
// same process as the exec watch read it at its exec: same pid, same
// command, run in ws's netns (a pid reused by another pod's process of
// the same name would give this pod's record that pod's container). The
// watch's reader runs at real-time priority, but after its wake it may
// wait for one of Go's processors while a one-shot tool exits; the exec
// watch's reader reads a tool's files before it returns to Go
// (internal/execquiet), and by the end of the debounce window it has
// handed them over (execwatch.Watcher.Lookup).
func (a *Agent) aliveWriter(wr *findings.Writer, ws *watched) *findings.Writer {
	if wr == nil || !wr.Gone {
		return wr
	}
	ew := a.execs.w.Load()
	if ew == nil {
		return wr
	}
	c, ok := ew.Lookup(wr.PID)
	if !ok || !ranIn(c, ws) || c.Writer == nil || c.Writer.Gone || c.Writer.Comm != wr.Comm {
		return wr
	}
	return a.placeWriter(c.Writer)
}

// limited: the sandbox's finding was not written, over its limit. The
// newest usage must not be lost: the sandbox is scanned again when its
// interval ends, once however many findings were limited meanwhile.
func (a *Agent) limited(j job) {
	if !a.cfg.Watch {
		return
	}
	w := a.watchOf(j.meta)
	if w == nil {
		return
	}
	at := a.store.Seen.Reopens(j.meta.SandboxID)
	if at.IsZero() {
		return
	}
	a.scanLater(w, time.Until(at), stageLimit, j.writer)
}

// doubted: the sandbox's cut look after its gone passed (the memory
// marked it: findings.Seen.Doubts); a cut look the gap later writes its
// unknown, and while the x_tables mutex stays busy the re-sweep looks at
// no pod it looked at before. The watch scans it again then (a second
// more: the gap must have passed).
func (a *Agent) doubted(j job) {
	if !a.cfg.Watch {
		return
	}
	w := a.watchOf(j.meta)
	if w == nil {
		return
	}
	if wait, ok := a.store.Seen.Doubts(j.meta.SandboxID); ok {
		a.scanLater(w, max(wait, 0)+time.Second, stageDoubt, nil)
	}
}

// scanLater queues a scan of w's sandbox after wait, unless one is
// pending already (limited, doubted) or the watch stopped.
func (a *Agent) scanLater(w *watched, wait time.Duration, stage string, writer *findings.Writer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.retry != nil || w.stopped() {
		return
	}
	w.retry = time.AfterFunc(wait, func() {
		w.mu.Lock()
		w.retry = nil
		w.mu.Unlock()
		a.queueWatch(w, stage, writer)
	})
}
