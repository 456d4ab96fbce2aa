//go:build !hookonly && !agentonly

package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/report"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// TestReportByNodeAndPool (issue 29 item 4): `report --by node|pool` from
// findings files with the cluster named for the nodes: a node's
// readiness is its worst workload's and its iptables-alerter.io/rhel10
// label's, a node with neither is not seen, and pools (the node roles)
// come ready first; without the cluster --by pool refuses.
func TestReportByNodeAndPool(t *testing.T) {
	c := kubetest.Start(t)
	cs := c.Client()
	ctx := kubetest.Ctx(t)
	for name, labels := range map[string]map[string]string{
		"w1": {"node-role.kubernetes.io/worker": ""},
		"w2": {"node-role.kubernetes.io/worker": ""},
		"i1": {"node-role.kubernetes.io/infra": "", report.ReadinessLabel: findings.ReadinessReady},
	} {
		if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(t.TempDir(), "findings.jsonl")
	log := findings.Log{Path: file}
	rec := func(node, pod, worst string) findings.Record {
		return findings.Record{Schema: findings.Schema, Time: findings.Now(), Node: node, Source: "hook", State: findings.StatePresent,
			Pod: findings.Pod{Namespace: "shop", Name: pod, UID: "uid-" + pod}, Container: "app",
			Nft: findings.Nft{Tables: []string{"ip filter"}, Rules: 1}, Impact: findings.Impact{Xt: 1}, Worst: worst, Fingerprint: "fp-" + pod}
	}
	legacy := rec("w1", "old", findings.ImpactLegacy)
	legacy.Nft, legacy.Impact, legacy.Legacy = findings.Nft{}, findings.Impact{Legacy: 1}, findings.Legacy{Tables: []string{"filter"}, Rules: 1}
	for _, r := range []findings.Record{legacy, rec("i1", "mesh", findings.ImpactNative)} {
		if err := log.Append(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	kc := c.Kubeconfig("admin", c.AdminToken)

	out, code := runReportCmd(t, "--by", "node", "--format", "json", "--kubeconfig", kc, file)
	var nodes struct{ Nodes []report.NodeRow }
	if err := json.Unmarshal([]byte(out), &nodes); err != nil || code != 0 {
		t.Fatalf("--by node: exit %d, %v\n%s", code, err, out)
	}
	got := map[string]string{}
	for _, n := range nodes.Nodes {
		got[n.Node] = n.Pool + " " + n.Readiness
	}
	want := map[string]string{"w1": "worker breaks", "w2": "worker " + report.NotSeen, "i1": "infra ready"}
	for n, w := range want {
		if got[n] != w {
			t.Errorf("%s: %q, want %q", n, got[n], w)
		}
	}

	out, code = runReportCmd(t, "--by", "pool", "--kubeconfig", kc, file)
	if code != 0 || !strings.Contains(out, "Can move first: infra") || strings.Contains(out, "Can move first: infra, worker") {
		t.Errorf("--by pool: exit %d\n%s", code, out)
	}
	lines := strings.Split(out, "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[1], "infra ") || !strings.HasPrefix(lines[2], "worker ") || !strings.Contains(lines[2], "w1,w2") {
		t.Errorf("--by pool rows:\n%s", out)
	}
	if _, code := runReportCmd(t, "--by", "pool", file); code != 2 {
		t.Errorf("--by pool without a cluster: exit %d, want 2", code)
	}
	// A pool's gate where no admission policy gates it (a plain
	// cluster's upgrade pipeline): its nodes all ready, or not.
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--pool", "infra"}, 0, `pool "infra" can move to RHEL 10: 1 ready`},
		{[]string{"--pool", "worker"}, 1, `pool "worker" is not ready for RHEL 10 (breaks): 1 breaks, 1 not-seen; blocking: w1, w2`},
		{[]string{"--pool", "worker", "--allow-needs-extra"}, 1, "blocking: w1, w2"},
		{[]string{"--pool", "gpu"}, 2, `no node is in pool "gpu"`},
	} {
		code, _, errs := runCmd(t, append([]string{"report", "--by", "pool", "--kubeconfig", kc, file}, tc.args...)...)
		if code != tc.code || !strings.Contains(errs, tc.says) {
			t.Errorf("--by pool %v: exit %d, want %d saying %q:\n%s", tc.args, code, tc.code, tc.says, errs)
		}
	}
	if code, _, errs := runCmd(t, "report", "--by", "node", "--pool", "worker", "--kubeconfig", kc, file); code != 2 || !strings.Contains(errs, "with --by pool") {
		t.Errorf("--pool with --by node: exit %d, want 2 (%s)", code, errs)
	}
	if _, code := runReportCmd(t, "--by", "node", "--format", "html", file); code != 2 {
		t.Errorf("--by node --format html: exit %d, want 2", code)
	}
	// Nodes asked for and not read (here the credentials may read pods
	// and their owners, not nodes): the rows miss every node no finding
	// names (w2 above), so the report says what it read and exits 2.
	kubetest.Namespace(t, cs, "viewers")
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "pods-viewer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"", "apps", "batch"}, Verbs: []string{"get", "list"},
			Resources: []string{"pods", "replicationcontrollers", "replicasets", "deployments", "statefulsets", "daemonsets", "jobs", "cronjobs"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts("viewers").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "viewer"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "viewer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "pods-viewer"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "viewers", Name: "viewer"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	viewer := c.Kubeconfig("viewer", kubetest.Token(t, cs, "viewers", "viewer"))
	if out, code := runReportCmd(t, "--by", "node", "--kubeconfig", viewer, file); code != 2 || !strings.Contains(out, "w1") || strings.Contains(out, "w2") {
		t.Errorf("--by node with the nodes unread: exit %d, want 2 with the findings' nodes only\n%s", code, out)
	}
}
