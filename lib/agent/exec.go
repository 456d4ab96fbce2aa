package agent

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/execwatch"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

// The exec watch (Config.ExecWatch): every run of an iptables tool on the
// node, as the kernel's process events announce it (lib/execwatch), is
// placed by its network namespace in a watched sandbox (or the node's, in
// node mode) and recorded by what it did:
//
//   - a legacy write that worked: a scan of the sandbox at once, its
//     record naming the command and its writer (x_tables announce nothing;
//     the re-sweep stays the safety net); an ebtables-legacy one, which no
//     look can read, a record of its own at the legacy level;
//   - an iptables-nft write that worked: nothing of its own; the nftables
//     watch's scan of its commit carries the command (queueWatch), one
//     finding, not two;
//   - a write that failed (see failure): a record of its own with
//     exec.failed; a legacy restore (which commits table by table) or a
//     legacy write ended by a signal may have written some rules even so,
//     and gets a scan too (mayHaveWritten);
//   - a read (-L, -S, -C, save, a write answering no): usage of the
//     tooling, a record of its own once per pod and command shape.
//
// Records of their own are kept apart from the sandbox's scans in the
// per-sandbox memory, one entry per sandbox for all of them (execKey): a
// clean scan never takes them back, a pod running `iptables -C` every
// second gives one finding, and the sandbox's limit bounds them all
// together, whatever chains and tables the pod's commands name.
//
// The watch opens before the agent's first scan: a command run in a netns
// the agent does not know yet waits for its sandbox, bounded (parked).
// Nothing is silent: a command that ran and is not recorded (it ended
// before it could be read, its exit was lost, it ran in no watched netns)
// is counted by why, for its pod when its container tells it, and summed
// up for the Observer once a minute (ExecLosses).

// SourceExec is the exec watch's source.
const SourceExec = findings.SourceExec

// Stages of the exec watch's records.
const (
	// stageExec: a write that worked made the agent scan.
	stageExec = "exec"
	// stageExit: the record is the command's own, made at its exit.
	stageExit = "exit"
)

// execQueue bounds the ended commands waiting to be handled; past it a
// command is dropped (counted): the reader never waits.
const execQueue = 256

// Commands placed in no watched sandbox wait for one (parked), bounded:
// the exec watch opens before the agent's first scan, before the runtime
// told of its pods, and a pod's monitor, which names its netns's inode,
// opens after the pod's start.
const (
	// execParked bounds the commands waiting; past it the oldest is missed.
	execParked = 256
	// execPlaceWait is how long a command waits once the runtime has
	// synchronized (the sandboxes are known), execRetry how often it is
	// placed again.
	execPlaceWait = 5 * time.Second
	execRetry     = 200 * time.Millisecond
	// execUnsyncedWait bounds the wait while the runtime has not
	// synchronized (not connected).
	execUnsyncedWait = time.Minute
	// DefaultExecLossEvery is how often the losses are summed up in one
	// report (ExecObserver.ExecLost), when there are any.
	DefaultExecLossEvery = time.Minute
	// maxLossExamples bounds the command lines a loss report gives.
	maxLossExamples = 5
)

// Why a command that ran is not recorded (iptables_alerter_agent_exec_missed_total).
const (
	missGone    = execwatch.MissGone
	missLong    = execwatch.MissLongPath
	missExit    = "exit not seen"
	missQueue   = "queue full"
	missNowhere = "netns of no watched sandbox"
	missNetns   = "netns unreadable"
)

// Exit statuses of the iptables tools (xtables.h enum exittype).
const (
	exitOther    = 1 // OTHER_PROBLEM; -C/-D: no such rule
	exitVersion  = 3 // VERSION_PROBLEM: can't initialize table (no kernel support)
	exitResource = 4 // RESOURCE_PROBLEM: iptables-nft refused by the kernel; iptables-legacy's lock wait timed out
)

// execs is the exec watch's state.
type execs struct {
	w  atomic.Pointer[execwatch.Watcher]
	ch chan execwatch.Command
	wg sync.WaitGroup
	// off is why the watch is off ("" while on, or not asked for).
	mu  sync.Mutex
	off string
	up  atomic.Bool
	// synced is when the runtime last synchronized, Unix nanoseconds (0:
	// not yet, or disconnected since): parked commands wait for it.
	synced atomic.Int64
	// syncMu orders the writes of synced and of the agent's connected
	// state (Synchronize, disconnected): closes counts the runtime
	// connections that closed or failed (runtimeLost, disconnected),
	// under it.
	syncMu sync.Mutex
	closes int64
	// lost is the losses since the last report, under mu.
	lost ExecLosses
	// reported are the watch's counters at the last report.
	reported execwatch.Stats
	// legacyAbsent tells whether the kernel lacks a tool family's legacy
	// x_tables module (legacyAbsent; tests replace it).
	legacyAbsent func(family string) bool
}

// legacyFamilies are the inspect families of the tools' families.
var legacyFamilies = map[string]inspect.Family{"iptables": inspect.IP, "ip6tables": inspect.IP6, "arptables": inspect.ARP, "ebtables": inspect.Bridge}

// legacyAbsent tells whether the kernel lacks the legacy x_tables module
// of a tool family (inspect.LegacyAbsent); false for an unknown family.
func legacyAbsent(family string) bool {
	f, ok := legacyFamilies[family]
	return ok && inspect.LegacyAbsent(f)
}

// parked is a command waiting for its sandbox.
type parked struct {
	cmd   execwatch.Command
	since time.Time
}

// ExecLosses sums up what the exec watch could not record since its last
// report: every iptables command that ran unrecorded is in Missed, and
// what may have been one in Unread and Overruns.
type ExecLosses struct {
	// Missed counts the commands by why (gone before read, exit not seen,
	// queue full, netns of no watched sandbox, netns unreadable);
	// Examples are the first few (command line, container, why).
	Missed   map[string]uint64
	Examples []string
	// Unread counts the programs gone before anything of them could be
	// read: what they ran is not known. Overruns counts the times the
	// kernel dropped process events (the socket's buffer full).
	Unread, Overruns uint64
	// Resweep is set when the losses may hide a legacy write, which tells
	// nobody else (nftables commits have their watch), and a re-sweep
	// runs now for it (Config.ResweepInterval on): rules a lost command
	// wrote are found at once, not an interval later.
	Resweep bool
}

// Empty tells whether there is nothing to report.
func (l ExecLosses) Empty() bool { return len(l.Missed) == 0 && l.Unread == 0 && l.Overruns == 0 }

// ExecObserver, when the Observer implements it, hears of what the exec
// watch could not record: losses summed up at most once per
// Config.ExecLossEvery, and the watch off. Calls must not block.
type ExecObserver interface {
	ExecLost(ExecLosses)
	ExecOff(err error)
}

// startExecs opens the exec watch, or says why it is off.
func (a *Agent) startExecs() {
	if !a.cfg.ExecWatch {
		return
	}
	e := a.execs
	if !a.cfg.Watch {
		// Off with the watch, which the admin turned off: no degraded
		// health for a choice (the flag's help says it needs --watch).
		a.execs.mu.Lock()
		a.execs.off = "the exec watch needs the watch (--watch): it places commands in the watched sandboxes"
		a.execs.mu.Unlock()
		return
	}
	e.ch = make(chan execwatch.Command, execQueue)
	w, err := execwatch.Open(execwatch.Options{HostProc: a.cfg.HostProc,
		Done: func(c execwatch.Command) {
			select {
			case e.ch <- c:
			default:
				a.execMissed(c, missQueue)
			}
		},
		Missed: a.execMissed,
		// Deaf from then on: said on /healthz (degraded) and by
		// exec_watch_up 0, never a silent watch that reads as up.
		Failed: func(err error) {
			e.up.Store(false)
			a.execOff(fmt.Errorf("the exec watch stopped: %w", err))
		}})
	if err != nil {
		a.execOff(err)
		return
	}
	e.w.Store(w)
	e.up.Store(true)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		a.handleExecs()
	}()
}

// handleExecs handles the ended commands until the watch closes, places
// the parked ones again, and reports the losses.
func (a *Agent) handleExecs() {
	e := a.execs
	var waiting []parked
	// The retry ticks only while commands wait: an idle agent is woken by
	// nothing of its own (a tick every execRetry cost about 4 s of CPU an
	// hour).
	retry := time.NewTicker(execRetry)
	retry.Stop()
	ticking := false
	defer retry.Stop()
	every := a.cfg.ExecLossEvery
	if every <= 0 {
		every = DefaultExecLossEvery
	}
	report := time.NewTicker(every)
	defer report.Stop()
	for {
		select {
		case c, ok := <-e.ch:
			if !ok {
				// Closing: what waits is placed nowhere.
				for _, p := range waiting {
					a.execMissed(p.cmd, missNowhere)
				}
				a.reportLosses()
				return
			}
			if !a.execDone(c) {
				if len(waiting) == execParked {
					a.execMissed(waiting[0].cmd, missNowhere)
					waiting = waiting[1:]
				}
				waiting = append(waiting, parked{c, time.Now()})
			}
		case <-retry.C:
			waiting = a.placeParked(waiting)
		case <-report.C:
			a.reportLosses()
		}
		if busy := len(waiting) > 0; busy != ticking {
			if ticking = busy; busy {
				retry.Reset(execRetry)
			} else {
				retry.Stop()
			}
		}
	}
}

// placeParked places the waiting commands again: those placed are
// handled, those that waited execPlaceWait since the runtime synchronized
// (execUnsyncedWait while it has not) are missed.
func (a *Agent) placeParked(waiting []parked) []parked {
	if len(waiting) == 0 {
		return waiting
	}
	var synced time.Time
	if ns := a.execs.synced.Load(); ns != 0 {
		synced = time.Unix(0, ns)
	}
	kept := waiting[:0]
	for _, p := range waiting {
		if a.execDone(p.cmd) {
			continue
		}
		if waited := time.Since(later(p.since, synced)); synced.IsZero() && waited >= execUnsyncedWait || !synced.IsZero() && waited >= execPlaceWait {
			a.execMissed(p.cmd, missNowhere)
			continue
		}
		kept = append(kept, p)
	}
	return kept
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// stopExecs closes the watch; the commands queued are handled first.
func (a *Agent) stopExecs() {
	e := a.execs
	if e.w.Load() == nil {
		return
	}
	// Close ends the reader: nothing more is queued.
	e.w.Load().Close()
	e.up.Store(false)
	close(e.ch)
	e.wg.Wait()
}

func (a *Agent) execOff(err error) {
	a.execs.mu.Lock()
	a.execs.off = err.Error()
	a.execs.mu.Unlock()
	a.health.ExecOff(err.Error())
	if o, ok := a.cfg.Observer.(ExecObserver); ok {
		o.ExecOff(err)
	}
}

// execMissed counts a command that ran unrecorded, for the metric and the
// next report. Called on the watch's reader thread too: it never waits
// for more than the counters' lock.
func (a *Agent) execMissed(c execwatch.Command, why string) {
	a.metrics.execMissed.WithLabelValues(why).Inc()
	if why == missGone || why == missLong {
		// Its pod's count too, when its cgroup names a container of a
		// watched pod (a zombie keeps its cgroup).
		if w, _ := a.placeExec(c); w != nil && !w.node {
			a.usage.ExecMissed(w.meta)
		}
	}
	e := a.execs
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lost.Missed == nil {
		e.lost.Missed = map[string]uint64{}
	}
	e.lost.Missed[why]++
	if len(e.lost.Examples) < maxLossExamples {
		e.lost.Examples = append(e.lost.Examples, lossExample(c, why))
	}
}

// lossExample says what ran where, bounded: its command line (its name
// only when it ended unread), its pid and container, and why.
func lossExample(c execwatch.Command, why string) string {
	s := (&findings.Exec{Argv: c.Argv, ArgvCut: c.ArgvCut}).CommandLine(256) + " (pid " + strconv.Itoa(c.PID)
	if c.Writer != nil && c.Writer.ContainerID != "" {
		s += ", container " + safetext.Cut(c.Writer.ContainerID, 64)
	} else if c.Writer != nil && c.Writer.Unit != "" {
		s += ", unit " + safetext.Cut(c.Writer.Unit, 128)
	}
	return s + "): " + why
}

// reportLosses tells the Observer what was lost since the last report, if
// anything.
func (a *Agent) reportLosses() {
	e := a.execs
	st, _ := a.execStats()
	e.mu.Lock()
	l := e.lost
	e.lost = ExecLosses{}
	l.Unread, l.Overruns = st.Vanished-e.reported.Vanished, st.Overruns-e.reported.Overruns
	e.reported = st
	e.mu.Unlock()
	if l.Empty() {
		return
	}
	if mayHideWrite(l) {
		l.Resweep = a.resweepSoon()
	}
	if o, ok := a.cfg.Observer.(ExecObserver); ok {
		o.ExecLost(l)
	}
}

// mayHideWrite tells whether losses may include an iptables-legacy write
// to a pod's netns: all but commands run where no watched sandbox is,
// which a re-sweep of the sandboxes would not look at either.
func mayHideWrite(l ExecLosses) bool {
	if l.Unread > 0 || l.Overruns > 0 {
		return true
	}
	for why, n := range l.Missed {
		if n > 0 && why != missNowhere {
			return true
		}
	}
	return false
}

// execStats are the watch's counters and receive buffer, zero while it
// is off.
func (a *Agent) execStats() (execwatch.Stats, int) {
	if w := a.execs.w.Load(); w != nil {
		return w.Stats(), max(w.ReadBuffer(), 1)
	}
	return execwatch.Stats{}, 0
}

// ExecWatching tells whether the exec watch listens, and if not why ("" when
// it was not asked for).
func (a *Agent) ExecWatching() (bool, string) {
	a.execs.mu.Lock()
	defer a.execs.mu.Unlock()
	return a.execs.up.Load(), a.execs.off
}

// execOf is the command the exec watch saw run as writer's process: an
// iptables-nft commit's in ws's netns, to join to the watch's record. Nil
// when none. A pid is reused: the command must have run in ws's netns, and
// not ended before the commit's window (WatchDebounce, with as much again
// and a second for a loaded machine), or another pod's command line (its
// comments, its failure) would land in this pod's record.
func (a *Agent) execOf(writer *findings.Writer, ws *watched) *findings.Exec {
	w := a.execs.w.Load()
	if writer == nil || w == nil {
		return nil
	}
	c, ok := w.Lookup(writer.PID)
	if !ok || !ranIn(c, ws) {
		return nil
	}
	if !c.Ended.IsZero() && time.Since(c.Ended) > 2*a.cfg.WatchDebounce+time.Second {
		return nil
	}
	return execRecord(c, a.execs.legacyAbsent)
}

// ranIn tells whether the exec watch saw c run in ws's netns: a pid is
// reused, and another pod's process at it is not ws's writer.
func ranIn(c execwatch.Command, ws *watched) bool {
	if ws == nil {
		return false
	}
	ino := ws.ino.Load()
	return c.Netns != 0 && ino != 0 && c.Netns == ino
}

// execRecord is what the record says of a command; absent is
// failure's.
func execRecord(c execwatch.Command, absent func(family string) bool) *findings.Exec {
	e := &findings.Exec{Argv: c.Argv, ArgvCut: c.ArgvCut, Binary: c.Exe, Tool: c.Shape.Tool, Backend: c.Backend,
		Operation: c.Shape.Operation, Command: c.Shape.Command, Table: c.Shape.Table, Chain: c.Shape.Chain,
		Exited: c.Exited, ExitCode: c.Code, Signal: c.Signal, NoNetAdmin: c.NoNetAdmin}
	e.Failed, e.MissingKernelSupport = failure(c, absent)
	return e
}

// failure decides from the status alone (the watch sees no message): a
// write fails when it exits non-zero or is killed, except -C and -D
// exiting 1, which answer "no such rule", -N, -X and -F exiting 1 (the
// chain there, or not, already: execwatch.Shape.Answers), and
// iptables-nft's -X exiting 4 (EBUSY: a chain still referenced, the rules
// left as they were). Exit 3 (VERSION_PROBLEM: "can't initialize
// iptables table ... do you need to insmod?") means missing kernel
// support, for a read too: the breakage of a RHEL 10 node; so does exit 4
// (RESOURCE_PROBLEM) from iptables-nft, refused by the kernel as for
// "Extension X revision 0 not supported, missing kernel module?".
// iptables-legacy exits 1 for that one, indistinguishable from other
// failures, and 4 when its wait for the xtables lock timed out (-w): a
// busy node, not a kernel without support.
//
// A process without CAP_NET_ADMIN (c.NoNetAdmin: a container the runtime
// grants none, CRI-O's and containerd's default) is refused every table
// with those same statuses ("Permission denied (you must be root)":
// iptables-legacy 3, iptables-nft 4): its failure is its own on any node,
// never missing kernel support.
//
// A legacy write's status does not tell: a legacy restore refused a table
// the kernel cannot set up exits 2 ("unable to initialize table"), as for
// a typo, and ebtables-legacy exits 255 for everything. So a legacy write
// that failed while absent(family) says the kernel has no x_tables module
// of its family is missing kernel support: the tool's run would have
// loaded it (module autoload) had the kernel one. That is how kube-proxy
// style tools, CNIs and istio-init write rules on a RHEL 10 node.
func failure(c execwatch.Command, absent func(family string) bool) (failed, missing bool) {
	if !c.Exited {
		return false, false
	}
	nft := c.Backend == execwatch.BackendNft
	missing = c.Signal == 0 && !c.NoNetAdmin && (c.Code == exitVersion || c.Code == exitResource && nft)
	if !c.Shape.Write() {
		// A read, a save, a test restore.
		return missing, missing
	}
	if c.Signal != 0 {
		return true, false
	}
	if c.Code == 0 || c.Code == exitOther && (c.Shape.Answers() || c.Shape.Guessed) || c.Code == exitResource && nft && c.Shape.DeletesChain() {
		return false, false
	}
	if !missing && !c.NoNetAdmin && c.Backend == execwatch.BackendLegacy && absent != nil {
		missing = absent(c.Shape.Family)
	}
	return true, missing
}

// execDone handles one ended command (see the top of this file); false
// when it ran in the netns of no watched sandbox (yet): it waits, parked.
func (a *Agent) execDone(c execwatch.Command) bool {
	if !c.Exited {
		a.execMissed(c, missExit)
		return true
	}
	w, why := a.placeExec(c)
	switch {
	case w == nil && why == missNowhere:
		return false
	case w == nil && why != "":
		a.execMissed(c, why)
		return true
	case w == nil:
		a.metrics.execs.WithLabelValues("node off").Inc()
		return true
	}
	e := execRecord(c, a.execs.legacyAbsent)
	writer := a.placeWriter(c.Writer)
	if !w.node {
		a.usage.Exec(w.meta, e.Failed, cmp.Or(c.Ended, time.Now()))
	}
	switch {
	case e.Failed:
		a.metrics.execs.WithLabelValues("failed").Inc()
		a.recordExec(w, e, writer)
		if mayHaveWritten(c, e) {
			// Its scan's record names it too, failed mark and all: the
			// rules it left.
			a.scanAfterExec(w, writer, e)
		}
	case c.Shape.Write() && c.Backend == execwatch.BackendLegacy && c.Shape.Family == "ebtables":
		// The legacy look cannot read the kernel's ebtables (no list of
		// its tables; asking makes one: docs/limitations.md), so a scan
		// would find nothing and the write would go unrecorded: it is
		// the command's own finding, at the legacy level (execLevel).
		a.metrics.execs.WithLabelValues("legacy write").Inc()
		a.recordExec(w, e, writer)
	case c.Shape.Write() && c.Backend == execwatch.BackendLegacy:
		a.metrics.execs.WithLabelValues("legacy write").Inc()
		a.scanAfterExec(w, writer, e)
	case c.Shape.Write() && !c.Shape.Guessed:
		// iptables-nft: the nftables watch's scan of the commit names it
		// (a guessed write may have been a -C, with no commit: recorded
		// below as the others).
		a.metrics.execs.WithLabelValues("nft write").Inc()
	default:
		a.metrics.execs.WithLabelValues("read").Inc()
		a.recordExec(w, e, writer)
	}
	return true
}

// scanAfterExec queues a scan of w for a legacy write, which x_tables
// announce to nobody; its record names the command e.
func (a *Agent) scanAfterExec(w *watched, writer *findings.Writer, e *findings.Exec) {
	m := w.meta
	m.Source, m.Stage = SourceExec, stageExec
	inContainer(&m, writer, w.node)
	j := job{meta: m, writer: writer, exec: e}
	// A sandbox whose scans take the watch's window or more is scanned
	// after legacy writes as after commits (costWindow): at most once per
	// ten times its last scan, for the latest write; a pod writing in a
	// loop would keep a worker scanning it.
	w.mu.Lock()
	if wait, costly := a.costWindow(w.took); costly && !w.stopped() {
		first := w.heldExec == nil
		w.heldExec = &j
		w.mu.Unlock()
		if first {
			time.AfterFunc(wait, func() { a.queueHeldExec(w) })
		}
		return
	}
	w.mu.Unlock()
	a.queueExec(w, j)
}

// queueHeldExec queues the scan of the latest legacy write held back
// (scanAfterExec).
func (a *Agent) queueHeldExec(w *watched) {
	w.mu.Lock()
	j := w.heldExec
	w.heldExec = nil
	w.mu.Unlock()
	if j != nil {
		a.queueExec(w, *j)
	}
}

// queueExec queues the scan after a legacy write; dropped when the
// sandbox stopped or the queue is full.
func (a *Agent) queueExec(w *watched, j job) {
	if w.stopped() || !a.queue.add(j) {
		a.scanned(Scan{Meta: j.meta, Outcome: Dropped})
	}
}

// mayHaveWritten tells whether a legacy write that failed may still have
// changed the tables: iptables-legacy-restore commits each table at its
// COMMIT, so a later table's failure leaves the earlier ones written, and
// a command ended by a signal may have been ended after its one replace.
// A single command that exited with an error replaced nothing, nor did
// one refused every table (no CAP_NET_ADMIN, no x_tables in the kernel):
// a pod running those in a loop is not scanned at each.
func mayHaveWritten(c execwatch.Command, e *findings.Exec) bool {
	return c.Backend == execwatch.BackendLegacy && c.Shape.Family != "ebtables" && c.Shape.Write() &&
		(c.Shape.Operation == execwatch.OpRestore || c.Signal != 0) && !c.NoNetAdmin && !e.MissingKernelSupport
}

// placeExec finds the watched sandbox whose netns the command ran in: the
// node's watch for the node's netns in node mode. Nil with why "" for the
// node's netns with node mode off (not recorded, as the watch's node mode
// records nothing then), else with why it is placed nowhere. A sandbox
// whose monitor is not open yet is told by its netns path's inode; a
// command whose netns could not be read, by its container's sandbox.
func (a *Agent) placeExec(c execwatch.Command) (*watched, string) {
	ws := a.watches
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if c.Netns == 0 {
		if c.Writer != nil && c.Writer.ContainerID != "" {
			if w := ws.pods[ws.ctrs[c.Writer.ContainerID].sandbox]; w != nil {
				return w, ""
			}
		}
		return nil, missNetns
	}
	node := a.isNodeIno(c.Netns)
	if ws.node != nil && (ws.node.ino.Load() == c.Netns || node) {
		return ws.node, ""
	}
	if node {
		// Never a pod's, though a host-network pod's path may name it.
		return nil, ""
	}
	for _, w := range ws.pods {
		if ino := w.ino.Load(); ino == c.Netns || ino == 0 && pathIno(w.meta.Netns) == c.Netns {
			if madeAfter(w.meta.Netns, c.Started) {
				// The kernel gives a freed netns's inode to the next one:
				// a command of a short-lived netns (`unshare -n iptables
				// ...`) waiting for its sandbox would be this new pod's.
				return nil, missNowhere
			}
			return w, ""
		}
	}
	return nil, missNowhere
}

// madeAfter tells whether the netns pinned at path was made after t: its
// nsfs inode's change time is when the runtime pinned it, right after
// making it, on the kernel's coarse clock (up to a tick early): a command
// of the freed netns that began within that tick before the pin is still
// taken for the new pod's, a window far narrower than a netns's teardown. A /proc path pins nothing (its inode may be made when first
// looked at), so it is never judged; nor is a zero t.
func madeAfter(path string, t time.Time) bool {
	var st unix.Stat_t
	if t.IsZero() || path == "" || strings.HasPrefix(path, "/proc/") || unix.Stat(path, &st) != nil {
		return false
	}
	return time.Unix(st.Ctim.Unix()).After(t)
}

// pathIno is the inode of the netns at path, 0 when it cannot be read.
func pathIno(path string) uint64 {
	var st unix.Stat_t
	if path == "" || unix.Stat(path, &st) != nil {
		return 0
	}
	return st.Ino
}

// isNodeIno tells whether ino is the node's netns (HostProc's pid 1's).
func (a *Agent) isNodeIno(ino uint64) bool {
	_, i, ok := strings.Cut(a.nodeNetns, ":")
	return ok && i == strconv.FormatUint(ino, 10)
}

// placeWriter names the writer's container and pod, as the watch's
// describe does, on a copy.
func (a *Agent) placeWriter(wr *findings.Writer) *findings.Writer {
	if wr == nil {
		return nil
	}
	c := *wr
	a.nameContainer(&c)
	return &c
}

// recordExec records a command's own finding, once per command shape
// the sandbox remembers (watched.shapes) and within the sandbox's limit
// for all its commands' records (execKey).
func (a *Agent) recordExec(w *watched, e *findings.Exec, writer *findings.Writer) {
	m := w.meta
	m.Source, m.Stage = SourceExec, stageExit
	inContainer(&m, writer, w.node)
	rec := findings.Record{Time: findings.Now(), Node: m.Node, Subject: m.Subject, Source: m.Source, Stage: m.Stage,
		ContainerID: m.ContainerID, SandboxID: m.SandboxID, Pod: m.Pod, Container: m.Container, Image: m.Image, Netns: m.Netns,
		State: findings.StatePresent, Fingerprint: e.ShapeFingerprint(), Worst: execLevel(e), Writer: writer, Exec: e}
	if isNodeJob(m) {
		// As the node watch's records: the node's, no sandbox.
		rec.SandboxID = ""
	}
	s := Scan{Meta: m, Outcome: Found, Stored: findings.Same, Record: &rec}
	if !w.shapes.has(rec.Fingerprint) {
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		s.Stored, s.Err = a.store.Record(ctx, execKey(m.SandboxID), scan.Decision{Record: rec})
		cancel()
		// Only a shape on the file: a limited or failed one may be
		// recorded at its next run.
		if s.Stored == findings.Recorded || s.Stored == findings.Same {
			w.shapes.add(rec.Fingerprint)
		}
	}
	a.metrics.scanned(s)
	a.cfg.Observer.Scanned(s)
}

// execKey keys the sandbox's commands' own records in the per-sandbox
// memory, apart from its scans (keyed by its id), and the memory's sweep
// removes it with the sandbox's netns. One key for all of them: keyed by
// shape, a pod naming a new chain in each command (`iptables -L x$i`)
// had a new limit each time, so unbounded findings and memory entries.
func execKey(sandbox string) string { return sandbox + "/exec" }

// maxShapes bounds the command shapes a sandbox remembers recorded; past
// it the oldest is forgotten (recorded again, within the limit, should
// it run again).
const maxShapes = 64

// shapes are the fingerprints of the command shapes a sandbox's records
// of their own reported, oldest first, at most maxShapes. The memory's
// one entry per sandbox holds only the last: without these a pod running
// two checks in turn would record each run, up to its limit every
// interval. Kept in the agent only: after a restart each shape is
// recorded at most once more. Used by the exec watch's one goroutine
// (handleExecs) only.
type shapes []string

func (s *shapes) has(fp string) bool { return slices.Contains(*s, fp) }

func (s *shapes) add(fp string) {
	if len(*s) >= maxShapes {
		*s = (*s)[1:]
	}
	*s = append(*s, fp)
}

// execLevel is the impact level of a command's own record: what a RHEL 10
// node does to it. A failure for missing kernel support is the breakage
// itself (legacy for a legacy binary, xt for iptables-nft: a missing
// extension); any other failure breaks nothing more than it did (no
// level); a read is usage of the tooling, at the native level unless the
// binary is legacy.
func execLevel(e *findings.Exec) string {
	switch {
	case e.MissingKernelSupport && e.Backend == execwatch.BackendLegacy:
		return findings.ImpactLegacy
	case e.MissingKernelSupport:
		return findings.ImpactXt
	case e.Failed:
		return ""
	case e.Backend == execwatch.BackendLegacy:
		return findings.ImpactLegacy
	}
	return findings.ImpactNative
}
