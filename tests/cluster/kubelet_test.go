package cluster

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/testbin"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
	"github.com/iptables-alerter/iptables-alerter/tests/runtime/critest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	critest.RemoveImage()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// alerterBin builds the full binary once per test binary.
func alerterBin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ipta-cluster-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "iptables-alerter")
		buildErr = testbin.Build(binPath, "")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	// Removed by TestMain: the build is shared by every test of the
	// binary, so no one test's cleanup may take it away.
	return binPath
}

// proc runs one of the alerter's commands in the node's netns until the
// test ends.
type proc struct {
	log  bytes.Buffer
	mu   sync.Mutex
	name string
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.Write(b)
}

func (p *proc) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

func (n *node) run(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startProc(t, name, exec.Command("nsenter", append([]string{"--net=" + n.netns, "--"}, args...)...))
}

// startProc starts cmd and ends it when the test ends: SIGTERM, SIGKILL
// if it lingers, waited for whatever the verdict; its output is logged on
// failure.
func startProc(t *testing.T, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{name: name}
	cmd.Stdout, cmd.Stderr = p, p
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("%s did not stop on SIGTERM", name)
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, p)
		}
	})
	return p
}

// istioPod is a pod whose init container writes istio-init's rules, as
// istio-init does, then an app that sleeps.
func istioPod(name, image string) *corev1.Pod {
	never, f := corev1.PullNever, false
	caps := &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN", "NET_RAW"}}}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:                      nodeName,
			AutomountServiceAccountToken:  &f,
			TerminationGracePeriodSeconds: new(int64),
			InitContainers: []corev1.Container{{
				Name: "istio-init", Image: image, ImagePullPolicy: never, SecurityContext: caps,
				Command: []string{"/bin/sh", "-c", `printf '%s' "$RULES" | iptables-nft-restore`},
				Env:     []corev1.EnvVar{{Name: "RULES", Value: nstest.IstioNAT}},
			}},
			Containers: []corev1.Container{{
				Name: "app", Image: image, ImagePullPolicy: never,
				Command: []string{"/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"},
			}},
		},
	}
}

// TestKubeletEndToEnd: a Pod created through the API, run by a real
// kubelet on containerd, whose init container writes istio's rules, gets
// the agent's finding and the forwarder's Event.
func TestKubeletEndToEnd(t *testing.T) {
	n := startNode(t)
	bin := alerterBin(t)
	work := t.TempDir()
	findingsFile := filepath.Join(work, "findings.jsonl")
	agent := n.run(t, "agent", bin, "agent", "--nri-socket", n.ctrd.NRISocket, "--findings", findingsFile,
		"--state-dir", filepath.Join(work, "state"), "--allowlist", "", "--health-addr", "",
		"--node", nodeName, "--log-level", "debug", "--host-proc", nstest.HostProc(t, n.netns))
	forward := n.run(t, "forward", bin, "forward", "--kubeconfig", n.kube.Kubeconfig("forward", n.kube.AdminToken),
		"--findings", findingsFile, "--checkpoint-dir", filepath.Join(work, "fwd"), "--node-name", nodeName,
		"--health-addr", "", "--log-level", "debug")

	kubetest.Namespace(t, n.cs, "shop")
	pod, err := n.cs.CoreV1().Pods("shop").Create(kubetest.Ctx(t), istioPod("cart", critest.ImageRef), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	rec := waitRecord(t, findingsFile, "cart", 2*time.Minute, agent.String)
	if rec.Pod.Namespace != "shop" || rec.Pod.UID != string(pod.UID) {
		t.Errorf("finding names pod %+v, want shop/cart uid %s", rec.Pod, pod.UID)
	}
	if rec.Impact.Xt+rec.Impact.Native == 0 {
		t.Errorf("finding counts no rules: %+v", rec)
	}
	evs := kubetest.WaitEvents(t, n.cs, 90*time.Second, "shop", "Pod", "cart", pod.UID, func(evs []corev1.Event) bool {
		for _, e := range evs {
			if e.Reason == "IPTablesUsageObserved" {
				return true
			}
		}
		return false
	})
	for _, e := range evs {
		if e.Reason == "IPTablesUsageObserved" && e.InvolvedObject.UID != pod.UID {
			t.Errorf("event on uid %s, want the live pod's %s", e.InvolvedObject.UID, pod.UID)
		}
	}
	_ = forward
	// The kubelet's own chains went into the node's netns (the host's
	// count is checked unchanged at cleanup).
	if kubeChains(t, n.netns) == 0 {
		t.Errorf("no KUBE- chains in the node's netns: did the kubelet run there?")
	}
	t.Logf("finding: source %s, impact %+v; event on uid %s", rec.Source, rec.Impact, pod.UID)
}
