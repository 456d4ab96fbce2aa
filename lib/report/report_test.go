package report

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadExpectationsRefusesMistakes(t *testing.T) {
	cases := map[string]string{
		"unknown field": "expected:\n- namespace: a\n  reson: typo\n",
		"no reason":     "expected:\n- namespace: a\n",
		"no matcher":    "expected:\n- reason: everything\n",
		"bad glob":      "expected:\n- namespace: '[a'\n  reason: r\n",
		"bad regexp":    "expected:\n- ruleRegexp: '(('\n  reason: r\n",
		"not yaml":      "expected: [",
	}
	for name, data := range cases {
		if _, err := LoadExpectations(writeFile(t, "e.yaml", data)); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	exps, err := LoadExpectations(writeFile(t, "e.yaml", "expected:\n- namespace: 'e2e-*'\n  reason: the e2e suite's own pods\n"))
	if err != nil || len(exps) != 1 {
		t.Fatalf("valid file: %v, %d entries", err, len(exps))
	}
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func item(ns, kind, name, pod, worst string, vendors []string, rules ...string) Item {
	it := Item{Namespace: ns, Owner: owner.Owner{Kind: kind, Name: name}, Pod: pod, Node: "node-a", Worst: worst}
	for _, v := range vendors {
		it.Vendors = append(it.Vendors, findings.Vendor{Name: v, Hint: "hint of " + v})
	}
	for _, r := range rules {
		it.Examples = append(it.Examples, findings.Example{Family: "ip", Table: "nat", Rule: r})
	}
	return it
}

// Namespace, owner and vendor choose findings: an expectation without
// rule or level covers all of the findings it chooses and nothing else.
func TestExpectationsChooseExactlyWhatTheyName(t *testing.T) {
	items := []Item{
		item("e2e-net", "Deployment", "probe", "probe-1", findings.ImpactXt, nil, "-A OUTPUT -j DROP"),
		item("shop", "Deployment", "cart", "cart-1", findings.ImpactXt, []string{"istio"}, "-A OUTPUT -p tcp -j ISTIO_OUTPUT"),
		item("shop", "StatefulSet", "db", "db-0", findings.ImpactLegacy, nil),
		item("shop", "DaemonSet", "agent", "agent-x", findings.ImpactNative, nil, "-A INPUT -s 10.0.0.0/8 -j ACCEPT"),
		item("ops", "CronJob", "backup", "backup-1", findings.ImpactNative, nil, "-A OUTPUT -j ACCEPT"),
	}
	file := `expected:
- namespace: "e2e-*"
  reason: e2e suite
- vendor: istio
  namespace: shop
  reason: mesh migrates in Q3
- owner: StatefulSet/d*
  reason: db firewall
- owner: agent
  reason: node agent
- owner: Deployment/backup
  reason: "never matches: a CronJob"
`
	exps, err := LoadExpectations(writeFile(t, "e.yaml", file))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range items {
		reasons, _ := Cover(exps, it, it.Worst)
		got = append(got, it.Owner.Name+"="+strings.Join(reasons, ";"))
	}
	want := []string{"probe=e2e suite", "cart=mesh migrates in Q3", "db=db firewall", "agent=node agent", "backup="}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("expected (-want +got):\n%s", d)
	}
	// Vendor "unknown" names usage with no vendor only.
	u := []Expectation{{Vendor: "unknown", Reason: "r"}}
	if u[0].compile() != nil || u[0].Match(items[1]) || !u[0].Match(items[0]) {
		t.Error("vendor unknown matched wrongly")
	}
	for _, bad := range []string{"expected:\n- level: breaking\n  reason: r\n", "expected:\n- level: XT\n  reason: r\n"} {
		if _, err := LoadExpectations(writeFile(t, "e.yaml", bad)); err == nil {
			t.Errorf("level not a level loaded: %q", bad)
		}
	}
}

// shop is the demo's workload: a masquerade (xt) and two port rules
// (native), all three shown.
func shop() Item {
	it := Item{Namespace: "demo", Owner: owner.Owner{Kind: "Deployment", Name: "shop"}, Pod: "shop-1", Worst: findings.ImpactXt,
		State: findings.StatePresent, Impact: findings.Impact{Xt: 1, Native: 2}}
	for _, ex := range []findings.Example{
		{Rule: "-A POSTROUTING -o eth0 -j MASQUERADE", Impact: findings.ImpactXt},
		{Rule: "-A INPUT -p tcp --dport 8080 -j ACCEPT", Impact: findings.ImpactNative},
		{Rule: "-A INPUT -p tcp --dport 9000:9100 -j DROP", Impact: findings.ImpactNative},
	} {
		ex.Family, ex.Table = "ip", "filter"
		it.Examples = append(it.Examples, ex)
	}
	return it
}

// An expectation covers the usage it matches: rules cover a level only
// when the finding shows all of that level's rules and every one is
// matched; a level named covers all of it; an expectation naming
// neither covers everything.
func TestCover(t *testing.T) {
	cut := shop()
	cut.Impact.Xt = 3 // two xt rules not shown among the examples
	legacy := shop()
	legacy.Worst, legacy.Impact.Legacy = findings.ImpactLegacy, 2
	legacyShown := shop()
	legacyShown.Worst, legacyShown.Impact.Legacy = findings.ImpactLegacy, 1
	legacyShown.Examples = append([]findings.Example{{Family: "ip", Table: "filter", Chain: "OUTPUT",
		Rule: "-A OUTPUT -d 169.254.169.254 -p tcp --dport 80 -j DROP", Impact: findings.ImpactLegacy}}, legacyShown.Examples...)
	metadata := Expectation{Owner: "shop", Rule: "-d 169.254.169.254", Reason: "metadata"}
	unclassified := shop()
	unclassified.Worst, unclassified.Impact = "", findings.Impact{}
	for i := range unclassified.Examples {
		unclassified.Examples[i].Impact = ""
	}
	unknown := shop()
	unknown.State = findings.StateUnknown
	port := Expectation{Owner: "Deployment/shop", Rule: "--dport 8080", Reason: "port"}
	ports := Expectation{Owner: "shop", RuleRegexp: "--dport [0-9]+", Reason: "ports"}
	masq := Expectation{Owner: "Deployment/shop", Rule: "-j MASQUERADE", Reason: "masq"}
	xt := Expectation{Owner: "Deployment/shop", Level: findings.ImpactXt, Reason: "xt"}
	native := Expectation{Namespace: "demo", Level: findings.ImpactNative, Reason: "native"}
	all := Expectation{Owner: "Deployment/shop", Reason: "all"}
	other := Expectation{Owner: "Deployment/web", Reason: "web"}
	xtRule := Expectation{Owner: "Deployment/shop", Level: findings.ImpactXt, Rule: "-j MASQUERADE", Reason: "xt masq"}
	nativeRule := Expectation{Owner: "Deployment/shop", Level: findings.ImpactNative, Rule: "-j MASQUERADE", Reason: "native masq"}
	for _, tc := range []struct {
		name  string
		it    Item
		level string
		exps  []Expectation
		want  []string // reasons; nil when not covered
	}{
		{"a rule matching one native rule leaves the xt one", shop(), findings.ImpactXt, []Expectation{port}, nil},
		{"nor covers its own level, one rule of two", shop(), findings.ImpactNative, []Expectation{port}, nil},
		{"a rule matching every rule of the level", shop(), findings.ImpactNative, []Expectation{ports}, []string{"ports"}},
		{"two rules together", shop(), findings.ImpactNative, []Expectation{port, masq, {Owner: "shop", Rule: "9000:9100", Reason: "range"}}, []string{"port", "range"}},
		{"the only xt rule, shown", shop(), findings.ImpactXt, []Expectation{port, masq}, []string{"masq"}},
		{"examples cut: the rule cannot see the level", cut, findings.ImpactXt, []Expectation{masq}, nil},
		{"examples cut: a level named covers it", cut, findings.ImpactXt, []Expectation{masq, xt}, []string{"xt"}},
		{"a level named covers only that level", shop(), findings.ImpactNative, []Expectation{xt}, nil},
		{"level and rule narrow together", shop(), findings.ImpactXt, []Expectation{xtRule}, []string{"xt masq"}},
		{"a rule at another level than named", shop(), findings.ImpactXt, []Expectation{nativeRule}, nil},
		{"no rule, no level: everything", shop(), findings.ImpactXt, []Expectation{port, all}, []string{"all"}},
		{"another workload", shop(), findings.ImpactXt, []Expectation{other}, nil},
		{"legacy rules not shown", legacy, findings.ImpactLegacy, []Expectation{masq, ports}, nil},
		{"the only legacy rule, shown decoded", legacyShown, findings.ImpactLegacy, []Expectation{masq, metadata}, []string{"metadata"}},
		{"legacy named", legacy, findings.ImpactLegacy, []Expectation{{Owner: "shop", Level: findings.ImpactLegacy, Reason: "legacy"}}, []string{"legacy"}},
		{"unclassified: rules cannot see its levels", unclassified, "", []Expectation{masq, ports}, nil},
		{"unclassified: no level names it", unclassified, "", []Expectation{xt, native}, nil},
		{"unclassified: the whole workload", unclassified, "", []Expectation{all}, []string{"all"}},
		{"an unknown look holds nothing to cover", unknown, findings.ImpactXt, []Expectation{all}, nil},
	} {
		got, ok := Cover(tc.exps, tc.it, tc.level)
		if ok != (tc.want != nil) || !slices.Equal(got, tc.want) {
			t.Errorf("%s: covered %v %q, want %q", tc.name, ok, got, tc.want)
		}
	}
}

// A workload is expected when its breaking usage is covered, or its native
// usage when nothing breaks; under --fail-on breaks an uncovered breaking
// rule fails it whatever else is covered.
func TestExpectedWorkload(t *testing.T) {
	withLegacy := shop()
	withLegacy.Worst, withLegacy.Impact.Legacy = findings.ImpactLegacy, 1
	nativeOnly := shop()
	nativeOnly.Pod, nativeOnly.Worst, nativeOnly.Impact.Xt, nativeOnly.Examples = "shop-2", findings.ImpactNative, 0, nativeOnly.Examples[1:]
	unclassified := shop()
	unclassified.Pod, unclassified.Worst, unclassified.Impact = "shop-3", "", findings.Impact{}
	port := Expectation{Owner: "Deployment/shop", Rule: "--dport 8080", Reason: "port"}
	masq := Expectation{Owner: "Deployment/shop", Rule: "-j MASQUERADE", Reason: "masq"}
	ports := Expectation{Owner: "shop", RuleRegexp: "--dport [0-9]+", Reason: "ports"}
	legacy := Expectation{Owner: "shop", Level: findings.ImpactLegacy, Reason: "legacy"}
	all := Expectation{Namespace: "demo", Reason: "all"}
	for _, tc := range []struct {
		name        string
		items       []Item
		exps        []Expectation
		expected    bool
		failsBreaks bool
	}{
		// make demo's old example: it used to pass shop.
		{"the port rule alone", []Item{shop()}, []Expectation{port}, false, true},
		{"the masquerade: native beside it is not judged", []Item{shop()}, []Expectation{masq}, true, false},
		{"legacy covered, the xt masquerade not", []Item{withLegacy}, []Expectation{legacy}, false, true},
		{"legacy and the masquerade", []Item{withLegacy}, []Expectation{legacy, masq}, true, false},
		{"a native-only pod beside a breaking one", []Item{shop(), nativeOnly}, []Expectation{masq}, true, false},
		{"native only: its native usage", []Item{nativeOnly}, []Expectation{port}, false, false},
		{"native only, all ports", []Item{nativeOnly}, []Expectation{ports}, true, false},
		{"an unclassified pod needs all of it", []Item{shop(), unclassified}, []Expectation{masq}, false, true},
		{"the whole workload", []Item{shop(), unclassified, withLegacy}, []Expectation{all}, true, false},
	} {
		gs := GroupItems(tc.items, tc.exps)
		if len(gs) != 1 {
			t.Fatalf("%s: %d groups", tc.name, len(gs))
		}
		Judge(gs, FailBreaks)
		if gs[0].Expected != tc.expected || gs[0].Fails != tc.failsBreaks || tc.expected == (len(gs[0].Reasons) == 0) {
			t.Errorf("%s: expected %v (%q), fails --fail-on breaks %v; want %v, %v", tc.name, gs[0].Expected, gs[0].Reasons, gs[0].Fails, tc.expected, tc.failsBreaks)
		}
	}
}

func TestGroupAndJudge(t *testing.T) {
	items := []Item{
		item("shop", "Deployment", "web", "web-1", findings.ImpactNative, []string{"istio"}, "-A native"),
		item("shop", "Deployment", "web", "web-2", findings.ImpactXt, []string{"istio", "linkerd"}, "-A native2", "-A xt"),
		item("shop", "StatefulSet", "db", "db-0", findings.ImpactNative, nil, "-A db"),
		item("ops", "Pod", "debug", "debug", "", nil),
	}
	items[1].Node = "node-b"
	items[0].Impact, items[1].Impact = findings.Impact{Native: 2}, findings.Impact{Xt: 2, Native: 3}
	items[1].Examples[0].Impact, items[1].Examples[1].Impact = findings.ImpactNative, findings.ImpactXt
	exps := []Expectation{{Owner: "Deployment/web", Reason: "mesh"}}
	gs := GroupItems(items, exps)
	if len(gs) != 3 {
		t.Fatalf("%d groups, want 3: %+v", len(gs), gs)
	}
	web := gs[0]
	if web.Owner.String() != "Deployment/web" || web.Worst != findings.ImpactXt || web.Example != "-A xt" ||
		strings.Join(web.Pods, ",") != "web-1,web-2" || strings.Join(web.Nodes, ",") != "node-a,node-b" ||
		web.VendorNames() != "istio,linkerd" || !web.Expected || web.Findings != 2 {
		t.Errorf("web group %+v", web)
	}
	var rules []string
	for _, ex := range web.Examples {
		rules = append(rules, ex.Rule)
	}
	if strings.Join(rules, ",") != "-A xt,-A native2,-A native" || web.Impact != (findings.Impact{Xt: 2, Native: 5}) {
		t.Errorf("web examples %v (want breaking first, unclassified last), impact %+v (want summed)", rules, web.Impact)
	}
	if gs[1].Owner.Name != "db" || gs[2].Owner.Name != "debug" || gs[2].Worst != "" {
		t.Errorf("order: worst first, unclassified last: %v, %v", gs[1].Owner, gs[2].Owner)
	}
	for mode, want := range map[string][]bool{
		FailNever:      {false, false, false},
		FailUnexpected: {false, true, true},
		FailBreaks:     {false, false, true}, // db is native; debug is unclassified
	} {
		any := Judge(gs, mode)
		var got []bool
		for _, g := range gs {
			got = append(got, g.Fails)
		}
		if d := cmp.Diff(want, got); d != "" || any != slicesAny(want) {
			t.Errorf("%s: fails (-want +got):\n%s", mode, d)
		}
	}
}

func slicesAny(b []bool) bool {
	for _, v := range b {
		if v {
			return true
		}
	}
	return false
}

// Rotated generations are read oldest first; a malformed or over-long line
// is counted and skipped, the lines after it are read.
func TestReadFindingsGenerations(t *testing.T) {
	dir := t.TempDir()
	l := findings.Log{Path: filepath.Join(dir, "findings.jsonl"), MaxBytes: 1500, Generations: 3}
	for i := range 6 {
		rec := findings.Record{Pod: findings.Pod{Namespace: "shop", Name: "p" + string(rune('a'+i)), UID: "u"}, Fingerprint: "f",
			Nft: findings.Nft{Rules: 1}}
		if err := l.Append(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.OpenFile(l.Path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("not json\n" + strings.Repeat("x", 2*maxLine) + "\n")
	line, _ := findings.Encode(findings.Record{Pod: findings.Pod{Namespace: "shop", Name: "last", UID: "u"}, Fingerprint: "f", Legacy: findings.Legacy{Rules: 2}})
	f.Write(line)
	line, _ = findings.Encode(findings.Record{Pod: findings.Pod{Namespace: "shop", Name: "err", UID: "u"}, Fingerprint: "f", Error: "deadline"})
	f.Write(line)
	f.Close()

	files, err := FindingsFiles([]string{l.Path, l.Path})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 || files[len(files)-1] != l.Path || files[0] != l.Path+"."+string(rune('0'+len(files)-1)) {
		t.Fatalf("files %v: want the generations oldest first, the file last, once each", files)
	}
	var sk Skipped
	var pods []string
	for _, p := range files {
		its, err := ReadFindings(p, &sk)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range its {
			pods = append(pods, it.Pod)
		}
	}
	// The error-only line (no state: written before states) is unknown.
	if strings.Join(pods, ",") != "pa,pb,pc,pd,pe,pf,last,err" || sk.Malformed != 2 {
		t.Errorf("pods %v, skipped %+v", pods, sk)
	}
}

// A saved events file in either API's shape: our pod Events count, Node
// summaries and other controllers' Events do not; a hostile summary is
// counted as malformed and the pod still reported.
func TestReadEventsShapes(t *testing.T) {
	sum := events.Summary{Node: "node-b", Owner: owner.Owner{Kind: "Deployment", Name: "web"}, Worst: findings.ImpactXt,
		Vendors: []findings.Vendor{{Name: "istio"}}, Examples: []findings.Example{{Rule: "-A X"}}}
	ann := map[string]string{events.SummaryAnnotation: sum.JSON()}
	core := map[string]any{"kind": "EventList", "apiVersion": "v1", "items": []any{
		map[string]any{"metadata": map[string]any{"namespace": "shop", "annotations": ann}, "reason": events.Reason, "reportingComponent": events.Controller, "reportingInstance": "node-b",
			"involvedObject": map[string]any{"kind": "Pod", "namespace": "shop", "name": "web-1", "uid": "u1"}},
		map[string]any{"metadata": map[string]any{"namespace": "default", "annotations": ann}, "reason": events.Reason, "reportingComponent": events.Controller,
			"involvedObject": map[string]any{"kind": "Node", "name": "node-b"}},
		map[string]any{"metadata": map[string]any{"namespace": "shop"}, "reason": events.Reason, "reportingComponent": "someone-else",
			"involvedObject": map[string]any{"kind": "Pod", "namespace": "shop", "name": "forged"}},
		map[string]any{"metadata": map[string]any{"namespace": "shop", "annotations": map[string]string{events.SummaryAnnotation: "{bad"}}, "reason": events.Reason, "reportingComponent": events.Controller, "reportingInstance": "node-a",
			"involvedObject": map[string]any{"kind": "Pod", "namespace": "shop", "name": "old-1", "uid": "u2"}},
	}}
	v1 := map[string]any{"kind": "EventList", "apiVersion": "events.k8s.io/v1", "items": []any{
		map[string]any{"metadata": map[string]any{"namespace": "shop", "annotations": ann}, "reason": events.Reason, "reportingController": events.Controller, "reportingInstance": "node-b",
			"regarding": map[string]any{"kind": "Pod", "namespace": "shop", "name": "web-1", "uid": "u1"}},
	}}
	for name, doc := range map[string]any{"core": core, "events.k8s.io": v1} {
		b, _ := json.Marshal(doc)
		var sk Skipped
		its, err := ReadEvents(bytes.NewReader(b), name, &sk)
		if err != nil {
			t.Fatal(err)
		}
		if len(its) == 0 || its[0].Owner.String() != "Deployment/web" || its[0].Pod != "web-1" || its[0].Worst != findings.ImpactXt || its[0].Node != "node-b" {
			t.Fatalf("%s: items %+v", name, its)
		}
		if name == "core" && (len(its) != 2 || its[1].Owner.String() != "Pod/old-1" || sk.Malformed != 1) {
			t.Errorf("%s: items %+v, skipped %+v", name, its, sk)
		}
	}
}

// Every writer keeps a hostile cell one cell: no new rows, columns, markup.
func TestWritersEscape(t *testing.T) {
	evil := "a|b\n| FAKE | ROW |\t<x>&`c`"
	gs := GroupItems([]Item{item("shop", "Pod", evil, evil, findings.ImpactLegacy, []string{evil}, evil)}, nil)
	r := Report{Groups: gs, FailOn: FailUnexpected, Failing: Judge(gs, FailUnexpected)}
	for _, f := range Formats {
		var b bytes.Buffer
		if err := Write(&b, r, f); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		switch f {
		case "text":
			// One header, one row; the rest is indented detail, the blank
			// line and the summary, whose lines start with a level or a count.
			rows := 0
			for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
				if l != "" && l[0] != ' ' && !strings.HasPrefix(l, "1 workloads") && !strings.Contains(l, ": ") {
					rows++
				}
				if len([]rune(l)) > TextWidth || strings.HasPrefix(strings.TrimSpace(l), "| FAKE") || strings.ContainsAny(l, "\t") {
					t.Errorf("text line forged or too wide: %q", l)
				}
			}
			if rows != 2 {
				t.Errorf("text rows forged (%d header and rows):\n%s", rows, out)
			}
		case "markdown":
			row := strings.Split(out, "\n")[2]
			if n := strings.Count(row, "|") - strings.Count(row, "\\|"); n != len(header)+1 || strings.Contains(out, "<x>") {
				t.Errorf("markdown cells forged:\n%s", out)
			}
		case "json":
			var back Report
			if json.Unmarshal(b.Bytes(), &back) != nil || back.Groups[0].Owner.Name != evil {
				t.Errorf("json does not round-trip:\n%s", out)
			}
		case "junit":
			if strings.Contains(out, "<x>") || !strings.Contains(out, "<failure") {
				t.Errorf("junit:\n%s", out)
			}
		case "html":
			if strings.Contains(out, "<x>") || strings.Count(out, "<tr class=\"workload\"") != 1 {
				t.Errorf("html cells forged:\n%s", out)
			}
		}
	}
}

// The text table fits TextWidth columns however long the names are: the
// widest columns give way, the counts, hint and example rules (breaking
// first) go on their own lines, wrapped, never cut.
func TestTextGolden(t *testing.T) {
	mesh := item("istio-system-with-a-very-long-namespace-name", "Deployment", "productpage-v1-with-a-long-name", "productpage-v1-7d9f-abcde",
		findings.ImpactXt, []string{"istio"}, "-A PREROUTING -p tcp -j ISTIO_INBOUND", "-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN")
	mesh.Vendors[0].Hint = "Istio 1.27+: install with --set values.global.nativeNftables=true; the sidecar's redirection is then native nftables (sidecar support since 1.27.0, ambient since 1.28.0)."
	mesh.Vendors[0].Doc = "https://istio.io/latest/news/releases/1.27.x/announcing-1.27/change-notes/"
	mesh.Examples[0].Impact, mesh.Examples[1].Impact = findings.ImpactNative, findings.ImpactXt
	mesh.Impact = findings.Impact{Xt: 5, Native: 10}
	mesh2 := mesh
	mesh2.Pod, mesh2.Node = "productpage-v1-7d9f-fghij", "worker-node-b.example.com"
	mesh.Node = "worker-node-a.example.com"
	db := item("shop", "StatefulSet", "db", "db-0", findings.ImpactLegacy, nil, "-A INPUT -p tcp -m tcp --dport 5432 -j ACCEPT")
	db.Impact = findings.Impact{Legacy: 2}
	db.Examples[0].Impact = findings.ImpactXt
	old := Item{Namespace: "shop", Owner: owner.Owner{Kind: "Pod", Name: "old-1"}, Pod: "old-1", Node: "node-a"}
	hider := Item{Namespace: "shop", Owner: owner.Owner{Kind: "Pod", Name: "hider"}, Pod: "hider", Node: "node-a",
		State: findings.StateUnknown, Error: "inspect legacy tables: legacy x_tables busy"}
	exps := []Expectation{{Owner: "StatefulSet/db", Reason: "db firewall, rewritten in Q3"}}
	gs := GroupItems([]Item{mesh, mesh2, db, old, hider}, exps)
	r := Report{Groups: gs, FailOn: FailUnexpected, Failing: Judge(gs, FailUnexpected), Skipped: Skipped{Malformed: 1}}
	var b bytes.Buffer
	if err := Write(&b, r, "text"); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	golden := filepath.Join("testdata", "report.txt")
	if os.Getenv("UPDATE_GOLDEN") == "1" {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("read golden (UPDATE_GOLDEN=1 writes it): %v", err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("text report (-want +got):\n%s", d)
	}
	for _, l := range strings.Split(got, "\n") {
		if n := len([]rune(l)); n > TextWidth {
			t.Errorf("line of %d columns: %q", n, l)
		}
	}
}

func TestWrap(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"fits", "a b c", []string{"> a b c"}},
		{"breaks at spaces", "aaaa bbbb cccc", []string{"> aaaa", "  bbbb", "  cccc"}},
		{"splits a long word", "abcdefghijklmn", []string{"> abcdefgh", "  ijklmn"}},
		{"empty", "", []string{">"}},
	} {
		if d := cmp.Diff(tc.want, wrap("> ", "  ", tc.text, 10)); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
	}
}

// TestStates: an unknown pod is a named row of its own, status error, never
// expected, failing under either mode; a gone record takes the pod's
// earlier usage away; usage seen says more than an unknown look.
func TestStates(t *testing.T) {
	at := func(it Item, st findings.State, min int, uid string) Item {
		it.State, it.Time, it.PodUID = st, t0.Add(time.Duration(min)*time.Minute), uid
		return it
	}
	web := item("shop", "Deployment", "web", "web-1", findings.ImpactXt, nil, "-A OUTPUT -j DROP")
	hider := item("shop", "Deployment", "web", "web-2", "", nil)
	hider.Error = "legacy x_tables busy"
	db := item("shop", "StatefulSet", "db", "db-0", findings.ImpactLegacy, nil, "-A INPUT -j DROP")
	batch := item("ops", "Job", "batch", "batch-1", "", nil)
	items := []Item{
		at(web, findings.StatePresent, 0, "u1"),
		at(hider, findings.StateUnknown, 0, "u2"),
		at(db, findings.StatePresent, 0, "u3"),
		at(Item{Namespace: "shop", Pod: "db-0"}, findings.StateGone, 1, "u3"),
		// Unknown, then usage seen: the usage.
		at(batch, findings.StateUnknown, 0, "u4"),
		at(item("ops", "Job", "batch", "batch-1", findings.ImpactNative, nil, "-A X"), findings.StatePresent, 1, "u4"),
	}
	exps := []Expectation{{Namespace: "shop", Reason: "all of shop"}}
	gs := GroupItems(items, exps)
	var got []string
	for _, g := range gs {
		got = append(got, fmt.Sprintf("%s %s %s %s", status(g), g.Owner, strings.Join(g.Pods, ","), g.State))
	}
	want := []string{"expected Deployment/web web-1 present", "unexpected Job/batch batch-1 present", "error Deployment/web web-2 unknown"}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("groups (-want +got):\n%s", d)
	}
	if gs[2].Error != "legacy x_tables busy" {
		t.Errorf("unknown group error %q", gs[2].Error)
	}
	for mode, want := range map[string][]bool{
		FailNever:      {false, false, false},
		FailUnexpected: {false, true, true},
		FailBreaks:     {false, false, true},
	} {
		Judge(gs, mode)
		var got []bool
		for _, g := range gs {
			got = append(got, g.Fails)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s: fails (-want +got):\n%s", mode, d)
		}
	}
	// A gone record before new usage leaves the new usage.
	again := at(db, findings.StatePresent, 2, "u3")
	if gs := GroupItems(append(items, again), nil); len(gs) != 4 {
		t.Errorf("usage after gone: %d groups, want 4 (db back)", len(gs))
	}

	r := Report{Groups: gs, FailOn: FailBreaks, Failing: Judge(gs, FailBreaks)}
	for _, f := range Formats {
		var b bytes.Buffer
		if err := Write(&b, r, f); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		for _, want := range map[string][]string{
			"text":     {"\nerror ", "web-2", "whether it uses iptables is unknown (legacy x_tables busy)", "1 workloads with pods whose inspection could not finish"},
			"markdown": {"| error | shop | Deployment/web | web-2 |"},
			"json":     {`"state": "unknown"`, `"error": "legacy x_tables busy"`},
			"junit":    {`errors="1"`, `<error message="Deployment/web: the inspection could not finish`, `type="InspectionIncomplete"`},
		}[f] {
			if !strings.Contains(out, want) {
				t.Errorf("%s output lacks %q:\n%s", f, want, out)
			}
		}
	}
}

// A pod Event of reason UnknownReason is an unknown item, with its why.
func TestReadEventsUnknown(t *testing.T) {
	sum := events.Summary{Node: "node-b", Pod: findings.Pod{Namespace: "shop", Name: "hider", UID: "u9"}, State: findings.StateUnknown, Error: "legacy x_tables busy"}
	doc := map[string]any{"kind": "EventList", "items": []any{
		map[string]any{"metadata": map[string]any{"namespace": "shop", "annotations": map[string]string{events.SummaryAnnotation: sum.JSON()}},
			"reason": events.UnknownReason, "reportingComponent": events.Controller, "reportingInstance": "node-b",
			"involvedObject": map[string]any{"kind": "Pod", "namespace": "shop", "name": "hider", "uid": "u9"}},
	}}
	b, _ := json.Marshal(doc)
	var sk Skipped
	its, err := ReadEvents(bytes.NewReader(b), "saved", &sk)
	if err != nil || len(its) != 1 || its[0].State != findings.StateUnknown || its[0].Error != "legacy x_tables busy" || its[0].Pod != "hider" {
		t.Fatalf("items %+v, %v", its, err)
	}
}

// Each value read is checked: a level, a count, a name, an owner, a link
// outside what it may be is replaced or dropped and counted; free text and
// lists are bounded; valid values pass unchanged and uncounted.
func TestValid(t *testing.T) {
	ok := Item{Namespace: "shop", Pod: "web-1", PodUID: "0b6c3c1e-5d0f-4b4e-9e43-0c5d2f0a9d11", Node: "Worker-A.example.com",
		Owner: owner.Owner{Kind: "Deployment", Name: "web"}, Worst: findings.ImpactXt, Impact: findings.Impact{Xt: 2},
		Vendors:  []findings.Vendor{{Name: "istio", Hint: "use native nftables", Doc: "https://istio.io/latest/"}},
		Examples: []findings.Example{{Family: "ip", Table: "nat", Rule: "-A X", Impact: findings.ImpactNative}}}
	long := strings.Repeat("A", 70<<10)
	for _, tc := range []struct {
		name    string
		change  func(*Item)
		want    func(*Item)
		invalid int
	}{
		{"valid", func(*Item) {}, func(*Item) {}, 0},
		{"bogus worst", func(it *Item) { it.Worst = "BOGUS\n|" }, func(it *Item) { it.Worst = "" }, 1},
		{"bogus example level", func(it *Item) { it.Examples[0].Impact = "x" }, func(it *Item) { it.Examples[0].Impact = "" }, 1},
		{"negative count", func(it *Item) { it.Impact.Legacy = -1 }, func(it *Item) { it.Impact.Legacy = 0 }, 1},
		{"namespace", func(it *Item) { it.Namespace = "a|b" }, func(it *Item) { it.Namespace = `"a|b"` }, 1},
		{"pod and its bare owner", func(it *Item) { it.Pod, it.Owner = "p\x1b", owner.Bare("p\x1b") },
			func(it *Item) { it.Pod, it.Owner = `"p\x1b"`, owner.Bare(`"p\x1b"`) }, 1},
		{"node", func(it *Item) { it.Node = "n\nx" }, func(it *Item) { it.Node = `"n\nx"` }, 1},
		{"uid", func(it *Item) { it.PodUID = "u\x1b" }, func(it *Item) { it.PodUID = `"u\x1b"` }, 1},
		{"owner kind", func(it *Item) { it.Owner.Kind = "Deploy\nment" }, func(it *Item) { it.Owner = owner.Bare("web-1") }, 1},
		{"owner name", func(it *Item) { it.Owner.Name = "web|x" }, func(it *Item) { it.Owner = owner.Bare("web-1") }, 1},
		{"javascript link", func(it *Item) { it.Vendors[0].Doc = "javascript:alert(1)//https://x" }, func(it *Item) { it.Vendors[0].Doc = "" }, 1},
		{"link without host", func(it *Item) { it.Vendors[0].Doc = "https:/x" }, func(it *Item) { it.Vendors[0].Doc = "" }, 1},
		{"link with a newline", func(it *Item) { it.Vendors[0].Doc = "https://x/\n| a |" }, func(it *Item) { it.Vendors[0].Doc = "" }, 1},
		{"huge text", func(it *Item) { it.Vendors[0].Hint, it.Examples[0].Rule, it.Error = long, long, long },
			func(it *Item) {
				cut := long[:maxText-len("...")] + "..."
				it.Vendors[0].Hint, it.Examples[0].Rule, it.Error = cut, cut, cut
			}, 0},
		{"too many examples", func(it *Item) {
			for range findings.MaxExamples {
				it.Examples = append(it.Examples, it.Examples[0])
			}
		}, func(it *Item) {
			for range findings.MaxExamples - 1 {
				it.Examples = append(it.Examples, it.Examples[0])
			}
		}, 1},
	} {
		in, want := ok, ok
		in.Vendors, want.Vendors = slices.Clone(ok.Vendors), slices.Clone(ok.Vendors)
		in.Examples, want.Examples = slices.Clone(ok.Examples), slices.Clone(ok.Examples)
		tc.change(&in)
		tc.want(&want)
		var sk Skipped
		got := valid(in, &sk)
		if d := cmp.Diff(want, got); d != "" || sk.Invalid != tc.invalid {
			t.Errorf("%s: invalid %d, want %d; item (-want +got):\n%.2000s", tc.name, sk.Invalid, tc.invalid, d)
		}
	}
}

// A findings line is checked as an Event is: a damaged or hand-made line's
// level is refused, and the report says how many values were.
func TestReadFindingsChecks(t *testing.T) {
	line := `{"schema":"` + findings.Schema + `","fingerprint":"f","state":"present","pod":{"namespace":"shop","name":"web-1"},` +
		`"nft":{"rules":1},"worst":"BOGUS\n| FAKE |","vendors":[{"name":"v","doc":"javascript:x"}]}` + "\n"
	var sk Skipped
	its, err := ReadFindings(writeFile(t, "f.jsonl", line), &sk)
	if err != nil || len(its) != 1 || its[0].Worst != "" || its[0].Vendors[0].Doc != "" || sk.Invalid != 2 {
		t.Fatalf("items %+v, skipped %+v, %v", its, sk, err)
	}
	var b bytes.Buffer
	if err := Write(&b, Report{Groups: GroupItems(its, nil), Skipped: sk}, "markdown"); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); strings.Contains(out, "BOGUS") || !strings.Contains(out, "- Replaced or dropped: 2 values read that were not valid") {
		t.Errorf("markdown:\n%s", out)
	}
}
