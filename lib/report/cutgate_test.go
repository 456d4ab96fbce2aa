package report

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
)

// TestCutUnseenGateBlind: a Report that left pods out (its cut note) read
// without its namespace's Events (--source reports) leaves a --fail-on
// gate blind, exit 2, since a pod left out may fail it; read with them
// (--source auto) it is not, the Events standing for those pods.
func TestCutUnseenGateBlind(t *testing.T) {
	report := openreportsv1alpha1.Report{
		TypeMeta:   metav1.TypeMeta{APIVersion: "openreports.io/v1alpha1", Kind: "Report"},
		ObjectMeta: metav1.ObjectMeta{Name: "iptables-deployment-web", Namespace: "shop", Labels: map[string]string{openreports.ManagedByLabel: openreports.ManagedBy}},
		Results: []openreportsv1alpha1.ReportResult{
			{Source: openreports.Source, Rule: findings.ImpactNative, Result: "warn",
				Subjects:   []corev1.ObjectReference{{Kind: "Pod", Namespace: "shop", Name: "web-1", UID: "u1"}},
				Properties: map[string]string{openreports.PropOwner: "Deployment/web", openreports.PropNodes: "node-a", openreports.PropLastSeen: "2026-03-01T12:00:00Z"}},
			{Source: openreports.Source, Rule: openreports.CutRule, Result: "skip", Properties: map[string]string{"cut": "3"}},
		},
	}
	reports, err := json.Marshal(map[string]any{"kind": "ReportList", "apiVersion": "openreports.io/v1alpha1", "metadata": map[string]any{}, "items": []any{report}})
	if err != nil {
		t.Fatal(err)
	}
	eventsRead := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/openreports.io/v1alpha1":
			_, _ = w.Write([]byte(`{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"openreports.io/v1alpha1","resources":[{"name":"reports","singularName":"report","namespaced":true,"kind":"Report","verbs":["list"]}]}`))
		case "/apis/openreports.io/v1alpha1/reports":
			_, _ = w.Write(reports)
		case "/api/v1/events":
			// The pods left out had no Event (expired, say): none.
			eventsRead = true
			_, _ = w.Write([]byte(`{"kind":"EventList","apiVersion":"v1","metadata":{},"items":[]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	connect := func() (Cluster, error) { return Connect(&rest.Config{Host: srv.URL}, "", "") }

	// Origin.From names events only when they gave an item: the Events
	// listed are what tells the sources apart here.
	for _, tc := range []struct {
		source string
		blind  bool
	}{
		{SourceReports, true},
		{SourceAuto, false},
	} {
		eventsRead = false
		r, err := Read(context.Background(), Inputs{Source: tc.source, FailOn: FailBreaks, AllNamespaces: true, Connect: connect})
		if err != nil {
			t.Fatalf("--source %s: %v", tc.source, err)
		}
		if eventsRead == tc.blind {
			t.Errorf("--source %s: Events listed %v", tc.source, eventsRead)
		}
		if r.Failing || len(r.Groups) != 1 || r.Skipped.Cut != 3 {
			t.Errorf("--source %s: failing %v, %d groups, %+v; want one native workload passing, 3 cut", tc.source, r.Failing, len(r.Groups), r.Skipped)
		}
		why := r.GateBlind()
		if !tc.blind {
			if why != "" || r.Skipped.CutUnseen != 0 {
				t.Errorf("--source %s, Events read: gate blind (%+v): %s", tc.source, r.Skipped, why)
			}
			continue
		}
		if r.Skipped.CutUnseen != 3 || strings.Join(r.Skipped.CutUnseenIn, ",") != "shop" {
			t.Errorf("--source %s: skipped %+v, want 3 cut unseen in shop", tc.source, r.Skipped)
		}
		for _, want := range []string{"3 results were left out", "namespaces shop", "--source reports", "--fail-on breaks", "--source auto", "findings files"} {
			if !strings.Contains(why, want) {
				t.Errorf("--source %s: gate blind says %q, want it to say %q", tc.source, why, want)
			}
		}
		if s := summary(r); !strings.Contains(s, "namespaces shop") {
			t.Errorf("--source %s: summary does not name the namespace:\n%s", tc.source, s)
		}
		// Under --fail-on never nothing gates: nothing is blind.
		r.FailOn = FailNever
		if why := r.GateBlind(); why != "" {
			t.Errorf("--fail-on never blind: %s", why)
		}
	}
	// Over several clusters each one's namespaces are named with its
	// context, and the gate is as blind.
	members := []Member{{"east", connect}, {"west", connect}}
	r, err := ReadFleet(context.Background(), Inputs{Source: SourceReports, FailOn: FailBreaks, AllNamespaces: true}, members, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if r.Skipped.CutUnseen != 6 || strings.Join(r.Skipped.CutUnseenIn, ",") != "shop (context east),shop (context west)" || r.GateBlind() == "" {
		t.Errorf("fleet: %+v, blind %q", r.Skipped, r.GateBlind())
	}
}

// TestJUnitGateBlind: a gate that cannot pass what it read (exit 2) is an
// error case of the JUnit suite, so a CI job reading the suite does not
// show it green; not without --fail-on.
func TestJUnitGateBlind(t *testing.T) {
	for _, tc := range []struct {
		failOn string
		want   bool
	}{{FailBreaks, true}, {FailUnexpected, true}, {FailNever, false}} {
		r := Report{FailOn: tc.failOn, Skipped: Skipped{Cut: 3, CutUnseen: 3, CutUnseenIn: []string{"shop"}}}
		var b strings.Builder
		if err := Write(&b, r, "junit"); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if got := strings.Contains(out, `type="GateBlind"`) && strings.Contains(out, `errors="1"`) && strings.Contains(out, "shop"); got != tc.want {
			t.Errorf("--fail-on %s: a GateBlind error case %v, want %v:\n%s", tc.failOn, got, tc.want, out)
		}
	}
}

// TestSummaryGateBlind: the text, Markdown and HTML outputs say the gate
// cannot pass (exit 2) beside a failing count of 0: a file read without
// the run's stderr looked like a pass. Not without --fail-on, nor when
// the gate can pass.
func TestSummaryGateBlind(t *testing.T) {
	for _, tc := range []struct {
		name    string
		failOn  string
		skipped Skipped
		want    bool
	}{
		{"cut unseen", FailBreaks, Skipped{Cut: 3, CutUnseen: 3, CutUnseenIn: []string{"shop"}}, true},
		{"malformed", FailUnexpected, Skipped{Malformed: 2}, true},
		{"never", FailNever, Skipped{Malformed: 2}, false},
		{"seen", FailBreaks, Skipped{Cut: 3}, false},
	} {
		r := Report{FailOn: tc.failOn, Skipped: tc.skipped}
		for _, format := range []string{"text", "markdown", "html"} {
			var b strings.Builder
			if err := Write(&b, r, format); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			if got := strings.Contains(out, "cannot pass this report (exit 2)") && strings.Contains(out, "--fail-on "+tc.failOn); got != tc.want {
				t.Errorf("%s, %s: says the gate cannot pass %v, want %v:\n%s", tc.name, format, got, tc.want, out)
			}
		}
	}
}
