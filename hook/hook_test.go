package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/testbin"
)

// bin is the hook binary built once for the tests that run it as a runtime
// would: a separate process fed a state on stdin.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "iptables-alerter-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Tests run the binary as an unprivileged user too.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "iptables-alerter")
	// make docs runs no test that needs the binary.
	flag.Parse()
	if f := flag.Lookup("update-docs"); f != nil && f.Value.String() == "true" {
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	// The build the tests run in: go test -tags hookonly runs the
	// hookonly binary, the one hooks.d runs.
	tags := ""
	if buildName == "hookonly" {
		tags = "hookonly"
	}
	if err := testbin.Build(bin, tags); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// pod describes the container a test pretends to start.
type pod struct {
	netns     string
	sandbox   string
	noLabels  bool
	hostNet   bool
	noConfig  bool
	rawState  string // used as stdin verbatim when set
	container string
	extraAnn  map[string]string // more pod annotations, as a pod may carry
}

// bundle writes a bundle with config.json and returns the state JSON.
func (p pod) state(t *testing.T) string {
	t.Helper()
	if p.rawState != "" {
		return p.rawState
	}
	dir := t.TempDir()
	ns := []map[string]string{{"type": "mount"}}
	if !p.hostNet {
		ns = append(ns, map[string]string{"type": "network", "path": p.netns})
	}
	if !p.noConfig {
		cfg, _ := json.Marshal(map[string]any{"ociVersion": "1.0.2", "linux": map[string]any{"namespaces": ns}})
		if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ann := map[string]string{"io.kubernetes.cri-o.SandboxID": p.sandbox, "io.kubernetes.cri-o.UserRequestedImage": "quay.io/example/app:1"}
	if !p.noLabels {
		ann["io.kubernetes.pod.namespace"] = "team-a"
		ann["io.kubernetes.pod.name"] = "web-1"
		ann["io.kubernetes.pod.uid"] = "0b8c6a6e-1111-2222-3333-444455556666"
		ann["io.kubernetes.container.name"] = "app"
	}
	for k, v := range p.extraAnn {
		ann[k] = v
	}
	id := p.container
	if id == "" {
		id = "c0ffee"
	}
	st, _ := json.Marshal(map[string]any{"ociVersion": "1.0.2", "id": id, "status": "running", "pid": os.Getpid(), "bundle": dir, "annotations": ann})
	return string(st)
}

type hookRun struct {
	findings string
	stateDir string
	stderr   string
	maxRSS   int64 // KiB, of the last run
}

// runHook runs the binary like a runtime: state on stdin, must exit 0.
func runHookProc(t *testing.T, stdin string, h *hookRun, extra ...string) {
	t.Helper()
	if h.findings == "" {
		h.findings = filepath.Join(t.TempDir(), "log", "findings.jsonl")
	}
	if h.stateDir == "" {
		h.stateDir = t.TempDir()
	}
	args := append([]string{"hook", "--stage", "poststart", "--node", "node-1", "--findings", h.findings, "--state-dir", h.stateDir}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	h.stderr = stderr.String()
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		h.maxRSS = ru.Maxrss
	}
	if err != nil {
		t.Fatalf("hook exited with %v (must always exit 0); stderr:\n%s", err, h.stderr)
	}
}
