package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

// The API server accepts an Event (with an eventTime, as ours have) in one
// namespace whose involvedObject or regarding names a pod of another
// (measured on kube-apiserver: only an empty involvedObject namespace is
// checked). Anyone allowed to create Events in namespace "attacker" must
// not put findings under another namespace's workloads, nor under a
// node: ours are posted in the pod's namespace, a node's in
// events.NodeEventNamespace.
func TestReadEventsOtherNamespace(t *testing.T) {
	sum := events.Summary{Owner: owner.Owner{Kind: "Deployment", Name: "coredns"}, Worst: findings.ImpactLegacy}
	ann := map[string]string{events.SummaryAnnotation: sum.JSON()}
	nodeAnn := map[string]string{events.SummaryAnnotation: sum.JSON(), events.SubjectAnnotation: string(findings.SubjectNode)}
	doc := map[string]any{"kind": "EventList", "items": []any{
		map[string]any{"metadata": map[string]any{"namespace": "attacker", "annotations": ann}, "reason": events.Reason,
			"reportingController": events.Controller, "eventTime": "2026-01-02T03:04:05.000000Z",
			"regarding": map[string]any{"kind": "Pod", "namespace": "kube-system", "name": "coredns-1"}},
		map[string]any{"metadata": map[string]any{"namespace": "attacker", "annotations": ann}, "reason": events.Reason,
			"reportingComponent": events.Controller, "eventTime": "2026-01-02T03:04:05.000000Z",
			"involvedObject": map[string]any{"kind": "Pod", "namespace": "kube-system", "name": "coredns-2"}},
		map[string]any{"metadata": map[string]any{"namespace": "attacker", "annotations": nodeAnn}, "reason": events.Reason,
			"reportingController": events.Controller, "eventTime": "2026-01-02T03:04:05.000000Z",
			"regarding": map[string]any{"kind": "Node", "name": "worker-1"}},
		// Ours, for comparison: read; a node's stays the node's whatever
		// owner its summary names.
		map[string]any{"metadata": map[string]any{"namespace": events.NodeEventNamespace, "annotations": nodeAnn}, "reason": events.Reason,
			"reportingController": events.Controller, "regarding": map[string]any{"kind": "Node", "name": "worker-2"}},
		map[string]any{"metadata": map[string]any{"namespace": "shop", "annotations": ann}, "reason": events.Reason,
			"reportingController": events.Controller, "regarding": map[string]any{"kind": "Pod", "namespace": "shop", "name": "web-1"}},
	}}
	b, _ := json.Marshal(doc)
	var sk Skipped
	its, err := ReadEvents(bytes.NewReader(b), "saved", &sk)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range its {
		if it.Node == "worker-2" && it.Owner == nodeOwner("worker-2") {
			continue
		}
		if it.Namespace != "shop" {
			t.Errorf("an Event of namespace attacker gave an item of %q (node %q, owner %v)", it.Namespace, it.Node, it.Owner)
		}
	}
	if len(its) != 2 || sk.Invalid != 3 {
		t.Errorf("items %+v, skipped %+v; want shop's and worker-2's only, 3 invalid", its, sk)
	}
}

// A pod can show one native rule and hide the rules that break behind a
// rule over 32 KiB or the x_tables lock kept busy: its look is present but
// Truncated, the worst level seen a lower bound. Under --fail-on breaks
// that is not known to be safe, as an unclassified or unknown workload
// is not; nor do rule expectations cover rules a cut look did not show.
// A complete look after a cut one is all seen again.
func TestTruncatedLookNotPassed(t *testing.T) {
	at := func(min int) time.Time { return time.Date(2026, 1, 2, 3, min, 0, 0, time.UTC) }
	look := func(pod string, min int, cut bool) Item {
		it := item("shop", "Deployment", "web", pod, findings.ImpactNative, nil, "-A OUTPUT -j ACCEPT")
		it.PodUID, it.Time, it.Truncated, it.Impact = pod+"-uid", at(min), cut, findings.Impact{Native: 1}
		it.Examples[0].Impact = findings.ImpactNative
		return it
	}
	exps := []Expectation{{Namespace: "shop", Rule: "-j ACCEPT", Reason: "ours"}}
	for _, tc := range []struct {
		name  string
		items []Item
		fails bool
	}{
		{"cut look only", []Item{look("web-1", 1, true)}, true},
		{"cut look after a complete one", []Item{look("web-1", 1, false), look("web-1", 2, true)}, true},
		{"complete look after a cut one", []Item{look("web-1", 1, true), look("web-1", 2, false)}, false},
		{"complete looks", []Item{look("web-1", 1, false), look("web-2", 1, false)}, false},
	} {
		for _, withExps := range []bool{false, true} {
			var es []Expectation
			if withExps {
				es = exps
			}
			gs := GroupItems(tc.items, es)
			failing := Judge(gs, FailBreaks)
			// A complete look replaces the cut one before it, which rules
			// do not cover (TestReplacedLookNotJudged).
			if withExps && !tc.fails && (!gs[0].Expected || failing) {
				t.Errorf("%s: complete looks the expectations cover: expected %v, failing %v", tc.name, gs[0].Expected, failing)
			}
			if !withExps && failing != tc.fails || withExps && tc.fails && (gs[0].Expected || !failing) {
				t.Errorf("%s (expectations %v): failing %v, expected %v; want failing %v", tc.name, withExps, failing, gs[0].Expected, tc.fails)
			}
			if rows := ByNode(gs, nil, DefaultPoolLabel); tc.fails && (len(rows) != 1 || rows[0].Readiness != findings.ReadinessUnknown) {
				t.Errorf("%s: by node %+v, want node-a unknown", tc.name, rows)
			}
			if tc.fails {
				var b bytes.Buffer
				if err := Write(&b, Report{Groups: gs, FailOn: FailBreaks}, "text"); err != nil || !strings.Contains(b.String(), "native (incomplete)") {
					t.Errorf("%s: the text does not say the look is incomplete (%v):\n%s", tc.name, err, b.String())
				}
			}
		}
	}
}

// An Event anyone may post in their own namespace, naming a pod of theirs
// with a summary whose owner is the Node: it must not pass for the node's
// own look and so hide the node's unknown one (a node whose legacy
// x_tables could not be read), under --fail-on breaks or --by node.
func TestPodEventAsNodeOwner(t *testing.T) {
	nodeSum := events.Summary{Error: "legacy x_tables busy"}
	forged := events.Summary{Owner: owner.Owner{Kind: KindNode, Name: "worker-1"}, Node: "worker-1",
		Impact: findings.Impact{Native: 1}, Worst: findings.ImpactNative}
	doc := map[string]any{"kind": "EventList", "items": []any{
		map[string]any{"metadata": map[string]any{"namespace": events.NodeEventNamespace, "annotations": map[string]string{
			events.SummaryAnnotation: nodeSum.JSON(), events.SubjectAnnotation: string(findings.SubjectNode)}},
			"reason": events.UnknownReason, "reportingController": events.Controller, "reportingInstance": "worker-1",
			"eventTime": "2026-03-01T12:00:00.000000Z", "regarding": map[string]any{"kind": "Node", "name": "worker-1"}},
		map[string]any{"metadata": map[string]any{"namespace": "evil", "annotations": map[string]string{events.SummaryAnnotation: forged.JSON()}},
			"reason": events.Reason, "reportingController": events.Controller, "reportingInstance": "worker-1",
			"eventTime": "2026-03-01T11:00:00.000000Z", "regarding": map[string]any{"kind": "Pod", "namespace": "evil", "name": "x", "uid": "zz"}},
	}}
	b, _ := json.Marshal(doc)
	var sk Skipped
	its, err := ReadEvents(bytes.NewReader(b), "saved", &sk)
	if err != nil || len(its) != 2 {
		t.Fatalf("items %+v, error %v; want 2", its, err)
	}
	for _, it := range its {
		if it.Namespace == "evil" && it.Owner.Kind == KindNode {
			t.Errorf("the pod's Event kept the Node as its owner: %+v", it)
		}
	}
	gs := GroupItems(its, nil)
	if !Judge(gs, FailBreaks) {
		t.Errorf("--fail-on breaks passes with the node's look unknown: %+v", gs)
	}
	rows := ByNode(gs, nil, DefaultPoolLabel)
	if len(rows) != 1 || rows[0].Readiness != findings.ReadinessUnknown {
		t.Errorf("by node %+v, want worker-1 unknown", rows)
	}
	// Keyed apart even if an owner of kind Node came through.
	forgedItem := Item{Namespace: "evil", Pod: "x", PodUID: "zz", Node: "worker-1", Owner: nodeOwner("worker-1")}
	if podOf(forgedItem) == podOf(Item{Node: "worker-1", Owner: nodeOwner("worker-1")}) {
		t.Error("a namespaced item keys as the node's look")
	}
}

// Rules of no known level rank below native in a group's Worst: a pod
// whose latest look held some beside native ones must not pass --fail-on
// breaks (they may break), nor read ready by node, as a look of
// unclassified rules alone does not. A later look that classified every
// rule is all known again.
func TestUnclassifiedBesideNative(t *testing.T) {
	at := func(min int) time.Time { return time.Date(2026, 1, 2, 3, min, 0, 0, time.UTC) }
	look := func(min int, worst string) Item {
		it := item("shop", "Deployment", "web", "web-1", worst, nil, "-A OUTPUT -j ACCEPT")
		it.PodUID, it.Time, it.Impact = "web-1-uid", at(min), findings.Impact{Native: 1}
		return it
	}
	for _, tc := range []struct {
		name  string
		items []Item
		fails bool
	}{
		{"unclassified after native", []Item{look(0, findings.ImpactNative), look(5, "")}, true},
		{"unclassified alone", []Item{look(5, "")}, true},
		{"native after unclassified", []Item{look(0, ""), look(5, findings.ImpactNative)}, false},
	} {
		gs := GroupItems(tc.items, nil)
		if failing := Judge(gs, FailBreaks); failing != tc.fails {
			t.Errorf("%s: failing %v, want %v: %+v", tc.name, failing, tc.fails, gs)
		}
		want := findings.ReadinessReady
		if tc.fails {
			want = findings.ReadinessUnknown
		}
		if rows := ByNode(gs, nil, DefaultPoolLabel); len(rows) != 1 || rows[0].Readiness != want {
			t.Errorf("%s: by node %+v, want %s", tc.name, rows, want)
		}
		var b bytes.Buffer
		if err := Write(&b, Report{Groups: gs, FailOn: FailBreaks}, "text"); err != nil || tc.fails != (strings.Contains(b.String(), "native + unclassified") || tc.name == "unclassified alone") {
			t.Errorf("%s: the text does not say unclassified (%v):\n%s", tc.name, err, b.String())
		}
	}
}

// A look that could not finish after the pod's last complete one says its
// rules are no longer all seen (the x_tables lock kept busy while legacy
// rules were added): it stays beside the usage seen before, and fails
// --fail-on breaks, from files and from a cluster's items (the collector)
// alike. An unknown look followed by a complete one says nothing more.
func TestUnknownAfterPresent(t *testing.T) {
	at := func(min int) time.Time { return time.Date(2026, 1, 2, 3, min, 0, 0, time.UTC) }
	present := func(min int) Item {
		it := item("shop", "Deployment", "web", "web-1", findings.ImpactNative, nil, "-A OUTPUT -j ACCEPT")
		it.PodUID, it.Time, it.Impact, it.State = "web-1-uid", at(min), findings.Impact{Native: 1}, findings.StatePresent
		return it
	}
	unknown := func(min int) Item {
		it := Item{Namespace: "shop", Owner: owner.Owner{Kind: "Deployment", Name: "web"}, Pod: "web-1", PodUID: "web-1-uid", Node: "node-a",
			State: findings.StateUnknown, Error: "legacy x_tables busy", Time: at(min)}
		return it
	}
	for _, tc := range []struct {
		name  string
		items []Item
		fails bool
	}{
		{"unknown after present", []Item{present(0), unknown(9)}, true},
		{"present after unknown", []Item{unknown(0), present(9)}, false},
		{"at the same time", []Item{present(9), unknown(9)}, false},
		// A command's own finding is no look at the rules, whatever
		// the times (an older forwarder's Event has none).
		{"a command's finding, no times", []Item{func() Item {
			it := present(0)
			it.Time, it.Impact, it.Examples, it.Command = time.Time{}, findings.Impact{}, nil, "iptables -L"
			return it
		}(), func() Item { it := unknown(0); it.Time = time.Time{}; return it }()}, true},
	} {
		col := newCollector("", nil)
		for _, it := range tc.items {
			col.add(it)
		}
		for how, gs := range map[string][]Group{"files": GroupItems(tc.items, nil), "cluster": col.groups()} {
			if failing := Judge(gs, FailBreaks); failing != tc.fails {
				t.Errorf("%s (%s): failing %v, want %v: %+v", tc.name, how, failing, tc.fails, gs)
			}
		}
	}
}
