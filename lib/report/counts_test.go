package report

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

// TestCountsEachPodOnce is issue 25's "report multiplies counts": an
// 11-rule Istio pod recorded 10 times showed 30 xt, 80 native, a 1-rule
// legacy pod recorded 6 times 6 legacy. Each pod counts once, by its
// newest complete look, and the pods of a workload are summed: from a
// findings file, in the text and JSON formats, and from Events.
func TestCountsEachPodOnce(t *testing.T) {
	file := filepath.Join(t.TempDir(), "findings.jsonl")
	log := findings.Log{Path: file}
	rec := func(pod, uid string, at int, im findings.Impact, truncated bool) {
		t.Helper()
		worst := findings.ImpactNative
		switch {
		case im.Legacy > 0:
			worst = findings.ImpactLegacy
		case im.Xt > 0:
			worst = findings.ImpactXt
		}
		r := findings.Record{Time: t0.Add(time.Duration(at) * time.Minute), Node: "node-a", Source: "agent",
			Pod: findings.Pod{Namespace: "shop", Name: pod, UID: uid}, State: findings.StatePresent, Truncated: truncated,
			Nft: findings.Nft{Rules: im.Xt + im.Native}, Legacy: findings.Legacy{Rules: im.Legacy}, Impact: im, Worst: worst,
			Fingerprint: pod + "-" + string(rune('a'+at))}
		if err := log.Append(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	// The Istio pod: 10 complete looks of the same 11 rules, then a newer
	// look cut short that saw 5 of them.
	for i := range 10 {
		rec("web-1", "u1", i, findings.Impact{Xt: 3, Native: 8}, false)
	}
	rec("web-1", "u1", 10, findings.Impact{Native: 5}, true)
	// A second pod of the same name prefix whose rules changed: its newest
	// look counts, not the older one.
	rec("web-2", "u2", 1, findings.Impact{Xt: 1}, false)
	rec("web-2", "u2", 2, findings.Impact{Xt: 2, Native: 1}, false)
	// The legacy pod recorded 6 times.
	for i := range 6 {
		rec("db-0", "u3", i, findings.Impact{Legacy: 1}, false)
	}

	var sk Skipped
	items, err := ReadFindings(file, &sk)
	if err != nil {
		t.Fatal(err)
	}
	// The owners as the cluster would name them.
	for i := range items {
		if strings.HasPrefix(items[i].Pod, "web-") {
			items[i].Owner = owner.Owner{Kind: "Deployment", Name: "web"}
		}
	}
	gs := GroupItems(items, nil)
	want := map[string]findings.Impact{
		"Deployment/web": {Xt: 3 + 2, Native: 8 + 1},
		"Pod/db-0":       {Legacy: 1},
	}
	if len(gs) != len(want) {
		t.Fatalf("%d groups, want %d: %+v", len(gs), len(want), gs)
	}
	for _, g := range gs {
		if g.Impact != want[g.Owner.String()] {
			t.Errorf("%s: impact %+v, want %+v (each pod once, by its newest complete look)", g.Owner, g.Impact, want[g.Owner.String()])
		}
	}

	r := Report{Groups: gs, FailOn: FailNever}
	var text, js bytes.Buffer
	if err := Write(&text, r, "text"); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"rules:    0 legacy, 5 xt, 9 native (in 2 pods)", "rules:    1 legacy, 0 xt, 0 native\n"} {
		if !strings.Contains(text.String(), line) {
			t.Errorf("text report lacks %q:\n%s", line, text.String())
		}
	}
	if err := Write(&js, r, "json"); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	for _, g := range back.Groups {
		if g.Impact != want[g.Owner.String()] {
			t.Errorf("json %s: impact %+v, want %+v", g.Owner, g.Impact, want[g.Owner.String()])
		}
	}

	// Events: one a fingerprint, listed in any order; the eventTime (the
	// record's) says which is newest.
	event := func(at int, im findings.Impact) map[string]any {
		sum := events.Summary{Owner: owner.Owner{Kind: "Deployment", Name: "web"}, State: findings.StatePresent, Impact: im, Worst: findings.ImpactXt}
		return map[string]any{"metadata": map[string]any{"namespace": "shop", "annotations": map[string]string{events.SummaryAnnotation: sum.JSON()}},
			"reason": events.Reason, "reportingController": events.Controller, "reportingInstance": "node-a",
			"eventTime": t0.Add(time.Duration(at) * time.Minute).Format("2006-01-02T15:04:05.000000Z07:00"),
			"regarding": map[string]any{"kind": "Pod", "namespace": "shop", "name": "web-1", "uid": "u1"}}
	}
	list, _ := json.Marshal(map[string]any{"kind": "EventList", "apiVersion": "events.k8s.io/v1",
		"items": []any{event(5, findings.Impact{Xt: 3, Native: 8}), event(1, findings.Impact{Xt: 9, Native: 9}), event(3, findings.Impact{Xt: 3, Native: 8})}})
	evs, err := ReadEvents(bytes.NewReader(list), "events", &sk)
	if err != nil {
		t.Fatal(err)
	}
	if gs := GroupItems(evs, nil); len(gs) != 1 || gs[0].Impact != (findings.Impact{Xt: 3, Native: 8}) {
		t.Errorf("from Events: %+v, want one group of 3 xt, 8 native", gs)
	}

	// A Report's result says when its look was cut short.
	x := openreportsv1alpha1.ReportResult{Source: openreports.Source, Rule: findings.ImpactNative, Result: "warn",
		Subjects:   []corev1.ObjectReference{{Kind: "Pod", Name: "web-1", UID: "u1"}},
		Properties: map[string]string{openreports.PropRules: "legacy=0 xt=0 native=5 total=5", openreports.PropTruncated: "true"}}
	if it, ok := resultItem("shop", lean(t, x), &sk); !ok || !it.Truncated {
		t.Errorf("a truncated result reads as complete: %+v", it)
	}

	// Since db3d76f a cut look of native rules alone is written unknown
	// (error), with its counts: read as the findings file and Event have
	// it, present, native and cut, one row whatever the source
	// (helper-103 #4). An unknown look (no counts) stays unknown.
	x.Rule, x.Result = openreports.RuleUnknown, "error"
	x.Properties[openreports.PropError] = "the x_tables lock stayed busy"
	if it, ok := resultItem("shop", lean(t, x), &sk); !ok || it.State != findings.StatePresent || it.Worst != findings.ImpactNative || !it.Truncated || it.Error == "" {
		t.Errorf("a cut native look from a Report: %+v, want present, native, truncated, its error", it)
	}
	delete(x.Properties, openreports.PropRules)
	if it, ok := resultItem("shop", lean(t, x), &sk); !ok || it.State != findings.StateUnknown || it.Worst != "" {
		t.Errorf("an unknown look from a Report: %+v, want unknown", it)
	}
}

// lean is x as the API server serves it and report decodes it, in a page
// of one Report (pageReader).
func lean(t *testing.T, x openreportsv1alpha1.ReportResult) *leanResult {
	t.Helper()
	data, err := json.Marshal(openreportsv1alpha1.ReportList{Items: []openreportsv1alpha1.Report{{Results: []openreportsv1alpha1.ReportResult{x}}}})
	if err != nil {
		t.Fatal(err)
	}
	var got []leanResult
	if _, err := newPageReader().page(newScanner(bytes.NewReader(data), 0), 1, func(_ string, rs []leanResult) {
		got = append(got, rs...)
	}); err != nil || len(got) != 1 {
		t.Fatalf("page of %s: %d results, %v", data, len(got), err)
	}
	if l := got[0]; l.Ours != (x.Source == openreports.Source) || l.Rule != x.Rule || l.Errored != (x.Result == "error") {
		t.Fatalf("lean result %+v lost fields of %+v", l, x)
	}
	return &got[0]
}
