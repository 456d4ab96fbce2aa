package inspect_test

import (
	"errors"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/child"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

// TestLegacyPeekSparesProbe: the probe process runs only where the peek at
// the table names finds a legacy table. With the probe taken out of the
// binary's table (its start fails), a netns holding only nftables rules is
// still seen whole, and one holding a legacy table (real iptables-legacy)
// is truncated with the probe's error, never reported clean.
func TestLegacyPeekSparesProbe(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "iptables-legacy")
	nstest.NeedIPTables(t)
	clean := nstest.New(t)
	clean.Run("iptables-nft", "-A", "OUTPUT", "-j", "DROP")
	legacy := nstest.New(t)
	legacy.Run("iptables-legacy", "-A", "INPUT", "-j", "DROP")
	inspectNS := func(ns *nstest.NS) (inspect.Snapshot, error) { return lookErr(t, ns, inspect.Options{}) }
	// Wired, the probe listed: the legacy table is read by the probe.
	if s, err := inspectNS(legacy); err != nil || legacyTable(s, inspect.IP, "filter") == nil {
		t.Fatalf("legacy netns, probe wired: err=%v legacy=%+v", err, s.Legacy)
	}

	child.Main() // no probe listed: starting one fails
	t.Cleanup(func() { child.Main(inspect.LegacyProbe) })
	s, err := inspectNS(clean)
	if err != nil || s.Truncated || len(s.Legacy) != 0 || len(s.Chains) == 0 {
		t.Errorf("nftables-only netns without a probe: err=%v truncated=%v legacy=%+v chains=%d", err, s.Truncated, s.Legacy, len(s.Chains))
	}
	s, err = inspectNS(legacy)
	if !errors.Is(err, child.ErrUnlisted) || !s.Truncated || !s.LegacyPartial {
		t.Errorf("legacy netns without a probe: err=%v truncated=%v partial=%v, want the probe's start error", err, s.Truncated, s.LegacyPartial)
	}
}
