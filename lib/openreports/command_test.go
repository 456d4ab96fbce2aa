package openreports_test

import (
	"strings"
	"testing"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/lib/wording"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// commandRecord is the exec watch's own finding of a command pod ran: no
// rules; a failed legacy write refused for missing kernel support breaks.
func commandRecord(pod *corev1.Pod, failed bool, argv ...string) findings.Record {
	rec := findings.Record{
		Schema: findings.Schema, Time: findings.Now(), Container: "app", Source: findings.SourceExec,
		Pod:   findings.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)},
		State: findings.StatePresent, Fingerprint: "exec-" + strings.Join(argv, " "),
		Exec: &findings.Exec{Argv: argv, Binary: "/usr/sbin/xtables-legacy-multi", Tool: "iptables", Backend: "legacy",
			Operation: "read", Command: "-L", Table: "filter", Exited: true},
	}
	if failed {
		rec.Exec.Operation, rec.Exec.Command, rec.Exec.Chain = "write", "-A", "INPUT"
		rec.Exec.ExitCode, rec.Exec.Failed, rec.Exec.MissingKernelSupport = 3, true, true
		rec.Worst = findings.ImpactLegacy
	}
	return rec
}

// TestCommandMerged: a command's own finding (no rules) was dropped as
// "no usage", so a legacy write the kernel refused (the RHEL 10 breakage
// itself) never reached the Reports, which outlive its Event. It now joins
// the pod's one result: the rule result stays, the command is added, and
// the level is the worse of both; a later look at the rules keeps the
// command seen. A pod with no result gets the command's own.
func TestCommandMerged(t *testing.T) {
	c, rc, pods := start(t)
	ctx := kubetest.Ctx(t)
	web, db := pods["web-7c9-aaaaa"].Pod, pods["db-0"].Pod
	w := openreports.New(c.Client(), rc, "node-a")
	one := func(name string) openreportsv1alpha1.ReportResult {
		t.Helper()
		r := get(t, rc, "shop", name)
		if len(r.Results) != 1 {
			t.Fatalf("%d results, want the pod's one: %+v", len(r.Results), r.Results)
		}
		return r.Results[0]
	}

	res, err := w.Write(ctx, record(web, findings.StatePresent, 0, 0, 3))
	if err != nil || res.Outcome != openreports.Written {
		t.Fatalf("Write native = %+v, %v", res, err)
	}
	rules := one(res.Name).Properties[openreports.PropRules]

	fail := commandRecord(web, true, "iptables-legacy", "-A", "INPUT", "-j", "DROP")
	cres, err := w.Write(ctx, fail)
	if err != nil || cres.Outcome != openreports.Written || cres.Name != res.Name {
		t.Fatalf("Write failed command = %+v, %v", cres, err)
	}
	x := one(res.Name)
	wantCmd := wording.ExecLine(fail.Exec)
	if x.Rule != findings.ImpactLegacy || x.Result != "fail" || x.Severity != "high" ||
		x.Properties[openreports.PropCommand] != wantCmd || x.Properties[openreports.PropRules] != rules {
		t.Fatalf("after the failed write: rule %s %s %s, command %q, rules %q; want legacy fail high, %q, %q",
			x.Rule, x.Result, x.Severity, x.Properties[openreports.PropCommand], x.Properties[openreports.PropRules], wantCmd, rules)
	}

	// A read afterwards neither lowers the level nor hides the failure.
	if _, err := w.Write(ctx, commandRecord(web, false, "iptables-legacy", "-L")); err != nil {
		t.Fatal(err)
	}
	if x := one(res.Name); x.Rule != findings.ImpactLegacy || x.Properties[openreports.PropCommand] != wantCmd {
		t.Errorf("after a read: rule %s, command %q", x.Rule, x.Properties[openreports.PropCommand])
	}

	// The next look at the rules says the level; the command stays.
	if _, err := w.Write(ctx, record(web, findings.StatePresent, 0, 0, 3)); err != nil {
		t.Fatal(err)
	}
	if x := one(res.Name); x.Rule != findings.ImpactNative || x.Properties[openreports.PropCommand] != wantCmd {
		t.Errorf("after a look: rule %s, command %q; want native, %q", x.Rule, x.Properties[openreports.PropCommand], wantCmd)
	}

	// A pod with no result yet gets the command's own.
	read := commandRecord(db, false, "iptables-legacy", "-L")
	dres, err := w.Write(ctx, read)
	if err != nil || dres.Outcome != openreports.Written {
		t.Fatalf("Write read = %+v, %v", dres, err)
	}
	if x := one(dres.Name); x.Rule != openreports.RuleUnclassified || x.Properties[openreports.PropCommand] != wording.ExecLine(read.Exec) {
		t.Errorf("a read alone: rule %s, command %q", x.Rule, x.Properties[openreports.PropCommand])
	}
}

// TestNodeCommandMerged: the node's ClusterReport takes a command's own
// finding the same way.
func TestNodeCommandMerged(t *testing.T) {
	c := kubetest.Start(t)
	c.CRD(t, clusterCRDPath, openreportsv1alpha1.SchemeGroupVersion.String(), "clusterreports")
	rc, err := versioned.NewForConfig(c.Config(c.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	ctx := kubetest.Ctx(t)
	w := openreports.New(c.Client(), rc, "node-a")
	if _, err := w.Write(ctx, nodeRecord("node-a")); err != nil {
		t.Fatal(err)
	}
	cmd := commandRecord(&corev1.Pod{}, true, "iptables-legacy", "-A", "INPUT", "-j", "DROP")
	cmd.Pod, cmd.Subject, cmd.Node = findings.Pod{}, findings.SubjectNode, "node-a"
	if res, err := w.Write(ctx, cmd); err != nil || res.Outcome != openreports.Written {
		t.Fatalf("Write node command = %+v, %v", res, err)
	}
	cr, err := rc.OpenreportsV1alpha1().ClusterReports().Get(ctx, openreports.NodeReportName("node-a"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cr.Results) != 1 {
		t.Fatalf("results %+v", cr.Results)
	}
	x := cr.Results[0]
	if x.Rule != findings.ImpactLegacy || x.Properties[openreports.PropCommand] != wording.ExecLine(cmd.Exec) || x.Properties[openreports.PropExample+"1"] == "" {
		t.Errorf("node result: rule %s, command %q, example %q", x.Rule, x.Properties[openreports.PropCommand], x.Properties[openreports.PropExample+"1"])
	}
	// Keyed by its level, not by its message (which holds counts).
	if id, want := x.Properties[openreports.PropResultID], openreports.ResultID(x.Rule, "node-a", cr.Name); id != want {
		t.Errorf("node result's resultID %q, want %q", id, want)
	}
}
