package openreports_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	reportsfake "github.com/openreports/reports-api/pkg/client/clientset/versioned/fake"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// fakeAPI is client-go's fake clientsets as the forwarder's: the pod
// web in shop, Reports and ClusterReports served, and every access review
// answered by allowed (all of them allowed when nil).
type fakeAPI struct {
	kube    *fake.Clientset
	reports *reportsfake.Clientset
	pod     *corev1.Pod
	allowed func(authorizationv1.ResourceAttributes) bool
}

func newFakeAPI() *fakeAPI {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: types.UID("web-uid")}}
	f := &fakeAPI{kube: fake.NewClientset(pod), reports: reportsfake.NewSimpleClientset(), pod: pod}
	f.reports.Resources = []*metav1.APIResourceList{{GroupVersion: openreportsv1alpha1.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "reports", Namespaced: true}, {Name: "clusterreports"}}}}
	f.kube.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		r.Status.Allowed = f.allowed == nil || f.allowed(*r.Spec.ResourceAttributes)
		return true, r, nil
	})
	return f
}

func (f *fakeAPI) clients() (kubernetes.Interface, versioned.Interface) { return f.kube, f.reports }

// once makes the next call of verb on resource of the Reports' clientset
// fail with err, once; it says how many it failed.
func (f *fakeAPI) once(verb, resource string, err error) *atomic.Int32 {
	var n atomic.Int32
	f.reports.PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		if n.Add(1) == 1 {
			return true, nil, err
		}
		return false, nil, nil
	})
	return &n
}

// rbacDenial is an authorizer's 403 on a Report create in shop.
var rbacDenial = apierrors.NewForbidden(schema.GroupResource{Group: "openreports.io", Resource: "reports"}, "x",
	errors.New(`User "system:serviceaccount:iptables-alerter:iptables-alerter-forward" cannot create resource "reports" in API group "openreports.io" in the namespace "shop"`))

// TestFlushForbiddenWhileRBACSyncs: a Report write is refused with the
// authorizer's 403 that access reviews do not confirm, neither
// cluster-wide nor in its namespace (an API server behind the load
// balancer still starting, its RBAC cache not synced). The batch's Flush
// fails and is tried again, which writes the Report: the 403 is no
// refusal of the Report, and the checkpoint does not pass its findings
// unwritten. A 403 the reviews confirm in the namespace alone (a webhook
// authorizer's rule) is still that Report's refusal.
func TestFlushForbiddenWhileRBACSyncs(t *testing.T) {
	for _, tc := range []struct {
		name string
		// deniedInNS: the access review refuses the call in shop.
		deniedInNS bool
		want       map[string]float64
	}{
		{name: "RBAC not yet synced", want: map[string]float64{"written": 1}},
		{name: "refused in its namespace", deniedInNS: true, want: map[string]float64{"rejected": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newFakeAPI()
			api.allowed = func(a authorizationv1.ResourceAttributes) bool { return !tc.deniedInNS || a.Namespace == "" }
			life, end := context.WithCancel(context.Background())
			t.Cleanup(end)
			f := newForwarder(t, life, api.clients, "node-a", kubeapi.NewRefusals())
			if !f.keeper.Enabled() {
				t.Fatal("Reports not enabled")
			}
			denied := api.once("create", "reports", rbacDenial)
			f.append(t, record(api.pod, findings.StatePresent, 0, 1, 0))
			err := f.runner.Once(kubetest.Ctx(t))
			if denied.Load() == 0 {
				t.Fatal("no Report write was refused: the test did not test")
			}
			if tc.deniedInNS {
				if err != nil {
					t.Fatalf("Once with the write refused in its namespace = %v, want the line handled", err)
				}
			} else {
				if !kubeapi.IsForbiddenToUs(err) {
					t.Fatalf("Once with a 403 no review confirms = %v, want the 403 (retried)", err)
				}
				if err := f.runner.Once(kubetest.Ctx(t)); err != nil {
					t.Fatalf("Once after: %v", err)
				}
			}
			if !f.keeper.Enabled() {
				t.Error("Reports switched off, though RBAC allows them")
			}
			var want []string
			if !tc.deniedInNS {
				want = []string{api.pod.Name}
			}
			if diff := cmp.Diff(want, resultPods(t, api.reports, "shop", "node-a")); diff != "" {
				t.Errorf("pods with a result (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, f.counts(t, "iptables_alerter_forward_reports_total")); diff != "" {
				t.Errorf("reports by outcome (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFlushNotFoundWhileCRDsLoad: a Report write answered 404 while the
// discovery says the Report CRD is not served, as an API server that
// just restarted says until it serves its CRDs. The batch's Reports are
// kept and Flush fails, so it is tried again: Reports stay on, and once
// the CRD is served the Reports are written. Only looks LookMissing
// apart that all find the CRD missing switch Reports off, and then say so
// once, reject nothing and let the line go on.
func TestFlushNotFoundWhileCRDsLoad(t *testing.T) {
	notFound := apierrors.NewNotFound(schema.GroupResource{Group: "openreports.io", Resource: "reports"}, "")
	t.Run("restarting", func(t *testing.T) {
		api := newFakeAPI()
		life, end := context.WithCancel(context.Background())
		t.Cleanup(end)
		f := newForwarder(t, life, api.clients, "node-a", kubeapi.NewRefusals())
		created, looked := api.once("create", "reports", notFound), api.once("get", "resource", notFound)
		f.append(t, record(api.pod, findings.StatePresent, 0, 1, 0))
		if err := f.runner.Once(kubetest.Ctx(t)); !apierrors.IsNotFound(err) {
			t.Fatalf("Once with the CRD not yet served = %v, want the 404 (retried)", err)
		}
		if created.Load() == 0 || looked.Load() == 0 {
			t.Fatal("no 404 answered: the test did not test")
		}
		if !f.keeper.Enabled() {
			t.Error("Reports switched off by one look")
		}
		if err := f.runner.Once(kubetest.Ctx(t)); err != nil {
			t.Fatalf("Once after: %v", err)
		}
		if diff := cmp.Diff([]string{api.pod.Name}, resultPods(t, api.reports, "shop", "node-a")); diff != "" {
			t.Errorf("pods with a result (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(map[string]float64{"written": 1}, f.counts(t, "iptables_alerter_forward_reports_total")); diff != "" {
			t.Errorf("reports by outcome (-want +got):\n%s", diff)
		}
	})
	t.Run("deleted", func(t *testing.T) {
		api := newFakeAPI()
		life, end := context.WithCancel(context.Background())
		t.Cleanup(end)
		const look = 100 * time.Millisecond
		f := newForwarder(t, life, api.clients, "node-a", kubeapi.NewRefusals(), func(k *openreports.Keeper) { k.LookMissing = look })
		api.reports.PrependReactor("create", "reports", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, notFound })
		api.reports.PrependReactor("get", "resource", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, notFound })
		f.append(t, record(api.pod, findings.StatePresent, 0, 1, 0))
		if err := f.runner.Once(kubetest.Ctx(t)); !apierrors.IsNotFound(err) {
			t.Fatalf("Once at the first look = %v, want the 404 (retried)", err)
		}
		time.Sleep(look)
		if err := f.runner.Once(kubetest.Ctx(t)); err != nil {
			t.Fatalf("Once a look later = %v, want the line handled (Reports off)", err)
		}
		if f.keeper.Enabled() {
			t.Error("Reports still on with the CRD gone")
		}
		if got := f.counts(t, "iptables_alerter_forward_reports_total"); len(got) != 0 {
			t.Errorf("reports by outcome %v, want none", got)
		}
		said := 0
		for _, e := range f.logged.AllEntries() {
			if strings.Contains(e.Message, "serves no OpenReports Reports") {
				said++
			}
		}
		if said != 1 {
			t.Errorf("CRD missing said %d times, want once", said)
		}
	})
}

// TestFlushNotFoundSecondRestart: two API server restarts more than
// LookMissing apart, each answering 404 for the Report CRD's group for a
// moment. Writes that work between them must end the first's count: the
// second restart's first look found the first look's time LookMissing
// old, took the CRD for deleted and dropped the line's Report.
func TestFlushNotFoundSecondRestart(t *testing.T) {
	notFound := apierrors.NewNotFound(schema.GroupResource{Group: "openreports.io", Resource: "reports"}, "")
	api := newFakeAPI()
	life, end := context.WithCancel(context.Background())
	t.Cleanup(end)
	const look = 100 * time.Millisecond
	f := newForwarder(t, life, api.clients, "node-a", kubeapi.NewRefusals(), func(k *openreports.Keeper) { k.LookMissing = look })
	for i := 0; i < 2; i++ {
		var fails atomic.Int32
		fails.Store(int32(1 + 2*i))
		failN := func(k8stesting.Action) (bool, runtime.Object, error) {
			if fails.Add(-1) >= 0 {
				return true, nil, notFound
			}
			return false, nil, nil
		}
		api.reports.PrependReactor("update", "reports", failN)
		api.reports.PrependReactor("create", "reports", failN)
		api.reports.PrependReactor("get", "reports", failN)
		api.once("get", "resource", notFound)
		f.append(t, record(api.pod, findings.StatePresent, 0, 1+i, 0))
		_ = f.runner.Once(kubetest.Ctx(t))
		if !f.keeper.Enabled() {
			t.Fatalf("restart %d: Reports switched off by one look", i)
		}
		if err := f.runner.Once(kubetest.Ctx(t)); err != nil {
			t.Fatalf("restart %d: the line again: %v", i, err)
		}
		time.Sleep(2 * look)
	}
}
