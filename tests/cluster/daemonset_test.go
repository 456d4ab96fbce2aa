package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
	"github.com/iptables-alerter/iptables-alerter/tests/runtime/critest"
)

// testImage is what `make image` builds here, imported into containerd.
const testImage = "localhost/iptables-alerter:cluster-test"

// serviceMonitorCRD is just enough of Prometheus Operator's CRD for the
// base's ServiceMonitor to apply.
const serviceMonitorCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {plural: servicemonitors, singular: servicemonitor, kind: ServiceMonitor, listKind: ServiceMonitorList}
  versions:
    - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
`

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// controlPlane starts kube-controller-manager (the DaemonSet, garbage
// collector and root CA publisher controllers: the last writes the
// kube-root-ca.crt ConfigMap every namespace has on a real cluster, which
// the forwarder's projected token volume mounts) and kube-scheduler in
// the node's netns.
func (n *node) controlPlane(t *testing.T) {
	t.Helper()
	dir := filepath.Dir(kubetest.APIServerPath())
	kcm, sched := filepath.Join(dir, "kube-controller-manager"), filepath.Join(dir, "kube-scheduler")
	for _, b := range []string{kcm, sched} {
		_, err := os.Stat(b)
		nstest.Need(t, err == nil, "needs "+b+" (tests/kube/build-kube.sh "+filepath.Base(b)+")")
	}
	kc := n.kube.Kubeconfig("control-plane", n.kube.AdminToken)
	n.run(t, "kube-controller-manager", kcm, "--kubeconfig="+kc, "--authentication-kubeconfig="+kc,
		"--authorization-kubeconfig="+kc, "--controllers=daemonset,garbagecollector,root-ca-certificate-publisher-controller",
		"--root-ca-file="+n.kube.CAFile, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=0")
	n.run(t, "kube-scheduler", sched, "--kubeconfig="+kc, "--authentication-kubeconfig="+kc,
		"--authorization-kubeconfig="+kc, "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0")
}

// importMadeImage runs `make image` with a podman whose state is all in a
// temp dir, saves the image as an OCI archive and imports it into the
// node's containerd, in the k8s.io namespace the kubelet uses.
func (n *node) importMadeImage(t *testing.T) {
	t.Helper()
	nstest.NeedRoot(t, "podman", "make")
	dir, err := os.MkdirTemp("", "ipta-cl-pm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "containers.conf"), []byte("[engine]\nevents_logger = \"none\"\ncgroup_manager = \"cgroupfs\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	global := "podman --root " + dir + "/root --runroot " + dir + "/runroot --tmpdir " + dir + "/tmp --storage-driver vfs --events-backend none"
	env := append(os.Environ(), "CONTAINERS_CONF="+dir+"/containers.conf")
	// This node's platform only: make image names each platform's image
	// IMAGE-ARCH, and that one image is what is saved and imported.
	mk := exec.Command("make", "-C", repoRoot(), "image", "IMAGE="+testImage, "VERSION=v0.0.0-cluster-test",
		"PLATFORMS=linux/"+runtime.GOARCH, "IMAGE_CONTEXT="+dir+"/context", "PODMAN="+global)
	mk.Env = env
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	archive := filepath.Join(dir, "image.tar")
	save := exec.Command("sh", "-c", global+` save --format oci-archive -o "$1" "$2"`, "sh", archive, testImage+"-"+runtime.GOARCH)
	save.Env = env
	if out, err := save.CombinedOutput(); err != nil {
		t.Fatalf("podman save: %v\n%s", err, out)
	}
	if out, err := exec.Command(filepath.Join(critest.BinDir(), "ctr"), "--address", n.ctrd.Socket, "--namespace", "k8s.io",
		"images", "import", "--local", "--snapshotter", "native", "--index-name", testImage, archive).CombinedOutput(); err != nil {
		t.Fatalf("ctr images import: %v: %s", err, out)
	}
}

// kubectl runs the real kubectl in the node's netns.
func (n *node) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	kc := n.kube.Kubeconfig("kubectl", n.kube.AdminToken)
	out, err := exec.Command("nsenter", append([]string{"--net=" + n.netns, "--", "kubectl", "--kubeconfig", kc}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// nodeDirs are the temp dirs standing for the node's host paths.
type nodeDirs struct {
	root, bin, hooks, crio, findings, state, allowlist, fwdState, kube string
}

// overlay writes a test-only kustomize overlay over packaging/kubernetes:
// image (NAME:TAG, or NAME@DIGEST), every hostPath but /run/netns (mounted read-only)
// moved to a temp dir (the host's /proc a stand-in whose pid 1's netns is
// the node's: a sandboxed test host may close the real pid 1's), the NRI socket dir the test's containerd's, and
// the forwarder given a kubeconfig to the test's API server. The pod runs
// in the node's network namespace (hostNetwork): without kube-proxy the
// service IP of the API server leads nowhere, and its address is the
// netns's loopback.
func (n *node) overlay(t *testing.T, image string) (dir string, d nodeDirs) {
	t.Helper()
	dir = t.TempDir()
	root := filepath.Join(dir, "node")
	d = nodeDirs{root: root, bin: root + "/usr/local/bin", hooks: root + "/usr/share/containers/oci/hooks.d",
		crio: root + "/etc/crio", findings: root + "/var/log/iptables-alerter", state: root + "/run/iptables-alerter",
		allowlist: root + "/etc/iptables-alerter", fwdState: root + "/var/lib/iptables-alerter/forward", kube: root + "/etc/ipta-kube"}
	for _, p := range []string{d.bin, d.hooks, d.crio, d.findings, d.state, d.allowlist, d.fwdState, d.kube, root + "/proc/1/ns"} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Resolved in the agent's container, where the host's /run/netns is
	// mounted at /var/run/netns.
	if err := os.Symlink("/var/run/netns/"+filepath.Base(n.netns), root+"/proc/1/ns/net"); err != nil {
		t.Fatal(err)
	}
	// A CRI-O configuration that reads the hooks dir, so the installer
	// installs (on a node without one it installs nothing).
	files := map[string]string{
		d.crio + "/crio.conf":            "[crio.runtime]\nhooks_dir = [\"/usr/share/containers/oci/hooks.d\"]\n",
		d.kube + "/kubeconfig":           mustRead(t, n.kube.Kubeconfig("forward-ds", n.kube.AdminToken)),
		d.kube + "/ca.crt":               mustRead(t, n.kube.CAFile),
		dir + "/servicemonitor-crd.yaml": serviceMonitorCRD,
	}
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The kubeconfig names the CA by its path on the host.
	kc := strings.ReplaceAll(files[d.kube+"/kubeconfig"], n.kube.CAFile, "/etc/ipta-kube/ca.crt")
	if err := os.WriteFile(d.kube+"/kubeconfig", []byte(kc), 0o644); err != nil {
		t.Fatal(err)
	}
	base, err := filepath.Rel(dir, filepath.Join(repoRoot(), "packaging", "kubernetes"))
	if err != nil {
		t.Fatal(err)
	}
	newImage := "newTag"
	name, tag, byDigest := strings.Cut(image, "@")
	if byDigest {
		newImage = "digest"
	} else {
		name, tag, _ = strings.Cut(image, ":")
	}
	kust := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [%s]
images:
  - {name: ghcr.io/iptables-alerter/iptables-alerter, newName: %s, %s: %s}
patches:
  - target: {kind: DaemonSet, name: iptables-alerter}
    patch: |
      - {op: add, path: /spec/template/spec/hostNetwork, value: true}
      - {op: add, path: /spec/template/spec/containers/0/args/-, value: --log-level=debug}
      - {op: add, path: /spec/template/spec/containers/1/args/-, value: --kubeconfig=/etc/ipta-kube/kubeconfig}
      - {op: add, path: /spec/template/spec/containers/1/volumeMounts/-, value: {name: ipta-kube, mountPath: /etc/ipta-kube, readOnly: true}}
      - {op: add, path: /spec/template/spec/volumes/-, value: {name: ipta-kube, hostPath: {path: %q, type: Directory}}}
  - target: {kind: DaemonSet, name: iptables-alerter}
    patch: |
      apiVersion: apps/v1
      kind: DaemonSet
      metadata: {name: iptables-alerter}
      spec:
        template:
          spec:
            volumes:
              - {name: hook-bin, hostPath: {path: %q, type: Directory}}
              - {name: hooks-dir, hostPath: {path: %q, type: Directory}}
              - {name: crio-conf, hostPath: {path: %q, type: Directory}}
              - {name: nri, hostPath: {path: %q, type: Directory}}
              - {name: findings, hostPath: {path: %q, type: Directory}}
              - {name: state, hostPath: {path: %q, type: Directory}}
              - {name: allowlist, hostPath: {path: %q, type: Directory}}
              - {name: forward-state, hostPath: {path: %q, type: Directory}}
              - {name: host-proc, hostPath: {path: %q, type: Directory}}
`, base, name, newImage, tag, d.kube, d.bin, d.hooks, d.crio, n.ctrd.Dir, d.findings, d.state, d.allowlist, d.fwdState, root+"/proc")
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, d
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDaemonSetEndToEnd: the image `make image` builds, imported into
// containerd, and `kubectl apply --server-side -k` of the shipped base
// (through a test overlay) give a Ready DaemonSet pod on a real kubelet; a
// Pod whose init container writes rules gets its Event; deleting the
// DaemonSet takes the hooks.d JSON and the hook binary off the node.
func TestDaemonSetEndToEnd(t *testing.T) {
	nstest.NeedRoot(t, "kubectl", "podman", "make", "nsenter")
	n := startNode(t)
	n.controlPlane(t)
	n.importMadeImage(t)
	dir, d := n.overlay(t, testImage)

	n.kubectl(t, "apply", "--server-side", "-f", filepath.Join(dir, "servicemonitor-crd.yaml"))
	n.kubectl(t, "wait", "--for=condition=Established", "--timeout=60s", "crd/servicemonitors.monitoring.coreos.com")
	n.kubectl(t, "apply", "--server-side", "-k", dir)

	ds := n.readyDaemonSetPod(t, 3*time.Minute)
	hooksJSON := filepath.Join(d.hooks, "iptables-alerter.json")
	if _, err := os.Stat(hooksJSON); err != nil {
		t.Errorf("hooks.d JSON not installed by the running pod: %v", err)
	}

	kubetest.Namespace(t, n.cs, "shop")
	pod, err := n.cs.CoreV1().Pods("shop").Create(kubetest.Ctx(t), istioPod("cart", critest.ImageRef), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !hasUsageEvent(t, n, pod) {
		if time.Now().After(deadline) {
			t.Fatalf("no IPTablesUsageObserved Event on shop/cart after 2 min; agent log:\n%s\nforward log:\n%s\nhook log:\n%s\nfindings:\n%s",
				n.podLog(t, ds.Name, "agent"), n.podLog(t, ds.Name, "forward"), n.podLog(t, ds.Name, "hook"), tail(filepath.Join(d.findings, "findings.jsonl"), 3000))
		}
		time.Sleep(500 * time.Millisecond)
	}

	n.kubectl(t, "-n", "iptables-alerter", "delete", "daemonset", "iptables-alerter", "--wait=true", "--timeout=2m")
	deadline = time.Now().Add(2 * time.Minute)
	for {
		l, err := n.cs.CoreV1().Pods("iptables-alerter").List(kubetest.Ctx(t), metav1.ListOptions{})
		if err == nil && len(l.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("DaemonSet pods still there 2 min after the delete: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	left, _ := filepath.Glob(filepath.Join(d.hooks, "*"))
	if len(left) != 0 {
		t.Errorf("hooks dir after the DaemonSet's deletion holds %v, want nothing", left)
	}
	bins, _ := filepath.Glob(filepath.Join(d.bin, "*"))
	if len(bins) != 0 {
		t.Errorf("bin dir after the DaemonSet's deletion holds %v, want nothing", bins)
	}
}

// readyDaemonSetPod waits up to limit for a Ready pod of the DaemonSet.
func (n *node) readyDaemonSetPod(t *testing.T, limit time.Duration) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		l, err := n.cs.CoreV1().Pods("iptables-alerter").List(kubetest.Ctx(t), metav1.ListOptions{})
		if err == nil {
			for i := range l.Items {
				if podReady(&l.Items[i]) {
					return &l.Items[i]
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Ready DaemonSet pod after %s: %v\n%s", limit, err,
				n.kubectl(t, "-n", "iptables-alerter", "describe", "pods"))
		}
		time.Sleep(time.Second)
	}
}

func hasUsageEvent(t *testing.T, n *node, pod *corev1.Pod) bool {
	evs, err := kubetest.Events(kubetest.Ctx(t), n.cs, pod.Namespace, "Pod", pod.Name, pod.UID)
	for _, e := range evs {
		if err == nil && e.Reason == "IPTablesUsageObserved" && e.InvolvedObject.UID == pod.UID {
			return true
		}
	}
	return false
}

// podLog is the tail of a DaemonSet container's log, read from the
// kubelet's pod log dir (the API server cannot resolve the node's name).
func (n *node) podLog(t *testing.T, pod, container string) string {
	logs, _ := filepath.Glob(filepath.Join(n.dir, "pod-logs", "iptables-alerter_"+pod+"_*", container, "*.log"))
	var out strings.Builder
	for _, l := range logs {
		out.WriteString(tail(l, 3000))
	}
	return out.String()
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
