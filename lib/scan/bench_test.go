package scan_test

import (
	"context"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/allowlist"
	"github.com/iptables-alerter/iptables-alerter/lib/catalog"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

// BenchmarkRunFrom measures what the agent spends on one pod's netns
// before its record step: the read, the allowlist and the decision, for a
// netns of the sweep bench's shapes (tests/bench).
func BenchmarkRunFrom(b *testing.B) {
	nstest.EachSize(b, []int{0, 10, 1000}, func(b *testing.B, h *netns.Handle, _ int) {
		allow, vendors := allowlist.Default(), catalog.Builtin()
		load := scan.Loaders{
			Allow:   func() (*allowlist.List, error) { return allow, nil },
			Vendors: func() (*catalog.Table, error) { return vendors, nil },
		}
		b.ReportAllocs()
		// The process's CPU is what the agent pays.
		report := nstest.MeterCPU(b)
		for b.Loop() {
			res := scan.RunFrom(context.Background(), h, "bench", load, true)
			_ = scan.Decide(scan.Meta{}, res)
		}
		report()
	})
}
