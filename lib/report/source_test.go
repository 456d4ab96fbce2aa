package report

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
)

// The cluster's sources are tried in order: one that the cluster does not
// hold gives way, any other error stops the report.
func TestReadClusterFallsBack(t *testing.T) {
	none := ClusterSource{Name: "reports", Read: func(context.Context, Cluster, *Skipped, func(Item)) error {
		return fmt.Errorf("list reports: %w", ErrNoSource)
	}}
	broken := ClusterSource{Name: "reports", Read: func(context.Context, Cluster, *Skipped, func(Item)) error {
		return errors.New("list reports: forbidden")
	}}
	evs := ClusterSource{Name: "events", Read: func(_ context.Context, c Cluster, _ *Skipped, add func(Item)) error {
		add(Item{Namespace: c.Namespace})
		return nil
	}}
	var (
		sk    Skipped
		items []Item
	)
	collect := func(it Item) { items = append(items, it) }
	from, err := ReadCluster(context.Background(), Cluster{Namespace: "shop"}, []ClusterSource{none, evs}, &sk, collect)
	if err != nil || strings.Join(from, ",") != "events" || len(items) != 1 || items[0].Namespace != "shop" {
		t.Errorf("fallback: %v, %q, %v", items, from, err)
	}
	if _, err := ReadCluster(context.Background(), Cluster{}, []ClusterSource{broken, evs}, &sk, collect); err == nil {
		t.Error("an error of a source the cluster holds was passed over")
	}
	if _, err := ReadCluster(context.Background(), Cluster{}, []ClusterSource{none}, &sk, collect); err == nil {
		t.Error("no source held, no error")
	}
}

// Each --source value reads its sources in order; a refused list names
// the verb, the resource and where, and is found through wrapping.
func TestSourcesOf(t *testing.T) {
	for src, want := range map[string]string{SourceAuto: "reports,events", SourceReports: "reports", SourceEvents: "events", SourceFiles: ""} {
		var names []string
		for _, s := range SourcesOf(src) {
			names = append(names, s.Name)
		}
		if got := strings.Join(names, ","); got != want {
			t.Errorf("SourcesOf(%q) = %q, want %q", src, got, want)
		}
	}
	api := errors.New(`reports.openreports.io is forbidden: User "x" cannot list resource "reports"`)
	for _, tc := range []struct {
		ns, want string
	}{
		{"", `list reports.openreports.io: forbidden: the credentials need "list" on "reports.openreports.io" in all namespaces (a ClusterRole bound by a ClusterRoleBinding), as packaging/rbac/report.yaml grants: ` + api.Error()},
		{"shop", `list reports.openreports.io: forbidden: the credentials need "list" on "reports.openreports.io" in namespace "shop" (a Role there is enough), as packaging/rbac/report.yaml grants: ` + api.Error()},
	} {
		err := fmt.Errorf("read cluster: %w", &ForbiddenError{Verb: "list", Resource: ResourceReports, Namespace: tc.ns, Err: api})
		fe, ok := IsForbidden(err, ResourceReports)
		if !ok || fe.Error() != tc.want || !errors.Is(err, api) {
			t.Errorf("namespace %q: %v, %v; want %q", tc.ns, ok, fe, tc.want)
		}
		if _, ok := IsForbidden(err, ResourceEvents); ok {
			t.Errorf("a refused Reports list taken for refused Events")
		}
	}
}

func TestNamespaceFilter(t *testing.T) {
	items := []Item{{Namespace: "shop"}, {Namespace: "ops"}, {Namespace: `"shop\n"`}}
	if got := InNamespace(items, "shop"); len(got) != 1 || got[0].Namespace != "shop" {
		t.Errorf("InNamespace shop: %v", got)
	}
	if got := InNamespace(items, ""); len(got) != 3 {
		t.Errorf("InNamespace all: %v", got)
	}
	for ns, ok := range map[string]bool{"": true, "shop": true, "Shop": false, "a/b": false, "shop\n": false} {
		if err := CheckNamespace(ns); (err == nil) != ok {
			t.Errorf("CheckNamespace(%q): %v", ns, err)
		}
	}
}

func TestOriginLine(t *testing.T) {
	for _, tc := range []struct {
		o    Origin
		want string
	}{
		{Origin{Cluster: "https://api:6443", Context: "ci", Namespace: "shop", From: []string{"events"}, Time: t0},
			"Report of cluster https://api:6443 (context ci), namespace shop, at 2026-03-01T12:00:00Z, from events."},
		{Origin{Cluster: "https://10.96.0.1:443", From: []string{"events"}, Time: t0},
			"Report of cluster https://10.96.0.1:443, at 2026-03-01T12:00:00Z, from events."},
		{Origin{From: []string{"files", "events-file"}, Time: t0},
			"Report at 2026-03-01T12:00:00Z, from files, events-file."},
		// A context name is the kubeconfig's: shown, never obeyed.
		{Origin{Cluster: "https://api", Context: "x\x1b[2J\u202e", From: []string{"events"}, Time: t0},
			`Report of cluster https://api (context x\x1b[2J\u202e), at 2026-03-01T12:00:00Z, from events.`},
	} {
		if got := tc.o.Line(); got != tc.want {
			t.Errorf("Line() = %q, want %q", got, tc.want)
		}
	}
}

// TestItemReadiness: what one item says of its pod, as the Event filter
// weighs it against the Report's result: a failed command's result (no
// rules) is ready, as groupReadiness has it; read as unknown, it hid an
// unknown Event of the same pod (helper-136 #1).
func TestItemReadiness(t *testing.T) {
	var sk Skipped
	x := leanResult{Ours: true, Rule: openreports.RuleFailedCommand, HasPod: true, Pod: leanSubject{Name: "p", UID: "u"}}
	x.Props.Command = "FAILED (exit 2): iptables-nft -A X"
	it, ok := resultItem("shop", &x, &sk)
	if !ok {
		t.Fatal("the failed command's result not read")
	}
	if r := itemReadiness(valid(it, &sk)); r != findings.ReadinessReady {
		t.Errorf("a failed command's result: %q, want ready", r)
	}
	for _, tc := range []struct {
		it   Item
		want string
	}{
		{Item{State: findings.StateUnknown}, findings.ReadinessUnknown},
		{Item{State: findings.StatePresent, Worst: findings.ImpactNative, Truncated: true}, findings.ReadinessUnknown},
		{Item{State: findings.StatePresent, Worst: findings.ImpactLegacy, Truncated: true}, findings.ReadinessBreaks},
		{Item{State: findings.StatePresent, Worst: findings.ImpactXt}, findings.ReadinessNeedsExtra},
		{Item{State: findings.StatePresent}, findings.ReadinessUnknown},
	} {
		if r := itemReadiness(tc.it); r != tc.want {
			t.Errorf("%+v: %q, want %q", tc.it, r, tc.want)
		}
	}
}
