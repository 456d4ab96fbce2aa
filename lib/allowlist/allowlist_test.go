package allowlist

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name string
		json string
	}{
		{"not json", `{"entries": [`},
		{"no name", `{"entries": [{"rule": "-A X -j ACCEPT"}]}`},
		{"no matcher", `{"entries": [{"name": "a"}]}`},
		{"both matchers", `{"entries": [{"name": "a", "rule": "x", "rule_regexp": "x"}]}`},
		{"bad regexp", `{"entries": [{"name": "a", "rule_regexp": "("}]}`},
		// Refused when loaded, though compiled only when a rule reaches it.
		{"regexp too large", `{"entries": [{"name": "a", "rule_regexp": "x{1001}"}]}`},
		{"regexp repeats too large", `{"entries": [{"name": "a", "rule_regexp": "((x{100}){100}){100}"}]}`},
		{"bad namespace glob", `{"entries": [{"name": "a", "rule": "x", "namespaces": ["["]}]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse([]byte(tc.json), "test"); err == nil {
				t.Fatal("Parse accepted it")
			}
		})
	}
}

// TestParseNoReason: reason is for the reader; an entry without one loads
// and matches (the schema and docs/allowlist.md say it is optional).
func TestParseNoReason(t *testing.T) {
	l, err := Parse([]byte(`{"entries": [{"name": "a", "rule": "-A OUTPUT -j ACCEPT"}]}`), "test")
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Match("ns", inspect.Rule{Chain: "OUTPUT"}, func() string { return "-A OUTPUT -j ACCEPT" }); got != "a" {
		t.Errorf("Match = %q, want a", got)
	}
}

func TestMatch(t *testing.T) {
	l, err := Parse([]byte(`{"entries": [
	  {"name": "exact", "family": "ip", "table": "filter", "chain": "OUTPUT", "rule": "-A OUTPUT -j DROP"},
	  {"name": "re", "rule_regexp": "-A FORWARD .*", "namespaces": ["openshift-*"]}
	]}`), "test")
	if err != nil {
		t.Fatal(err)
	}
	out := inspect.Rule{Family: inspect.IP, Table: "filter", Chain: "OUTPUT"}
	fwd := inspect.Rule{Family: inspect.IP6, Table: "filter", Chain: "FORWARD"}
	tests := []struct {
		name, ns string
		rule     inspect.Rule
		text     string
		want     string
	}{
		{"exact", "a", out, "-A OUTPUT -j DROP", "exact"},
		{"exact other text", "a", out, "-A OUTPUT -j ACCEPT", ""},
		{"exact other family", "a", inspect.Rule{Family: inspect.IP6, Table: "filter", Chain: "OUTPUT"}, "-A OUTPUT -j DROP", ""},
		{"regexp in scope", "openshift-dns", fwd, "-A FORWARD -j DROP", "re"},
		{"regexp out of namespace", "team-a", fwd, "-A FORWARD -j DROP", ""},
		// The regexp must match the whole text, not a part of it.
		{"regexp is anchored", "openshift-dns", fwd, "x-A FORWARD -j DROP", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := l.Match(tc.ns, tc.rule, func() string { return tc.text }); got != tc.want {
				t.Errorf("Match = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMatchRendersOnlyInScope(t *testing.T) {
	l, _ := Parse([]byte(`{"entries": [{"name": "a", "table": "filter", "rule": "x"}]}`), "test")
	calls := 0
	l.Match("ns", inspect.Rule{Table: "nat"}, func() string { calls++; return "x" })
	if calls != 0 {
		t.Errorf("rendered a rule no entry could match (%d calls)", calls)
	}
}

// A rule is not rendered for an entry whose text cannot start as the
// rule's does ("-A CHAIN"): the built-in entries name FORWARD and OUTPUT
// in their regexp, so a pod's INPUT rules cost no rendering.
func TestMatchRendersOnlyFittingChain(t *testing.T) {
	rule := func(chain string) inspect.Rule {
		return inspect.Rule{Family: inspect.IP, Table: "filter", Chain: chain}
	}
	for _, tc := range []struct {
		chain  string
		render bool
	}{{"INPUT", false}, {"OUTPUT", true}, {"FORWARD", true}, {"OUTPUT2", false}, {"FORWARD-X", false}, {"odd chain", true}} {
		calls := 0
		Default().Match("ns", rule(tc.chain), func() string { calls++; return "-A " + tc.chain + " -j DROP" })
		if (calls > 0) != tc.render {
			t.Errorf("chain %q: rendered %d times, want rendering %v", tc.chain, calls, tc.render)
		}
	}
}

// fits never turns away a text its entry matches: each text here matches
// its entry, and the rule's head must fit.
func TestFitsKeepsMatches(t *testing.T) {
	for _, tc := range []struct{ re, chain, text string }{
		{"-A (FORWARD|OUTPUT) -p tcp --dport (22623|22624) --syn -j REJECT", "OUTPUT", "-A OUTPUT -p tcp --dport 22624 --syn -j REJECT"},
		{"-A OUT.*", "OUTPUT", "-A OUTPUT -j DROP"},
		{"-A OUTPUT", "OUTPUT", "-A OUTPUT"},
		{"-A INPUT -j DROP|-A OUTPUT -j ACCEPT", "OUTPUT", "-A OUTPUT -j ACCEPT"},
		{"(?i)-a output -j drop", "OUTPUT", "-A OUTPUT -j DROP"},
		{".*", "X", "-A X -j DROP"},
		{"-A (IN|OUT)(PUT|BOUND) -j DROP", "OUTBOUND", "-A OUTBOUND -j DROP"},
		{`-A [\w-]+ -j DROP`, "KUBE-X", "-A KUBE-X -j DROP"},
	} {
		l, err := New([]Entry{{Name: "e", RuleRegexp: tc.re}}, "test")
		if err != nil {
			t.Fatal(err)
		}
		r := inspect.Rule{Family: inspect.IP, Table: "filter", Chain: tc.chain}
		if !l.entries[0].re().MatchString(tc.text) {
			t.Fatalf("bad case: %q does not match %q", tc.text, tc.re)
		}
		if got := l.Match("ns", r, func() string { return tc.text }); got != "e" {
			t.Errorf("%q on chain %s: not matched (starts %q)", tc.re, tc.chain, l.entries[0].starts)
		}
	}
	l, _ := New([]Entry{{Name: "exact", Rule: "-A OUTPUT -j DROP"}}, "test")
	if l.Match("ns", inspect.Rule{Chain: "OUTPUT"}, func() string { return "-A OUTPUT -j DROP" }) != "exact" {
		t.Error("exact rule not matched")
	}
}

func TestApply(t *testing.T) {
	l, _ := Parse([]byte(`{"entries": [{"name": "drop-ok", "rule_regexp": "-A [A-Z]+ -j DROP"}]}`), "test")
	r := func(chain, text string) inspect.Rule {
		return inspect.Rule{Family: inspect.IP, Table: "filter", Chain: chain, Exprs: []inspect.Expr{{Name: text}}}
	}
	u := classify.Usage{
		Chains: []classify.Chain{{Family: inspect.IP, Table: "filter", Name: "OUTPUT", Rules: 2}, {Family: inspect.IP, Table: "filter", Name: "INPUT", Rules: 1}},
		Rules:  []inspect.Rule{r("OUTPUT", "DROP"), r("OUTPUT", "ACCEPT"), r("INPUT", "DROP")},
	}
	got, res := l.Apply(u, "ns", func(r inspect.Rule) string { return "-A " + r.Chain + " -j " + r.Exprs[0].Name })
	if d := cmp.Diff(Result{Count: 2, Entries: []string{"drop-ok"}}, res); d != "" {
		t.Errorf("result (-want +got):\n%s", d)
	}
	if got.Chains[0].Rules != 1 || got.Chains[1].Rules != 0 || got.Chains[1].Used() || len(got.Rules) != 1 {
		t.Errorf("usage after Apply: %+v", got)
	}
	if u.Chains[0].Rules != 2 {
		t.Error("Apply changed its input")
	}
}

func TestDefaultParses(t *testing.T) {
	if len(Default().entries) == 0 {
		t.Fatal("built-in allowlist is empty")
	}
}

// TestApplyWorst: what the platform list takes away keeps its level (an
// xt match or target: xt), for the node's readiness; an admin's entry
// keeps none, and listed first takes the rule's name but not the level of
// a rule a platform entry matches too: one written for pods ("*" matches
// the node's namespace, "") must not make the node ready (helper-104 #1).
func TestApplyWorst(t *testing.T) {
	const fw = `-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`
	u := classify.Usage{
		Chains: []classify.Chain{{Family: inspect.IP, Table: "filter", Name: "KUBE-FIREWALL", Rules: 1, XT: 1, User: true}},
		Rules:  []inspect.Rule{{Family: inspect.IP, Table: "filter", Chain: "KUBE-FIREWALL", Exprs: []inspect.Expr{{Name: "match"}}}},
	}
	text := func(inspect.Rule) string { return fw }
	platform, err := Platform()
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := Parse([]byte(`{"entries": [{"name": "mine", "namespaces": ["*"], "rule_regexp": ".* -j DROP"}]}`), "test")
	// The admin's list alone leaves the emptied chain (no entry of its
	// declaration); joined, the platform's declaration takes it (native).
	for _, tc := range []struct {
		name  string
		list  *List
		entry string
		worst string
		left  bool
	}{
		{"platform", platform, "platform-kubelet", findings.ImpactXt, false},
		{"admin", admin, "mine", "", true},
		{"admin first", Join(admin, platform), "mine", findings.ImpactXt, false},
	} {
		out, res := tc.list.Apply(u, "", text)
		if res.Worst != tc.worst || !slices.Contains(res.Entries, tc.entry) || out.Empty() == tc.left {
			t.Errorf("%s: result %+v, usage left %+v; want %s credited, worst %q, usage left %v", tc.name, res, out, tc.entry, tc.worst, tc.left)
		}
	}
}
