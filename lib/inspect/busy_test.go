package inspect_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// busyVictim is a pod netns with one iptables-nft rule, opened, for a look
// while a neighbour holds the x_tables mutex (the caller holds it).
func busyVictim(t *testing.T) *netns.Handle {
	t.Helper()
	nstest.NeedRoot(t, "iptables-nft", "iptables-legacy-restore")
	nstest.NeedIPTables(t)
	victim := nstest.New(t)
	victim.Run("iptables-nft", "-A", "OUTPUT", "-j", "DROP")
	h, err := netns.Open(victim.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// A neighbour holding the x_tables mutex must not hold an inspection of
// another netns past its deadline: the legacy look runs in a probe process
// that Inspect abandons, and the snapshot says it is truncated.
func TestInspectLegacyBusyKeepsDeadline(t *testing.T) {
	h := busyVictim(t)

	nstest.HoldXTMutex(t)
	// The attack must be real: reading ip_tables_names has to wait long.
	blocked := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		os.ReadFile("/proc/self/net/ip_tables_names")
		blocked <- time.Since(start)
	}()
	select {
	case d := <-blocked:
		t.Fatalf("reading ip_tables_names took only %v under the attack: the attack is too weak to test anything", d)
	case <-time.After(600 * time.Millisecond):
	}

	const budget = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := time.Now()
	s, err := inspect.Inspect(ctx, h, inspect.Options{})
	took := time.Since(start)
	// Held, the mutex would hold Inspect until the test ends: the margin
	// is a loaded machine's.
	if took > budget+2*time.Second {
		t.Fatalf("Inspect took %v with a %v deadline while a neighbour held the x_tables mutex", took, budget)
	}
	if !s.Truncated || !errors.Is(err, inspect.ErrLegacyBusy) {
		t.Fatalf("truncated=%v err=%v, want truncated and %v", s.Truncated, err, inspect.ErrLegacyBusy)
	}
	var out *inspect.Chain
	for i, c := range s.Chains {
		if c.Table == "filter" && c.Name == "OUTPUT" {
			out = &s.Chains[i]
		}
	}
	if out == nil || out.Rules != 1 {
		t.Fatalf("the nftables part was lost: OUTPUT = %+v", out)
	}
}

// A look whose peek waits on the x_tables mutex a neighbour holds gives up
// on it the legacy share (300 ms) after its nftables read, not at its
// deadline: the hook's look sits in every container's start, and a
// neighbour can hold the mutex for good.
func TestInspectLegacyBusyPeekShare(t *testing.T) {
	h := busyVictim(t)
	nstest.HoldXTMutex(t)
	// A long budget, so the share and the deadline are far apart: the
	// bound is half of it, past a loaded machine's margin either way.
	const budget = 6 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := time.Now()
	s, err := inspect.Inspect(ctx, h, inspect.Options{})
	if took := time.Since(start); took > budget/2 {
		t.Errorf("Inspect took %v of a %v budget while a neighbour held the x_tables mutex: the peek waited past its share", took, budget)
	}
	if !s.Truncated || !errors.Is(err, inspect.ErrLegacyBusy) {
		t.Fatalf("truncated=%v err=%v, want truncated and %v", s.Truncated, err, inspect.ErrLegacyBusy)
	}
}

// With LegacyInProcess, the legacy read blocked by a neighbour holding the
// x_tables mutex is abandoned at the deadline on its thread; the next
// inspection does not start another (which would block a second thread)
// and says busy at once; once the mutex is free, inspections are complete.
func TestInspectLegacyInProcessBusy(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "iptables-legacy-restore")
	nstest.NeedIPTables(t)
	victim := nstest.New(t)
	h, err := netns.Open(victim.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	inspectIn := func(budget time.Duration) (inspect.Snapshot, error, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		start := time.Now()
		s, err := inspect.Inspect(ctx, h, inspect.Options{LegacyInProcess: true})
		return s, err, time.Since(start)
	}
	if s, err, _ := inspectIn(5 * time.Second); err != nil || s.Truncated {
		t.Fatalf("without a neighbour: truncated=%v err=%v", s.Truncated, err)
	}

	stop := nstest.HoldXTMutex(t)
	// The margins are a loaded machine's: held, the mutex would hold the
	// first look until the test ends, and a second look that started
	// another read would take its whole budget.
	const budget = 300 * time.Millisecond
	s, err, took := inspectIn(budget)
	if took > budget+2*time.Second || !s.Truncated || !errors.Is(err, inspect.ErrLegacyBusy) {
		t.Fatalf("took %v (deadline %v), truncated=%v err=%v, want truncated and %v by the deadline", took, budget, s.Truncated, err, inspect.ErrLegacyBusy)
	}
	const second = 3 * time.Second
	s, err, took = inspectIn(second)
	if took > second/2 || !s.Truncated || !errors.Is(err, inspect.ErrLegacyBusy) {
		t.Fatalf("second look took %v, truncated=%v err=%v, want busy at once", took, s.Truncated, err)
	}
	stop()
	for end := time.Now().Add(30 * time.Second); ; {
		s, err, _ := inspectIn(5 * time.Second)
		if err == nil && !s.Truncated {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("30 s after the mutex was freed: truncated=%v err=%v", s.Truncated, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
