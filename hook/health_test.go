//go:build !hookonly && !agentonly

package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// rssKB is a process' resident set, from /proc/PID/status.
func rssKB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestIdleConnectionsMemory: 5,000 keep-alive connections, each after one
// request, against the real agent's health port (before the bounds they
// took it from 31 MB to 130 MB, past its 128 MiB limit). The goal is
// under 10 MB; the verdict has a wide margin (30 MB), since what the Go
// runtime keeps is not exact. The figure is logged.
func TestIdleConnectionsMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping with -short: opens 5,000 connections")
	}
	const conns = 5000
	addr := nstest.FreeAddr(t)
	agent := startAgent(t, "--health-addr", addr)
	plain := &http.Client{Timeout: 30 * time.Second}
	if code, _ := waitGet(t, plain, "http://"+addr+"/healthz", ""); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	plain.CloseIdleConnections()
	before := rssKB(t, agent.Process.Pid)

	var (
		mu      sync.Mutex
		open    []net.Conn
		served  atomic.Int64
		refused atomic.Int64
		wg      sync.WaitGroup
	)
	t.Cleanup(func() {
		for _, c := range open {
			c.Close()
		}
	})
	work := make(chan struct{}, conns)
	for range conns {
		work <- struct{}{}
	}
	close(work)
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				// Past the cap and the kernel's backlog a connect waits:
				// those count as refused, which is the bound working.
				c, err := net.DialTimeout("tcp", addr, 2*time.Second)
				if err != nil {
					refused.Add(1)
					continue
				}
				mu.Lock()
				open = append(open, c)
				mu.Unlock()
				_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			}
		}()
	}
	wg.Wait()
	// Every open connection reads its reply at once, for a while: the
	// agent answers those it accepted (then they idle), the rest wait.
	deadline := time.Now().Add(5 * time.Second)
	for _, c := range open {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(deadline)
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				served.Add(1)
			}
		}()
	}
	wg.Wait()
	after := rssKB(t, agent.Process.Pid)
	t.Logf("agent RSS %d kB -> %d kB (+%.1f MB) with %d connections open (%d served, each then idle; %d not accepted by the kernel)",
		before, after, float64(after-before)/1024, len(open), served.Load(), refused.Load())
	if served.Load() == 0 {
		t.Fatal("no connection was served")
	}
	if growth := after - before; growth > 30*1024 {
		t.Fatalf("agent RSS grew by %d kB with %d idle connections, bound 30 MB (goal 10 MB)", growth, len(open))
	}
}

// TestProbeNotStarved: one client holds 40 connections on the real
// agent's health port (its cap is 32), opening another whenever the agent
// closes one; the kubelet's exec probe, `health --addr` on the agent's
// --probe-addr, is answered 16 times of 16 (before, the probe shared the
// cap and 15 of 16 failed).
func TestProbeNotStarved(t *testing.T) {
	addr, probe := nstest.FreeAddr(t), nstest.FreeAddr(t)
	startAgent(t, "--health-addr", addr, "--probe-addr", probe)
	plain := &http.Client{Timeout: 30 * time.Second}
	if code, _ := waitGet(t, plain, "http://"+addr+"/healthz", ""); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	plain.CloseIdleConnections()
	done := make(chan struct{})
	var wg sync.WaitGroup
	var held atomic.Int64
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", addr, 2*time.Second)
				if err != nil {
					continue
				}
				held.Add(1)
				// One request, then idle until the agent closes it (or
				// the test ends).
				_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
				go func() { <-done; c.Close() }()
				_, _ = io.Copy(io.Discard, c)
				c.Close()
			}
		}()
	}
	defer func() { close(done); wg.Wait() }()
	waitForLong(t, "40 connections held", 60*time.Second, func() bool { return held.Load() >= 40 })
	answered := 0
	for i := range 16 {
		// As the kubelet runs it: the binary, in the pod.
		out, err := exec.Command(bin, "health", "--addr", probe, "--timeout", "10s").CombinedOutput()
		if err == nil && strings.TrimSpace(string(out)) == "ok" {
			answered++
		} else {
			t.Logf("probe %d: %v, %q", i, err, out)
		}
	}
	if answered != 16 {
		t.Fatalf("%d of 16 probes answered while a client held the health port", answered)
	}
}

// TestHealthCommand: the exit status the probe goes by: 0 on 200 (ok or
// degraded, printed), 1 on any other answer or none, 2 on bad flags.
func TestHealthCommand(t *testing.T) {
	var code atomic.Int64
	code.Store(200)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(int(code.Load()))
		_, _ = io.WriteString(w, "degraded: no netns mount\n")
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, tc := range []struct {
		name   string
		status int
		args   []string
		want   int
		out    string
	}{
		{name: "ok", status: 200, args: []string{"--addr", addr}, want: 0, out: "degraded: no netns mount"},
		{name: "stalled", status: 503, args: []string{"--addr", addr}, want: 1, out: "503"},
		{name: "nobody listening", status: 200, args: []string{"--addr", nstest.FreeAddr(t)}, want: 1, out: "refused"},
		{name: "no address", status: 200, want: 2, out: "--addr"},
		{name: "bad timeout", status: 200, args: []string{"--addr", addr, "--timeout", "0s"}, want: 2, out: "--timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code.Store(int64(tc.status))
			got, stdout, stderr := runCmd(t, append([]string{"health"}, tc.args...)...)
			if got != tc.want || !strings.Contains(stdout+stderr, tc.out) {
				t.Fatalf("exit %d, %q %q; want %d with %q", got, stdout, stderr, tc.want, tc.out)
			}
		})
	}
}
