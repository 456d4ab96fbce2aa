package nri

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	rt "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/tests/runtime/critest"
)

// execRecords are the pod's records of the exec watch whose command line
// holds marker.
func execRecords(t *testing.T, f agentFiles, pod, marker string) []findings.Record {
	t.Helper()
	var got []findings.Record
	for _, r := range findingstest.Read(t, f.findings) {
		if r.Pod.Name == pod && r.Source == findings.SourceExec && r.Exec != nil && slices.ContainsFunc(r.Exec.Argv, func(a string) bool { return strings.Contains(a, marker) }) {
			got = append(got, r)
		}
	}
	return got
}

// resweptAfterLoss gives the pod's records of a re-sweep with legacy
// rules, once the node's exec losses moved since before (the re-sweep an
// exec loss brings: lib/agent's resweepSoon); none before that.
func resweptAfterLoss(t *testing.T, a *agentProc, f agentFiles, pod string, before nodeLosses) []findings.Record {
	t.Helper()
	now := losses(t, a)
	if now.unread == before.unread && now.missed == before.missed && now.overruns == before.overruns {
		return nil
	}
	var got []findings.Record
	for _, r := range findingstest.Read(t, f.findings) {
		if r.Pod.Name == pod && r.Stage == "Resweep" && r.Legacy.Rules > 0 {
			got = append(got, r)
		}
	}
	return got
}

// TestContainerdExec (issue 28): execs on a real containerd.
func TestContainerdExec(t *testing.T) {
	execs(t, critest.Start(t).CRI)
}

// TestCRIOExec (issue 28): execs on a real CRI-O.
func TestCRIOExec(t *testing.T) {
	execs(t, critest.StartCRIO(t, "").CRI)
}

// execs: with the re-sweep an hour away, a container running
// iptables-legacy -A 10 s after its start is recorded at once by the exec
// watch (source exec) with its command line, exit 0, its container and
// pod (or, where the node lost its exec, counted, by the re-sweep that
// loss brings); a container whose write the kernel refuses (-t bogus: exit 3) gives
// a failed finding, breaking; a container running iptables -C of an absent
// rule every 100 ms for 30 s gives one finding, a read, never a failed
// one. Every run of a pod's one-shot commands (the checker's, and 100
// `iptables -S` run back to back) is seen or counted missed for the pod:
// never silent. Only the node's losses may be neither: a process gone
// before anything of it could be read (exec_unread_total), or a tool run
// reaped before its cgroup told its pod (exec_missed_total, for no pod).
func execs(t *testing.T, c *critest.CRI) {
	f := newFiles(t)
	a := startAgentArgs(t, f, "--nri-socket", c.NRISocket, "--watch", "--resweep-interval", "1h")
	a.waitMetric(t, 1, "iptables_alerter_agent_connected")
	execUpFirst(t, a)
	before := losses(t, a)

	p := c.RunPod("execs", false)
	started := time.Now()
	c.Run(p, "writer", "sleep 10; iptables-legacy -t nat -A OUTPUT -m comment --comment exec-legacy -j ACCEPT && "+forever)
	c.Run(p, "failer", "sleep 1; iptables-legacy -t bogus -A OUTPUT -m comment --comment exec-bogus -j ACCEPT; "+forever)
	checks := c.RunPod("checks", false)
	checker := c.Run(checks, "checker", "i=0; while [ $i -lt 300 ]; do iptables-legacy -C INPUT -m comment --comment exec-check -j DROP; sleep 0.1; i=$((i+1)); done")
	oneshot := c.RunPod("oneshot", false)
	oneshots := c.Run(oneshot, "oneshot", "sleep 1; i=0; while [ $i -lt 100 ]; do iptables -S OUTPUT >/dev/null; i=$((i+1)); done")

	// The exec watch's record; or, where the node lost the writer's
	// exec (its loss counters moved: a one-shot command gone before it
	// was read, both cores busy), the re-sweep that loss brings finds
	// the rule, without its command.
	w := waitN(t, a, 1, func() []findings.Record {
		if got := execRecords(t, f, "execs", "exec-legacy"); len(got) > 0 {
			return got
		}
		return resweptAfterLoss(t, a, f, "execs", before)
	})[0]
	t.Logf("legacy write recorded %v after the pod's start, source %s", w.Time.Sub(started).Round(time.Millisecond), w.Source)
	switch {
	case w.Source != findings.SourceExec:
		if w.Legacy.Rules != 1 || w.Pod.UID != p.UID {
			t.Errorf("legacy write found by the re-sweep after a loss: %d legacy rules, pod %+v", w.Legacy.Rules, w.Pod)
		}
	case w.Stage != "exec" || w.Legacy.Rules != 1 || !w.Exec.Exited || w.Exec.ExitCode != 0 || w.Exec.Failed || w.Exec.Backend != "legacy" ||
		w.Container != "writer" || w.Pod.Name != "execs" || w.Pod.UID != p.UID || w.Writer == nil || w.Writer.Container != "writer" || w.Exec.Argv[0] != "iptables-legacy":
		t.Errorf("legacy write: stage %q, %d legacy rules, container %q, pod %+v, exec %+v, writer %+v", w.Stage, w.Legacy.Rules, w.Container, w.Pod, w.Exec, w.Writer)
	}

	bad := waitN(t, a, 1, func() []findings.Record { return execRecords(t, f, "execs", "exec-bogus") })[0]
	if !bad.Failed() || bad.Exec.ExitCode != 3 || !bad.Exec.MissingKernelSupport || bad.Worst != findings.ImpactLegacy || bad.Container != "failer" || bad.HasUsage() {
		t.Errorf("failed write: container %q, worst %q, exec %+v", bad.Container, bad.Worst, bad.Exec)
	}

	waitExited(t, c, oneshots, time.Minute)
	waitExited(t, c, checker, 3*time.Minute)
	seen, missed := accounted(t, a, map[string]float64{"checks": 300, "oneshot": 100}, before)
	seenChecks, missedChecks, missedOneshots := seen["checks"], missed["checks"], missed["oneshot"]
	got := execRecords(t, f, "checks", "exec-check")
	if len(got) != 1 || got[0].Failed() || got[0].Exec.Operation != "read" || got[0].Exec.ExitCode != 1 || got[0].Container != "checker" {
		t.Errorf("%v runs of -C seen gave %d findings, want 1 read: %+v", seenChecks, len(got), got)
	}
	if got := execRecords(t, f, "oneshot", "OUTPUT"); len(got) != 1 || got[0].Exec.Backend != "nft" || got[0].Exec.Operation != "read" || got[0].Container != "oneshot" {
		t.Errorf("100 one-shot iptables -S gave %+v, want one read", got)
	}
	// The agent sums its losses up in its log once a minute, and at its
	// end.
	if a.stop(t, syscall.SIGTERM); missedChecks+missedOneshots > 0 && !strings.Contains(a.log.String(), "could not record") {
		t.Errorf("%v runs missed, not logged; agent log:\n%s", missedChecks+missedOneshots, a.log)
	}
}

// accounted waits until every one of each pod's runs is seen (ok, failed)
// or counted missed for it, or the counts stopped moving for 15 s, and
// checks that none is silent: a run neither seen nor missed for its pod
// must be a node's loss, a process gone unread (exec_unread_total) or a
// tool run missed where no pod could be told (exec_missed_total beyond
// the pods' own misses: reaped before its cgroup was read). It returns
// each pod's runs seen and missed.
func accounted(t *testing.T, a *agentProc, runs map[string]float64, before nodeLosses) (seen, missed map[string]float64) {
	t.Helper()
	count := func(pod, result string) float64 {
		v, _ := a.metric(t, "iptables_alerter_agent_pod_iptables_commands_total", `pod_name="`+pod+`"`, `result="`+result+`"`)
		return v
	}
	seen, missed = map[string]float64{}, map[string]float64{}
	for deadline, changed := time.Now().Add(time.Minute), time.Now(); ; time.Sleep(200 * time.Millisecond) {
		done := true
		for pod, n := range runs {
			s, m := count(pod, "ok")+count(pod, "failed"), count(pod, "missed")
			if s != seen[pod] || m != missed[pod] {
				seen[pod], missed[pod], changed = s, m, time.Now()
			}
			done = done && s+m >= n
		}
		if done || time.Since(changed) > 15*time.Second || time.Now().After(deadline) {
			break
		}
	}
	now := losses(t, a)
	unread, nodeMissed := now.unread-before.unread, now.missed-before.missed
	var gap, podsMissed float64
	for pod, n := range runs {
		t.Logf("pod %s: %v runs, %v seen, %v missed", pod, n, seen[pod], missed[pod])
		if seen[pod]+missed[pod] > n {
			t.Errorf("pod %s: %v seen and %v missed of %v runs: counted twice", pod, seen[pod], missed[pod], n)
		}
		gap += max(n-seen[pod]-missed[pod], 0)
		podsMissed += missed[pod]
	}
	t.Logf("node: %v unread, %v missed in all (%v for no pod), %v overruns", unread, nodeMissed, nodeMissed-podsMissed, now.overruns)
	if gap > unread+nodeMissed-podsMissed && now.overruns == 0 {
		t.Errorf("%v runs neither seen nor missed for their pod, and only %v processes unread and %v runs missed for no pod on the node: silent; agent log:\n%s",
			gap, unread, nodeMissed-podsMissed, a.log)
	}
	return seen, missed
}

// nodeLosses are the exec watch's node-wide loss counters.
type nodeLosses struct{ unread, missed, overruns float64 }

func losses(t *testing.T, a *agentProc) nodeLosses {
	t.Helper()
	var l nodeLosses
	l.unread, _ = a.metric(t, "iptables_alerter_agent_exec_unread_total")
	l.missed, _ = a.metric(t, "iptables_alerter_agent_exec_missed_total")
	l.overruns, _ = a.metric(t, "iptables_alerter_agent_exec_overruns_total")
	return l
}

// waitExited waits up to d for the container to exit 0.
func waitExited(t *testing.T, c *critest.CRI, id string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(200 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := c.Runtime.ContainerStatus(ctx, &rt.ContainerStatusRequest{ContainerId: id})
		cancel()
		if err != nil {
			t.Fatalf("ContainerStatus %s: %v", id, err)
		}
		if st.Status.State == rt.ContainerState_CONTAINER_EXITED {
			if st.Status.ExitCode != 0 {
				t.Fatalf("container %s exited %d", st.Status.Metadata.GetName(), st.Status.ExitCode)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s still %v after %v", st.Status.Metadata.GetName(), st.Status.State, d)
		}
	}
}

// TestCRIOExecNode (issue 28): commands in the node's netns, stood in for
// by the one CRI-O runs in (which host-network pods share). With node mode
// off they are not recorded (counted node off); in node mode (--host-netns)
// a host-network container's command is the node's record with its
// container and pod as the writer, and a command run from a shell in the
// node's netns is the node's with no pod.
func TestCRIOExecNode(t *testing.T) {
	c := critest.StartCRIO(t, "")
	hostProc := nstest.HostProc(t, "/run/netns/"+c.Netns)
	shell := func(chain, marker string) {
		t.Helper()
		out, err := exec.Command("ip", "netns", "exec", c.Netns, "sh", "-c", "iptables-legacy -C "+chain+" -m comment --comment "+marker+" -j DROP").CombinedOutput()
		if err == nil {
			t.Fatalf("-C of an absent rule exited 0: %s", out)
		}
	}

	off := newFiles(t)
	a := startAgentArgs(t, off, "--nri-socket", c.NRISocket, "--watch", "--host-proc", hostProc)
	a.waitMetric(t, 1, "iptables_alerter_agent_connected")
	execUpFirst(t, a)
	hostOff := c.RunPod("hostnet-off", true)
	c.Run(hostOff, "checker", "iptables-legacy -C INPUT -m comment --comment exec-nodeoff -j DROP; "+forever)
	shell("FORWARD", "exec-shell-off")
	a.waitMetric(t, 2, "iptables_alerter_agent_execs_total", `result="node off"`)
	a.stop(t, syscall.SIGTERM)
	for _, r := range findingstest.Read(t, off.findings) {
		if r.Source == findings.SourceExec {
			t.Errorf("node mode off, a command recorded: %+v", r)
		}
	}
	c.StopPod(hostOff)

	f := newFiles(t)
	a = startAgentArgs(t, f, "--nri-socket", c.NRISocket, "--watch", "--host-proc", hostProc, "--host-netns")
	a.waitMetric(t, 1, "iptables_alerter_agent_connected")
	execUpFirst(t, a)
	host := c.RunPod("hostnet", true)
	c.Run(host, "checker", "sleep 1; iptables-legacy -C INPUT -m comment --comment exec-hostnet -j DROP; "+forever)
	r := waitN(t, a, 1, func() []findings.Record { return execRecords(t, f, "", "exec-hostnet") })[0]
	if r.Subject != findings.SubjectNode || r.SandboxID != "" || r.ContainerID != "" || r.Exec.Operation != "read" || r.Exec.ExitCode != 1 || r.Writer == nil ||
		r.Writer.Container != "checker" || r.Writer.Pod != (findings.Pod{Namespace: "ipta-test", Name: host.Name, UID: host.UID}) {
		t.Errorf("host-network container's command: subject %q sandbox %q container %q exec %+v writer %+v; want the node's, written by checker of pod %s",
			r.Subject, r.SandboxID, r.ContainerID, r.Exec, r.Writer, host.Name)
	}
	shell("FORWARD", "exec-shell")
	r = waitN(t, a, 1, func() []findings.Record { return execRecords(t, f, "", "exec-shell") })[0]
	if r.Subject != findings.SubjectNode || r.SandboxID != "" || r.Writer == nil || r.Writer.ContainerID != "" || r.Writer.Pod != (findings.Pod{}) {
		t.Errorf("shell's command: subject %q sandbox %q writer %+v; want the node's, no pod", r.Subject, r.SandboxID, r.Writer)
	}
	if got := forPod(findingstest.Read(t, f.findings), host.Name); len(got) != 0 {
		t.Errorf("host-network pod flagged as a pod: %+v", got)
	}
}

// execUpFirst checks that the exec watch listens once the agent is
// connected: it opens before the agent's first scan.
func execUpFirst(t *testing.T, a *agentProc) {
	t.Helper()
	if v, _ := a.metric(t, "iptables_alerter_agent_exec_watch_up"); v != 1 {
		t.Fatalf("exec watch not up once connected; agent log:\n%s", a.log)
	}
}
