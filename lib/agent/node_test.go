package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/allowlist"
	"github.com/iptables-alerter/iptables-alerter/lib/catalog"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// placedRestorer is an iptables-nft-restore in ns, as restorer, whose
// entry in the agent's host /proc stand-in shows the cgroup given: the
// process's own stat (so it is described as it runs), and a cgroup file
// shaped like the runtime's or systemd's. The real cgroup tree is never
// touched.
func placedRestorer(t *testing.T, a *Agent, ns *nstest.NS, cgroup string) io.Writer {
	t.Helper()
	// Shown in a directory of its own first: its entry in the agent's
	// stand-in is made here, with the cgroup given.
	in, n := ns.Restorer(t.TempDir())
	pid := strconv.Itoa(n)
	dir := filepath.Join(a.cfg.HostProc, pid)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("/proc", pid, "stat"), filepath.Join(dir, "stat")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte("0::"+cgroup+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	nstest.ShowProc(t, a.cfg.HostProc, os.Getpid())
	return in
}

// nodeScan waits for the next scan of the node's watch, skipping others.
func nodeScan(t *testing.T, rec *recorder) Scan {
	t.Helper()
	for {
		if s := rec.wait(t, 1)[0]; isNodeJob(s.Meta) {
			return s
		}
	}
}

// TestNodeWatch (issue 19 item 2): node mode on a namespace standing in
// for the node's (the host /proc stand-in's pid 1 is in it; the host's own
// is never watched). Rules there at the start are recorded once, with
// vendors and no writer; a kubelet-like unit's platform rules make no
// finding; a host-network pod's container writing is named through its
// cgroup; the records are the node's, without pod.
func TestNodeWatch(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft-restore", "ip")
	dir := t.TempDir()
	node := nstest.New(t)
	// Before the agent: a Calico-like chain, and the kubelet's own (its
	// rule as kubelet_network_linux.go writes it: the platform list takes
	// exact shapes only).
	node.Restore("*filter\n:cali-INPUT - [0:0]\n:KUBE-FIREWALL - [0:0]\n-A INPUT -j cali-INPUT\n-A INPUT -j KUBE-FIREWALL\n"+
		"-A cali-INPUT -s 10.9.9.9/32 -j DROP\n"+
		`-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`+"\nCOMMIT\n", "iptables-nft-restore")
	rec := newRecorder()
	a := startWatching(t, dir, rec, func(cfg *Config) {
		cfg.HostProc, cfg.HostNetns = nstest.HostProc(t, node.Path()), node.Path()
		cfg.Load.Vendors = func() (*catalog.Table, error) { return catalog.Builtin(), nil }
	})
	log := filepath.Join(dir, "findings.jsonl")

	s := nodeScan(t, rec)
	if s.Meta.Stage != stageNodeStart || s.Stored != findings.Recorded {
		t.Fatalf("first node scan: stage %q, %s (%v), want %q recorded", s.Meta.Stage, s.Label(), s.Err, stageNodeStart)
	}
	r := s.Record
	if r.Writer != nil || r.Subject != findings.SubjectNode || r.Pod != (findings.Pod{}) || r.SandboxID != "" || r.Node != "node-1" {
		t.Errorf("start record: writer %+v subject %q pod %+v sandbox %q node %q, want no writer, the node's", r.Writer, r.Subject, r.Pod, r.SandboxID, r.Node)
	}
	if r.Nft.Rules != 2 || len(r.Vendors) != 1 || r.Vendors[0].Name != "calico" || !strings.Contains(strings.Join(r.AllowlistEntries, ","), "platform-kubelet") {
		t.Errorf("start record: %d rules, vendors %+v, allowlisted %v; want Calico's 2, the kubelet's allowlisted", r.Nft.Rules, r.Vendors, r.AllowlistEntries)
	}
	line := lastLine(t, log)
	parsed, err := findings.Parse([]byte(line))
	if err != nil || parsed.Subject != findings.SubjectNode || !strings.Contains(line, `"writer":null`) {
		t.Errorf("start line %s: parsed subject %q, %v", line, parsed.Subject, err)
	}
	lines := len(strings.Split(strings.TrimSpace(readFile(t, log)), "\n"))

	// A kubelet-like unit restores its platform chains: no finding.
	kubelet := placedRestorer(t, a, node, "/system.slice/kubelet.service")
	fmt.Fprint(kubelet, "*mangle\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n*nat\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n")
	if s := nodeScan(t, rec); s.Outcome != Found || s.Stored != findings.Same {
		t.Fatalf("after the kubelet's write: %s (%v), want same (nothing new)", s.Label(), s.Err)
	}

	// A host-network pod (containerd: no netns of its own) writes.
	ctrID := strings.Repeat("ab", 32)
	p := pod("hostnet", "")
	c := &api.Container{Id: ctrID, PodSandboxId: p.Id, Name: "mesh-agent"}
	if err := a.StartContainer(context.Background(), p, c); err != nil {
		t.Fatal(err)
	}
	w := placedRestorer(t, a, node, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"+p.Uid+".slice/cri-containerd-"+ctrID+".scope")
	fmt.Fprint(w, "*nat\n-A POSTROUTING -s 10.8.0.0/16 -j MASQUERADE\nCOMMIT\n")
	s = nodeScan(t, rec)
	if s.Stored != findings.Recorded || s.Record.Writer == nil {
		t.Fatalf("after the pod's write: %s (%v), writer %+v; want recorded with its writer", s.Label(), s.Err, s.Record)
	}
	got := *s.Record.Writer
	want := findings.Writer{PID: got.PID, Comm: "iptables-nft-re", PPID: os.Getpid(), ParentComm: got.ParentComm,
		ContainerID: ctrID, Container: "mesh-agent", Pod: findings.Pod{Namespace: "team-a", Name: "pod-hostnet", UID: "uid-hostnet"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("writer (-want +got):\n%s", diff)
	}
	if r := s.Record; r.ContainerID != "" || r.Container != "" || r.Pod != (findings.Pod{}) || r.Subject != findings.SubjectNode {
		t.Errorf("the node's record names a pod: %+v", r)
	}
	if n := len(strings.Split(strings.TrimSpace(readFile(t, log)), "\n")); n != lines+1 {
		t.Errorf("%d lines, want %d: the kubelet's write made one", n, lines+1)
	}
}

// TestNodeWatchConfig: node mode needs the watch, NRI (the CRI fallback
// never watches: the node's netns would never be looked at, and the word
// never given), and a namespace that is the node's as the host /proc
// names it; --platform known plugins.
func TestNodeWatchConfig(t *testing.T) {
	nstest.NeedRoot(t)
	dir := t.TempDir()
	node, other := nstest.New(t), nstest.New(t)
	tests := []struct {
		name   string
		change func(*Config)
	}{
		{"no watch", func(cfg *Config) { cfg.HostNetns = node.Path() }},
		{"through the CRI", func(cfg *Config) {
			cfg.Watch, cfg.HostNetns, cfg.CRIEndpoint = true, node.Path(), "/run/containerd/containerd.sock"
		}},
		{"not a netns", func(cfg *Config) { cfg.Watch, cfg.HostNetns = true, dir }},
		{"not the node's", func(cfg *Config) {
			cfg.Watch, cfg.HostNetns, cfg.HostProc = true, other.Path(), nstest.HostProc(t, node.Path())
		}},
		// Issue 25: a plugin the platform list does not know, even with
		// node mode off (a typo must not wait for it).
		{"unknown platform", func(cfg *Config) { cfg.Platforms = []string{"ovn-kubernetes", "ovnkubernetes"} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(dir, nil)
			tc.change(&cfg)
			if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), ErrConfig.Error()) {
				t.Errorf("New: %v, want a configuration error", err)
			}
		})
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestNodeResweep: in node mode the re-sweep looks at the node's namespace
// too, once its first scan is queued. A legacy rule written there after
// that scan tells the watch nothing; the next re-sweep scans the node and
// records it as the node's; an unchanged node is skipped.
func TestNodeResweep(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy")
	nstest.NeedIPTables(t)
	node := nstest.New(t)
	rec := resweepRecorder{newRecorder(), make(chan Resweep, 10)}
	a := startWatching(t, t.TempDir(), rec, func(cfg *Config) {
		cfg.HostProc, cfg.HostNetns = nstest.HostProc(t, node.Path()), node.Path()
	})
	// A fresh memory: the clean node's first look is written (a gone,
	// TestNodeCleanAfterReboot).
	if s := nodeScan(t, rec.recorder); s.Meta.Stage != stageNodeStart || s.Stored != findings.Recorded || s.Record == nil || s.Record.KnownState() != findings.StateGone {
		t.Fatalf("first node scan: stage %q, %s (%v), want %q, gone recorded", s.Meta.Stage, s.Label(), s.Err, stageNodeStart)
	}
	if r := resweepOnce(t, a, rec); r.Known != 1 || r.Skipped != 1 || r.Queued != 0 {
		t.Fatalf("re-sweep of the unchanged node: %+v, want it known and skipped", r)
	}

	node.Run("iptables-legacy", "-A", "OUTPUT", "-s", "10.0.0.1", "-j", "ACCEPT")
	if r := resweepOnce(t, a, rec); r.Known != 1 || r.Queued != 1 || r.Gone != 0 {
		t.Fatalf("re-sweep after a legacy write: %+v, want the node queued", r)
	}
	s := nodeScan(t, rec.recorder)
	if s.Meta.Source != SourceSweep || s.Meta.Stage != StageResweep || s.Stored != findings.Recorded {
		t.Fatalf("re-sweep's scan of the node: source %q stage %q, %s (%v), want source sweep, stage %s, recorded",
			s.Meta.Source, s.Meta.Stage, s.Label(), s.Err, StageResweep)
	}
	if r := s.Record; r.Legacy.Rules != 1 || r.Subject != findings.SubjectNode || r.SandboxID != "" || r.Pod != (findings.Pod{}) {
		t.Errorf("record: %d legacy rules, subject %q, sandbox %q, pod %+v; want 1, the node's", r.Legacy.Rules, r.Subject, r.SandboxID, r.Pod)
	}
	if r := resweepOnce(t, a, rec); r.Skipped != 1 || r.Queued != 0 {
		t.Fatalf("re-sweep after the node's scan: %+v, want it skipped", r)
	}
}

// TestNodeCleanAfterReboot: the per-sandbox memory is under /run, which a
// reboot empties, and the node's namespace is the one look that outlives
// it. A node whose legacy rules were recorded, then removed and the node
// rebooted (what a MachineConfig change does) had a clean first look with
// no memory to take back: nothing was written, and the node label, its
// ClusterReport and report --by node said breaks for good. Its first clean
// look with no memory is now written, as a gone, once.
func TestNodeCleanAfterReboot(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy")
	nstest.NeedIPTables(t)
	node := nstest.New(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "findings.jsonl")
	first := func(t *testing.T, state string) Scan {
		t.Helper()
		rec := newRecorder()
		a, err := New(func() Config {
			cfg := testConfig(dir, rec)
			cfg.Seen.Dir, cfg.Watch = state, true
			cfg.HostProc, cfg.HostNetns = nstest.HostProc(t, node.Path()), node.Path()
			return cfg
		}())
		if err != nil {
			t.Fatal(err)
		}
		a.runtime = noRuntime
		defer startRun(t, a)()
		return nodeScan(t, rec)
	}
	lines := func() []string { return strings.Split(strings.TrimSpace(readFile(t, log)), "\n") }

	node.Run("iptables-legacy", "-A", "OUTPUT", "-s", "10.0.0.1", "-j", "ACCEPT")
	boot1 := filepath.Join(dir, "boot1")
	if s := first(t, boot1); s.Stored != findings.Recorded || s.Record.Legacy.Rules != 1 {
		t.Fatalf("the node's first look: %s (%v), %d legacy rules; want recorded, 1", s.Label(), s.Err, s.Record.Legacy.Rules)
	}
	node.Run("iptables-legacy", "-F", "OUTPUT")
	// Rebooted: the memory is empty, the findings file kept.
	boot2 := filepath.Join(dir, "boot2")
	s := first(t, boot2)
	if s.Stored != findings.Recorded || s.Record == nil || s.Record.KnownState() != findings.StateGone || s.Record.Subject != findings.SubjectNode {
		t.Fatalf("the first look after the reboot: %s (%v), record %+v; want the node's gone recorded", s.Label(), s.Err, s.Record)
	}
	all := lines()
	last, err := findings.Parse([]byte(all[len(all)-1]))
	if len(all) != 2 || err != nil || last.KnownState() != findings.StateGone || last.KnownSubject() != findings.SubjectNode {
		t.Fatalf("findings %q (%v); want the legacy look, then the node's gone", all, err)
	}
	// Once: the agent restarted within the boot keeps its memory.
	if s := first(t, boot2); s.Outcome != Clean || s.Stored != findings.Same {
		t.Errorf("the first look of an agent restarted within the boot: %s (%v), want clean, nothing written", s.Label(), s.Err)
	}
	if n := len(lines()); n != 2 {
		t.Errorf("%d findings after the restart, want 2", n)
	}
}

// TestNodeWatchRetried: a node watch whose open fails (here a socket at
// the node's netns path, refused as EMFILE would be) is opened again
// later: no runtime event or re-sweep watches the node, so its commits
// went unheard, and after a failed first open the node was never looked
// at, until the agent restarted.
func TestNodeWatchRetried(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	defer func(lo, hi time.Duration) { minNodeRetry, maxNodeRetry = lo, hi }(minNodeRetry, maxNodeRetry)
	minNodeRetry, maxNodeRetry = 50*time.Millisecond, 100*time.Millisecond
	dir := t.TempDir()
	node := nstest.New(t)
	node.Run("iptables-nft", "-A", "INPUT", "-s", "10.9.9.9/32", "-j", "DROP")
	link := filepath.Join(dir, "node-netns")
	point := pointer(t, link)
	point(node.Path())
	rec := watchFailRecorder{resweepRecorder{newRecorder(), make(chan Resweep, 10)}, make(chan error, 10)}
	cfg := testConfig(dir, rec)
	cfg.Watch, cfg.HostProc, cfg.HostNetns = true, nstest.HostProc(t, node.Path()), link
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	point(filepath.Join(dir, "sock"))
	runAgent(t, a)
	receive(t, rec.failed, "the node watch's failed open")
	receive(t, rec.failed, "the node watch's second try")
	if _, node := a.known.blind(); node {
		t.Fatal("the node is known with its watch never opened")
	}
	point(node.Path())
	s := nodeScan(t, rec.recorder)
	if s.Meta.Stage != stageNodeStart || s.Stored != findings.Recorded {
		t.Fatalf("first node scan after the retry: stage %q, %s (%v), want %q recorded", s.Meta.Stage, s.Label(), s.Err, stageNodeStart)
	}
	if _, node := a.known.blind(); !node {
		t.Error("the node is not known after its watch opened")
	}
}

// TestNodePlatformReadiness (helper-101 #1): the platform list takes the
// kubelet's KUBE-FIREWALL (and kube-proxy's iptables mode) out of the
// node's usage, so no node alarms; its level went with it, and the node
// read ready though the rule's xt matches need kernel-modules-extra on
// RHEL 10. The level now counts in the node's readiness, not as usage,
// and leaves it when the rule goes; with PlatformOSKept (OpenShift) it
// never counts. An admin's entry that takes the rule too (one written for
// pods: "*" matches the node's namespace) takes its usage, never its level
// (helper-104 #1). An extra rule in the platform's chain that the admin's
// entry takes leaves no usage either: the chain goes by the platform's
// declaration (helper-103 #1: applied one list after the other, the
// emptied chain stayed).
func TestNodePlatformReadiness(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft-restore", "iptables-nft")
	const extra = `{"name": "extra", "rule_regexp": "-A KUBE-FIREWALL -s 10\\.9\\.9\\.9 -j DROP"}`
	for _, tc := range []struct {
		name  string
		kept  bool
		admin string
		want  string
	}{
		{"default", false, extra, findings.ReadinessNeedsExtra},
		{"os-kept", true, extra, findings.ReadinessReady},
		{"admin-takes-all", false, extra + `, {"name": "mine", "namespaces": ["*"], "rule_regexp": ".* -j DROP"}`, findings.ReadinessNeedsExtra},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			node := nstest.New(t)
			node.Restore("*filter\n:KUBE-FIREWALL - [0:0]\n-A INPUT -j KUBE-FIREWALL\n-A OUTPUT -j KUBE-FIREWALL\n"+
				`-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`+"\n"+
				"-A KUBE-FIREWALL -s 10.9.9.9/32 -j DROP\nCOMMIT\n", "iptables-nft-restore")
			admin, err := allowlist.Parse([]byte(`{"entries": [`+tc.admin+`]}`), "test")
			if err != nil {
				t.Fatal(err)
			}
			rec := newRecorder()
			a := startWatching(t, dir, rec, func(cfg *Config) {
				cfg.HostProc, cfg.HostNetns = nstest.HostProc(t, node.Path()), node.Path()
				cfg.PlatformOSKept = tc.kept
				cfg.Load.Allow = func() (*allowlist.List, error) { return admin, nil }
			})
			s := nodeScan(t, rec)
			if s.Record != nil && s.Record.HasUsage() {
				t.Fatalf("first node scan: %s, usage %+v: the kubelet's rule is the platform's, the other the admin's", s.Label(), s.Record)
			}
			if got := a.usage.Readiness(); got != tc.want {
				t.Fatalf("readiness %q with the kubelet's KUBE-FIREWALL (xt matches), want %q", got, tc.want)
			}
			// The rules go; the jumps and the chain are native.
			node.Run("iptables-nft", "-F", "KUBE-FIREWALL")
			if s := nodeScan(t, rec); s.Record != nil && s.Record.HasUsage() {
				t.Fatalf("after the flush: %s, usage %+v", s.Label(), s.Record)
			}
			if got := a.usage.Readiness(); got != findings.ReadinessReady {
				t.Fatalf("readiness %q once the xt rule is gone, want ready", got)
			}
		})
	}
}

// TestNodeOwnReadiness (helper-129 #1): the agent's word stands for the
// findings the forwarder may never read (rotated away before it did), and
// took the node's own namespace's platform rules only: a rule of the
// node's own, beyond the platform's, was in its finding alone, so with
// that line lost the node's label said ready. The word counts it now,
// and lets it go when the rule goes.
func TestNodeOwnReadiness(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	dir := t.TempDir()
	node := nstest.New(t)
	node.Run("iptables-nft", "-A", "INPUT", "-s", "10.8.8.8", "-m", "comment", "--comment", "mine", "-j", "DROP")
	rec := newRecorder()
	a := startWatching(t, dir, rec, func(cfg *Config) {
		cfg.HostProc, cfg.HostNetns = nstest.HostProc(t, node.Path()), node.Path()
	})
	if s := nodeScan(t, rec); s.Record == nil || !s.Record.HasUsage() {
		t.Fatalf("first node scan: %s: want the node's xt rule as usage", s.Label())
	}
	if got := a.usage.Readiness(); got != findings.ReadinessNeedsExtra {
		t.Fatalf("readiness %q with an xt rule of the node's own, want %q", got, findings.ReadinessNeedsExtra)
	}
	node.Run("iptables-nft", "-D", "INPUT", "-s", "10.8.8.8", "-m", "comment", "--comment", "mine", "-j", "DROP")
	if s := nodeScan(t, rec); s.Record != nil && s.Record.HasUsage() {
		t.Fatalf("after the delete: %s, usage %+v", s.Label(), s.Record)
	}
	if got := a.usage.Readiness(); got != findings.ReadinessReady {
		t.Fatalf("readiness %q once the rule is gone, want ready", got)
	}
}
