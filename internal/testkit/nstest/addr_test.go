package nstest

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFreeAddrBelowEphemeral: the picked port is outside the kernel's
// ephemeral range, where a server binding port 0 may land, and bindable.
func TestFreeAddrBelowEphemeral(t *testing.T) {
	lo := ephemeralLow()
	for range 20 {
		addr := FreeAddr(t)
		_, p, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p)
		if port < minPort || port >= lo {
			t.Fatalf("FreeAddr gave port %d, want one in [%d, %d)", port, minPort, lo)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("port %s not free: %v", addr, err)
		}
		ln.Close()
	}
}

// liveOwner holds tag's owner lock in dir until the test ends, as a live
// test binary does.
func liveOwner(t *testing.T, dir, tag string) {
	t.Helper()
	lock, err := os.Create(filepath.Join(dir, tag))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
}

// TestClaimFile: a port claimed by a live test binary is refused to
// others; one claimed by a binary that is gone, or torn, is taken over;
// the sweep removes only the claims of the gone.
func TestClaimFile(t *testing.T) {
	dir := t.TempDir()
	live, gone, me := "0badc0de", "deadbeef", "12345678"
	liveOwner(t, dir, live)
	liveOwner(t, dir, me)
	// gone's lock file is there, unlocked: its binary died.
	if err := os.WriteFile(filepath.Join(dir, gone), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(port int, tag string) {
		if err := os.WriteFile(portFile(dir, port), []byte(tag), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(20001, live)
	write(20002, gone)
	write(20003, "")
	for _, tc := range []struct {
		port int
		want bool
	}{{20001, false}, {20002, true}, {20003, true}, {20004, true}, {20004, false}} {
		if got := claimFile(dir, portFile(dir, tc.port), me); got != tc.want {
			t.Errorf("claim of port %d: got %v, want %v", tc.port, got, tc.want)
		}
	}
	if b, _ := os.ReadFile(portFile(dir, 20002)); string(b) != me {
		t.Errorf("port 20002's claim holds %q after its take-over, want %q", b, me)
	}

	write(20005, gone)
	sweepPorts(dir)
	for port, want := range map[int]bool{20001: true, 20002: true, 20005: false} {
		if _, err := os.Stat(portFile(dir, port)); (err == nil) != want {
			t.Errorf("after the sweep, port %d's claim there: %v, want %v", port, err == nil, want)
		}
	}
}

// TestFreePortClaimed: a port this binary picked is not picked again
// while its test runs.
func TestFreePortClaimed(t *testing.T) {
	p := FreePort(t)
	if claimPort(t, p) {
		t.Fatalf("port %d claimed twice", p)
	}
}
