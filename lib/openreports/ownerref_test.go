package openreports_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// TestReportOwnerKept: a workload's Report is shared by its pods, and its
// owner reference is what the garbage collector deletes it with. A pod
// naming the workload with a UID the API did not confirm (here made up,
// naming the Deployment itself) is filed there but leaves the Report's
// owner as it was, and one naming a workload that does not exist gives
// its Report none; a pod whose StatefulSet was read with its UID (the
// set made again under its name) gives the Report the new UID.
func TestReportOwnerKept(t *testing.T) {
	c, rc, pods := start(t)
	ctx := kubetest.Ctx(t)
	cs := c.Client()
	w := openreports.New(cs, rc, "node-a")
	owner := func(name string) types.UID {
		t.Helper()
		r := get(t, rc, "shop", name)
		if len(r.OwnerReferences) != 1 || r.Scope == nil || r.Scope.UID != r.OwnerReferences[0].UID {
			t.Fatalf("report %s: owners %+v, scope %+v", name, r.OwnerReferences, r.Scope)
		}
		return r.OwnerReferences[0].UID
	}
	write := func(pod *corev1.Pod) string {
		t.Helper()
		res, err := w.Write(ctx, record(pod, findings.StatePresent, 1, 0, 0))
		if err != nil || res.Outcome != openreports.Written {
			t.Fatalf("write %s: %+v, %v", pod.Name, res, err)
		}
		return res.Name
	}

	web := pods["web-7c9-aaaaa"].Pod
	name := write(web)
	deploy, err := cs.AppsV1().Deployments("shop").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := owner(name); got != deploy.UID {
		t.Fatalf("web's Report owned by %s, want the Deployment's %s", got, deploy.UID)
	}
	evil := kubetest.OwnedPod(t, cs, "shop", "evil", "node-a",
		metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "00000000-0000-0000-0000-0000000000ee"})
	if got := write(evil); got != name {
		t.Fatalf("the pod naming Deployment web went to Report %s, want %s", got, name)
	}
	if got := owner(name); got != deploy.UID {
		t.Errorf("after the made-up UID's pod, web's Report is owned by %s, want still %s", got, deploy.UID)
	}
	// Such a pod first, under an API version no collector resolves: the
	// Report gets no owner from it; the workload's own pod gives it one.
	if err := rc.OpenreportsV1alpha1().Reports("shop").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	odd := kubetest.OwnedPod(t, cs, "shop", "odd", "node-a",
		metav1.OwnerReference{APIVersion: "apps/v999", Kind: "Deployment", Name: "web", UID: "00000000-0000-0000-0000-0000000000ff"})
	if got := write(odd); got != name {
		t.Fatalf("the pod naming apps/v999 Deployment web went to Report %s, want %s", got, name)
	}
	if write(web); owner(name) != deploy.UID {
		t.Errorf("after web's pod, its Report is owned by %s, want %s", owner(name), deploy.UID)
	}

	// A pod naming a Deployment or a ReplicaSet that does not exist: its
	// Report has no owner for the garbage collector to find dangling.
	for i, ref := range []metav1.OwnerReference{
		{APIVersion: "apps/v1", Kind: "Deployment", Name: "ghost", UID: "00000000-0000-0000-0000-0000000000e1"},
		{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "ghost-7c9", UID: "00000000-0000-0000-0000-0000000000e2"},
	} {
		ghost := kubetest.OwnedPod(t, cs, "shop", fmt.Sprintf("ghost-%d", i), "node-a", ref)
		if r := get(t, rc, "shop", write(ghost)); len(r.OwnerReferences) != 0 || len(r.Results) != 1 {
			t.Errorf("the Report of the pod naming %s %s: owners %+v, %d results; want no owner, its result", ref.Kind, ref.Name, r.OwnerReferences, len(r.Results))
		}
	}

	db := pods["db-0"].Pod
	name = write(db)
	if got := owner(name); got != db.OwnerReferences[0].UID {
		t.Fatalf("db's Report owned by %s, want the set's %s", got, db.OwnerReferences[0].UID)
	}
	sts := kubetest.RemakeStatefulSet(t, cs, "shop", "db")
	renewed := kubetest.OwnedPod(t, cs, "shop", "db-0-new", "node-a",
		metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: sts.UID})
	if got := write(renewed); got != name {
		t.Fatalf("the new set's pod went to Report %s, want %s", got, name)
	}
	if got := owner(name); got != sts.UID {
		t.Errorf("after the new set's pod, db's Report is owned by %s, want the new set's %s", got, sts.UID)
	}
}
