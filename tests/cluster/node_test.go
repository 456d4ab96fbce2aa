// Package cluster runs the alerter end to end on a real single-node
// Kubernetes cluster the test starts: etcd, kube-apiserver, a kubelet
// v1.35 and containerd 2.x, all inside a network namespace of the test's
// own (the kubelet writes firewall chains such as KUBE-FIREWALL wherever
// it runs). Pods are created through the API and run by the kubelet; the
// agent sees them over NRI and the forwarder posts Events on them.
package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
	"github.com/iptables-alerter/iptables-alerter/tests/runtime/critest"
)

// nodeName is the kubelet's node; nodeIP an address on a veth link in the
// test's netns (no route leaves it).
const (
	nodeName = "ipta-node"
	nodeIP   = "10.234.0.1"
)

// KubeletPath is the kubelet tests/kube/build-kube.sh builds.
func KubeletPath() string {
	if p := os.Getenv("KUBELET"); p != "" {
		return p
	}
	return filepath.Join(filepath.Dir(kubetest.APIServerPath()), "kubelet")
}

// kernelTunables are the global sysctls the kubelet sets at start
// (setupKernelTunables); the test saves and restores them, and if its
// binary dies first, the next test binary does (nstest.SaveSysctls).
var kernelTunables = []string{"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes"}

// node is the running single-node cluster.
type node struct {
	ctrd    *critest.Containerd
	kube    *kubetest.Cluster
	cs      kubernetes.Interface
	netns   string // /run/netns path of the node's network namespace
	kubelet *exec.Cmd
	dir     string
}

// need skips (fails under CI=true) without the binaries.
func need(t *testing.T) {
	t.Helper()
	critest.Need(t)
	kubetest.Need(t)
	_, err := os.Stat(KubeletPath())
	nstest.Need(t, err == nil, "needs "+KubeletPath()+" (tests/kube/build-kube.sh)")
}

// startNode starts containerd, etcd, kube-apiserver and the kubelet in one
// netns and waits until the node is registered. Cleanups run in reverse:
// kubelet, API, containerd (with its pods and netns), then the sysctls are
// checked restored and no process of the test is left.
func startNode(t *testing.T) *node {
	t.Helper()
	need(t)
	n := &node{}
	t.Cleanup(func() { n.checkNothingLeft(t) })
	nstest.SaveSysctls(t, kernelTunables...)
	hostKube := kubeChains(t, "")
	t.Cleanup(func() {
		if got := kubeChains(t, ""); got != hostKube {
			t.Errorf("host firewall KUBE- chains went from %d to %d: the kubelet wrote outside its netns", hostKube, got)
		}
	})
	n.ctrd = critest.Start(t)
	n.netns = "/run/netns/" + n.ctrd.Netns
	for _, args := range [][]string{
		// A veth pair with both ends in the netns (this VM's kernel has no
		// dummy links): an up link with carrier for the node's address.
		{"link", "add", "ipta-node", "type", "veth", "peer", "name", "ipta-peer"},
		{"addr", "add", nodeIP + "/24", "dev", "ipta-node"},
		{"link", "set", "ipta-node", "up"},
		{"link", "set", "ipta-peer", "up"},
		// The kubelet wants a default route to pick addresses from.
		{"route", "add", "default", "dev", "ipta-node"},
	} {
		if out, err := exec.Command("ip", append([]string{"-n", n.ctrd.Netns}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	n.kube = kubetest.StartIn(t, n.netns)
	n.cs = n.kube.Client()
	n.startKubelet(t)
	return n
}

// kubeChains counts the KUBE- chains in the nftables ruleset of netns
// (empty: the host's, read only).
func kubeChains(t *testing.T, netns string) int {
	t.Helper()
	args := []string{"nft", "list", "ruleset"}
	if netns != "" {
		args = append([]string{"nsenter", "--net=" + netns, "--"}, args...)
	}
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v: %s", args, err, out)
	}
	return strings.Count(string(out), "chain KUBE-")
}

func (n *node) startKubelet(t *testing.T) {
	t.Helper()
	dir, err := os.MkdirTemp("", "ipta-kubelet-")
	if err != nil {
		t.Fatal(err)
	}
	n.dir = dir
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This VM has hybrid cgroup v1; containerd's runc uses cgroupfs.
cgroupDriver: cgroupfs
failCgroupV1: false
# No QoS cgroup tree on the host: containerd puts each container where the
# CRI says, and nothing is left under /sys/fs/cgroup afterwards.
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
# This VM refuses a negative oom_score_adj even to root.
oomScoreAdj: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
address: %[1]s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
podLogsDir: %[2]q
resolvConf: ""
registerNode: true
localStorageCapacityIsolation: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {}
syncFrequency: 5s
fileCheckFrequency: 5s
`, nodeIP, filepath.Join(dir, "pod-logs"))
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "kubelet.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nsenter", "--net="+n.netns, "--", KubeletPath(),
		"--config="+filepath.Join(dir, "config.yaml"),
		"--kubeconfig="+n.kube.Kubeconfig("kubelet", n.kube.AdminToken),
		"--container-runtime-endpoint=unix://"+n.ctrd.Socket,
		"--hostname-override="+nodeName,
		"--node-ip="+nodeIP,
		"--root-dir="+filepath.Join(dir, "root"),
		"--cert-dir="+filepath.Join(dir, "pki"),
		"--v=2")
	cmd.Env = []string{"PATH=" + critest.BinDir() + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", nstest.OwnerEnvVar()}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start kubelet: %v", err)
	}
	logf.Close()
	n.kubelet = cmd
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		n.deletePods(t)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("kubelet log tail:\n%s", tail(filepath.Join(dir, "kubelet.log"), 6000))
		}
		// The kubelet's volume mounts (tmpfs, bind) under its root dir.
		_ = critest.RemoveMounted(dir)
	})
	deadline := time.Now().Add(90 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		nd, err := n.cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		cancel()
		if err == nil && nodeReady(nd) {
			return
		}
		select {
		case <-done:
			t.Fatalf("kubelet exited: %s", tail(filepath.Join(dir, "kubelet.log"), 6000))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s not Ready after 90s (%v); kubelet log:\n%s", nodeName, err, tail(filepath.Join(dir, "kubelet.log"), 6000))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func nodeReady(nd *corev1.Node) bool {
	for _, c := range nd.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// deletePods deletes every pod through the API and waits until the
// kubelet has stopped them, so their sandboxes go the kubelet's way. The
// deletion is graceful (1 s, not 0): a grace of 0 removes the API object
// at once, while the kubelet may still be starting a container, and the
// kubelet stopped then leaves a task half made in its shim (a shim and a
// `runc init` nothing ends). With a grace period the object stays until
// the kubelet reports the pod's containers stopped.
func (n *node) deletePods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	nss, err := n.cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("list namespaces: %v", err)
		return
	}
	grace := int64(1)
	for _, ns := range nss.Items {
		_ = n.cs.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{})
	}
	for ctx.Err() == nil {
		l, err := n.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err == nil && len(l.Items) == 0 {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Not a verdict: containerd's cleanup removes what is left through
	// the CRI, and checkNothingLeft fails the test if anything survives.
	t.Logf("pods still present after 90s")
}

// checkNothingLeft runs last: no process started for the test (containerd,
// shims and their children, kubelet, servers) and no netns of it remain.
// containerd's cleanup has already ended its leftovers; this is the check
// that it did, and it fails the test.
func (n *node) checkNothingLeft(t *testing.T) {
	if n.ctrd == nil {
		return
	}
	marks := []string{n.ctrd.Dir, n.ctrd.Netns}
	if n.dir != "" {
		marks = append(marks, n.dir)
	}
	if n.kube != nil {
		marks = append(marks, n.kube.Dir)
	}
	// Processes exit asynchronously after SIGKILL; a bound on completeness,
	// not on speed.
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := critest.Leftovers(marks...)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("processes left after the test: %v", left)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := os.Stat("/run/netns/" + n.ctrd.Netns); err == nil {
		t.Errorf("netns %s left after the test", n.ctrd.Netns)
	}
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// waitRecord waits for a finding of the pod in the findings file.
func waitRecord(t *testing.T, path, pod string, limit time.Duration, log func() string) findings.Record {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		data, _ := os.ReadFile(path)
		for _, line := range bytes.Split(data, []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			r, err := findings.Parse(line)
			if err != nil {
				t.Fatalf("findings line %q: %v", line, err)
			}
			if r.Pod.Name == pod {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no finding for pod %s after %s; findings:\n%s\nlog:\n%s", pod, limit, data, log())
		}
		time.Sleep(250 * time.Millisecond)
	}
}
