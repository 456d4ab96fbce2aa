// Package demo runs tests/demo.sh, the main job `make demo` shows an
// admin first, end to end: it checks its own steps (a finding, an Event,
// the Reports, the report read from them, the watch's and the exec watch's
// findings) and exits 1 when one is missing, so a change that breaks what
// an admin runs first fails here instead of on their machine.
package demo

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/testbin"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

func TestDemo(t *testing.T) {
	nstest.NeedRoot(t, "bash", "python3", "curl", "openssl", "iptables-nft", "iptables-legacy")
	kubetest.Need(t)
	dir := t.TempDir()
	bin, hook := filepath.Join(dir, "iptables-alerter"), filepath.Join(dir, "iptables-alerter-hook")
	if err := testbin.Build(bin, ""); err != nil {
		t.Fatal(err)
	}
	if err := testbin.Build(hook, "hookonly"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "../demo.sh", bin, hook)
	cmd.Env = append(os.Environ(), "GO="+testbin.GoTool())
	// Its own process group: at the deadline the script is asked to end
	// (its EXIT trap stops the daemons it started and deletes its netns),
	// and whatever is left of the group is killed 30 s later.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	err := cmd.Wait()
	// Nothing of the demo outlives the test, even when it failed.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) || ctx.Err() != nil {
			t.Fatalf("tests/demo.sh: %v\n%s", err, tail(out.String(), 80))
		}
		t.Fatal(err)
	}
	// The steps the script checks print these; a step skipped without a
	// word would leave its heading out.
	for _, want := range []string{
		"The hook, as the runtime runs it at poststart",
		"Event and Report:",
		"RHEL 10 readiness: iptables-alerter report (from the cluster's Reports)",
		"The agent's watch:",
		"The agent's exec watch:",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo printed no %q:\n%s", want, tail(out.String(), 80))
		}
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
