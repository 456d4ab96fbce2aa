package openreports_test

import (
	"testing"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// partialStep is one record of a sequence and the result it must leave.
type partialStep struct {
	what      string
	rec       findings.Record
	rule      string
	truncated bool
	errored   bool
	rulesOf   int // the step whose rule counts the result shows
}

// checkPartial writes steps in order, each a minute after the one before,
// and checks the one result read back after each.
func checkPartial(t *testing.T, steps []partialStep, write func(findings.Record) error, read func() openreportsv1alpha1.ReportResult) {
	t.Helper()
	base := time.Now().UTC().Truncate(time.Second).Add(-time.Hour)
	var rules []string
	for i, s := range steps {
		s.rec.Time = base.Add(time.Duration(i) * time.Minute)
		if err := write(s.rec); err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		x := read()
		rules = append(rules, x.Properties[openreports.PropRules])
		v := openreports.VerdictOf(findings.Record{State: findings.StatePresent, Worst: s.rule, Nft: findings.Nft{Rules: 1}})
		if s.rule == openreports.RuleUnknown {
			v = openreports.VerdictOf(findings.Record{State: findings.StateUnknown})
		}
		if x.Rule != s.rule || x.Result != v.Result || x.Severity != v.Severity {
			t.Errorf("%s: result %s %s %s, want %s %s %s", s.what, x.Rule, x.Result, x.Severity, s.rule, v.Result, v.Severity)
		}
		if got := x.Properties[openreports.PropTruncated] == "true"; got != s.truncated {
			t.Errorf("%s: truncated %v, want %v", s.what, got, s.truncated)
		}
		if got := x.Properties[openreports.PropError] != ""; got != s.errored {
			t.Errorf("%s: error %q, want one: %v", s.what, x.Properties[openreports.PropError], s.errored)
		}
		if want := s.rec.Time.Format(time.RFC3339); x.Properties[openreports.PropLastSeen] != want {
			t.Errorf("%s: last seen %s, want this look's %s", s.what, x.Properties[openreports.PropLastSeen], want)
		}
		if x.Properties[openreports.PropRules] != rules[s.rulesOf] {
			t.Errorf("%s: rules %q, want step %d's %q", s.what, x.Properties[openreports.PropRules], s.rulesOf, rules[s.rulesOf])
		}
	}
}

// partialSteps is the sequence for a subject whose whole looks are
// legacy (breaks) and native (warn).
func partialSteps(legacy, native func() findings.Record) []partialStep {
	truncated := native()
	truncated.Truncated = true
	unknown := findings.Record{State: findings.StateUnknown, Error: "inspect: the x_tables lock stayed busy", Truncated: true}
	merge := func(r findings.Record) findings.Record {
		// A record's subject and identity are its sequence's.
		base := native()
		base.State, base.Error, base.Truncated = r.State, r.Error, r.Truncated
		base.Nft, base.Legacy, base.Impact, base.Worst, base.Examples, base.Vendors = r.Nft, r.Legacy, r.Impact, r.Worst, r.Examples, r.Vendors
		return base
	}
	return []partialStep{
		// A first look cut short that saw native rules alone is not
		// native: what it did not see may be legacy (helper-101 #2).
		{what: "first look, truncated with native rules alone", rec: truncated, rule: openreports.RuleUnknown, truncated: true, rulesOf: 0},
		{what: "legacy look", rec: legacy(), rule: findings.ImpactLegacy, rulesOf: 1},
		{what: "truncated look with native rules alone", rec: truncated, rule: findings.ImpactLegacy, truncated: true, rulesOf: 1},
		{what: "unknown look", rec: merge(unknown), rule: findings.ImpactLegacy, truncated: true, errored: true, rulesOf: 1},
		{what: "whole native look", rec: native(), rule: findings.ImpactNative, rulesOf: 4},
		{what: "unknown look after native", rec: merge(unknown), rule: openreports.RuleUnknown, truncated: true, errored: true, rulesOf: 5},
		{what: "truncated look after native", rec: truncated, rule: openreports.RuleUnknown, truncated: true, rulesOf: 6},
		{what: "whole legacy look", rec: legacy(), rule: findings.ImpactLegacy, rulesOf: 7},
	}
}

// TestPartialLookKeepsWorse: a pod seen with legacy rules that then
// keeps the x_tables lock busy gives a truncated look holding its native
// rules alone (or an unknown one): its Report's result turned from fail
// high to warn low (or error), the pod hiding what breaks from Policy
// Reporter while the node label kept it (helper-86 #4). A look that could
// not see everything now keeps a graver result, with its own sighting,
// error and truncated mark, until a whole look replaces it; a partial
// look graver than the result it meets still replaces it. The node's
// ClusterReport the same.
func TestPartialLookKeepsWorse(t *testing.T) {
	c, rc, pods := start(t)
	ctx := kubetest.Ctx(t)
	web := pods["web-7c9-aaaaa"].Pod
	w := openreports.New(c.Client(), rc, "node-a")
	var name string
	checkPartial(t, partialSteps(
		func() findings.Record { return record(web, findings.StatePresent, 2, 0, 3) },
		func() findings.Record { return record(web, findings.StatePresent, 0, 0, 3) },
	), func(rec findings.Record) error {
		res, err := w.Write(ctx, rec)
		if err == nil && res.Outcome != openreports.Written {
			t.Fatalf("Write = %+v", res)
		}
		name = res.Name
		return err
	}, func() openreportsv1alpha1.ReportResult {
		r := get(t, rc, "shop", name)
		if len(r.Results) != 1 {
			t.Fatalf("%d results, want the pod's one: %+v", len(r.Results), r.Results)
		}
		return r.Results[0]
	})

	c.CRD(t, clusterCRDPath, openreportsv1alpha1.SchemeGroupVersion.String(), "clusterreports")
	nw := openreports.New(c.Client(), rc, "node-a")
	nodeLook := func(legacy int) findings.Record {
		rec := nodeRecord("node-a")
		rec.Impact, rec.Worst = findings.Impact{Native: 1}, findings.ImpactNative
		if legacy > 0 {
			rec.Legacy, rec.Impact.Legacy, rec.Worst = findings.Legacy{Rules: legacy, Tables: []string{"ip filter"}}, legacy, findings.ImpactLegacy
		}
		return rec
	}
	checkPartial(t, partialSteps(func() findings.Record { return nodeLook(2) }, func() findings.Record { return nodeLook(0) }),
		func(rec findings.Record) error {
			_, err := nw.Write(ctx, rec)
			return err
		}, func() openreportsv1alpha1.ReportResult {
			cr, err := rc.OpenreportsV1alpha1().ClusterReports().Get(ctx, openreports.NodeReportName("node-a"), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(cr.Results) != 1 {
				t.Fatalf("%d node results, want one: %+v", len(cr.Results), cr.Results)
			}
			return cr.Results[0]
		})
}
