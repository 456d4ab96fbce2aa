package report

import (
	"strings"
	"testing"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
)

// A result reads back into the Item the writer made it from; another
// engine's result is not ours, and the cut note counts in the summary.
func TestResultItem(t *testing.T) {
	pod := []corev1.ObjectReference{{Kind: "Pod", Namespace: "elsewhere", Name: "web-1", UID: "u1"}}
	x := openreportsv1alpha1.ReportResult{Source: openreports.Source, Rule: findings.ImpactXt, Result: "fail", Subjects: pod,
		Properties: map[string]string{
			openreports.PropOwner: "Deployment/web", openreports.PropNodes: "node-a", openreports.PropRules: "legacy=0 xt=2 native=1 total=3",
			openreports.PropVendor: "istio,linkerd", openreports.PropHint: "use the CNI", openreports.PropDoc: "https://istio.io/latest/", openreports.PropLastSeen: "2026-03-01T12:00:00Z",
			openreports.PropExample + "1": "[ip nat, xt] -A OUTPUT -j REDIRECT", openreports.PropExample + "2": "-A INPUT -j ACCEPT",
		}}
	var sk Skipped
	it, ok := resultItem("shop", lean(t, x), &sk)
	want := findings.Example{Family: "ip", Table: "nat", Impact: findings.ImpactXt, Rule: "-A OUTPUT -j REDIRECT"}
	if !ok || it.Namespace != "shop" || it.Pod != "web-1" || it.PodUID != "u1" || it.Owner.String() != "Deployment/web" || it.Node != "node-a" ||
		it.Worst != findings.ImpactXt || it.Impact != (findings.Impact{Xt: 2, Native: 1}) || it.State != findings.StatePresent ||
		len(it.Vendors) != 2 || it.Vendors[0].Hint != "use the CNI" || it.Vendors[0].Doc != "https://istio.io/latest/" || it.Vendors[1].Hint != "" || it.Vendors[1].Doc != "" || it.Time.IsZero() ||
		len(it.Examples) != 2 || it.Examples[0] != want || it.Examples[1].Rule != "-A INPUT -j ACCEPT" {
		t.Errorf("item %+v", it)
	}

	// Results written since the workload came first read the same;
	// one naming no pod is malformed.
	x.Subjects = []corev1.ObjectReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "d1"}, pod[0]}
	if it, ok := resultItem("shop", lean(t, x), &sk); !ok || it.Pod != "web-1" || it.PodUID != "u1" {
		t.Errorf("workload-first result: %+v", it)
	}
	x.Subjects = x.Subjects[:1]
	if _, ok := resultItem("shop", lean(t, x), &sk); ok || sk.Malformed != 1 {
		t.Errorf("a result without a pod read: %+v", sk)
	}
	sk, x.Subjects = Skipped{}, pod
	// Mixed backends and the kernel modules read back; a name that is no
	// module's is dropped and counted.
	x.Properties[openreports.PropMixedBackends], x.Properties[openreports.PropModules] = "true", "ip_tables,xt_owner,<b>"
	if it, _ := resultItem("shop", lean(t, x), &sk); !it.MixedBackends || strings.Join(valid(it, &sk).Modules.Judged(), ",") != "ip_tables,xt_owner" || sk.Invalid != 1 {
		t.Errorf("mixed and modules: %+v, %+v", it, sk)
	}
	delete(x.Properties, openreports.PropMixedBackends)
	delete(x.Properties, openreports.PropModules)
	sk = Skipped{}

	// A Report anyone may write: a doc that is no http(s) link is dropped
	// and counted, never shown as the vendor's.
	x.Properties[openreports.PropDoc] = "javascript:alert(1)"
	if it, _ := resultItem("shop", lean(t, x), &sk); valid(it, &sk).Vendors[0].Doc != "" || sk.Invalid != 1 {
		t.Errorf("forged doc kept: %+v, %+v", valid(it, &Skipped{}).Vendors, sk)
	}
	sk = Skipped{}

	x.Rule, x.Result, x.Properties = openreports.RuleUnknown, "error", map[string]string{openreports.PropError: "inspect: busy"}
	if it, ok := resultItem("shop", lean(t, x), &sk); !ok || it.State != findings.StateUnknown || it.Error != "inspect: busy" || it.Worst != "" {
		t.Errorf("error result: %+v", it)
	}
	x.Rule, x.Result = openreports.RuleUnclassified, "warn"
	if it, _ := resultItem("shop", lean(t, x), &sk); it.Worst != "" || it.State != findings.StatePresent {
		t.Errorf("unclassified result: %+v", it)
	}
	x.Rule, x.Result = "BOGUS", "fail"
	if it, _ := resultItem("shop", lean(t, x), &sk); valid(it, &sk).Worst != "" || sk.Invalid != 1 {
		t.Errorf("bogus level: %+v, %+v", it, sk)
	}
	if _, ok := resultItem("shop", lean(t, openreportsv1alpha1.ReportResult{Source: "kyverno", Rule: findings.ImpactLegacy, Subjects: pod}), &sk); ok {
		t.Error("another engine's result read")
	}
	for cut, want := range map[string]int{"7": 7, "-3": 1, "x": 1} {
		sk = Skipped{}
		if _, ok := resultItem("shop", lean(t, openreportsv1alpha1.ReportResult{Source: openreports.Source, Rule: openreports.CutRule, Result: "skip",
			Properties: map[string]string{"cut": cut}}), &sk); ok || sk.Cut != want {
			t.Errorf("cut %q: %v, %+v", cut, ok, sk)
		}
	}
	r := Report{Skipped: Skipped{Cut: 7}}
	if s := summary(r); !strings.Contains(s, "Left out: 7 results") {
		t.Errorf("summary lacks the cut results:\n%s", s)
	}
}
