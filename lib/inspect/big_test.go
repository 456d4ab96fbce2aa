package inspect_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// inspectWithin inspects with the hook's options (ahead: reading ahead, as
// the hook does, or not, as the agent does) and a budget, and fails when
// the inspection overran it by more than a second (a loaded machine's
// margin; reading on would take many), or left a goroutine behind (a
// reader still on the socket).
func inspectWithin(t *testing.T, ns *nstest.NS, budget time.Duration, ahead bool) (inspect.Snapshot, error) {
	t.Helper()
	h, err := netns.Open(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	if ahead && runtime.GOMAXPROCS(0) < 2 {
		// With one processor Inspect reads in turn whatever it is told.
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	before := runtime.NumGoroutine()
	start := time.Now()
	s, err := inspect.Inspect(ctx, h, inspect.Options{Detail: classify.Candidate, First: classify.IPTablesTable, Native: classify.Native, ReadAhead: ahead})
	if took := time.Since(start); took > budget+time.Second {
		t.Fatalf("Inspect took %v with a %v budget", took, budget)
	}
	for wait := time.Now(); runtime.NumGoroutine() > before; time.Sleep(10 * time.Millisecond) {
		if time.Since(wait) > 2*time.Second {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines 2 s after Inspect, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
	}
	return s, err
}

// eachWay runs f with the agent's reading, then with the hook's.
func eachWay(t *testing.T, f func(t *testing.T, ahead bool)) {
	for _, ahead := range []bool{false, true} {
		t.Run(fmt.Sprintf("ahead=%v", ahead), func(t *testing.T) { f(t, ahead) })
	}
}

// hugeNative gives ns a native table, ip aaa, of n rules in one chain.
func hugeNative(ns *nstest.NS, n int) {
	var b strings.Builder
	b.WriteString("add table ip aaa\nadd chain ip aaa c\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "add rule ip aaa c ip saddr 10.%d.%d.%d accept\n", i>>16&255, i>>8&255, i&255)
	}
	ns.Restore(b.String(), "nft", "-f", "-")
}

// 200,000 native rules made before the iptables tables: the deadline passes
// in their dump, yet the iptables rules are counted (read first) and the
// snapshot says it is truncated.
func TestInspectHugeNativeRulesetStillCountsIPTables(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "nft")
	ns := nstest.New(t)
	hugeNative(ns, 200000)
	ns.Run("iptables-nft", "-A", "OUTPUT", "-j", "DROP")
	eachWay(t, func(t *testing.T, ahead bool) {
		s, err := inspectWithin(t, ns, 200*time.Millisecond, ahead)
		if c := chainOf(s, inspect.IP, "filter", "OUTPUT"); c == nil || c.Rules != 1 {
			t.Fatalf("ip filter OUTPUT = %+v, want its rule counted (err %v)", c, err)
		}
		if c := chainOf(s, inspect.IP, "aaa", "c"); !s.Truncated && (c == nil || c.Rules != 200000) {
			t.Fatalf("native chain = %+v, not truncated: want all 200000 rules or truncated", c)
		}
	})
}

// TestHugeNativeRulesetHidesNoLegacy (helper-102 #1): a pod adds one
// legacy rule and a native table whose dump takes longer than the look's
// budget. The legacy look was waited on only after the nftables read, at
// the deadline, so the peek's answer, in the pipe for long, was dropped
// and the look was "legacy x_tables busy" with no lock held: every look
// unknown, the legacy rule never counted. The nftables read now leaves
// the legacy look a share of the budget.
func TestHugeNativeRulesetHidesNoLegacy(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy", "nft")
	ns := nstest.New(t)
	hugeNative(ns, 300000)
	ns.Run("iptables-legacy", "-A", "INPUT", "-p", "tcp", "--dport", "9", "-j", "DROP")
	h, err := netns.Open(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	// The hook's peek and probe, and the agent's look on a thread.
	for _, inProcess := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s, err := inspect.Inspect(ctx, h, inspect.Options{Detail: classify.Candidate, First: classify.IPTablesTable, Native: classify.Native, LegacyInProcess: inProcess})
		cancel()
		if !s.NftPartial {
			t.Fatalf("in process %v: 300,000 native rules read whole (err %v): the test needs a dump that outlasts the budget", inProcess, err)
		}
		if errors.Is(err, inspect.ErrLegacyBusy) || s.LegacyPartial {
			t.Fatalf("in process %v: legacy look partial (%v), no lock held: err %v", inProcess, s.LegacyPartial, err)
		}
		if len(s.LegacyRules) != 1 {
			t.Fatalf("in process %v: legacy tables %+v: rules %+v, want the pod's 1 (err %v)", inProcess, s.Legacy, s.LegacyRules, err)
		}
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
	eachWay(t, func(t *testing.T, ahead bool) {
		s, err := inspectWithin(t, ns, time.Second, ahead)
		if !s.Truncated || !(errors.Is(err, inspect.ErrTooMany) || errors.Is(err, inspect.ErrDeadline)) {
			t.Fatalf("truncated=%v err=%v, want truncated by the chain bound or the deadline", s.Truncated, err)
		}
		if c := chainOf(s, inspect.IP, "filter", "MINE"); c == nil || c.Rules != 1 {
			t.Fatalf("ip filter MINE = %+v, want it counted with its rule (err %v)", c, err)
		}
	})
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
	eachWay(t, func(t *testing.T, ahead bool) {
		s, err := inspectWithin(t, ns, time.Second, ahead)
		if !s.Truncated || err == nil {
			t.Fatalf("truncated=%v err=%v, want truncated with an error", s.Truncated, err)
		}
		if u := classify.Classify(s); len(u.Chains) < 1000 {
			t.Fatalf("counted %d user chains, want what was seen up to the bound", len(u.Chains))
		}
	})
}

// Reading ahead gives the same snapshot as reading in turn, rule for rule:
// user chains and jumps in an iptables table read first, a native table's
// rules read after the chain listing, each dump many batches long, a
// comment-laden rule in the middle.
func TestReadAheadSameSnapshot(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft-restore", "nft")
	ns := nstest.New(t)
	var b strings.Builder
	b.WriteString("*filter\n:MINE - [0:0]\n")
	for i := 0; i < 3000; i++ {
		fmt.Fprintf(&b, "-A INPUT -s 10.0.%d.%d/32 -p tcp --dport %d -j MINE\n", i>>8&255, i&255, 1024+i)
		if i == 1500 {
			fmt.Fprintf(&b, "-A INPUT -m comment --comment %q -j ACCEPT\n", strings.Repeat("c", 250))
		}
	}
	b.WriteString("-A MINE -j RETURN\nCOMMIT\n")
	ns.Restore(b.String(), "iptables-nft-restore")
	b.Reset()
	b.WriteString("add table inet zz\nadd chain inet zz c\n")
	for i := 0; i < 2000; i++ {
		fmt.Fprintf(&b, "add rule inet zz c tcp dport %d counter accept\n", 2000+i)
	}
	ns.Restore(b.String(), "nft", "-f", "-")
	var snaps [2]inspect.Snapshot
	for i, ahead := range []bool{false, true} {
		s, err := inspectWithin(t, ns, 10*time.Second, ahead)
		if err != nil || s.Truncated {
			t.Fatalf("ahead=%v: truncated=%v err=%v", ahead, s.Truncated, err)
		}
		s.NftTook = 0 // how long it took, not what it saw
		snaps[i] = s
	}
	if c := chainOf(snaps[1], inspect.IP, "filter", "INPUT"); c == nil || c.Rules != 3001 || c.XTRules != 1 {
		t.Fatalf("ip filter INPUT read ahead = %+v, want 3001 rules, the comment's with an xt match", c)
	}
	if c := chainOf(snaps[1], inspect.INet, "zz", "c"); c == nil || c.Rules != 2000 {
		t.Fatalf("inet zz c read ahead = %+v, want 2000 rules", c)
	}
	if len(snaps[1].Rules) == 0 {
		t.Fatal("no rule kept in detail")
	}
	if !reflect.DeepEqual(snaps[0], snaps[1]) {
		t.Fatalf("snapshots differ:\nin turn:  %d chains, %d rules kept\nahead:    %d chains, %d rules kept", len(snaps[0].Chains), len(snaps[0].Rules), len(snaps[1].Chains), len(snaps[1].Rules))
	}
}
