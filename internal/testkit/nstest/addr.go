package nstest

import (
	"net"
	"testing"
)

// FreeAddr is a loopback address with a port free a moment ago, for a
// server a test starts in another process (which must bind it itself).
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
