package nri

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	rt "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/tests/runtime/critest"
)

// TestCRIOMoments: each NRI moment of TestContainerdMoments, on CRI-O.
func TestCRIOMoments(t *testing.T) {
	moments(t, critest.StartCRIO(t, "").CRI)
}

// installHook installs the agent, the hook and the shipped hooks.d JSON
// (critest.InstallHook), the installed command pointed at the test's files.
func installHook(t *testing.T, f agentFiles) (hook, hooksDir string) {
	t.Helper()
	return critest.InstallHook(t, bin, hookBin, "--findings", f.findings, "--state-dir", f.state, "--allowlist", "",
		"--node", "test-node", "--log-level", "debug", "--log-file", filepath.Join(t.TempDir(), "hook.log"))
}

// injected tells whether CRI-O put the installed hook into the container's
// spec as a poststart hook.
func injected(t *testing.T, c *critest.CRIO, id, hook string) bool {
	t.Helper()
	var spec specs.Spec
	if err := json.Unmarshal(c.ContainerSpec(id), &spec); err != nil {
		t.Fatalf("container %s spec: %v", id, err)
	}
	if spec.Hooks == nil {
		return false
	}
	for _, h := range spec.Hooks.Poststart {
		if strings.Contains(strings.Join(h.Args, " "), hook) {
			return true
		}
	}
	return false
}

// nodeRule gives the runtime's netns, which host-network pods share, a
// rule of the node's own: a host-network pod scanned by mistake would show
// it as the pod's.
func nodeRule(t *testing.T, c *critest.CRI) {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "exec", c.Netns, "iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "10250", "-j", "ACCEPT").CombinedOutput(); err != nil {
		t.Fatalf("node rule: %v: %s", err, out)
	}
}

// TestCRIOHook: the shipped hooks.d JSON, installed as `make install` does
// into the hooks_dir CRI-O reads, is injected by CRI-O into app and init
// containers and never into a pause container; an istio-init style pod
// gets exactly one finding with its pod's uid, a clean pod and a
// host-network pod none.
func TestCRIOHook(t *testing.T) {
	f := newFiles(t)
	hook, hooksDir := installHook(t, f)
	c := critest.StartCRIO(t, hooksDir)
	t.Logf("runtime: %s", c.Version())
	nodeRule(t, c.CRI)

	mesh := c.RunPod("mesh", false)
	initID := c.Run(mesh, "istio-init", initRules)
	if code := c.WaitExited(initID); code != 0 {
		t.Fatalf("init container exited %d", code)
	}
	appID := c.Run(mesh, "app", forever)
	clean := c.RunPod("clean", false)
	cleanID := c.Run(clean, "app", forever)
	host := c.RunPod("host", true)
	hostID := c.Run(host, "app", forever)

	// runc runs poststart hooks in `runc create`, before the container's
	// own command (the spec says after it): every hook has run by now, and
	// the init container's rules were seen at the app's creation.
	recs := findingstest.Read(t, f.findings)
	got := forPod(recs, "mesh")
	if len(got) != 1 || got[0].Source != "hook" || got[0].Pod.UID != mesh.UID || got[0].SandboxID != mesh.ID || got[0].Nft.Rules != 2 {
		t.Errorf("mesh pod findings %+v, want one hook finding with uid %s and 2 rules", got, mesh.UID)
	}
	if len(recs) != len(got) {
		t.Errorf("findings for other pods than mesh: %+v", recs)
	}
	for _, id := range []string{initID, appID, cleanID, hostID} {
		if !injected(t, c, id, hook) {
			t.Errorf("CRI-O did not inject the hook into container %s", id)
		}
	}
	for _, p := range []*critest.Pod{mesh, clean, host} {
		if injected(t, c, p.ID, hook) {
			t.Errorf("CRI-O injected the hook into pod %s's pause container", p.Name)
		}
	}
}

// TestCRIOHookGuard: with the hook's binary removed, exiting 1 or hanging,
// the shipped JSON's guard lets the container start: at once for a missing
// or failing binary, after the 5 s kill (and the shell's 1 s wait) for a
// hanging one, before the JSON's 10 s timeout where CRI-O's runc fails the
// create. That failure, not the time, is the verdict: the time is a figure
// (a loaded machine stretches it).
func TestCRIOHookGuard(t *testing.T) {
	f := newFiles(t)
	hook, hooksDir := installHook(t, f)
	c := critest.StartCRIO(t, hooksDir)
	cases := []struct {
		name    string
		breakIt func(t *testing.T)
	}{
		{name: "binary exits 1", breakIt: func(t *testing.T) { replaceFile(t, hook, "#!/bin/sh\nexit 1\n") }},
		{name: "binary hangs", breakIt: func(t *testing.T) { replaceFile(t, hook, "#!/bin/sh\nexec sleep 3600\n") }},
		{name: "binary removed", breakIt: func(t *testing.T) {
			if err := os.Remove(hook); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.breakIt(t)
			p := c.RunPod("guard-"+string(rune('a'+i)), false)
			// runc runs poststart hooks in `runc create`: the hook's time
			// is CreateContainer's, and the kubelet waits for both calls.
			began := time.Now()
			id := c.CreateContainer(p, "app", "iptables-nft -A INPUT -j DROP && "+forever)
			c.StartContainer(id)
			t.Logf("%s: CreateContainer and StartContainer took %v", tc.name, time.Since(began))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st, err := c.Runtime.ContainerStatus(ctx, &rt.ContainerStatusRequest{ContainerId: id})
			if err != nil {
				t.Fatal(err)
			}
			if st.Status.State != rt.ContainerState_CONTAINER_RUNNING {
				t.Errorf("container %v, want running", st.Status.State)
			}
		})
	}
	if recs := findingstest.Read(t, f.findings); len(recs) != 0 {
		t.Errorf("findings from a broken hook: %+v", recs)
	}
}

// replaceFile puts an executable script at path as install-files does: a
// temporary name in the same directory, then a rename.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".replace.tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestCRIOHookAndAgent: hookAndAgent with the hook CRI-O runs from the
// shipped hooks.d JSON.
func TestCRIOHookAndAgent(t *testing.T) {
	f := newFiles(t)
	_, hooksDir := installHook(t, f)
	hookAndAgent(t, critest.StartCRIO(t, hooksDir).CRI, f, nil)
}

// TestCRIOHostNetwork: host-network pods share the node's netns, whose
// rules are the node's: the hook, the agent's sweep, PostStartContainer
// and StopContainer never flag them, though the node's netns has rules.
func TestCRIOHostNetwork(t *testing.T) {
	// Failed before lib/agent told the node's netns by device and inode:
	// the sweep and PostStartContainer flagged both host-network pods with
	// the node's rule (the hook did not).
	f := newFiles(t)
	_, hooksDir := installHook(t, f)
	c := critest.StartCRIO(t, hooksDir)
	nodeRule(t, c.CRI)
	before := c.RunPod("host-before", true)
	c.Run(before, "app", forever)
	// A pod with rules, for the sweep to report something once it is done.
	used := c.RunPod("used", false)
	usedID := c.Run(used, "app", "iptables-nft -A INPUT -p tcp --dport 7001 -j DROP && "+forever)
	waitRule(t, c.CRI, used, "--dport 7001")

	// CRI-O runs in the test's netns: that is the node the host-network
	// pods share (the later --host-proc wins).
	a := startAgentArgs(t, f, "--nri-socket", c.NRISocket, "--host-proc", nstest.HostProc(t, "/run/netns/"+c.Netns))
	a.waitMetric(t, 1, "iptables_alerter_agent_scans_total", `source="sweep"`)
	after := c.RunPod("host-after", true)
	afterID := c.Run(after, "app", forever)
	c.StopContainer(afterID)
	// Stops are scanned in order: the used pod's stop, after the host
	// pod's, is a point where the host pod's scans are done.
	c.StopContainer(usedID)
	a.waitMetric(t, 1, "iptables_alerter_agent_scans_total", `source="stop"`, `outcome="same"`)
	for _, name := range []string{"host-before", "host-after"} {
		if got := forPod(findingstest.Read(t, f.findings), name); len(got) != 0 {
			t.Errorf("host-network pod %s flagged: %+v; agent log:\n%s", name, got, a.log)
		}
	}
}

// TestCRIONotReadySandbox: a stopped pod sandbox (NotReady: its netns is
// gone, the pod object still there) is neither an unreachable netns nor a
// reason for /healthz to say degraded, at the sweep or later.
func TestCRIONotReadySandbox(t *testing.T) {
	// Failed before lib/agent told a stopped sandbox from an unreachable
	// one: the sweep counted the stopped pod's removed netns.
	f := newFiles(t)
	c := critest.StartCRIO(t, "")
	stopped := c.RunPod("stopped", false)
	c.Run(stopped, "app", forever)
	c.StopPod(stopped)
	used := c.RunPod("used", false)
	c.Run(used, "app", "iptables-nft -A INPUT -p tcp --dport 7002 -j DROP && "+forever)
	waitRule(t, c.CRI, used, "--dport 7002")

	a := startAgent(t, c.NRISocket, f)
	a.waitMetric(t, 1, "iptables_alerter_agent_scans_total", `source="sweep"`, `outcome="recorded"`)
	if v, _ := a.metric(t, "iptables_alerter_agent_scans_total", `outcome="unreachable"`); v != 0 {
		t.Errorf("%v unreachable scans, want 0; agent log:\n%s", v, a.log)
	}
	if v, _ := a.metric(t, "iptables_alerter_agent_degraded"); v != 0 {
		t.Errorf("agent degraded with a NotReady sandbox; agent log:\n%s", a.log)
	}
	if got := forPod(findingstest.Read(t, f.findings), "stopped"); len(got) != 0 {
		t.Errorf("stopped pod flagged: %+v", got)
	}
	// Its sweep done, the agent says beside the findings that it looked at
	// every running pod (the stopped one is none), for the node label.
	a.waitMetric(t, 1, "iptables_alerter_agent_looked")
	s, err := findings.ReadSwept(findings.SweptPath(f.findings), "test-node", time.Now())
	if err != nil || s.Pods != 1 {
		t.Errorf("the agent's word: %+v, %v; want one pod looked at; agent log:\n%s", s, err, a.log)
	}
	// And the readiness its scans found: the used pod's finding's.
	if got := forPod(findingstest.Read(t, f.findings), "used"); len(got) == 0 || s.Readiness != findings.Readiness(got[len(got)-1].WorstLevel()) {
		t.Errorf("the agent's word says readiness %q; the used pod's findings %+v", s.Readiness, got)
	}
}
