package report

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestResolveOwnersLookupFails: a pod's owner is its Deployment, through
// its ReplicaSet; a ReplicaSet that cannot be read (503) fails the report,
// as a pod that cannot be read does, instead of listing the pod under the
// ReplicaSet, apart from its Deployment's other pods.
func TestResolveOwnersLookupFails(t *testing.T) {
	ctrl := true
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-7c9", UID: "rs-uid",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "d-uid", Controller: &ctrl}}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-7c9-a", UID: "p-uid",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7c9", UID: "rs-uid", Controller: &ctrl}}}}
	items := func() []Item { return []Item{{Namespace: "shop", Pod: "web-7c9-a", PodUID: "p-uid"}} }

	cs := fake.NewClientset(rs, pod)
	got := items()
	if err := ResolveOwners(context.Background(), cs, got); err != nil || got[0].Owner.String() != "Deployment/web" {
		t.Fatalf("owner %s, %v; want Deployment/web", got[0].Owner, err)
	}

	cs = fake.NewClientset(rs, pod)
	cs.PrependReactor("get", "replicasets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd leader changed")
	})
	got = items()
	if err := ResolveOwners(context.Background(), cs, got); err == nil {
		t.Errorf("owner %s with the ReplicaSet unreadable, no error; want the report to fail", got[0].Owner)
	}
}
