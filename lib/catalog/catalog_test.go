package catalog

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// TestBuiltinTable: the built-in table names exactly the vendors
// metrics may label (findings.VendorNames), and every hint fits the
// record's bounds and links a doc.
func TestBuiltinTable(t *testing.T) {
	tb := Builtin()
	got, want := tb.Names(), slices.Clone(findings.VendorNames)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("built-in names %v, findings.VendorNames %v", got, want)
	}
	for _, e := range tb.entries {
		if len(e.Hint) > 320 || len(e.Doc) > 256 || !strings.HasPrefix(e.Doc, "https://") || e.Title == "" {
			t.Errorf("entry %q: hint %d bytes, doc %q, title %q", e.Name, len(e.Hint), e.Doc, e.Title)
		}
	}
}

func names(vs []findings.Vendor) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Name)
	}
	return out
}

func TestMatch(t *testing.T) {
	tb := Builtin()
	tests := []struct {
		name   string
		chains []string
		rules  []RuleText
		want   []string
	}{
		{name: "nothing", want: nil},
		{name: "generic rules", chains: []string{"INPUT", "OUTPUT", "MYAPP"}, rules: []RuleText{
			{Chain: "INPUT", Text: "-A INPUT -p tcp --dport 8421 -j DROP"},
			{Chain: "OUTPUT", Text: "-A OUTPUT -m owner --uid-owner 13370 -j RETURN"},
		}},
		{name: "istio sidecar by chain", chains: []string{"PREROUTING", "ISTIO_INBOUND", "ISTIO_OUTPUT"}, want: []string{"istio"}},
		{name: "istio sidecar by uid alone", rules: []RuleText{{Chain: "OUTPUT", Text: "-A OUTPUT -m owner --uid-owner 1337 -j RETURN"}}, want: []string{"istio"}},
		{name: "ambient takes the shared ISTIO_OUTPUT", chains: []string{"ISTIO_PRERT", "ISTIO_OUTPUT"}, want: []string{"istio-ambient"}},
		{name: "ambient by connmark", chains: []string{"ISTIO_OUTPUT"}, rules: []RuleText{
			{Chain: "ISTIO_OUTPUT", Text: "-A ISTIO_OUTPUT -m connmark --mark 0x111/0xfff -j ACCEPT"},
		}, want: []string{"istio-ambient"}},
		{name: "mark value is a whole word", chains: []string{"ISTIO_OUTPUT"}, rules: []RuleText{
			{Chain: "ISTIO_OUTPUT", Text: "-A ISTIO_OUTPUT -m mark --mark 0x1110 -j ACCEPT"},
		}, want: []string{"istio"}},
		{name: "App Mesh's Envoy uid is not istio", chains: []string{"APPMESH_EGRESS"}, rules: []RuleText{
			{Chain: "APPMESH_EGRESS", Text: "-A APPMESH_EGRESS -m owner --uid-owner 1337 -j RETURN"},
		}, want: []string{"appmesh"}},
		{name: "azure monitor agent", rules: []RuleText{
			{Chain: "OUTPUT", Text: "-A OUTPUT -d 169.254.169.254 -p tcp --dport 80 -j DNAT --to-destination 127.0.0.1:8421"},
		}, want: []string{"azure-monitor-agent"}},
		{name: "metadata DNAT elsewhere is not the agent", rules: []RuleText{
			{Chain: "OUTPUT", Text: "-A OUTPUT -d 169.254.169.254 -p tcp --dport 80 -j DNAT --to-destination 127.0.0.1:8080"},
		}},
		// A comment is the pod's text: one shaped like another vendor's
		// rule made the pod that vendor, its hint and expectations
		// (helper-101 #3). Escaped quotes do not end the comment.
		{name: "a comment is not a rule", rules: []RuleText{
			{Chain: "OUTPUT", Text: `-A OUTPUT -p tcp -m comment --comment "x -j DNAT -d 169.254.169.254 --dport 80 --to-destination 127.0.0.1:8421 y" -j REDIRECT --to-ports 1`},
			{Chain: "OUTPUT", Text: `-A OUTPUT -m comment --comment "a\" -m owner --uid-owner 1337 \"" -j RETURN`},
		}},
		{name: "outside the comment still counts", rules: []RuleText{
			{Chain: "OUTPUT", Text: `-A OUTPUT -m comment --comment "\\" -m owner --uid-owner 1337 -j RETURN`},
		}, want: []string{"istio"}},
		{name: "docker exact and prefixed", chains: []string{"DOCKER-ISOLATION-STAGE-1"}, want: []string{"docker"}},
		{name: "DOCKERX is not docker", chains: []string{"DOCKERX"}},
		{name: "chaos mesh network chaos", chains: []string{"CHAOS-INPUT", "CHAOS-OUTPUT", "INPUT"}, want: []string{"chaos-mesh"}},
		{name: "CHAOS-INPUTX is not chaos mesh", chains: []string{"CHAOS-INPUTX"}},
		{name: "two vendors in table order", chains: []string{"PROXY_INIT_OUTPUT", "DOCKER", "KUBE-SERVICES"}, want: []string{"linkerd", "docker", "kube-proxy"}},
		{name: "capped", chains: []string{"ISTIO_INBOUND", "PROXY_INIT_OUTPUT", "CONSUL_DNS_REDIRECT", "KUMA_MESH_INBOUND", "OSM_PROXY_INBOUND", "DOCKER"}, want: []string{"istio", "linkerd", "consul", "kuma"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tb.Match(tc.chains, tc.rules)
			if !slices.Equal(names(got), tc.want) {
				t.Errorf("Match = %v, want %v", names(got), tc.want)
			}
			for _, v := range got {
				if v.Hint == "" || v.Doc == "" {
					t.Errorf("%s without hint or doc", v.Name)
				}
			}
		})
	}
	var none *Table
	if got := none.Match([]string{"DOCKER"}, nil); got != nil {
		t.Errorf("nil table matched %v", got)
	}
}

func write(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "vendors.json")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLoad: the admin's entries replace built-in ones of their name and
// add new ones; a missing file changes nothing; a broken file keeps the
// built-in table and says why.
func TestLoad(t *testing.T) {
	tb, err := Load(filepath.Join(t.TempDir(), "none.json"))
	if err != nil || len(tb.Names()) != len(findings.VendorNames) {
		t.Fatalf("missing file: %v, %d entries", err, len(tb.Names()))
	}
	tb, err = Load(write(t, `{"vendors": [
		{"name": "acme-agent", "hint": "acme 4.2+: set firewall=nft", "doc": "https://acme.example/nft", "chains": ["ACME_*"]},
		{"name": "docker", "hint": "our own docker hint", "doc": "https://wiki.example/docker", "chains": ["DOCKER"]}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	got := tb.Match([]string{"ACME_IN", "DOCKER", "DOCKER-USER"}, nil)
	if !slices.Equal(names(got), []string{"docker", "acme-agent"}) || got[0].Hint != "our own docker hint" {
		t.Errorf("merged table matched %+v", got)
	}
	if labels := findings.VendorLabels(got); !slices.Equal(labels, []string{"docker", "other"}) {
		t.Errorf("metrics labels %v", labels)
	}
	for _, bad := range []string{
		`{"vendors": [{"name": "x", "hint": "h"}]}`,
		`{"vendors": [{"name": "x", "chains": ["X"]}]}`,
		`{"vendors": [{"name": "x", "hint": "h", "rules": [{}]}]}`,
		`{"vendors": [{"name": "x", "hint": "h", "chains": ["X"], "colour": "red"}]}`,
		`{"vendors": [`,
		`{"vendors": [` + strings.Repeat(`{"name": "x", "hint": "h", "chains": ["X"]},`, MaxEntries) + `{"name": "x", "hint": "h", "chains": ["X"]}]}`,
	} {
		tb, err := Load(write(t, bad))
		if err == nil || len(tb.Names()) != len(findings.VendorNames) {
			t.Errorf("Load(%.60q) = %d entries, %v; want the built-in table and an error", bad, len(tb.Names()), err)
		}
	}
	var many []string
	for i := 0; i < MaxEntries; i++ {
		many = append(many, `{"name": "v`+strings.Repeat("x", i)+`", "hint": "h", "chains": ["X"]}`)
	}
	tb, err = Load(write(t, `{"vendors": [`+strings.Join(many, ",")+`]}`))
	if err == nil || len(tb.Names()) != MaxEntries {
		t.Errorf("over the cap with the built-in ones: %d entries, %v", len(tb.Names()), err)
	}
}

// TestDocTable: docs/vendors.md shows every built-in entry with its
// current hint, so the admin's page cannot drift from the table.
func TestDocTable(t *testing.T) {
	doc, err := os.ReadFile("../../docs/vendors.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range Builtin().entries {
		if !strings.Contains(string(doc), "| `"+e.Name+"` | "+e.Title+" |") || !strings.Contains(string(doc), e.Hint) {
			t.Errorf("docs/vendors.md lacks the row of %q with its hint", e.Name)
		}
		if !strings.Contains(string(doc), "| `"+e.Name+"` | "+e.NodeHint+" |") {
			t.Errorf("docs/vendors.md lacks the node hint of %q", e.Name)
		}
	}
}

// podWords are what a hint about a pod's namespace says and a node's must
// not (issue 25: "kube-proxy chains in a pod mean a cluster inside the
// pod" under Node/NAME).
var podWords = []string{"in a pod", "inside the pod", "in the pod", "in its pod", "target pod", "the pod is", "in-pod"}

// usageOf gives chains and rules that match e alone: its first chain
// pattern, or a rule made from its first rule pattern.
func usageOf(e Entry) ([]string, []RuleText) {
	if len(e.Chains) > 0 {
		return []string{strings.Replace(e.Chains[0], "*", "X", 1)}, nil
	}
	p := e.Rules[0]
	chain := strings.Replace(p.Chain, "*", "X", 1)
	if chain == "" {
		chain = "OUTPUT"
	}
	text := "-A " + chain
	for _, o := range [][2]string{{"-d", p.Dst}, {"--dport", p.Port}, {"-m owner --uid-owner", p.UID}, {"-m mark --mark", p.Mark}, {"-j", p.Target}, {"--to-destination", p.To}} {
		if o[1] != "" {
			text += " " + o[0] + " " + o[1]
		}
	}
	return []string{chain}, []RuleText{{Chain: chain, Text: text}}
}

// TestNodeWording: every built-in entry has a node hint, about the node
// and without the pod's wording; a node finding's vendors get it, from
// the table in force (ForNode) or, for a record written before, from the
// built-in one (NodeWords); a pod's keep the pod hint; an admin's entry
// may word both, and one without a node hint keeps its hint.
func TestNodeWording(t *testing.T) {
	tb := Builtin()
	for _, e := range tb.entries {
		low := strings.ToLower(e.NodeHint)
		if e.NodeHint == "" || e.NodeHint == e.Hint || len(e.NodeHint) > 320 || !strings.Contains(low, "node") {
			t.Errorf("%s: node hint %q (%d bytes)", e.Name, e.NodeHint, len(e.NodeHint))
		}
		for _, w := range podWords {
			if strings.Contains(low, w) {
				t.Errorf("%s: node hint says %q: %s", e.Name, w, e.NodeHint)
			}
		}
		chains, rules := usageOf(e)
		pod := tb.Match(chains, rules)
		if i := slices.Index(names(pod), e.Name); i < 0 || pod[i].Hint != e.Hint {
			t.Errorf("%s: usage %v %v matched %+v", e.Name, chains, rules, pod)
			continue
		}
		for how, node := range map[string][]findings.Vendor{"ForNode": tb.ForNode(pod), "NodeWords": NodeWords(pod)} {
			i := slices.Index(names(node), e.Name)
			if i < 0 || node[i].Hint != e.NodeHint || node[i].Doc != e.Doc {
				t.Errorf("%s: %s gave %+v, want the node hint", e.Name, how, node)
			}
		}
		if i := slices.Index(names(pod), e.Name); pod[i].Hint != e.Hint {
			t.Errorf("%s: ForNode changed its argument: %+v", e.Name, pod)
		}
	}
	// A hint no built-in entry wrote (an admin's since replaced, or cut)
	// is kept; so is an unknown vendor's.
	kept := []findings.Vendor{{Name: "kube-proxy", Hint: "our own words"}, {Name: "acme", Hint: "acme hint"}}
	if got := NodeWords(kept); !slices.Equal(got, kept) {
		t.Errorf("NodeWords(%+v) = %+v", kept, got)
	}
	var none *Table
	if got := none.ForNode(kept); !slices.Equal(got, kept) {
		t.Errorf("nil table: %+v", got)
	}
	admin, err := Load(write(t, `{"vendors": [
		{"name": "acme", "hint": "acme in a pod", "nodeHint": "acme on the node", "chains": ["ACME_*"]},
		{"name": "plain", "hint": "plain words", "chains": ["PLAIN"]}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	got := admin.ForNode(admin.Match([]string{"ACME_IN", "PLAIN"}, nil))
	if len(got) != 2 || got[0].Hint != "acme on the node" || got[1].Hint != "plain words" {
		t.Errorf("admin entries for a node: %+v", got)
	}
}

// TestHintsDated: every built-in hint says when it was last checked (a
// day, not in the future) and against which sources (https links): a
// hint ages as vendors release, and the reader must see how old it is.
func TestHintsDated(t *testing.T) {
	for _, e := range Builtin().entries {
		day, err := time.Parse(time.DateOnly, e.Checked)
		if err != nil || day.After(time.Now()) {
			t.Errorf("entry %q: checked %q is not a past day (%v)", e.Name, e.Checked, err)
		}
		if len(e.Sources) == 0 {
			t.Errorf("entry %q: no sources", e.Name)
		}
		for _, s := range e.Sources {
			if !strings.HasPrefix(s, "https://") || len(s) > 256 {
				t.Errorf("entry %q: source %q is not an https link", e.Name, s)
			}
		}
	}
	// An admin's entry may leave both out; a checked day that is not one
	// is refused.
	dir := t.TempDir()
	for body, ok := range map[string]bool{
		`{"vendors":[{"name":"acme","hint":"h","chains":["ACME"]}]}`:                                   true,
		`{"vendors":[{"name":"acme","hint":"h","chains":["ACME"],"checked":"2026-11-27"}]}`:            true,
		`{"vendors":[{"name":"acme","hint":"h","chains":["ACME"],"checked":"last week"}]}`:             false,
		`{"vendors":[{"name":"acme","hint":"h","chains":["ACME"],"sources":["javascript:alert(1)"]}]}`: false,
	} {
		path := filepath.Join(dir, "v.json")
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(path); (err == nil) != ok {
			t.Errorf("%s: load error %v, want ok=%v", body, err, ok)
		}
	}
}
