package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/iptables-alerter/iptables-alerter/lib/hookinstall"
)

// guardCommand is the shell command of the shipped JSON (`make install`
// replaces /usr/local/bin/). A missing binary: exit 0 at once. Else the hook
// runs under timeout(1), which SIGKILLs it after 5 s (below the JSON's 10 s
// timeout, above the hook's own 3 s), with its output on /dev/null, and the
// shell exits 0 whatever the hook did. Everything runs in the foreground:
// crun starts hooks with SIGCHLD blocked, and a shell's `wait` for a
// background job then never returns (dash, busybox), while its wait for a
// foreground command does; timeout(1) unblocks SIGCHLD itself. Without
// timeout(1) on the node, the hook is exec'd directly. Arguments added
// after $0 reach the hook as "$@". After a kill the shell waits a second
// before its own exit: the killed processes, orphaned to crun (a
// subreaper), die at that moment, and crun 1.8, which takes one pending
// SIGCHLD's pid, would miss the shell's exit and fail the container on the
// hook timeout. Whenever the hook may not have read the state on stdin (no
// binary, or a binary that failed), the shell reads it to the end before it
// exits: crun 1.8 writes the state after it forks the hook and dies of
// SIGPIPE ("signal: broken pipe", the container fails) when the hook has
// exited first, which a loaded machine makes happen (seen under make test
// with both cores busy); crun closes its end after writing, so the read ends.
const guardCommand = `b=/usr/local/bin/iptables-alerter-hook; [ -x "$b" ] || { cat >/dev/null 2>&1; exit 0; }; ` +
	`command -v timeout >/dev/null || exec "$b" hook --stage poststart "$@"; ` +
	`timeout -s KILL 5 "$b" hook --stage poststart "$@" >/dev/null 2>&1; r=$?; [ $r -eq 0 ] || cat >/dev/null 2>&1; [ $r -lt 128 ] || sleep 1; exit 0`

func loadShipped(t *testing.T) hookinstall.File {
	t.Helper()
	data, err := os.ReadFile(shippedHooksFile)
	if err != nil {
		t.Fatalf("read %s: %v", shippedHooksFile, err)
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	var f hookinstall.File
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("decode %s: %v", shippedHooksFile, err)
	}
	return f
}

func TestShippedHooksFile(t *testing.T) {
	f := loadShipped(t)
	if f.Version != "1.0.0" {
		t.Errorf("version %q, want 1.0.0", f.Version)
	}
	if diff := cmp.Diff([]string{"poststart"}, f.Stages); diff != "" {
		t.Errorf("stages (-want +got):\n%s", diff)
	}
	for _, s := range f.Stages {
		if !hookinstall.KnownStage(s) {
			t.Errorf("unknown stage %q would stop CRI-O from starting", s)
		}
	}
	// The runtime runs a shell that is always there, and the shell runs
	// the hook only if it is installed: a JSON whose binary is missing
	// would make every matching container fail.
	if f.Hook.Path != "/bin/sh" {
		t.Errorf("hook path %q, want /bin/sh", f.Hook.Path)
	}
	want := []string{"sh", "-c", guardCommand, "iptables-alerter-hook"}
	if diff := cmp.Diff(want, f.Hook.Args); diff != "" {
		t.Errorf("hook args (-want +got):\n%s", diff)
	}
	var path bool
	for _, e := range f.Hook.Env {
		path = path || strings.HasPrefix(e, "PATH=/")
	}
	if !path {
		t.Errorf("hook env %q sets no PATH: runtimes give hooks an empty environment", f.Hook.Env)
	}
	// The hook's own deadline is 2s plus a 1s watchdog; the runtime must
	// never be the one that kills it (that kills the container too).
	if f.Hook.Timeout == nil || *f.Hook.Timeout < 5 {
		t.Errorf("hook timeout %v, want at least 5 s, well above the internal deadline", f.Hook.Timeout)
	}
	if f.When.Always != nil || f.When.Commands != nil || f.When.HasBindMounts != nil {
		t.Errorf("when must select on annotations only: %+v", f.When)
	}
	if len(f.When.Annotations) == 0 {
		t.Fatal("when.annotations is empty: the hook would never be injected")
	}
	for k, v := range f.When.Annotations {
		for _, re := range []string{k, v} {
			if !strings.HasPrefix(re, "^") || !strings.HasSuffix(re, "$") {
				t.Errorf("when.annotations regexp %q is not anchored: containers/common matches unanchored", re)
			}
			if _, err := regexp.Compile(re); err != nil {
				t.Errorf("when.annotations regexp %q: %v", re, err)
			}
		}
	}
}

// TestShippedHooksWhen applies the shipped when.annotations the way
// containers/common does (every key/value pattern pair must match some
// annotation) to the map CRI-O passes: the kubelet's container annotations
// merged with the pod's annotations. Kubelet *labels* such as
// io.kubernetes.pod.uid are not in that map.
func TestShippedHooksWhen(t *testing.T) {
	f := loadShipped(t)
	cases := []struct {
		name        string
		annotations map[string]string
		want        bool
	}{
		{
			name: "kubelet app container",
			annotations: map[string]string{
				"io.kubernetes.container.hash":                     "7c9f4d2a",
				"io.kubernetes.container.restartCount":             "0",
				"io.kubernetes.container.terminationMessagePath":   "/dev/termination-log",
				"io.kubernetes.container.terminationMessagePolicy": "File",
				"io.kubernetes.pod.terminationGracePeriod":         "30",
				"kubernetes.io/config.seen":                        "2024-01-01T00:00:00Z",
				"kubernetes.io/config.source":                      "api",
			},
			want: true,
		},
		{
			name: "kubelet init container",
			annotations: map[string]string{
				"io.kubernetes.container.hash":         "1b2c3d",
				"io.kubernetes.container.restartCount": "0",
				"sidecar.istio.io/status":              `{"initContainers":["istio-init"]}`,
			},
			want: true,
		},
		{name: "no annotations (podman run, runc run)", annotations: map[string]string{}, want: false},
		{
			name:        "pod annotations only",
			annotations: map[string]string{"kubernetes.io/config.seen": "x", "kubernetes.io/config.source": "api"},
			want:        false,
		},
		{
			name:        "key that only contains the pattern",
			annotations: map[string]string{"x.io.kubernetes.container.hash.y": "abc"},
			want:        false,
		},
		{
			name:        "key with any char where the dots are",
			annotations: map[string]string{"io-kubernetes-container-hash": "abc"},
			want:        false,
		},
		{
			name:        "empty hash",
			annotations: map[string]string{"io.kubernetes.container.hash": ""},
			want:        false,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := whenMatches(t, f.When.Annotations, tc.annotations); got != tc.want {
				t.Errorf("when.annotations matched %v, want %v", got, tc.want)
			}
		})
	}
}

func whenMatches(t *testing.T, patterns, annotations map[string]string) bool {
	t.Helper()
	for kp, vp := range patterns {
		kre, vre := regexp.MustCompile(kp), regexp.MustCompile(vp)
		found := false
		for k, v := range annotations {
			if kre.MatchString(k) && vre.MatchString(v) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// TestShippedHooksCommand runs the shipped command with the shells a node
// may have as /bin/sh (dash on Debian, bash on RHEL/RHCOS, busybox): a
// missing or non-executable binary exits 0 at once; an installed one gets
// the state on stdin and the arguments; one that hangs is killed after 5 s
// and the command still exits 0, with its output pipe closed (runc waits for
// that pipe, not just for the process). Bounds are wide, for a loaded
// machine: "at once" is before the 5 s kill could have happened, and the
// hanging binary's command must return at the kill, not when the hanging
// process or an open pipe ends; that the kill comes before the JSON's
// timeout, where the runtime would fail the container, is checked on the
// numbers (at load 30 the command once took 12 s, the kill included).
func TestShippedHooksCommand(t *testing.T) {
	f := loadShipped(t)
	shells := [][]string{{"/bin/sh"}, {"bash", "--posix"}, {"dash"}, {"busybox", "sh"}}
	for _, sh := range shells {
		if _, err := exec.LookPath(sh[0]); err != nil {
			continue
		}
		t.Run(strings.Join(sh, " "), func(t *testing.T) {
			t.Parallel()
			bindir := t.TempDir()
			bin, got := filepath.Join(bindir, "iptables-alerter-hook"), filepath.Join(bindir, "got")
			args := append([]string{}, f.Hook.Args[1:]...)
			args[1] = strings.ReplaceAll(args[1], "/usr/local/bin/", bindir+"/")
			args = append(args, "--log-level", "debug")
			run := func() (string, time.Duration) {
				cmd := exec.Command(sh[0], append(sh[1:], args...)...)
				cmd.Stdin = strings.NewReader(`{"id":"c1"}`)
				var out strings.Builder
				// Not an *os.File: Wait returns only when every holder of
				// the pipe has closed it, as runc's does.
				cmd.Stdout, cmd.Stderr = &out, &out
				start := time.Now()
				if err := cmd.Run(); err != nil {
					t.Fatalf("%v: %v: %s", sh, err, out.String())
				}
				return out.String(), time.Since(start)
			}
			// The 5 s the guard gives a hook, and the JSON's timeout.
			if f.Hook.Timeout == nil {
				t.Fatal("the shipped JSON has no timeout")
			}
			kill, timeout := 5*time.Second, time.Duration(*f.Hook.Timeout)*time.Second
			if out, took := run(); out != "" || took >= kill {
				t.Errorf("binary missing: output %q after %v; want exit 0 at once, silently", out, took)
			}
			fake := "#!/bin/sh\n{ cat; echo; echo \"$*\"; } > " + got + "\necho to-stdout; echo to-stderr >&2\n"
			if err := os.WriteFile(bin, []byte(fake), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, took := run(); out != "" || took >= kill {
				t.Errorf("binary not executable: output %q after %v; want exit 0 at once, silently", out, took)
			}
			if err := os.Chmod(bin, 0o755); err != nil {
				t.Fatal(err)
			}
			if out, took := run(); out != "" || took >= kill {
				t.Errorf("installed binary: output %q after %v; want its output discarded and no wait", out, took)
			}
			if data, _ := os.ReadFile(got); string(data) != "{\"id\":\"c1\"}\nhook --stage poststart --log-level debug\n" {
				t.Errorf("installed binary got %q, want the state on stdin and the arguments", data)
			}
			if err := os.WriteFile(bin, []byte("#!/bin/sh\necho started > "+got+"\nexec sleep 3600\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			out, took := run()
			t.Logf("hanging binary: the command returned after %v", took)
			// The kill ends it, not the sleep's hour nor a pipe left open: a
			// loaded machine may add seconds to the kill, never an hour; that
			// the kill comes before the JSON's timeout is the two numbers'.
			if kill >= timeout {
				t.Errorf("the guard's %v kill is not before the JSON's %v timeout", kill, timeout)
			}
			if took < kill || took >= kill+time.Minute {
				t.Errorf("hanging binary: the command returned after %v, want the guard's %v kill", took, kill)
			}
			if data, _ := os.ReadFile(got); string(data) != "started\n" || out != "" {
				t.Errorf("hanging binary: ran=%q output %q", data, out)
			}
		})
	}
}
