package critest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	rt "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// CRIOBinDir is where tests/runtime/build-crio.sh puts crio, pinns and the
// runc CRI-O runs (IPTA_CACHE moves it, IPTA_CRIO_BIN overrides it).
func CRIOBinDir() string {
	return cacheBin("IPTA_CRIO_BIN", "crio")
}

// conmon is CRI-O's container monitor, Debian's.
const conmon = "/usr/bin/conmon"

// CRIO is one running CRI-O. Its pinned namespaces (network ones
// included), its storage and its runc state all live under Dir.
type CRIO struct {
	*CRI
	// HooksDir is CRI-O's only hooks_dir; it reads it at start and
	// watches it for changes.
	HooksDir string
}

// NeedCRIO skips (fails under CI=true) unless root, CRI-O, pinns, runc
// 1.4, conmon, podman (to import the image), jq (the runc wrapper) and the
// CNI plugins are here.
func NeedCRIO(t testing.TB) {
	t.Helper()
	nstest.NeedRoot(t, "nsenter", "unshare", "podman", "jq")
	for _, f := range []string{"crio", "pinns", "runc"} {
		_, err := os.Stat(filepath.Join(CRIOBinDir(), f))
		nstest.Need(t, err == nil, "needs "+filepath.Join(CRIOBinDir(), f)+" (tests/runtime/build-crio.sh)")
	}
	_, err := os.Stat(conmon)
	nstest.Need(t, err == nil, "needs "+conmon+" (tests/install-deps.sh)")
	needCNI(t)
}

// StartCRIO starts CRI-O with NRI on, hooksDir as its hooks_dir (an empty
// one of its own if "") and the test image in its storage; it is stopped,
// with its pods, when the test ends.
func StartCRIO(t testing.TB, hooksDir string) *CRIO {
	t.Helper()
	NeedCRIO(t)
	nstest.KeepXTMutexFree(t)
	c := &CRIO{CRI: newCRI(t, "crio", cleanupCRIO), HooksDir: hooksDir}
	if c.HooksDir == "" {
		c.HooksDir = filepath.Join(c.Dir, "hooks.d")
	}
	if err := c.writeConfig(); err != nil {
		t.Fatal(err)
	}
	c.importImage()
	c.argv = []string{filepath.Join(CRIOBinDir(), "crio"), "--config", filepath.Join(c.Dir, "crio.conf"),
		"--config-dir", filepath.Join(c.Dir, "crio.conf.d")}
	c.env = append(c.containersEnv(), "PATH="+CRIOBinDir()+":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	c.start()
	return c
}

// containersEnv points CRI-O and podman at the test's storage.conf and
// registries.conf, never the host's.
func (c *CRIO) containersEnv() []string {
	return []string{
		"CONTAINERS_STORAGE_CONF=" + filepath.Join(c.Dir, "storage.conf"),
		"CONTAINERS_REGISTRIES_CONF=" + filepath.Join(c.Dir, "registries.conf"),
		"CONTAINERS_CONF=" + filepath.Join(c.Dir, "containers.conf"),
	}
}

// runcWrapper is the runtime CRI-O runs: runc with what this kind of
// machine refuses taken out of the bundle's spec before create. CRI-O asks
// a pause container's process for oom_score_adj -998, and some VMs refuse
// any negative value even to root (containerd has restrict_oom_score_adj
// for that, CRI-O nothing); a kernel without the hugetlb controller fails
// a spec with hugepage limits.
const runcWrapper = `#!/bin/sh
b= p=
for a in "$@"; do
	if [ "$p" = --bundle ] || [ "$p" = -b ]; then b=$a; fi
	p=$a
done
if [ -n "$b" ] && [ -f "$b/config.json" ]; then
	jq -c 'if (.process.oomScoreAdj // 0) < 0 then .process.oomScoreAdj = 0 else . end | del(.linux.resources.hugepageLimits)' \
		"$b/config.json" >"$b/config.json.ipta" && mv "$b/config.json.ipta" "$b/config.json" || exit 1
fi
exec %q "$@"
`

func (c *CRIO) writeConfig() error {
	for _, d := range []string{"crio.conf.d", "hooks.d", "nri-plugins", "nri-conf", "ns", "exits", "attach", "cdi", "podman-tmp", "podman-net"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o755); err != nil {
			return err
		}
	}
	wrapper := filepath.Join(c.Dir, "runc-clamp")
	files := map[string]string{
		"runc-clamp":      fmt.Sprintf(runcWrapper, filepath.Join(CRIOBinDir(), "runc")),
		"storage.conf":    fmt.Sprintf("[storage]\ndriver = \"vfs\"\ngraphroot = %q\nrunroot = %q\n", filepath.Join(c.Dir, "root"), filepath.Join(c.Dir, "runroot")),
		"registries.conf": "unqualified-search-registries = []\n",
		"containers.conf": "[engine]\nevents_logger = \"none\"\ncgroup_manager = \"cgroupfs\"\n",
		"policy.json":     `{"default": [{"type": "insecureAcceptAnything"}]}`,
		"crio.conf": fmt.Sprintf(`[crio]
root = %[1]q
runroot = %[2]q
storage_driver = "vfs"
log_dir = %[3]q
version_file = %[4]q
version_file_persist = %[5]q
clean_shutdown_file = %[6]q
[crio.api]
listen = %[7]q
stream_address = "127.0.0.1"
stream_port = "0"
[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
conmon_cgroup = "pod"
hooks_dir = [%[8]q]
namespaces_dir = %[9]q
pinns_path = %[10]q
container_exits_dir = %[11]q
container_attach_socket_dir = %[12]q
cdi_spec_dirs = [%[13]q]
irqbalance_config_file = ""
irqbalance_config_restore_file = "disable"
log_level = "debug"
# Every pod gets an infra (pause) container, as a shareProcessNamespace pod
# does with the default: the hook must never run in one.
drop_infra_ctr = false
[crio.runtime.runtimes.runc]
runtime_path = %[14]q
runtime_type = "oci"
runtime_root = %[15]q
monitor_path = %[16]q
monitor_cgroup = "pod"
[crio.image]
pause_image = %[17]q
# The pause image's own command: the test image's shell waiting for SIGTERM.
pause_command = ""
signature_policy = %[18]q
[crio.network]
network_dir = %[19]q
plugin_dirs = ["/usr/lib/cni"]
[crio.metrics]
enable_metrics = false
[crio.nri]
enable_nri = true
nri_listen = %[20]q
nri_plugin_dir = %[21]q
nri_plugin_config_dir = %[22]q
nri_plugin_registration_timeout = "5s"
nri_plugin_request_timeout = "2s"
`, filepath.Join(c.Dir, "root"), filepath.Join(c.Dir, "runroot"), filepath.Join(c.Dir, "logs", "pods"),
			filepath.Join(c.Dir, "version"), filepath.Join(c.Dir, "version-persist"), filepath.Join(c.Dir, "clean.shutdown"),
			c.Socket, c.HooksDir, filepath.Join(c.Dir, "ns"), filepath.Join(CRIOBinDir(), "pinns"),
			filepath.Join(c.Dir, "exits"), filepath.Join(c.Dir, "attach"), filepath.Join(c.Dir, "cdi"),
			wrapper, filepath.Join(c.Dir, "runc"), conmon, ImageRef, filepath.Join(c.Dir, "policy.json"),
			filepath.Join(c.Dir, "net.d"), c.NRISocket, filepath.Join(c.Dir, "nri-plugins"), filepath.Join(c.Dir, "nri-conf")),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(c.Dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return os.Chmod(wrapper, 0o755)
}

// importImage puts the test image into CRI-O's storage with podman (same
// storage.conf), as an admin without a registry would, before CRI-O starts.
func (c *CRIO) importImage() {
	c.t.Helper()
	archive := testImage(c.t)
	podman := func(args ...string) string {
		// containers/image keeps a blob cache in /var/lib/containers/cache
		// for root whatever --root says: a tmpfs over /var/lib, in a mount
		// namespace of podman's own, takes it.
		cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--", "sh", "-c",
			`mount -t tmpfs ipta-podman /var/lib && exec "$@"`, "sh", "podman", "--root", filepath.Join(c.Dir, "root"), "--runroot", filepath.Join(c.Dir, "runroot"),
			"--storage-driver", "vfs", "--tmpdir", filepath.Join(c.Dir, "podman-tmp"), "--network-config-dir", filepath.Join(c.Dir, "podman-net"),
			"--volumepath", filepath.Join(c.Dir, "podman-volumes"), "--cgroup-manager", "cgroupfs", "--events-backend", "none"}, args...)...)
		cmd.Env = append(os.Environ(), c.containersEnv()...)
		out, err := cmd.Output()
		if err != nil {
			c.t.Fatalf("podman %s: %v: %s", strings.Join(args, " "), err, exitStderr(err))
		}
		return strings.TrimSpace(string(out))
	}
	id := podman("pull", "-q", "oci-archive:"+archive)
	podman("tag", id, ImageRef)
}

func exitStderr(err error) []byte {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.Stderr
	}
	return nil
}

// cleanupCRIO removes the pods through the CRI, stops CRI-O, then ends
// what is left (endLeftovers): containers in its runc root, conmon monitors
// and their children.
func cleanupCRIO(c *CRI) {
	c.removePods()
	c.stop()
	c.endLeftovers(filepath.Join(CRIOBinDir(), "runc"), filepath.Join(c.Dir, "runc"))
}

// ContainerSpec is the OCI spec CRI-O wrote for a container (or a pod's
// infra container, by the sandbox id): what runc ran, hooks included.
func (c *CRIO) ContainerSpec(id string) []byte {
	c.t.Helper()
	b, err := os.ReadFile(filepath.Join(c.Dir, "runroot", "vfs-containers", id, "userdata", "config.json"))
	if err != nil {
		c.t.Fatalf("container %s spec: %v", id, err)
	}
	return b
}

// Version is what CRI-O's CRI says it is.
func (c *CRIO) Version() string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	v, err := c.Runtime.Version(ctx, &rt.VersionRequest{})
	if err != nil {
		c.t.Fatal(err)
	}
	return v.RuntimeName + " " + v.RuntimeVersion
}
