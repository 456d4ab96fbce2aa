package owner_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestResolveRealAPIServer resolves pods of every controller kind, made
// through a real kube-apiserver, with the forwarder's own service account
// as packaging/rbac binds it: the RBAC must allow every lookup.
func TestResolveRealAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	admin := c.Client()
	ctx := kubetest.Ctx(t)
	kubetest.Apply(t, admin, "../../packaging/rbac/forward.yaml")
	kubetest.Namespace(t, admin, "shop")
	pods := kubetest.Workloads(t, admin, "shop")

	sa, err := kubernetes.NewForConfig(c.Config(kubetest.Token(t, admin, "iptables-alerter", "iptables-alerter-forward")))
	if err != nil {
		t.Fatal(err)
	}
	// Every lookup here gets an answer: an error is the test's failure.
	resolve := func(r *owner.Resolver, pod *corev1.Pod) owner.Owner {
		t.Helper()
		o, _, err := r.Reference(ctx, pod)
		if err != nil {
			t.Fatalf("owner of %s: %v", pod.Name, err)
		}
		return o
	}
	r := owner.New(sa)
	// A reference is checked when its UID was read from the API: the
	// pod's own, or its controller's matching the pod's; not what the
	// controller names above it (a Deployment, a CronJob: not read).
	unchecked := map[string]bool{"Deployment": true, "CronJob": true}
	for name, want := range pods {
		got := resolve(r, want.Pod)
		if got.Kind != want.Kind || got.Name != want.Owner {
			t.Errorf("%s: owner %s, want %s/%s", name, got, want.Kind, want.Owner)
		}
		// Each vouched for: the pod's controller read, or what it names.
		if o, err := r.Owned(ctx, want.Pod); err != nil || o.Checked == unchecked[want.Kind] || !o.Vouched {
			t.Errorf("%s: Owned checked %v, vouched %v, %v; want checked %v, vouched", name, o.Checked, o.Vouched, err, !unchecked[want.Kind])
		}
	}

	// Cached: with the ReplicaSet deleted, the Deployment is still named;
	// a fresh resolver, which must ask, falls back to the ReplicaSet.
	if err := admin.AppsV1().ReplicaSets("shop").Delete(ctx, "web-7c9", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	web := pods["web-7c9-aaaaa"].Pod
	if got := resolve(r, web); got.String() != "Deployment/web" {
		t.Errorf("cached owner %s, want Deployment/web", got)
	}
	// Its 404 is a final answer: no error comes with the fallback.
	// Nothing vouches for the reference: no object may take it as its
	// owner (a made-up name's reference looks the same).
	if o, err := owner.New(sa).Owned(ctx, web); o.Owner.String() != "ReplicaSet/web-7c9" || o.Vouched || o.Checked || err != nil {
		t.Errorf("owner with the ReplicaSet gone %+v, %v; want ReplicaSet/web-7c9, not vouched, and no error", o, err)
	}
	// A ReplicaSet of the same name but another object (another
	// Deployment's) is not the pod's: the pod is bare, as its reference's
	// UID is no live object's.
	if _, err := admin.AppsV1().ReplicaSets("shop").Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web-7c9", Labels: map[string]string{"app": "x"}, OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "apps/v1", Kind: "Deployment", Name: "impostor", UID: "00000000-0000-0000-0000-000000000001", Controller: new(true)}}},
		Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, ref, err := owner.New(sa).Reference(ctx, web); got.String() != "Pod/"+web.Name || ref.UID != web.UID || err != nil {
		t.Errorf("owner through a recreated ReplicaSet %s (%+v), %v; want the pod itself", got, ref, err)
	}

	// A pod naming a StatefulSet or DaemonSet with a UID that is not
	// the set's (made up by whoever created the pod) is bare: the set's
	// Report must not get that UID as its owner, which the garbage
	// collector would find dangling and delete the Report. The set's
	// own pods keep it, with its UID.
	for _, name := range []string{"db-0", "agent-x1z2q"} {
		real := pods[name].Pod
		r := owner.New(sa)
		if got, ref, err := r.Reference(ctx, real); got.Kind != pods[name].Kind || ref.UID != real.OwnerReferences[0].UID || err != nil {
			t.Errorf("%s: owner %s (%+v), %v; want its %s with its UID", name, got, ref, err, pods[name].Kind)
		}
		fake := real.DeepCopy()
		fake.Name, fake.UID = "impostor-"+name, "00000000-0000-0000-0000-0000000000aa"
		fake.OwnerReferences[0].UID = "00000000-0000-0000-0000-0000000000bb"
		if got, ref, err := r.Reference(ctx, fake); got.String() != "Pod/"+fake.Name || ref.UID != fake.UID || err != nil {
			t.Errorf("%s with a made-up owner UID: owner %s (%+v), %v; want the pod itself", name, got, ref, err)
		}
	}

	// A set deleted and made again under its name: its old pods' answer,
	// cached while it matched, goes once the new set has been read.
	old := pods["db-0"].Pod
	r = owner.New(sa)
	if got := resolve(r, old); got.String() != "StatefulSet/db" {
		t.Fatalf("db-0: owner %s, want StatefulSet/db", got)
	}
	sts := kubetest.RemakeStatefulSet(t, admin, "shop", "db")
	renewed := old.DeepCopy()
	renewed.Name, renewed.UID = "db-0-new", "00000000-0000-0000-0000-0000000000dd"
	renewed.OwnerReferences[0].UID = sts.UID
	if o, err := r.Owned(ctx, renewed); o.Owner.String() != "StatefulSet/db" || o.Ref.UID != sts.UID || !o.Checked || err != nil {
		t.Errorf("the new set's pod: %+v, %v; want StatefulSet/db, its new UID, checked", o, err)
	}
	if got := resolve(r, old); got.String() != "Pod/db-0" {
		t.Errorf("the old set's pod, once the new set was read: owner %s, want Pod/db-0", got)
	}
	// Without any client only the pod's own references are read.
	if got := resolve(owner.New(nil), pods["nightly-2901-ddddd"].Pod); got.String() != "Job/nightly-2901" {
		t.Errorf("owner without client %s, want Job/nightly-2901", got)
	}
}

// TestReferenceLookupFails: a ReplicaSet that cannot be read (the API
// server down) is no answer: Reference says so with an error the callers
// retry (else the pod is filed under its ReplicaSet now and under its
// Deployment next time), and the failure is not cached, so the next call
// names the Deployment. A name no object can have is an answer: it is not
// asked for (client-go refuses it with an error that looks like an
// outage, which would be retried forever).
func TestReferenceLookupFails(t *testing.T) {
	c := kubetest.Start(t)
	ctx := kubetest.Ctx(t)
	kubetest.Namespace(t, c.Client(), "shop")
	web := kubetest.Workloads(t, c.Client(), "shop")["web-7c9-aaaaa"].Pod
	r := owner.New(c.Client())

	c.StopAPIServer()
	o, ref, err := r.Reference(ctx, web)
	c.StartAPIServer()
	if !kubeapi.Retryable(err) {
		t.Errorf("Reference with the API server down: error %v, want a retryable one", err)
	}
	// Beside the error, the nearest owner known, for callers that take it.
	if o.String() != "ReplicaSet/web-7c9" || ref.UID != web.OwnerReferences[0].UID {
		t.Errorf("Reference with the API server down = %s, %+v; want the ReplicaSet", o, ref)
	}
	if o, ref, err := r.Reference(ctx, web); o.String() != "Deployment/web" || ref.Kind != "Deployment" || err != nil {
		t.Errorf("Reference after the outage = %s, %+v, %v; want Deployment/web", o, ref, err)
	}

	odd := web.DeepCopy()
	odd.OwnerReferences[0].Name = "a/b"
	if o, _, err := r.Reference(ctx, odd); o.String() != "ReplicaSet/a/b" || err != nil {
		t.Errorf("Reference through an impossible name = %s, %v; want the ReplicaSet and no error", o, err)
	}
}

// TestUncheckedWithoutRole: a role from before the StatefulSet and
// DaemonSet checks (no get on them) leaves those references unchecked,
// as before, instead of failing every such pod's lookup: the pod is
// filed under its set, with no error to retry, and the set is not asked
// about again for each pod.
func TestUncheckedWithoutRole(t *testing.T) {
	uid := types.UID("00000000-0000-0000-0000-0000000000cc")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db-0", UID: "pod-uid",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: uid, Controller: new(true)}}}}
	cs := fake.NewClientset()
	asked := 0
	cs.PrependReactor("get", "statefulsets", func(k8stesting.Action) (bool, runtime.Object, error) {
		asked++
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "statefulsets"}, "db",
			errors.New(`User "system:serviceaccount:iptables-alerter:iptables-alerter-forward" cannot get resource "statefulsets" in API group "apps" in the namespace "shop"`))
	})
	r := owner.New(cs)
	for range 2 {
		// Not vouched for: the pod alone names it.
		o, err := r.Owned(context.Background(), pod)
		if o.Owner.String() != "StatefulSet/db" || o.Ref.UID != uid || o.Vouched || err != nil {
			t.Errorf("Owned = %+v, %v; want StatefulSet/db with its reference's UID, not vouched, no error", o, err)
		}
	}
	// The refusal is cached as the answer: the set's next pod sends no
	// refused GET of its own.
	if asked != 1 {
		t.Errorf("%d gets for two pods of the set, want 1", asked)
	}
}

// TestMismatchCached: pods naming a set with UIDs that are not its own
// are each answered as bare once and from the cache after: reading the
// set for one does not drop what was learnt of the other.
func TestMismatchCached(t *testing.T) {
	set := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db", UID: "00000000-0000-0000-0000-000000000001"}}
	cs := fake.NewClientset(set)
	asked := 0
	cs.PrependReactor("get", "statefulsets", func(k8stesting.Action) (bool, runtime.Object, error) {
		asked++
		return false, nil, nil
	})
	r := owner.New(cs)
	for range 3 {
		for _, uid := range []types.UID{"00000000-0000-0000-0000-0000000000a1", "00000000-0000-0000-0000-0000000000a2"} {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "x-" + string(uid[len(uid)-2:]), UID: "pod-" + uid,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: uid, Controller: new(true)}}}}
			if got, _, err := r.Reference(context.Background(), pod); got.Kind != owner.KindPod || err != nil {
				t.Fatalf("a pod naming db with UID %s: %s, %v; want it bare", uid, got, err)
			}
		}
	}
	if asked != 2 {
		t.Errorf("%d gets for two made-up UIDs asked about three times each, want 2", asked)
	}
}

// TestImplausibleOwner: the API server checks a pod's owner references
// for emptiness only, so whoever creates a pod may write a megabyte into
// one. A reference no object can have is no controller: the pod is bare,
// with no error and no GET. A ReplicaSet named by 1.1 MiB went into a GET
// path the client refused as if the server were down (retried for good,
// every later finding of the node held behind it); a custom resource's
// 300 KiB name, or a real Deployment's name with a 300 KiB UID, went
// whole into every Event and the Report's results.
func TestImplausibleOwner(t *testing.T) {
	c := kubetest.Start(t)
	admin := c.Client()
	ctx := kubetest.Ctx(t)
	kubetest.Namespace(t, admin, "shop")
	big := func(n int) string { return strings.Repeat("r", n) }
	for _, tc := range []struct {
		name string
		ref  metav1.OwnerReference
	}{
		{"a ReplicaSet named by 1.1 MiB", metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: big(1100 << 10), UID: "00000000-0000-0000-0000-0000000000e1"}},
		{"a custom resource named by 300 KiB", metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "Widget", Name: big(300 << 10), UID: "00000000-0000-0000-0000-0000000000e2"}},
		{"a Deployment with a 300 KiB UID", metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: types.UID(big(300 << 10))}},
		{"a 300 KiB kind", metav1.OwnerReference{APIVersion: "example.com/v1", Kind: big(300 << 10), Name: "w", UID: "00000000-0000-0000-0000-0000000000e3"}},
		{"a 300 KiB API version", metav1.OwnerReference{APIVersion: "example.com/" + big(300<<10), Kind: "Widget", Name: "w", UID: "00000000-0000-0000-0000-0000000000e4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.ref.Controller = new(true)
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", GenerateName: "odd-", OwnerReferences: []metav1.OwnerReference{tc.ref}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
			pod, err := admin.CoreV1().Pods("shop").Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("the API server refused the pod: %v", err)
			}
			o, err := owner.New(admin).Owned(ctx, pod)
			if err != nil || o.Owner != owner.Bare(pod.Name) || o.Ref.UID != pod.UID || !o.Vouched {
				t.Errorf("owner %.200s (reference %.200s/%.200s), %v; want the pod itself, no error", o.Owner, o.Ref.Kind, o.Ref.UID, err)
			}
		})
	}
	// Within the bounds a made-up custom resource is still named,
	// unvouched, as before.
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "widget-pod", OwnerReferences: []metav1.OwnerReference{
		{APIVersion: "example.com/v1", Kind: "Widget", Name: big(253), UID: "00000000-0000-0000-0000-0000000000e5", Controller: new(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
	pod, err := admin.CoreV1().Pods("shop").Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if o, err := owner.New(admin).Owned(ctx, pod); err != nil || o.Owner.String() != "Widget/"+big(253) || o.Vouched {
		t.Errorf("owner %s, vouched %v, %v; want Widget/<253 bytes>, not vouched", o.Owner, o.Vouched, err)
	}
}
