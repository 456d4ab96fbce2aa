package inspect_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// inspectWithin inspects with the hook's options and a budget, and fails
// when the inspection overran it by more than a small margin.
func inspectWithin(t *testing.T, ns *nstest.NS, budget time.Duration) (inspect.Snapshot, error) {
	t.Helper()
	h, err := netns.Open(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := time.Now()
	s, err := inspect.Inspect(ctx, h, inspect.Options{Detail: classify.Candidate, First: classify.IPTablesTable})
	if took := time.Since(start); took > budget+250*time.Millisecond {
		t.Fatalf("Inspect took %v with a %v budget", took, budget)
	}
	return s, err
}

// 200,000 native rules made before the iptables tables: the deadline passes
// in their dump, yet the iptables rules are counted (read first) and the
// snapshot says it is truncated.
func TestInspectHugeNativeRulesetStillCountsIPTables(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "nft")
	ns := nstest.New(t)
	var b strings.Builder
	b.WriteString("add table ip aaa\nadd chain ip aaa c\n")
	for i := 0; i < 200000; i++ {
		fmt.Fprintf(&b, "add rule ip aaa c ip saddr 10.%d.%d.%d accept\n", i>>16&255, i>>8&255, i&255)
	}
	ns.Restore(b.String(), "nft", "-f", "-")
	ns.Run("iptables-nft", "-A", "OUTPUT", "-j", "DROP")
	s, err := inspectWithin(t, ns, 200*time.Millisecond)
	if c := chainOf(s, inspect.IP, "filter", "OUTPUT"); c == nil || c.Rules != 1 {
		t.Fatalf("ip filter OUTPUT = %+v, want its rule counted (err %v)", c, err)
	}
	if c := chainOf(s, inspect.IP, "aaa", "c"); !s.Truncated && (c == nil || c.Rules != 200000) {
		t.Fatalf("native chain = %+v, not truncated: want all 200000 rules or truncated", c)
	}
}

// 300,000 empty native chains made first, then an iptables user chain: what
// was counted comes back, truncated, with the reason.
func TestInspectTooManyChainsCountsWhatItSaw(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "nft")
	ns := nstest.New(t)
	ns.EmptyChains(300000)
	ns.Run("iptables-nft", "-N", "MINE")
	ns.Run("iptables-nft", "-A", "MINE", "-j", "RETURN")
	s, err := inspectWithin(t, ns, time.Second)
	if !s.Truncated || !(errors.Is(err, inspect.ErrTooMany) || errors.Is(err, inspect.ErrDeadline)) {
		t.Fatalf("truncated=%v err=%v, want truncated by the chain bound or the deadline", s.Truncated, err)
	}
	if c := chainOf(s, inspect.IP, "filter", "MINE"); c == nil || c.Rules != 1 {
		t.Fatalf("ip filter MINE = %+v, want it counted with its rule (err %v)", c, err)
	}
}

// 50,000 iptables user chains: counted up to the bound, truncated.
func TestInspectManyUserChainsTruncated(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft-restore")
	ns := nstest.New(t)
	var b strings.Builder
	b.WriteString("*filter\n")
	for i := 0; i < 50000; i++ {
		fmt.Fprintf(&b, ":U%d - [0:0]\n", i)
	}
	b.WriteString("COMMIT\n")
	ns.Restore(b.String(), "iptables-nft-restore")
	s, err := inspectWithin(t, ns, time.Second)
	if !s.Truncated || err == nil {
		t.Fatalf("truncated=%v err=%v, want truncated with an error", s.Truncated, err)
	}
	if u := classify.Classify(s); len(u.Chains) < 1000 {
		t.Fatalf("counted %d user chains, want what was seen up to the bound", len(u.Chains))
	}
}
