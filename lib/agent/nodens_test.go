package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// syncRecorder is a recorder that also keeps what each Synchronize
// queued: Synchronize calls Synced before it returns, so the test reads
// it without waiting.
type syncRecorder struct {
	*recorder
	queued []int
}

func (r *syncRecorder) Synced(_, queued int) { r.queued = append(r.queued, queued) }

// running is a running container of the sandbox id.
func running(id string) *api.Container {
	return &api.Container{Id: "ctr-" + id, PodSandboxId: id, Name: "app", State: api.ContainerState_CONTAINER_RUNNING}
}

// sweepOne runs the first Synchronize of a, which must queue exactly one of
// pods, and returns that pod's scan.
func sweepOne(t *testing.T, a *Agent, rec *syncRecorder, pods []*api.PodSandbox, ctrs []*api.Container) Scan {
	t.Helper()
	if _, err := a.Synchronize(context.Background(), pods, ctrs); err != nil {
		t.Fatal(err)
	}
	if len(rec.queued) != 1 || rec.queued[0] != 1 {
		t.Fatalf("sweep queued %v, want one pod", rec.queued)
	}
	release(a, 1)
	return rec.wait(t, 1)[0]
}

// queued tells whether the sandbox id has a scan waiting or running: a
// job taken by a worker held before its scan still counts. (By id: another
// pod's finished scan may leave the queue only just after it reported.)
func queued(a *Agent, id string) bool {
	a.queue.mu.Lock()
	defer a.queue.mu.Unlock()
	_, ok := a.queue.slots[id]
	return ok
}

// TestNodeNetns: a host-network pod on CRI-O reports the node's network
// namespace as its own. With kube-proxy's rules in the (stand-in) node's
// namespace, neither the sweep nor PostStartContainer nor StopContainer
// scans it, whatever the path it is reported under: only the pod with a
// namespace of its own is found.
func TestNodeNetns(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	dir := t.TempDir()
	node, used := nstest.New(t), nstest.New(t)
	node.Run("iptables-nft", "-t", "nat", "-N", "KUBE-SERVICES")
	node.Run("iptables-nft", "-t", "nat", "-A", "PREROUTING", "-j", "KUBE-SERVICES")
	used.Run("iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "80", "-j", "DROP")
	rec := &syncRecorder{recorder: newRecorder()}
	a := startAgentWith(t, dir, rec, func(cfg *Config) { cfg.HostProc = nstest.HostProc(t, node.Path()) })
	ctx := context.Background()
	host := pod("kube-proxy", node.Path())
	ctrs := []*api.Container{running("kube-proxy"), running("a")}

	// The node's namespace is known by what it is, not by its path: here
	// also under /proc/self/fd, nothing like the node's pin.
	h, err := netns.Open(node.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	other := pod("node-exporter", fmt.Sprintf("/proc/self/fd/%d", h.Fd()))
	ctrs = append(ctrs, running("node-exporter"))
	if s := sweepOne(t, a, rec, []*api.PodSandbox{host, other, pod("a", used.Path())}, ctrs); s.Meta.SandboxID != "a" || s.Outcome != Found || s.Stored != findings.Recorded {
		t.Fatalf("sweep scan %+v, want pod a recorded", s)
	}

	ctr := &api.Container{Id: "ctr-kube-proxy", Name: "kube-proxy"}
	if err := a.PostStartContainer(ctx, host, ctr); err != nil {
		t.Fatal(err)
	}
	if _, err := a.StopContainer(ctx, host, ctr); err != nil {
		t.Fatal(err)
	}
	if err := a.StopPodSandbox(ctx, host); err != nil {
		t.Fatal(err)
	}
	if queued(a, host.GetId()) {
		t.Fatal("a scan is queued for the host-network pod, want none")
	}
	select {
	case s := <-rec.ch:
		t.Fatalf("the host-network pod's events reported %+v, want nothing", s)
	default:
	}
	if recs := findingstest.Read(t, filepath.Join(dir, "findings.jsonl")); len(recs) != 1 || recs[0].SandboxID != "a" {
		t.Fatalf("findings %+v, want only pod a's", recs)
	}
}

// TestNodeNetnsUnreadable: an agent told where the host's /proc is but
// unable to open the node's namespace there (not mounted, no
// CAP_SYS_PTRACE) would report the node's rules on every host-network
// pod: it refuses to start, with a configuration error.
func TestNodeNetnsUnreadable(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		proc string
	}{
		{"not mounted", filepath.Join(dir, "no-proc")},
		{"not a namespace", nstest.HostProc(t, plain)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Config{Socket: filepath.Join(dir, "no-nri.sock"), HostProc: tc.proc})
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("New with host /proc %q: %v, want a configuration error", tc.proc, err)
			}
		})
	}
}

// TestStoppedSandbox: CRI-O's Synchronize lists a completed Job's NotReady
// sandbox, its namespace gone and no container running: stopped, neither
// queued nor reported (so no unreachable error, nothing for the health to
// count). A running pod whose namespace is gone is still unreachable.
func TestStoppedSandbox(t *testing.T) {
	dir := t.TempDir()
	rec := &syncRecorder{recorder: newRecorder()}
	a := startAgentWith(t, dir, rec, func(*Config) {})
	gone := filepath.Join(dir, "netns", "cni-gone")
	done := &api.Container{Id: "ctr-job", PodSandboxId: "job", Name: "job", State: api.ContainerState_CONTAINER_STOPPED}
	if s := sweepOne(t, a, rec, []*api.PodSandbox{pod("job", gone), pod("web", gone)}, []*api.Container{done, running("web")}); s.Meta.SandboxID != "web" || s.Outcome != Unreachable {
		t.Fatalf("scan %+v, want the running pod unreachable", s)
	}
}

// TestSweepReplaced: a Synchronize right after another (the runtime
// reconnecting) has its own sweep fed, whatever order the two feeds'
// goroutines run in: the earlier feed never ends the later one.
func TestSweepReplaced(t *testing.T) {
	dir := t.TempDir()
	rec := newRecorder()
	a := startAgent(t, dir, rec)
	gone := filepath.Join(dir, "netns", "cni-gone")
	for i := 0; i < 20; i++ {
		if _, err := a.Synchronize(context.Background(), nil, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Synchronize(context.Background(), []*api.PodSandbox{pod("web", gone)}, []*api.Container{running("web")}); err != nil {
			t.Fatal(err)
		}
		select {
		case a.hold <- struct{}{}:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the second sweep's scan never started", i)
		}
		if s := rec.wait(t, 1)[0]; s.Meta.SandboxID != "web" {
			t.Fatalf("scan %+v, want pod web", s)
		}
	}
}
