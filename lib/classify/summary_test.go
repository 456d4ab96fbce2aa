package classify

import (
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

func TestSummarizeFingerprint(t *testing.T) {
	u := Usage{
		Chains: []Chain{
			{Family: inspect.IP, Table: "nat", Name: "OUTPUT", Rules: 2, Sum: 7},
			{Family: inspect.IP, Table: "nat", Name: "X", User: true},
			// Emptied by the allowlist: not counted, not in the tables.
			{Family: inspect.IP, Table: "filter", Name: "OUTPUT"},
		},
		Legacy: []Legacy{{Family: inspect.IP6, Table: "filter", Rules: 1}},
	}
	s := Summarize(u)
	if s.NftChains != 2 || s.NftRules != 2 || strings.Join(s.NftTables, ",") != "ip nat" || s.LegacyRules != 1 || s.ListsCut {
		t.Fatalf("Summarize = %+v", s)
	}
	if again := Summarize(u); again.Fingerprint != s.Fingerprint {
		t.Error("same usage, different fingerprint")
	}
	changed := u
	changed.Chains = append([]Chain(nil), u.Chains...)
	changed.Chains[0].Sum = 8
	if other := Summarize(changed); other.Fingerprint == s.Fingerprint {
		t.Error("changed rules, same fingerprint")
	}
	// Field boundaries are length-prefixed: moving bytes between table and
	// chain names must change the fingerprint.
	a := Usage{Chains: []Chain{{Family: inspect.IP, Table: "ab", Name: "c", User: true}}}
	b := Usage{Chains: []Chain{{Family: inspect.IP, Table: "a", Name: "bc", User: true}}}
	if Summarize(a).Fingerprint == Summarize(b).Fingerprint {
		t.Error("shifted names collide")
	}
}

func TestSummarizeBoundsHostileTables(t *testing.T) {
	var u Usage
	for i := 0; i < 100; i++ {
		u.Chains = append(u.Chains, Chain{Family: inspect.INet, Table: strings.Repeat("x", 200) + string(rune('A'+i%26)) + strings.Repeat("y", i), Name: "c", Rules: 1})
	}
	s := Summarize(u)
	if len(s.NftTables) != maxTables || !s.ListsCut {
		t.Fatalf("%d tables, truncated=%v; want %d and truncated", len(s.NftTables), s.ListsCut, maxTables)
	}
	for _, tb := range s.NftTables {
		if len(tb) > len("inet ")+maxName+len("…") {
			t.Fatalf("table name not capped: %d bytes", len(tb))
		}
	}
}

// TestImpactCounts: xt and native rules per chain, legacy per table, the
// allowlist's removal keeping them apart, and native as the worst level of
// rule-less usage.
func TestImpactCounts(t *testing.T) {
	xt := inspect.Rule{Family: inspect.IP, Table: "nat", Chain: "OUTPUT", Exprs: []inspect.Expr{{Name: "payload"}, {Name: "target"}}}
	native := inspect.Rule{Family: inspect.IP, Table: "nat", Chain: "OUTPUT", Exprs: []inspect.Expr{{Name: "payload"}, {Name: "immediate"}}}
	if Level(xt) != findings.ImpactXt || Level(native) != findings.ImpactNative {
		t.Fatalf("Level: xt rule %q, native rule %q", Level(xt), Level(native))
	}
	u := Usage{
		Chains: []Chain{{Family: inspect.IP, Table: "nat", Name: "OUTPUT", Rules: 5, XT: 2}},
		Legacy: []Legacy{{Family: inspect.IP, Table: "filter", Rules: 3}},
	}
	s := Summarize(u)
	if s.Impact != (findings.Impact{Legacy: 3, Xt: 2, Native: 3}) || s.Worst != findings.ImpactLegacy {
		t.Fatalf("impact %+v worst %q", s.Impact, s.Worst)
	}
	u.Legacy = nil
	u.Chains[0].Remove(xt)
	u.Chains[0].Remove(native)
	if s := Summarize(u); s.Impact != (findings.Impact{Xt: 1, Native: 2}) || s.Worst != findings.ImpactXt {
		t.Fatalf("after removal: impact %+v worst %q", s.Impact, s.Worst)
	}
	empty := Usage{Chains: []Chain{{Family: inspect.IP, Table: "filter", Name: "MINE", User: true}}}
	if s := Summarize(empty); s.Worst != findings.ImpactNative || s.Impact != (findings.Impact{}) {
		t.Fatalf("empty user chain: impact %+v worst %q", s.Impact, s.Worst)
	}
	if s := Summarize(Usage{}); s.Worst != "" {
		t.Fatalf("no usage: worst %q", s.Worst)
	}
}
