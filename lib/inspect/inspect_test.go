package inspect_test

import (
	"context"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

func look(t *testing.T, ns *nstest.NS, opt inspect.Options) inspect.Snapshot {
	t.Helper()
	before := ns.Ruleset()
	s, err := lookErr(t, ns, opt)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	if after := ns.Ruleset(); after != before {
		t.Fatalf("inspection changed the netns ruleset:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	return s
}

// lookErr inspects ns with a 5 s deadline.
func lookErr(t *testing.T, ns *nstest.NS, opt inspect.Options) (inspect.Snapshot, error) {
	t.Helper()
	h, err := netns.Open(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return inspect.Inspect(ctx, h, opt)
}

func TestInspectCountsEveryBackend(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "iptables-legacy", "nft")
	ns := nstest.New(t)
	ns.Run("iptables-nft", "-A", "OUTPUT", "-p", "tcp", "--dport", "22", "-j", "DROP")
	ns.Run("iptables-nft", "-A", "OUTPUT", "-m", "comment", "--comment", "hi", "-j", "ACCEPT")
	ns.Run("iptables-legacy", "-t", "nat", "-A", "OUTPUT", "-j", "RETURN")
	ns.Run("nft", "add table inet mine; add chain inet mine c { type filter hook input priority 0; }; add rule inet mine c tcp dport 80 accept")

	all := func(inspect.Family, string, bool) bool { return true }
	s := look(t, ns, inspect.Options{Detail: all})

	var out *inspect.Chain
	for i, c := range s.Chains {
		if c.Family == inspect.IP && c.Table == "filter" && c.Name == "OUTPUT" {
			out = &s.Chains[i]
		}
	}
	if out == nil || out.Rules != 2 || out.XTRules != 1 || !out.Base || out.Priority != 0 {
		t.Fatalf("ip filter OUTPUT = %+v, want base chain with 2 rules, 1 xt", out)
	}
	if len(s.Rules) != 3 {
		t.Fatalf("kept %d rules, want 3 (detail on for all)", len(s.Rules))
	}
	var nat *inspect.LegacyTable
	for i, l := range s.Legacy {
		if l.Family == inspect.IP && l.Name == "nat" {
			nat = &s.Legacy[i]
		}
	}
	// nat has 4 hooks: 4 policies + the final error entry, plus our rule.
	if nat == nil || nat.Entries != 6 {
		t.Fatalf("legacy ip nat = %+v, want 6 entries", nat)
	}
}

func TestInspectEmptyNetnsCreatesNothing(t *testing.T) {
	nstest.NeedRoot(t, "nft")
	ns := nstest.New(t)
	s := look(t, ns, inspect.Options{})
	if len(s.Tables)+len(s.Chains)+len(s.Legacy) != 0 || s.Truncated {
		t.Fatalf("empty netns gave %+v", s)
	}
}

func TestInspectDetailBound(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft-restore")
	ns := nstest.New(t)
	in := "*filter\n"
	for i := 0; i < 50; i++ {
		in += "-A INPUT -s 10.0.0.1 -j DROP\n"
	}
	ns.Restore(in+"COMMIT\n", "iptables-nft-restore")
	all := func(inspect.Family, string, bool) bool { return true }
	s := look(t, ns, inspect.Options{Detail: all, MaxDetail: 7})
	if len(s.Rules) != 7 {
		t.Fatalf("kept %d rules, want the bound 7", len(s.Rules))
	}
	total := 0
	for _, c := range s.Chains {
		total += c.Rules
	}
	if total != 50 {
		t.Fatalf("counted %d rules, want all 50", total)
	}
}

func TestInspectDeadlineTruncates(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft-restore")
	ns := nstest.New(t)
	in := "*filter\n"
	for i := 0; i < 20000; i++ {
		in += "-A INPUT -s 10.0.0.1 -j DROP\n"
	}
	ns.Restore(in+"COMMIT\n", "iptables-nft-restore")
	h, err := netns.Open(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	s, err := inspect.Inspect(ctx, h, inspect.Options{})
	if err == nil || !s.Truncated {
		t.Fatalf("1ms deadline on 20000 rules: err=%v truncated=%v, want a deadline error and truncated", err, s.Truncated)
	}
}
