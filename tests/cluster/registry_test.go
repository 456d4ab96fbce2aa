package cluster

import (
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
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
	nstest.NeedRoot(t, "kubectl", "helm", "rpmbuild", "make", "nsenter")
	bin := filepath.Join(os.Getenv("IPTA_CACHE"), "release", "bin")
	if os.Getenv("IPTA_CACHE") == "" {
		bin = "/var/cache/iptables-alerter/release/bin"
	}
	for _, tool := range []string{"cosign", "cyclonedx-gomod"} {
		_, err := os.Stat(filepath.Join(bin, tool))
		nstest.Need(t, err == nil, "needs "+filepath.Join(bin, tool)+" (tests/release/build-"+tool+".sh)")
	}
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
	home := filepath.Join(tmp, "home")
	env := append(os.Environ(), "HOME="+home, "HELM_CONFIG_HOME="+home+"/helm/config", "HELM_CACHE_HOME="+home+"/helm/cache",
		"HELM_DATA_HOME="+home+"/helm/data", "DOCKER_CONFIG="+home+"/docker", "COSIGN_PASSWORD=test-password")
	if out, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOENV").Output(); err == nil {
		v := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(v) == 3 {
			env = append(env, "GOCACHE="+v[0], "GOMODCACHE="+v[1], "GOENV="+v[2])
		}
	}
	keygen := exec.Command(filepath.Join(bin, "cosign"), "generate-key-pair")
	keygen.Dir, keygen.Env = tmp, env
	if out, err := keygen.CombinedOutput(); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	dist := filepath.Join(tmp, "dist")
	registryPath := addr + "/iptables-alerter"
	mk := exec.Command("make", "--no-print-directory", "-C", repoRoot(), "release", "VERSION=v1.2.3", "REGISTRY="+registryPath, "DIST="+dist,
		"COSIGN_KEY="+filepath.Join(tmp, "cosign.key"), "RPMBUILDFLAGS=--nodeps", "RELEASE_PLATFORMS=linux/"+runtime.GOARCH)
	mk.Env = env
	start := time.Now()
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	t.Logf("make release (linux/%s): %s", runtime.GOARCH, time.Since(start).Round(time.Second))
	digest, err := os.ReadFile(filepath.Join(dist, "image.digest"))
	if err != nil {
		t.Fatal(err)
	}
	image := registryPath + "/iptables-alerter@" + strings.TrimSpace(string(digest))

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
	if !strings.Contains(rel, "newName: "+registryPath+"/iptables-alerter") || !strings.Contains(rel, "digest: "+strings.TrimSpace(string(digest))) {
		t.Fatalf("the release's overlay does not name %s:\n%s", image, rel)
	}
	dir, _ := n.overlay(t, image)
	n.kubectl(t, "apply", "--server-side", "-f", filepath.Join(dir, "servicemonitor-crd.yaml"))
	n.kubectl(t, "wait", "--for=condition=Established", "--timeout=60s", "crd/servicemonitors.monitoring.coreos.com")
	n.kubectl(t, "apply", "--server-side", "-k", dir)

	ds := n.readyDaemonSetPod(t, 5*time.Minute)
	for _, c := range append(ds.Status.InitContainerStatuses, ds.Status.ContainerStatuses...) {
		if !strings.HasSuffix(c.ImageID, strings.TrimSpace(string(digest))) && !strings.Contains(c.Image, strings.TrimSpace(string(digest))) {
			t.Errorf("container %s runs image %s (%s), want %s", c.Name, c.Image, c.ImageID, image)
		}
	}
	// The index the release pushed, by digest, then this node's image.
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(pulled, "/v2/iptables-alerter/iptables-alerter/manifests/"+strings.TrimSpace(string(digest))) || len(pulled) < 2 {
		t.Errorf("containerd fetched %v from the registry on the node's loopback, want the index %s and its image", pulled, digest)
	}
	t.Logf("containerd pulled from the node side: %v", pulled)
	n.kubectl(t, "-n", "iptables-alerter", "delete", "daemonset", "iptables-alerter", "--wait=true", "--timeout=2m")
}
