package critest

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// TestSweepDirsCNINetns: the pod netns pins a dead binary's containerd
// left in /var/run/netns (named in its task bundles and its metadata)
// are deleted with its dir; a cni-* netns it does not name is left.
func TestSweepDirsCNINetns(t *testing.T) {
	nstest.NeedRoot(t, "ip")
	cni := func() string {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		return fmt.Sprintf("cni-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	}
	inBundle, inMeta, other := cni(), cni(), cni()
	for _, n := range []string{inBundle, inMeta, other} {
		if out, err := exec.Command("ip", "netns", "add", n).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v: %s", n, err, out)
		}
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", n).Run() })
	}
	dir, err := os.MkdirTemp("", "ipta-containerd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	files := map[string]string{
		"state/io.containerd.runtime.v2.task/k8s.io/0123/config.json": `{"linux":{"namespaces":[{"type":"network","path":"/var/run/netns/` + inBundle + `"}]}}`,
		"root/io.containerd.metadata.v1.bolt/meta.db":                 "\x00\x01bolt page\x00" + `{"NetNSPath":"/var/run/netns/` + inMeta + `"}` + "\x00",
		// A container's own files are not read.
		"state/io.containerd.runtime.v2.task/k8s.io/0123/rootfs/config.json": `"/var/run/netns/` + other + `"`,
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The owner last: another binary's sweep may take the dir from then
	// on. 0000dead holds no lock file: a binary gone and swept.
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte("0000dead"), 0o600); err != nil {
		t.Fatal(err)
	}

	sweepDirs(t)

	for n, want := range map[string]bool{inBundle: false, inMeta: false, other: true} {
		if _, err := os.Stat("/run/netns/" + n); (err == nil) != want {
			t.Errorf("netns %s kept %t, want %t", n, err == nil, want)
		}
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("%s kept", dir)
	}
}
