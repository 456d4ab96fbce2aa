package events

import (
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestPodEventName(t *testing.T) {
	base := findingstest.Sample()
	other := func(f func(*findings.Record)) findings.Record { r := findingstest.Sample(); f(&r); return r }
	cases := []struct {
		name       string
		rec        findings.Record
		sameAsBase bool
		prefix     string
	}{
		{name: "same finding later", rec: other(func(r *findings.Record) { r.ContainerID = "other"; r.Container = "app" }), sameAsBase: true, prefix: "cart-7d9f.iptalert-"},
		{name: "other fingerprint", rec: other(func(r *findings.Record) { r.Fingerprint = "aaaa" }), prefix: "cart-7d9f.iptalert-"},
		{name: "other sandbox", rec: other(func(r *findings.Record) { r.SandboxID = "x" }), prefix: "cart-7d9f.iptalert-"},
		{name: "other uid", rec: other(func(r *findings.Record) { r.Pod.UID = "u2" }), prefix: "cart-7d9f.iptalert-"},
		{name: "longest pod name", rec: other(func(r *findings.Record) { r.Pod.Name = strings.Repeat("a", 253) }), prefix: strings.Repeat("a", 10)},
		{name: "hostile pod name", rec: other(func(r *findings.Record) { r.Pod.Name = "-.A_B..c/..-" }), prefix: "a-b.c"},
		{name: "empty pod name", rec: other(func(r *findings.Record) { r.Pod.Name = "" }), prefix: "pod.iptalert-"},
	}
	baseName := PodEventName(base)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := PodEventName(tc.rec)
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Errorf("name %q is not a DNS subdomain: %v", got, errs)
			}
			if got != PodEventName(tc.rec) {
				t.Errorf("name is not deterministic")
			}
			if (got == baseName) != tc.sameAsBase {
				t.Errorf("name %q vs base %q: same=%v, want %v", got, baseName, got == baseName, tc.sameAsBase)
			}
			if !strings.HasPrefix(got, tc.prefix) {
				t.Errorf("name %q does not start with %q", got, tc.prefix)
			}
		})
	}
}

func TestNodeEventName(t *testing.T) {
	a := NodeEventName("worker-1.example.com", "f1")
	if errs := validation.IsDNS1123Subdomain(a); len(errs) > 0 {
		t.Fatalf("name %q is not a DNS subdomain: %v", a, errs)
	}
	if b := NodeEventName("worker-1.example.com", "f2"); a == b {
		t.Errorf("two fingerprints give one name %q", a)
	}
	if c := NodeEventName("worker-2.example.com", "f1"); a == c {
		t.Errorf("two nodes give one name %q", a)
	}
}
