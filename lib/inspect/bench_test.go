package inspect_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// BenchmarkInspect measures one inspection of a netns holding n
// iptables-nft rules, with classify's predicates as the hook uses them;
// judge=false leaves out classify.Native, to show what judging every rule
// costs; ahead=true reads as the hook does (Options.ReadAhead).
func BenchmarkInspect(b *testing.B) {
	nstest.EachSize(b, []int{0, 10, 10000}, func(b *testing.B, h *netns.Handle, n int) {
		for _, c := range []struct{ judge, ahead bool }{{true, false}, {false, false}, {true, true}} {
			opt := inspect.Options{Detail: classify.Candidate, First: classify.IPTablesTable, ReadAhead: c.ahead}
			if c.judge {
				opt.Native = classify.Native
			}
			b.Run(fmt.Sprintf("judge=%v/ahead=%v", c.judge, c.ahead), func(b *testing.B) {
				b.ReportAllocs()
				// ahead=true spends more CPU than time: two threads.
				report := nstest.MeterCPU(b)
				for i := 0; i < b.N; i++ {
					s, err := inspect.Inspect(context.Background(), h, opt)
					if err != nil {
						b.Fatal(err)
					}
					if got := classify.Classify(s); n > 0 && got.Chains[0].Rules != n {
						b.Fatalf("counted %d rules, want %d", got.Chains[0].Rules, n)
					}
				}
				report()
			})
		}
	})
}

// BenchmarkReadState measures one read of a netns's State, what a re-sweep
// pays per unchanged pod: with iptables-nft rules, and with legacy ones
// too (a copy of the table under the x_tables mutex).
func BenchmarkReadState(b *testing.B) {
	for _, legacy := range []bool{false, true} {
		b.Run(fmt.Sprintf("legacy=%v", legacy), func(b *testing.B) {
			nstest.NeedRoot(b, "iptables-nft", "iptables-legacy")
			ns := nstest.New(b)
			ns.Run("iptables-nft", "-A", "INPUT", "-j", "ACCEPT")
			if legacy {
				ns.Run("iptables-legacy", "-A", "INPUT", "-j", "ACCEPT")
			}
			h := ns.Open()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := inspect.ReadState(context.Background(), h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
