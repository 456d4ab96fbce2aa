package packaging

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/testbin"
)

// TestInstallCheckLooksFurther: `install-hook --check-only` on a node
// with no CRI-O configuration, socket or binary in a standard directory
// looks for crio on PATH and among the running processes before it gives
// up; when it gives up it says "not checked" and names the flags that
// make that explicit (before, it passed in silence).
func TestInstallCheckLooksFurther(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	nstest.NeedRoot(t, "unshare", "sh")
	bin := filepath.Join(t.TempDir(), "iptables-alerter")
	if err := testbin.Build(bin, ""); err != nil {
		t.Fatal(err)
	}
	const etc = "/etc/containers/oci/hooks.d"
	check := func(t *testing.T, path string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"install-hook", "--check-only"}, args...)...)
		cmd.Env = []string{"PATH=" + path}
		return combined(t, cmd)
	}

	t.Run("nothing", func(t *testing.T) {
		root := t.TempDir()
		out, code := check(t, "/usr/bin:/bin", "--root", root, "--hooks-dir", etc)
		if code != 0 || !strings.Contains(out, "not checked") || !strings.Contains(out, "--runtime none") || !strings.Contains(out, "--runtime crio") {
			t.Errorf("exit %d, %q: want 0 saying not checked and naming --runtime none and --runtime crio", code, out)
		}
		out, code = check(t, "/usr/bin:/bin", "--root", root, "--hooks-dir", etc, "--runtime", "none")
		if code != 0 || !strings.Contains(out, "not checked (--runtime none)") {
			t.Errorf("--runtime none: exit %d, %q", code, out)
		}
		out, code = check(t, "/usr/bin:/bin", "--root", root, "--hooks-dir", etc, "--runtime", "crio")
		if code != 1 || !strings.Contains(out, "it reads only /usr/share/containers/oci/hooks.d") {
			t.Errorf("--runtime crio: exit %d, %q", code, out)
		}
	})

	t.Run("crio on PATH", func(t *testing.T) {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "opt/crio/bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "opt/crio/bin/crio"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		out, code := check(t, "/usr/bin:/opt/crio/bin:/bin", "--root", root, "--hooks-dir", etc)
		if code != 1 || !strings.Contains(out, "it reads only /usr/share/containers/oci/hooks.d") || !strings.Contains(out, "/opt/crio/bin/crio") {
			t.Errorf("exit %d, %q: want refused, naming the crio found", code, out)
		}
	})

	// A crio running from a directory nobody looks in, on the node itself
	// (--root /): in a PID and mount namespace of its own, so that the
	// machine's other processes (a real CRI-O of another test) are not
	// seen, and no configuration of this machine's is read.
	t.Run("crio running", func(t *testing.T) {
		for _, m := range []string{"/etc/crio/crio.conf", "/etc/crio/crio.conf.d", "/usr/bin/crio", "/usr/local/bin/crio", "/usr/sbin/crio", "/bin/crio", "/run/crio/crio.sock", "/var/run/crio/crio.sock"} {
			if _, err := os.Lstat(m); err == nil {
				t.Skipf("this machine has %s: --root / would find CRI-O there", m)
			}
		}
		dir := t.TempDir()
		fake := filepath.Join(dir, "crio")
		if err := os.WriteFile(fake, []byte("#!/bin/sh\necho up > \"$READY\"\nsleep 600\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		// The namespace's init is the sh below: when it ends, the kernel
		// kills the fake crio with it.
		run := func(t *testing.T, crioArgs ...string) (string, int) {
			t.Helper()
			_ = os.Remove(filepath.Join(dir, "ready"))
			cmd := exec.Command("unshare", append([]string{"--mount", "--pid", "--fork", "--mount-proc", "sh", "-c",
				`READY="$0/ready"; export READY; "$0/crio" "$@" & n=0
while [ ! -s "$READY" ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done
"$BIN" install-hook --check-only --root / --hooks-dir "$HOOKS"`, dir}, crioArgs...)...)
			cmd.Env = []string{"PATH=/usr/bin:/bin", "BIN=" + bin, "HOOKS=" + etc}
			return combined(t, cmd)
		}
		out, code := run(t)
		if code != 1 || !strings.Contains(out, "it reads only /usr/share/containers/oci/hooks.d") || !strings.Contains(out, "crio running") {
			t.Errorf("crio running on its default: exit %d, %q: want refused, naming the running crio", code, out)
		}
		out, code = run(t, "--hooks-dir", etc)
		if code != 0 || !strings.Contains(out, "CRI-O reads "+etc) || !strings.Contains(out, "--hooks-dir of the running crio") {
			t.Errorf("crio running with --hooks-dir %s: exit %d, %q", etc, code, out)
		}
	})
}

// combined runs cmd and gives its output and exit status.
func combined(t *testing.T, cmd *exec.Cmd) (string, int) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}
