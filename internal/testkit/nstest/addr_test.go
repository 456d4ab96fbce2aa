package nstest

import (
	"net"
	"strconv"
	"testing"
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
