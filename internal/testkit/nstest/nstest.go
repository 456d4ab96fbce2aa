// Package nstest gives tests throwaway network namespaces made with the real
// `ip netns add`, so rules are written by the real iptables and nft binaries
// and never touch the host's own firewall.
package nstest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// CI reports whether the suite runs under CI, where a missing privilege or
// tool is a failure, not a reason to skip.
func CI() bool { return os.Getenv("CI") == "true" }

// Need skips the test when the condition is false, except under CI=true
// where it fails it: a green CI must mean the real parts were exercised.
func Need(t testing.TB, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	// -short asks for the unit tests only (make test-unit), even in CI.
	if testing.Short() {
		t.Skipf("skipping in -short mode: %s", why)
	}
	if CI() {
		t.Fatalf("required under CI=true: %s", why)
	}
	t.Skipf("skipping: %s", why)
}

// NeedRoot requires root and the named commands on PATH.
func NeedRoot(t testing.TB, cmds ...string) {
	t.Helper()
	Need(t, !testing.Short(), "real-parts test")
	Need(t, os.Geteuid() == 0, "needs root to create network namespaces")
	for _, c := range append([]string{"ip"}, cmds...) {
		_, err := exec.LookPath(c)
		Need(t, err == nil, "needs "+c+" on PATH")
	}
}

// NeedIPTables is Need for the kernel's ip_tables module: the legacy
// tests write and read x_tables, which a kernel without it cannot hold.
func NeedIPTables(t testing.TB) {
	t.Helper()
	_, err := os.Stat("/proc/self/net/ip_tables_names")
	Need(t, err == nil, "needs the ip_tables module loaded")
}

// NS is a named network namespace pinned under /run/netns.
type NS struct {
	Name    string
	t       testing.TB
	deleted bool
}

// New creates a fresh namespace and deletes it when the test ends (or,
// if the test binary dies first, the next test binary's first New does).
func New(t testing.TB) *NS {
	t.Helper()
	NeedRoot(t)
	xtShare(t)
	ns := &NS{Name: NewName(t), t: t}
	if out, err := exec.Command("ip", "netns", "add", ns.Name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", ns.Name, err, out)
	}
	t.Cleanup(func() {
		if ns.deleted {
			return
		}
		if out, err := exec.Command("ip", "netns", "del", ns.Name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", ns.Name, err, out)
		}
	})
	return ns
}

// NewName is a fresh name for a namespace the caller makes and deletes
// (New's, or a runtime's under test): if this test binary dies before it
// deletes it, the next binary's first New or NewName does.
func NewName(t testing.TB) string {
	t.Helper()
	tag, err := ownerTag()
	if err != nil {
		t.Fatalf("nstest: this test binary's lock under %s: %v", ownerDir, err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "iptalert-" + tag + "-" + hex.EncodeToString(b)
}

// Delete removes the namespace now, as a stopping pod's runtime would.
func (ns *NS) Delete() {
	ns.t.Helper()
	if out, err := exec.Command("ip", "netns", "del", ns.Name).CombinedOutput(); err != nil {
		ns.t.Fatalf("ip netns del %s: %v: %s", ns.Name, err, out)
	}
	ns.deleted = true
}

// Path is the bind-mounted netns file, as CRI-O writes into config.json.
func (ns *NS) Path() string { return filepath.Join("/run/netns", ns.Name) }

// Run runs a command inside the namespace and fails the test on error.
func (ns *NS) Run(args ...string) string {
	ns.t.Helper()
	out, err := ns.Exec(args...)
	if err != nil {
		ns.t.Fatalf("ip netns exec %s %s: %v: %s", ns.Name, strings.Join(args, " "), err, out)
	}
	return out
}

// Exec runs a command inside the namespace and returns its combined output.
func (ns *NS) Exec(args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns.Name}, args...)...).CombinedOutput()
	return string(out), err
}

// Restore feeds text to a *-restore style command inside the namespace.
func (ns *NS) Restore(input string, args ...string) {
	ns.t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.Name}, args...)...)
	cmd.Stdin = strings.NewReader(input)
	if out, err := cmd.CombinedOutput(); err != nil {
		ns.t.Fatalf("%s in %s: %v: %s", strings.Join(args, " "), ns.Name, err, out)
	}
}

// Ruleset is everything an admin could see in the namespace: the nft
// ruleset (with handles) and the legacy tables. Tests compare it before and
// after an inspection to prove nothing was created.
func (ns *NS) Ruleset() string {
	ns.t.Helper()
	var b strings.Builder
	b.WriteString(ns.Run("nft", "-a", "list", "ruleset"))
	for _, f := range []string{"ip_tables_names", "ip6_tables_names", "arp_tables_names"} {
		out, _ := ns.Exec("cat", "/proc/self/net/"+f)
		b.WriteString(f + ":\n" + out)
	}
	return b.String()
}
