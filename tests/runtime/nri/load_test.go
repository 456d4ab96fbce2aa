package nri

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	rt "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/tests/runtime/critest"
)

// bigRules is how many rules the heavy pod holds.
const bigRules = 200000

// TestBigNetnsDoesNotDelayRuntime: a pod netns with 200k rules, scanned by
// the agent in the background, does not hold up any runtime call: every
// NRI handler answers within the histogram's top bucket, 100 ms (a scan
// inside a handler would add its seconds; handlers take microseconds), and
// the agent stays connected (a handler past the runtime's 2 s timeout
// would be disconnected). The CRI calls that run NRI handlers on that pod
// (StartContainer, StopContainer), with the agent and without, are
// figures: on a loaded machine they say more about the load.
func TestBigNetnsDoesNotDelayRuntime(t *testing.T) {
	c := critest.Start(t)
	f := newFiles(t)
	big := c.RunPod("big", false)
	c.Run(big, "app", forever)
	fill(t, c.NetnsPath(big), bigRules)

	without := cycle(t, c, big, "without")
	a := startAgent(t, c.NRISocket, f)
	// Measured while the sweep scans the 200k rules.
	with := cycle(t, c, big, "with")
	t.Logf("StartContainer+StopContainer on the 200k-rule pod: %v without the agent, %v with it", without, with)
	a.waitMetric(t, 1, "iptables_alerter_agent_scans_total", `source="sweep"`)
	// Stops of one pod queued while its scan waits are one scan.
	a.waitMetric(t, 1, "iptables_alerter_agent_scans_total", `source="stop"`)
	a.waitMetric(t, 3, "iptables_alerter_agent_handler_duration_seconds_count", `event="StopContainer"`)
	for _, event := range []string{"Synchronize", "PostStartContainer", "StopContainer"} {
		all, _ := a.metric(t, "iptables_alerter_agent_handler_duration_seconds_count", `event="`+event+`"`)
		fast, _ := a.metric(t, "iptables_alerter_agent_handler_duration_seconds_bucket", `event="`+event+`"`, `le="0.1"`)
		sum, _ := a.metric(t, "iptables_alerter_agent_handler_duration_seconds_sum", `event="`+event+`"`)
		if all > 0 {
			t.Logf("%s: %v calls, mean %v", event, all, time.Duration(sum/all*float64(time.Second)))
		}
		if all == 0 || fast != all {
			t.Errorf("%s: %v of %v calls answered within 100 ms; agent log:\n%s", event, fast, all, a.log)
		}
	}
	if v, _ := a.metric(t, "iptables_alerter_agent_errors_total", `kind="connection"`); v != 0 {
		t.Errorf("the agent lost its NRI connection %v times", v)
	}
	recs := forPod(findingstest.Read(t, f.findings), "big")
	if len(recs) == 0 || recs[0].Nft.Rules == 0 {
		t.Errorf("no finding for the 200k-rule pod: %+v", recs)
	}
}

// fill writes n rules into the netns with the host's iptables-nft-restore.
func fill(t *testing.T, netns string, n int) {
	t.Helper()
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "-A INPUT -s 10.%d.%d.%d/32 -j DROP\n", i>>16&255, i>>8&255, i&255)
	}
	b.WriteString("COMMIT\n")
	cmd := exec.Command("nsenter", "--net="+netns, "iptables-nft-restore")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("iptables-nft-restore %d rules: %v: %s", n, err, out)
	}
}

// cycle starts and stops three containers in the pod and returns the time
// spent in StartContainer and StopContainer.
func cycle(t *testing.T, c *critest.Containerd, p *critest.Pod, tag string) time.Duration {
	t.Helper()
	var total time.Duration
	for i := 0; i < 3; i++ {
		id := c.CreateContainer(p, fmt.Sprintf("probe-%s-%d", tag, i), forever)
		start := time.Now()
		c.StartContainer(id)
		c.StopContainer(id)
		total += time.Since(start)
	}
	return total
}

// TestHookAndAgentOneFinding: on a node running both the hook (CRI-O's
// poststart, simulated here with the container's real bundle and state,
// since containerd's CRI wires no hooks.d) and the agent, a pod gets one
// finding per usage whichever sees it first.
func TestHookAndAgentOneFinding(t *testing.T) {
	c := critest.Start(t)
	f := newFiles(t)
	hookAndAgent(t, c.CRI, f, func(id string) { runHook(t, c, id, f) })
}

// hookAndAgent runs the hook and the agent on one runtime, sharing the
// findings file and the per-sandbox memory: a pod the hook found before
// the agent started is the same usage to the agent's sweep; an istio-init
// style pod started under both gets one finding. hook runs the hook for a
// container the runtime started, where the runtime does not run it itself.
func hookAndAgent(t *testing.T, c *critest.CRI, f agentFiles, hook func(id string)) {
	// The hook first, then the agent's sweep. A hook that runs before the
	// app's command (runc runs poststart at create) sees its rule at the
	// next container's start.
	first := c.RunPod("hook-first", false)
	c.Run(first, "app", "iptables-nft -A INPUT -p tcp --dport 7000 -j DROP && "+forever)
	waitRule(t, c, first, "--dport 7000")
	side := c.Run(first, "side", forever)
	if hook != nil {
		hook(side)
	}
	if got := forPod(findingstest.Read(t, f.findings), "hook-first"); len(got) != 1 || got[0].Source != "hook" || got[0].SandboxID != first.ID {
		t.Fatalf("hook finding: %+v", got)
	}
	a := startAgent(t, c.NRISocket, f)
	a.waitMetric(t, 1, "iptables_alerter_agent_scans_total", `source="sweep"`, `outcome="same"`)

	// An init container, then the app: the agent at the init container's
	// stop or the app's poststart, the hook at the app's start.
	second := c.RunPod("mesh", false)
	initID := c.Run(second, "init", initRules)
	c.WaitExited(initID)
	app := c.Run(second, "app", forever)
	waitFindings(t, a, "mesh", 1)
	if hook != nil {
		hook(app)
	}
	for _, pod := range []string{"hook-first", "mesh"} {
		if got := forPod(findingstest.Read(t, f.findings), pod); len(got) != 1 {
			t.Errorf("pod %s: %d findings, want 1: %+v", pod, len(got), got)
		}
	}
	if code := a.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("agent exit code on SIGTERM %d, want 0", code)
	}
}

// runHook runs the hook binary as a runtime runs a poststart hook: the
// container's OCI state on stdin, its bundle holding config.json.
func runHook(t *testing.T, c *critest.Containerd, id string, f agentFiles) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Runtime.ContainerStatus(ctx, &rt.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info struct{ Pid int }
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil || info.Pid == 0 {
		t.Fatalf("container %s pid: %v (%s)", id, err, st.Info["info"])
	}
	bundle := filepath.Join(c.Dir, "state", "io.containerd.runtime.v2.task", "k8s.io", id)
	state, _ := json.Marshal(map[string]any{"ociVersion": "1.0.2", "id": id, "status": "running", "pid": info.Pid, "bundle": bundle})
	cmd := exec.Command(hookBin, "hook", "--findings", f.findings, "--state-dir", f.state, "--allowlist", "", "--stage", "poststart", "--node", "test-node", "--log-level", "debug")
	cmd.Stdin = strings.NewReader(string(state))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hook: %v: %s", err, out)
	}
	t.Logf("hook: %s", out)
}
