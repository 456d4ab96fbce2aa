//go:build !hookonly && !agentonly

package main

import (
	"encoding/json"
	"slices"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// TestReportContextNamespace: on a real kube-apiserver with Reports in two
// namespaces, report reads the namespace the kubeconfig context sets, as
// kubectl does; -A reads every namespace, -n another; -n with -A is a
// usage error; -o is --format.
func TestReportContextNamespace(t *testing.T) {
	c, cs, rc, owned := reportsCluster(t)
	ctx := kubetest.Ctx(t)
	kubetest.Namespace(t, cs, "tools")
	debug := kubetest.Pod(t, cs, "tools", "debug", nil, "")
	for _, p := range []struct{ ns, name, uid string }{
		{"shop", "db-0", string(owned["db-0"].Pod.UID)}, {"tools", "debug", string(debug.UID)},
	} {
		pod := owned["db-0"].Pod
		if p.ns == "tools" {
			pod = debug
		}
		rec := fwdRecord(pod, p.uid, "fp-"+p.name, "app")
		rec.State, rec.Impact, rec.Worst = findings.StatePresent, findings.Impact{Xt: 1}, findings.ImpactXt
		if res, err := openreports.New(cs, rc, "node-a").Write(ctx, rec); err != nil || res.Outcome != openreports.Written {
			t.Fatalf("write %s: %+v, %v", p.name, res, err)
		}
	}
	kc := c.Kubeconfig("admin", c.AdminToken)
	cfg, err := clientcmd.LoadFromFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Contexts[cfg.CurrentContext].Namespace = "shop"
	if err := clientcmd.WriteToFile(*cfg, kc); err != nil {
		t.Fatal(err)
	}
	namespaces := func(args ...string) ([]string, string) {
		t.Helper()
		code, out, stderr := runCmd(t, append([]string{"report", "--kubeconfig", kc, "-o", "json"}, args...)...)
		if code != 0 {
			t.Fatalf("report %v: exit %d: %s", args, code, stderr)
		}
		var r struct {
			Origin struct {
				Namespace string `json:"namespace"`
			} `json:"origin"`
			Groups []struct {
				Namespace string `json:"namespace"`
			} `json:"groups"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("report %v: %v\n%s", args, err, out)
		}
		var ns []string
		for _, g := range r.Groups {
			if !slices.Contains(ns, g.Namespace) {
				ns = append(ns, g.Namespace)
			}
		}
		slices.Sort(ns)
		return ns, r.Origin.Namespace
	}
	for _, tc := range []struct {
		args       []string
		want       []string
		originWant string
	}{
		{nil, []string{"shop"}, "shop"},
		{[]string{"-A"}, []string{"shop", "tools"}, ""},
		{[]string{"--all-namespaces"}, []string{"shop", "tools"}, ""},
		{[]string{"-n", "tools"}, []string{"tools"}, "tools"},
	} {
		if got, origin := namespaces(tc.args...); !slices.Equal(got, tc.want) || origin != tc.originWant {
			t.Errorf("report %v: namespaces %v (header %q), want %v (%q)", tc.args, got, origin, tc.want, tc.originWant)
		}
	}
	if code, _, stderr := runCmd(t, "report", "--kubeconfig", kc, "-n", "shop", "-A"); code != 2 {
		t.Errorf("-n with -A: exit %d, want 2: %s", code, stderr)
	}
}
