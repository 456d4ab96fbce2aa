package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// decoderPackages hold the pure decoders of kernel data and their tests:
// x_tables entries and matches (render, inspect), nftables expressions
// (render, classify), the netlink messages of the watch and ipset. The
// kernel writes its structures in the host's byte order, and s390x is the
// release's only big-endian platform.
var decoderPackages = []string{"lib/render", "lib/inspect", "lib/watch", "lib/classify", "lib/ipset"}

// The decoders' unit tests (-short: no netns, no root) cross-compiled for
// linux/s390x and run under Debian's qemu-s390x-static (user mode, no
// binfmt_misc registration needed), in each package's directory for its
// testdata.
func TestDecodersS390x(t *testing.T) {
	qemu, err := exec.LookPath("qemu-s390x-static")
	nstest.Need(t, err == nil, "needs qemu-s390x-static (Debian's qemu-user-static, tests/install-deps.sh all)")
	bin := t.TempDir()
	for _, pkg := range decoderPackages {
		t.Run(strings.ReplaceAll(pkg, "/", "_"), func(t *testing.T) {
			exe := filepath.Join(bin, filepath.Base(pkg)+".test")
			build := exec.Command("go", "test", "-c", "-trimpath", "-o", exe, "./"+pkg)
			build.Dir = repo(t)
			build.Env = append(os.Environ(), "GOOS=linux", "GOARCH=s390x", "CGO_ENABLED=0")
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("go test -c for s390x: %v\n%s", err, out)
			}
			// TestWriterReal reads the test process's own /proc entries,
			// which qemu-user fakes (its stat names the test binary, its
			// comm the emulator): no decoder there.
			run := exec.Command(qemu, exe, "-test.short", "-test.count=1", "-test.skip", "^TestWriterReal$")
			run.Dir = filepath.Join(repo(t), pkg)
			out, err := run.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "PASS") {
				t.Fatalf("%s on s390x (qemu): %v\n%s", pkg, err, out)
			}
		})
	}
}
