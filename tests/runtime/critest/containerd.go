package critest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/tests/runtime/rootfs"
)

// BinDir is where tests/runtime/build-containerd.sh puts containerd, its
// shim and ctr (IPTA_CACHE moves it, IPTA_CONTAINERD_BIN overrides it).
func BinDir() string {
	return cacheBin("IPTA_CONTAINERD_BIN", "containerd")
}

// cacheBin is the bin dir a tests/runtime/build-*.sh script fills in the
// tools cache, or the directory the override variable names.
func cacheBin(override, name string) string {
	if d := os.Getenv(override); d != "" {
		return d
	}
	cache := os.Getenv("IPTA_CACHE")
	if cache == "" {
		cache = "/var/cache/iptables-alerter"
	}
	return filepath.Join(cache, name, "bin")
}

// Containerd is one running containerd. Pod netns pins go where containerd
// puts them by default, /var/run/netns/cni-*, as on a node (the
// DaemonSet's agent in tests/cluster reads them there), and are removed
// with the pods at cleanup; those of a test binary that died, by the next
// runtime test's sweep (cniNetns).
type Containerd struct {
	*CRI
}

// Need skips (fails under CI=true) unless root, containerd, runc and the
// CNI plugins are here.
func Need(t testing.TB) {
	t.Helper()
	nstest.NeedRoot(t, "nsenter")
	for _, f := range []string{filepath.Join(BinDir(), "containerd"), filepath.Join(BinDir(), "containerd-shim-runc-v2"), filepath.Join(BinDir(), "ctr")} {
		_, err := os.Stat(f)
		nstest.Need(t, err == nil, "needs "+f+" (tests/install-deps.sh, tests/runtime/build-containerd.sh)")
	}
	needCNI(t)
	_, err := runc()
	nstest.Need(t, err == nil, "needs runc")
}

func runc() (string, error) {
	if p, err := exec.LookPath("runc"); err == nil {
		return p, nil
	}
	return rootfs.FindSbin("runc")
}

// Start starts containerd with NRI on and the test image imported; it is
// stopped, with its pods, when the test ends.
func Start(t testing.TB) *Containerd {
	t.Helper()
	Need(t)
	nstest.KeepXTMutexFree(t) // its pods' legacy looks, as New's namespaces
	c := &Containerd{newCRI(t, "containerd", func(c *CRI) {
		c.removePods()
		// containerd's stop leaves its shims running, as on a node.
		c.stop()
		// runc's root holds one directory per containerd namespace.
		roots, _ := filepath.Glob(filepath.Join(c.Dir, "runc", "*"))
		if p, err := runc(); err == nil {
			c.endLeftovers(p, roots...)
		}
	})}
	if err := c.writeConfig(); err != nil {
		t.Fatal(err)
	}
	c.argv = []string{filepath.Join(BinDir(), "containerd"), "--config", filepath.Join(c.Dir, "config.toml")}
	c.env = []string{"PATH=" + BinDir() + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", nstest.OwnerEnvVar()}
	c.start()
	c.importImage()
	return c
}

func (c *Containerd) writeConfig() error {
	runcPath, err := runc()
	if err != nil {
		return err
	}
	for _, d := range []string{"nri-plugins", "nri-conf"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o755); err != nil {
			return err
		}
	}
	cfg := fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = %[5]q
  plugin_path = %[6]q
  plugin_config_path = %[7]q
  plugin_registration_timeout = "5s"
  plugin_request_timeout = "2s"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "native"
  [plugins.'io.containerd.cri.v1.images'.registry]
    # Read at each pull: a test writes HOST/hosts.toml there (HostsDir).
    config_path = %[12]q
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[8]q
# A pull (the CRI's goes through the transfer service) unpacks with the
# snapshotter in use; the default names overlayfs only, and a pull then
# fails "no unpack platforms defined".
[[plugins.'io.containerd.transfer.v1.local'.unpack_config]]
  platform = %[13]q
  snapshotter = "native"
[plugins.'io.containerd.cri.v1.runtime']
  # Sandboxes ask for oom_score_adj -998; some VMs refuse any negative
  # value even to root, and runc then fails. Clamp to containerd's own.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = %[9]q
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      snapshotter = "native"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %[10]q
        Root = %[11]q
`, filepath.Join(c.Dir, "root"), filepath.Join(c.Dir, "state"), c.Socket, c.Socket+".ttrpc",
		c.NRISocket, filepath.Join(c.Dir, "nri-plugins"), filepath.Join(c.Dir, "nri-conf"), ImageRef,
		filepath.Join(c.Dir, "net.d"), runcPath, filepath.Join(c.Dir, "runc"), c.HostsDir(), "linux/"+goruntime.GOARCH)
	return os.WriteFile(filepath.Join(c.Dir, "config.toml"), []byte(cfg), 0o644)
}

// HostsDir is containerd's registry configuration directory: a
// HOST[:PORT]/hosts.toml there says how images of that registry are
// pulled (a plain-HTTP loopback registry, say).
func (c *Containerd) HostsDir() string { return filepath.Join(c.Dir, "certs.d") }

// importImage imports the test image with ctr, as an admin without a
// registry would.
func (c *Containerd) importImage() {
	c.t.Helper()
	imagePath := testImage(c.t)
	out, err := exec.Command(filepath.Join(BinDir(), "ctr"), "--address", c.Socket, "--namespace", "k8s.io",
		"images", "import", "--local", "--snapshotter", "native", "--platform", "linux/"+goruntime.GOARCH, imagePath).CombinedOutput()
	if err != nil {
		c.t.Fatalf("ctr images import: %v: %s", err, out)
	}
}
