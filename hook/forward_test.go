//go:build !hookonly && !agentonly

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/follow"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

const (
	fwdRBAC = "../packaging/rbac/forward.yaml"
	fwdNS   = "iptables-alerter"
	fwdSA   = "iptables-alerter-forward"
)

func TestForwardFlags(t *testing.T) {
	cases := []struct {
		name     string
		args     []string
		env      []string
		wantCode int
		wantErr  string
	}{
		{name: "help", args: []string{"--help"}, wantCode: 0, wantErr: "iptables-alerter forward [flags]"},
		{name: "unknown flag", args: []string{"--nope"}, wantCode: 2, wantErr: "unknown flag: --nope"},
		{name: "extra argument", args: []string{"x"}, wantCode: 2, wantErr: `unknown command "x"`},
		{name: "zero poll", args: []string{"--poll", "0s"}, wantCode: 2, wantErr: "must be positive"},
		{name: "zero qps", args: []string{"--kube-api-qps", "0"}, wantCode: 2, wantErr: "--kube-api-qps and --kube-api-burst must be positive"},
		{name: "negative burst", args: []string{"--kube-api-burst", "-1"}, wantCode: 2, wantErr: "--kube-api-qps and --kube-api-burst must be positive"},
		{name: "negative webhook hold", args: []string{"--webhook-hold", "-1s"}, wantCode: 2, wantErr: "--webhook-hold must not be negative"},
		{name: "no credentials, the deprecated --state-dir", args: []string{"--state-dir", "STATE"}, env: []string{"KUBERNETES_SERVICE_HOST=", "KUBERNETES_SERVICE_PORT="}, wantCode: 1, wantErr: "--kubeconfig not given and not running in a pod"},
		{name: "missing kubeconfig", args: []string{"--checkpoint-dir", "STATE", "--kubeconfig", "/nonexistent/kubeconfig"}, wantCode: 1, wantErr: "/nonexistent/kubeconfig"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"forward"}
			for _, a := range tc.args {
				args = append(args, strings.ReplaceAll(a, "STATE", t.TempDir()))
			}
			for _, e := range tc.env {
				k, v, _ := strings.Cut(e, "=")
				t.Setenv(k, v)
			}
			code, stdout, stderr := runCmd(t, args...)
			out := stdout + stderr
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d; output:\n%s", code, tc.wantCode, out)
			}
			if !strings.Contains(out, tc.wantErr) {
				t.Errorf("output lacks %q:\n%s", tc.wantErr, out)
			}
		})
	}
}

// fwdEnv is one API server, the forwarder's RBAC applied, and a findings
// file the test appends to the way the hook does.
type fwdEnv struct {
	c          *kubetest.Cluster
	cs         kubernetes.Interface
	kubeconfig string // the service account bound by packaging/rbac only
	findings   string
	state      string
	log        findings.Log
}

func newFwdEnv(t *testing.T) *fwdEnv {
	t.Helper()
	c := kubetest.Start(t)
	cs := c.Client()
	kubetest.Apply(t, cs, fwdRBAC)
	dir := t.TempDir()
	e := &fwdEnv{
		c: c, cs: cs,
		kubeconfig: c.Kubeconfig("forward", kubetest.Token(t, cs, fwdNS, fwdSA)),
		findings:   filepath.Join(dir, "findings.jsonl"),
		state:      filepath.Join(dir, "state"),
	}
	e.log = findings.Log{Path: e.findings}
	return e
}

func fwdRecord(pod *corev1.Pod, uid, fingerprint, container string) findings.Record {
	return findings.Record{
		Schema: findings.Schema, Time: findings.Now(), Node: "node-a", Source: "hook", Stage: "poststart",
		ContainerID: "cid-" + container, SandboxID: "sb-" + uid, Container: container,
		Pod:         findings.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: uid},
		Nft:         findings.Nft{Tables: []string{"ip nat"}, Chains: 2, Rules: 5},
		Examples:    []findings.Example{{Family: "ip", Table: "nat", Chain: "OUTPUT", Rule: "-A OUTPUT -p tcp -j REDIRECT --to-ports 15001"}},
		Fingerprint: fingerprint,
	}
}

func (e *fwdEnv) append(t *testing.T, recs ...findings.Record) {
	t.Helper()
	for _, r := range recs {
		if err := e.log.Append(context.Background(), r); err != nil {
			t.Fatalf("append finding: %v", err)
		}
	}
}

// fwdProc is the real binary running `forward`, its JSON logs collected.
type fwdProc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs bytes.Buffer
	done chan struct{}
}

func (e *fwdEnv) start(t *testing.T, extra ...string) *fwdProc {
	t.Helper()
	args := append([]string{"forward", "--findings", e.findings, "--checkpoint-dir", e.state, "--kubeconfig", e.kubeconfig,
		"--node-name", "node-a", "--poll", "20ms", "--max-backoff", "300ms", "--request-timeout", "5s", "--log-format", "json"}, extra...)
	p := &fwdProc{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	pr, pw := io.Pipe()
	p.cmd.Stderr = pw
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start forward: %v", err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			p.mu.Lock()
			p.logs.Write(sc.Bytes())
			p.logs.WriteByte('\n')
			p.mu.Unlock()
		}
	}()
	// done waits for the reader too: Wait returns once the last line is
	// in the pipe, which may be before the reader has kept it (CI saw
	// stop miss the shutdown line that the logs printed just after).
	go func() {
		_ = p.cmd.Wait()
		pw.Close()
		<-read
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("forwarder logs:\n%s", p.text())
		}
	})
	return p
}

func (p *fwdProc) text() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// entries returns the JSON log lines whose msg is msg.
func (p *fwdProc) entries(msg string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(p.text(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func (p *fwdProc) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal forwarder: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("forwarder did not exit after %v", sig)
	}
	if sig == syscall.SIGTERM {
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("exit %d after SIGTERM, want 0", code)
		}
		if len(p.entries("event forwarder stopped, checkpoint saved")) != 1 {
			t.Fatalf("no shutdown log after SIGTERM")
		}
	}
}

// podEvents counts our Events per pod, found the way kubectl describe does.
func (e *fwdEnv) podEvents(t *testing.T, pod *corev1.Pod) []corev1.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	evs, err := kubetest.Events(ctx, e.cs, pod.Namespace, "Pod", pod.Name, pod.UID)
	if err != nil {
		t.Fatal(err)
	}
	var mine []corev1.Event
	for _, ev := range evs {
		if ev.Reason == events.Reason && ev.ReportingController == events.Controller {
			mine = append(mine, ev)
		}
	}
	return mine
}

// waitDelivered waits until every pod has exactly want[pod] Events.
func (e *fwdEnv) waitDelivered(t *testing.T, limit time.Duration, pods []*corev1.Pod, want int) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		missing := 0
		for _, p := range pods {
			n := len(e.podEvents(t, p))
			if n > want {
				t.Fatalf("pod %s has %d events, want %d", p.Name, n, want)
			}
			if n < want {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d pods still lack their event after %s", missing, len(pods), limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestForwardEndToEnd runs the built binary with a token bound only to
// packaging/rbac, through SIGTERM and SIGKILL mid-stream and an API server
// outage, and checks that every pod ends with exactly one Event.
func TestForwardEndToEnd(t *testing.T) {
	e := newFwdEnv(t)
	kubetest.Namespace(t, e.cs, "shop")
	var pods []*corev1.Pod
	var recs []findings.Record
	for i := range 40 {
		p := kubetest.Pod(t, e.cs, "shop", fmt.Sprintf("web-%02d", i), nil, "")
		pods = append(pods, p)
		recs = append(recs, fwdRecord(p, string(p.UID), fmt.Sprintf("fp-%02d", i%5), "app"))
	}
	mirror := kubetest.Pod(t, e.cs, "kube-system", "etcd-node-a", map[string]string{events.MirrorAnnotation: "cfg-hash-1"}, "node-a")
	gone := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "deleted-1"}}

	// Phase 1: a running forwarder picks up findings, including a second
	// container of the same pod with the same rules (one Event), and a
	// static pod through its mirror.
	f := e.start(t, "--node-event", "--health-addr", nstest.FreeAddr(t))
	e.append(t, recs[:10]...)
	e.append(t, fwdRecord(pods[0], string(pods[0].UID), "fp-00", "sidecar"))
	e.append(t, fwdRecord(mirror, "cfg-hash-1", "fp-static", "etcd"))
	e.waitDelivered(t, 60*time.Second, append(pods[:10:10], mirror), 1)

	// Phase 2: SIGTERM while findings stream in.
	e.append(t, recs[10:20]...)
	fwdWaitAny(t, e, pods[10:20])
	f.stop(t, syscall.SIGTERM)
	f = e.start(t, "--node-event")
	e.waitDelivered(t, 60*time.Second, pods[:20], 1)

	// Phase 3: SIGKILL while findings stream in: the checkpoint may lag,
	// the replay must be answered AlreadyExists.
	e.append(t, recs[20:30]...)
	fwdWaitAny(t, e, pods[20:30])
	f.stop(t, syscall.SIGKILL)
	f = e.start(t, "--node-event", "--health-addr", nstest.FreeAddr(t))
	e.waitDelivered(t, 60*time.Second, pods[:30], 1)

	// Phase 4: the API server goes away; findings keep coming, among them
	// one for a pod that no longer exists.
	e.c.KillAPIServer()
	e.append(t, recs[30:35]...)
	e.append(t, fwdRecord(gone, "uid-deleted", "fp-gone", "app"))
	e.append(t, recs[35:]...)
	fwdWaitLog(t, f, "event not delivered, will retry the same finding", 1)
	fwdHealthy(t, f)
	e.c.StartAPIServer()
	e.waitDelivered(t, 90*time.Second, pods, 1)
	fwdWaitLog(t, f, "pod gone, finding skipped", 1)
	// The pod Event shows before the node summary of the same line is
	// posted; only then does the checkpoint move.
	e.waitCheckpointAtEnd(t)
	f.stop(t, syscall.SIGTERM)

	final := f.entries("event forwarder stopped, checkpoint saved")[0]
	if final["pod_gone_total"] != float64(1) {
		t.Errorf("pod_gone_total = %v, want 1", final["pod_gone_total"])
	}

	// Everything once more, from the start: nothing may double.
	if err := os.RemoveAll(e.state); err != nil {
		t.Fatal(err)
	}
	f = e.start(t, "--node-event")
	e.waitCheckpointAtEnd(t)
	f.stop(t, syscall.SIGTERM)
	final = f.entries("event forwarder stopped, checkpoint saved")[0]
	if final["created_total"] != float64(0) || final["duplicate_total"] != float64(len(recs)+2) {
		t.Errorf("full replay: created %v duplicate %v, want 0 and %d", final["created_total"], final["duplicate_total"], len(recs)+2)
	}
	for _, p := range append(pods, mirror) {
		if n := len(e.podEvents(t, p)); n != 1 {
			t.Errorf("pod %s/%s has %d events, want 1", p.Namespace, p.Name, n)
		}
	}
	if evs := e.podEvents(t, mirror); len(evs) == 1 && evs[0].InvolvedObject.UID != mirror.UID {
		t.Errorf("static pod event regards uid %q, want the mirror's %q", evs[0].InvolvedObject.UID, mirror.UID)
	}
	nodeEvs, err := kubetest.Events(kubetest.Ctx(t), e.cs, "", "Node", "node-a", types.UID("node-a"))
	if err != nil {
		t.Fatal(err)
	}
	// Fingerprints fp-00..fp-04, fp-static and fp-gone: one summary each.
	if len(nodeEvs) != 7 {
		t.Errorf("%d node events, want 7", len(nodeEvs))
	}
}

// waitCheckpointAtEnd waits until the saved checkpoint covers the whole
// findings file.
func (e *fwdEnv) waitCheckpointAtEnd(t *testing.T) {
	t.Helper()
	waitForLong(t, "the checkpoint at the end of the findings file", 60*time.Second, func() bool {
		fi, serr := os.Stat(e.findings)
		cp, err := follow.FileStore(filepath.Join(e.state, "checkpoint.json")).Load()
		return serr == nil && err == nil && cp.Offset == fi.Size()
	})
}

func fwdWaitAny(t *testing.T, e *fwdEnv, pods []*corev1.Pod) {
	t.Helper()
	waitForLong(t, "a first event of the batch", 60*time.Second, func() bool {
		for _, p := range pods {
			if len(e.podEvents(t, p)) > 0 {
				return true
			}
		}
		return false
	})
}

func fwdWaitLog(t *testing.T, f *fwdProc, msg string, n int) {
	t.Helper()
	waitForLong(t, fmt.Sprintf("%d log lines %q", n, msg), 60*time.Second, func() bool { return len(f.entries(msg)) >= n })
}

func waitForLong(t *testing.T, what string, limit time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fwdHealthy asserts /healthz says ok: an API outage is not a reason for
// the kubelet to restart the forwarder.
func fwdHealthy(t *testing.T, f *fwdProc) {
	t.Helper()
	addr := ""
	for i, a := range f.cmd.Args {
		if a == "--health-addr" && i+1 < len(f.cmd.Args) {
			addr = f.cmd.Args[i+1]
		}
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("healthz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("healthz status %d during API outage, want 200", resp.StatusCode)
	}
}

// TestForwardInProcess runs the loop in this process: malformed lines and
// records without pods are skipped and counted, and a service account
// without the RBAC binding gets 403, which holds the finding (nothing
// lost) until the binding from packaging/rbac appears.
func TestForwardInProcess(t *testing.T) {
	e := newFwdEnv(t)
	kubetest.Namespace(t, e.cs, "shop")
	pod := kubetest.Pod(t, e.cs, "shop", "late", nil, "")
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: fwdNS, Name: "unbound"}}
	if _, err := e.cs.CoreV1().ServiceAccounts(fwdNS).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := e.c.Kubeconfig("unbound", kubetest.Token(t, e.cs, fwdNS, "unbound"))

	if err := os.WriteFile(e.findings, []byte("not json\n{\"schema\":\"other/v9\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noPod := fwdRecord(pod, string(pod.UID), "fp-host", "app")
	noPod.Pod = findings.Pod{}
	e.append(t, noPod, fwdRecord(pod, string(pod.UID), "fp-late", "app"))

	var logs nstest.Buffer
	log := logrus.New()
	log.SetFormatter(&logrus.JSONFormatter{})
	log.SetOutput(&logs)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- forwardLoop(runCtx, forwardConfig{
			consumerFlags: consumerFlags{findings: e.findings, checkpointDir: e.state, poll: 20 * time.Millisecond},
			kubeconfig:    kubeconfig, nodeName: "node-a", maxBackoff: 200 * time.Millisecond, timeout: 5 * time.Second,
		}, log)
	}()
	logText := logs.String

	waitForLong(t, "a 403 retry", 30*time.Second, func() bool { return strings.Contains(logText(), "forbidden") })
	if n := len(e.podEvents(t, pod)); n != 0 {
		t.Fatalf("%d events without RBAC, want 0", n)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "unbound-forward"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: fwdSA},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: fwdNS, Name: "unbound"}},
	}
	if _, err := e.cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitDelivered(t, 30*time.Second, []*corev1.Pod{pod}, 1)
	// The Event exists before the forwarder has counted it: its handling
	// goes on (owner, Report), and a cancel then would leave it uncounted.
	waitForLong(t, "the Event counted", 30*time.Second, func() bool { return strings.Contains(logText(), `"msg":"event created"`) })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("forwardLoop: %v", err)
	}
	var final map[string]any
	for _, l := range strings.Split(logText(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "event forwarder stopped, checkpoint saved" {
			final = m
		}
	}
	want := map[string]float64{"created_total": 1, "malformed_total": 2, "no_pod_total": 1, "pod_gone_total": 0, "rejected_total": 0}
	for k, v := range want {
		if final[k] != v {
			t.Errorf("%s = %v, want %v (final log %v)", k, final[k], v, final)
		}
	}
	if r, _ := final["retries_total"].(float64); r < 1 {
		t.Errorf("retries_total = %v, want at least 1", final["retries_total"])
	}
}

// TestForwardRotation: the hook rotates the findings file while the
// forwarder follows it; the rotated copy is finished first, nothing is lost.
func TestForwardRotation(t *testing.T) {
	e := newFwdEnv(t)
	e.log.MaxBytes = 3000 // about four findings a file
	kubetest.Namespace(t, e.cs, "shop")
	f := e.start(t)
	var pods []*corev1.Pod
	for i := range 24 {
		p := kubetest.Pod(t, e.cs, "shop", fmt.Sprintf("rot-%02d", i), nil, "")
		pods = append(pods, p)
	}
	// Bursts of three: each burst crosses at most one rotation, which is
	// what the hook's single rotated copy allows a follower to lag by.
	for i := 0; i < len(pods); i += 3 {
		for _, p := range pods[i : i+3] {
			e.append(t, fwdRecord(p, string(p.UID), "fp-rot", "app"))
		}
		e.waitDelivered(t, 30*time.Second, pods[i:i+3], 1)
	}
	if _, err := os.Stat(e.findings + ".1"); err != nil {
		t.Fatalf("the findings file never rotated: %v", err)
	}
	e.waitDelivered(t, 30*time.Second, pods, 1)
	e.waitCheckpointAtEnd(t)
	f.stop(t, syscall.SIGTERM)
	final := f.entries("event forwarder stopped, checkpoint saved")[0]
	if final["created_total"] != float64(len(pods)) || final["malformed_total"] != float64(0) {
		t.Errorf("created %v malformed %v, want %d and 0", final["created_total"], final["malformed_total"], len(pods))
	}
}

// TestForwardThrottled puts a proxy in front of the real API server that
// answers the first event creates with 429 (with Retry-After, which
// client-go waits out itself) and then 503 and 500 (which the forwarder
// retries): each finding must arrive once, in file order.
func TestForwardThrottled(t *testing.T) {
	e := newFwdEnv(t)
	kubetest.Namespace(t, e.cs, "shop")
	a := kubetest.Pod(t, e.cs, "shop", "first", nil, "")
	b := kubetest.Pod(t, e.cs, "shop", "second", nil, "")

	target, err := url.Parse(e.c.URL)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.c.CA)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	faults := []int{http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusServiceUnavailable}
	var mu sync.Mutex
	var created []string
	proxy := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		isCreate := r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/apis/events.k8s.io/v1/")
		mu.Lock()
		if isCreate && len(faults) > 0 {
			code := faults[0]
			faults = faults[1:]
			mu.Unlock()
			if code == http.StatusTooManyRequests {
				w.Header().Set("Retry-After", "1")
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected","code":%d}`, code)
			return
		}
		mu.Unlock()
		// The event name leads with the pod name, in JSON and protobuf alike.
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		rp.ServeHTTP(rec, r)
		if isCreate && rec.Code == http.StatusCreated {
			mu.Lock()
			for _, name := range []string{"first", "second"} {
				if bytes.Contains(body, []byte(name+".iptalert-")) {
					created = append(created, name)
				}
			}
			mu.Unlock()
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	defer proxy.Close()

	// The same service account, through the proxy; client-go sends no
	// bearer token over plain http, hence TLS with the proxy's own cert.
	token := kubetest.Token(t, e.cs, fwdNS, fwdSA)
	proxyCA := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: proxy.Certificate().Raw}))
	kc := filepath.Join(t.TempDir(), "proxy.kubeconfig")
	if err := os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: p, cluster: {server: %q, certificate-authority-data: %q}}]
users: [{name: u, user: {token: %q}}]
contexts: [{name: c, context: {cluster: p, user: u}}]
current-context: c
`, proxy.URL, proxyCA, token)), 0o600); err != nil {
		t.Fatal(err)
	}
	e.kubeconfig = kc
	e.append(t, fwdRecord(a, string(a.UID), "fp-a", "app"), fwdRecord(b, string(b.UID), "fp-b", "app"))
	f := e.start(t)
	e.waitDelivered(t, 60*time.Second, []*corev1.Pod{a, b}, 1)
	e.waitCheckpointAtEnd(t)
	f.stop(t, syscall.SIGTERM)

	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]string{"first", "second"}, created); diff != "" {
		t.Errorf("creates that got through, in order (-want +got):\n%s", diff)
	}
	if len(faults) != 0 {
		t.Errorf("%d injected faults never served", len(faults))
	}
	final := f.entries("event forwarder stopped, checkpoint saved")[0]
	if r, _ := final["retries_total"].(float64); r < 3 {
		t.Errorf("retries_total = %v, want at least 3 (503, 500, 503)", final["retries_total"])
	}
}

// TestForwardSetsAsideRefusedFindings: findings naming a pod no API path
// can hold ("..", "%", "/") used to be retried forever while /healthz said
// ok, holding every later finding back. They are rejected, counted and
// logged, and the next finding is delivered. Then a damaged checkpoint,
// which used to make every start exit 1, replays instead.
func TestForwardSetsAsideRefusedFindings(t *testing.T) {
	e := newFwdEnv(t)
	kubetest.Namespace(t, e.cs, "shop")
	a := kubetest.Pod(t, e.cs, "shop", "after-the-bad-ones", nil, "")
	b := kubetest.Pod(t, e.cs, "shop", "after-the-damage", nil, "")
	for _, name := range []string{"..", "%", "a/b"} {
		e.append(t, fwdRecord(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}}, "u-bad", "fp-bad", "app"))
	}
	e.append(t, fwdRecord(a, string(a.UID), "fp-a", "app"))
	addr := nstest.FreeAddr(t)
	f := e.start(t, "--health-addr", addr)
	e.waitDelivered(t, 20*time.Second, []*corev1.Pod{a}, 1)
	fwdHealthy(t, f)
	if n := len(f.entries("event rejected by the API server, finding skipped")); n != 3 {
		t.Errorf("%d rejections logged, want 3", n)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`iptables_alerter_forward_findings_total{outcome="rejected"} 3`, `iptables_alerter_forward_findings_total{outcome="created"} 1`} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("/metrics lacks %s:\n%s", want, body)
		}
	}
	e.waitCheckpointAtEnd(t)
	f.stop(t, syscall.SIGTERM)
	if got := f.entries("event forwarder stopped, checkpoint saved")[0]["rejected_total"]; got != float64(3) {
		t.Errorf("rejected_total %v, want 3", got)
	}

	if err := os.WriteFile(filepath.Join(e.state, "checkpoint.json"), []byte(`{"dev":2049,"ino`), 0o600); err != nil {
		t.Fatal(err)
	}
	e.append(t, fwdRecord(b, string(b.UID), "fp-b", "app"))
	f = e.start(t)
	e.waitDelivered(t, 20*time.Second, []*corev1.Pod{a, b}, 1)
	if len(f.entries("checkpoint is damaged: reading the findings file again from its oldest line (Events already posted are answered AlreadyExists)")) != 1 {
		t.Errorf("no log line about the damaged checkpoint")
	}
	e.waitCheckpointAtEnd(t)
	f.stop(t, syscall.SIGTERM)
}

// TestForwardDownDuringRotations: the forwarder is stopped while the hook
// rotates the file many times (an API server outage does the same); when
// it comes back it finishes every generation in order.
func TestForwardDownDuringRotations(t *testing.T) {
	e := newFwdEnv(t)
	e.log.MaxBytes, e.log.Generations = 3000, 8 // about four findings a file
	kubetest.Namespace(t, e.cs, "shop")
	var pods []*corev1.Pod
	for i := range 24 {
		pods = append(pods, kubetest.Pod(t, e.cs, "shop", fmt.Sprintf("gen-%02d", i), nil, ""))
	}
	e.append(t, fwdRecord(pods[0], string(pods[0].UID), "fp-gen", "app"))
	f := e.start(t)
	e.waitDelivered(t, 20*time.Second, pods[:1], 1)
	e.waitCheckpointAtEnd(t)
	f.stop(t, syscall.SIGTERM)
	for _, p := range pods[1:] {
		e.append(t, fwdRecord(p, string(p.UID), "fp-gen", "app"))
	}
	if _, err := os.Stat(e.findings + ".4"); err != nil {
		t.Fatalf("fewer than four rotations while the forwarder was down: %v", err)
	}
	f = e.start(t)
	e.waitDelivered(t, 30*time.Second, pods, 1)
	e.waitCheckpointAtEnd(t)
	f.stop(t, syscall.SIGTERM)
}
