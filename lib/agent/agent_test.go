package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/iptables-alerter/iptables-alerter/internal/child"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/ipset"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

// TestMain lets the scans re-execute this test binary as their probes.
func TestMain(m *testing.M) {
	child.Main(inspect.LegacyProbe, ipset.Probe)
	if filepath.Base(os.Args[0]) == standInTool {
		standIn()
	}
	if dir := os.Getenv(runtimeProcessEnv); dir != "" {
		runtimeProcess(dir)
	}
	os.Exit(m.Run())
}

// recorder is an Observer that keeps everything for the test.
type recorder struct {
	mu      sync.Mutex
	scans   []Scan
	handled map[string][]time.Duration
	ch      chan Scan
}

func newRecorder() *recorder {
	return &recorder{handled: map[string][]time.Duration{}, ch: make(chan Scan, 100)}
}

func (r *recorder) Handled(e string, d time.Duration) {
	r.mu.Lock()
	r.handled[e] = append(r.handled[e], d)
	r.mu.Unlock()
}
func (r *recorder) Scanned(s Scan)         { r.ch <- s }
func (r *recorder) Synced(int, int)        {}
func (r *recorder) Connection(bool, error) {}

// wait collects n scans or fails.
func (r *recorder) wait(t *testing.T, n int) []Scan {
	t.Helper()
	var got []Scan
	for len(got) < n {
		select {
		case s := <-r.ch:
			got = append(got, s)
		case <-time.After(30 * time.Second):
			t.Fatalf("got %d scans, want %d: %+v", len(got), n, got)
		}
	}
	return got
}

// receive gives what comes on ch within 30 s, and fails the test without
// it.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s within 30 s", what)
	}
	var zero T
	return zero
}

// release lets n queued scans run.
// checkHandlers: every handler the recorder saw answered within the
// runtime's NRI request timeout (2 s, past which the runtime drops the
// plugin). That no handler waits for a scan is proven by order, not time:
// the tests call the handlers before release lets any scan run, so a
// handler waiting for one never returns. Their times (microseconds on a
// quiet machine) are logged.
func checkHandlers(t *testing.T, rec *recorder) {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for e, ds := range rec.handled {
		var longest time.Duration
		for _, d := range ds {
			longest = max(longest, d)
			if d >= 2*time.Second {
				t.Errorf("%s took %v, past the runtime's 2 s NRI timeout", e, d)
			}
		}
		t.Logf("%s: %d calls, longest %v", e, len(ds), longest)
	}
}

// hand gives the next scan taken its turn (see Agent.hold), failing the
// test if no worker waits for one within a minute: a scan the test wants
// that was never queued.
func hand(t *testing.T, a *Agent) {
	t.Helper()
	select {
	case a.hold <- struct{}{}:
	case <-time.After(time.Minute):
		t.Fatal("no scan waited for its turn within a minute")
	}
}

func release(a *Agent, n int) {
	for i := 0; i < n; i++ {
		a.hold <- struct{}{}
	}
}

func pod(id, path string) *api.PodSandbox {
	p := &api.PodSandbox{Id: id, Name: "pod-" + id, Namespace: "team-a", Uid: "uid-" + id, Linux: &api.LinuxPodSandbox{}}
	if path != "" {
		p.Linux.Namespaces = []*api.LinuxNamespace{{Type: "network", Path: path}}
	}
	return p
}

// startAgent runs an agent with its workers against a socket nobody
// listens on: the connection loop retries in the background while the
// test calls the handlers as the runtime would.
func startAgent(t *testing.T, dir string, rec *recorder, scanTimeout ...time.Duration) *Agent {
	t.Helper()
	return startAgentWith(t, dir, rec, func(cfg *Config) {
		if len(scanTimeout) > 0 {
			cfg.ScanTimeout = scanTimeout[0]
		}
	})
}

// testConfig is the tests' agent: files under dir, no runtime listening.
func testConfig(dir string, obs Observer) Config {
	return Config{
		Socket: filepath.Join(dir, "no-nri.sock"), Node: "node-1",
		Log:  findings.Log{Path: filepath.Join(dir, "findings.jsonl")},
		Seen: findings.Seen{Dir: filepath.Join(dir, "state")}, Observer: obs,
	}
}

// startAgentWith is startAgent with the test's changes to the config.
func startAgentWith(t *testing.T, dir string, obs Observer, change func(*Config)) *Agent {
	t.Helper()
	cfg := testConfig(dir, obs)
	change(&cfg)
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.hold = make(chan struct{})
	// The test is the runtime, calling the handlers.
	a.runtime = noRuntime
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		close(a.hold)
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return a
}

// TestHandlers: each NRI moment, on real network namespaces. The sweep
// finds the pod with rules and neither the clean nor the host-network one;
// PostStartContainer and StopContainer give one finding per distinct
// usage; StopContainer's scan reads a namespace whose pin the runtime
// removed right after the call, because the handler opened it; no handler
// waits for a scan (checkHandlers).
func TestHandlers(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	dir := t.TempDir()
	rec := newRecorder()
	a := startAgent(t, dir, rec)
	used, clean := nstest.New(t), nstest.New(t)
	used.Run("iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "80", "-j", "DROP")

	// Sweep: three pods, two with a netns.
	if _, err := a.Synchronize(context.Background(), []*api.PodSandbox{pod("a", used.Path()), pod("b", clean.Path()), pod("host", "")}, nil); err != nil {
		t.Fatal(err)
	}
	release(a, 2)
	got := rec.wait(t, 2)
	outcomes := map[string]string{}
	for _, s := range got {
		outcomes[s.Meta.SandboxID] = s.Label()
		if s.Meta.Source != SourceSweep {
			t.Errorf("sweep scan has source %q", s.Meta.Source)
		}
	}
	if outcomes["a"] != string(findings.Recorded) || outcomes["b"] != string(Clean) {
		t.Fatalf("sweep outcomes %v, want a recorded and b clean", outcomes)
	}

	// PostStartContainer on the same usage: nothing new.
	ctr := &api.Container{Id: "c1", Name: "app", Annotations: map[string]string{"io.kubernetes.cri.image-name": "example/app:1"}}
	if err := a.PostStartContainer(context.Background(), pod("a", used.Path()), ctr); err != nil {
		t.Fatal(err)
	}
	release(a, 1)
	if s := rec.wait(t, 1)[0]; s.Stored != findings.Same || s.Meta.Source != SourcePostStart {
		t.Fatalf("poststart with unchanged rules: %+v, want same", s)
	}

	// The app adds a rule, then stops; the runtime removes the pin right
	// after StopContainer returns. The scan still reads it.
	used.Run("iptables-nft", "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "--dport", "15001", "-j", "REDIRECT", "--to-ports", "15006")
	if _, err := a.StopContainer(context.Background(), pod("a", used.Path()), ctr); err != nil {
		t.Fatal(err)
	}
	used.Delete()
	release(a, 1)
	s := rec.wait(t, 1)[0]
	if s.Stored != findings.Recorded || s.Meta.Source != SourceStop || s.Record.Nft.Rules != 2 || s.Record.Image != "example/app:1" {
		t.Fatalf("stop scan: %+v (record %+v), want recorded with 2 rules", s, s.Record)
	}

	// Gone before the handler: reported, no scan queued.
	if _, err := a.StopContainer(context.Background(), pod("a", used.Path()), ctr); err != nil {
		t.Fatal(err)
	}
	if s := rec.wait(t, 1)[0]; s.Outcome != Gone {
		t.Fatalf("stop of a gone netns: %+v, want gone", s)
	}

	recs := findingstest.Read(t, filepath.Join(dir, "findings.jsonl"))
	if len(recs) != 2 || recs[0].Source != SourceSweep || recs[1].Source != SourceStop || recs[0].SandboxID != "a" || recs[1].Pod.Name != "pod-a" {
		t.Fatalf("findings file: %+v, want the sweep's and the stop's for pod a", recs)
	}
	checkHandlers(t, rec)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.handled["StopContainer"]) != 2 || len(rec.handled["Synchronize"]) != 1 {
		t.Errorf("handler timings %v", rec.handled)
	}
}

// TestBadIndex: a plugin index that is not two digits is a configuration
// error, the only kind the command exits non-zero on.
func TestBadIndex(t *testing.T) {
	if _, err := New(Config{PluginIndex: "x1"}); err == nil {
		t.Fatal("index x1 accepted")
	}
}

// TestUnreachable: a running pod's netns path the agent cannot see (as when
// the netns directory is not mounted into its container: here a path under
// a directory that does not exist) is unreachable, with an error, at the
// sweep and at PostStartContainer, never clean nor gone; the same path at a
// stop is gone, benign. No finding is written either way.
func TestUnreachable(t *testing.T) {
	dir := t.TempDir()
	rec := newRecorder()
	a := startAgent(t, dir, rec)
	missing := filepath.Join(dir, "not-mounted", "var", "run", "netns", "cni-1234")

	// Running pods: a container of each runs (a stopped sandbox's netns
	// gone is no error, see TestStoppedSandbox).
	ctrs := []*api.Container{running("a"), running("b")}
	if _, err := a.Synchronize(context.Background(), []*api.PodSandbox{pod("a", missing), pod("b", missing)}, ctrs); err != nil {
		t.Fatal(err)
	}
	release(a, 2)
	for _, s := range rec.wait(t, 2) {
		if s.Outcome != Unreachable || s.Err == nil || s.Meta.Source != SourceSweep {
			t.Fatalf("sweep of an unseen netns: %+v, want unreachable with an error", s)
		}
	}
	ctr := &api.Container{Id: "c1", Name: "app"}
	if err := a.PostStartContainer(context.Background(), pod("a", missing), ctr); err != nil {
		t.Fatal(err)
	}
	if s := rec.wait(t, 1)[0]; s.Outcome != Unreachable || s.Err == nil || s.Meta.Source != SourcePostStart {
		t.Fatalf("poststart of an unseen netns: %+v, want unreachable with an error", s)
	}
	if _, err := a.StopContainer(context.Background(), pod("a", missing), ctr); err != nil {
		t.Fatal(err)
	}
	if s := rec.wait(t, 1)[0]; s.Outcome != Gone || s.Err != nil {
		t.Fatalf("stop of a missing netns: %+v, want gone", s)
	}
	if recs := findingstest.Read(t, filepath.Join(dir, "findings.jsonl")); len(recs) != 0 {
		t.Fatalf("findings %+v, want none", recs)
	}
	// Pod b still runs, unseen: the agent has not looked at every pod.
	if _, _, ok := a.known.everyLooked(); ok {
		t.Error("every pod looked at, with pod b's netns never opened")
	}
}

// TestLegacyBusy: the agent reads legacy x_tables in-process. While a
// neighbour holds the host-wide x_tables mutex, a scan is abandoned at its
// deadline and, its thread stuck in the kernel, later scans skip the legacy
// read at once: every finding is truncated with "legacy x_tables busy",
// never clean, and the handlers stay fast. Once the mutex is free, scans
// are complete again.
func TestLegacyBusy(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "iptables-legacy-restore")
	nstest.NeedIPTables(t)
	dir := t.TempDir()
	rec := newRecorder()
	const timeout = 500 * time.Millisecond
	a := startAgent(t, dir, rec, timeout)
	victim := nstest.New(t)
	victim.Run("iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "80", "-j", "DROP")

	stop := nstest.HoldXTMutex(t)
	pods := []*api.PodSandbox{pod("a", victim.Path()), pod("b", victim.Path()), pod("c", victim.Path()), pod("d", victim.Path())}
	if _, err := a.Synchronize(context.Background(), pods, nil); err != nil {
		t.Fatal(err)
	}
	ctr := &api.Container{Id: "c1", Name: "app"}
	release(a, len(pods))
	fast := 0
	for _, s := range rec.wait(t, len(pods)) {
		if s.Stored != findings.Recorded || !s.Record.Truncated || !strings.Contains(s.Record.Error, "legacy x_tables busy") || s.Record.Nft.Rules != 1 {
			t.Fatalf("scan under the x_tables mutex: %+v (record %+v), want recorded, truncated, legacy x_tables busy, the nft rule", s, s.Record)
		}
		// Held, the mutex would hold the scan until the test ends: the
		// margin is a loaded machine's.
		if s.Duration > timeout+3*time.Second {
			t.Errorf("scan took %v with a %v deadline", s.Duration, timeout)
		}
		if s.Duration < timeout/2 {
			fast++
		}
	}
	// The first scan waits its deadline; with its thread stuck, later
	// ones do not wait at all.
	if fast == 0 {
		t.Errorf("every scan waited for the stuck legacy read")
	}
	if err := a.PostStartContainer(context.Background(), pod("a", victim.Path()), ctr); err != nil {
		t.Fatal(err)
	}
	checkHandlers(t, rec)
	release(a, 1)
	if s := rec.wait(t, 1)[0]; s.Record == nil || !s.Record.Truncated {
		t.Fatalf("poststart scan under the x_tables mutex: %+v, want a truncated finding", s)
	}

	// The mutex free, the stuck read returns and a scan is complete.
	stop()
	for end := time.Now().Add(30 * time.Second); ; {
		if err := a.PostStartContainer(context.Background(), pod("a", victim.Path()), ctr); err != nil {
			t.Fatal(err)
		}
		release(a, 1)
		s := rec.wait(t, 1)[0]
		if s.Stored == findings.Recorded && !s.Record.Truncated && s.Record.Error == "" {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("still no complete scan 30 s after the mutex was freed: %+v (record %+v)", s, s.Record)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestUsageKeptAcrossRestart: an agent restarted (a rollout, the unit's
// restart) follows no pod yet; a pod seen with legacy rules that keeps the
// x_tables lock busy gives it a look with its nftables rule alone, Same for
// the record step, whose level the agent took: the pod's legacy series and
// IPTablesBreakingOnRHEL10 cleared while its legacy rule was there. The
// record step's memory keeps the worse level, and the new agent takes it.
func TestUsageKeptAcrossRestart(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "iptables-legacy")
	nstest.NeedIPTables(t)
	dir := t.TempDir()
	const timeout = 500 * time.Millisecond
	ns := nstest.New(t)
	ns.Run("iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "80", "-j", "DROP")
	ns.Run("iptables-legacy", "-A", "INPUT", "-p", "tcp", "--dport", "81", "-j", "DROP")
	worst := func(a *Agent) (string, int) {
		for _, p := range a.usage.Pods() {
			if p.SandboxID == "a" {
				return p.Worst, p.Impact.Legacy
			}
		}
		return "none", 0
	}
	look := func(a *Agent, rec *recorder) Scan {
		t.Helper()
		if _, err := a.Synchronize(context.Background(), []*api.PodSandbox{pod("a", ns.Path())}, nil); err != nil {
			t.Fatal(err)
		}
		release(a, 1)
		return rec.wait(t, 1)[0]
	}
	first := newRecorder()
	a := startAgent(t, dir, first, timeout)
	if s := look(a, first); s.Stored != findings.Recorded || s.Record.Truncated {
		t.Fatalf("first look: %+v (record %+v), want a complete record", s, s.Record)
	}
	if w, n := worst(a); w != findings.ImpactLegacy || n != 1 {
		t.Fatalf("first agent: worst %s, %d legacy rules; want legacy, 1", w, n)
	}

	stop := nstest.HoldXTMutex(t)
	defer stop()
	second := newRecorder()
	b := startAgent(t, dir, second, timeout)
	s := look(b, second)
	if s.Record == nil || !s.Record.Truncated || s.Record.Worst == findings.ImpactLegacy {
		t.Fatalf("look under the x_tables mutex: %+v (record %+v), want truncated, without the legacy rule", s, s.Record)
	}
	if w, n := worst(b); w != findings.ImpactLegacy || n != 1 {
		t.Errorf("restarted agent after a truncated look: worst %s, %d legacy rules; want legacy, 1 (kept)", w, n)
	}
}

// TestMemorySweptOncePerInterval: the per-sandbox memory's sweep (dropping
// entries whose netns is gone) runs with the first recorded finding, not
// again for the next one within memorySweepEvery: it reads every entry, and
// after each finding of a registration sweep it was quadratic in the pods.
func TestMemorySweptOncePerInterval(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	dir := t.TempDir()
	rec := newRecorder()
	a := startAgent(t, dir, rec)
	used := nstest.New(t)
	used.Run("iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "80", "-j", "DROP")
	ctx := context.Background()
	// stale records an entry for a sandbox whose netns is gone, and tells
	// whether one was there already.
	stale := func() bool {
		t.Helper()
		out, err := a.cfg.Seen.RecordFinding(ctx, "stopped", findings.Record{Netns: filepath.Join(dir, "gone-netns"), Fingerprint: "fp", State: findings.StatePresent}, findings.Parts{}, func() error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		return out == findings.Same
	}
	stale()
	if _, err := a.Synchronize(ctx, []*api.PodSandbox{pod("a", used.Path())}, nil); err != nil {
		t.Fatal(err)
	}
	release(a, 1)
	if s := rec.wait(t, 1)[0]; s.Stored != findings.Recorded {
		t.Fatalf("sweep scan: %+v, want recorded", s)
	}
	if stale() {
		t.Fatal("the first recorded finding did not sweep the memory")
	}
	used.Run("iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "81", "-j", "DROP")
	if err := a.PostStartContainer(ctx, pod("a", used.Path()), &api.Container{Id: "c1", Name: "app"}); err != nil {
		t.Fatal(err)
	}
	release(a, 1)
	if s := rec.wait(t, 1)[0]; s.Stored != findings.Recorded {
		t.Fatalf("poststart scan: %+v, want recorded", s)
	}
	if !stale() {
		t.Fatal("the memory was swept again within memorySweepEvery")
	}
}

// TestStopEndsUsage: a pod's usage and command counts leave with its stop:
// at its StopPodSandbox scan, a StopContainer that came while that scan
// waited joining it (the pod's stop stays the pod's), and at
// RemovePodSandbox.
func TestStopEndsUsage(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	dir := t.TempDir()
	rec := newRecorder()
	// One worker, held by another pod's scan: the pod's stop waits.
	a := startAgentWith(t, dir, rec, func(c *Config) { c.Workers = 1 })
	stopping, removed := nstest.New(t), nstest.New(t)
	for _, ns := range []*nstest.NS{stopping, removed} {
		ns.Run("iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "80", "-j", "DROP")
	}
	ctx := context.Background()
	pods := []*api.PodSandbox{pod("stopping", stopping.Path()), pod("removed", removed.Path())}
	if _, err := a.Synchronize(ctx, pods, nil); err != nil {
		t.Fatal(err)
	}
	release(a, 2)
	for _, s := range rec.wait(t, 2) {
		if s.Stored != findings.Recorded {
			t.Fatalf("sweep scan %+v, want recorded", s)
		}
	}
	// usage tells whether the sandbox's pod has usage, and command counts.
	usage := func(id string) (rules, execs bool) {
		for _, p := range a.Usage().Pods() {
			rules = rules || p.SandboxID == id
		}
		for _, p := range a.usage.execCounts() {
			execs = execs || p.name == "pod-"+id
		}
		return rules, execs
	}
	// The sweep's scans reported are not yet done with: a job queued
	// meanwhile would wait behind the stop's.
	if !queueIdle(a) {
		t.Fatal("the sweep's scans never ended")
	}
	for _, p := range pods {
		a.usage.Exec(scan.Meta{SandboxID: p.Id, Pod: findings.Pod{Namespace: p.Namespace, Name: p.Name}}, false, time.Now())
		if rules, execs := usage(p.Id); !rules || !execs {
			t.Fatalf("pod %s: usage %v, command counts %v; want both", p.Id, rules, execs)
		}
	}

	if err := a.PostStartContainer(ctx, pods[1], &api.Container{Id: "c2", Name: "app"}); err != nil {
		t.Fatal(err)
	}
	if err := a.StopPodSandbox(ctx, pods[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := a.StopContainer(ctx, pods[0], &api.Container{Id: "c1", Name: "app"}); err != nil {
		t.Fatal(err)
	}
	release(a, 2)
	if s := rec.wait(t, 2)[1]; s.Meta.SandboxID != "stopping" || s.Meta.Stage != stageStopPod || s.Meta.ContainerID != "" {
		t.Errorf("stop scan %+v, want the pod's stop", s.Meta)
	}
	if rules, execs := usage("stopping"); rules || execs || a.known.has("stopping") {
		t.Errorf("after the pod's stop: usage %v, command counts %v, known %v; want none", rules, execs, a.known.has("stopping"))
	}

	if err := a.RemovePodSandbox(ctx, pods[1]); err != nil {
		t.Fatal(err)
	}
	if rules, execs := usage("removed"); rules || execs {
		t.Errorf("after the pod's removal: usage %v, command counts %v; want none", rules, execs)
	}
}

// TestStopWhileScanned: a pod's stop heard while a scan of it runs (its
// netns removed meanwhile, as CRI-O does before StopPodSandbox; or its
// removal) ends its usage for good: the running scan, ending after the
// stop, gave the stopped pod its usage back until the next Synchronize,
// so its series, its alert and the node's readiness kept a pod that no
// longer runs.
func TestStopWhileScanned(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	for _, removal := range []bool{false, true} {
		t.Run(map[bool]string{false: "StopPodSandbox", true: "RemovePodSandbox"}[removal], func(t *testing.T) {
			rec := newRecorder()
			a := startAgentWith(t, t.TempDir(), rec, func(c *Config) { c.Workers = 1 })
			ns := nstest.New(t)
			ns.Run("iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "80", "-j", "DROP")
			ctx := context.Background()
			p := pod("p", ns.Path())
			if err := a.PostStartContainer(ctx, p, &api.Container{Id: "c1", Name: "app"}); err != nil {
				t.Fatal(err)
			}
			// The worker has taken the scan (its netns open) and waits
			// for its token.
			running := func() bool {
				a.queue.mu.Lock()
				defer a.queue.mu.Unlock()
				s := a.queue.slots[p.Id]
				return s != nil && s.running
			}
			for deadline := time.Now().Add(10 * time.Second); !running(); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the worker never took the scan")
				}
			}
			ns.Delete()
			var err error
			if removal {
				err = a.RemovePodSandbox(ctx, p)
			} else {
				err = a.StopPodSandbox(ctx, p)
			}
			if err != nil {
				t.Fatal(err)
			}
			release(a, 1)
			for s := rec.wait(t, 1)[0]; s.Outcome != Found; s = rec.wait(t, 1)[0] {
				if s.Meta.Stage != stageStopPod {
					t.Fatalf("scan %+v, want the pod's stop or the running scan's finding", s)
				}
			}
			if !queueIdle(a) {
				t.Fatal("the queue never emptied")
			}
			for _, u := range a.Usage().Pods() {
				if u.SandboxID == p.Id {
					t.Errorf("after the pod's stop its usage is back: %+v", u)
				}
			}
			if a.known.has(p.Id) {
				t.Error("after the pod's stop it is still known")
			}
		})
	}
}

// TestStopsRunAtShutdown: the stops still waiting when the agent stops
// run (the pod's last look: a pod that added rules and stopped while the
// agent restarted would be seen by nobody), not the other jobs waiting
// (the next agent sweeps the pods still running); past drainWait the stops
// left are dropped, so the agent exits within its grace period.
func TestStopsRunAtShutdown(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	for _, abandoned := range []bool{false, true} {
		t.Run(map[bool]string{false: "drained", true: "abandoned"}[abandoned], func(t *testing.T) {
			dir := t.TempDir()
			rec := newRecorder()
			cfg := testConfig(dir, rec)
			cfg.Workers = 1
			a, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			a.hold = make(chan struct{})
			if abandoned {
				a.drainWait = time.Millisecond
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx) }()
			released, returned := false, false
			defer func() {
				cancel()
				if !released {
					close(a.hold)
				}
				if !returned {
					<-done
				}
			}()
			busy, stopping, started := nstest.New(t), nstest.New(t), nstest.New(t)
			for _, ns := range []*nstest.NS{stopping, started} {
				ns.Run("iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "80", "-j", "DROP")
			}
			bg := context.Background()
			// The one worker takes busy's scan and waits for its token.
			if err := a.PostStartContainer(bg, pod("busy", busy.Path()), &api.Container{Id: "c-busy", Name: "app"}); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				a.queue.mu.Lock()
				taken := len(a.queue.order) == 0
				a.queue.mu.Unlock()
				if taken {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the worker never took busy's scan")
				}
			}
			if err := a.StopPodSandbox(bg, pod("stopping", stopping.Path())); err != nil {
				t.Fatal(err)
			}
			// The runtime removes the netns: the stop's handle holds it.
			stopping.Delete()
			if err := a.PostStartContainer(bg, pod("started", started.Path()), &api.Container{Id: "c-started", Name: "app"}); err != nil {
				t.Fatal(err)
			}
			cancel()
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				a.queue.mu.Lock()
				closed := a.queue.closed
				a.queue.mu.Unlock()
				if closed {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the queue was never closed")
				}
			}
			if abandoned {
				// Past drainWait before busy's scan ends.
				time.Sleep(50 * time.Millisecond)
			}
			close(a.hold)
			released = true
			err = receive(t, done, "Run's return")
			returned = true
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			close(rec.ch)
			var scanned []string
			for s := range rec.ch {
				scanned = append(scanned, s.Meta.SandboxID+" "+string(s.Outcome))
			}
			want := []string{"busy clean", "stopping found"}
			if abandoned {
				want = want[:1]
			}
			if !slices.Equal(scanned, want) {
				t.Errorf("scans at shutdown %q, want %q", scanned, want)
			}
			var recorded []string
			for _, r := range findingstest.Read(t, filepath.Join(dir, "findings.jsonl")) {
				recorded = append(recorded, r.Pod.Name)
			}
			if wantRec := map[bool][]string{false: {"pod-stopping"}, true: nil}[abandoned]; !slices.Equal(recorded, wantRec) {
				t.Errorf("findings %q, want %q", recorded, wantRec)
			}
		})
	}
}

// TestSweepAfterStop: a sweep's scan still queued when its pod stops and
// its netns is removed (CRI-O removes it before StopPodSandbox, whose open
// then finds it gone) does not run: run, it found the netns missing, was
// unreachable, and the sweep's only pod unreachable left the agent
// degraded until another scan reached a netns.
func TestSweepAfterStop(t *testing.T) {
	nstest.NeedRoot(t)
	dir := t.TempDir()
	rec := newRecorder()
	// One worker, held by another pod's scan: the sweep's job waits.
	a := startAgentWith(t, dir, rec, func(c *Config) { c.Workers = 1 })
	ns, other := nstest.New(t), nstest.New(t)
	ctx := context.Background()
	if err := a.PostStartContainer(ctx, pod("other", other.Path()), &api.Container{Id: "c-other", Name: "app"}); err != nil {
		t.Fatal(err)
	}
	p := pod("stopping", ns.Path())
	if _, err := a.Synchronize(ctx, []*api.PodSandbox{p}, []*api.Container{running(p.Id)}); err != nil {
		t.Fatal(err)
	}
	ns.Delete()
	if err := a.StopPodSandbox(ctx, p); err != nil {
		t.Fatal(err)
	}
	if s := rec.wait(t, 1)[0]; s.Meta.Stage != stageStopPod || s.Outcome != Gone {
		t.Fatalf("stop of a removed netns: %+v, want gone", s)
	}
	release(a, 1)
	if s := rec.wait(t, 1)[0]; s.Meta.SandboxID != "other" {
		t.Fatalf("scan %+v, want the other pod's", s.Meta)
	}
	// The worker takes the sweep's job next: skipped, the queue empties.
	if !queueIdle(a) {
		release(a, 1)
		t.Fatalf("the stopped pod's sweep scan ran: %+v; degraded %q", rec.wait(t, 1)[0], a.Health().Degraded())
	}
	if why := a.Health().Degraded(); why != "" {
		t.Errorf("degraded: %s", why)
	}
}

// queueIdle waits up to 10 s for a's queue to hold no job, waiting or
// running, and tells whether it does.
func queueIdle(a *Agent) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		a.queue.mu.Lock()
		idle := len(a.queue.slots) == 0
		a.queue.mu.Unlock()
		if idle {
			return true
		}
	}
	return false
}

// TestOpenFailed: a netns missing at a stop, or at a scan the watch or
// the exec watch queued (the sandbox stopped since), is gone, benign;
// missing while the runtime says the pod runs, unreachable, an error.
func TestOpenFailed(t *testing.T) {
	_, missing := netns.Open(filepath.Join(t.TempDir(), "cni-gone"))
	if missing == nil {
		t.Fatal("opened a netns that does not exist")
	}
	for _, tc := range []struct {
		source string
		want   Outcome
	}{
		{SourceStop, Gone},
		{SourceWatch, Gone},
		{SourceExec, Gone},
		{SourceSweep, Unreachable},
		{SourcePostStart, Unreachable},
	} {
		out, err := openFailed(tc.source, missing)
		if out != tc.want || (err == nil) != (tc.want == Gone) {
			t.Errorf("source %s: %s, %v; want %s", tc.source, out, err, tc.want)
		}
	}
	if out, err := openFailed(SourceStop, os.ErrPermission); out != Failed || err == nil {
		t.Errorf("a stop's open denied: %s, %v; want failed", out, err)
	}
}

// TestCleanScanMemoryUnreadable: a clean look of a pod whose per-sandbox
// memory cannot be opened (its directory a file) says so, as a usage
// recorded before for the pod may stand: the scan carries the error,
// errors_total{kind="scan"} counts it, and the pod is not taken as looked
// at, so the re-sweep looks again.
func TestCleanScanMemoryUnreadable(t *testing.T) {
	nstest.NeedRoot(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "state"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "state", "sandboxes"), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	a := startAgent(t, dir, rec)
	ns := nstest.New(t)
	p := pod("unreadable", ns.Path())
	if err := a.RunPodSandbox(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if err := a.PostStartContainer(context.Background(), p, &api.Container{Id: "c1", Name: "app"}); err != nil {
		t.Fatal(err)
	}
	hand(t, a)
	s := receive(t, rec.ch, "the pod's scan")
	if s.Outcome != Clean || !errors.Is(s.Err, findings.ErrNoMemory) {
		t.Fatalf("scan: %s, %v; want clean with the memory's error", s.Outcome, s.Err)
	}
	if n := counter(a.metrics.errors.WithLabelValues("scan")); n != 1 {
		t.Errorf("errors_total{kind=scan} = %v, want 1", n)
	}
	a.known.mu.Lock()
	sb := a.known.get("unreadable")
	complete := sb != nil && sb.complete
	a.known.mu.Unlock()
	if complete {
		t.Error("the pod's look noted complete, its memory unread: the re-sweep would skip it")
	}
}
