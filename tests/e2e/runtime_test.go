package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	buildfs "github.com/iptables-alerter/iptables-alerter/tests/runtime/rootfs"
)

// hookPATH is the only environment the hook gets: runtimes pass hooks an
// empty environment unless the hook entry sets one.
const hookPATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// pod is the identity kubelet and CRI-O give a container, as annotations.
type pod struct {
	namespace, name, uid, container, sandbox, image string
}

func newPod(name, container string) pod {
	return pod{namespace: "e2e", name: name, uid: "uid-" + randHex(8), container: container,
		sandbox: randHex(32), image: "registry.example/e2e/" + container + ":1"}
}

// annotations are what CRI-O writes into config.json: kubelet labels and
// annotations plus its own io.kubernetes.cri-o.* keys.
func (p pod) annotations() map[string]string {
	return map[string]string{
		"io.kubernetes.pod.namespace":            p.namespace,
		"io.kubernetes.pod.name":                 p.name,
		"io.kubernetes.pod.uid":                  p.uid,
		"io.kubernetes.container.name":           p.container,
		"io.kubernetes.container.hash":           "5e1d2c3b",
		"io.kubernetes.cri-o.SandboxID":          p.sandbox,
		"io.kubernetes.cri-o.ContainerType":      "container",
		"io.kubernetes.cri-o.UserRequestedImage": p.image,
	}
}

// hookFiles are where one test's hook writes: findings, its dedup state and
// its log.
type hookFiles struct {
	findings, state, log string
}

func newHookFiles(t *testing.T) hookFiles {
	dir := t.TempDir()
	// Subdirectories that do not exist yet: the hook creates them itself.
	return hookFiles{
		findings: filepath.Join(dir, "log", "findings.jsonl"),
		state:    filepath.Join(dir, "state"),
		log:      filepath.Join(dir, "hook.log"),
	}
}

func (h hookFiles) args() []string {
	return []string{"--findings", h.findings, "--state-dir", h.state, "--log-file", h.log, "--log-level", "debug"}
}

// projection is the part of a record a test can predict.
type projection struct {
	Stage       string
	ContainerID string
	SandboxID   string
	Pod         findings.Pod
	Container   string
	Image       string
	Netns       string
	Nft         findings.Nft
	Legacy      findings.Legacy
	Truncated   bool
	Error       string
}

func project(r findings.Record) projection {
	return projection{Stage: r.Stage, ContainerID: r.ContainerID, SandboxID: r.SandboxID, Pod: r.Pod,
		Container: r.Container, Image: r.Image, Netns: r.Netns, Nft: totals(r.Nft), Legacy: r.Legacy,
		Truncated: r.Truncated, Error: r.Error}
}

// totals is n without its per-table counts: lib/classify checks those
// against the save tools; these tests check what the runtime path carries.
func totals(n findings.Nft) findings.Nft {
	n.PerTable = nil
	return n
}

func TestOCIRuntime(t *testing.T) {
	cases := []struct {
		name string
		// rules writes into the pinned netns before any container starts.
		rules func(t *testing.T, ns *nstest.NS)
		// notPod drops every kubelet annotation, as for a plain runc user.
		notPod bool
		// starts is how many containers of the same pod start in the netns.
		starts int
		// wantNft/wantLegacy are nil when no finding may be written.
		wantNft    *findings.Nft
		wantLegacy findings.Legacy
		// wantLogs must appear in the hook's log: they prove it ran.
		wantLogs []string
	}{
		{
			name:       "istio nat by iptables-nft-restore, two containers, one finding",
			rules:      func(t *testing.T, ns *nstest.NS) { ns.Restore(nstest.IstioNAT, "iptables-nft-restore") },
			starts:     2,
			wantNft:    &findings.Nft{Tables: []string{"ip nat"}, Chains: 6, Rules: 15},
			wantLegacy: findings.Legacy{Tables: []string{}},
			wantLogs:   []string{"iptables usage recorded", "same usage already recorded for this sandbox"},
		},
		{
			name: "one filter rule by iptables-legacy",
			rules: func(t *testing.T, ns *nstest.NS) {
				ns.Run("iptables-legacy", "-A", "INPUT", "-s", "192.0.2.1", "-j", "DROP")
			},
			starts:     1,
			wantNft:    &findings.Nft{Tables: []string{}},
			wantLegacy: findings.Legacy{Tables: []string{"ip filter"}, Rules: 1},
			wantLogs:   []string{"iptables usage recorded"},
		},
		{
			name:     "clean netns",
			starts:   1,
			wantLogs: []string{"no iptables usage"},
		},
		{
			name:     "not a pod container",
			rules:    func(t *testing.T, ns *nstest.NS) { ns.Restore(nstest.IstioNAT, "iptables-nft-restore") },
			notPod:   true,
			starts:   1,
			wantLogs: []string{"not a kubelet-created container, skipped"},
		},
	}
	for _, rt := range []string{"crun", "runc"} {
		t.Run(rt, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					nstest.NeedRoot(t, rt, "unshare", "iptables-nft", "iptables-nft-restore", "iptables-nft-save", "iptables-legacy", "nft")
					needRootfs(t)
					ns := nstest.New(t)
					if tc.rules != nil {
						tc.rules(t, ns)
					}
					before := ns.Ruleset()
					files := newHookFiles(t)
					p := newPod("web-"+rt, "app")
					var ids []string
					for i := 0; i < tc.starts; i++ {
						id := fmt.Sprintf("e2e-%s-%s", rt, randHex(6))
						ids = append(ids, id)
						annotations := p.annotations()
						if tc.notPod {
							annotations = map[string]string{"org.example.owner": "someone"}
						}
						bundle := writeBundle(t, ns.Path(), annotations, files)
						out := runContainer(t, rt, bundle, id)
						if !strings.Contains(out, "alive") {
							t.Errorf("container %s printed %q, want it to have run and printed alive", id, out)
						}
					}
					if after := ns.Ruleset(); after != before {
						t.Errorf("netns ruleset changed across the hook (-before +after):\n%s", cmp.Diff(before, after))
					}
					log := readLog(t, files.log)
					for _, want := range tc.wantLogs {
						if !strings.Contains(log, want) {
							t.Errorf("hook log lacks %q; log:\n%s", want, log)
						}
					}
					recs := findingstest.Read(t, files.findings)
					if tc.wantNft == nil {
						if len(recs) != 0 {
							t.Fatalf("got %d findings, want none: %+v", len(recs), recs)
						}
						return
					}
					if len(recs) != 1 {
						t.Fatalf("got %d findings, want exactly 1: %+v\nhook log:\n%s", len(recs), recs, log)
					}
					want := projection{
						Stage: "poststart", ContainerID: ids[0], SandboxID: p.sandbox,
						Pod:       findings.Pod{Namespace: p.namespace, Name: p.name, UID: p.uid},
						Container: p.container, Image: p.image, Netns: ns.Path(),
						Nft: *tc.wantNft, Legacy: tc.wantLegacy,
					}
					if diff := cmp.Diff(want, project(recs[0])); diff != "" {
						t.Errorf("finding mismatch (-want +got):\n%s", diff)
					}
					// The real iptables-nft-save is the reference for the count.
					if got, save := recs[0].Nft.Rules, saveRules(t, ns); got != save {
						t.Errorf("finding counts %d nft rules, iptables-nft-save prints %d", got, save)
					}
					if recs[0].Schema != findings.Schema || recs[0].Source != "hook" || recs[0].Fingerprint == "" || recs[0].Time.IsZero() {
						t.Errorf("finding header incomplete: schema %q source %q fingerprint %q time %v",
							recs[0].Schema, recs[0].Source, recs[0].Fingerprint, recs[0].Time)
					}
				})
			}
		})
	}
}

// writeBundle writes an OCI bundle whose config.json joins the pinned netns
// and names the built hook at poststart, as CRI-O would after merging
// hooks.d. The rootfs is shared and read-only.
func writeBundle(t *testing.T, netns string, annotations map[string]string, files hookFiles) string {
	t.Helper()
	timeout := 10
	return writeBundleHook(t, netns, annotations, specs.Hook{
		Path:    hookBin,
		Args:    append([]string{"iptables-alerter", "hook", "--stage", "poststart"}, files.args()...),
		Env:     []string{hookPATH},
		Timeout: &timeout,
	})
}

// writeBundleHook writes a bundle whose config.json runs hook at poststart,
// as CRI-O writes the hooks.d entries it matched into config.json.
func writeBundleHook(t *testing.T, netns string, annotations map[string]string, hook specs.Hook) string {
	t.Helper()
	bundle := t.TempDir()
	caps := []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"}
	spec := specs.Spec{
		// The oldest version with every field used here: crun 1.8 refuses
		// versions newer than it knows (specs.Version is the module's).
		Version: "1.0.2",
		Process: &specs.Process{
			User: specs.User{UID: 0, GID: 0},
			// The container outlives a quick poststart hook, as real ones
			// do: crun 1.8 waits for the hook with SIGCHLD blocked and
			// takes the first pending SIGCHLD's pid, so a container exiting
			// at the hook's moment (both pending under load) hides the
			// hook's exit and fails the run on the hook timeout ("timeout
			// expired for `/bin/sh`", TestRuntimeBrokenInstall once).
			Args: []string{"sh", "-c", "echo alive; sleep 0.5"},
			Env:  []string{hookPATH},
			Cwd:  "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}},
			NoNewPrivileges: true,
		},
		Root:     &specs.Root{Path: rootfs, Readonly: true},
		Hostname: "e2e",
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		},
		Hooks:       &specs.Hooks{Poststart: []specs.Hook{hook}},
		Annotations: annotations,
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace},
				{Type: specs.NetworkNamespace, Path: netns},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.MountNamespace},
			},
			Resources: &specs.LinuxResources{
				Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
			},
			MaskedPaths:   []string{"/proc/kcore", "/proc/keys", "/proc/timer_list"},
			ReadonlyPaths: []string{"/proc/sys", "/proc/sysrq-trigger"},
		},
	}
	data, err := json.MarshalIndent(spec, "", "\t")
	if err != nil {
		t.Fatalf("encode config.json: %v", err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644); err != nil {
		t.Fatalf("write config.json: %v", err)
	}
	return bundle
}

// runContainer runs the bundle to completion with the runtime and its own
// state dir, and fails the test unless the container exits 0. The container
// is deleted when the test ends, whatever happened.
func runContainer(t *testing.T, runtime, bundle, id string) string {
	t.Helper()
	state := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// Already gone after a foreground run; this catches failed starts.
		_ = runtimeCmd(ctx, runtime, "--root", state, "delete", "--force", id).Run()
	})
	cmd := runtimeCmd(ctx, runtime, "--root", state, "run", "--bundle", bundle, id)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s run %s: %v: %s", runtime, id, err, out)
	}
	return string(out)
}

// runtimeCmd runs an OCI runtime, or podman, on this host. crun refuses to
// create containers on hosts with hybrid cgroups where cgroup v2 holds a
// controller ("cgroups in hybrid mode not supported"), as some CI VMs have.
// There the command runs in a private mount namespace without the cgroup2
// mount, so crun sees plain cgroup v1; the host's mounts are untouched.
func runtimeCmd(ctx context.Context, name string, args ...string) *exec.Cmd {
	path := name
	if p, err := exec.LookPath(name); err == nil {
		path = p
	} else if p, err := buildfs.FindSbin(name); err == nil {
		path = p
	}
	if !hybridCgroups() {
		return exec.CommandContext(ctx, path, args...)
	}
	wrapped := append([]string{"--mount", "--propagation", "private", "--",
		"sh", "-c", `umount /sys/fs/cgroup/unified && exec "$0" "$@"`, path}, args...)
	return exec.CommandContext(ctx, "unshare", wrapped...)
}

func hybridCgroups() bool {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		return false
	}
	data, err := os.ReadFile("/sys/fs/cgroup/unified/cgroup.controllers")
	return err == nil && strings.TrimSpace(string(data)) != ""
}

func randHex(n int) string {
	b := make([]byte, (n+1)/2)
	if _, err := rand.Read(b); err != nil {
		panic(errors.New("read random bytes: " + err.Error()))
	}
	return hex.EncodeToString(b)[:n]
}
