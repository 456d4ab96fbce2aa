//go:build !hookonly && !agentonly

package main

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
	"github.com/iptables-alerter/iptables-alerter/lib/report"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// reportsCluster starts an API server serving the Report CRD the module
// ships, with kubetest.Workloads in namespace shop, and an admin Reports
// client.
func reportsCluster(t *testing.T) (*kubetest.Cluster, kubernetes.Interface, versioned.Interface, map[string]kubetest.Owned) {
	t.Helper()
	c := kubetest.Start(t)
	cs := c.Client()
	c.CRD(t, crdFile, openreportsv1alpha1.SchemeGroupVersion.String(), "reports")
	rc, err := versioned.NewForConfig(c.Config(c.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	kubetest.Namespace(t, cs, "shop")
	return c, cs, rc, kubetest.Workloads(t, cs, "shop")
}

// reportReader is a kubeconfig for report's own service account, with
// packaging/rbac/report.yaml applied: what a CI job runs it with.
func reportReader(t *testing.T, c *kubetest.Cluster, cs kubernetes.Interface) string {
	t.Helper()
	kubetest.Namespace(t, cs, fwdNS)
	kubetest.Apply(t, cs, "../packaging/rbac/report.yaml")
	return c.Kubeconfig("report", kubetest.Token(t, cs, fwdNS, "iptables-alerter-report"))
}

// TestReportFromReports is issue 16 item 3 on a real kube-apiserver with
// the Report CRD: Reports written by the real writer for two workloads on
// two nodes are what `report` reads first (the header says so), with each
// workload's pods, nodes, worst level, vendor and hint; an unknown record
// is a row of status error. Reports anyone allowed to create them wrote
// count only with our labels, and then every value is checked and
// escaped: the bogus level refused, the rows kept their shape. A cluster
// without the CRD falls back to Events (TestReportCredentials).
func TestReportFromReports(t *testing.T) {
	c, cs, rc, owned := reportsCluster(t)
	ctx := kubetest.Ctx(t)
	// Read with report's own RBAC: it must allow listing Reports.
	kc := reportReader(t, c, cs)

	write := func(pod, node string, state findings.State, im findings.Impact) {
		t.Helper()
		p := owned[pod].Pod
		rec := fwdRecord(p, string(p.UID), "fp-"+pod, "app")
		rec.Node, rec.State = node, state
		if state == findings.StatePresent {
			rec.Impact, rec.Worst = im, im.Worst()
			rec.Vendors = []findings.Vendor{{Name: "istio", Hint: "use the Istio CNI node agent"}}
		} else {
			rec.Nft, rec.Examples, rec.Error = findings.Nft{}, nil, "inspect: deadline exceeded"
		}
		res, err := openreports.New(cs, rc, node).Write(ctx, rec)
		if err != nil || res.Outcome != openreports.Written {
			t.Fatalf("write %s: %+v, %v", pod, res, err)
		}
	}
	write("web-7c9-aaaaa", "node-a", findings.StatePresent, findings.Impact{Legacy: 1, Xt: 2})
	write("web-7c9-bbbbb", "node-b", findings.StatePresent, findings.Impact{Native: 3})
	write("db-0", "node-a", findings.StatePresent, findings.Impact{Xt: 4})
	write("once-eeeee", "node-b", findings.StateUnknown, findings.Impact{})

	// Written directly, as anyone allowed to create Reports in shop can.
	forged := func(name string, labels map[string]string, x openreportsv1alpha1.ReportResult) {
		t.Helper()
		x.Source, x.Policy, x.Result, x.Severity = openreports.Source, openreports.Policy, "fail", "high"
		_, err := rc.OpenreportsV1alpha1().Reports("shop").Create(ctx, &openreportsv1alpha1.Report{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Results: []openreportsv1alpha1.ReportResult{x}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create report %s: %v", name, err)
		}
	}
	forged("not-ours", map[string]string{"app": "x"}, openreportsv1alpha1.ReportResult{Rule: findings.ImpactLegacy,
		Subjects: []corev1.ObjectReference{{Kind: "Pod", Namespace: "shop", Name: "stranger"}}, Properties: map[string]string{openreports.PropOwner: "Deployment/stranger"}})
	forged("hostile", map[string]string{openreports.ManagedByLabel: openreports.ManagedBy, openreports.NodeLabel: "node-c"}, openreportsv1alpha1.ReportResult{
		Rule: bogusLevel,
		// The subject's namespace is not the Report's: the Report's counts.
		Subjects: []corev1.ObjectReference{{Kind: "Pod", Namespace: "kube-system", Name: "web-1" + hostile, UID: "u1"}},
		Properties: map[string]string{
			openreports.PropOwner: "Deployment\n| FORGED |/web" + hostile, openreports.PropNodes: "node-c" + hostile,
			openreports.PropVendor: "istio" + hostile, openreports.PropHint: hostile + strings.Repeat("A", 50<<10),
			openreports.PropRules:         "legacy=-5 xt=1",
			openreports.PropWriter:        "sh (pid 1)" + hostile + strings.Repeat("W", 50<<10),
			openreports.PropExample + "1": "[ip" + hostile + " nat, " + bogusLevel + "] -A OUTPUT " + hostile,
		}})

	out, code := runReportCmd(t, "--kubeconfig", kc, "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	_, r := groupsOf(t, out)
	if strings.Join(r.Origin.From, ",") != "reports" {
		t.Errorf("from %v, want reports", r.Origin.From)
	}
	got := map[string]report.Group{}
	for _, g := range r.Groups {
		if g.Namespace != "shop" {
			t.Errorf("group %s in namespace %q, want shop", g.Owner, g.Namespace)
		}
		got[g.Owner.String()] = g
	}
	web, db, once := got["Deployment/web"], got["StatefulSet/db"], got["Job/once"]
	if strings.Join(web.Pods, ",") != "web-7c9-aaaaa,web-7c9-bbbbb" || strings.Join(web.Nodes, ",") != "node-a,node-b" || web.Worst != findings.ImpactLegacy ||
		len(web.Vendors) != 1 || web.Vendors[0].Name != "istio" || web.Vendors[0].Hint != "use the Istio CNI node agent" {
		t.Errorf("web: %+v", web)
	}
	if strings.Join(db.Pods, ",") != "db-0" || strings.Join(db.Nodes, ",") != "node-a" || db.Worst != findings.ImpactXt || len(db.Examples) == 0 || db.Examples[0].Table != "nat" {
		t.Errorf("db: %+v", db)
	}
	if once.State != findings.StateUnknown {
		t.Errorf("once: %+v", once)
	}
	if _, ok := got["Deployment/stranger"]; ok {
		t.Error("a Report without our label was read")
	}
	if len(r.Groups) != 4 {
		t.Errorf("%d groups, want web, db, once and the hostile one: %v", len(r.Groups), got)
	}
	for _, f := range report.Formats {
		out, code := runReportCmd(t, "--kubeconfig", kc, "--format", f)
		if code != 0 {
			t.Errorf("%s: exit %d", f, code)
		}
		checkHostileReport(t, "reports "+f, f, out)
	}

	// -n lists one namespace: ops holds no Report of ours, so its Events
	// (none) answer.
	kubetest.Namespace(t, cs, "ops")
	out, code = runReportCmd(t, "--kubeconfig", kc, "-n", "ops", "--format", "json")
	if _, r := groupsOf(t, out); code != 0 || len(r.Groups) != 0 || strings.Join(r.Origin.From, ",") != "events" {
		t.Errorf("-n ops: exit %d, from %v, %d groups", code, r.Origin.From, len(r.Groups))
	}
}

// TestReportSourceForbidden is issue 16's decision on a real kube-apiserver
// serving the Report CRD, for a reader RBAC lets list Events but not
// Reports: report stops (exit 2) naming the permission missing (verb,
// resource, all namespaces or the one asked) and --source events, never
// a report from the Events alone; --source events is that reader's
// explicit way to them; --source reports reads the Reports only; each
// --source refuses the inputs it does not read.
func TestReportSourceForbidden(t *testing.T) {
	c, cs, rc, owned := reportsCluster(t)
	ctx := kubetest.Ctx(t)
	// A Report for web, an Event for db: which workload is listed says
	// which source was read (auto reads db's Event too: no Report is
	// about db).
	web := owned["web-7c9-aaaaa"].Pod
	rec := fwdRecord(web, string(web.UID), "fp-web", "app")
	rec.Impact, rec.Worst = findings.Impact{Xt: 1}, findings.ImpactXt
	if res, err := openreports.New(cs, rc, "node-a").Write(ctx, rec); err != nil || res.Outcome != openreports.Written {
		t.Fatalf("write report: %+v, %v", res, err)
	}
	db := owned["db-0"].Pod
	createPodEvent(t, cs, "usage-db", events.Reason, "usage", events.Summary{Node: "node-a", Owner: owner.Owner{Kind: "StatefulSet", Name: "db"},
		Pod: findings.Pod{Namespace: "shop", Name: db.Name, UID: string(db.UID)}, State: findings.StatePresent, Impact: findings.Impact{Legacy: 1}, Worst: findings.ImpactLegacy})

	// The reader may list Events in every namespace, and nothing else.
	if _, err := cs.CoreV1().ServiceAccounts("shop").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reader"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "events-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "events-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "events-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "reader", Namespace: "shop"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reader := c.Kubeconfig("reader", kubetest.Token(t, cs, "shop", "reader"))
	admin := c.Kubeconfig("admin", c.AdminToken)
	file := filepath.Join(t.TempDir(), "findings.jsonl")
	if err := (findings.Log{Path: file}).Append(ctx, rec); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		// stderr holds each of these, and lacks not.
		stderr []string
		not    string
		// from and groups of the JSON report, when code is 0.
		from, groups string
	}{
		{name: "auto, Reports forbidden", args: []string{"--kubeconfig", reader}, code: 2,
			stderr: []string{`need "list" on "reports.openreports.io" in all namespaces`, "packaging/rbac/report.yaml", "--source events", `cannot list resource "reports"`}},
		{name: "auto, -n, Reports forbidden", args: []string{"--kubeconfig", reader, "-n", "shop"}, code: 2,
			stderr: []string{`need "list" on "reports.openreports.io" in namespace "shop"`, "--source events"}},
		{name: "--source events", args: []string{"--kubeconfig", reader, "--source", "events"}, from: "events", groups: "StatefulSet/db"},
		{name: "--source reports, forbidden", args: []string{"--kubeconfig", reader, "--source", "reports"}, code: 2,
			stderr: []string{`need "list" on "reports.openreports.io" in all namespaces`}, not: "--source events"},
		{name: "--source reports", args: []string{"--kubeconfig", admin, "--source", "reports"}, from: "reports", groups: "Deployment/web"},
		{name: "auto, allowed", args: []string{"--kubeconfig", admin}, from: "reports,events", groups: "StatefulSet/db,Deployment/web"},
		{name: "--source files", args: []string{"--source", "files", file}, from: "files", groups: "Pod/" + web.Name},
		{name: "--source files, none given", args: []string{"--kubeconfig", admin, "--source", "files"}, code: 2, stderr: []string{"--source files: name findings files"}},
		{name: "--source events, a file given", args: []string{"--source", "events", file}, code: 2, stderr: []string{"--source events: reads the cluster only"}},
		{name: "--source bogus", args: []string{"--source", "bogus"}, code: 2, stderr: []string{"auto, reports, events, files"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := runCmd(t, append([]string{"report", "--format", "json"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.code, out, stderr)
			}
			for _, s := range tc.stderr {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr)
				}
			}
			if tc.not != "" && strings.Contains(stderr, tc.not) {
				t.Errorf("stderr holds %q:\n%s", tc.not, stderr)
			}
			if code != 0 {
				if out != "" {
					t.Errorf("a report printed despite exit %d:\n%s", code, out)
				}
				return
			}
			_, r := groupsOf(t, out)
			var gs []string
			for _, g := range r.Groups {
				gs = append(gs, g.Owner.String())
			}
			if strings.Join(r.Origin.From, ",") != tc.from || strings.Join(gs, ",") != tc.groups {
				t.Errorf("from %v, groups %v; want %s, %s", r.Origin.From, gs, tc.from, tc.groups)
			}
		})
	}
}

// TestReportForgedReportByNamespace: on a cluster whose forwarder posts
// Events only, one Report with our labels, written by anyone allowed to
// create Reports in their own namespace, took the whole cluster's report
// off the Events: shop's legacy pod was gone, and --fail-on breaks passed.
// The Reports now stand only for the pods and workloads they are about;
// every other one still comes from its Events, and Origin.From says both.
func TestReportForgedReportByNamespace(t *testing.T) {
	c, cs, rc, owned := reportsCluster(t)
	ctx := kubetest.Ctx(t)
	db := owned["db-0"].Pod
	createPodEvent(t, cs, "usage-db", events.Reason, "usage", events.Summary{Node: "node-a", Owner: owner.Owner{Kind: "StatefulSet", Name: "db"},
		Pod: findings.Pod{Namespace: "shop", Name: db.Name, UID: string(db.UID)}, State: findings.StatePresent, Impact: findings.Impact{Legacy: 1}, Worst: findings.ImpactLegacy})
	kubetest.Namespace(t, cs, "tenant")
	_, err := rc.OpenreportsV1alpha1().Reports("tenant").Create(ctx, &openreportsv1alpha1.Report{
		ObjectMeta: metav1.ObjectMeta{Name: "decoy", Labels: map[string]string{openreports.ManagedByLabel: openreports.ManagedBy, openreports.NodeLabel: "node-a"}},
		Results: []openreportsv1alpha1.ReportResult{{Source: openreports.Source, Policy: openreports.Policy, Result: "pass", Severity: "info", Rule: findings.ImpactNative,
			Subjects:   []corev1.ObjectReference{{Kind: "Pod", Namespace: "tenant", Name: "quiet", UID: "u-quiet"}},
			Properties: map[string]string{openreports.PropOwner: "Deployment/quiet", openreports.PropRules: "native=1"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// An Event in tenant of a workload the decoy is not about stays: a
	// decoy Report hid its namespace's other workloads.
	createPodEvent(t, cs, "usage-tenant", events.Reason, "usage", events.Summary{Node: "node-a", Owner: owner.Owner{Kind: "Deployment", Name: "hidden"},
		Pod: findings.Pod{Namespace: "tenant", Name: "hidden-1", UID: "u-hidden"}, State: findings.StatePresent, Impact: findings.Impact{Legacy: 1}, Worst: findings.ImpactLegacy})

	// A Report in the nodes' Events namespace hides the Events of its
	// own workloads' pods alone, never the nodes'.
	_, err = rc.OpenreportsV1alpha1().Reports(events.NodeEventNamespace).Create(ctx, &openreportsv1alpha1.Report{
		ObjectMeta: metav1.ObjectMeta{Name: "default-pods", Labels: map[string]string{openreports.ManagedByLabel: openreports.ManagedBy, openreports.NodeLabel: "node-a"}},
		Results: []openreportsv1alpha1.ReportResult{{Source: openreports.Source, Policy: openreports.Policy, Result: "pass", Severity: "info", Rule: findings.ImpactNative,
			Subjects:   []corev1.ObjectReference{{Kind: "Pod", Namespace: events.NodeEventNamespace, Name: "web-1", UID: "u-web"}},
			Properties: map[string]string{openreports.PropOwner: "Deployment/web", openreports.PropRules: "native=1"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	createPodEvent(t, cs, "usage-default", events.Reason, "usage", events.Summary{Node: "node-a", Owner: owner.Owner{Kind: "Deployment", Name: "hidden-too"},
		Pod: findings.Pod{Namespace: events.NodeEventNamespace, Name: "hidden-2", UID: "u-hidden-2"}, State: findings.StatePresent, Impact: findings.Impact{Legacy: 1}, Worst: findings.ImpactLegacy})
	_, err = cs.EventsV1().Events(events.NodeEventNamespace).Create(ctx, &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "usage-node-b", Namespace: events.NodeEventNamespace,
			Annotations: map[string]string{events.SubjectAnnotation: string(findings.SubjectNode),
				events.SummaryAnnotation: events.Summary{Node: "node-b", State: findings.StatePresent, Impact: findings.Impact{Legacy: 1}, Worst: findings.ImpactLegacy}.JSON()}},
		EventTime: metav1.NewMicroTime(time.Now()), ReportingController: events.Controller, ReportingInstance: "node-b",
		Action: events.Action, Reason: events.Reason, Type: corev1.EventTypeWarning, Note: "usage",
		Regarding: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: "node-b"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	kc := reportReader(t, c, cs)
	out, code := runReportCmd(t, "--kubeconfig", kc, "--format", "json", "--fail-on", "breaks")
	if code != 1 {
		t.Errorf("--fail-on breaks: exit %d, want 1 (shop's db breaks)\n%s", code, out)
	}
	_, r := groupsOf(t, out)
	if got := strings.Join(r.Origin.From, ","); got != "reports,events" {
		t.Errorf("from %q, want reports,events", got)
	}
	var gs []string
	for _, g := range r.Groups {
		gs = append(gs, g.Namespace+"/"+g.Owner.String())
	}
	slices.Sort(gs)
	if got := strings.Join(gs, " "); got != "/Node/node-b default/Deployment/hidden-too default/Deployment/web shop/StatefulSet/db tenant/Deployment/hidden tenant/Deployment/quiet" {
		t.Errorf("groups %q, want node-b, shop's db and the workloads no Report is about from their Events, default's and tenant's Reports' from them", got)
	}
}

// TestReportCutReportReadsEvents: a Report keeps at most MaxResults-1
// pods. Under auto, a namespace whose Report left results out is read from
// its Events too: the pod cut from the Report shows from its Event, a pod
// in both counts once, and the cut stays counted. A namespace whose Report
// left nothing out keeps hidden the Events of the pods its Report holds
// (web-1's), not one of a pod no Report holds (web-2's).
func TestReportCutReportReadsEvents(t *testing.T) {
	c, cs, rc, _ := reportsCluster(t)
	ctx := kubetest.Ctx(t)
	result := func(ns, pod, level, rules string) openreportsv1alpha1.ReportResult {
		return openreportsv1alpha1.ReportResult{Source: openreports.Source, Policy: openreports.Policy, Result: "fail", Severity: "high", Rule: level,
			Subjects:   []corev1.ObjectReference{{Kind: "Pod", Namespace: ns, Name: pod, UID: types.UID("u-" + pod)}},
			Properties: map[string]string{openreports.PropOwner: "Deployment/web", openreports.PropRules: rules}}
	}
	for _, ns := range []string{"crowd", "tidy"} {
		kubetest.Namespace(t, cs, ns)
		results := []openreportsv1alpha1.ReportResult{result(ns, "web-1", findings.ImpactNative, "native=1")}
		if ns == "crowd" {
			results = append(results, openreportsv1alpha1.ReportResult{Source: openreports.Source, Policy: openreports.Policy, Rule: openreports.CutRule,
				Category: openreports.Category, Result: "skip", Severity: "info", Properties: map[string]string{"cut": "1"}})
		}
		_, err := rc.OpenreportsV1alpha1().Reports(ns).Create(ctx, &openreportsv1alpha1.Report{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{openreports.ManagedByLabel: openreports.ManagedBy, openreports.NodeLabel: "node-a"}},
			Results:    results}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// web-1 is in the Report too; web-2 only in its Event.
		for _, p := range []struct {
			name   string
			impact findings.Impact
			worst  string
		}{{"web-1", findings.Impact{Native: 1}, findings.ImpactNative}, {"web-2", findings.Impact{Legacy: 1}, findings.ImpactLegacy}} {
			createPodEvent(t, cs, "usage-"+p.name, events.Reason, "usage", events.Summary{Node: "node-a", Owner: owner.Owner{Kind: "Deployment", Name: "web"},
				Pod: findings.Pod{Namespace: ns, Name: p.name, UID: "u-" + p.name}, State: findings.StatePresent, Impact: p.impact, Worst: p.worst})
		}
	}

	kc := reportReader(t, c, cs)
	out, _ := runReportCmd(t, "--kubeconfig", kc, "--format", "json")
	lines, r := groupsOf(t, out)
	if got := strings.Join(lines, " "); got != "crowd/Deployment/web pods=web-1,web-2 nodes=node-a tidy/Deployment/web pods=web-1,web-2 nodes=node-a" {
		t.Errorf("groups %q, want crowd's web with the pod its Report left out (from its Event), tidy's with the pod no Report holds", got)
	}
	for _, g := range r.Groups {
		if g.Namespace == "crowd" && (g.Impact != findings.Impact{Native: 1, Legacy: 1} || g.Worst != findings.ImpactLegacy) {
			t.Errorf("crowd's web: impact %+v, worst %q; want each pod once (native 1, legacy 1), worst legacy", g.Impact, g.Worst)
		}
	}
	if r.Skipped.Cut != 1 || strings.Join(r.Origin.From, ",") != "reports,events" {
		t.Errorf("cut %d from %v, want 1 from reports,events", r.Skipped.Cut, r.Origin.From)
	}

	// A gate sees web-2 from its Event and fails it; reading the Reports
	// alone, it cannot see web-2 and says so (exit 2, never 0), naming
	// the namespace whose Report left it out.
	if _, code := runReportCmd(t, "--kubeconfig", kc, "--fail-on", "breaks"); code != 1 {
		t.Errorf("--fail-on breaks: exit %d, want 1 (crowd's web-2 from its Event)", code)
	}
	code, out, stderr := runCmd(t, "report", "--kubeconfig", kc, "--source", "reports", "--fail-on", "breaks", "--format", "json")
	if _, r = groupsOf(t, out); code != 2 || r.Skipped.CutUnseen != 1 || !strings.Contains(stderr, "namespaces crowd)") || !strings.Contains(stderr, "--source auto") {
		t.Errorf("--source reports --fail-on breaks: exit %d, skipped %+v, stderr %q; want 2 naming crowd", code, r.Skipped, stderr)
	}
}

// TestReportRefusedReportReadsEvents (helper-132 #1, helper-135 #1): a
// namespace holding a Report of ours had all its Events left out, so a
// workload whose Report was refused (a quota, an admission policy, Reports
// off by RBAC on one node) was in no input: its Event alone says it
// breaks, and --fail-on breaks passed. The Event of a pod no Report holds
// is read now (once, its Report's; web on node-b, whose forwarder wrote
// none, beside web's Report from node-a), and one that says worse than
// its pod's result stands while it lives, as a posted look never clears
// another (db: legacy an hour ago, native in its Report now).
func TestReportRefusedReportReadsEvents(t *testing.T) {
	c, cs, rc, owned := reportsCluster(t)
	ctx := kubetest.Ctx(t)
	legacyEvent := func(name string, o owner.Owner, p *corev1.Pod) {
		t.Helper()
		createPodEvent(t, cs, name, events.Reason, "usage", events.Summary{Node: p.Spec.NodeName, Owner: o,
			Pod: findings.Pod{Namespace: "shop", Name: p.Name, UID: string(p.UID)}, State: findings.StatePresent, Impact: findings.Impact{Legacy: 1}, Worst: findings.ImpactLegacy})
	}
	native := func(p *corev1.Pod) {
		t.Helper()
		rec := fwdRecord(p, string(p.UID), "fp-"+p.Name, "app")
		rec.Node, rec.Impact, rec.Worst = p.Spec.NodeName, findings.Impact{Native: 1}, findings.ImpactNative
		if res, err := openreports.New(cs, rc, p.Spec.NodeName).Write(ctx, rec); err != nil || res.Outcome != openreports.Written {
			t.Fatalf("write %s: %+v, %v", p.Name, res, err)
		}
	}
	// db's older Event said legacy; its Report, written after, native.
	db := owned["db-0"].Pod
	legacyEvent("usage-db", owner.Owner{Kind: "StatefulSet", Name: "db"}, db)
	native(db)
	// web's Report from node-a; node-b's forwarder posted an Event only.
	native(owned["web-7c9-aaaaa"].Pod)
	legacyEvent("usage-web-b", owner.Owner{Kind: "Deployment", Name: "web"}, owned["web-7c9-bbbbb"].Pod)
	// once's Report was refused: its Event alone.
	legacyEvent("usage-once", owner.Owner{Kind: "Job", Name: "once"}, owned["once-eeeee"].Pod)

	kc := reportReader(t, c, cs)
	out, code := runReportCmd(t, "--kubeconfig", kc, "--format", "json", "--fail-on", "breaks")
	if code != 1 {
		t.Errorf("--fail-on breaks: exit %d, want 1 (web and once break, by their Events)\n%s", code, out)
	}
	_, r := groupsOf(t, out)
	got := map[string]string{}
	for _, g := range r.Groups {
		got[g.Namespace+"/"+g.Owner.String()] = g.Worst
	}
	want := map[string]string{"shop/StatefulSet/db": findings.ImpactLegacy, "shop/Deployment/web": findings.ImpactLegacy, "shop/Job/once": findings.ImpactLegacy}
	if !maps.Equal(got, want) {
		t.Errorf("groups %v, want %v", got, want)
	}
}

// TestReportReadsNodeClusterReports (helper-132 #2): a node's own results
// (node mode) are in its ClusterReport, which outlives the node's Event
// (an hour at most): report read the Events alone for nodes, so once the
// Event expired a node with legacy rules of its own passed --fail-on
// breaks, and --source reports never saw it. Read with report's RBAC,
// with a namespaced Report of ours beside it and without one.
func TestReportReadsNodeClusterReports(t *testing.T) {
	c, cs, rc, owned := reportsCluster(t)
	ctx := kubetest.Ctx(t)
	c.CRD(t, "../packaging/crds/openreports.io_clusterreports.yaml", openreportsv1alpha1.SchemeGroupVersion.String(), "clusterreports")
	node := findings.Record{Schema: findings.Schema, Time: findings.Now(), Node: "node-a", Subject: findings.SubjectNode, Source: "watch", Stage: "nftables commit",
		State: findings.StatePresent, Legacy: findings.Legacy{Tables: []string{"ip filter"}, Rules: 1}, Impact: findings.Impact{Legacy: 1}, Worst: findings.ImpactLegacy,
		Fingerprint: "fp-node-a"}
	if res, err := openreports.New(cs, rc, "node-a").Write(ctx, node); err != nil || res.Outcome != openreports.Written {
		t.Fatalf("write node-a's ClusterReport: %+v, %v", res, err)
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A removed node's ClusterReport stays (nothing deletes it): left
	// out, and counted.
	gone := node
	gone.Node, gone.Fingerprint = "node-gone", "fp-node-gone"
	if res, err := openreports.New(cs, rc, "node-gone").Write(ctx, gone); err != nil || res.Outcome != openreports.Written {
		t.Fatalf("write node-gone's ClusterReport: %+v, %v", res, err)
	}
	kc := reportReader(t, c, cs)
	check := func(what string, args ...string) {
		t.Helper()
		out, code := runReportCmd(t, append([]string{"--kubeconfig", kc, "--format", "json", "--fail-on", "breaks"}, args...)...)
		if code != 1 {
			t.Errorf("%s: exit %d, want 1 (node-a breaks)\n%s", what, code, out)
			return
		}
		_, r := groupsOf(t, out)
		found := false
		for _, g := range r.Groups {
			if g.Owner.String() == "Node/node-a" && g.Worst == findings.ImpactLegacy {
				found = true
			}
			if g.Owner.String() == "Node/node-gone" {
				t.Errorf("%s: a removed node's ClusterReport read", what)
			}
		}
		if !found {
			t.Errorf("%s: no Node/node-a group, legacy: %+v", what, r.Groups)
		}
		if r.Skipped.GoneNodes != 1 {
			t.Errorf("%s: skipped %+v, want one gone node", what, r.Skipped)
		}
	}
	check("auto, no Report of ours")
	check("--source reports, no Report of ours", "--source", "reports")
	web := owned["web-7c9-aaaaa"].Pod
	rec := fwdRecord(web, string(web.UID), "fp-web", "app")
	rec.Node, rec.Impact, rec.Worst = "node-a", findings.Impact{Native: 1}, findings.ImpactNative
	if res, err := openreports.New(cs, rc, "node-a").Write(ctx, rec); err != nil || res.Outcome != openreports.Written {
		t.Fatalf("write web: %+v, %v", res, err)
	}
	check("auto")
	check("--source reports", "--source", "reports")
}
