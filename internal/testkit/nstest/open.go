package nstest

import (
	"fmt"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// Open opens the namespace as the hook and the agent do, failing the test
// on error; the handle is closed when the test ends.
func (ns *NS) Open() *netns.Handle {
	ns.t.Helper()
	h, err := netns.Open(ns.Path())
	if err != nil {
		ns.t.Fatal(err)
	}
	ns.t.Cleanup(func() { h.Close() })
	return h
}

// EachSize runs fn as a sub-benchmark "rules=N" for each size, on a
// netns holding N iptables-nft rules (ManyRules), opened, given with N.
func EachSize(b *testing.B, sizes []int, fn func(b *testing.B, h *netns.Handle, n int)) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			NeedRoot(b, "iptables-nft-restore")
			ns := New(b)
			if n > 0 {
				ns.ManyRules(n)
			}
			fn(b, ns.Open(), n)
		})
	}
}
