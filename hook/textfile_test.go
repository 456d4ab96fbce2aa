//go:build !hookonly

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/follow"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func textfileDirs(t *testing.T) (findingsPath, state, text string) {
	d := t.TempDir()
	text = filepath.Join(d, "text")
	if err := os.MkdirAll(text, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(d, "findings.jsonl"), filepath.Join(d, "state"), text
}

func appendFinding(t *testing.T, path, ns, name, uid string, rules int) {
	t.Helper()
	r := findings.Record{Time: findings.Now(), Pod: findings.Pod{Namespace: ns, Name: name, UID: uid}, Fingerprint: "fp-" + uid}
	r.Nft.Rules, r.Nft.Tables = rules, []string{"ip filter"}
	if err := (findings.Log{Path: path}).Append(context.Background(), r); err != nil {
		t.Fatal(err)
	}
}

func TestTextfileFlags(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
	}{
		{"help", []string{"--help"}, 0, "iptables-alerter textfile [flags]"},
		{"unknown flag", []string{"--nope"}, 2, "unknown flag: --nope"},
		{"stray argument", []string{"extra"}, 2, `unknown command "extra"`},
		{"zero poll", []string{"--poll", "0s"}, 2, "--poll and --prune-interval must be positive"},
		{"missing textfile dir", []string{"--once", "--state-dir", "STATE", "--textfile-dir", "/nonexistent/dir"}, 1, `check textfile directory \"/nonexistent/dir\"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			for i, a := range tc.args {
				if a == "STATE" {
					tc.args[i] = state
				}
			}
			code, stdout, stderr := runCmd(t, append([]string{"textfile"}, tc.args...)...)
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.wantCode, stderr)
			}
			if !strings.Contains(stdout+stderr, tc.wantOut) {
				t.Errorf("output lacks %q:\n%s%s", tc.wantOut, stdout, stderr)
			}
		})
	}
}

// TestTextfileFollowAndSIGTERM runs the built binary as a daemon: it must
// pick up a finding appended while it runs, answer /healthz, and on SIGTERM
// save its checkpoint and exit 0.
func TestTextfileFollowAndSIGTERM(t *testing.T) {
	fp, state, text := textfileDirs(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "textfile", "--findings", fp, "--checkpoint-dir", state, "--textfile-dir", text, "--poll", "20ms", "--health-addr", addr, "--log-format", "json")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	appendFinding(t, fp, "team-a", "web-1", "u1", 4)
	prom := filepath.Join(text, "iptables_alerter.prom")
	want := `iptables_alerter_pod_iptables_rules{backend="nft",pod_name="web-1",pod_namespace="team-a"} 4`
	waitFor(t, "the finding in the textfile", func() bool {
		b, _ := os.ReadFile(prom)
		return strings.Contains(string(b), want)
	})
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("healthz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("healthz status %d, want 200", resp.StatusCode)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v; stderr:\n%s", err, stderr.String())
	}
	var saved struct{ Checkpoint follow.Checkpoint }
	b, err := os.ReadFile(filepath.Join(state, "state.json"))
	if err == nil {
		err = json.Unmarshal(b, &saved)
	}
	cp := saved.Checkpoint
	fi, serr := os.Stat(fp)
	if err != nil || serr != nil || cp.Offset != fi.Size() {
		t.Errorf("checkpoint after SIGTERM = %+v (%v), want offset %d", cp, err, fi.Size())
	}
	if !strings.Contains(stderr.String(), `"state_dir":`) {
		t.Errorf("logs lack snake_case fields:\n%s", stderr.String())
	}
}

// TestTextfileNoPermission runs as nobody against root-owned directories:
// the error must name the directory, and the exit status must be 1.
func TestTextfileNoPermission(t *testing.T) {
	nstest.Need(t, os.Geteuid() == 0, "needs root to run the binary as another user")
	d, exe := runnableCopy(t)
	text := filepath.Join(d, "text")
	if err := os.Mkdir(text, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, state, want string }{
		{"state dir", filepath.Join(d, "state"), fmt.Sprintf("create checkpoint directory %q", filepath.Join(d, "state"))},
		{"textfile dir", filepath.Join(d, "tmpstate"), "write textfile"},
	}
	if err := os.Mkdir(filepath.Join(d, "tmpstate"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(d, "tmpstate"), 0o777); err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(exe, "textfile", "--once", "--findings", filepath.Join(d, "f.jsonl"), "--state-dir", tc.state, "--textfile-dir", text)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Errorf("exit: %v, want status 1; output:\n%s", err, out)
			}
			if !strings.Contains(string(out), "permission denied") || !strings.Contains(strings.ReplaceAll(string(out), `\"`, `"`), tc.want) {
				t.Errorf("output lacks %q and permission denied:\n%s", tc.want, out)
			}
		})
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A damaged state file used to make every start exit 1 until someone
// deleted it; now the collector logs it and replays.
func TestTextfileDamagedState(t *testing.T) {
	fp, state, text := textfileDirs(t)
	appendFinding(t, fp, "team-a", "web-1", "u1", 3)
	args := []string{"--once", "--findings", fp, "--state-dir", state, "--textfile-dir", text, "--log-format", "json"}
	if code, _, stderr := runCmd(t, append([]string{"textfile"}, args...)...); code != 0 {
		t.Fatalf("first run: exit %d:\n%s", code, stderr)
	}
	if err := os.WriteFile(filepath.Join(state, "state.json"), []byte(`{"version":1,"po`), 0o640); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCmd(t, append([]string{"textfile"}, args...)...)
	if code != 0 {
		t.Fatalf("run on a damaged state: exit %d, want 0:\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "saved state is damaged") {
		t.Errorf("no log line about the damaged state:\n%s", stderr)
	}
	prom, err := os.ReadFile(filepath.Join(text, "iptables_alerter.prom"))
	if err != nil || !strings.Contains(string(prom), `pod_name="web-1"`) || !strings.Contains(string(prom), "iptables_alerter_findings_total 1\n") {
		t.Errorf("textfile after replay (%v):\n%s", err, prom)
	}
}

// TestTextfileContainerUser runs textfile --once as the container that
// packaging/kubernetes/textfile-container.yaml adds to node-exporter's
// DaemonSet would: its runAsUser, else the image's USER, every capability
// dropped, against what the node holds (the findings file 0640 root, as
// the hook and agent write it; the hostPath directories root's 0755, as
// the kubelet makes them). As the image's user it could read no finding.
func TestTextfileContainerUser(t *testing.T) {
	nstest.Need(t, os.Geteuid() == 0, "needs root to run the binary as the container's user")
	setpriv, err := exec.LookPath("setpriv")
	nstest.Need(t, err == nil, "needs setpriv (util-linux)")
	b, err := os.ReadFile("../packaging/kubernetes/textfile-container.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cs []corev1.Container
	if err := yaml.UnmarshalStrict(b, &cs); err != nil || len(cs) != 1 {
		t.Fatalf("textfile-container.yaml: %d containers, %v", len(cs), err)
	}
	uid := imageUser(t)
	if sc := cs[0].SecurityContext; sc != nil && sc.RunAsUser != nil {
		uid = *sc.RunAsUser
	}
	if sc := cs[0].SecurityContext; sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("the container does not drop every capability: %+v", sc)
	}

	d, exe := runnableCopy(t)
	fp, state, text := filepath.Join(d, "log", "findings.jsonl"), filepath.Join(d, "state"), filepath.Join(d, "text")
	for _, dir := range []string{filepath.Dir(fp), state, text} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	appendFinding(t, fp, "team-a", "web-1", "u1", 3)
	id := fmt.Sprint(uid)
	cmd := exec.Command(setpriv, "--reuid", id, "--regid", id, "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs",
		exe, "textfile", "--once", "--findings", fp, "--checkpoint-dir", state, "--textfile-dir", text)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("textfile --once as uid %d without capabilities: %v\n%s", uid, err, out)
	}
	prom, err := os.ReadFile(filepath.Join(text, "iptables_alerter.prom"))
	if err != nil || !strings.Contains(string(prom), `pod_name="web-1"`) {
		t.Errorf("textfile as uid %d wrote %v, %q; want web-1's series", uid, err, prom)
	}
}

// runnableCopy is a directory any user may enter (t.TempDir's are 0700),
// removed when the test ends, holding a copy of bin any user may run.
func runnableCopy(t *testing.T) (dir, exe string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "textfile-user")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	exe = filepath.Join(dir, "iptables-alerter")
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, exe
}

// imageUser is the uid packaging/Containerfile's USER runs as.
func imageUser(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("../packaging/Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if u, ok := strings.CutPrefix(l, "USER "); ok {
			u, _, _ = strings.Cut(strings.TrimSpace(u), ":")
			n, err := strconv.ParseInt(u, 10, 64)
			if err != nil {
				t.Fatalf("Containerfile USER %q: %v", u, err)
			}
			return n
		}
	}
	t.Fatal("Containerfile has no USER")
	return 0
}
