package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/hooksdtest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/hookinstall"
)

// shippedHooksFile is the hooks.d file `make install` puts in place.
const shippedHooksFile = "../../hooks.d/iptables-alerter.json"

// podman drives a podman with every piece of state in the test's temp dirs,
// so it neither sees nor touches the host's containers, images or config.
type podman struct {
	t       *testing.T
	runtime string
	global  []string
	env     []string
}

// newPodman installs the shipped hooks.d file and the built hook the way
// `make install-files` does, into test-local dirs, and appends extra
// arguments to the hook's command; everything else of the JSON stays what
// ships. bindir is where the hook binary is installed.
func newPodman(t *testing.T, runtime string, extraHookArgs []string) (p *podman, bindir string) {
	t.Helper()
	// conmon's socket paths under the runroot must stay short: podman refuses
	// a runroot over 50 characters, which t.TempDir() names exceed.
	dir, err := os.MkdirTemp("/tmp", "ipta-pm-")
	if err != nil {
		t.Fatalf("create podman dir: %v", err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove podman dir: %v", err)
		}
	})
	hooksDir, bindir := filepath.Join(dir, "hooks.d"), filepath.Join(dir, "bin")
	makeInstall(t, bindir, hooksDir)
	appendHookArgs(t, filepath.Join(hooksDir, "iptables-alerter.json"), extraHookArgs)

	files := map[string]string{
		// Only what these runs need; the host's containers.conf could pick
		// another runtime, a systemd cgroup manager or a journald logger.
		"containers.conf": "[engine]\nevents_logger = \"none\"\ncgroup_manager = \"cgroupfs\"\n",
		"storage.conf": "[storage]\ndriver = \"vfs\"\ngraphroot = \"" + filepath.Join(dir, "root") +
			"\"\nrunroot = \"" + filepath.Join(dir, "runroot") + "\"\n",
		"registries.conf": "unqualified-search-registries = []\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p = &podman{
		t:       t,
		runtime: runtime,
		global: []string{
			"--root", filepath.Join(dir, "root"),
			"--runroot", filepath.Join(dir, "runroot"),
			"--tmpdir", filepath.Join(dir, "tmp"),
			"--volumepath", filepath.Join(dir, "volumes"),
			"--network-config-dir", filepath.Join(dir, "networks"),
			"--storage-driver", "vfs",
			"--cgroup-manager", "cgroupfs",
			"--events-backend", "none",
			"--runtime", runtime,
			"--hooks-dir", hooksDir,
		},
		env: append(os.Environ(),
			"CONTAINERS_CONF="+filepath.Join(dir, "containers.conf"),
			"CONTAINERS_STORAGE_CONF="+filepath.Join(dir, "storage.conf"),
			"CONTAINERS_REGISTRIES_CONF="+filepath.Join(dir, "registries.conf"),
		),
	}
	// Registered after the dir's removal so it runs first: nothing may stay mounted
	// under the dirs about to be removed.
	t.Cleanup(func() {
		if out, err := p.cmd(context.Background(), "rm", "--all", "--force").CombinedOutput(); err != nil {
			t.Errorf("podman rm --all: %v: %s", err, out)
		}
	})
	return p, bindir
}

// makeInstall runs the Makefile's install-files with the built hook as
// every binary: the binaries and the hooks.d JSON land exactly as
// `make install` puts them, BINDIR substituted by the Makefile's own sed.
func makeInstall(t *testing.T, bindir, hooksDir string) {
	t.Helper()
	cmd := exec.Command("make", "-s", "-C", "../..", "install-files", "BIN="+hookBin, "HOOKBIN="+hookBin, "AGENTBIN="+hookBin,
		"DESTDIR=", "BINDIR="+bindir, "HOOKSDIR="+hooksDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install-files: %v\n%s", err, out)
	}
}

// appendHookArgs adds arguments to the installed hook's command: after the
// shell's $0 they become its "$@", which the command passes on to the hook.
func appendHookArgs(t *testing.T, path string, extraArgs []string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read installed hooks file: %v", err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("decode installed hooks file: %v", err)
	}
	var hook specs.Hook
	if err := json.Unmarshal(doc["hook"], &hook); err != nil {
		t.Fatalf("decode installed hook entry: %v", err)
	}
	hook.Args = append(hook.Args, extraArgs...)
	if doc["hook"], err = json.Marshal(hook); err != nil {
		t.Fatal(err)
	}
	if data, err = json.MarshalIndent(doc, "", "  "); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatalf("write hooks file: %v", err)
	}
}

func (p *podman) cmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := runtimeCmd(ctx, "podman", append(append([]string{}, p.global...), args...)...)
	cmd.Env = p.env
	return cmd
}

// run starts one container to completion in the netns and returns its id
// and output; a non-zero exit fails the test: the hook must never break a
// container.
func (p *podman) run(netns string, annotations map[string]string, extra []string, command ...string) (id, out string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	cidfile := filepath.Join(p.t.TempDir(), "cid")
	args := []string{"run", "--rm", "--cidfile", cidfile, "--network", "ns:" + netns,
		// Some CI hosts cap the hard limits below podman's defaults.
		"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}
	for k, v := range annotations {
		args = append(args, "--annotation", k+"="+v)
	}
	args = append(args, extra...)
	args = append(args, "--rootfs", rootfs)
	args = append(args, command...)
	b, err := p.cmd(ctx, args...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("podman --runtime %s %s: %v: %s", p.runtime, strings.Join(shortArgs(args), " "), err, b)
	}
	cid, err := os.ReadFile(cidfile)
	if err != nil {
		p.t.Fatalf("read podman cidfile: %v", err)
	}
	return strings.TrimSpace(string(cid)), string(b)
}

// shortArgs cuts the long arguments (a test's large annotations) for an
// error message.
func shortArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if len(a) > 120 {
			a = fmt.Sprintf("%s...(%d bytes)", a[:60], len(a))
		}
		out[i] = a
	}
	return out
}

func needPodman(t *testing.T, runtime string) {
	t.Helper()
	nstest.NeedRoot(t, "podman", "conmon", runtime, "unshare", "iptables-nft", "iptables-nft-save", "nft")
	needRootfs(t)
}

// TestPodmanTwoContainers plays an istio-style pod: an init container writes
// a nat rule with iptables and exits, then the app container starts; the
// shipped hooks.d file, loaded by podman's copy of the library CRI-O uses,
// injects the hook and the finding is recorded once for the sandbox.
func TestPodmanTwoContainers(t *testing.T) {
	for _, rt := range []string{"crun", "runc"} {
		t.Run(rt, func(t *testing.T) {
			needPodman(t, rt)
			ns := nstest.New(t)
			files := newHookFiles(t)
			pm, _ := newPodman(t, rt, files.args())
			initC, app := newPod("istio-"+rt, "istio-init"), newPod("istio-"+rt, "app")
			app.uid, app.sandbox = initC.uid, initC.sandbox

			plainID, out := pm.run(ns.Path(), nil, nil, "sh", "-c", "echo alive")
			if !strings.Contains(out, "alive") {
				t.Errorf("plain container printed %q, want alive", out)
			}
			initID, _ := pm.run(ns.Path(), initC.annotations(), []string{"--cap-add", "NET_ADMIN"},
				"iptables", "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "--dport", "80", "-j", "REDIRECT", "--to-ports", "15001")
			if got := saveRules(t, ns); got != 1 {
				t.Fatalf("init container left %d rules, want 1:\n%s", got, ns.Run("iptables-nft-save"))
			}
			appID, out := pm.run(ns.Path(), app.annotations(), nil, "sh", "-c", "echo alive")
			if !strings.Contains(out, "alive") {
				t.Errorf("app container printed %q, want alive", out)
			}

			log := readLog(t, files.log)
			if strings.Contains(log, plainID) {
				t.Errorf("hook ran for a container without kubelet annotations: hooks.d when matched it\n%s", log)
			}
			if !strings.Contains(log, appID) {
				t.Errorf("hook log never mentions the app container %s: not injected at its poststart?\n%s", appID, log)
			}
			recs := findingstest.Read(t, files.findings)
			if len(recs) != 1 {
				t.Fatalf("got %d findings, want exactly 1: %+v\nhook log:\n%s", len(recs), recs, log)
			}
			// crun runs poststart after the process started, so the init
			// container's own hook may already see its rule; runc runs it
			// before, so only the app container's hook can.
			wantID, wantName := appID, app.container
			if rt == "crun" && recs[0].ContainerID == initID {
				wantID, wantName = initID, initC.container
			}
			want := projection{
				Stage: "poststart", ContainerID: wantID, SandboxID: app.sandbox,
				Pod:       findings.Pod{Namespace: app.namespace, Name: app.name, UID: app.uid},
				Container: wantName, Image: "registry.example/e2e/" + wantName + ":1", Netns: ns.Path(),
				Nft:    findings.Nft{Tables: []string{"ip nat"}, Chains: 1, Rules: 1},
				Legacy: findings.Legacy{Tables: []string{}},
			}
			if diff := cmp.Diff(want, project(recs[0])); diff != "" {
				t.Errorf("finding mismatch (-want +got):\n%s", diff)
			}

			// Restarts with the same rules: the hook runs, writes nothing.
			var again []string
			for i := 0; i < 2; i++ {
				id, _ := pm.run(ns.Path(), app.annotations(), nil, "true")
				again = append(again, id)
			}
			log = readLog(t, files.log)
			for _, id := range again {
				if !strings.Contains(log, id) {
					t.Errorf("hook log never mentions restarted container %s", id)
				}
			}
			if recs := findingstest.Read(t, files.findings); len(recs) != 1 {
				t.Errorf("after restarts got %d findings, want still 1: %+v", len(recs), recs)
			}

			// New usage in the same sandbox is a new finding.
			ns.Run("iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "DROP")
			pm.run(ns.Path(), app.annotations(), nil, "true")
			recs = findingstest.Read(t, files.findings)
			if len(recs) != 2 {
				t.Fatalf("after a new rule got %d findings, want 2: %+v", len(recs), recs)
			}
			wantTables := []string{"ip filter", "ip nat"}
			if diff := cmp.Diff(findings.Nft{Tables: wantTables, Chains: 2, Rules: 2}, totals(recs[1].Nft)); diff != "" {
				t.Errorf("second finding nft mismatch (-want +got):\n%s", diff)
			}
			if recs[1].Fingerprint == recs[0].Fingerprint {
				t.Errorf("changed usage kept fingerprint %s", recs[0].Fingerprint)
			}
		})
	}
}

// TestPodmanHookNeverBreaksContainer breaks the hook's environment in ways a
// node can (unwritable paths, a bad flag after an upgrade, a malformed
// allowlist) and requires the container to start and exit 0 every time,
// with a state the runtime cannot write before the hook reads it.
func TestPodmanHookNeverBreaksContainer(t *testing.T) {
	cases := []struct {
		name string
		// args are appended after the test's own --findings/--state-dir/--log-file,
		// so they override them.
		args func(dir string) []string
		// check inspects the hook's files after the container ran.
		check func(t *testing.T, files hookFiles, recs []findings.Record, log string)
	}{
		{
			name: "findings dir under a regular file",
			args: func(dir string) []string { return []string{"--findings", filepath.Join(dir, "file", "findings.jsonl")} },
			check: func(t *testing.T, files hookFiles, recs []findings.Record, log string) {
				if !strings.Contains(log, "cannot record the finding") {
					t.Errorf("hook log lacks the write error:\n%s", log)
				}
			},
		},
		{
			name: "state dir under a regular file",
			args: func(dir string) []string { return []string{"--state-dir", filepath.Join(dir, "file", "state")} },
			check: func(t *testing.T, files hookFiles, recs []findings.Record, log string) {
				if !strings.Contains(log, "level=error") {
					t.Errorf("hook log lacks an error line:\n%s", log)
				}
			},
		},
		{
			name: "unknown flag",
			args: func(string) []string { return []string{"--no-such-flag"} },
			check: func(t *testing.T, files hookFiles, recs []findings.Record, log string) {
				if len(recs) != 0 {
					t.Errorf("hook with a bad flag wrote %d findings", len(recs))
				}
			},
		},
		{
			name: "malformed allowlist still reports",
			args: func(dir string) []string { return []string{"--allowlist", filepath.Join(dir, "file")} },
			check: func(t *testing.T, files hookFiles, recs []findings.Record, log string) {
				if !strings.Contains(log, "cannot load the allowlist") {
					t.Errorf("hook log lacks the allowlist error:\n%s", log)
				}
				if len(recs) != 1 {
					t.Errorf("got %d findings, want 1: a broken allowlist must not hide usage", len(recs))
				}
			},
		},
		{
			name: "log file under a regular file",
			args: func(dir string) []string { return []string{"--log-file", filepath.Join(dir, "file", "hook.log")} },
			check: func(t *testing.T, files hookFiles, recs []findings.Record, log string) {
				if len(recs) != 1 {
					t.Errorf("got %d findings, want 1: logging trouble must not stop recording", len(recs))
				}
			},
		},
		{
			name: "deadline already past",
			args: func(string) []string { return []string{"--timeout", "1ns"} },
			check: func(t *testing.T, files hookFiles, recs []findings.Record, log string) {
				for _, r := range recs {
					if !r.Truncated && r.Error == "" && r.Nft.Rules != 1 {
						t.Errorf("a complete finding must count the 1 rule: %+v", r)
					}
				}
			},
		},
	}
	for _, rt := range []string{"crun", "runc"} {
		t.Run(rt, func(t *testing.T) {
			needPodman(t, rt)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					ns := nstest.New(t)
					ns.Run("iptables-nft", "-A", "OUTPUT", "-p", "tcp", "--dport", "80", "-j", "ACCEPT")
					files := newHookFiles(t)
					dir := t.TempDir()
					// Neither a directory nor JSON: every path under it fails, and
					// as an allowlist it does not parse.
					if err := os.WriteFile(filepath.Join(dir, "file"), []byte("not a dir, not JSON\n"), 0o644); err != nil {
						t.Fatal(err)
					}
					pm, _ := newPodman(t, rt, append(files.args(), tc.args(dir)...))
					// A state larger than a pipe's buffer (64 KiB): the
					// runtime's write of it blocks until the hook reads,
					// and a hook that exits unread gives crun a broken
					// pipe, which fails the container. Two annotations,
					// as one argument may hold at most 128 KiB.
					ann := newPod("broken-"+rt, "app").annotations()
					ann["example.com/big-1"] = strings.Repeat("a", 100<<10)
					ann["example.com/big-2"] = strings.Repeat("b", 100<<10)
					_, out := pm.run(ns.Path(), ann, nil, "sh", "-c", "echo alive")
					if !strings.Contains(out, "alive") {
						t.Errorf("container printed %q, want alive", out)
					}
					tc.check(t, files, findingstest.Read(t, files.findings), readLog(t, files.log))
				})
			}
		})
	}
}

// TestPodmanRefusesBadHookJSON: the hooks.d files install-hook refuses
// (hookinstall.CheckJSON) are ones podman, reading hooks.d with CRI-O's
// library, runs no container with, as CRI-O would not start with them:
// an installer writing one took the node's containers down at CRI-O's next
// restart. The file as installed, and one of each version the library
// reads, are accepted by both.
func TestPodmanRefusesBadHookJSON(t *testing.T) {
	needPodman(t, "crun")
	pm, _ := newPodman(t, "crun", nil)
	hooksDir := pm.global[slices.Index(pm.global, "--hooks-dir")+1]
	installed := filepath.Join(hooksDir, "iptables-alerter.json")
	good, err := os.ReadFile(installed)
	if err != nil {
		t.Fatal(err)
	}
	run := func() ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		defer cancel()
		return pm.cmd(ctx, "run", "--rm", "--network", "none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
			"--rootfs", rootfs, "true").CombinedOutput()
	}
	if err := hookinstall.CheckJSON(good); err != nil {
		t.Errorf("the installed hooks.d JSON refused: %v", err)
	}
	if out, err := run(); err != nil {
		t.Fatalf("podman with the installed hooks.d JSON: %v: %s", err, out)
	}
	for name, bad := range hooksdtest.Bad {
		if err := os.WriteFile(installed, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if hookinstall.CheckJSON([]byte(bad)) == nil {
			t.Errorf("%s: CheckJSON passed it", name)
		}
		if out, err := run(); err == nil {
			t.Errorf("%s: podman ran a container with it (the check refuses more than CRI-O's library: %s)", name, out)
		}
	}
	// What the library takes, of each version it reads, the check takes.
	for name, good := range hooksdtest.Good {
		if err := os.WriteFile(installed, []byte(good), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := hookinstall.CheckJSON([]byte(good)); err != nil {
			t.Errorf("%s: CheckJSON refused it: %v", name, err)
		}
		if out, err := run(); err != nil {
			t.Errorf("%s: podman refused it: %v: %s", name, err, out)
		}
	}
}
