//go:build !hookonly

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/agent"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

// TestAgentFlags: --help names the interface the DaemonSet and the systemd
// unit use, and a bad plugin index is a configuration error (exit 2), not
// something to retry.
func TestAgentFlags(t *testing.T) {
	code, out, _ := runCmd(t, "agent", "--help")
	if code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, f := range []string{"--nri-socket", "--findings", "--state-dir", "--allowlist", "--health-addr", "--node", "--plugin-index", "--host-proc"} {
		if !strings.Contains(out, f) {
			t.Errorf("--help does not list %s", f)
		}
	}
	if code, _, errs := runCmd(t, "agent", "--plugin-index", "x", "--health-addr", ""); code != 2 {
		t.Errorf("bad plugin index: exit %d, want 2 (%s)", code, errs)
	}
	// Node mode: a bare --host-netns is --host-proc's pid 1's netns, and
	// needs both --host-proc and the watch.
	if code, _, errs := runCmd(t, "agent", "--host-netns", "--host-proc", "", "--health-addr", ""); code != 2 {
		t.Errorf("bare --host-netns without --host-proc: exit %d, want 2 (%s)", code, errs)
	}
	proc := nstest.HostProc(t, "/proc/self/ns/net")
	code, _, errs := runCmd(t, "agent", "--host-netns", "--host-proc", proc, "--watch=false", "--health-addr", "")
	if want := filepath.Join(proc, "1", "ns", "net"); code != 2 || !strings.Contains(errs, want) || !strings.Contains(errs, "needs the watch") {
		t.Errorf("bare --host-netns without the watch: exit %d, want 2 naming %s (%s)", code, want, errs)
	}
}

// TestAgentUnreachable: an agent that cannot see the pods' netns (the netns
// directory not mounted into its container: paths under a directory that
// does not exist) warns once per sandbox, counts each scan as an
// unreachable error and, every scan of the sweep unreachable, says
// degraded on /healthz (still 200) and in its gauge, until a scan reaches
// a netns.
func TestAgentUnreachable(t *testing.T) {
	dir := t.TempDir()
	// The agent's goroutines log while the test reads.
	var logs nstest.Buffer
	log := logrus.New()
	log.SetOutput(&logs)
	a, err := agent.New(agent.Config{Socket: filepath.Join(dir, "no-nri.sock"),
		Log: findings.Log{Path: filepath.Join(dir, "findings.jsonl")}, Seen: findings.Seen{Dir: filepath.Join(dir, "state")}, Observer: agentLog{log: log, records: new(scan.RecordLog)}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	srv, err := serveHealth(addr, "", a.Health().Alive, time.Minute, a.Health().Degraded, metricsHandler(agentRegistry(a)))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	pod := func(id, path string) *api.PodSandbox {
		return &api.PodSandbox{Id: id, Name: id, Namespace: "ns", Linux: &api.LinuxPodSandbox{
			Namespaces: []*api.LinuxNamespace{{Type: "network", Path: path}}}}
	}
	missing := filepath.Join(dir, "not-mounted", "netns", "cni-1")
	// A stopped sandbox (a completed Job's, NotReady: its netns gone, no
	// container running) is no error: not swept, nothing to degrade on.
	if _, err := a.Synchronize(ctx, []*api.PodSandbox{pod("job", missing)}, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "pods=1 sweep=0") {
		t.Fatalf("a stopped sandbox was swept:\n%s", logs.String())
	}
	running := []*api.Container{
		{Id: "ca", PodSandboxId: "a", State: api.ContainerState_CONTAINER_RUNNING},
		{Id: "cb", PodSandboxId: "b", State: api.ContainerState_CONTAINER_RUNNING},
	}
	// Two sweeps of the same two running pods: one warning per sandbox.
	for i := 0; i < 2; i++ {
		if _, err := a.Synchronize(ctx, []*api.PodSandbox{pod("a", missing), pod("b", missing)}, running); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("iptables_alerter_agent_errors_total{kind=\"unreachable\"} %d\n", 2*(i+1))
		waitFor(t, want, func() bool { _, body := get("/metrics"); return strings.Contains(body, want) })
	}
	waitFor(t, "degraded", func() bool { return a.Health().Degraded() != "" })
	if code, body := get("/healthz"); code != 200 || !strings.HasPrefix(body, "degraded: ") {
		t.Fatalf("/healthz %d %q, want 200 degraded", code, body)
	}
	if n := strings.Count(logs.String(), "pod netns unreachable"); n != 2 {
		t.Fatalf("%d warnings, want one per sandbox (2):\n%s", n, logs.String())
	}
	_, metrics := get("/metrics")
	for _, want := range []string{"iptables_alerter_agent_degraded 1\n", `iptables_alerter_agent_scans_total{outcome="unreachable",source="sweep"} 4` + "\n"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, metrics)
		}
	}
	// A netns the agent can read (its own) ends the degraded state.
	if _, err := a.Synchronize(ctx, []*api.PodSandbox{pod("c", "/proc/self/ns/net")}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "not degraded", func() bool { return a.Health().Degraded() == "" })
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz %d %q, want 200 ok", code, body)
	}
}

// TestAgentPodSeries: a running pod whose netns holds xt rules gets its
// per-pod series on /metrics, with its owner from the controller's label,
// next to the Go, process and build-info collectors; the series leaves
// when the pod's sandbox stops.
func TestAgentPodSeries(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	ns := nstest.New(t)
	ns.Run("iptables-nft", "-A", "INPUT", "-p", "tcp", "-m", "multiport", "--dports", "80,443", "-j", "DROP")
	dir := t.TempDir()
	log := logrus.New()
	log.SetOutput(io.Discard)
	a, err := agent.New(agent.Config{Socket: filepath.Join(dir, "no-nri.sock"),
		Log: findings.Log{Path: filepath.Join(dir, "findings.jsonl")}, Seen: findings.Seen{Dir: filepath.Join(dir, "state")}, Observer: agentLog{log: log, records: new(scan.RecordLog)}})
	if err != nil {
		t.Fatal(err)
	}
	reg := agentRegistry(a)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	metrics := func() string {
		rec := httptest.NewRecorder()
		metricsHandler(reg).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
	p := &api.PodSandbox{Id: "sb1", Name: "web-7d4b9c8f5-x2k9q", Namespace: "shop", Labels: map[string]string{"pod-template-hash": "7d4b9c8f5"},
		Linux: &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: ns.Path()}}}}
	if _, err := a.Synchronize(ctx, []*api.PodSandbox{p}, []*api.Container{{Id: "c1", PodSandboxId: "sb1", State: api.ContainerState_CONTAINER_RUNNING}}); err != nil {
		t.Fatal(err)
	}
	want := `iptables_alerter_agent_pod_rules{impact="xt",owner="Deployment/web",pod_name="web-7d4b9c8f5-x2k9q",pod_namespace="shop",vendor="unknown"} 1` + "\n"
	waitFor(t, "the pod's series", func() bool { return strings.Contains(metrics(), want) })
	body := metrics()
	for _, w := range []string{"go_goroutines ", "process_cpu_seconds_total ", "go_build_info{", "iptables_alerter_agent_pod_series_left_out_total 0\n"} {
		if !strings.Contains(body, w) {
			t.Errorf("/metrics lacks %q", w)
		}
	}
	if err := a.StopPodSandbox(ctx, p); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the series gone", func() bool { return !strings.Contains(metrics(), "iptables_alerter_agent_pod_rules{") })
}

// TestAgentNotConnectedNamesCRI: with --cri-endpoint the agent's
// not-connected warning names that endpoint, not an NRI socket it does not
// use (the runbook tells the admin to look for it).
func TestAgentNotConnectedNamesCRI(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "no-cri.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "agent", "--cri-endpoint", sock, "--interval", "100ms",
		"--findings", filepath.Join(dir, "findings.jsonl"), "--state-dir", filepath.Join(dir, "state"),
		"--allowlist", "", "--host-proc", "", "--health-addr", "")
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	want := "not connected to the runtime's CRI endpoint " + sock + ", retrying"
	var seen []string
	for sc := bufio.NewScanner(out); sc.Scan(); {
		if seen = append(seen, sc.Text()); strings.Contains(sc.Text(), want) {
			return
		}
	}
	t.Fatalf("no %q in the agent's log within 30 s:\n%s", want, strings.Join(seen, "\n"))
}
