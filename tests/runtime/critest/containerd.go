// Package critest runs a real containerd 2.x for tests, with NRI on, inside
// a network namespace the test creates, and drives it through the CRI gRPC
// API as the kubelet does (no crictl). The NRI agent's tests use it, and a
// kubelet end-to-end test can point a kubelet at Containerd.Socket.
//
// Everything is the test's own: root, state, gRPC and NRI sockets under a
// temp dir; a CNI bridge and address range inside the test's netns
// (bridge + host-local, no masquerade, no portmap); an image imported from
// an OCI archive (no registry). The host's network is never touched: CNI
// runs in containerd's netns. Pod netns pins go where containerd always puts
// them, /var/run/netns/cni-*, and are removed with the pods at cleanup.
package critest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	rt "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/iptables-alerter/iptables-alerter/internal/nstest"
	"github.com/iptables-alerter/iptables-alerter/tests/runtime/rootfs"
)

// ImageRef is the test image: busybox and iptables. It is also the pause
// (sandbox) image, its default command a shell waiting for SIGTERM.
const ImageRef = "localhost/iptables-alerter-test:1"

// BinDir is where tests/runtime/build-containerd.sh puts containerd, its
// shim and ctr (IPTA_CACHE moves it, IPTA_CONTAINERD_BIN overrides it).
func BinDir() string {
	if d := os.Getenv("IPTA_CONTAINERD_BIN"); d != "" {
		return d
	}
	cache := os.Getenv("IPTA_CACHE")
	if cache == "" {
		cache = "/var/cache/iptables-alerter"
	}
	return filepath.Join(cache, "containerd", "bin")
}

// Containerd is one running containerd.
type Containerd struct {
	Dir       string
	Socket    string
	NRISocket string
	// Netns is the network namespace containerd (and so CNI) runs in.
	Netns   string
	Runtime rt.RuntimeServiceClient
	Images  rt.ImageServiceClient

	t    testing.TB
	conn *grpc.ClientConn
	cmd  *exec.Cmd
	done chan struct{}
	n    int
}

// Need skips (fails under CI=true) unless root, containerd, runc and the
// CNI plugins are here.
func Need(t testing.TB) {
	t.Helper()
	nstest.NeedRoot(t, "nsenter")
	for _, f := range []string{filepath.Join(BinDir(), "containerd"), filepath.Join(BinDir(), "containerd-shim-runc-v2"), filepath.Join(BinDir(), "ctr"), "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback"} {
		_, err := os.Stat(f)
		nstest.Need(t, err == nil, "needs "+f+" (tests/install-deps.sh, tests/runtime/build-containerd.sh, containernetworking-plugins)")
	}
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
	// Unix socket paths are short: not under t.TempDir's long names.
	dir, err := os.MkdirTemp("", "ipta-ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	c := &Containerd{Dir: dir, Socket: filepath.Join(dir, "c.sock"), NRISocket: filepath.Join(dir, "nri.sock"),
		Netns: "ipta-ctrd-" + hex.EncodeToString(b), t: t}
	t.Cleanup(c.cleanup)
	if out, err := exec.Command("ip", "netns", "add", c.Netns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	if out, err := exec.Command("ip", "-n", c.Netns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v: %s", err, out)
	}
	if err := c.writeConfig(); err != nil {
		t.Fatal(err)
	}
	c.start()
	c.importImage()
	return c
}

func (c *Containerd) writeConfig() error {
	runcPath, err := runc()
	if err != nil {
		return err
	}
	for _, d := range []string{"net.d", "ipam", "logs", "nri-plugins", "nri-conf"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o755); err != nil {
			return err
		}
	}
	// A range of its own per containerd: tests may run several at once.
	b := make([]byte, 1)
	_, _ = rand.Read(b)
	cni := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "ipta-test", "plugins": [
  {"type": "bridge", "bridge": "ipta0", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": "10.233.%d.0/24"}]]}}]}`,
		filepath.Join(c.Dir, "ipam"), b[0])
	if err := os.WriteFile(filepath.Join(c.Dir, "net.d", "10-ipta.conflist"), []byte(cni), 0o644); err != nil {
		return err
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
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[8]q
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
		filepath.Join(c.Dir, "net.d"), runcPath, filepath.Join(c.Dir, "runc"))
	return os.WriteFile(filepath.Join(c.Dir, "config.toml"), []byte(cfg), 0o644)
}

// start runs containerd in the test's netns (nsenter --net only: its mounts,
// the pinned pod netns among them, stay visible to the host and the agent)
// and waits until the CRI answers.
func (c *Containerd) start() {
	c.t.Helper()
	c.n++
	logf, err := os.Create(filepath.Join(c.Dir, "logs", fmt.Sprintf("containerd-%d.log", c.n)))
	if err != nil {
		c.t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("nsenter", "--net=/run/netns/"+c.Netns, "--",
		filepath.Join(BinDir(), "containerd"), "--config", filepath.Join(c.Dir, "config.toml"))
	cmd.Env = []string{"PATH=" + BinDir() + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start containerd: %v", err)
	}
	c.cmd, c.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(c.done)
	if c.conn == nil {
		conn, err := grpc.NewClient("unix://"+c.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			c.t.Fatal(err)
		}
		c.conn, c.Runtime, c.Images = conn, rt.NewRuntimeServiceClient(conn), rt.NewImageServiceClient(conn)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Runtime.Version(ctx, &rt.VersionRequest{})
		cancel()
		if err == nil {
			return
		}
		select {
		case <-c.done:
			c.t.Fatalf("containerd exited: %s", c.Log())
		default:
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("containerd CRI not answering: %v; log: %s", err, c.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Log is the current containerd's log, for failure messages.
func (c *Containerd) Log() string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, "logs", fmt.Sprintf("containerd-%d.log", c.n)))
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// stop ends containerd with SIGTERM; shims and pods live on, as on a node
// where containerd restarts.
func (c *Containerd) stop() {
	if c.cmd == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	c.cmd = nil
}

// Restart stops and starts containerd, keeping its pods.
func (c *Containerd) Restart() {
	c.t.Helper()
	c.stop()
	c.start()
}

var (
	imageOnce sync.Once
	imageDir  string
	imagePath string
	imageErr  error
)

// RemoveImage deletes the test image archive built for this test binary;
// call it from TestMain after m.Run.
func RemoveImage() {
	if imageDir != "" {
		_ = os.RemoveAll(imageDir)
	}
}

// importImage builds the test image once per test binary and imports it
// with ctr, as an admin without a registry would.
func (c *Containerd) importImage() {
	c.t.Helper()
	imageOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ipta-image-")
		if err != nil {
			imageErr = err
			return
		}
		imageDir = dir
		if imageErr = rootfs.Build(filepath.Join(dir, "rootfs")); imageErr != nil {
			return
		}
		imagePath = filepath.Join(dir, "image.tar")
		imageErr = rootfs.WriteOCIArchive(filepath.Join(dir, "rootfs"), imagePath, rootfs.Image{Ref: ImageRef,
			Cmd: []string{"/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"}})
		_ = os.RemoveAll(filepath.Join(dir, "rootfs"))
	})
	nstest.Need(c.t, imageErr == nil, fmt.Sprintf("the test image (busybox-static, iptables): %v", imageErr))
	out, err := exec.Command(filepath.Join(BinDir(), "ctr"), "--address", c.Socket, "--namespace", "k8s.io",
		"images", "import", "--local", "--snapshotter", "native", "--platform", "linux/"+goruntime.GOARCH, imagePath).CombinedOutput()
	if err != nil {
		c.t.Fatalf("ctr images import: %v: %s", err, out)
	}
}

// cleanup stops and removes every pod (so containerd removes their netns
// pins and the shims exit), then containerd, then its netns and files.
func (c *Containerd) cleanup() {
	if c.cmd != nil && c.Runtime != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if l, err := c.Runtime.ListPodSandbox(ctx, &rt.ListPodSandboxRequest{}); err == nil {
			for _, p := range l.Items {
				_, _ = c.Runtime.StopPodSandbox(ctx, &rt.StopPodSandboxRequest{PodSandboxId: p.Id})
				_, _ = c.Runtime.RemovePodSandbox(ctx, &rt.RemovePodSandboxRequest{PodSandboxId: p.Id})
			}
		}
		cancel()
	}
	c.stop()
	if c.conn != nil {
		c.conn.Close()
	}
	// Anything still mounted under the dir (a shim's rootfs) first.
	if out, err := exec.Command("sh", "-c", `grep -o " `+c.Dir+`[^ ]*" /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l`).CombinedOutput(); err != nil {
		c.t.Logf("unmount leftovers: %v: %s", err, out)
	}
	_ = os.RemoveAll(c.Dir)
	if out, err := exec.Command("ip", "netns", "del", c.Netns).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
		c.t.Errorf("ip netns del %s: %v: %s", c.Netns, err, out)
	}
}
