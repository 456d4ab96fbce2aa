package agent

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	rt "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// fakeCRI is a CRI runtime service on grpc-go's own server, as containerd
// and CRI-O serve it: its ready sandboxes, each with the netns path its
// verbose status gives, or an error for that status.
type fakeCRI struct {
	rt.UnimplementedRuntimeServiceServer
	mu sync.Mutex
	// netns: sandbox id to netns path; failing: ids whose status fails.
	netns   map[string]string
	failing map[string]bool
	// lists counts the ListPodSandbox calls.
	lists int
}

func (f *fakeCRI) ListPodSandbox(context.Context, *rt.ListPodSandboxRequest) (*rt.ListPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	var items []*rt.PodSandbox
	for id := range f.netns {
		items = append(items, &rt.PodSandbox{Id: id, Metadata: &rt.PodSandboxMetadata{Name: "pod-" + id, Namespace: "team-a", Uid: "uid-" + id}})
	}
	for id := range f.failing {
		items = append(items, &rt.PodSandbox{Id: id, Metadata: &rt.PodSandboxMetadata{Name: "pod-" + id, Namespace: "team-a", Uid: "uid-" + id}})
	}
	return &rt.ListPodSandboxResponse{Items: items}, nil
}

func (f *fakeCRI) PodSandboxStatus(_ context.Context, req *rt.PodSandboxStatusRequest) (*rt.PodSandboxStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := req.PodSandboxId
	if f.failing[id] {
		return nil, status.Errorf(codes.Internal, "sandbox %q: status not read", id)
	}
	path, ok := f.netns[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "sandbox %q: not found", id)
	}
	return &rt.PodSandboxStatusResponse{
		Status: &rt.PodSandboxStatus{Id: id, Linux: &rt.LinuxPodSandboxStatus{Namespaces: &rt.Namespace{Options: &rt.NamespaceOption{Network: rt.NamespaceMode_POD}}}},
		Info:   map[string]string{"info": fmt.Sprintf(`{"runtimeSpec":{"linux":{"namespaces":[{"type":"network","path":%q}]}}}`, path)},
	}, nil
}

// set changes the runtime's sandboxes under its lock, and returns the
// lists counted so far: a list counted past it sees the change.
func (f *fakeCRI) set(change func()) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	change()
	return f.lists
}

// serveCRI serves f on a socket of the test's, stopped when it ends.
func serveCRI(t *testing.T, f *fakeCRI) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	rt.RegisterRuntimeServiceServer(s, f)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return sock
}

// criLook is what a CRI sweep's report found: the lists counted by then,
// and whether the agent said it had looked at every pod at that moment.
type criLook struct {
	lists  int
	looked bool
	r      Resweep
}

// criRecorder hears each CRI sweep's report, and notes the agent's word
// at that moment: the sweep has read the listed pods' States.
type criRecorder struct {
	*recorder
	a     *Agent
	cri   *fakeCRI
	looks chan criLook
}

func (c *criRecorder) Resweeped(r Resweep) {
	_, _, ok := c.a.known.everyLooked()
	c.cri.mu.Lock()
	n := c.cri.lists
	c.cri.mu.Unlock()
	c.looks <- criLook{lists: n, looked: ok, r: r}
}

// startCRI runs an agent sweeping f through the CRI every interval, its
// scans held as startAgent's are.
func startCRI(t *testing.T, f *fakeCRI, interval time.Duration, change func(*Config)) (*Agent, *criRecorder) {
	t.Helper()
	rec := &criRecorder{recorder: newRecorder(), cri: f, looks: make(chan criLook, 100)}
	cfg := testConfig(t.TempDir(), rec)
	cfg.CRIEndpoint = serveCRI(t, f)
	change(&cfg)
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec.a = a
	a.hold = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.RunCRI(ctx, interval) }()
	t.Cleanup(func() {
		cancel()
		close(a.hold)
		if err := <-done; err != nil {
			t.Errorf("RunCRI: %v", err)
		}
	})
	return a, rec
}

// lookAfter is the first CRI sweep's report whose list came after lists.
// A re-sweep's report (a test's own) is passed over: it counts the lists
// at its end, and a list it set off may have been taken by then.
func (c *criRecorder) lookAfter(t *testing.T, lists int) criLook {
	t.Helper()
	for {
		if l := receive(t, c.looks, "CRI sweep report"); l.lists > lists && l.r.Stage == StageCRI {
			return l
		}
	}
}

// TestCRIUnreadNotVouched: a pod the CRI lists whose status cannot be read
// is unseen from the moment the list is taken: the word does not vouch
// for it while the sweep reads the other pods' States. (Failed before:
// it was marked unseen only after the sweep, and in between the word could
// be written.)
func TestCRIUnreadNotVouched(t *testing.T) {
	nstest.NeedRoot(t)
	ns := nstest.New(t)
	f := &fakeCRI{netns: map[string]string{"a": ns.Path()}, failing: map[string]bool{}}
	a, rec := startCRI(t, f, 50*time.Millisecond, func(*Config) {})
	if l := rec.lookAfter(t, 0); l.r.Queued != 1 {
		t.Fatalf("first CRI sweep: %+v, want a queued", l.r)
	}
	release(a, 1)
	rec.wait(t, 1)
	n := f.set(func() { f.failing["g"] = true })
	if l := rec.lookAfter(t, n); l.looked {
		t.Errorf("CRI sweep listing g, whose status fails: the agent said it looked at every pod (%+v)", l.r)
	}
	if _, _, ok := a.known.everyLooked(); ok {
		t.Error("every pod looked at, with g's status never read")
	}
}

// TestCRIListAfterVanished: with the CRI fallback, which hears of no
// stop, a re-sweep that finds a pod's netns gone lists the pods at once,
// instead of keeping the pod unseen (the word taken back) until the next
// interval's list: a pod deleted is no longer listed, and the word is
// given again. (Failed before: no list until the interval, 15 minutes by
// default.)
func TestCRIListAfterVanished(t *testing.T) {
	nstest.NeedRoot(t)
	kept, deleted := nstest.New(t), nstest.New(t)
	f := &fakeCRI{netns: map[string]string{"kept": kept.Path(), "deleted": deleted.Path()}, failing: map[string]bool{}}
	a, rec := startCRI(t, f, time.Hour, func(*Config) {})
	if l := rec.lookAfter(t, 0); l.r.Queued != 2 {
		t.Fatalf("first CRI sweep: %+v, want both queued", l.r)
	}
	release(a, 2)
	rec.wait(t, 2)
	if _, _, ok := a.known.everyLooked(); !ok {
		t.Fatal("not every pod looked at after the first CRI sweep")
	}
	n := f.set(func() { delete(f.netns, "deleted") })
	deleted.Delete()
	if r := a.resweep(context.Background()); r.Gone != 1 {
		t.Fatalf("re-sweep after the pod's deletion: %+v, want its netns gone", r)
	}
	if l := rec.lookAfter(t, n); l.r.Stage != StageCRI || l.r.Known != 1 || !l.looked {
		t.Fatalf("after the re-sweep: %+v (every pod looked at: %v), want a CRI sweep of the kept pod, every pod looked at", l.r, l.looked)
	}
}

// TestCRINotWatched: the CRI fallback hears of no stop, so it watches no
// pod: a watch would keep a deleted pod's netns alive (its socket holds
// it) once the pod left the list. A scan's rewatch watched every pod it
// read. (Failed before: watching after the first sweep's scan.)
func TestCRINotWatched(t *testing.T) {
	nstest.NeedRoot(t)
	ns := nstest.New(t)
	f := &fakeCRI{netns: map[string]string{"a": ns.Path()}, failing: map[string]bool{}}
	a, rec := startCRI(t, f, 100*time.Millisecond, func(c *Config) { c.Watch = true })
	if l := rec.lookAfter(t, 0); l.r.Queued != 1 {
		t.Fatalf("first CRI sweep: %+v, want a queued", l.r)
	}
	release(a, 1)
	rec.wait(t, 1)
	if a.watching("a") {
		t.Error("the CRI fallback watches a after its scan")
	}
}
