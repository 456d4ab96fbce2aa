package report

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

// partialLooks are a pod's two looks as the agent records them: a
// complete one of 3 legacy rules and a native one, then one that saw a
// native rule alone while the pod kept the x_tables lock busy (present,
// truncated).
func partialLooks() (complete, cut findings.Record) {
	pod := findings.Pod{Namespace: "shop", Name: "web-1", UID: "u1"}
	complete = findings.Record{Time: t0, Node: "node-a", Pod: pod, State: findings.StatePresent,
		Legacy: findings.Legacy{Tables: []string{"filter"}, Rules: 3}, Nft: findings.Nft{Tables: []string{"ip filter"}, Rules: 1},
		Impact: findings.Impact{Legacy: 3, Native: 1}, Worst: findings.ImpactLegacy, Fingerprint: "f1",
		Examples: []findings.Example{{Family: "ip", Table: "filter", Rule: "-A INPUT -j DROP", Impact: findings.ImpactLegacy},
			{Family: "ip", Table: "filter", Rule: "-A OUTPUT -j ACCEPT", Impact: findings.ImpactNative}}}
	cut = findings.Record{Time: t0.Add(time.Minute), Node: "node-a", Pod: pod, State: findings.StatePresent, Truncated: true,
		Error: "inspect legacy: legacy x_tables busy", Nft: findings.Nft{Tables: []string{"ip filter"}, Rules: 2},
		Impact: findings.Impact{Native: 2}, Worst: findings.ImpactNative, Fingerprint: "f2",
		Examples: []findings.Example{{Family: "ip", Table: "filter", Rule: "-A OUTPUT -j ACCEPT", Impact: findings.ImpactNative}}}
	return complete, cut
}

// eventOf is rec's pod Event as the forwarder posts it, listed back.
func eventOf(rec findings.Record) map[string]any {
	sum := events.SummaryOf(rec, "node-a", owner.Owner{Kind: "Deployment", Name: "web"}).JSON()
	return map[string]any{"metadata": map[string]any{"namespace": rec.Pod.Namespace, "annotations": map[string]string{events.SummaryAnnotation: sum}},
		"reason": events.Reason, "reportingController": events.Controller, "reportingInstance": "node-a",
		"eventTime": rec.Time.Format("2006-01-02T15:04:05.000000Z07:00"),
		"regarding": map[string]any{"kind": "Pod", "namespace": rec.Pod.Namespace, "name": rec.Pod.Name, "uid": rec.Pod.UID}}
}

// TestTruncatedEvent: an Event says when its look stopped early, as a
// findings file and a Report result do. A pod seen with legacy rules that
// then keeps the x_tables lock busy, its Event of the complete look past
// --event-ttl, read as a complete native look: --fail-on breaks passed,
// the row said native, --by node ready.
func TestTruncatedEvent(t *testing.T) {
	complete, cut := partialLooks()
	for _, tc := range []struct {
		name  string
		evs   []any
		worst string
	}{
		{"both looks", []any{eventOf(complete), eventOf(cut)}, findings.ImpactLegacy},
		{"the complete look's Event expired", []any{eventOf(cut)}, findings.ImpactNative},
	} {
		doc, _ := json.Marshal(map[string]any{"kind": "EventList", "items": tc.evs})
		var sk Skipped
		its, err := ReadEvents(bytes.NewReader(doc), "events", &sk)
		if err != nil || len(its) != len(tc.evs) || !reflect.DeepEqual(sk, Skipped{}) {
			t.Fatalf("%s: items %+v, skipped %+v, %v", tc.name, its, sk, err)
		}
		gs := GroupItems(its, nil)
		if len(gs) != 1 || !gs[0].Truncated || gs[0].Worst != tc.worst {
			t.Errorf("%s: groups %+v; want one, truncated, worst %s", tc.name, gs, tc.worst)
		}
		if !Judge(gs, FailBreaks) {
			t.Errorf("%s: --fail-on breaks passes a look cut short", tc.name)
		}
		if rows := ByNode(gs, nil, DefaultPoolLabel); len(rows) != 1 || rows[0].Readiness == findings.ReadinessReady {
			t.Errorf("%s: by node %+v, want node-a not ready", tc.name, rows)
		}
		var b bytes.Buffer
		if err := Write(&b, Report{Groups: gs, FailOn: FailBreaks}, "text"); err != nil || !strings.Contains(b.String(), tc.worst+" (incomplete)") {
			t.Errorf("%s: the text does not say %s (incomplete) (%v):\n%s", tc.name, tc.worst, err, b.String())
		}
	}

	// An older forwarder's summary, without the field, still reads: a
	// complete look, as before.
	old := strings.Replace(events.SummaryOf(complete, "node-a", owner.Owner{}).JSON(), `"truncated":false,`, "", 1)
	ev := eventOf(complete)
	ev["metadata"].(map[string]any)["annotations"] = map[string]string{events.SummaryAnnotation: old}
	doc, _ := json.Marshal(map[string]any{"kind": "EventList", "items": []any{ev}})
	var sk Skipped
	its, err := ReadEvents(bytes.NewReader(doc), "events", &sk)
	if err != nil || len(its) != 1 || !reflect.DeepEqual(sk, Skipped{}) || its[0].Truncated || its[0].Worst != findings.ImpactLegacy || its[0].Impact.Legacy != 3 {
		t.Errorf("an older summary: items %+v, skipped %+v, %v", its, sk, err)
	}
}

// TestCompleteLookReplacesLevel: a pod's level is its latest complete
// look's, as its counts are: a pod whose legacy rules were removed, seen
// complete with its native rule alone, failed --fail-on breaks as legacy
// for as long as the older look was read. A look cut short, or with rules
// of no known level, keeps the worse level seen before; a command's own
// finding counts its level whenever it was; looks at the same time (an
// older forwarder's Events have none) all count. The order they are read
// in does not matter.
func TestCompleteLookReplacesLevel(t *testing.T) {
	legacy, cut := partialLooks()
	native := nativeAfter(legacy)
	unclassified := native
	unclassified.Worst, unclassified.Fingerprint = "", "f4"
	refused := findings.Record{Node: "node-a", Pod: legacy.Pod, State: findings.StatePresent, Source: findings.SourceExec, Worst: findings.ImpactLegacy,
		Exec: &findings.Exec{Argv: []string{"iptables-legacy", "-A", "OUTPUT"}, Backend: "legacy", Operation: "write", Exited: true, ExitCode: 3, Failed: true, MissingKernelSupport: true}}
	for _, tc := range []struct {
		name   string
		recs   []findings.Record
		worst  string
		impact findings.Impact
		fails  bool
	}{
		{"complete native after legacy", []findings.Record{at(legacy, 0), at(native, 2)}, findings.ImpactNative, findings.Impact{Native: 1}, false},
		{"cut after legacy", []findings.Record{at(legacy, 0), at(cut, 1)}, findings.ImpactLegacy, findings.Impact{Legacy: 3, Native: 1}, true},
		{"complete after cut after legacy", []findings.Record{at(legacy, 0), at(cut, 1), at(native, 2)}, findings.ImpactNative, findings.Impact{Native: 1}, false},
		{"unclassified after legacy", []findings.Record{at(legacy, 0), at(unclassified, 2)}, findings.ImpactLegacy, findings.Impact{Native: 1}, true},
		{"refused write before the complete look", []findings.Record{at(legacy, 0), at(refused, 1), at(native, 2)}, findings.ImpactLegacy, findings.Impact{Native: 1}, true},
		// The counts are the one read last's.
		{"at the same time", []findings.Record{at(legacy, 0), at(native, 0)}, findings.ImpactLegacy, findings.Impact{}, true},
	} {
		var items []Item
		for _, r := range tc.recs {
			items = append(items, itemOf(r, "findings"))
		}
		eachWay(items, nil, func(how string, gs []Group) {
			if len(gs) != 1 || gs[0].Worst != tc.worst || tc.impact != (findings.Impact{}) && gs[0].Impact != tc.impact {
				t.Errorf("%s (%s): groups %+v; want one, worst %s, %+v", tc.name, how, gs, tc.worst, tc.impact)
				return
			}
			if failing := Judge(gs, FailBreaks); failing != tc.fails {
				t.Errorf("%s (%s): failing %v, want %v", tc.name, how, failing, tc.fails)
			}
			if ex := gs[0].ExampleImpact; ex != tc.worst {
				t.Errorf("%s (%s): example at %s, worst %s", tc.name, how, ex, tc.worst)
			}
		})
	}

	// Events (and Report results) are anyone's who may post one in the
	// namespace: a complete look among them never lowers a level, or a
	// forged one would pass the gate.
	doc, _ := json.Marshal(map[string]any{"kind": "EventList", "items": []any{eventOf(at(legacy, 0)), eventOf(at(native, 2))}})
	var sk Skipped
	its, err := ReadEvents(bytes.NewReader(doc), "events.json", &sk)
	if err != nil || len(its) != 2 {
		t.Fatalf("events: %+v, %v", its, err)
	}
	if gs := GroupItems(its, nil); len(gs) != 1 || gs[0].Worst != findings.ImpactLegacy || !Judge(gs, FailBreaks) {
		t.Errorf("a complete native Event after a legacy one: groups %+v; want worst legacy, failing", gs)
	}
}

// TestForgedEventPassesNoGate: anyone who may post an Event in a
// namespace could forge one of a complete native look, later than the
// pod's real ones. It lowered no level (TestCompleteLookReplacesLevel), but
// it cleared the pod's cut look (a pod keeping the x_tables lock busy from
// its first look) and answered its unknown one, and --fail-on breaks
// passed. Events and Report results now add a doubt, never clear one; a
// findings file's later look still answers both.
func TestForgedEventPassesNoGate(t *testing.T) {
	_, cut := partialLooks()
	forged := cut
	forged.Time, forged.Truncated, forged.Error, forged.Fingerprint = t0.Add(time.Hour), false, "", "forged"
	unknown := findings.Record{Time: t0, Node: "node-a", Pod: cut.Pod, State: findings.StateUnknown, Error: "inspect: deadline"}
	read := func(recs ...findings.Record) []Item {
		t.Helper()
		var evs []any
		for _, r := range recs {
			ev := eventOf(r)
			if r.KnownState() == findings.StateUnknown {
				ev["reason"] = events.UnknownReason
			}
			evs = append(evs, ev)
		}
		doc, _ := json.Marshal(map[string]any{"kind": "EventList", "items": evs})
		var sk Skipped
		its, err := ReadEvents(bytes.NewReader(doc), "events.json", &sk)
		if err != nil || len(its) != len(recs) {
			t.Fatalf("events: %+v, %+v, %v", its, sk, err)
		}
		return its
	}
	for _, tc := range []struct {
		name string
		its  []Item
	}{
		{"a cut look, then a forged complete one", read(cut, forged)},
		{"the same, read the other way", read(forged, cut)},
		{"an unknown look, then a forged present one", read(unknown, forged)},
	} {
		col := newCollector("", nil)
		for _, it := range tc.its {
			col.add(it)
		}
		for how, gs := range map[string][]Group{"files": GroupItems(tc.its, nil), "cluster": col.groups()} {
			if !Judge(gs, FailBreaks) {
				t.Errorf("%s (%s): --fail-on breaks passes: %+v", tc.name, how, gs)
			}
		}
	}
	if its := read(unknown); its[0].State != findings.StateUnknown {
		t.Fatalf("the unknown look's Event reads as %+v", its[0])
	}
	// A findings file's complete look, later, answers them, whether
	// they are the file's or an Event's (report over files and a saved
	// --events file); one before them does not.
	file := func(r findings.Record) Item {
		// Filed under the workload the Events name, as a report of
		// files beside the cluster's would.
		it := itemOf(r, "findings")
		it.Owner = owner.Owner{Kind: "Deployment", Name: "web"}
		return it
	}
	for _, first := range []findings.Record{cut, unknown} {
		for _, its := range [][]Item{
			{file(first), file(forged)},
			append(read(first), file(forged)),
			{file(forged), read(first)[0]},
		} {
			if gs := GroupItems(its, nil); Judge(gs, FailBreaks) {
				t.Errorf("a findings file's complete native look after a %s one (%s) still fails: %+v", first.KnownState(), its[0].Source, gs)
			}
		}
		early := file(forged)
		early.Time = t0.Add(-time.Minute)
		if gs := GroupItems(append(read(first), early), nil); !Judge(gs, FailBreaks) {
			t.Errorf("a findings file's look before an Event's %s one answers it: %+v", first.KnownState(), gs)
		}
	}
	// Nor does a forged Event clear a findings file's own cut look, alone
	// or answering an earlier cut Event, in either order.
	cutLater := file(cut)
	cutLater.Time = t0.Add(2 * time.Minute)
	for name, its := range map[string][]Item{
		"a file's cut look":                   {file(cut), read(forged)[0]},
		"a cut Event, then a file's cut look": {read(cut)[0], cutLater, read(forged)[0]},
	} {
		for _, order := range []string{"as read", "reversed"} {
			if order == "reversed" {
				its = slices.Clone(its)
				slices.Reverse(its)
			}
			if gs := GroupItems(its, nil); !Judge(gs, FailBreaks) {
				t.Errorf("%s, then a forged complete Event (%s): --fail-on breaks passes: %+v", name, order, gs)
			}
		}
	}
}

// at is r at min minutes past t0.
func at(r findings.Record, min int) findings.Record {
	r.Time = t0.Add(time.Duration(min) * time.Minute)
	return r
}

// nativeAfter is the pod's complete look once its legacy rules were
// removed: its native rule alone.
func nativeAfter(legacy findings.Record) findings.Record {
	native := legacy
	native.Legacy, native.Impact, native.Worst, native.Fingerprint, native.Modules = findings.Legacy{}, findings.Impact{Native: 1}, findings.ImpactNative, "f3", findings.Modules{}
	native.Examples = legacy.Examples[1:]
	return native
}

// eachWay groups items read oldest first and newest first, by the files'
// path (GroupItems) and the cluster's (the collector), and hands each
// grouping to check with how it was made.
func eachWay(items []Item, exps []Expectation, check func(how string, gs []Group)) {
	items = slices.Clone(items)
	for _, order := range []string{"oldest first", "newest first"} {
		if order == "newest first" {
			slices.Reverse(items)
		}
		col := newCollector("", exps)
		for _, it := range items {
			col.add(it)
		}
		check(order+", files", GroupItems(items, exps))
		check(order+", cluster", col.groups())
	}
}

// TestReplacedLookNotJudged: a look that a later complete one replaced
// says nothing of the pod's level (TestCompleteLookReplacesLevel), and no
// more of what the expectations must cover: a pod that removed its legacy
// rules, its native rule expected, failed --fail-on unexpected for as long
// as its old finding was read.
func TestReplacedLookNotJudged(t *testing.T) {
	legacy, cut := partialLooks()
	native := nativeAfter(legacy)
	exps := []Expectation{{Namespace: "shop", Level: findings.ImpactNative, Reason: "the shop's own filter"}}
	for _, tc := range []struct {
		name     string
		recs     []findings.Record
		expected bool
	}{
		{"complete native after legacy", []findings.Record{at(legacy, 0), at(native, 2)}, true},
		{"legacy after native", []findings.Record{at(native, 0), at(legacy, 2)}, false},
		// The cut look replaces nothing: the legacy rules may be there.
		{"cut after legacy", []findings.Record{at(legacy, 0), at(cut, 1)}, false},
		{"at the same time", []findings.Record{at(legacy, 0), at(native, 0)}, false},
	} {
		var items []Item
		for _, r := range tc.recs {
			items = append(items, itemOf(r, "findings"))
		}
		eachWay(items, exps, func(how string, gs []Group) {
			if len(gs) != 1 {
				t.Errorf("%s (%s): groups %+v; want one", tc.name, how, gs)
				return
			}
			if gs[0].Expected != tc.expected || Judge(gs, FailUnexpected) == tc.expected {
				t.Errorf("%s (%s): expected %v, fails %v; want expected %v", tc.name, how, gs[0].Expected, gs[0].Fails, tc.expected)
			}
			if tc.expected && !slices.Equal(gs[0].Reasons, []string{"the shop's own filter"}) {
				t.Errorf("%s (%s): reasons %q", tc.name, how, gs[0].Reasons)
			}
		})
	}
}

// TestReplacedLookNotShown: nor does a replaced look show its rules or the
// modules they needed: the workload of a pod whose legacy rules were
// removed read "worst native", beside a legacy rule and "kernel: ip_tables
// ...", what to change for rules no longer there.
func TestReplacedLookNotShown(t *testing.T) {
	legacy, cut := partialLooks()
	legacy.Modules = findings.Modules{Legacy: []string{"ip_tables", "x_tables"}}
	native := nativeAfter(legacy)
	for _, tc := range []struct {
		name     string
		recs     []findings.Record
		worst    string
		examples int
		modules  []string
	}{
		{"complete native after legacy", []findings.Record{at(legacy, 0), at(native, 2)}, findings.ImpactNative, 1, []string{}},
		{"cut after legacy", []findings.Record{at(legacy, 0), at(cut, 1)}, findings.ImpactLegacy, 2, []string{"ip_tables", "x_tables"}},
		{"legacy after native", []findings.Record{at(native, 0), at(legacy, 2)}, findings.ImpactLegacy, 2, []string{"ip_tables", "x_tables"}},
	} {
		var items []Item
		for _, r := range tc.recs {
			items = append(items, itemOf(r, "findings"))
		}
		eachWay(items, nil, func(how string, gs []Group) {
			if len(gs) != 1 || gs[0].Worst != tc.worst {
				t.Errorf("%s (%s): groups %+v; want one, worst %s", tc.name, how, gs, tc.worst)
				return
			}
			g := gs[0]
			if len(g.Examples) != tc.examples || !slices.Equal(g.Modules, tc.modules) {
				t.Errorf("%s (%s): examples %+v, modules %q; want %d examples, modules %q", tc.name, how, g.Examples, g.Modules, tc.examples, tc.modules)
			}
			for _, ex := range g.Examples {
				if findings.ImpactRank(ex.Impact) < findings.ImpactRank(g.Worst) {
					t.Errorf("%s (%s): example %q at %s in a workload at %s", tc.name, how, ex.Rule, ex.Impact, g.Worst)
				}
			}
		})
	}
}

// TestCommandsWithoutLevel: a pod with no rules whose command failed for
// a reason of its own (exit 2, a bad option: not missing kernel support)
// has a finding with no level. The node label took no level from it, but
// report read it as unclassified usage: --fail-on breaks failed and
// --by node said unknown. It holds no rules: nothing of it breaks.
func TestCommandsWithoutLevel(t *testing.T) {
	pod := findings.Pod{Namespace: "shop", Name: "web-1", UID: "u1"}
	failed := findings.Record{Time: t0, Node: "node-a", Pod: pod, State: findings.StatePresent, Source: findings.SourceExec,
		Exec: &findings.Exec{Argv: []string{"iptables", "-A", "INPUT", "--bogus"}, Backend: "nft", Operation: "write", Exited: true, ExitCode: 2, Failed: true}}
	refused := failed
	refused.Worst, refused.Exec = findings.ImpactLegacy, &findings.Exec{Argv: []string{"iptables-legacy", "-A", "OUTPUT"}, Backend: "legacy", Operation: "write", Exited: true, ExitCode: 3, Failed: true, MissingKernelSupport: true}
	native, _ := partialLooks()
	native.Legacy, native.Impact, native.Worst = findings.Legacy{}, findings.Impact{Native: 1}, findings.ImpactNative
	native.Examples = native.Examples[1:]
	for _, tc := range []struct {
		name      string
		recs      []findings.Record
		noRules   bool
		fails     bool
		readiness string
	}{
		{"a failed command alone", []findings.Record{failed}, true, false, findings.ReadinessReady},
		{"a refused legacy write", []findings.Record{refused}, false, true, findings.ReadinessBreaks},
		{"native rules and a failed command", []findings.Record{native, failed}, false, false, findings.ReadinessReady},
	} {
		var items []Item
		for _, r := range tc.recs {
			items = append(items, itemOf(r, "findings"))
		}
		gs := GroupItems(items, nil)
		if len(gs) != 1 || gs[0].NoRules() != tc.noRules {
			t.Fatalf("%s: groups %+v; want one, no rules %v", tc.name, gs, tc.noRules)
		}
		if failing := Judge(gs, FailBreaks); failing != tc.fails {
			t.Errorf("%s: failing --fail-on breaks %v, want %v", tc.name, failing, tc.fails)
		}
		if rows := ByNode(gs, nil, DefaultPoolLabel); len(rows) != 1 || rows[0].Readiness != tc.readiness {
			t.Errorf("%s: by node %+v, want node-a %s", tc.name, rows, tc.readiness)
		}
		var b bytes.Buffer
		err := Write(&b, Report{Groups: gs, FailOn: FailBreaks}, "text")
		if err != nil || tc.noRules && (!strings.Contains(b.String(), NoRulesWords) || !strings.Contains(b.String(), "0 unclassified")) {
			t.Errorf("%s: text (%v):\n%s", tc.name, err, b.String())
		}
	}
}
