//go:build !hookonly && !agentonly

package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// TestForwardNodeRecord (issue 19 item 2, issue 29 item 4): the built
// forwarder, with the token packaging/rbac binds and without --node-event,
// posts an agent node-mode record's Event on the Node, once, and keeps the
// node's own findings in a ClusterReport (the module's CRD) that `kubectl
// get clusterreports` lists, while a pod's record after it still gets its
// Event and Report; the node's gone record deletes the ClusterReport.
func TestForwardNodeRecord(t *testing.T) {
	e := newFwdEnv(t)
	e.c.CRD(t, crdFile, openreportsv1alpha1.SchemeGroupVersion.String(), "reports")
	e.c.CRD(t, clusterCRD(t), openreportsv1alpha1.SchemeGroupVersion.String(), "clusterreports")
	rc, err := versioned.NewForConfig(e.c.Config(e.c.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	kubetest.Namespace(t, e.cs, "shop")
	pod := kubetest.Pod(t, e.cs, "shop", "web", nil, "")
	node := findings.Record{Schema: findings.Schema, Time: findings.Now(), Node: "node-a", Subject: findings.SubjectNode, Source: "watch", Stage: "nftables commit",
		State: findings.StatePresent, Nft: findings.Nft{Tables: []string{"ip nat"}, Chains: 1, Rules: 1},
		Impact: findings.Impact{Xt: 1}, Worst: findings.ImpactXt,
		Examples:    []findings.Example{{Family: "ip", Table: "nat", Chain: "POSTROUTING", Rule: "-A POSTROUTING -s 10.8.0.0/16 -j MASQUERADE", Impact: findings.ImpactXt}},
		Fingerprint: "fp-node", Writer: &findings.Writer{PID: 9, Comm: "iptables-nft-re", Unit: "mesh.service"}}
	p := fwdRecord(pod, string(pod.UID), "fp-pod", "app")
	p.State = findings.StatePresent
	e.append(t, node, node, p)

	f := e.start(t)
	nodeEvents := func() []corev1.Event {
		evs, err := kubetest.Events(kubetest.Ctx(t), e.cs, "", "Node", "node-a", types.UID("node-a"))
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	waitForLong(t, "the pod's Report result", 60*time.Second, func() bool { return len(fwdResults(t, rc, "shop")) == 1 })
	e.waitDelivered(t, 30*time.Second, []*corev1.Pod{pod}, 1)
	evs := nodeEvents()
	if len(evs) != 1 || evs[0].Reason != events.Reason || evs[0].Annotations[events.SubjectAnnotation] != "node" {
		t.Fatalf("node events %+v, want the node record's one", evs)
	}
	list, err := rc.OpenreportsV1alpha1().Reports("").List(kubetest.Ctx(t), metav1.ListOptions{LabelSelector: openreports.Selector("")})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Namespace != "shop" {
		t.Errorf("%d Reports, want the pod's only", len(list.Items))
	}
	crs, err := rc.OpenreportsV1alpha1().ClusterReports().List(kubetest.Ctx(t), metav1.ListOptions{LabelSelector: openreports.Selector("node-a")})
	if err != nil {
		t.Fatal(err)
	}
	if len(crs.Items) != 1 {
		t.Fatalf("%d ClusterReports of node-a, want 1", len(crs.Items))
	}
	cr := crs.Items[0]
	if cr.Name != openreports.NodeReportName("node-a") || cr.Scope == nil || cr.Scope.Kind != "Node" || cr.Scope.Name != "node-a" ||
		len(cr.Results) != 1 || cr.Summary.Fail != 1 {
		t.Fatalf("ClusterReport %+v", cr)
	}
	x := cr.Results[0]
	if x.Rule != findings.ImpactXt || x.Result != "fail" || len(x.Subjects) != 1 || x.Subjects[0].Kind != "Node" || x.Subjects[0].Name != "node-a" ||
		!strings.Contains(x.Description, "node's own network namespace") || x.Properties[openreports.PropWriter] == "" ||
		!strings.Contains(x.Properties[openreports.PropExample+"1"], "MASQUERADE") {
		t.Errorf("node result %+v", x)
	}
	// What an admin types, with the view a cluster admin has.
	out, err := exec.Command(kubectlPath(t), "--kubeconfig", e.c.Kubeconfig("admin", e.c.AdminToken), "get", "clusterreports", "-l", openreports.Selector(""), "--no-headers").CombinedOutput()
	if err != nil || !strings.Contains(string(out), cr.Name) {
		t.Errorf("kubectl get clusterreports: %v\n%s", err, out)
	}

	gone := node
	gone.State, gone.Nft, gone.Impact, gone.Worst, gone.Examples, gone.Writer = findings.StateGone, findings.Nft{}, findings.Impact{}, "", nil, nil
	e.append(t, gone)
	waitForLong(t, "the node's ClusterReport deleted", 30*time.Second, func() bool {
		crs, err := rc.OpenreportsV1alpha1().ClusterReports().List(kubetest.Ctx(t), metav1.ListOptions{LabelSelector: openreports.Selector("node-a")})
		return err == nil && len(crs.Items) == 0
	})
	f.stop(t, syscall.SIGTERM)
}

// clusterCRD is the ClusterReport CRD of the reports-api module go.mod
// names.
func clusterCRD(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/openreports/reports-api").Output()
	if err != nil {
		t.Skipf("go list the reports-api module: %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "openreports.io_clusterreports.yaml")
}

// kubectlPath is the kubectl on PATH ($IPTA_CACHE/kube/bin).
func kubectlPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("kubectl")
	nstest.Need(t, err == nil, "kubectl on PATH ($IPTA_CACHE/kube/bin)")
	return p
}
