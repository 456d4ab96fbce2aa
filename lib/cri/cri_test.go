package cri

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	rt "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// runtime is a CRI runtime service on grpc-go's own server, as containerd
// and CRI-O serve it, answering from its fields.
type runtime struct {
	rt.UnimplementedRuntimeServiceServer
	sandboxes []*rt.PodSandbox
	statuses  map[string]*rt.PodSandboxStatusResponse
	listed    *rt.ListPodSandboxRequest
}

func (r *runtime) ListPodSandbox(_ context.Context, req *rt.ListPodSandboxRequest) (*rt.ListPodSandboxResponse, error) {
	r.listed = req
	return &rt.ListPodSandboxResponse{Items: r.sandboxes}, nil
}

func (r *runtime) PodSandboxStatus(_ context.Context, req *rt.PodSandboxStatusRequest) (*rt.PodSandboxStatusResponse, error) {
	if !req.Verbose {
		return nil, status.Error(codes.InvalidArgument, "want verbose")
	}
	st, ok := r.statuses[req.PodSandboxId]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "sandbox %q: not found", req.PodSandboxId)
	}
	return st, nil
}

// serve starts r on a socket of the test's, stopped when it ends.
func serve(t *testing.T, r *runtime) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	rt.RegisterRuntimeServiceServer(s, r)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return sock
}

func info(spec string) map[string]string { return map[string]string{"info": spec} }

func TestCalls(t *testing.T) {
	r := &runtime{
		sandboxes: []*rt.PodSandbox{
			{Id: "a", Metadata: &rt.PodSandboxMetadata{Name: "web-1", Uid: "u1", Namespace: "shop", Attempt: 2},
				Labels: map[string]string{"app": "web", "pod-template-hash": "x"}, Annotations: map[string]string{"k": "v"}, CreatedAt: 7},
			{Id: "b", Metadata: &rt.PodSandboxMetadata{Name: "host-1", Namespace: "kube-system"}},
		},
		statuses: map[string]*rt.PodSandboxStatusResponse{
			"a": {Status: &rt.PodSandboxStatus{Id: "a", Linux: &rt.LinuxPodSandboxStatus{Namespaces: &rt.Namespace{Options: &rt.NamespaceOption{Network: rt.NamespaceMode_POD}}}},
				Info: info(`{"runtimeSpec":{"linux":{"namespaces":[{"type":"pid"},{"type":"network","path":"/var/run/netns/cni-1"}]}}}`)},
			"b": {Status: &rt.PodSandboxStatus{Id: "b", Linux: &rt.LinuxPodSandboxStatus{Namespaces: &rt.Namespace{Options: &rt.NamespaceOption{Network: rt.NamespaceMode_NODE, Pid: rt.NamespaceMode_POD}}}},
				Info: info(`{"runtimeSpec":{"linux":{"namespaces":[{"type":"network","path":"/proc/1/ns/net"}]}}}`)},
			"bad": {Info: info(`{not json`)},
		},
	}
	for _, endpoint := range []string{serve(t, r), "unix://" + serve(t, r), "unix:" + serve(t, r)} {
		c, err := New(endpoint)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		list, err := c.ListReady(ctx)
		if err != nil {
			t.Fatalf("%s: %v", endpoint, err)
		}
		want := []Sandbox{{ID: "a", Name: "web-1", UID: "u1", Namespace: "shop", Labels: map[string]string{"app": "web", "pod-template-hash": "x"}},
			{ID: "b", Name: "host-1", Namespace: "kube-system"}}
		if diff := cmp.Diff(want, list); diff != "" {
			t.Errorf("list (-want +got):\n%s", diff)
		}
		// The filter asked for ready sandboxes.
		if f := r.listed.GetFilter(); f == nil || f.GetState() == nil || f.GetState().GetState() != rt.PodSandboxState_SANDBOX_READY {
			t.Errorf("list request %v, want a filter on SANDBOX_READY", r.listed)
		}
		if p, err := c.Netns(ctx, "a"); err != nil || p != "/var/run/netns/cni-1" {
			t.Errorf("netns of a: %q, %v", p, err)
		}
		// Host network: none to sweep, whatever the spec says.
		if p, err := c.Netns(ctx, "b"); err != nil || p != "" {
			t.Errorf("netns of the host-network b: %q, %v", p, err)
		}
		if _, err := c.Netns(ctx, "bad"); err == nil || !strings.Contains(err.Error(), "decode info") {
			t.Errorf("netns of bad: %v, want a decode error", err)
		}
		// An error status is an error, with its message.
		if _, err := c.Netns(ctx, "gone"); err == nil || !strings.Contains(err.Error(), `sandbox "gone": not found`) || !errors.Is(err, ErrNotFound) {
			t.Errorf("netns of gone: %v, want the runtime's not found, ErrNotFound", err)
		}
		if _, err := c.Netns(ctx, "bad"); errors.Is(err, ErrNotFound) {
			t.Errorf("netns of bad: %v, not ErrNotFound", err)
		}
	}
}

func TestEmptyList(t *testing.T) {
	c, err := New(serve(t, &runtime{}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if list, err := c.ListReady(context.Background()); err != nil || len(list) != 0 {
		t.Errorf("list %v, %v; want none", list, err)
	}
}

// TestTooBig: an answer over MaxResponse is refused, not read.
func TestTooBig(t *testing.T) {
	big := strings.Repeat("x", MaxResponse)
	c, err := New(serve(t, &runtime{statuses: map[string]*rt.PodSandboxStatusResponse{"a": {Info: info(big)}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Netns(context.Background(), "a"); err == nil || !strings.Contains(err.Error(), "over") {
		t.Errorf("netns: %v, want the answer refused as too big", err)
	}
}

func TestEndpoint(t *testing.T) {
	for _, e := range []string{"", "unix://", "tcp://127.0.0.1:1234", "dns:///x"} {
		if _, err := New(e); !errors.Is(err, ErrEndpoint) {
			t.Errorf("New(%q): %v, want ErrEndpoint", e, err)
		}
	}
	c, err := New(filepath.Join(t.TempDir(), "none.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ListReady(context.Background()); err == nil {
		t.Error("list through a missing socket: no error")
	}
}

// TestMalformed: a message that does not parse is an error, never a
// partial answer taken as whole.
func TestMalformed(t *testing.T) {
	for _, b := range [][]byte{{0x0a}, {0x0a, 0x05, 0x01}, {0xff}} {
		if err := fields(b, func(protowire.Number, []byte, uint64) error { return nil }); err == nil {
			t.Errorf("fields(%x): no error", b)
		}
	}
}
