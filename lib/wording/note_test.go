package wording

import (
	"fmt"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

func TestNoteGolden(t *testing.T) {
	legacy := findingstest.Sample()
	legacy.Nft = findings.Nft{}
	legacy.Legacy = findings.Legacy{Tables: []string{"ip filter"}, Rules: 3}
	legacy.Examples = nil
	legacy.Truncated = true
	legacy.Allowlisted = 2

	hostile := findingstest.Sample()
	hostile.Container = "app\x1b[31m"
	hostile.Examples = []findings.Example{{Family: "ip", Table: "filter", Rule: "-A INPUT -m comment --comment \"a\nFAKE LINE\u202egnp.exe\xff\" -j DROP"}}

	istio := findingstest.Sample()
	istio.Impact, istio.Worst = findings.Impact{Xt: 3, Native: 9}, findings.ImpactXt
	istio.Examples[0].Impact, istio.Examples[1].Impact = findings.ImpactNative, findings.ImpactXt
	istio.Vendors = []findings.Vendor{
		{Name: "istio", Hint: "Istio 1.28+: set values.global.nativeNftables=true", Doc: "https://istio.io/latest/docs/setup/additional-setup/nftables/"},
		{Name: "linkerd", Hint: strings.Repeat("long hint ", 60), Doc: "https://linkerd.io/"},
	}

	cases := []struct {
		name  string
		rec   findings.Record
		owner owner.Owner
	}{
		{name: "nft", rec: findingstest.Sample()},
		{name: "xt-vendors-owner", rec: istio, owner: owner.Owner{Kind: "Deployment", Name: "cart"}},
		{name: "legacy-truncated", rec: legacy},
		{name: "hostile", rec: hostile},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Note(tc.rec, tc.owner)
			golden := filepath.Join("testdata", "note-"+tc.name+".txt")
			if os.Getenv("UPDATE_GOLDEN") == "1" {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("read golden (UPDATE_GOLDEN=1 writes it): %v", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("note (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNoteLimit(t *testing.T) {
	many := findingstest.Sample()
	many.Examples = nil
	for range 200 {
		many.Examples = append(many.Examples, findings.Example{Family: "ip", Table: "filter", Rule: "-A INPUT -s 10.0.0.0/8 -p tcp -m tcp --dport 8080 -j ACCEPT"})
	}
	huge := findingstest.Sample()
	huge.Examples = []findings.Example{{Family: "ip", Table: "filter", Rule: "-A INPUT " + strings.Repeat("é", 2000)}}
	huge.Container = strings.Repeat("ü", 300)
	tables := findingstest.Sample()
	for range 500 {
		tables.Nft.Tables = append(tables.Nft.Tables, "ip6 mangle")
	}

	cases := []struct {
		name     string
		rec      findings.Record
		contains []string
	}{
		{name: "many examples", rec: many, contains: []string{examplesHeading, "more example rules left out"}},
		{name: "one huge multibyte rule", rec: huge, contains: []string{deprecation, "(1 more example rule left out"}},
		{name: "many tables", rec: tables, contains: []string{deprecation, safetext.Ellipsis}},
		{name: "no examples", rec: func() findings.Record { r := findingstest.Sample(); r.Examples = nil; return r }(), contains: []string{"iptables-nft: 12 rules"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Note(tc.rec, owner.Owner{})
			if len(got) > NoteLimit {
				t.Errorf("note is %d bytes, limit %d", len(got), NoteLimit)
			}
			if !utf8.ValidString(got) {
				t.Errorf("note is not valid UTF-8: %q", got)
			}
			if !strings.HasPrefix(got, findings.ImpactWords(tc.rec.WorstLevel())) || !strings.Contains(got, deprecation) {
				t.Errorf("note does not start with the impact or lacks the deprecation: %q", got)
			}
			for _, c := range tc.contains {
				if !strings.Contains(got, c) {
					t.Errorf("note lacks %q:\n%s", c, got)
				}
			}
			noCutRule(t, got, tc.rec.Examples)
		})
	}
}

// noCutRule fails when a line after the examples heading is neither a whole
// example rule nor the count of those left out.
func noCutRule(t *testing.T, note string, exs []findings.Example) {
	t.Helper()
	_, after, ok := strings.Cut(note, examplesHeading+"\n")
	if !ok {
		return
	}
	whole := map[string]bool{}
	for _, ex := range exs {
		whole[ExampleLine(ex)] = true
	}
	for _, l := range strings.Split(after, "\n") {
		if !whole[l] && !strings.Contains(l, "left out: an Event note holds") {
			t.Errorf("note line is not a whole rule: %q", l)
		}
	}
}

// Breaking rules come first, whatever order the record holds them in, and
// when they do not all fit the harmless ones are left out first; no rule
// is ever cut.
func TestNoteBreakingFirst(t *testing.T) {
	rec := findingstest.Sample()
	rec.Impact, rec.Worst = findings.Impact{Legacy: 1, Xt: 2, Native: 3}, findings.ImpactLegacy
	long := strings.Repeat("-m comment --comment padding ", 6)
	rec.Examples = []findings.Example{
		{Family: "ip", Table: "nat", Impact: findings.ImpactNative, Rule: "-A PREROUTING -p tcp -j ISTIO_INBOUND " + long},
		{Family: "ip", Table: "nat", Impact: findings.ImpactNative, Rule: "-A OUTPUT -p tcp -j ISTIO_OUTPUT " + long},
		{Family: "ip", Table: "nat", Rule: "-A OUTPUT -j UNCLASSIFIED " + long},
		{Family: "ip", Table: "nat", Impact: findings.ImpactXt, Rule: "-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN " + long},
		{Family: "ip", Table: "nat", Impact: findings.ImpactXt, Rule: "-A ISTIO_OUTPUT -m owner ! --uid-owner 1337 -j RETURN " + long},
	}
	got := Note(rec, owner.Owner{})
	if len(got) > NoteLimit {
		t.Fatalf("note is %d bytes, limit %d", len(got), NoteLimit)
	}
	noCutRule(t, got, rec.Examples)
	_, after, _ := strings.Cut(got, examplesHeading+"\n")
	lines := strings.Split(after, "\n")
	var levels []string
	for _, l := range lines {
		for _, lv := range []string{"xt", "native", "unclassified"} {
			if strings.HasPrefix(l, "[ip nat, "+lv+"]") || lv == "unclassified" && strings.HasPrefix(l, "[ip nat] ") {
				levels = append(levels, lv)
			}
		}
	}
	if len(levels) < 2 || levels[0] != "xt" || levels[1] != "xt" {
		t.Errorf("breaking rules are not first: %v\n%s", levels, got)
	}
	if n := len(levels); n == len(rec.Examples) || !strings.Contains(lines[len(lines)-1], fmt.Sprintf("(%d more example rules left out", len(rec.Examples)-n)) {
		t.Errorf("%d rules shown, the count of the others is missing or wrong:\n%s", n, got)
	}
}

// TestPlainWhy: the plain words follow lib/inspect's error classes by
// their text; a renamed class must fail here, not lose its words.
func TestPlainWhy(t *testing.T) {
	for _, err := range []error{inspect.ErrLegacyBusy, inspect.ErrDeadline, inspect.ErrTooMany, inspect.ErrIncomplete} {
		n := 0
		for _, p := range plainWhy {
			if strings.Contains(err.Error(), p.class) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%q matches %d plain-word classes, want 1", err, n)
		}
	}
	for _, tc := range []struct{ err, want string }{
		{"", "Why: a size bound was reached."},
		{"list chains: EPERM", "Why: the check failed (list chains: EPERM)."},
		// lib/inspect's unexported errChanged, which wraps ErrIncomplete.
		{"dump nftables rules: nftables dump incomplete: the ruleset changed while it was read", "Why: the pod's rules changed while they were read"},
		{"list rules: inspection deadline reached", "Why: the check ran out of time (list rules: inspection deadline reached)."},
		// A chain the pod named after another class's text: its own
		// oversized rule is not blamed on the node's shared lock.
		{`dump nftables rules in netns "/run/netns/x": nftables dump incomplete: chain ip "t" "legacy x_tables busy" has 2 rules and references, the dump gave 1`,
			"Why: the kernel could not list every rule"},
		{`dump nftables rules in netns "/run/netns/x": nftables dump incomplete: chain ip "t" "a \"legacy x_tables busy\" b" has 2 rules and references, the dump gave 1`,
			"Why: the kernel could not list every rule"},
	} {
		if got := UnknownNote(findings.Record{Error: tc.err, Truncated: true}, owner.Owner{}); !strings.Contains(got, tc.want) {
			t.Errorf("error %q: note\n%s\nlacks %q", tc.err, got, tc.want)
		}
	}
}

func TestCount(t *testing.T) {
	for n, want := range map[int]string{0: "0 rules", 1: "1 rule", 2: "2 rules", 1000: "1000 rules"} {
		if got := Count(n, "rule"); got != want {
			t.Errorf("Count(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestNoteCutShort: a look that stopped early below legacy (the pod kept
// the x_tables lock busy, hiding its legacy rules) is no verdict: its
// note does not say the pod keeps loading, but that the check was cut,
// what it saw and why, the error escaped and bounded. One that saw
// legacy rules still breaks.
func TestNoteCutShort(t *testing.T) {
	rec := findingstest.Sample()
	rec.Impact, rec.Worst, rec.Truncated = findings.Impact{Native: 12}, findings.ImpactNative, true
	rec.Error = "inspect legacy: legacy x_tables busy: \x1b[2J" + strings.Repeat("x", 2000)
	got := Note(rec, owner.Owner{Kind: "Deployment", Name: "cart"})
	first, _, _ := strings.Cut(got, "\n")
	for _, want := range []string{"stopped early", "native nftables rules", "may break", "x_tables lock", "(inspect legacy: legacy x_tables busy: \\x1b[2J", "Owner: Deployment shop/cart."} {
		if !strings.Contains(first, want) {
			t.Errorf("first line lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "Keeps loading") || strings.Contains(got, "\x1b") || len(first) > 700 || !strings.Contains(got, deprecation) || !strings.Contains(got, examplesHeading) {
		t.Errorf("note says the pod keeps loading, holds an escape, or its first line (%d bytes) crowds out the rest:\n%s", len(first), got)
	}
	if len(got) > NoteLimit {
		t.Errorf("note is %d bytes, limit %d", len(got), NoteLimit)
	}
	rec.Worst = findings.ImpactXt
	if got := Note(rec, owner.Owner{}); !strings.Contains(got, "xt matches") || !strings.Contains(got, "stopped early") {
		t.Errorf("xt look cut short:\n%s", got)
	}
	rec.Worst = findings.ImpactLegacy
	if got := Note(rec, owner.Owner{}); !strings.HasPrefix(got, findings.ImpactWords(findings.ImpactLegacy)+".") {
		t.Errorf("legacy look cut short:\n%s", got)
	}
}
