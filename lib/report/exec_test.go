package report

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
	"github.com/iptables-alerter/iptables-alerter/lib/wording"
)

// TestExecCommands (issue 28): a workload's findings of the exec watch show
// their command lines, a failed one marked FAILED first and never crowded
// out by reads; every format carries them.
func TestExecCommands(t *testing.T) {
	rec := func(pod string, e *findings.Exec) findings.Record {
		return findings.Record{Source: findings.SourceExec, State: findings.StatePresent, Node: "n", Worst: findings.ImpactLegacy,
			Pod: findings.Pod{Namespace: "shop", Name: pod, UID: "u-" + pod}, Exec: e}
	}
	read := func(chain string) *findings.Exec {
		return &findings.Exec{Argv: []string{"iptables-legacy", "-C", chain, "-j", "DROP"}, Backend: "legacy", Exited: true, ExitCode: 1}
	}
	failed := &findings.Exec{Argv: []string{"iptables-legacy", "-t", "nat", "-A", "OUTPUT", "-j", "ACCEPT", "evil\x1b[2J"}, Backend: "legacy",
		Exited: true, ExitCode: 3, Failed: true, MissingKernelSupport: true}
	var items []Item
	for i, e := range []*findings.Exec{read("A"), read("B"), read("C"), read("D"), failed} {
		it := itemOf(rec("web-"+string(rune('1'+i)), e), "findings")
		it.Owner = owner.Owner{Kind: "Deployment", Name: "web"}
		items = append(items, it)
	}
	gs := GroupItems(items, nil)
	if len(gs) != 1 {
		t.Fatalf("%d groups", len(gs))
	}
	cs := gs[0].Commands
	if len(cs) != MaxWriters || !strings.HasPrefix(cs[len(cs)-1], "FAILED (exit 3, missing kernel support): iptables-legacy -t nat -A OUTPUT") {
		t.Fatalf("commands %q: want %d, the failed one kept", cs, MaxWriters)
	}
	for _, format := range []string{"text", "markdown", "json", "junit"} {
		var b bytes.Buffer
		if err := Write(&b, Report{Groups: gs}, format); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "FAILED") || strings.Contains(b.String(), "\x1b") {
			t.Errorf("%s: no FAILED command, or an escape let through:\n%s", format, b.String())
		}
	}
}

// TestExecCommandsFromReports: the command a Report's result holds
// (openreports.PropCommand) is read back, so --source reports shows a
// failed write as the Events do; a binary named FAILED is no failure.
func TestExecCommandsFromReports(t *testing.T) {
	failed := &findings.Exec{Argv: []string{"iptables-legacy", "-A", "INPUT", "-j", "DROP"}, Backend: "legacy",
		Exited: true, ExitCode: 3, Failed: true, MissingKernelSupport: true}
	result := func(pod, rule, cmd string) Item {
		x := openreportsv1alpha1.ReportResult{Source: openreports.Source, Rule: rule, Result: "fail",
			Subjects: []corev1.ObjectReference{{APIVersion: "v1", Kind: "Pod", Name: pod, UID: types.UID("u-" + pod)}},
			Properties: map[string]string{openreports.PropOwner: "Deployment/web", openreports.PropNodes: "n",
				openreports.PropLastSeen: "2026-12-01T00:00:00Z", openreports.PropCommand: cmd}}
		l := leanOf(x)
		it, ok := resultItem("shop", &l, &Skipped{})
		if !ok {
			t.Fatalf("result %+v not read", x)
		}
		return it
	}
	line := wording.ExecLine(failed)
	var items []Item
	for i := 1; i <= MaxWriters; i++ {
		items = append(items, result("web-"+strconv.Itoa(i), openreports.RuleUnclassified, "FAILED -L x"+strconv.Itoa(i)+" (exit 0)"))
	}
	items = append(items, result("web-0", findings.ImpactLegacy, line))
	gs := GroupItems(items, nil)
	if len(gs) != 1 || !slices.Contains(gs[0].Commands, line) {
		t.Fatalf("groups %+v: want the failed command %q kept", gs, line)
	}
}

// TestLookWithCommandFromReports: a Report result of a look at rules not
// classified keeps the pod's last command beside it (the writer does), so
// with all its counts 0 it read as that command's own finding, with no
// rules: the workload passed --fail-on breaks and its node was ready. A
// failed-command result is a command's own; an unclassified or cut one is
// a look.
func TestLookWithCommandFromReports(t *testing.T) {
	result := func(rule string, props map[string]string) Item {
		x := openreportsv1alpha1.ReportResult{Source: openreports.Source, Rule: rule, Result: "warn",
			Subjects: []corev1.ObjectReference{{APIVersion: "v1", Kind: "Pod", Name: "web-1", UID: types.UID("u1")}},
			Properties: map[string]string{openreports.PropOwner: "Deployment/web", openreports.PropNodes: "n",
				openreports.PropLastSeen: "2026-12-01T00:00:00Z", openreports.PropCommand: "iptables -L"}}
		for k, v := range props {
			x.Properties[k] = v
		}
		l := leanOf(x)
		it, ok := resultItem("shop", &l, &Skipped{})
		if !ok {
			t.Fatalf("result %+v not read", x)
		}
		return it
	}
	for _, tc := range []struct {
		name      string
		it        Item
		fails     bool
		readiness string
	}{
		{"unclassified rules", result(openreports.RuleUnclassified, nil), true, findings.ReadinessUnknown},
		{"a cut look", result(openreports.RuleUnclassified, map[string]string{openreports.PropTruncated: "true"}), true, findings.ReadinessUnknown},
		{"a failed command", result(openreports.RuleFailedCommand, nil), false, findings.ReadinessReady},
		// An earlier read's native result, no counts, with a cut look's
		// sighting (the writer keeps the graver result): a look.
		{"a read's result, cut since", result(findings.ImpactNative, map[string]string{openreports.PropTruncated: "true"}), true, findings.ReadinessUnknown},
	} {
		gs := GroupItems([]Item{tc.it}, nil)
		if failing := Judge(gs, FailBreaks); failing != tc.fails {
			t.Errorf("%s: failing %v, want %v (groups %+v)", tc.name, failing, tc.fails, gs)
		}
		if rows := ByNode(gs, nil, DefaultPoolLabel); len(rows) != 1 || rows[0].Readiness != tc.readiness {
			t.Errorf("%s: by node %+v, want %s", tc.name, rows, tc.readiness)
		}
	}
}

// TestLookWithCommandFromFiles: the agent names on a scan's record the
// command that made it look; a look that held rules of no known level
// counts nothing by level beside it, and read as the command's own
// finding (no rules): the gate passed and the node was ready, where the
// node label said unknown.
//
// The look after a failed command (a legacy restore that failed half way)
// names that command, FAILED: its Event read back as the failed command's
// own, with no rules (helper-108's review), until the summary said it is
// a look.
func TestLookWithCommandFromFiles(t *testing.T) {
	rec := findings.Record{Time: t0, Node: "node-a", Pod: findings.Pod{Namespace: "shop", Name: "web-1", UID: "u1"}, State: findings.StatePresent,
		Source: "watch", Nft: findings.Nft{Tables: []string{"ip filter"}, Rules: 1}, Fingerprint: "f1",
		Exec: &findings.Exec{Argv: []string{"iptables-legacy", "-F"}, Backend: "legacy", Operation: "write", Exited: true}}
	failed := rec
	failed.Exec = &findings.Exec{Argv: []string{"iptables-legacy-restore"}, Backend: "legacy", Operation: "write", Exited: true, ExitCode: 1, Failed: true}
	event := func(rec findings.Record) Item {
		doc, _ := json.Marshal(map[string]any{"kind": "EventList", "items": []any{eventOf(rec)}})
		var sk Skipped
		its, err := ReadEvents(bytes.NewReader(doc), "events.json", &sk)
		if err != nil || len(its) != 1 {
			t.Fatalf("events: %+v, %v", its, err)
		}
		return its[0]
	}
	for _, tc := range []struct {
		name string
		item Item
	}{
		{"findings file", itemOf(rec, "findings")},
		{"Event", event(rec)},
		{"findings file, after a failed command", itemOf(failed, "findings")},
		{"Event, after a failed command", event(failed)},
	} {
		gs := GroupItems([]Item{tc.item}, nil)
		if !Judge(gs, FailBreaks) {
			t.Errorf("%s: a look of rules of no known level passed --fail-on breaks (groups %+v)", tc.name, gs)
		}
		if rows := ByNode(gs, nil, DefaultPoolLabel); len(rows) != 1 || rows[0].Readiness != findings.ReadinessUnknown {
			t.Errorf("%s: by node %+v, want unknown", tc.name, rows)
		}
	}
}
