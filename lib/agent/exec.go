package agent

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/iptables-alerter/iptables-alerter/lib/execwatch"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

// The exec watch (Config.ExecWatch): every run of an iptables tool on the
// node, as the kernel's process events announce it (lib/execwatch), is
// placed by its network namespace in a watched sandbox (or the node's, in
// node mode) and recorded by what it did:
//
//   - a legacy write that worked: a scan of the sandbox at once, its
//     record naming the command and its writer (x_tables announce nothing;
//     the re-sweep stays the safety net);
//   - an iptables-nft write that worked: nothing of its own; the nftables
//     watch's scan of its commit carries the command (queueWatch), one
//     finding, not two;
//   - a write that failed (see failure): a record of its own with
//     exec.failed, no rules (none was made);
//   - a read (-L, -S, -C, save, a write answering no): usage of the
//     tooling, a record of its own once per pod and command shape.
//
// Records of their own are kept apart from the sandbox's scans in the
// per-sandbox memory (execKey): a clean scan never takes them back, and
// a pod running `iptables -C` every second gives one finding.

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

// Exit statuses of the iptables tools (xtables.h enum exittype).
const (
	exitOther    = 1 // OTHER_PROBLEM; -C/-D: no such rule
	exitVersion  = 3 // VERSION_PROBLEM: can't initialize table (no kernel support)
	exitResource = 4 // RESOURCE_PROBLEM: iptables-nft and restore refused by the kernel
)

// execs is the exec watch's state.
type execs struct {
	w  *execwatch.Watcher
	ch chan execwatch.Command
	wg sync.WaitGroup
	// off is why the watch is off ("" while on, or not asked for).
	mu  sync.Mutex
	off string
	up  atomic.Bool
	// dropped counts commands the queue had no room for.
	dropped atomic.Uint64
}

// ExecObserver, when the Observer implements it, hears of every tool run
// the exec watch could not record: placed nowhere, dropped, or the watch
// off. Calls must not block.
type ExecObserver interface {
	ExecMissed(cmd execwatch.Command, why string)
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
	w, err := execwatch.Open(execwatch.Options{HostProc: a.cfg.HostProc, Done: func(c execwatch.Command) {
		select {
		case e.ch <- c:
		default:
			e.dropped.Add(1)
			a.execMissed(c, "queue full")
		}
	}})
	if err != nil {
		a.execOff(err)
		return
	}
	e.w = w
	e.up.Store(true)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for c := range e.ch {
			a.execDone(c)
		}
	}()
}

// stopExecs closes the watch; the commands queued are handled first.
func (a *Agent) stopExecs() {
	e := a.execs
	if e.w == nil {
		return
	}
	// Close ends the reader: nothing more is queued.
	e.w.Close()
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

func (a *Agent) execMissed(c execwatch.Command, why string) {
	a.metrics.execs.WithLabelValues(why).Inc()
	if o, ok := a.cfg.Observer.(ExecObserver); ok {
		o.ExecMissed(c, why)
	}
}

// ExecWatching tells whether the exec watch listens, and if not why ("" when
// it was not asked for).
func (a *Agent) ExecWatching() (bool, string) {
	a.execs.mu.Lock()
	defer a.execs.mu.Unlock()
	return a.execs.up.Load(), a.execs.off
}

// execOf is the command the exec watch saw run as writer's process: an
// iptables-nft commit's, to join to the watch's record. Nil when none.
func (a *Agent) execOf(writer *findings.Writer) *findings.Exec {
	if writer == nil || a.execs.w == nil {
		return nil
	}
	c, ok := a.execs.w.Lookup(writer.PID)
	if !ok {
		return nil
	}
	return execRecord(c)
}

// execRecord is what the record says of a command.
func execRecord(c execwatch.Command) *findings.Exec {
	e := &findings.Exec{Argv: c.Argv, ArgvCut: c.ArgvCut, Binary: c.Exe, Tool: c.Shape.Tool, Backend: c.Backend,
		Operation: c.Shape.Operation, Command: c.Shape.Command, Table: c.Shape.Table, Chain: c.Shape.Chain,
		Exited: c.Exited, ExitCode: c.Code, Signal: c.Signal}
	e.Failed, e.MissingKernelSupport = failure(c)
	return e
}

// failure decides from the status alone (the watch sees no message): a
// write fails when it exits non-zero or is killed, except -C and -D
// exiting 1, which answer "no such rule". Exit 3 (VERSION_PROBLEM: "can't
// initialize iptables table ... do you need to insmod?") and 4
// (RESOURCE_PROBLEM: iptables-nft and the restore tools when the kernel
// refuses, as for "Extension X revision 0 not supported, missing kernel
// module?"; legacy iptables exits 1 for that one, indistinguishable from
// other failures) mean missing kernel support, for a read too: the
// breakage of a RHEL 10 node. Exit 4 is also a timed-out wait for the
// xtables lock.
func failure(c execwatch.Command) (failed, missing bool) {
	if !c.Exited {
		return false, false
	}
	missing = c.Signal == 0 && (c.Code == exitVersion || c.Code == exitResource)
	if !c.Shape.Write() {
		// A read, a save, a test restore.
		return missing, missing
	}
	if c.Signal != 0 {
		return true, false
	}
	if c.Code == 0 || c.Code == exitOther && c.Shape.Answers() {
		return false, false
	}
	return true, missing
}

// execDone handles one ended command (see the top of this file).
func (a *Agent) execDone(c execwatch.Command) {
	if !c.Exited {
		a.execMissed(c, "exit not seen")
		return
	}
	w, why := a.placeExec(c)
	if w == nil {
		if why != "" {
			a.execMissed(c, why)
		} else {
			a.metrics.execs.WithLabelValues("node off").Inc()
		}
		return
	}
	e := execRecord(c)
	writer := a.placeWriter(c.Writer)
	if !w.node {
		a.usage.Exec(w.meta, e.Failed)
	}
	switch {
	case e.Failed:
		a.metrics.execs.WithLabelValues("failed").Inc()
		a.recordExec(w, e, writer)
	case c.Shape.Write() && c.Backend == execwatch.BackendLegacy:
		a.metrics.execs.WithLabelValues("legacy write").Inc()
		m := w.meta
		m.Source, m.Stage = SourceExec, stageExec
		if writer != nil && writer.ContainerID != "" && !w.node {
			m.ContainerID, m.Container = writer.ContainerID, writer.Container
		}
		if w.stopped() || !a.queue.add(job{meta: m, writer: writer, exec: e}) {
			a.scanned(Scan{Meta: m, Outcome: Dropped})
		}
	case c.Shape.Write():
		// iptables-nft: the nftables watch's scan of the commit names it.
		a.metrics.execs.WithLabelValues("nft write").Inc()
	default:
		a.metrics.execs.WithLabelValues("read").Inc()
		a.recordExec(w, e, writer)
	}
}

// placeExec finds the watched sandbox whose netns the command ran in: the
// node's watch for the node's netns in node mode. Nil with why "" for the
// node's netns with node mode off (not recorded, as the watch's node mode
// records nothing then), else with why it is placed nowhere.
func (a *Agent) placeExec(c execwatch.Command) (*watched, string) {
	if c.Netns == 0 {
		return nil, "netns unreadable"
	}
	ws := a.watches
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.node != nil && ws.node.ino.Load() == c.Netns {
		return ws.node, ""
	}
	for _, w := range ws.pods {
		if w.ino.Load() == c.Netns {
			return w, ""
		}
	}
	if a.isNodeIno(c.Netns) {
		return nil, ""
	}
	return nil, "netns of no watched sandbox"
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

// recordExec records a command's own finding, once per sandbox and
// command shape (execKey).
func (a *Agent) recordExec(w *watched, e *findings.Exec, writer *findings.Writer) {
	m := w.meta
	m.Source, m.Stage = SourceExec, stageExit
	if writer != nil && writer.ContainerID != "" && !w.node {
		m.ContainerID, m.Container = writer.ContainerID, writer.Container
	}
	rec := findings.Record{Time: findings.Now(), Node: m.Node, Subject: m.Subject, Source: m.Source, Stage: m.Stage,
		ContainerID: m.ContainerID, SandboxID: m.SandboxID, Pod: m.Pod, Container: m.Container, Image: m.Image, Netns: m.Netns,
		State: findings.StatePresent, Fingerprint: e.ShapeFingerprint(), Worst: execLevel(e), Writer: writer, Exec: e}
	if isNodeJob(m) {
		// As the node watch's records: the node's, no sandbox.
		rec.SandboxID = ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	out, err := a.store.Record(ctx, execKey(m.SandboxID, rec.Fingerprint), scan.Decision{Record: rec})
	s := Scan{Meta: m, Outcome: Found, Stored: out, Record: &rec, Err: err}
	a.metrics.scanned(s)
	a.cfg.Observer.Scanned(s)
}

// execKey keys a command shape's entry in the per-sandbox memory, apart
// from the sandbox's scans (keyed by its id): the memory's sweep removes
// it with the sandbox's netns.
func execKey(sandbox, fingerprint string) string { return sandbox + "/exec/" + fingerprint }

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
