// Package critest runs a real container runtime for tests, containerd 2.x
// or CRI-O, with NRI on, inside a network namespace the test creates, and
// drives it through the CRI gRPC API as the kubelet does (no crictl). The
// NRI agent's and the hook's tests use it, and a kubelet end-to-end test
// can point a kubelet at its Socket.
//
// Everything is the test's own: root, state, gRPC and NRI sockets under a
// temp dir; a CNI bridge and address range inside the test's netns
// (bridge + host-local, no masquerade, no portmap); an image imported from
// an OCI archive (no registry). The host's network is never touched: CNI
// runs in the runtime's netns.
package critest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	rt "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/tests/runtime/rootfs"
)

// ImageRef is the test image: busybox and iptables. It is also the pause
// (sandbox) image, its default command a shell waiting for SIGTERM.
const ImageRef = "localhost/iptables-alerter-test:1"

// CRI is what both runtimes' harnesses share: the runtime process in the
// test's netns, its CRI client, and the pod helpers (pods.go).
type CRI struct {
	Dir       string
	Socket    string
	NRISocket string
	// Netns is the network namespace the runtime (and so CNI) runs in.
	Netns   string
	Runtime rt.RuntimeServiceClient
	Images  rt.ImageServiceClient

	t    testing.TB
	name string   // the runtime, in messages and log file names
	argv []string // how to start it, kept for Restart
	env  []string
	conn *grpc.ClientConn
	cmd  *exec.Cmd
	done chan struct{}
	n    int
}

// newCRI makes the runtime's dir (short: unix socket paths are limited)
// and its netns with lo up. cleanup runs when the test ends, before the
// dir and netns go; it must leave no pod, process or mount behind.
func newCRI(t testing.TB, name string, cleanup func(*CRI)) *CRI {
	t.Helper()
	netnsName := nstest.NewName(t)
	sweepDirs(t)
	dir, err := os.MkdirTemp("", "ipta-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(nstest.Owner()), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &CRI{Dir: dir, Socket: filepath.Join(dir, "c.sock"), NRISocket: filepath.Join(dir, "nri.sock"),
		Netns: netnsName, t: t, name: name}
	t.Cleanup(func() {
		cleanup(c)
		c.removeDirAndNetns()
	})
	if out, err := exec.Command("ip", "netns", "add", c.Netns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	if out, err := exec.Command("ip", "-n", c.Netns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v: %s", err, out)
	}
	for _, d := range []string{"net.d", "ipam", "logs"} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.writeCNI(); err != nil {
		t.Fatal(err)
	}
	return c
}

// writeCNI writes net.d/10-ipta.conflist: a bridge with a range of its own
// per runtime (tests may run several at once), no masquerade.
func (c *CRI) writeCNI() error {
	b := make([]byte, 1)
	_, _ = rand.Read(b)
	cni := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "ipta-test", "plugins": [
  {"type": "bridge", "bridge": "ipta0", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": "10.233.%d.0/24"}]]}}]}`,
		filepath.Join(c.Dir, "ipam"), b[0])
	return os.WriteFile(filepath.Join(c.Dir, "net.d", "10-ipta.conflist"), []byte(cni), 0o644)
}

// needCNI skips (fails under CI=true) without the CNI plugins the config uses.
func needCNI(t testing.TB) {
	t.Helper()
	for _, f := range []string{"/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback"} {
		_, err := os.Stat(f)
		nstest.Need(t, err == nil, "needs "+f+" (containernetworking-plugins)")
	}
}

// start runs the runtime in the test's netns (nsenter --net only: its
// mounts, the pinned pod netns among them, stay visible to the host and
// the agent) and waits until the CRI answers.
func (c *CRI) start() {
	c.t.Helper()
	c.n++
	logf, err := os.Create(c.logPath())
	if err != nil {
		c.t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + c.Netns, "--"}, c.argv...)...)
	cmd.Env = c.env
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", c.name, err)
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
	// Generous: a loaded 2-core machine, and CRI-O's first start sets up
	// its storage.
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Runtime.Version(ctx, &rt.VersionRequest{})
		cancel()
		if err == nil {
			return
		}
		select {
		case <-c.done:
			c.t.Fatalf("%s exited: %s", c.name, c.Log())
		default:
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s CRI not answering: %v; log: %s", c.name, err, c.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *CRI) logPath() string {
	return filepath.Join(c.Dir, "logs", fmt.Sprintf("%s-%d.log", c.name, c.n))
}

// Log is the current runtime's log (its end), for failure messages.
func (c *CRI) Log() string {
	b, _ := os.ReadFile(c.logPath())
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// stop ends the runtime with SIGTERM; shims, monitors and pods live on, as
// on a node where the runtime restarts.
func (c *CRI) stop() {
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

// Restart stops and starts the runtime, keeping its pods.
func (c *CRI) Restart() {
	c.t.Helper()
	c.stop()
	c.start()
}

// removePods stops and removes every pod, so the runtime removes their
// netns pins and their shims or monitors exit. A removal refused while a
// container is still starting (a call of a client that went away, still
// running in the runtime) is tried again until the bound. The containers
// are killed first (a stop of timeout 0): a test's pods need no grace,
// and CRI-O takes a pod stop's grace from the call's deadline, so one
// container slow to end on SIGTERM under load held the stop to the bound
// and left every other pod unstopped (CI saw it). Each call has its own
// deadline, within the bound.
func (c *CRI) removePods() {
	if c.cmd == nil || c.Runtime == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 20*time.Second) }
	for {
		lctx, lcancel := call()
		cl, err := c.Runtime.ListContainers(lctx, &rt.ListContainersRequest{})
		lcancel()
		if err == nil {
			for _, ct := range cl.Containers {
				if ct.State == rt.ContainerState_CONTAINER_RUNNING {
					sctx, scancel := call()
					_, _ = c.Runtime.StopContainer(sctx, &rt.StopContainerRequest{ContainerId: ct.Id, Timeout: 0})
					scancel()
				}
			}
		}
		l, err := c.Runtime.ListPodSandbox(ctx, &rt.ListPodSandboxRequest{})
		if err != nil {
			c.t.Logf("list pods at cleanup: %v", err)
			return
		}
		var failed []error
		for _, p := range l.Items {
			sctx, scancel := call()
			_, err := c.Runtime.StopPodSandbox(sctx, &rt.StopPodSandboxRequest{PodSandboxId: p.Id})
			scancel()
			if err != nil {
				failed = append(failed, fmt.Errorf("stop pod %s: %w", p.Id, err))
				continue
			}
			if _, err := c.Runtime.RemovePodSandbox(ctx, &rt.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
				failed = append(failed, fmt.Errorf("remove pod %s: %w", p.Id, err))
			}
		}
		if len(failed) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			// Not a verdict: the runtime's cleanup ends what is left.
			// Its log says why the stops hung.
			c.t.Logf("pods left at cleanup: %v; %s log:\n%s", failed, c.name, c.Log())
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// removeDirAndNetns unmounts what is still mounted under the dir (a
// rootfs, a pinned namespace), removes it and deletes the netns.
func (c *CRI) removeDirAndNetns() {
	if c.conn != nil {
		c.conn.Close()
	}
	if err := RemoveMounted(c.Dir); err != nil {
		c.t.Logf("unmount leftovers: %v", err)
	}
	if out, err := exec.Command("ip", "netns", "del", c.Netns).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
		c.t.Errorf("ip netns del %s: %v: %s", c.Netns, err, out)
	}
}

// RemoveMounted unmounts what is still mounted under dir (a rootfs, a
// pinned namespace, a kubelet's volumes), deepest first, and removes it.
func RemoveMounted(dir string) error {
	out, err := exec.Command("sh", "-c", `grep -o " `+dir+`[^ ]*" /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l`).CombinedOutput()
	if err != nil {
		err = fmt.Errorf("%w: %s", err, out)
	}
	return errors.Join(err, os.RemoveAll(dir))
}

// ownerFile, in a runtime's dir, holds the owner tag of the test binary
// that made it (nstest.OwnerEnv).
const ownerFile = "owner"

// sweepDirs removes the runtime dirs of test binaries that died before
// their cleanups ran (nstest has killed their processes and deleted their
// netns by now): the containers in their runc roots (their cgroups with
// them), their mounts, the dirs. Best effort, logged.
func sweepDirs(t testing.TB) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "ipta-*-*", ownerFile))
	for _, f := range dirs {
		tag, err := os.ReadFile(f)
		if err != nil || !nstest.OwnerGone(string(tag)) {
			continue
		}
		dir := filepath.Dir(f)
		roots, _ := filepath.Glob(filepath.Join(dir, "runc", "*"))
		runcs := []string{filepath.Join(CRIOBinDir(), "runc")}
		if p, err := runc(); err == nil {
			runcs = append(runcs, p)
		}
		for _, root := range append(roots, filepath.Join(dir, "runc")) {
			for _, r := range runcs {
				out, err := exec.Command(r, "--root", root, "list", "-q").Output()
				if err != nil {
					continue
				}
				for _, id := range strings.Fields(string(out)) {
					_ = exec.Command(r, "--root", root, "delete", "--force", id).Run()
				}
				break
			}
		}
		t.Logf("cleanup: %s, left by a test binary that died", dir)
		for _, ns := range cniNetns(dir) {
			t.Logf("cleanup: netns %s, its pod's", ns)
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
		if err := RemoveMounted(dir); err != nil {
			t.Logf("cleanup: %s: %v", dir, err)
		}
	}
}

// cniPin matches a pod netns pin containerd makes (netns.NewNetNS: its
// default dir and cni-UUID); CRI-O's go to its namespaces_dir, in dir.
var cniPin = regexp.MustCompile(`/var/run/netns/(cni-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})`)

// cniNetns names the pod netns pins a dead containerd of dir made, which
// stay in /var/run/netns when it dies before removing its pods: those its
// pods' bundles (a task's config.json, in its state dir) or its metadata
// (meta.db, in its root dir) name. Only those: another runtime's pods'
// netns are in the same dir.
func cniNetns(dir string) []string {
	seen := map[string]bool{}
	var names []string
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (d.Name() == "rootfs" || d.Name() == "snapshots") {
			return fs.SkipDir // the containers' files
		}
		if !d.Type().IsRegular() || (d.Name() != "config.json" && d.Name() != "meta.db") {
			return nil
		}
		if info, err := d.Info(); err != nil || info.Size() > 64<<20 {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		for _, m := range cniPin.FindAllSubmatch(b, -1) {
			if n := string(m[1]); !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
		return nil
	})
	return names
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

// testImage builds the test image's OCI archive once per test binary and
// returns its path.
func testImage(t testing.TB) string {
	t.Helper()
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
	nstest.Need(t, imageErr == nil, fmt.Sprintf("the test image (busybox-static, iptables): %v", imageErr))
	return imagePath
}
