package nstest

import (
	"os"
	"path/filepath"
	"testing"
)

// HostProc is a stand-in for the host's /proc as the agent's --host-proc
// reads it: only pid 1's network namespace, a link to nsPath. A test's
// "node" is a namespace it made (or the one the agent runs in:
// /proc/self/ns/net), never the host's pid 1, whose namespace a sandboxed
// test may not open.
func HostProc(t testing.TB, nsPath string) string {
	t.Helper()
	proc := filepath.Join(t.TempDir(), "proc")
	if err := os.MkdirAll(filepath.Join(proc, "1", "ns"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(nsPath, filepath.Join(proc, "1", "ns", "net")); err != nil {
		t.Fatal(err)
	}
	return proc
}
