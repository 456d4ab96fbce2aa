package cluster

import (
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
	"github.com/iptables-alerter/iptables-alerter/tests/release/reltest"
)

// TestReleaseOnNode is issue 27's install on the project's real
// single-node cluster: `make release` (this node's platform) pushes into
// go-containerregistry's registry, run in this test process on loopback,
// and the node's containerd pulls the image from it (plain HTTP, as its
// hosts.toml for that host says) for the DaemonSet the release's kustomize
// overlay names by digest, whose pod becomes Ready. The registry answers
// on the same port in the host's netns (make release pushes there) and in
// the node's (containerd runs there), one store behind both.
func TestReleaseOnNode(t *testing.T) {
	nstest.NeedRoot(t, "kubectl", "nsenter")
	cosign := reltest.Need(t)
	n := startNode(t)
	n.controlPlane(t)

	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	hostL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := hostL.Addr().String()
	nodeL, err := kubetest.ListenIn(n.netns, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	// What the node side served: the manifests containerd pulled.
	var (
		mu     sync.Mutex
		pulled []string
	)
	counting := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/manifests/") {
			mu.Lock()
			pulled = append(pulled, r.URL.Path)
			mu.Unlock()
		}
		reg.ServeHTTP(w, r)
	})
	for l, h := range map[net.Listener]http.Handler{hostL: reg, nodeL: counting} {
		s := &http.Server{Handler: h}
		go s.Serve(l)
		t.Cleanup(func() { s.Close() })
	}

	// make release as TestRelease runs it, this node's platform only.
	tmp := t.TempDir()
	env := reltest.Env(t, filepath.Join(tmp, "home"))
	reltest.KeyPair(t, cosign, env, tmp)
	dist := filepath.Join(tmp, "dist")
	registryPath := addr + "/iptables-alerter"
	digest := reltest.Make(t, env, "v1.2.3", registryPath, dist, tmp, []string{"linux/" + runtime.GOARCH})
	image := registryPath + "/iptables-alerter@" + digest

	// containerd's configuration for that host: plain HTTP, pull only.
	hosts := filepath.Join(n.ctrd.HostsDir(), addr)
	if err := os.MkdirAll(hosts, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hosts, "hosts.toml"), []byte("server = \"http://"+addr+"\"\n\n[host.\"http://"+addr+"\"]\n  capabilities = [\"pull\", \"resolve\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// The test's overlay (the node's paths) over the base, with the image
	// the release's overlay names.
	rel := mustRead(t, filepath.Join(dist, "kustomize", "kustomization.yaml"))
	if !strings.Contains(rel, "newName: "+registryPath+"/iptables-alerter") || !strings.Contains(rel, "digest: "+digest) {
		t.Fatalf("the release's overlay does not name %s:\n%s", image, rel)
	}
	dir, _ := n.overlay(t, image)
	n.kubectl(t, "apply", "--server-side", "-f", filepath.Join(dir, "servicemonitor-crd.yaml"))
	n.kubectl(t, "wait", "--for=condition=Established", "--timeout=60s", "crd/servicemonitors.monitoring.coreos.com")
	n.kubectl(t, "apply", "--server-side", "-k", dir)

	ds := n.readyDaemonSetPod(t, 5*time.Minute)
	for _, c := range append(ds.Status.InitContainerStatuses, ds.Status.ContainerStatuses...) {
		if !strings.HasSuffix(c.ImageID, digest) && !strings.Contains(c.Image, digest) {
			t.Errorf("container %s runs image %s (%s), want %s", c.Name, c.Image, c.ImageID, image)
		}
	}
	// The index the release pushed, by digest, then this node's image.
	mu.Lock()
	got := slices.Clone(pulled)
	mu.Unlock()
	if !slices.Contains(got, "/v2/iptables-alerter/iptables-alerter/manifests/"+digest) || len(got) < 2 {
		t.Errorf("containerd fetched %v from the registry on the node's loopback, want the index %s and its image", got, digest)
	}
	t.Logf("containerd pulled from the node side: %v", got)
	n.kubectl(t, "-n", "iptables-alerter", "delete", "daemonset", "iptables-alerter", "--wait=true", "--timeout=2m")
}
