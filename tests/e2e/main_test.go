package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/testbin"
	buildfs "github.com/iptables-alerter/iptables-alerter/tests/runtime/rootfs"
)

// Built once for the whole package: the hook binary and the container rootfs.
var (
	hookBin   string
	rootfs    string
	rootfsErr error
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "iptables-alerter-e2e-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "create temp dir: %v\n", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	// The hook must be reachable by runtimes that run as root with their own
	// view of the filesystem: an absolute path in a world-readable dir.
	if err := os.Chmod(tmp, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "chmod %q: %v\n", tmp, err)
		return 1
	}
	hookBin = filepath.Join(tmp, "iptables-alerter")
	// The hookonly build is the one hooks.d runs (see the Makefile).
	if err := testbin.Build(hookBin, "hookonly"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rootfs = filepath.Join(tmp, "rootfs")
	rootfsErr = buildfs.Build(rootfs)
	return m.Run()
}

// needRootfs fails (CI) or skips when the rootfs could not be assembled.
func needRootfs(t *testing.T) {
	t.Helper()
	msg := "a container rootfs built from busybox-static and iptables"
	if rootfsErr != nil {
		msg += ": " + rootfsErr.Error()
	}
	nstest.Need(t, rootfsErr == nil, msg)
}

// readLog returns the hook's log file, empty when the hook never wrote one.
func readLog(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatalf("read hook log: %v", err)
	}
	return string(data)
}

// saveRules counts what the real iptables-nft-save prints for the netns: the
// finding must agree with it.
func saveRules(t *testing.T, ns *nstest.NS) (rules int) {
	t.Helper()
	out := ns.Run("iptables-nft-save")
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "-A ") {
			rules++
		}
	}
	return rules
}
