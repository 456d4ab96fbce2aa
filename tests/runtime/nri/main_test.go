// Package nri tests the NRI agent against real runtimes with NRI on,
// containerd 2.x and CRI-O (tests/runtime/critest), pods driven through the
// CRI as the kubelet drives them; on CRI-O also the hook, installed with the
// shipped hooks.d JSON into the hooks_dir CRI-O reads.
package nri

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/testbin"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/tests/runtime/critest"
)

// bin is the full build (the agent), hookBin the hookonly build hooks.d runs.
var bin, hookBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "ipta-nri-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	bin, hookBin = filepath.Join(tmp, "iptables-alerter"), filepath.Join(tmp, "iptables-alerter-hook")
	for out, tags := range map[string]string{bin: "", hookBin: "hookonly"} {
		if err := testbin.Build(out, tags); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	defer critest.RemoveImage()
	return m.Run()
}

// agentProc is one running agent.
type agentProc struct {
	cmd     *exec.Cmd
	done    chan error
	addr    string
	log     *nstest.Buffer
	files   agentFiles
	stopped bool
}

// agentFiles are what the agent shares with the hook.
type agentFiles struct {
	findings, state string
}

func newFiles(t *testing.T) agentFiles {
	d := t.TempDir()
	return agentFiles{findings: filepath.Join(d, "findings.jsonl"), state: filepath.Join(d, "state")}
}

// startAgent runs the agent binary on the runtime's NRI socket.
func startAgent(t *testing.T, socket string, f agentFiles) *agentProc {
	t.Helper()
	return startAgentArgs(t, f, "--nri-socket", socket)
}

// startAgentArgs runs the agent binary with the test's files and args.
func startAgentArgs(t *testing.T, f agentFiles, args ...string) *agentProc {
	t.Helper()
	a := &agentProc{addr: nstest.FreeAddr(t), log: new(nstest.Buffer), files: f, done: make(chan error, 1)}
	a.cmd = exec.Command(bin, append([]string{"agent", "--findings", f.findings, "--state-dir", f.state,
		"--allowlist", "", "--health-addr", a.addr, "--node", "test-node", "--log-level", "debug",
		// The node is the namespace the agent runs in, not pid 1's.
		"--host-proc", nstest.HostProc(t, "/proc/self/ns/net"),
		// The moments' tests see each moment's scan alone; the watch has
		// its own (watch_test.go), which turns it back on.
		"--watch=false"}, args...)...)
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.done <- a.cmd.Wait() }()
	t.Cleanup(func() { a.stop(t, syscall.SIGKILL) })
	return a
}

// stop ends the agent with sig and returns its exit code.
func (a *agentProc) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	if a.stopped {
		return 0
	}
	a.stopped = true
	_ = a.cmd.Process.Signal(sig)
	select {
	case <-a.done:
	case <-time.After(20 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
		t.Errorf("agent did not stop on %v; log:\n%s", sig, a.log)
	}
	return a.cmd.ProcessState.ExitCode()
}

// metric reads one sample from /metrics (sum over matching lines).
func (a *agentProc) metric(t *testing.T, name string, labels ...string) (float64, bool) {
	t.Helper()
	resp, err := http.Get("http://" + a.addr + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var sum float64
	found := false
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
			found = true
		}
	}
	return sum, found
}

// waitMetric waits until the metric reaches want.
func (a *agentProc) waitMetric(t *testing.T, want float64, name string, labels ...string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if v, _ := a.metric(t, name, labels...); v >= want {
			return
		}
		if time.Now().After(deadline) {
			v, _ := a.metric(t, name, labels...)
			t.Fatalf("%s%v = %v, want >= %v; agent log:\n%s", name, labels, v, want, a.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// forPod keeps the records of one pod.
func forPod(recs []findings.Record, name string) []findings.Record {
	var out []findings.Record
	for _, r := range recs {
		if r.Pod.Name == name {
			out = append(out, r)
		}
	}
	return out
}
