package nstest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
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
// port that way). Ports picked here are random and checked free; only
// another pick can meet them.
func FreePort(t testing.TB) int {
	t.Helper()
	if lo := ephemeralLow(); lo > minPort+1000 {
		for range 100 {
			port := minPort + rand.IntN(lo-minPort)
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				continue
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
