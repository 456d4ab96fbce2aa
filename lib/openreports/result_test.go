package openreports

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

func TestVerdictOf(t *testing.T) {
	cases := []struct {
		name string
		rec  findings.Record
		want Verdict
	}{
		{name: "legacy", rec: findings.Record{State: findings.StatePresent, Legacy: findings.Legacy{Rules: 1}}, want: Verdict{"legacy", "fail", "high"}},
		{name: "xt", rec: findings.Record{State: findings.StatePresent, Worst: "xt", Nft: findings.Nft{Rules: 1}}, want: Verdict{"xt", "fail", "medium"}},
		{name: "native", rec: findings.Record{State: findings.StatePresent, Worst: "native", Nft: findings.Nft{Rules: 1}}, want: Verdict{"native", "warn", "low"}},
		{name: "unclassified", rec: findings.Record{State: findings.StatePresent, Nft: findings.Nft{Rules: 1}}, want: Verdict{"unclassified", "warn", "medium"}},
		{name: "unknown", rec: findings.Record{State: findings.StateUnknown, Error: "x"}, want: Verdict{"unknown", "error", "medium"}},
		// A command that failed for a reason of its own holds no rules:
		// "unclassified" said rules of a level not known.
		{name: "failed command", rec: findings.Record{State: findings.StatePresent, Source: findings.SourceExec,
			Exec: &findings.Exec{Argv: []string{"iptables", "-A", "INPUT", "--bogus"}, Operation: "write", Exited: true, ExitCode: 2, Failed: true}},
			want: Verdict{"failed-command", "warn", "medium"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := VerdictOf(tc.rec); got != tc.want {
				t.Errorf("VerdictOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A hostile pod controls names, rules and vendor hints: its result must
// stay bounded and its text escaped.
func TestResultBounded(t *testing.T) {
	evil := strings.Repeat("\x1b[2J\u202e\xff", 10000)
	rec := findings.Record{State: findings.StatePresent, Worst: "xt", Nft: findings.Nft{Rules: 9}, Container: evil, Error: evil,
		Pod: findings.Pod{Namespace: "shop", Name: "cart", UID: evil}, Fingerprint: evil,
		Writer: &findings.Writer{PID: 1, Comm: evil, PPID: 2, ParentComm: evil, Container: evil, Pod: findings.Pod{Namespace: evil, Name: evil}}}
	for range 20 {
		rec.Examples = append(rec.Examples, findings.Example{Family: "ip", Table: "nat", Rule: evil})
		rec.Vendors = append(rec.Vendors, findings.Vendor{Name: evil, Hint: evil, Doc: evil})
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart", UID: "u"}}
	x := resultOf(rec, pod, owner.Owner{Kind: "Deployment", Name: evil}, metav1.OwnerReference{}, "node-a", time.Time{})
	b, _ := json.Marshal(x)
	if len(b) > 6<<10 {
		t.Errorf("result is %d bytes", len(b))
	}
	for k, v := range x.Properties {
		if len(v) > MaxProperty || strings.ContainsAny(v, "\x1b\u202e") {
			t.Errorf("property %s: %d bytes, %q", k, len(v), v[:min(len(v), 40)])
		}
	}
	if strings.ContainsAny(x.Description, "\x1b\u202e") {
		t.Errorf("message holds control characters")
	}
	if w := x.Properties[PropWriter]; !strings.HasPrefix(w, `\x1b[2J\u202e\xff`) || !strings.Contains(w, "...") {
		t.Errorf("writer property %q: not the escaped, cut writer", w)
	}
}

// The writer's property says who made the change, as the note does; a
// record without one has none.
func TestResultWriter(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart", UID: "u"}}
	rec := findings.Record{State: findings.StatePresent, Worst: "xt", Impact: findings.Impact{Xt: 1}, Nft: findings.Nft{Rules: 1},
		Pod: findings.Pod{Namespace: "shop", Name: "cart", UID: "u"}}
	if x := resultOf(rec, pod, owner.Owner{Kind: "Deployment", Name: "cart"}, metav1.OwnerReference{}, "node-a", time.Time{}); x.Properties[PropWriter] != "" {
		t.Errorf("no writer: property %q", x.Properties[PropWriter])
	}
	rec.Writer = &findings.Writer{PID: 4242, Comm: "iptables-nft-re", Container: "istio-init", Pod: rec.Pod}
	x := resultOf(rec, pod, owner.Owner{Kind: "Deployment", Name: "cart"}, metav1.OwnerReference{}, "node-a", time.Time{})
	want := "iptables-nft-re (pid 4242) in container istio-init of pod shop/cart"
	if x.Properties[PropWriter] != want || !strings.Contains(x.Description, "Last change by "+want+".") {
		t.Errorf("writer property %q, message %q; want %q in both", x.Properties[PropWriter], x.Description, want)
	}
}

// The first vendor's doc link is a property whole, or none: a link
// escaped or cut would lead elsewhere.
func TestResultDoc(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart", UID: "u"}}
	istio := "https://istio.io/latest/news/releases/1.27.x/announcing-1.27/change-notes/"
	for _, tc := range []struct{ name, doc, want string }{
		{"link", istio, istio},
		{"none", "", ""},
		{"too long", "https://example.com/" + strings.Repeat("a", MaxProperty), ""},
		{"control characters", "https://example.com/\x1b[2J", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := findings.Record{State: findings.StatePresent, Worst: "xt", Impact: findings.Impact{Xt: 1}, Nft: findings.Nft{Rules: 1},
				Pod:     findings.Pod{Namespace: "shop", Name: "cart", UID: "u"},
				Vendors: []findings.Vendor{{Name: "istio", Hint: "use native nftables", Doc: tc.doc}, {Name: "other", Doc: "https://other.example/"}}}
			x := resultOf(rec, pod, owner.Owner{Kind: "Deployment", Name: "cart"}, metav1.OwnerReference{}, "node-a", time.Time{})
			if got, ok := x.Properties[PropDoc]; got != tc.want || ok != (tc.want != "") {
				t.Errorf("doc property %q (set %v), want %q", got, ok, tc.want)
			}
		})
	}
}

func TestBound(t *testing.T) {
	r := &openreportsv1alpha1.Report{}
	for i := range MaxResults + 10 {
		level := "native"
		if i%10 == 0 {
			level = "legacy"
		}
		v := VerdictOf(findings.Record{State: findings.StatePresent, Worst: level, Nft: findings.Nft{Rules: 1}})
		r.Results = append(r.Results, openreportsv1alpha1.ReportResult{Rule: v.Rule, Result: v.Result,
			Subjects: []corev1.ObjectReference{{Name: fmt.Sprintf("p%03d", i)}}, Properties: map[string]string{PropPodUID: fmt.Sprint(i)}})
	}
	if cut := bound(r); cut != 11 {
		t.Errorf("cut %d, want 11", cut)
	}
	if r.Summary.Fail != (MaxResults+10)/10 || r.Summary.Skip != 1 || len(r.Results) != MaxResults || r.Annotations[CutAnnotation] != "11" {
		t.Errorf("summary %+v, %d results, annotation %q", r.Summary, len(r.Results), r.Annotations[CutAnnotation])
	}
	note := func() openreportsv1alpha1.ReportResult {
		t.Helper()
		for _, x := range r.Results {
			if x.Rule == CutRule {
				return x
			}
		}
		t.Fatal("no cut note")
		return openreportsv1alpha1.ReportResult{}
	}
	// Dated (Policy Reporter shows 1970 for none) and keyed by the
	// Report: its description changes with the count.
	first := note()
	if first.Timestamp.Seconds == 0 || first.Properties[PropResultID] != ResultID(CutRule, r.Namespace, r.Name) {
		t.Errorf("cut note: timestamp %v, resultID %q", first.Timestamp, first.Properties[PropResultID])
	}
	// As if written a second before: the second bound must keep it.
	for i := range r.Results {
		if r.Results[i].Rule == CutRule {
			r.Results[i].Timestamp.Seconds--
			first.Timestamp = r.Results[i].Timestamp
		}
	}
	// Another result later: the cut note stays and the total grows.
	r.Results = append(r.Results, openreportsv1alpha1.ReportResult{Rule: "native", Result: "warn", Properties: map[string]string{PropPodUID: "new"}})
	if cut := bound(r); cut != 1 || r.Annotations[CutAnnotation] != "12" || len(r.Results) != MaxResults {
		t.Errorf("second bound: cut %d, annotation %q, %d results", cut, r.Annotations[CutAnnotation], len(r.Results))
	}
	if second := note(); second.Timestamp != first.Timestamp || second.Properties[PropResultID] != first.Properties[PropResultID] || second.Description == first.Description {
		t.Errorf("cut note after the count grew: timestamp %v, resultID %q, description %q; want the first's timestamp and resultID, a new count",
			second.Timestamp, second.Properties[PropResultID], second.Description)
	}
}

// TestResultIDLong: a key too long for a property is a hash of it whole,
// so two Reports whose long names differ at their end (kubeapi.ObjectName's
// hash) keep apart (cut, they would share one key in Policy Reporter,
// which drops the second row).
func TestResultIDLong(t *testing.T) {
	long := strings.Repeat("a", 236) // kubeapi.ObjectName's longest readable part and more
	a, b := ResultID("legacy", "uid", long+".iptalert-1111"), ResultID("legacy", "uid", long+".iptalert-2222")
	if a == b || len(a) > MaxProperty || len(b) > MaxProperty || !strings.HasPrefix(a, "legacy/") {
		t.Errorf("keys %q and %q: want two, each at most %d bytes, led by the level", a, b, MaxProperty)
	}
	if short := ResultID("xt", "uid", "r"); short != "xt/uid/r" {
		t.Errorf("short key %q", short)
	}
}

func TestName(t *testing.T) {
	long := strings.Repeat("a", 250)
	for _, tc := range []struct{ kind, name, node string }{
		{"Deployment", "web", "node-a"}, {"StatefulSet", long, long}, {"MyKind", "x.y", "n"},
	} {
		n := Name(owner.Owner{Kind: tc.kind, Name: tc.name}, tc.node)
		if msgs := validation.IsDNS1123Subdomain(n); len(msgs) > 0 {
			t.Errorf("Name(%s, %s, %s) = %q: %v", tc.kind, tc.name[:3], tc.node[:1], n, msgs)
		}
	}
	if Name(owner.Owner{Kind: "Deployment", Name: "a-b"}, "c") == Name(owner.Owner{Kind: "Deployment", Name: "a"}, "b-c") {
		t.Error("names collide")
	}
	if v := NodeLabelValue(long); len(validation.IsValidLabelValue(v)) > 0 {
		t.Errorf("node label %q invalid", v)
	}
}

// TestResultCommand (issue 28): a failed iptables command is a property,
// FAILED first, and in the message.
func TestResultCommand(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart", UID: "u"}}
	rec := findings.Record{State: findings.StatePresent, Worst: "legacy", Pod: findings.Pod{Namespace: "shop", Name: "cart", UID: "u"},
		Exec: &findings.Exec{Argv: []string{"iptables-legacy", "-t", "nat", "-A", "OUTPUT"}, Exited: true, ExitCode: 3, Failed: true, MissingKernelSupport: true}}
	x := resultOf(rec, pod, owner.Owner{Kind: "Deployment", Name: "cart"}, metav1.OwnerReference{}, "node-a", time.Time{})
	want := "FAILED (exit 3, missing kernel support): iptables-legacy -t nat -A OUTPUT"
	if x.Properties[PropCommand] != want || !strings.Contains(x.Description, want) {
		t.Errorf("command property %q, message %q; want %q in both", x.Properties[PropCommand], x.Description, want)
	}
}

// Mixed backends and the judged kernel modules are properties; a record
// without them has none.
func TestResultMixedModules(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart", UID: "u"}}
	rec := findings.Record{State: findings.StatePresent, Worst: "legacy", Impact: findings.Impact{Legacy: 1, Xt: 1}, Nft: findings.Nft{Rules: 1},
		Legacy: findings.Legacy{Rules: 1}, Pod: findings.Pod{Namespace: "shop", Name: "cart", UID: "u"}}
	x := resultOf(rec, pod, owner.Owner{Kind: "Deployment", Name: "cart"}, metav1.OwnerReference{}, "node-a", time.Time{})
	if _, ok := x.Properties[PropMixedBackends]; ok {
		t.Errorf("mixed property without mixed backends: %v", x.Properties)
	}
	if _, ok := x.Properties[PropModules]; ok {
		t.Errorf("modules property without modules: %v", x.Properties)
	}
	rec.MixedBackends = true
	rec.Modules = findings.Modules{Legacy: []string{"ip_tables", "iptable_filter"}, Xt: []string{"nf_tables", "nft_compat", "xt_owner"}, Native: []string{"nf_tables", "nft_ct"}}
	x = resultOf(rec, pod, owner.Owner{Kind: "Deployment", Name: "cart"}, metav1.OwnerReference{}, "node-a", time.Time{})
	if x.Properties[PropMixedBackends] != "true" || x.Properties[PropModules] != "ip_tables,iptable_filter,nft_compat,xt_owner" {
		t.Errorf("properties %v", x.Properties)
	}
}

// TestResultModulesWhole: a pod with legacy rules in many tables and
// families needs more module names than a property holds. Cut at 256
// bytes the list lost nft_compat and xt_CT (after ebt_*, ip6t_*, ipt_*
// by name) and its last name ended in "...", which report counts as
// forged (helper-101 #4). Whole names only, the verified ones kept.
func TestResultModulesWhole(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart", UID: "u"}}
	var legacy []string
	for _, fam := range []string{"ipt", "ip6t", "ebt"} {
		for _, m := range []string{"MASQUERADE", "REJECT", "LOG", "mark", "comment", "conntrack", "addrtype", "multiport", "owner", "set"} {
			legacy = append(legacy, fam+"_"+m)
		}
	}
	rec := findings.Record{State: findings.StatePresent, Worst: "legacy", Impact: findings.Impact{Legacy: 1, Xt: 1}, Nft: findings.Nft{Rules: 1},
		Legacy: findings.Legacy{Rules: 1}, Pod: findings.Pod{Namespace: "shop", Name: "cart", UID: "u"},
		Modules: findings.Modules{Legacy: append(legacy, "ip_tables", "ip6_tables"), Xt: []string{"nft_compat", "xt_CT", "xt_owner"}}}
	x := resultOf(rec, pod, owner.Owner{Kind: "Deployment", Name: "cart"}, metav1.OwnerReference{}, "node-a", time.Time{})
	got := x.Properties[PropModules]
	if len(got) > MaxProperty || strings.Contains(got, "...") {
		t.Errorf("modules %q: %d bytes or a cut name", got, len(got))
	}
	names := strings.Split(got, ",")
	if !slices.IsSorted(names) {
		t.Errorf("modules %q not sorted", got)
	}
	all := rec.Modules.Judged()
	for _, n := range names {
		if !slices.Contains(all, n) {
			t.Errorf("modules %q: %q is none of the record's", got, n)
		}
	}
	for _, n := range []string{"nft_compat", "xt_CT", "ip_tables", "ip6_tables"} {
		if !slices.Contains(names, n) {
			t.Errorf("modules %q: %s, which the release table verifies, left out", got, n)
		}
	}
}
