//go:build !hookonly && !agentonly

package main

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	"github.com/sirupsen/logrus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// fwdHealthz is the body of the forwarder's /healthz, which must answer 200.
func fwdHealthz(t *testing.T, addr string) string {
	t.Helper()
	code, body := fwdGet(t, addr, "/healthz")
	if code != http.StatusOK {
		t.Errorf("/healthz %d, want 200: %s", code, body)
	}
	return body
}

// usagePods creates a pod per name in namespace and appends a present
// record with xt usage for each, in order.
func (e *fwdEnv) usagePods(t *testing.T, namespace string, names ...string) []*corev1.Pod {
	t.Helper()
	var pods []*corev1.Pod
	for _, n := range names {
		p := kubetest.Pod(t, e.cs, namespace, n, nil, "")
		rec := fwdRecord(p, string(p.UID), "fp-"+n, "app")
		rec.State, rec.Impact, rec.Worst = findings.StatePresent, findings.Impact{Xt: 5}, findings.ImpactXt
		e.append(t, rec)
		pods = append(pods, p)
	}
	return pods
}

// waitRefused waits until an admin's Report create in namespace is refused
// with a message holding want: admission reads quotas and policies
// through informers, a moment after they are stored.
func waitRefused(t *testing.T, rc versioned.Interface, namespace, want string) {
	t.Helper()
	r := &openreportsv1alpha1.Report{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: namespace}}
	waitForLong(t, "admission refusing Reports in "+namespace, 30*time.Second, func() bool {
		got, err := rc.OpenreportsV1alpha1().Reports(namespace).Create(kubetest.Ctx(t), r, metav1.CreateOptions{})
		if err == nil {
			_ = rc.OpenreportsV1alpha1().Reports(namespace).Delete(kubetest.Ctx(t), got.Name, metav1.DeleteOptions{})
			return false
		}
		return strings.Contains(err.Error(), want)
	})
}

// reportsEnv is newFwdEnv with the Report CRD served and namespaces made,
// and an admin's Reports client.
func reportsEnv(t *testing.T, namespaces ...string) (*fwdEnv, versioned.Interface) {
	t.Helper()
	e := newFwdEnv(t)
	e.c.CRD(t, crdFile, openreportsv1alpha1.SchemeGroupVersion.String(), "reports")
	rc, err := versioned.NewForConfig(e.c.Config(e.c.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range namespaces {
		kubetest.Namespace(t, e.cs, ns)
	}
	return e, rc
}

// TestForwardReportQuota: a ResourceQuota of no Reports in one namespace
// refuses its Reports with 403 "exceeded quota", which the forwarder
// retried forever, so no later Event or Report of the node arrived. The
// refusal is logged once, counted and shown on /healthz, and the other
// namespace's Events and Reports arrive.
func TestForwardReportQuota(t *testing.T) {
	e, rc := reportsEnv(t, "full", "shop")
	ctx := kubetest.Ctx(t)
	hard := corev1.ResourceList{"count/reports.openreports.io": resource.MustParse("0")}
	q, err := e.cs.CoreV1().ResourceQuotas("full").Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "no-reports", Namespace: "full"}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No controller-manager runs: the test sets the status its quota
	// controller would.
	q.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: corev1.ResourceList{"count/reports.openreports.io": resource.MustParse("0")}}
	if _, err := e.cs.CoreV1().ResourceQuotas("full").UpdateStatus(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, rc, "full", "exceeded quota")

	full := e.usagePods(t, "full", "a", "b")
	shop := e.usagePods(t, "shop", "c", "d")
	addr := nstest.FreeAddr(t)
	f := e.start(t, "--health-addr", addr)
	e.waitDelivered(t, 60*time.Second, append(full, shop...), 1)
	waitForLong(t, "shop's Reports", 60*time.Second, func() bool { return len(fwdResults(t, rc, "shop")) == 2 })
	if got := fwdResults(t, rc, "full"); len(got) != 0 {
		t.Errorf("results in the namespace of the quota: %v", got)
	}
	waitForLong(t, "two refused Reports counted", 30*time.Second, func() bool {
		return strings.Contains(fwdMetrics(t, addr), `iptables_alerter_forward_refused_total{kind="report",reason="quota"} 2`+"\n")
	})
	logged := f.entries("report refused by the API server in this namespace, finding's report skipped (said once per namespace and reason; /healthz and iptables_alerter_forward_refused_total count the rest)")
	if len(logged) != 1 || logged[0]["namespace"] != "full" || logged[0]["reason"] != "quota" {
		t.Errorf("refusal logged %d times, want once for namespace full, reason quota: %v", len(logged), logged)
	}
	if h := fwdHealthz(t, addr); !strings.Contains(h, "degraded: ") || !strings.Contains(h, "report refused in namespace full (quota)") {
		t.Errorf("/healthz does not name the refusing namespace: %q", h)
	}
	f.stop(t, syscall.SIGTERM)
}

// TestForwardAdmissionDenied: a ValidatingAdmissionPolicy denying Events
// and Reports in one namespace with 403 (reason Forbidden) held every
// later finding of the node. The Event and the Report of that namespace
// are set aside and counted; the other namespace's arrive.
func TestForwardAdmissionDenied(t *testing.T) {
	e, rc := reportsEnv(t, "locked", "shop")
	ctx := kubetest.Ctx(t)
	ns, err := e.cs.CoreV1().Namespaces().Get(ctx, "locked", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels["deny-findings"] = "yes"
	if _, err := e.cs.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	forbidden := metav1.StatusReasonForbidden
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-findings"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"openreports.io", "events.k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"reports", "events"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: "no findings in this namespace", Reason: &forbidden}},
		},
	}
	if _, err := e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, vap, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-findings"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        "deny-findings",
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"deny-findings": "yes"}}},
		},
	}
	if _, err := e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, rc, "locked", "denied request")

	locked := e.usagePods(t, "locked", "x")
	shop := e.usagePods(t, "shop", "y")
	addr := nstest.FreeAddr(t)
	f := e.start(t, "--health-addr", addr)
	e.waitDelivered(t, 60*time.Second, shop, 1)
	waitForLong(t, "shop's Report", 60*time.Second, func() bool { return len(fwdResults(t, rc, "shop")) == 1 })
	if n := len(e.podEvents(t, locked[0])); n != 0 {
		t.Errorf("%d Events in the denied namespace", n)
	}
	// The Reports of the two namespaces are written apart, in no fixed
	// order: shop's arriving does not mean locked's was already refused.
	for _, want := range []string{`iptables_alerter_forward_refused_total{kind="event",reason="admission"} 1`, `iptables_alerter_forward_refused_total{kind="report",reason="admission"} 1`} {
		waitForLong(t, want, 30*time.Second, func() bool { return strings.Contains(fwdMetrics(t, addr), want+"\n") })
	}
	if n := len(f.entries("event refused by the API server in this namespace, finding's event skipped (said once per namespace and reason; /healthz and iptables_alerter_forward_refused_total count the rest)")); n != 1 {
		t.Errorf("event refusal logged %d times, want 1", n)
	}
	if h := fwdHealthz(t, addr); !strings.Contains(h, "event refused in namespace locked (admission)") {
		t.Errorf("/healthz does not name the refusing namespace: %q", h)
	}
	f.stop(t, syscall.SIGTERM)
}

// setForwardRules replaces the rules of the forwarder's ClusterRole (as
// packaging/rbac applied it) with those keep accepts.
func setForwardRules(t *testing.T, e *fwdEnv, keep func(rbacv1.PolicyRule) bool) []rbacv1.PolicyRule {
	t.Helper()
	ctx := kubetest.Ctx(t)
	cr, err := e.cs.RbacV1().ClusterRoles().Get(ctx, fwdSA, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	all := cr.Rules
	cr.Rules = slices.DeleteFunc(slices.Clone(all), func(r rbacv1.PolicyRule) bool { return !keep(r) })
	if _, err := e.cs.RbacV1().ClusterRoles().Update(ctx, cr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return all
}

func restoreForwardRules(t *testing.T, e *fwdEnv, rules []rbacv1.PolicyRule) {
	t.Helper()
	ctx := kubetest.Ctx(t)
	cr, err := e.cs.RbacV1().ClusterRoles().Get(ctx, fwdSA, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cr.Rules = rules
	if _, err := e.cs.RbacV1().ClusterRoles().Update(ctx, cr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestForwardReportsRBACGap: with the Report CRD served and a ClusterRole
// lacking the openreports.io rules, `get reports` was forbidden and
// retried forever: 1 of 3 Events, then nothing. An access review at start
// switches Reports off (said once, a metric, /healthz), the Events all
// arrive, and Reports come on once the RBAC is fixed.
func TestForwardReportsRBACGap(t *testing.T) {
	e, rc := reportsEnv(t, "shop")
	rules := setForwardRules(t, e, func(r rbacv1.PolicyRule) bool { return !slices.Contains(r.APIGroups, "openreports.io") })
	pods := e.usagePods(t, "shop", "p0", "p1", "p2")

	var logs nstest.Buffer
	log := logrus.New()
	log.SetFormatter(&logrus.JSONFormatter{})
	log.SetOutput(&logs)
	addr := nstest.FreeAddr(t)
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- forwardLoop(runCtx, forwardConfig{
			consumerFlags: consumerFlags{findings: e.findings, checkpointDir: e.state, healthAddr: addr, poll: 20 * time.Millisecond},
			kubeconfig:    e.kubeconfig, nodeName: "node-a", reports: true,
			maxBackoff: 200 * time.Millisecond, timeout: 5 * time.Second, reportsGrace: time.Hour,
			reportsLook: 300 * time.Millisecond,
		}, log)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("forwardLoop: %v", err)
		}
		if t.Failed() {
			t.Logf("forwarder logs:\n%s", logs.String())
		}
	}()
	e.waitDelivered(t, 60*time.Second, pods, 1)
	const warned = `RBAC refuses the forwarder OpenReports Reports (the openreports.io rule of packaging/rbac is missing from its ClusterRole): posting Events only, looking again every 300ms`
	if n := strings.Count(logs.String(), warned); n != 1 {
		t.Errorf("%d RBAC warnings, want 1", n)
	}
	m := fwdMetrics(t, addr)
	for _, want := range []string{"iptables_alerter_forward_reports_enabled 0", "iptables_alerter_forward_reports_forbidden 1"} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("/metrics lacks %s:\n%s", want, m)
		}
	}
	if h := fwdHealthz(t, addr); !strings.Contains(h, "OpenReports Reports off: RBAC refuses the forwarder get, list, create, update, delete on reports.openreports.io") {
		t.Errorf("/healthz does not say Reports are off: %q", h)
	}

	restoreForwardRules(t, e, rules)
	waitForLong(t, "Reports on again", 30*time.Second, func() bool {
		return strings.Contains(fwdMetrics(t, addr), "iptables_alerter_forward_reports_enabled 1\n")
	})
	late := e.usagePods(t, "shop", "p3")
	e.waitDelivered(t, 60*time.Second, late, 1)
	waitForLong(t, "the late pod's Report", 60*time.Second, func() bool { _, ok := fwdResults(t, rc, "shop")["p3"]; return ok })
	if h := fwdHealthz(t, addr); h != "ok\n" {
		t.Errorf("/healthz after the fix: %q, want ok", h)
	}
}

// TestForwardEventsRBACGap: a ClusterRole lacking the Events rule holds
// the line (nothing is lost) and /healthz says why; once the RBAC is
// fixed every Event and Report arrives, once.
func TestForwardEventsRBACGap(t *testing.T) {
	e, rc := reportsEnv(t, "shop", "blog")
	rules := setForwardRules(t, e, func(r rbacv1.PolicyRule) bool { return !slices.Contains(r.APIGroups, "events.k8s.io") })
	pods := append(e.usagePods(t, "shop", "s0", "s1"), e.usagePods(t, "blog", "b0")...)
	addr := nstest.FreeAddr(t)
	f := e.start(t, "--health-addr", addr)
	fwdWaitLog(t, f, "event not delivered, will retry the same finding", 2)
	if h := fwdHealthz(t, addr); !strings.Contains(h, "Events held: RBAC refuses the forwarder") {
		t.Errorf("/healthz does not say the Events are held: %q", h)
	}
	for _, p := range pods {
		if n := len(e.podEvents(t, p)); n != 0 {
			t.Fatalf("pod %s has %d Events without the RBAC", p.Name, n)
		}
	}
	restoreForwardRules(t, e, rules)
	e.waitDelivered(t, 60*time.Second, pods, 1)
	waitForLong(t, "every Report", 60*time.Second, func() bool {
		return len(fwdResults(t, rc, "shop")) == 2 && len(fwdResults(t, rc, "blog")) == 1
	})
	e.waitCheckpointAtEnd(t)
	if h := fwdHealthz(t, addr); h != "ok\n" {
		t.Errorf("/healthz after the fix: %q, want ok", h)
	}
	f.stop(t, syscall.SIGTERM)
	final := f.entries("event forwarder stopped, checkpoint saved")[0]
	if final["created_total"] != float64(len(pods)) {
		t.Errorf("created_total %v, want %d", final["created_total"], len(pods))
	}
}
