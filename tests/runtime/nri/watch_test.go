package nri

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	rt "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/watch"
	"github.com/iptables-alerter/iptables-alerter/tests/runtime/critest"
)

// restorer is one container whose iptables-nft-restore stays alive, its
// stdin fed by the test through a FIFO: it commits what the test writes,
// when the test writes it, so no step depends on how fast the machine is.
// A writer alive at its commit is one the agent can place in its container.
type restorer struct {
	name string
	pid  int
	in   *os.File
}

// runRestorer runs container name in p: cat of a FIFO the test made in a
// bind-mounted directory, piped to iptables-nft-restore --noflush, both
// children of the container's sh. It returns once the restore runs and
// is shown, with its parent, in the stand-in hostProc: from then on the
// agent can describe it, and it writes nothing until the test says.
func runRestorer(t *testing.T, c *critest.CRI, p *critest.Pod, hostProc, name string) *restorer {
	t.Helper()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "in")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo %q: %v", fifo, err)
	}
	// Read-write: the open does not wait for cat (Linux), and the test
	// stays a writer, so cat sees no end of input until the test closes it.
	in, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Closing it ends cat, then the restore (the pod's removal ends the rest).
	t.Cleanup(func() { in.Close() })

	// A host-network pod has no netns of its own: it is the runtime's.
	nsPath := c.NetnsPath(p)
	if nsPath == "" {
		nsPath = "/run/netns/" + c.Netns
	}
	before := nstest.Pids(t, nsPath, "iptables-nft-re")
	cfg := critest.ContainerConfig(p, name, "cat /ctl/in | iptables-nft-restore --noflush & "+forever)
	cfg.Mounts = []*rt.Mount{{ContainerPath: "/ctl", HostPath: dir}}
	c.StartContainer(c.CreateContainerConfig(p, cfg))

	r := &restorer{name: name, in: in}
	for deadline := time.Now().Add(time.Minute); r.pid == 0; time.Sleep(50 * time.Millisecond) {
		for _, pid := range nstest.Pids(t, nsPath, "iptables-nft-re") {
			if !slices.Contains(before, pid) {
				r.pid = pid
			}
		}
		if r.pid == 0 && time.Now().After(deadline) {
			t.Fatalf("no iptables-nft-restore of container %s in the pod's netns within a minute", name)
		}
	}
	nstest.ShowProc(t, hostProc, r.pid)
	w := (watch.Proc{Root: "/proc"}).Writer(r.pid, "iptables-nft-re")
	if w.Gone {
		t.Fatalf("the iptables-nft-restore of container %s (pid %d) ended before writing", name, r.pid)
	}
	nstest.ShowProc(t, hostProc, w.PPID)
	return r
}

// commit has the restore commit one table's change ("-A rule" or "-D rule").
func (r *restorer) commit(t *testing.T, table, change string) {
	t.Helper()
	if _, err := r.in.WriteString("*" + table + "\n" + change + "\nCOMMIT\n"); err != nil {
		t.Fatalf("feed the restore of %s: %v", r.name, err)
	}
}

// watchRecords are the pod's records the watch wrote.
func watchRecords(t *testing.T, f agentFiles, pod string) []findings.Record {
	t.Helper()
	var got []findings.Record
	for _, r := range forPod(findingstest.Read(t, f.findings), pod) {
		if r.Source == "watch" {
			got = append(got, r)
		}
	}
	return got
}

// waitRecords waits until the pod has n watch records and returns them.
func waitRecords(t *testing.T, a *agentProc, pod string, n int) []findings.Record {
	t.Helper()
	return waitN(t, a, n, func() []findings.Record { return watchRecords(t, a.files, pod) })
}

// waitN waits until records gives n records and returns them; how long it
// took is logged, never judged.
func waitN(t *testing.T, a *agentProc, n int, records func() []findings.Record) []findings.Record {
	t.Helper()
	start := time.Now()
	deadline := start.Add(2 * time.Minute)
	for {
		if got := records(); len(got) >= n {
			t.Logf("watch record %d after %v", n, time.Since(start).Round(time.Millisecond))
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d watch records within 2 minutes, want %d: %+v; agent log:\n%s", len(records()), n, records(), a.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestContainerdWatch (issue 19): on a real containerd, a pod's rules
// written well after its containers started are recorded by the watch
// (source "watch"), each finding naming the writing binary and its
// container; a native nftables table written into the pod's netns first
// is not usage and records nothing; removing every rule records gone.
// The test makes each write and waits for its finding before the next.
func TestContainerdWatch(t *testing.T) {
	c := critest.Start(t).CRI
	f := newFiles(t)
	// A stand-in for the host's /proc (pid 1's netns is not a sandboxed
	// test's to open), shown the writers before they write.
	hostProc := nstest.HostProc(t, "/proc/self/ns/net")
	a := startAgentArgs(t, f, "--nri-socket", c.NRISocket, "--watch", "--host-proc", hostProc)
	a.waitMetric(t, 1, "iptables_alerter_agent_connected")

	p := c.RunPod("watched", false)
	// Native nftables first, from the host: had it queued a scan, its
	// finding (writer nft) would come before the iptables writers'.
	if out, err := exec.Command("nsenter", "--net="+c.NetnsPath(p), "nft", "add table inet mine; add chain inet mine c { type filter hook input priority 0; }").CombinedOutput(); err != nil {
		t.Fatalf("nft in the pod's netns: %v: %s", err, out)
	}
	started := time.Now()
	writer := runRestorer(t, c, p, hostProc, "writer")
	second := runRestorer(t, c, p, hostProc, "second")
	if out, _ := exec.Command("nsenter", "--net="+c.NetnsPath(p), "iptables-nft-save").CombinedOutput(); strings.Contains(string(out), "9100") || strings.Contains(string(out), "9200") {
		t.Fatalf("a rule before the test fed any restore:\n%s", out)
	}

	// writer adds, second adds, writer deletes, second deletes: the last
	// is gone. Each step waits for the previous one's record.
	redirect, drop := "OUTPUT -p tcp --dport 9100 -j REDIRECT --to-ports 15001", "INPUT -p tcp --dport 9200 -j DROP"
	writer.commit(t, "nat", "-A "+redirect)
	waitRecords(t, a, "watched", 1)
	second.commit(t, "filter", "-A "+drop)
	waitRecords(t, a, "watched", 2)
	writer.commit(t, "nat", "-D "+redirect)
	waitRecords(t, a, "watched", 3)
	second.commit(t, "filter", "-D "+drop)
	got := waitRecords(t, a, "watched", 4)
	if n := len(got); got[n-1].KnownState() != findings.StateGone {
		t.Fatalf("last watch record %s, want gone: %+v; agent log:\n%s", got[n-1].State, got, a.log)
	}

	for i, r := range got {
		w := r.Writer
		if w == nil {
			t.Fatalf("record %d without writer: %+v", i, r)
		}
		t.Logf("record %d at +%v: state %s, %d rules, writer %s (pid %d) of container %q, parent %s",
			i, r.Time.Sub(started).Round(time.Millisecond), r.State, r.Nft.Rules, w.Comm, w.PID, w.Container, w.ParentComm)
		if w.Comm != "iptables-nft-re" || w.Gone || w.Pod.Name != "watched" || w.ParentComm != "sh" {
			t.Errorf("record %d: writer %+v, want iptables-nft-restore (comm iptables-nft-re), alive, child of sh, of pod watched", i, *w)
		}
	}
	// What each step recorded, in order: the first finding is the
	// writer's, then second's, then the writer's deletion, then gone.
	want := []struct {
		container string
		pid       int
		rules     int
		state     findings.State
	}{{"writer", writer.pid, 1, findings.StatePresent}, {"second", second.pid, 2, findings.StatePresent},
		{"writer", writer.pid, 1, findings.StatePresent}, {"second", second.pid, 0, findings.StateGone}}
	if len(got) != len(want) {
		t.Fatalf("%d watch records, want %d", len(got), len(want))
	}
	for i, w := range want {
		if r := got[i]; r.Writer.Container != w.container || r.Writer.PID != w.pid || r.Nft.Rules != w.rules || r.KnownState() != w.state || r.Container != w.container {
			t.Errorf("record %d: container %q (record's %q), pid %d, %d rules, %s; want %s, %d, %d, %s",
				i, r.Writer.Container, r.Container, r.Writer.PID, r.Nft.Rules, r.State, w.container, w.pid, w.rules, w.state)
		}
	}
	// A scan the native table queued would record nothing (no usage, none
	// before): it shows as a clean watch scan. Any watch scan after it ran
	// after it (one queue, first in first out), so it is counted by now;
	// the iptables writers' four scans each found usage or its end.
	if v, _ := a.metric(t, "iptables_alerter_agent_scans_total", `source="watch"`, `outcome="clean"`); v != 0 {
		t.Errorf("%v clean watch scans, want 0: the native nftables table queued a scan; agent log:\n%s", v, a.log)
	}
}

// TestContainerdOneShotWriter (issue 25): on a real containerd, an
// istio-init style container runs one iptables-nft-restore, which its sh
// reaps at once after the commit, and exits; the record of that commit (the
// init container's stop scan, or the app's start scan: the watch's window
// is an hour, so it is still open whatever the machine's speed) names the
// writer, alive when read, and its container. The agent and the container
// run on CPU 0 only, so the watch's real-time reader runs before the
// writer can exit by the scheduler's order, not by the machine's load.
func TestContainerdOneShotWriter(t *testing.T) {
	nstest.NeedRoot(t, "taskset")
	c := critest.Start(t).CRI
	f := newFiles(t)
	hostProc := nstest.HostProc(t, "/proc/self/ns/net")
	// The writer exits before anyone could show it: show the pids to come.
	if err := nstest.ShowNextPids(hostProc, 20000); err != nil {
		t.Fatal(err)
	}
	a := startAgentArgs(t, f, "--nri-socket", c.NRISocket, "--watch", "--watch-debounce", "1h", "--host-proc", hostProc)
	if out, err := exec.Command("taskset", "-a", "-p", "-c", "0", strconv.Itoa(a.cmd.Process.Pid)).CombinedOutput(); err != nil {
		t.Fatalf("taskset the agent: %v: %s", err, out)
	}
	a.waitMetric(t, 1, "iptables_alerter_agent_connected")
	if strings.Contains(a.log.String(), "normal priority") {
		nstest.Need(t, false, "the agent's watch at real-time priority (CAP_SYS_NICE)")
	}

	p := c.RunPod("oneshot", false)
	cfg := critest.ContainerConfig(p, "istio-init", initRules)
	cfg.Linux.Resources = &rt.LinuxContainerResources{CpusetCpus: "0"}
	initID := c.CreateContainerConfig(p, cfg)
	c.StartContainer(initID)
	if code := c.WaitExited(initID); code != 0 {
		t.Fatalf("init container exited %d", code)
	}
	c.Run(p, "app", forever)
	a.waitMetric(t, 1, "iptables_alerter_agent_scans_total", `source="poststart"`)

	recs := forPod(findingstest.Read(t, f.findings), "oneshot")
	if len(recs) == 0 {
		t.Fatalf("no record of pod oneshot; agent log:\n%s", a.log)
	}
	r := recs[0]
	t.Logf("record: source %s, %d rules, writer %+v", r.Source, r.Nft.Rules, r.Writer)
	if r.Nft.Rules != 2 || (r.Source != "stop" && r.Source != "poststart") {
		t.Errorf("first record: source %s with %d rules, want the init container's 2 from its stop or the app's start", r.Source, r.Nft.Rules)
	}
	if w := r.Writer; w == nil || w.Gone || w.Comm != "iptables-nft-re" || w.ContainerID != initID || w.Container != "istio-init" || w.Pod.Name != "oneshot" || w.ParentComm != "sh" {
		t.Errorf("first record's writer %+v, want iptables-nft-restore (comm iptables-nft-re), read alive, child of sh, in container istio-init (%s) of pod oneshot", w, initID)
	}
	if v, _ := a.metric(t, "iptables_alerter_agent_scans_total", `source="watch"`); v != 0 {
		t.Errorf("%v watch scans within an hour's window, want 0", v)
	}
}
