package nri

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/tests/runtime/critest"
)

const (
	// initRules is what an istio-init style container writes, then exits:
	// one iptables-restore transaction, as istio-init does, so a scan
	// during it sees all or nothing (separate commands would each be a
	// distinct usage, and a finding of its own).
	initRules = `echo -e '*nat\n:ISTIO_REDIRECT - [0:0]\n-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001\n-A OUTPUT -p tcp -j ISTIO_REDIRECT\nCOMMIT' | iptables-nft-restore --noflush`
	forever   = "trap 'exit 0' TERM; while :; do sleep 1; done"
)

// TestContainerdMoments: each NRI moment on a real containerd.
func TestContainerdMoments(t *testing.T) {
	moments(t, critest.Start(t).CRI)
}

// moments runs each NRI moment on a real runtime, pods run through the CRI
// as the kubelet runs them. A pod from before the agent is found by the
// sweep; an init container's rules at PostStartContainer of the next
// container; rules an app adds after its start at StopContainer; a clean
// pod and a host-network pod give nothing; killing and restarting the
// agent, and restarting the runtime, give no duplicate.
func moments(t *testing.T, c *critest.CRI) {
	f := newFiles(t)

	// Before the agent: a pod with rules already running.
	early := c.RunPod("early", false)
	c.Run(early, "app", "iptables-nft -A INPUT -p tcp --dport 9000 -j DROP && "+forever)
	waitRule(t, c, early, "--dport 9000")

	a := startAgent(t, c.NRISocket, f)
	a.waitMetric(t, 1, "iptables_alerter_agent_scans_total", `source="sweep"`, `outcome="recorded"`)
	if got := forPod(findingstest.Read(t, f.findings), "early"); len(got) != 1 || got[0].Source != "sweep" || got[0].Nft.Rules != 1 || got[0].SandboxID != early.ID {
		t.Fatalf("sweep findings for the early pod: %+v", got)
	}

	// Init container, then the app. The runtime may send StopContainer as
	// the init container exits on its own, before the app's PostStartContainer:
	// whichever comes first finds the rules, once.
	mesh := c.RunPod("mesh", false)
	initID := c.Run(mesh, "istio-init", initRules)
	if code := c.WaitExited(initID); code != 0 {
		t.Fatalf("init container exited %d", code)
	}
	c.Run(mesh, "app", forever)
	a.waitMetric(t, 2, "iptables_alerter_agent_scans_total", `source="poststart"`)
	got := waitFindings(t, a, "mesh", 1)
	if got[0].Nft.Rules != 2 || got[0].Container == "" || (got[0].Source != "poststart" && got[0].Source != "stop") {
		t.Fatalf("findings for the mesh pod: %+v", got)
	}
	if got[0].Source == "stop" && got[0].Container != "istio-init" {
		t.Errorf("stop finding names container %q, want istio-init", got[0].Container)
	}

	// An app that adds rules well after its start: only StopContainer sees it.
	late := c.RunPod("late", false)
	lateID := c.Run(late, "app", "sleep 2; iptables-nft -A OUTPUT -p udp --dport 53 -j DROP; "+forever)
	// Clean and host-network pods.
	clean := c.RunPod("clean", false)
	c.Run(clean, "app", forever)
	host := c.RunPod("host", true)
	c.Run(host, "app", forever)
	a.waitMetric(t, 4, "iptables_alerter_agent_scans_total", `source="poststart"`)
	if got := forPod(findingstest.Read(t, f.findings), "late"); len(got) != 0 {
		t.Fatalf("the late pod has findings before its rules exist: %+v", got)
	}
	waitRule(t, c, late, "--dport 53")
	c.StopContainer(lateID)
	a.waitMetric(t, 1, "iptables_alerter_agent_scans_total", `source="stop"`, `outcome="recorded"`)
	if got := forPod(findingstest.Read(t, f.findings), "late"); len(got) != 1 || got[0].Source != "stop" || got[0].Stage != "StopContainer" {
		t.Fatalf("stop findings for the late pod: %+v", got)
	}
	for _, name := range []string{"clean", "host"} {
		if got := forPod(findingstest.Read(t, f.findings), name); len(got) != 0 {
			t.Errorf("%s pod has findings: %+v", name, got)
		}
	}
	before := len(findingstest.Read(t, f.findings))

	// The agent killed and restarted: its sweep finds the same usage.
	a.stop(t, syscall.SIGKILL)
	a = startAgent(t, c.NRISocket, f)
	a.waitMetric(t, 4, "iptables_alerter_agent_scans_total", `source="sweep"`)
	if n := len(findingstest.Read(t, f.findings)); n != before {
		t.Fatalf("agent restart: %d findings, want %d (no duplicate); agent log:\n%s", n, before, a.log)
	}

	// The runtime restarted: the agent reconnects, re-syncs, no duplicate.
	c.Restart()
	a.waitMetric(t, 8, "iptables_alerter_agent_scans_total", `source="sweep"`)
	if n := len(findingstest.Read(t, f.findings)); n != before {
		t.Fatalf("runtime restart: %d findings, want %d; agent log:\n%s", n, before, a.log)
	}
	if v, _ := a.metric(t, "iptables_alerter_agent_connected"); v != 1 {
		t.Errorf("agent not connected after the runtime restart")
	}
	if code := a.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("agent exit code on SIGTERM %d, want 0", code)
	}
}

// waitFindings waits until the pod has n findings, and a moment more to
// catch an (n+1)th.
func waitFindings(t *testing.T, a *agentProc, pod string, n int) []findings.Record {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(forPod(findingstest.Read(t, a.files.findings), pod)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: findings %+v, want %d; agent log:\n%s", pod, forPod(findingstest.Read(t, a.files.findings), pod), n, a.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	got := forPod(findingstest.Read(t, a.files.findings), pod)
	if len(got) != n {
		t.Fatalf("pod %s: %d findings, want %d: %+v", pod, len(got), n, got)
	}
	return got
}

// waitRule waits until the pod's app wrote its rule: a container's start
// returns before its process got far.
func waitRule(t *testing.T, c *critest.CRI, p *critest.Pod, rule string) {
	t.Helper()
	path := c.NetnsPath(p)
	for i := 0; i < 100; i++ {
		out, _ := exec.Command("nsenter", "--net="+path, "iptables-nft-save").CombinedOutput()
		if strings.Contains(string(out), rule) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("pod %s never wrote its rule %q", p.Name, rule)
}

// TestCRIFallback: with NRI off, --cri-endpoint sweeps through the CRI
// every --interval: the pod with rules is found once, clean and
// host-network pods give nothing, and later sweeps skip both pods, their
// rules unchanged since their complete scans.
func TestCRIFallback(t *testing.T) {
	c := critest.Start(t)
	f := newFiles(t)
	used := c.RunPod("used", false)
	c.Run(used, "app", "iptables-nft -A INPUT -p tcp --dport 8443 -j DROP && "+forever)
	waitRule(t, c.CRI, used, "--dport 8443")
	clean := c.RunPod("clean", false)
	c.Run(clean, "app", forever)
	host := c.RunPod("host", true)
	c.Run(host, "app", forever)

	a := startAgentArgs(t, f, "--cri-endpoint", c.Socket, "--interval", "500ms")
	// A sweep scanning the two pod netns, then two skipping both.
	a.waitMetric(t, 4, "iptables_alerter_agent_resweep_netns_total", `stage="CRI"`, `result="skipped"`)
	recs := findingstest.Read(t, f.findings)
	if len(recs) != 1 || recs[0].Pod.Name != "used" || recs[0].Stage != "CRI" || recs[0].Source != "sweep" || recs[0].SandboxID != used.ID {
		t.Fatalf("findings %+v, want one sweep finding for the used pod", recs)
	}
	if v, _ := a.metric(t, "iptables_alerter_agent_scans_total", `source="sweep"`); v != 2 {
		t.Errorf("%v sweep scans, want 2: later sweeps skip unchanged pods", v)
	}
	if code := a.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("agent exit code on SIGTERM %d, want 0", code)
	}
}
