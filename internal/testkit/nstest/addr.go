package nstest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// FreeAddr is a loopback address with a port free a moment ago, for a
// server a test starts in another process (which must bind it itself).
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}

// FreePort is a loopback port free a moment ago (FreeAddr's).
//
// The port lies below the kernel's ephemeral range: a port taken by
// binding port 0 and closing it was handed by the kernel, a moment later,
// to another test's server binding port 0 (CI once lost kube-apiserver's
// port that way). Ports picked here are random, checked free and claimed
// until the test ends, so that two picks (of this binary or of another
// running beside it) never meet between a pick and its server's bind.
func FreePort(t testing.TB) int {
	t.Helper()
	if lo := ephemeralLow(); lo > minPort+1000 {
		for range 100 {
			port := minPort + rand.IntN(lo-minPort)
			if !claimPort(t, port) {
				continue
			}
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				continue // a server that is not a test's holds it; the claim stays
			}
			ln.Close()
			return port
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// minPort keeps the picks above the fixed ports tests give servers
// (9090, 9757, 8080: all below it).
const minPort = 10000

// ephemeralLow is the first port of the kernel's ephemeral range (this
// process's netns), 32768 if it cannot be read.
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var lo, hi int
	if _, err := fmt.Sscan(strings.TrimSpace(string(data)), &lo, &hi); err != nil {
		return 32768
	}
	return lo
}

// claims are the ports this binary picked and has not released.
var claims struct {
	sync.Mutex
	ports map[int]bool
}

// claimPort claims port until t ends: in this binary, and, as root, in
// ownerDir/port-PORT against every other test binary. false if it is
// claimed already.
func claimPort(t testing.TB, port int) bool {
	claims.Lock()
	defer claims.Unlock()
	if claims.ports[port] {
		return false
	}
	file := ""
	if tag := Owner(); tag != "" {
		file = portFile(ownerDir, port)
		if !claimFile(ownerDir, file, tag) {
			return false
		}
	}
	if claims.ports == nil {
		claims.ports = map[int]bool{}
	}
	claims.ports[port] = true
	t.Cleanup(func() {
		claims.Lock()
		defer claims.Unlock()
		delete(claims.ports, port)
		if file != "" {
			_ = underPortsLock(ownerDir, func() error { return os.Remove(file) })
		}
	})
	return true
}

func portFile(dir string, port int) string {
	return filepath.Join(dir, "port-"+strconv.Itoa(port))
}

// claimFile writes tag to file unless a binary that still runs holds it
// (dir holds the owners' locks): a claim of one that died before its
// cleanups is taken over.
func claimFile(dir, file, tag string) bool {
	err := underPortsLock(dir, func() error {
		b, err := os.ReadFile(file)
		if err == nil && !claimGone(dir, b) {
			return os.ErrExist
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		_ = os.Remove(file)
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		_, err = f.WriteString(tag)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(file)
		}
		return err
	})
	return err == nil
}

// sweepPorts removes the claims in dir of owners that are gone, so that
// they do not pile up where no pick meets them again.
func sweepPorts(dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "port-*"))
	if len(files) == 0 {
		return
	}
	_ = underPortsLock(dir, func() error {
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err == nil && claimGone(dir, b) {
				_ = os.Remove(f)
			}
		}
		return nil
	})
}

// claimGone tells whether a claim holding tag is a dead binary's: its
// owner is gone, or it is torn (claims are written under the lock, so
// one that is not a whole tag is one whose writer died).
func claimGone(dir string, tag []byte) bool {
	return !isHex8(string(tag)) || ownerGoneIn(dir, string(tag))
}

// underPortsLock runs fn holding dir/ports.lock: a claim's check,
// take-over and write, and its removal, are one step for every binary.
func underPortsLock(dir string, fn func() error) error {
	f, err := os.OpenFile(filepath.Join(dir, "ports.lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return err
	}
	return fn()
}
