//go:build !hookonly && !agentonly

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/report"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// TestPodHidingBehindXTMutex is issue 18 item 3 on real parts: a pod whose
// many legacy rules keep the host-wide x_tables mutex busy from its own
// netns. The real hook cannot finish its look and sees no usage; that is
// not "no usage": the finding says state unknown, the real forwarder posts
// an IPTablesUsageUnknown Warning naming the pod to a real kube-apiserver,
// `textfile` exports the pod as usage unknown and `report` lists it by
// name, status error. Before, the forwarder and report only counted such a
// finding and the textfile showed the pod with zero rules.
func TestPodHidingBehindXTMutex(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy-restore")
	_, err := os.Stat("/proc/self/net/ip_tables_names")
	nstest.Need(t, err == nil, "needs the ip_tables module loaded")
	// The API server first: the mutex is held (and other test processes'
	// namespaces wait) only while the hook looks.
	e := newFwdEnv(t)
	kubetest.Namespace(t, e.cs, "team-a")
	live := kubetest.Pod(t, e.cs, "team-a", "web-1", nil, "")

	victim := nstest.New(t)
	stop := nstest.HoldXTMutexIn(t, victim)
	h := hookRun{findings: e.findings}
	runHookProc(t, pod{netns: victim.Path(), sandbox: "sb-hider", extraAnn: map[string]string{"io.kubernetes.pod.uid": string(live.UID)}}.state(t), &h, "--timeout", "1s")
	stop()
	recs := findingstest.Read(t, e.findings)
	if len(recs) != 1 || recs[0].State != findings.StateUnknown || !recs[0].Truncated || recs[0].HasUsage() || !strings.Contains(recs[0].Error, "legacy x_tables busy") {
		t.Fatalf("want one finding, state unknown, truncated, no usage, \"legacy x_tables busy\"; got %+v\n%s", recs, h.stderr)
	}
	raw, err := os.ReadFile(e.findings)
	if err != nil || !strings.Contains(string(raw), `"state":"unknown"`) {
		t.Fatalf("the line lacks \"state\":\"unknown\": %s %v", raw, err)
	}

	t.Run("forward", func(t *testing.T) {
		f := e.start(t)
		evs := kubetest.WaitEvents(t, e.cs, 60*time.Second, "team-a", "Pod", "web-1", live.UID, func(evs []corev1.Event) bool { return len(evs) > 0 })
		f.stop(t, syscall.SIGTERM)
		if len(evs) != 1 {
			t.Fatalf("%d Events on the pod, want 1: %+v", len(evs), evs)
		}
		ev := evs[0]
		if ev.Reason != events.UnknownReason || ev.Type != corev1.EventTypeWarning || ev.ReportingController != events.Controller {
			t.Errorf("event reason %q type %q controller %q, want %s Warning from %s", ev.Reason, ev.Type, ev.ReportingController, events.UnknownReason, events.Controller)
		}
		for _, want := range []string{"could not finish", "whether the pod uses iptables is unknown", "x_tables lock", "Container: app"} {
			if !strings.Contains(ev.Message, want) {
				t.Errorf("note lacks %q:\n%s", want, ev.Message)
			}
		}
	})

	t.Run("textfile", func(t *testing.T) {
		state, text := t.TempDir(), t.TempDir()
		out, err := exec.Command(bin, "textfile", "--once", "--findings", e.findings, "--state-dir", state, "--textfile-dir", text).CombinedOutput()
		if err != nil {
			t.Fatalf("textfile --once: %v\n%s", err, out)
		}
		prom, err := os.ReadFile(filepath.Join(text, "iptables_alerter.prom"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(prom), `iptables_alerter_pod_usage_unknown{pod_name="web-1",pod_namespace="team-a"} 1`) ||
			strings.Contains(string(prom), `iptables_alerter_pod_iptables_rules{backend="legacy",pod_name="web-1"`) {
			t.Errorf("textfile, want web-1 usage unknown and no rule series:\n%s", prom)
		}
	})

	t.Run("report", func(t *testing.T) {
		out, _ := runReportCmd(t, "--format", "json", e.findings)
		_, r := groupsOf(t, out)
		if len(r.Groups) != 1 || r.Groups[0].State != findings.StateUnknown || strings.Join(r.Groups[0].Pods, ",") != "web-1" || !strings.Contains(r.Groups[0].Error, "legacy x_tables busy") {
			t.Fatalf("report groups %+v, want one unknown group naming web-1 with the error", r.Groups)
		}
		text, _ := runReportCmd(t, e.findings)
		if !strings.Contains(text, "\nerror ") || !strings.Contains(text, "web-1") || strings.Contains(text, "without usage") {
			t.Errorf("text report, want an error row naming web-1:\n%s", text)
		}
		// And from the cluster's Events, through report's own RBAC.
		kubetest.Apply(t, e.cs, "../packaging/rbac/report.yaml")
		kc := e.c.Kubeconfig("report", kubetest.Token(t, e.cs, fwdNS, "iptables-alerter-report"))
		out, _ = runReportCmd(t, "--kubeconfig", kc, "--format", "json")
		var rep report.Report
		if _, rep = groupsOf(t, out); len(rep.Groups) != 1 || rep.Groups[0].State != findings.StateUnknown || strings.Join(rep.Groups[0].Pods, ",") != "web-1" {
			t.Errorf("report from the cluster: groups %+v, want one unknown group naming web-1", rep.Groups)
		}
	})
}

// TestHookBusyMutexRecords: the hook's records while a neighbour holds the
// x_tables mutex, on real netns. A pod with iptables-nft rules, recorded
// whole, gets no new record from a look that could not read the legacy
// tables (what it did read is as recorded); a clean pod's look that could
// not finish is recorded unknown, and the next complete look writes the
// gone that resolves it (before, nothing: the pod stayed unknown); after
// that, nothing more.
func TestHookBusyMutexRecords(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "iptables-legacy-restore")
	_, err := os.Stat("/proc/self/net/ip_tables_names")
	nstest.Need(t, err == nil, "needs the ip_tables module loaded")
	used, clean := nstest.New(t), nstest.New(t)
	used.Run("iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "80", "-j", "DROP")
	h := hookRun{}
	run := func(ns *nstest.NS, sandbox, container string) {
		t.Helper()
		runHookProc(t, pod{netns: ns.Path(), sandbox: sandbox, container: container}.state(t), &h, "--timeout", "1s")
	}
	states := func() map[string][]findings.State {
		out := map[string][]findings.State{}
		if _, err := os.Stat(h.findings); err != nil {
			return out
		}
		for _, r := range findingstest.Read(t, h.findings) {
			out[r.SandboxID] = append(out[r.SandboxID], r.KnownState())
		}
		return out
	}
	run(used, "sb-used", "c1")
	run(clean, "sb-clean", "c1")

	stop := nstest.HoldXTMutex(t)
	run(used, "sb-used", "c2")
	run(clean, "sb-clean", "c2")
	stop()
	got := states()
	if len(got["sb-used"]) != 1 {
		t.Errorf("used pod: records %v, want its first only (%s)", got["sb-used"], h.stderr)
	}
	if c := got["sb-clean"]; len(c) > 1 {
		t.Errorf("clean pod while the mutex is held: records %v, want at most its unknown", c)
	}
	for end := time.Now().Add(60 * time.Second); ; {
		run(clean, "sb-clean", "c3")
		if c := states()["sb-clean"]; len(c) == 0 || c[len(c)-1] != findings.StateUnknown {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("60 s after the mutex was freed the clean pod is still unknown: %v\n%s", states()["sb-clean"], h.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	run(clean, "sb-clean", "c4")
	run(used, "sb-used", "c4")
	got = states()
	if c := got["sb-clean"]; len(c) != 0 && !slices.Equal(c, []findings.State{findings.StateUnknown, findings.StateGone}) {
		t.Errorf("clean pod: records %v, want none, or its unknown and the gone resolving it", c)
	}
	if len(got["sb-used"]) != 1 {
		t.Errorf("used pod: records %v, want one", got["sb-used"])
	}
}
