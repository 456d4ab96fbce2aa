//go:build !hookonly && !agentonly

package main

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/certtest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// startAgent runs the real agent against an NRI socket nobody serves (it
// keeps retrying, and serves its pages meanwhile) and ends it with the
// test.
func startAgent(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(bin, append([]string{"agent", "--nri-socket", filepath.Join(dir, "nri.sock"),
		"--findings", filepath.Join(dir, "findings.jsonl"), "--state-dir", filepath.Join(dir, "state"),
		"--allowlist", "", "--host-proc", "", "--log-format", "json"}, args...)...)
	logs, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start agent: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logs.Close(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logs.Name())
			t.Logf("agent logs:\n%s", b)
		}
	})
	return cmd
}

// waitGet GETs url with c until it answers (the server is up), and gives
// the status and body.
func waitGet(t *testing.T, c *http.Client, url, token string) (int, string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSecureMetrics: the OpenShift overlay's arrangement with the real
// binaries and a real API server. The agent serves /metrics on localhost
// only, the forwarder serves its own and the agent's over TLS to tokens
// the API server authenticates and, through the shipped RBAC, authorises;
// the plain ports (on loopback, as the manifests bind them behind TLS)
// keep /healthz and serve no metrics; a rotated certificate is served
// without a restart.
func TestSecureMetrics(t *testing.T) {
	e := newFwdEnv(t)
	for _, f := range []string{"../packaging/rbac/metrics.yaml", "../packaging/openshift/monitoring.yaml", "../packaging/secure-metrics/review.yaml"} {
		kubetest.Apply(t, e.cs, f)
	}
	ctx := kubetest.Ctx(t)
	for _, sa := range []struct{ ns, name string }{{"openshift-monitoring", "prometheus-k8s"}, {"elsewhere", "curious"}} {
		kubetest.Namespace(t, e.cs, sa.ns)
		if _, err := e.cs.CoreV1().ServiceAccounts(sa.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa.name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	prom := kubetest.Token(t, e.cs, "openshift-monitoring", "prometheus-k8s")
	curious := kubetest.Token(t, e.cs, "elsewhere", "curious")

	agentMetrics, agentHealth := nstest.FreeAddr(t), nstest.FreeAddr(t)
	startAgent(t, "--health-addr", agentHealth, "--metrics-addr", agentMetrics)
	certs := t.TempDir()
	first := certtest.Write(t, certs, "first")
	secure, health := nstest.FreeAddr(t), nstest.FreeAddr(t)
	e.start(t, "--health-addr", health, "--secure-metrics-addr", secure,
		"--tls-cert-file", filepath.Join(certs, "tls.crt"), "--tls-private-key-file", filepath.Join(certs, "tls.key"),
		"--agent-metrics", "http://"+agentMetrics+"/metrics")

	plain := &http.Client{Timeout: 30 * time.Second}
	// The agent is up before its page is asked for through the proxy.
	if code, _ := waitGet(t, plain, "http://"+agentMetrics+"/metrics", ""); code != 200 {
		t.Fatalf("agent's /metrics on localhost: %d", code)
	}
	pool := x509.NewCertPool()
	pool.AddCert(first)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	base := "https://" + secure
	cases := []struct {
		name, path, token string
		want              int
		body              string
	}{
		{name: "forwarder's metrics", path: "/metrics", token: prom, want: 200, body: "iptables_alerter_forward_findings_total"},
		{name: "agent's metrics", path: "/metrics/agent", token: prom, want: 200, body: "iptables_alerter_agent_connected 0"},
		{name: "no binding", path: "/metrics", token: curious, want: 403},
		{name: "no binding, agent's", path: "/metrics/agent", token: curious, want: 403},
		{name: "no token", path: "/metrics", want: 401},
		{name: "bad token", path: "/metrics", token: "not-a-token", want: 401},
		{name: "forged token", path: "/metrics", token: prom[:len(prom)-4] + "AAAA", want: 401},
		// A path not served is 404 before any review: made-up paths
		// spend no review budget and fill no verdict cache.
		{name: "path not served, no token", path: "/metrics/x", want: 404},
		{name: "path not served, bad token", path: "/debug", token: "not-a-token", want: 404},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := waitGet(t, client, base+tc.path, tc.token)
			if code != tc.want || !strings.Contains(body, tc.body) {
				t.Fatalf("GET %s: %d %q, want %d with %q", tc.path, code, body, tc.want, tc.body)
			}
			if tc.want != 200 && strings.Contains(body, "iptables_alerter") {
				t.Fatalf("refused request got metrics: %q", body)
			}
		})
	}

	t.Run("plain ports", func(t *testing.T) {
		for _, c := range []struct {
			url  string
			want int
		}{
			{"http://" + secure + "/metrics", 400}, // HTTP to the TLS port
			{"http://" + health + "/metrics", 404},
			{"http://" + health + "/healthz", 200},
			{"http://" + agentHealth + "/metrics", 404},
			{"http://" + agentHealth + "/healthz", 200},
		} {
			if code, body := waitGet(t, plain, c.url, prom); code != c.want || strings.Contains(body, "iptables_alerter") {
				t.Errorf("GET %s: %d %q, want %d and no metrics", c.url, code, body, c.want)
			}
		}
	})

	t.Run("certificate rotated", func(t *testing.T) {
		second := certtest.Write(t, certs, "second")
		conn, err := tls.Dial("tcp", secure, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if got := conn.ConnectionState().PeerCertificates[0]; !got.Equal(second) {
			t.Fatalf("serves %q after rotation, want second", got.Subject.CommonName)
		}
	})
}

// TestSecureMetricsFlags: the TLS flags make sense only together.
func TestSecureMetricsFlags(t *testing.T) {
	cases := []struct {
		name, want string
		args       []string
	}{
		{name: "no certificate", args: []string{"--secure-metrics-addr", ":0"}, want: "needs --tls-cert-file"},
		{name: "certificate alone", args: []string{"--tls-cert-file", "x", "--tls-private-key-file", "y"}, want: "need --secure-metrics-addr"},
		{name: "agent metrics alone", args: []string{"--agent-metrics", "http://127.0.0.1:9758/metrics"}, want: "need --secure-metrics-addr"},
		{name: "agent metrics not http", args: []string{"--secure-metrics-addr", ":0", "--tls-cert-file", "x", "--tls-private-key-file", "y", "--agent-metrics", "https://x/metrics"}, want: "want an http:// URL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCmd(t, append([]string{"forward"}, tc.args...)...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
			}
		})
	}
}
