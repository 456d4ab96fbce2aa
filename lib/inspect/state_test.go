package inspect_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

func readState(t *testing.T, ns *nstest.NS) inspect.State {
	t.Helper()
	h, err := netns.Open(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := ns.Ruleset()
	st, err := inspect.ReadState(ctx, h)
	if err != nil {
		t.Fatalf("ReadState: %v", err)
	}
	if after := ns.Ruleset(); after != before {
		t.Fatalf("reading the state changed the netns ruleset:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	// The agent takes the State its scan's look read instead of reading
	// one apart: the two must be the same, or a re-sweep would scan every
	// pod again (or skip a changed one).
	snap, err := inspect.Inspect(ctx, h, inspect.Options{LegacyInProcess: true})
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	if !snap.StateOK {
		t.Fatal("an in-process look gave no State")
	}
	if snap.State != st {
		t.Fatalf("the look's State %+v, ReadState's %+v", snap.State, st)
	}
	return st
}

// stateStep is one thing done to a netns, and whether it changes the
// part of the State the test watches.
type stateStep struct {
	name    string
	run     func()
	changes bool
}

func needXTLoaded(t *testing.T) {
	t.Helper()
	nstest.NeedIPTables(t)
}

// The nftables generation is the namespace's own: it moves with every
// commit there, iptables-nft's and nft's, and with nothing else (not a
// listing, not a commit in another namespace).
func TestStateGeneration(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "nft")
	ns, other := nstest.New(t), nstest.New(t)
	st := readState(t, ns)
	steps := []stateStep{
		{"nothing", func() {}, false},
		{"iptables-nft -A", func() { ns.Run("iptables-nft", "-A", "OUTPUT", "-j", "ACCEPT") }, true},
		{"iptables-nft -L", func() { ns.Run("iptables-nft", "-L", "-n") }, false},
		{"nft list ruleset", func() { ns.Run("nft", "list", "ruleset") }, false},
		{"nft add rule", func() {
			ns.Run("nft", "add table inet mine; add chain inet mine c; add rule inet mine c accept")
		}, true},
		{"a commit in another netns", func() { other.Run("nft", "add table inet theirs") }, false},
		{"nft delete table", func() { ns.Run("nft", "delete table inet mine") }, true},
	}
	for _, s := range steps {
		s.run()
		now := readState(t, ns)
		if changed := now.Gen != st.Gen; changed != s.changes {
			t.Errorf("%s: generation %d -> %d, want changed=%v", s.name, st.Gen, now.Gen, s.changes)
		}
		if now.Legacy != st.Legacy {
			t.Errorf("%s: the legacy fingerprint changed", s.name)
		}
		st = now
	}
}

// The legacy fingerprint moves with every edit of a legacy table, an edit
// in place that keeps entry count and size included (iptables -R), and not
// with traffic (counters) nor listings.
func TestStateLegacy(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy", "ip6tables-legacy", "bash")
	needXTLoaded(t)
	ns := nstest.New(t)
	ns.Run("ip", "link", "set", "lo", "up")
	st := readState(t, ns)
	steps := []stateStep{
		{"nothing", func() {}, false},
		{"iptables-legacy -A", func() { ns.Run("iptables-legacy", "-A", "OUTPUT", "-s", "10.0.0.1", "-j", "ACCEPT") }, true},
		{"iptables-legacy -L", func() { ns.Run("iptables-legacy", "-L", "-n", "-v") }, false},
		{"traffic through the rules", func() {
			ns.Run("iptables-legacy", "-A", "OUTPUT", "-o", "lo", "-j", "ACCEPT")
			st = readState(t, ns)
			// Packets out through lo: bash's /dev/udp sends one each.
			ns.Run("bash", "-c", "for i in 1 2 3; do echo x >/dev/udp/127.0.0.1/9; done")
		}, false},
		{"iptables-legacy -R, same size", func() { ns.Run("iptables-legacy", "-R", "OUTPUT", "1", "-s", "10.0.0.2", "-j", "ACCEPT") }, true},
		{"ip6tables-legacy -A", func() { ns.Run("ip6tables-legacy", "-A", "OUTPUT", "-j", "ACCEPT") }, true},
		{"iptables-legacy -t nat -N", func() { ns.Run("iptables-legacy", "-t", "nat", "-N", "MINE") }, true},
	}
	for _, s := range steps {
		s.run()
		now := readState(t, ns)
		if changed := now.Legacy != st.Legacy; changed != s.changes {
			t.Errorf("%s: legacy fingerprint changed=%v, want %v", s.name, changed, s.changes)
		}
		if now.Gen != st.Gen {
			t.Errorf("%s: the nftables generation changed", s.name)
		}
		st = now
	}
	out := ns.Run("iptables-legacy", "-L", "OUTPUT", "-n", "-v", "-x")
	if !containsCounted(out) {
		t.Fatalf("the packets went through no rule, the traffic step tested nothing:\n%s", out)
	}
}

// containsCounted reports whether a listing shows a rule with packets.
func containsCounted(listing string) bool {
	for _, line := range strings.Split(listing, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 0 {
				return true
			}
		}
	}
	return false
}

// A neighbour holding the x_tables mutex makes the state unknown by the
// deadline, never a stall: the read is abandoned, and the next says busy
// at once instead of blocking another thread. Once the mutex is free, the
// state reads again.
func TestStateLegacyBusy(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy-restore")
	needXTLoaded(t)
	victim := nstest.New(t)
	h, err := netns.Open(victim.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	read := func(budget time.Duration) (inspect.State, error, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		start := time.Now()
		st, err := inspect.ReadState(ctx, h)
		return st, err, time.Since(start)
	}
	holder := nstest.New(t)
	stop := nstest.HoldXTMutexIn(t, holder)
	const budget = 300 * time.Millisecond
	// Generous margins: the verdict is "bounded", not "fast".
	if _, err, took := read(budget); took > budget+2*time.Second || !errors.Is(err, inspect.ErrLegacyBusy) {
		t.Fatalf("took %v (deadline %v), err=%v, want %v by the deadline", took, budget, err, inspect.ErrLegacyBusy)
	}
	if _, err, took := read(10 * time.Second); took > 2*time.Second || !errors.Is(err, inspect.ErrLegacyBusy) {
		t.Fatalf("second read took %v, err=%v, want busy at once", took, err)
	}
	// Nor does a look that could not read the legacy tables know the
	// State.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	snap, err := inspect.Inspect(ctx, h, inspect.Options{LegacyInProcess: true})
	cancel()
	if !errors.Is(err, inspect.ErrLegacyBusy) || snap.StateOK {
		t.Fatalf("a look while the mutex is held: err=%v, StateOK=%v; want busy and no State", err, snap.StateOK)
	}
	stop()
	for end := time.Now().Add(30 * time.Second); ; {
		if _, err, _ := read(5 * time.Second); err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("30 s after the mutex was freed: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A legacy look in a probe process (the hook's) gives no State: its
// answer crosses a pipe without the tables' parts.
func TestStateNotFromProbe(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy")
	needXTLoaded(t)
	ns := nstest.New(t)
	ns.Run("iptables-legacy", "-A", "OUTPUT", "-j", "ACCEPT")
	h := ns.Open()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	snap, err := inspect.Inspect(ctx, h, inspect.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Legacy) == 0 {
		t.Fatal("the look read no legacy table: the test tests nothing")
	}
	if snap.StateOK {
		t.Fatal("a probe's look claims a State")
	}
}
