package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/execwatch"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
	"github.com/iptables-alerter/iptables-alerter/lib/watch"
)

// execScan waits for the next scan or record of the exec watch whose
// command line holds marker, skipping others.
func execScan(t *testing.T, rec *recorder, marker string) Scan {
	t.Helper()
	for {
		s := rec.wait(t, 1)[0]
		if s.Record != nil && s.Record.Exec != nil && strings.Contains(strings.Join(s.Record.Exec.Argv, " "), marker) {
			return s
		}
	}
}

// heldLegacy runs iptables-legacy -w with args in ns, held until a's exec
// watch has read it (nstest.RunHeld), and returns its output: TestExecWatch
// waited 30 s for a scan that never came, in CI for its legacy write, with
// both cores busy for its runs of -C.
func heldLegacy(t *testing.T, a *Agent, ns *nstest.NS, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.Name, "iptables-legacy", "-w", "60"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := nstest.RunHeld(t, cmd, func(pid int) bool {
		w := a.execs.w.Load()
		if w == nil {
			return false
		}
		c, ok := w.Lookup(pid)
		return ok && strings.HasSuffix(c.Exe, "xtables-legacy-multi")
	})
	return out.String(), err
}

// TestExecWatch (issue 28): real iptables commands in a watched pod's
// netns. A legacy write is scanned at once, with its command and writer; a
// write the kernel refuses (-t bogus: exit 3) is a failed finding with no
// rules, breaking; a -C of an absent rule (exit 1) is no failure, and a -C
// run 20 times is one finding; an iptables-nft write is one finding, the
// nftables watch's, with the command joined.
func TestExecWatch(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy", "iptables-nft")
	dir := t.TempDir()
	rec := newRecorder()
	a := startWatching(t, dir, rec, func(c *Config) { c.ExecWatch = true })
	ns := nstest.New(t)
	p := pod("e1", ns.Path())
	if err := a.RunPodSandbox(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	ready(t, a, p.Id)
	execUp(t, a)

	if out, err := heldLegacy(t, a, ns, "-t", "nat", "-A", "OUTPUT", "-m", "comment", "--comment", "legacy-write", "-j", "ACCEPT"); err != nil {
		t.Fatalf("legacy write: %v\n%s", err, out)
	}
	s := execScan(t, rec, "legacy-write")
	r := s.Record
	if s.Meta.Source != SourceExec || s.Stored != findings.Recorded || r.Legacy.Rules != 1 || r.Exec.ExitCode != 0 || !r.Exec.Exited || r.Exec.Failed {
		t.Fatalf("legacy write: %s source %s legacy rules %d exec %+v", s.Label(), s.Meta.Source, r.Legacy.Rules, r.Exec)
	}
	if r.Exec.Backend != "legacy" || r.Exec.Operation != "write" || r.Exec.Table != "nat" || r.Exec.Chain != "OUTPUT" || r.Writer == nil || r.Writer.Gone {
		t.Errorf("legacy write: exec %+v writer %+v", r.Exec, r.Writer)
	}
	if r.Pod.UID != p.Uid {
		t.Errorf("pod %+v, want %s", r.Pod, p.Uid)
	}

	beforeBogus := time.Now()
	if out, err := heldLegacy(t, a, ns, "-t", "bogus", "-A", "OUTPUT", "-m", "comment", "--comment", "bogus-write", "-j", "ACCEPT"); err == nil {
		t.Fatalf("-t bogus worked: %s", out)
	}
	s = execScan(t, rec, "bogus-write")
	afterBogus := time.Now() // its exit read, its count taken
	r = s.Record
	if s.Stored != findings.Recorded || !r.Failed() || !r.Exec.MissingKernelSupport || r.Exec.ExitCode != 3 || r.Worst != findings.ImpactLegacy || r.HasUsage() || r.KnownState() != findings.StatePresent {
		t.Errorf("failed write: %s exec %+v worst %q", s.Label(), r.Exec, r.Worst)
	}

	for i := 0; i < 20; i++ {
		if _, err := heldLegacy(t, a, ns, "-C", "INPUT", "-m", "comment", "--comment", "check-absent", "-j", "DROP"); err == nil {
			t.Fatal("-C of an absent rule exited 0")
		}
	}
	recorded := 0
	for i := 0; i < 20; i++ {
		s = execScan(t, rec, "check-absent")
		if s.Record.Failed() || s.Record.Exec.ExitCode != 1 || s.Record.Exec.Operation != "read" {
			t.Errorf("-C: exec %+v", s.Record.Exec)
		}
		if s.Stored == findings.Recorded {
			recorded++
		}
	}
	if recorded != 1 {
		t.Errorf("20 runs of -C recorded %d findings, want 1", recorded)
	}

	// The pod's counts: the legacy write, the failed one, 20 checks.
	if got := a.usage.execCounts(); len(got) != 1 || got[0].name != p.Name || got[0].attempts != 22 || got[0].failures != 1 {
		t.Errorf("pod command counts %+v, want 22 attempts, 1 failure", got)
	} else if f := got[0].lastFailure; f.Before(beforeBogus) || f.After(afterBogus) {
		// The alert rules tell a new failure from an old one by it.
		t.Errorf("the pod's last failure at %s, want the failed write's end, between %s and %s", f, beforeBogus, afterBogus)
	}
	ns.Run("iptables-nft", "-A", "FORWARD", "-m", "comment", "--comment", "nft-write", "-j", "DROP")
	s = execScan(t, rec, "nft-write")
	if s.Meta.Source != SourceWatch || s.Record.Nft.Rules != 1 || s.Record.Writer == nil || s.Record.Exec.Backend != "nft" {
		t.Errorf("nft write: source %s rules %d writer %+v exec %+v", s.Meta.Source, s.Record.Nft.Rules, s.Record.Writer, s.Record.Exec)
	}
}

// missRecorder is a recorder that hears the exec watch's misses.
type missRecorder struct {
	*recorder
	missed chan string
}

func (m missRecorder) ExecLost(l ExecLosses) {
	for _, e := range l.Examples {
		// Never blocking the agent: once the test has what it waits
		// for, nobody reads.
		select {
		case m.missed <- e:
		default:
		}
	}
}
func (m missRecorder) ExecOff(error) {}

// TestExecWatchNode: in node mode a command in the node's netns (a
// stand-in) is the node's, with no pod; one in a netns of no watched
// sandbox is recorded nowhere, and said so.
func TestExecWatchNode(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy")
	dir := t.TempDir()
	node, other := nstest.New(t), nstest.New(t)
	rec := missRecorder{newRecorder(), make(chan string, 100)}
	a := startWatching(t, dir, rec, func(cfg *Config) {
		cfg.ExecWatch, cfg.ExecLossEvery = true, 100*time.Millisecond
		cfg.HostProc, cfg.HostNetns = nstest.HostProc(t, node.Path()), node.Path()
	})
	// The node watch's start scan: its monitor is open, and the exec
	// watch before it.
	nodeScan(t, rec.recorder)
	if up, why := a.ExecWatching(); !up {
		t.Fatalf("exec watch not open before the first scan: %q", why)
	}
	if _, err := node.Exec("iptables-legacy", "-t", "bogus", "-A", "INPUT", "-m", "comment", "--comment", "node-bogus", "-j", "ACCEPT"); err == nil {
		t.Fatal("-t bogus worked")
	}
	s := execScan(t, rec.recorder, "node-bogus")
	if r := s.Record; r.Subject != findings.SubjectNode || r.SandboxID != "" || r.Pod != (findings.Pod{}) || !r.Failed() || s.Stored != findings.Recorded {
		t.Errorf("node command: subject %q sandbox %q pod %+v exec %+v %s", r.Subject, r.SandboxID, r.Pod, r.Exec, s.Label())
	}
	// The runtime's pods are known (none): the command waits
	// execPlaceWait for a sandbox, then is missed.
	if _, err := a.Synchronize(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	// Run again every few seconds until one is said: a loss report names
	// at most maxLossExamples commands, and other packages' tests run
	// iptables in namespaces of their own meanwhile (every one missed
	// too); under load a run may also end before the watch reads it
	// (missed as gone, its argv unread).
	run := func() { _, _ = other.Exec("iptables-legacy", "-w", "1", "-S", "OUTPUT", "--", "nowhere") }
	run()
	again := time.NewTicker(3 * time.Second)
	defer again.Stop()
	deadline := time.After(execPlaceWait + 30*time.Second)
	for {
		select {
		case <-again.C:
			run()
		case m := <-rec.missed:
			if !strings.Contains(m, "nowhere") {
				continue
			}
			if !strings.HasSuffix(m, "netns of no watched sandbox") {
				t.Errorf("missed: %s", m)
			}
			if v := counter(a.metrics.execMissed.WithLabelValues(missNowhere)); v < 1 {
				t.Errorf("exec_missed_total{reason=%q} %v", missNowhere, v)
			}
			return
		case <-deadline:
			t.Fatal("the command in no sandbox's netns was not reported missed")
		}
	}
}

// TestExecFailure: the status decides, never the message (the watch sees
// none).
func TestExecFailure(t *testing.T) {
	cmd := func(code, sig int, argv ...string) execwatch.Command {
		backend := execwatch.BackendLegacy
		if strings.Contains(argv[0], "-nft") {
			backend = execwatch.BackendNft
		}
		return execwatch.Command{Exited: true, Code: code, Signal: sig, Argv: argv, Shape: execwatch.ParseArgv(argv), Backend: backend}
	}
	guessed := func(c execwatch.Command) execwatch.Command {
		c.ArgvCut, c.Shape = true, execwatch.ParseArgvCut(c.Argv, true)
		return c
	}
	// noModule is a node without the x_tables modules of the families
	// named (RHEL 10: none of them).
	noModule := func(fams ...string) func(string) bool {
		return func(f string) bool { return slices.Contains(fams, f) }
	}
	for _, tc := range []struct {
		c               execwatch.Command
		failed, missing bool
	}{
		{cmd(0, 0, "iptables", "-A", "INPUT", "-j", "DROP"), false, false},
		{cmd(3, 0, "iptables", "-t", "nat", "-A", "OUTPUT", "-j", "ACCEPT"), true, true},
		{cmd(4, 0, "iptables-nft", "-A", "INPUT", "-m", "ipvs", "--ipvs"), true, true},
		{cmd(4, 0, "iptables-nft-restore"), true, true},
		{cmd(1, 0, "iptables-legacy", "-A", "INPUT", "-m", "ipvs", "--ipvs"), true, false},
		{cmd(2, 0, "iptables", "-A", "INPUT", "--bogus"), true, false},
		{cmd(1, 0, "iptables", "-C", "INPUT", "-j", "DROP"), false, false},
		{cmd(1, 0, "iptables", "-D", "INPUT", "-j", "DROP"), false, false},
		{cmd(2, 0, "iptables", "-D", "INPUT", "-j", "DROP"), true, false},
		// An idempotent script's: the chain there already, or gone.
		{cmd(1, 0, "iptables", "-t", "nat", "-N", "ISTIO_REDIRECT"), false, false},
		{cmd(1, 0, "iptables", "--new-chain", "X"), false, false},
		{cmd(1, 0, "iptables-nft", "-t", "nat", "-X", "ISTIO_REDIRECT"), false, false},
		{cmd(1, 0, "iptables-legacy", "-F", "NOPE"), false, false},
		{cmd(4, 0, "iptables-nft", "-N", "X"), true, true},
		{cmd(1, 0, "iptables", "-A", "NOPE", "-j", "ACCEPT"), true, false},
		{cmd(0, 9, "iptables-restore"), true, false},
		{cmd(3, 0, "iptables-legacy", "-t", "nat", "-L"), true, true},
		{cmd(1, 0, "iptables", "-L", "NOPE"), false, false},
		{execwatch.Command{Argv: []string{"iptables", "-F"}, Shape: execwatch.ParseArgv([]string{"iptables", "-F"})}, false, false},
		// A write guessed from a command line whose arguments were left
		// out may be a -C (helper-108 #1): its exit 1 answers no; its
		// other failures count.
		{guessed(cmd(1, 0, "iptables", "-m", "comment")), false, false},
		{guessed(cmd(2, 0, "iptables", "-m", "comment")), true, false},
		{guessed(cmd(3, 0, "iptables", "-m", "comment")), true, true},
		{guessed(cmd(0, 9, "iptables", "-m", "comment")), true, false},
	} {
		f, m := failure(tc.c, noModule())
		if f != tc.failed || m != tc.missing {
			t.Errorf("%q exit %d signal %d: failed %v missing %v, want %v %v", tc.c.Argv, tc.c.Code, tc.c.Signal, f, m, tc.failed, tc.missing)
		}
	}
	// A legacy write's status does not say why it failed: the kernel's
	// modules do. Measured: iptables-legacy-restore of a table the kernel
	// cannot set up exits 2 ("unable to initialize table");
	// ebtables-legacy exits 255 for any failure.
	for _, tc := range []struct {
		c               execwatch.Command
		absent          []string
		failed, missing bool
	}{
		{cmd(2, 0, "iptables-legacy-restore"), []string{"iptables"}, true, true},
		{cmd(2, 0, "iptables-legacy-restore"), nil, true, false},
		{cmd(2, 0, "ip6tables-restore"), []string{"iptables"}, true, false},
		{cmd(2, 0, "ip6tables-restore"), []string{"ip6tables"}, true, true},
		{cmd(255, 0, "ebtables-legacy", "-A", "FORWARD", "-j", "DROP"), []string{"ebtables"}, true, true},
		{cmd(255, 0, "ebtables-legacy", "-A", "FORWARD", "-j", "DROP"), []string{"iptables"}, true, false},
		{cmd(2, 0, "arptables-legacy-restore"), []string{"arptables"}, true, true},
		// An answer is no failure; a kill says nothing of the kernel;
		// a test restore and a read write nothing; nft has its status.
		{cmd(1, 0, "iptables-legacy", "-D", "INPUT", "-j", "DROP"), []string{"iptables"}, false, false},
		{cmd(0, 9, "iptables-legacy-restore"), []string{"iptables"}, true, false},
		{cmd(2, 0, "iptables-legacy-restore", "--test"), []string{"iptables"}, false, false},
		{cmd(2, 0, "iptables-legacy", "-L", "INPUT"), []string{"iptables"}, false, false},
		{cmd(1, 0, "iptables-nft-restore"), []string{"iptables"}, true, false},
	} {
		f, m := failure(tc.c, noModule(tc.absent...))
		if f != tc.failed || m != tc.missing {
			t.Errorf("%q exit %d, modules absent %q: failed %v missing %v, want %v %v", tc.c.Argv, tc.c.Code, tc.absent, f, m, tc.failed, tc.missing)
		}
	}
	// Exit 4 is missing kernel support from iptables-nft only, and never
	// without CAP_NET_ADMIN. Measured with 1.8.9: iptables-legacy -w 1
	// while another holds the xtables lock exits 4; iptables-nft -X of a
	// chain still referenced exits 4 (EBUSY); iptables-nft without
	// CAP_NET_ADMIN exits 4 ("Could not fetch rule set generation id:
	// Permission denied (you must be root)"), iptables-legacy 3.
	noCap := func(c execwatch.Command) execwatch.Command { c.NoNetAdmin = true; return c }
	for _, tc := range []struct {
		c               execwatch.Command
		failed, missing bool
	}{
		{cmd(4, 0, "iptables-legacy", "-w", "1", "-C", "INPUT", "-j", "ACCEPT"), false, false},
		{cmd(4, 0, "iptables-legacy", "-w", "1", "-S"), false, false},
		{cmd(4, 0, "iptables-legacy", "-w", "1", "-A", "INPUT", "-j", "ACCEPT"), true, false},
		{cmd(4, 0, "iptables-nft", "-X", "A"), false, false},
		{cmd(4, 0, "iptables-nft", "--delete-chain", "A"), false, false},
		{cmd(4, 0, "iptables-nft", "-L"), true, true},
		{noCap(cmd(4, 0, "iptables-nft", "-L")), false, false},
		{noCap(cmd(4, 0, "iptables-nft", "-A", "INPUT", "-j", "ACCEPT")), true, false},
		{noCap(cmd(3, 0, "iptables-legacy", "-L")), false, false},
		{noCap(cmd(3, 0, "iptables-legacy", "-A", "INPUT", "-j", "ACCEPT")), true, false},
	} {
		f, m := failure(tc.c, noModule())
		if f != tc.failed || m != tc.missing {
			t.Errorf("%q exit %d, no net admin %v: failed %v missing %v, want %v %v", tc.c.Argv, tc.c.Code, tc.c.NoNetAdmin, f, m, tc.failed, tc.missing)
		}
	}
	// Refused for want of the capability on any node, RHEL 10 or not.
	if f, m := failure(noCap(cmd(2, 0, "iptables-legacy-restore")), noModule("iptables")); !f || m {
		t.Errorf("a legacy restore without CAP_NET_ADMIN or ip_tables: failed %v missing %v, want true false", f, m)
	}
	if e := execRecord(noCap(cmd(4, 0, "iptables-nft", "-L")), noModule()); e.Failed || !e.NoNetAdmin || execLevel(e) != findings.ImpactNative {
		t.Errorf("a read without CAP_NET_ADMIN: %+v, level %q", e, execLevel(e))
	}
	// The record says so, at the legacy level.
	e := execRecord(cmd(2, 0, "iptables-legacy-restore"), noModule("iptables"))
	if !e.MissingKernelSupport || execLevel(e) != findings.ImpactLegacy {
		t.Errorf("legacy restore refused without ip_tables: %+v, level %q", e, execLevel(e))
	}
}

// execUp waits for the exec watch to listen (it opens beside the watch,
// not before the first scan); a reason given means it never will.
func execUp(t *testing.T, a *Agent) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		up, why := a.ExecWatching()
		switch {
		case up:
			return
		case why != "" || time.Now().After(deadline):
			t.Fatalf("exec watch off: %q", why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// counter is a counter's value.
func counter(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// TestExecParked: a command that ran in a netns before the agent knew its
// pod (the exec watch opens before the first scan, before Synchronize)
// waits for the pod, and is recorded as its.
func TestExecParked(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy")
	dir := t.TempDir()
	rec := newRecorder()
	a := startWatching(t, dir, rec, func(c *Config) { c.ExecWatch = true })
	execUp(t, a)
	ns := nstest.New(t)
	if _, err := ns.Exec("iptables-legacy", "-C", "INPUT", "-m", "comment", "--comment", "parked-marker", "-j", "DROP"); err == nil {
		t.Fatal("-C of an absent rule exited 0")
	}
	p := pod("parked", ns.Path())
	if err := a.RunPodSandbox(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	s := execScan(t, rec, "parked-marker")
	if s.Record.Pod.UID != p.Uid || s.Stored != findings.Recorded || s.Record.Exec.ExitCode != 1 {
		t.Errorf("parked command: pod %+v %s exec %+v", s.Record.Pod, s.Label(), s.Record.Exec)
	}
}

// lossRecorder hears the loss reports.
type lossRecorder struct {
	*recorder
	lost []ExecLosses
}

func (l *lossRecorder) ExecLost(x ExecLosses) { l.lost = append(l.lost, x) }
func (l *lossRecorder) ExecOff(error)         {}

// TestExecLosses: every command that ran unrecorded is counted by why and
// summed up in one report, with a few examples; nothing lost, no report.
func TestExecLosses(t *testing.T) {
	obs := &lossRecorder{recorder: newRecorder()}
	a, err := New(testConfig(t.TempDir(), obs))
	if err != nil {
		t.Fatal(err)
	}
	// The pod whose container ran the command that ended unread: its
	// count says so.
	a.watches.pods["sb"] = &watched{meta: scan.Meta{SandboxID: "sb", Pod: findings.Pod{Namespace: "ns", Name: "p"}}}
	a.watches.ctrs["c0ffee"] = ctrInfo{sandbox: "sb"}
	gone := execwatch.Command{PID: 42, Argv: []string{"iptables"}, Writer: &findings.Writer{PID: 42, Comm: "iptables", ContainerID: "c0ffee"}}
	for i := 0; i < 7; i++ {
		a.execMissed(gone, missGone)
	}
	a.execMissed(execwatch.Command{PID: 43, Argv: []string{"iptables-legacy", "-S"}}, missQueue)
	a.reportLosses()
	a.reportLosses()
	if len(obs.lost) != 1 {
		t.Fatalf("reports %+v, want one", obs.lost)
	}
	l := obs.lost[0]
	if l.Missed[missGone] != 7 || l.Missed[missQueue] != 1 || len(l.Examples) != maxLossExamples {
		t.Errorf("report %+v", l)
	}
	if want := "iptables (pid 42, container c0ffee): gone before read"; l.Examples[0] != want {
		t.Errorf("example %q, want %q", l.Examples[0], want)
	}
	if v := counter(a.metrics.execMissed.WithLabelValues(missGone)); v != 7 {
		t.Errorf("exec_missed_total{reason=%q} %v, want 7", missGone, v)
	}
	if got := a.usage.execCounts(); len(got) != 1 || got[0].name != "p" || got[0].missed != 7 || got[0].attempts != 0 {
		t.Errorf("pod command counts %+v, want 7 missed", got)
	}
}

// TestExecParkedWait: a command placed nowhere waits for its sandbox
// while the runtime has not synchronized (up to execUnsyncedWait), then
// execPlaceWait past the sync, then is missed, counted. A Synchronize
// whose connection closed while it ran neither syncs nor connects.
func TestExecParkedWait(t *testing.T) {
	a, err := New(testConfig(t.TempDir(), newRecorder()))
	if err != nil {
		t.Fatal(err)
	}
	cmd := execwatch.Command{PID: 7, Argv: []string{"iptables", "-S"}, Exited: true, Netns: 12345}
	now := time.Now()
	waiting := []parked{{cmd, now.Add(-execPlaceWait - time.Second)}, {cmd, now.Add(-execUnsyncedWait - time.Second)}}
	waiting = a.placeParked(waiting)
	if len(waiting) != 1 || counter(a.metrics.execMissed.WithLabelValues(missNowhere)) != 1 {
		t.Fatalf("before the sync: %d waiting, %v missed; want the one past execUnsyncedWait missed", len(waiting), counter(a.metrics.execMissed.WithLabelValues(missNowhere)))
	}
	a.execs.synced.Store(now.UnixNano())
	if waiting = a.placeParked(waiting); len(waiting) != 1 {
		t.Fatalf("just synced: %d waiting, want 1", len(waiting))
	}
	a.execs.synced.Store(now.Add(-execPlaceWait).UnixNano())
	if waiting = a.placeParked(waiting); len(waiting) != 0 || counter(a.metrics.execMissed.WithLabelValues(missNowhere)) != 2 {
		t.Errorf("execPlaceWait past the sync: %d waiting, %v missed", len(waiting), counter(a.metrics.execMissed.WithLabelValues(missNowhere)))
	}

	// The runtime went away (restarted): pods it starts before the agent
	// is back are known only at the next Synchronize, so a command waits
	// for that as for the first sync, and execPlaceWait from it.
	a.runtimeLost()
	waiting = a.placeParked([]parked{{cmd, now.Add(-execPlaceWait - time.Second)}})
	if len(waiting) != 1 {
		t.Fatalf("disconnected after a sync: %d waiting, want the command kept until the next sync", len(waiting))
	}
	if _, err := a.Synchronize(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	if waiting = a.placeParked(waiting); len(waiting) != 1 {
		t.Fatalf("just synced again: %d waiting, want 1", len(waiting))
	}

	// A connection that closes while its Synchronize runs (the runtime's
	// request timed out) leaves the agent disconnected, not synced: not
	// vouching for every pod while pods start unheard. Heard first by
	// the stub's OnClose, or first by the connection loop (the stub's
	// Run returned before its OnClose ran).
	for _, heard := range []string{"OnClose", "Run's return"} {
		closing := &closingObserver{}
		b, err := New(testConfig(t.TempDir(), closing))
		if err != nil {
			t.Fatal(err)
		}
		closing.lost = b.runtimeLost
		if heard != "OnClose" {
			closing.lost = func() { b.disconnected(errors.New("nri connection closed by the runtime")) }
		}
		if _, err := b.Synchronize(context.Background(), nil, nil); err != nil {
			t.Fatal(err)
		}
		if b.execs.synced.Load() != 0 {
			t.Errorf("close heard at %s: synced after a Synchronize whose connection closed while it ran", heard)
		}
		if b.health.Connected() {
			t.Errorf("close heard at %s: connected after a Synchronize whose connection closed while it ran", heard)
		}
	}
}

// closingObserver closes the agent's runtime connection (lost) as its
// sweep is queued, in the middle of Synchronize.
type closingObserver struct {
	nopObserver
	lost func()
}

func (o *closingObserver) Synced(int, int) { o.lost() }

// TestAliveWriter: a writer the nftables watch found gone is the same
// process as the exec watch read it at its exec, when the pid and the
// command are the same (a one-shot tool often exits before the watch's
// reader gets to its /proc); a writer read alive, another command at that
// pid, a pid the exec watch never saw, or a command it saw in another
// netns than the watch's (the pid reused by another pod) stay as they are.
func TestAliveWriter(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy")
	a := startWatching(t, t.TempDir(), newRecorder(), func(c *Config) { c.ExecWatch = true })
	execUp(t, a)
	ns := nstest.New(t)
	var seen execwatch.Command
	cmd := exec.Command("ip", "netns", "exec", ns.Name, "iptables-legacy", "-w", "60", "-C", "INPUT", "-j", "DROP")
	_ = nstest.RunHeld(t, cmd, func(pid int) bool {
		c, ok := a.execs.w.Load().Lookup(pid)
		if ok && strings.HasSuffix(c.Exe, "xtables-legacy-multi") {
			seen = c
			return true
		}
		return false
	})
	if seen.Writer == nil || seen.Writer.Gone {
		t.Fatalf("the exec watch read %+v", seen)
	}
	// Exited and reaped: what the nftables watch would read now.
	gone := watch.Proc{Root: a.cfg.HostProc}.Writer(seen.PID, seen.Writer.Comm)
	if !gone.Gone {
		t.Fatalf("pid %d still there after its wait: %+v", seen.PID, gone)
	}
	its, other := &watched{}, &watched{}
	its.ino.Store(seen.Netns)
	other.ino.Store(seen.Netns + 1)
	got := a.aliveWriter(gone, its)
	if got.Gone || got.PID != seen.PID || got.Comm != seen.Writer.Comm || got.PPID != os.Getpid() {
		t.Errorf("aliveWriter(%+v) = %+v, want pid %d alive, its parent this test (%d)", gone, got, seen.PID, os.Getpid())
	}
	if got == seen.Writer {
		t.Error("aliveWriter gave the exec watch's own writer, not a copy")
	}
	for _, tc := range []struct {
		name string
		wr   *findings.Writer
		ws   *watched
	}{
		{"none", nil, its},
		{"read alive", &findings.Writer{PID: seen.PID, Comm: seen.Writer.Comm, PPID: 1}, its},
		{"another command", &findings.Writer{PID: seen.PID, Comm: "nft", Gone: true}, its},
		{"a pid never seen", &findings.Writer{PID: 1 << 30, Comm: seen.Writer.Comm, Gone: true}, its},
		{"another netns", gone, other},
		{"no watch", gone, nil},
	} {
		if got := a.aliveWriter(tc.wr, tc.ws); got != tc.wr {
			t.Errorf("%s: aliveWriter(%+v) = %+v, want it unchanged", tc.name, tc.wr, got)
		}
	}
}

// TestExecRecordsBounded: a pod naming a new chain in each command
// (`iptables -L x$i`) gets at most the sandbox's limit of records of their
// own an interval and one memory entry for them all, the others limited;
// a command it ran before is not recorded again, two run in turn neither;
// another pod's commands are still recorded.
func TestExecRecordsBounded(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy")
	const limit = 3
	dir := t.TempDir()
	rec := newRecorder()
	a := startWatching(t, dir, rec, func(c *Config) { c.ExecWatch, c.Seen.Limit, c.Seen.Interval = true, limit, time.Hour })
	flood, other := nstest.New(t), nstest.New(t)
	for _, p := range []*api.PodSandbox{pod("flood", flood.Path()), pod("other", other.Path())} {
		if err := a.RunPodSandbox(context.Background(), p); err != nil {
			t.Fatal(err)
		}
		ready(t, a, p.Id)
	}
	execUp(t, a)
	// run runs iptables-legacy -L chain in ns and gives what became of its
	// record.
	run := func(ns *nstest.NS, chain string) findings.Outcome {
		t.Helper()
		if out, err := heldLegacy(t, a, ns, "-L", chain); err == nil {
			t.Fatalf("-L %s of no such chain worked: %s", chain, out)
		}
		s := execScan(t, rec, chain)
		if s.Err != nil || s.Record.Exec.Chain != chain || s.Record.SandboxID == "" {
			t.Fatalf("-L %s: %s %v exec %+v", chain, s.Label(), s.Err, s.Record.Exec)
		}
		return s.Stored
	}
	got := map[findings.Outcome]int{}
	for i := range limit + 5 {
		got[run(flood, fmt.Sprintf("flood-%02d", i))]++
	}
	if got[findings.Recorded] != limit || got[findings.Limited] != 5 {
		t.Errorf("%d chains named: %v, want %d recorded, the rest limited", limit+5, got, limit)
	}
	if out := run(flood, "flood-00"); out != findings.Same {
		t.Errorf("a command recorded before, run again: %s, want same", out)
	}
	if out := run(flood, "flood-07"); out != findings.Limited {
		t.Errorf("a limited command run again: %s, want limited", out)
	}
	got = map[findings.Outcome]int{}
	for range 3 {
		for _, c := range []string{"other-a", "other-b"} {
			got[run(other, c)]++
		}
	}
	if got[findings.Recorded] != 2 || got[findings.Same] != 4 {
		t.Errorf("another pod's two commands run in turn, three times: %v, want 2 recorded, 4 same", got)
	}
	perPod := map[string]int{}
	for _, r := range findingstest.Read(t, filepath.Join(dir, "findings.jsonl")) {
		if r.Source == SourceExec {
			perPod[r.SandboxID]++
		}
	}
	if perPod["flood"] != limit || perPod["other"] != 2 {
		t.Errorf("exec lines per sandbox %v, want flood %d, other 2", perPod, limit)
	}
	entries, err := filepath.Glob(filepath.Join(dir, "state", "sandboxes", "*.json"))
	if err != nil || len(entries) != 2 {
		t.Errorf("memory entries %q (%v), want one per sandbox", entries, err)
	}
}

// standInTool is the name this test binary answers to as a stand-in for
// an ebtables-legacy that works: this kernel (like RHEL 10's) has no
// legacy ebtables, so the real tool's writes all fail.
const standInTool = "ebtables-legacy"

// standIn waits for the file $STANDIN_RELEASE (the exec watch has read the
// command line), then exits 0 as a write that worked.
func standIn() {
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(os.Getenv("STANDIN_RELEASE")); err == nil {
			os.Exit(0)
		}
	}
	os.Exit(2)
}

// TestExecEbtablesLegacy: an ebtables-legacy write that worked was taken
// for a legacy write and scanned, and the scan, which cannot read the
// kernel's ebtables, found nothing: no finding at all. It is now the
// command's own finding, breaking (legacy). ebtables' -C changes counters:
// a write too, not a check.
func TestExecEbtablesLegacy(t *testing.T) {
	nstest.NeedRoot(t)
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tool := filepath.Join(dir, standInTool)
	if err := os.Link(self, tool); err != nil {
		data, err := os.ReadFile(self)
		if err != nil || os.WriteFile(tool, data, 0o755) != nil {
			t.Fatalf("stand-in: %v", err)
		}
	}
	rec := newRecorder()
	a := startWatching(t, dir, rec, func(c *Config) { c.ExecWatch = true })
	ns := nstest.New(t)
	p := pod("eb", ns.Path())
	if err := a.RunPodSandbox(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	ready(t, a, p.Id)
	execUp(t, a)
	for i, args := range [][]string{{"-A", "FORWARD", "--logical-in", "eb-append", "-j", "DROP"}, {"-C", "FORWARD", "1", "0", "0", "--logical-in", "eb-counters"}} {
		release := filepath.Join(dir, fmt.Sprintf("release-%d", i))
		cmd := exec.Command("ip", append([]string{"netns", "exec", ns.Name, tool}, args...)...)
		cmd.Env = append(os.Environ(), "STANDIN_RELEASE="+release)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			if w := a.execs.w.Load(); w != nil {
				if c, ok := w.Lookup(cmd.Process.Pid); ok && strings.HasSuffix(c.Exe, standInTool) {
					break
				}
			}
			if time.Now().After(end) {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("%q was not read in a minute", args)
			}
		}
		if err := os.WriteFile(release, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("stand-in %q: %v", args, err)
		}
		s := execScan(t, rec, args[len(args)-1])
		r := s.Record
		if s.Stored != findings.Recorded || r.Worst != findings.ImpactLegacy || r.Exec.Operation != "write" || r.Exec.Failed || r.Pod.UID != p.Uid {
			t.Errorf("%q: %s worst %q exec %+v", args, s.Label(), r.Worst, r.Exec)
		}
	}
}

// TestExecWriterOtherPod: a command placed in pod a by its netns whose
// cgroup names pod b's container (a nested cgroup a pod with a writable
// cgroupfs can name so) was recorded as pod a's finding in b's container.
// A container is named only when it is the placed pod's.
func TestExecWriterOtherPod(t *testing.T) {
	nstest.NeedRoot(t)
	rec := newRecorder()
	a := startWatching(t, t.TempDir(), rec, func(*Config) {})
	nsA, nsB := nstest.New(t), nstest.New(t)
	pa, pb := pod("a", nsA.Path()), pod("b", nsB.Path())
	for _, p := range []*api.PodSandbox{pa, pb} {
		if err := a.StartContainer(context.Background(), p, &api.Container{Id: "ctr-" + p.Id, Name: "app-" + p.Id}); err != nil {
			t.Fatal(err)
		}
		ready(t, a, p.Id)
	}
	for _, tc := range []struct{ writer, want string }{{"ctr-b", ""}, {"ctr-a", "ctr-a"}} {
		argv := []string{"iptables-legacy", "-L", "mark-" + tc.writer}
		c := execwatch.Command{PID: 1, Argv: argv, Exe: "/usr/sbin/xtables-legacy-multi", Backend: execwatch.BackendLegacy,
			Shape: execwatch.ParseArgv(argv), Netns: pathIno(nsA.Path()), Exited: true,
			Writer: &findings.Writer{PID: 1, Comm: "iptables-legacy", ContainerID: tc.writer}}
		if !a.execDone(c) {
			t.Fatalf("%s: not placed", tc.writer)
		}
		s := execScan(t, rec, "mark-"+tc.writer)
		if s.Record.Pod.UID != pa.Uid || s.Record.ContainerID != tc.want || s.Meta.ContainerID != tc.want {
			t.Errorf("writer in %s: pod %s, container %q (meta %q), want pod %s, container %q",
				tc.writer, s.Record.Pod.UID, s.Record.ContainerID, s.Meta.ContainerID, pa.Uid, tc.want)
		}
	}
}

// TestExecNetnsReused: a command that ran in a short-lived netns (`unshare
// -n iptables ...`, here a netns deleted after it) waits for a sandbox of
// its netns's inode; the kernel gives that inode to the next netns made,
// so a pod made then got the command. A netns made after the command ran
// is not its.
func TestExecNetnsReused(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy")
	rec := newRecorder()
	a := startWatching(t, t.TempDir(), rec, func(c *Config) { c.ExecWatch = true })
	execUp(t, a)
	// The freed inode goes to the next netns once the kernel has cleaned
	// the old one up (a work queue): new ones are made until one has it.
	// Another package's test, run beside this one, may make a netns that
	// takes it first: then the command runs again from a fresh netns, and
	// every attempt's command is a miss to wait for below.
	var reused *nstest.NS
	attempts := 0
	for reused == nil {
		if attempts++; attempts > 5 {
			t.Fatal("no new netns took the freed inode in 5 attempts of 20 s")
		}
		old := nstest.New(t)
		ino := pathIno(old.Path())
		if _, err := heldLegacy(t, a, old, "-C", "INPUT", "-m", "comment", "--comment", fmt.Sprint("reused-marker-", attempts), "-j", "DROP"); err == nil {
			t.Fatal("-C of an absent rule exited 0")
		}
		old.Delete()
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			ns := nstest.New(t)
			if pathIno(ns.Path()) == ino {
				reused = ns
				break
			}
			ns.Delete()
		}
	}
	p := pod("reused", reused.Path())
	if err := a.RunPodSandbox(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	ready(t, a, p.Id)
	a.execs.synced.Store(time.Now().UnixNano())
	// Past execPlaceWait the parked command is missed, never placed.
	deadline := time.Now().Add(execPlaceWait + 10*time.Second)
	for counter(a.metrics.execMissed.WithLabelValues(missNowhere)) < float64(attempts) {
		select {
		case s := <-rec.ch:
			if s.Record != nil && s.Record.Exec != nil && strings.Contains(strings.Join(s.Record.Exec.Argv, " "), "reused-marker") {
				t.Fatalf("a command of the deleted netns was recorded as pod %s's", s.Record.Pod.UID)
			}
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the command was neither placed nor missed")
		}
	}
}

// TestExecOfOtherNetns: a commit's writer is joined to the command the
// exec watch saw at its pid only when that command ran in the watched
// pod's netns: a pid reused by another pod's process must not carry the
// first pod's command line (its comments, its failure) into its record.
func TestExecOfOtherNetns(t *testing.T) {
	// Failed before execOf compared netns: pod B's commit at the pid of
	// pod A's failed command was given A's command.
	nstest.NeedRoot(t, "iptables-legacy")
	a := startWatching(t, t.TempDir(), newRecorder(), func(c *Config) { c.ExecWatch = true })
	nsA, nsB := nstest.New(t), nstest.New(t)
	pa, pb := pod("a", nsA.Path()), pod("b", nsB.Path())
	for _, p := range []*api.PodSandbox{pa, pb} {
		if err := a.RunPodSandbox(context.Background(), p); err != nil {
			t.Fatal(err)
		}
		ready(t, a, p.Id)
	}
	execUp(t, a)
	var seen execwatch.Command
	cmd := exec.Command("ip", "netns", "exec", nsA.Name, "iptables-legacy", "-w", "60", "-t", "bogus", "-A", "INPUT", "-m", "comment", "--comment", "pod-a-secret", "-j", "DROP")
	_ = nstest.RunHeld(t, cmd, func(pid int) bool {
		c, ok := a.execs.w.Load().Lookup(pid)
		seen = c
		return ok && strings.HasSuffix(c.Exe, "xtables-legacy-multi")
	})
	writer := &findings.Writer{PID: seen.PID, Comm: "nft"}
	if e := a.execOf(writer, a.watchOf(scan.Meta{SandboxID: pb.Id})); e != nil {
		t.Errorf("pod b's commit at pid %d was given pod a's command %q", seen.PID, e.CommandLine(200))
	}
	if e := a.execOf(writer, a.watchOf(scan.Meta{SandboxID: pa.Id})); e == nil || !strings.Contains(e.CommandLine(200), "pod-a-secret") {
		t.Errorf("pod a's own commit at pid %d: %+v, want its command", seen.PID, e)
	}
}

// TestExecFailedRestoreScans: iptables-legacy-restore commits table by
// table, so one failing at its second table exits 1 with the first
// table's rules in place. Its record says it failed, and a scan of the
// sandbox follows, as after a legacy write that worked: the rules were
// found at the next re-sweep only (helper-105 #2).
func TestExecFailedRestoreScans(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy")
	rec := newRecorder()
	a := startWatching(t, t.TempDir(), rec, func(*Config) {})
	ns := nstest.New(t)
	p := pod("restore", ns.Path())
	if err := a.StartContainer(context.Background(), p, &api.Container{Id: "ctr-restore", Name: "app"}); err != nil {
		t.Fatal(err)
	}
	ready(t, a, p.Id)
	// What the restore's first table left.
	if out, err := exec.Command("ip", "netns", "exec", ns.Name, "iptables-legacy", "-w", "60", "-t", "nat", "-A", "OUTPUT",
		"-m", "comment", "--comment", "restore-marker", "-j", "ACCEPT").CombinedOutput(); err != nil {
		t.Fatalf("iptables-legacy: %v\n%s", err, out)
	}
	argv := []string{"iptables-legacy-restore", "--noflush", "restore-marker"}
	c := execwatch.Command{PID: 1, Argv: argv, Exe: "/usr/sbin/xtables-legacy-multi", Backend: execwatch.BackendLegacy,
		Shape: execwatch.ParseArgv(argv), Netns: pathIno(ns.Path()), Exited: true, Code: 1,
		Writer: &findings.Writer{PID: 1, Comm: "iptables-legacy", ContainerID: "ctr-restore"}}
	if !a.execDone(c) {
		t.Fatal("not placed")
	}
	var failed, scanned bool
	for !failed || !scanned {
		s := rec.wait(t, 1)[0]
		r := s.Record
		switch {
		case r == nil || r.Pod.UID != p.Uid:
		case s.Meta.Stage == stageExec && r.Legacy.Rules > 0:
			scanned = true
			if r.Exec == nil || !r.Exec.Failed || r.Exec.Tool != "iptables-legacy-restore" {
				t.Errorf("the scan's record names %+v, want the failed restore", r.Exec)
			}
		case r.Exec != nil && r.Exec.Failed:
			failed = true
		}
	}
}

// TestExecCostlyPod (helper-115 #1): legacy writes in a loop in a pod
// whose looks are costly (a large native ruleset) get their scans as
// commits do (TestWatchCostlyPod): about a tenth of a worker. Each write
// was scanned at once, and the pod kept a worker busy.
func TestExecCostlyPod(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy", "nft")
	dir := t.TempDir()
	rec := newRecorder()
	a := startWatching(t, dir, rec, func(c *Config) { c.ExecWatch, c.WatchDebounce = true, 10*time.Millisecond })
	ns := nstest.New(t)
	ns.NativeRules(100_000)
	p := pod("costly-exec", ns.Path())
	if err := a.RunPodSandbox(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	ready(t, a, p.Id)
	execUp(t, a)

	costlyScans(t, rec, ns, SourceExec, "iptables-legacy -w 5 -A INPUT -j ACCEPT; iptables-legacy -w 5 -D INPUT -j ACCEPT")
}
