package packaging

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// repo is the repository's root.
func repo(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// podman runs podman with every piece of state in its own temp dir, so
// the test neither sees nor touches the machine's images and containers.
type podman struct {
	t      *testing.T
	global []string
	env    []string
}

func newPodman(t *testing.T) *podman {
	t.Helper()
	// runc, not crun: crun refuses hosts with hybrid cgroups, as some CI VMs have.
	nstest.NeedRoot(t, "podman", "conmon", "runc")
	// conmon's socket paths under the runroot must stay short.
	dir, err := os.MkdirTemp("/tmp", "ipta-pk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	files := map[string]string{
		"containers.conf": "[engine]\nevents_logger = \"none\"\ncgroup_manager = \"cgroupfs\"\n",
		"storage.conf":    "[storage]\ndriver = \"vfs\"\ngraphroot = \"" + dir + "/root\"\nrunroot = \"" + dir + "/runroot\"\n",
		"registries.conf": "unqualified-search-registries = []\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := &podman{t: t,
		global: []string{"--root", dir + "/root", "--runroot", dir + "/runroot", "--tmpdir", dir + "/tmp",
			"--storage-driver", "vfs", "--cgroup-manager", "cgroupfs", "--events-backend", "none", "--runtime", "runc"},
		env: append(os.Environ(), "CONTAINERS_CONF="+dir+"/containers.conf",
			"CONTAINERS_STORAGE_CONF="+dir+"/storage.conf", "CONTAINERS_REGISTRIES_CONF="+dir+"/registries.conf"),
	}
	t.Cleanup(func() { _ = exec.Command("podman", append(p.global, "rm", "--all", "--force")...).Run() })
	return p
}

func (p *podman) cmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "podman", append(append([]string{}, p.global...), args...)...)
	cmd.Env = p.env
	return cmd
}

// run runs a container of image and gives its combined output.
func (p *podman) run(image string, extra []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Some CI hosts cap the hard limits below podman's defaults.
	a := append([]string{"run", "--rm", "--network", "none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}, extra...)
	out, err := p.cmd(ctx, append(append(a, image), args...)...).CombinedOutput()
	return string(out), err
}

// imagePlatforms are the platforms the test's `make image` builds: amd64,
// which it runs, and s390x, the cross-build tests/release makes too (the
// Go build cache then holds one s390x compilation of the dependencies for
// both). make's default, amd64 and arm64 (TestImageDefaultPlatforms), goes
// through the same loop; each platform is a cold cross-build of client-go
// on a fresh machine (minutes of CPU).
var imagePlatforms = []string{"linux/amd64", "linux/s390x"}

// makeImage runs `make image` of imagePlatforms into this podman's store,
// the per-platform build contexts in a temp dir, and gives the manifest
// list's name.
func (p *podman) makeImage() string {
	p.t.Helper()
	tmp := p.t.TempDir()
	image := "localhost/iptables-alerter:packaging-test"
	cmd := exec.Command("make", "-C", repo(p.t), "image", "IMAGE="+image, "VERSION=v9.9.9-test", "IMAGE_CONTEXT="+tmp+"/context",
		"PLATFORMS="+strings.Join(imagePlatforms, " "), "PODMAN=podman "+strings.Join(p.global, " "))
	cmd.Env = p.env
	if out, err := cmd.CombinedOutput(); err != nil {
		p.t.Fatalf("make image: %v\n%s", err, out)
	}
	return image
}
