package classify

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

func base(fam inspect.Family, table, name, typ string, hook uint32, prio int32, rules int) inspect.Chain {
	return inspect.Chain{Family: fam, Table: table, Name: name, Base: true, Type: typ, Hook: hook, Priority: prio, Policy: 1, Rules: rules}
}

func TestClassify(t *testing.T) {
	filterIn := base(inspect.IP, "filter", "INPUT", "filter", localIn, 0, 3)
	tests := []struct {
		name   string
		snap   inspect.Snapshot
		chains []Chain
		legacy []Legacy
		// tables, when set, is the Usage's chain count per shaped table.
		tables map[string]int
	}{
		{
			name:   "iptables-nft filter rule",
			snap:   inspect.Snapshot{Chains: []inspect.Chain{base(inspect.IP, "filter", "INPUT", "filter", localIn, 0, 2)}},
			chains: []Chain{{Family: inspect.IP, Table: "filter", Name: "INPUT", Rules: 2}},
		},
		{
			name:   "empty accept base chain is not usage",
			snap:   inspect.Snapshot{Chains: []inspect.Chain{base(inspect.IP, "filter", "INPUT", "filter", localIn, 0, 0)}},
			chains: nil,
		},
		{
			name: "drop policy and user chain",
			snap: inspect.Snapshot{Chains: []inspect.Chain{
				{Family: inspect.IP6, Table: "filter", Name: "FORWARD", Base: true, Type: "filter", Hook: forward, Policy: 0},
				{Family: inspect.IP6, Table: "filter", Name: "MINE"},
			}},
			chains: []Chain{
				{Family: inspect.IP6, Table: "filter", Name: "FORWARD", Drop: true},
				{Family: inspect.IP6, Table: "filter", Name: "MINE", User: true},
			},
		},
		{
			name: "ip filter with a native base chain layout is not shaped",
			snap: inspect.Snapshot{Chains: []inspect.Chain{
				base(inspect.IP, "filter", "input", "filter", localIn, 10, 3),
				{Family: inspect.IP, Table: "filter", Name: "helper", Rules: 1},
			}},
			chains: nil,
		},
		{
			name: "wrong priority on an iptables name is native",
			snap: inspect.Snapshot{Chains: []inspect.Chain{base(inspect.IP, "nat", "PREROUTING", "nat", preRouting, 0, 1)}},
		},
		{
			name:   "mangle OUTPUT must be a route chain",
			snap:   inspect.Snapshot{Chains: []inspect.Chain{base(inspect.IP, "mangle", "OUTPUT", "route", localOut, -150, 1)}},
			chains: []Chain{{Family: inspect.IP, Table: "mangle", Name: "OUTPUT", Rules: 1}},
		},
		{
			name: "xt rules count anywhere, other rules of native tables not",
			snap: inspect.Snapshot{Chains: []inspect.Chain{
				{Family: inspect.INet, Table: "app", Name: "c", Base: true, Type: "filter", Hook: localIn, Policy: 0, Rules: 5, XTRules: 2},
			}},
			chains: []Chain{{Family: inspect.INet, Table: "app", Name: "c", Rules: 2, XT: 2}},
		},
		{
			name: "a rule the save tools refuse makes the table native",
			snap: inspect.Snapshot{Chains: []inspect.Chain{
				func() inspect.Chain { c := filterIn; c.Foreign, c.NativeRules = true, 1; return c }(),
				{Family: inspect.IP, Table: "filter", Name: "MINE", Rules: 1},
			}},
			tables: map[string]int{},
		},
		{
			name: "native rules are left out of a mixed chain",
			snap: inspect.Snapshot{Chains: []inspect.Chain{
				func() inspect.Chain { c := filterIn; c.NativeRules = 2; return c }(),
			}},
			chains: []Chain{{Family: inspect.IP, Table: "filter", Name: "INPUT", Rules: 1}},
			tables: map[string]int{"ip filter": 3},
		},
		{
			name: "a chain of native rules only is native, its name and policy too",
			snap: inspect.Snapshot{Chains: []inspect.Chain{
				func() inspect.Chain { c := filterIn; c.NativeRules, c.Policy = 3, 0; return c }(),
				{Family: inspect.IP, Table: "filter", Name: "ports", Rules: 2, NativeRules: 2},
				{Family: inspect.IP, Table: "filter", Name: "EMPTY"},
			}},
			chains: []Chain{{Family: inspect.IP, Table: "filter", Name: "EMPTY", User: true}},
			tables: map[string]int{"ip filter": 5},
		},
		{
			name: "xt rules of a refused table still count",
			snap: inspect.Snapshot{Chains: []inspect.Chain{
				func() inspect.Chain { c := filterIn; c.Foreign, c.NativeRules, c.XTRules = true, 1, 1; return c }(),
			}},
			chains: []Chain{{Family: inspect.IP, Table: "filter", Name: "INPUT", Rules: 1, XT: 1}},
			tables: map[string]int{},
		},
		{
			name: "legacy tables beyond their untouched entries",
			snap: inspect.Snapshot{Legacy: []inspect.LegacyTable{
				{Family: inspect.IP, Name: "filter", Hooks: 0b1110, Entries: 4},
				{Family: inspect.IP, Name: "nat", Hooks: 0b11011, Entries: 7},
			}},
			legacy: []Legacy{{Family: inspect.IP, Table: "nat", Rules: 2}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := Classify(tc.snap)
			if d := cmp.Diff(tc.chains, u.Chains); d != "" {
				t.Errorf("chains (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.legacy, u.Legacy); d != "" {
				t.Errorf("legacy (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.tables, u.Tables); tc.tables != nil && d != "" {
				t.Errorf("tables (-want +got):\n%s", d)
			}
			if u.Empty() != (len(tc.chains) == 0 && len(tc.legacy) == 0) {
				t.Errorf("Empty() = %v", u.Empty())
			}
		})
	}
}

func TestClassifyKeepsOnlyUsageRules(t *testing.T) {
	snap := inspect.Snapshot{
		Chains: []inspect.Chain{base(inspect.IP, "filter", "INPUT", "filter", localIn, 0, 1), {Family: inspect.INet, Table: "x", Name: "c", Rules: 2, XTRules: 1}},
		Rules: []inspect.Rule{
			{Family: inspect.IP, Table: "filter", Chain: "INPUT", Exprs: []inspect.Expr{{Name: "counter"}}},
			{Family: inspect.INet, Table: "x", Chain: "c", Exprs: []inspect.Expr{{Name: "meta"}}},
			{Family: inspect.INet, Table: "x", Chain: "c", Exprs: []inspect.Expr{{Name: "match"}}},
		},
	}
	u := Classify(snap)
	if len(u.Rules) != 2 || u.Rules[0].Table != "filter" || u.Rules[1].Exprs[0].Name != "match" {
		t.Fatalf("kept rules: %+v", u.Rules)
	}
}
