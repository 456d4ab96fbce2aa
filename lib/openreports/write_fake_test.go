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
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// TestPruneKeepsRecreatedMirrorPod: `kubectl delete pod` on a static
// pod's mirror pod; the kubelet makes the mirror pod again under a new
// UID while the static pod runs on, and the agent sends no new finding.
// Prune, past the grace, must find the static pod by the finding's UID
// (its config hash, which the new mirror pod's annotation names) and
// keep its result: the result's subject names the old mirror pod's UID.
func TestPruneKeepsRecreatedMirrorPod(t *testing.T) {
	api := newFakeAPI()
	ctx := kubetest.Ctx(t)
	mirror := func(uid string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "etcd-node-a", UID: types.UID(uid),
			Annotations: map[string]string{owner.MirrorAnnotation: "config-hash", "kubernetes.io/config.hash": "config-hash"}}}
	}
	pod, err := api.kube.CoreV1().Pods("shop").Create(ctx, mirror("mirror-1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := openreports.New(api.kube, api.reports, "node-a")
	rec := record(pod, findings.StatePresent, 0, 1, 0)
	rec.Pod.UID = "config-hash"
	res, err := w.Write(ctx, rec)
	if err != nil || res.Outcome != openreports.Written {
		t.Fatalf("Write = %+v, %v", res, err)
	}
	if err := api.kube.CoreV1().Pods("shop").Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.kube.CoreV1().Pods("shop").Create(ctx, mirror("mirror-2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.Grace = time.Nanosecond
	if n, skipped, err := w.Prune(ctx); n != 0 || err != nil || skipped != nil {
		t.Errorf("Prune = %d, %v, %v; want the running static pod's result kept", n, skipped, err)
	}
	r, err := api.reports.OpenreportsV1alpha1().Reports("shop").Get(ctx, res.Name, metav1.GetOptions{})
	if err != nil || len(r.Results) != 1 {
		t.Fatalf("after Prune: %v, %v; want the static pod's one result", resultsOf(r), err)
	}
	// A static pod removed from the node takes its mirror pod with it:
	// then the result goes.
	if err := api.kube.CoreV1().Pods("shop").Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, skipped, err := w.Prune(ctx); n != 1 || err != nil || skipped != nil {
		t.Errorf("Prune after the static pod went = %d, %v, %v; want 1", n, skipped, err)
	}
}

// resultsOf names r's results by their pod subjects, for messages.
func resultsOf(r *openreportsv1alpha1.Report) []string {
	if r == nil {
		return nil
	}
	var out []string
	for _, x := range r.Results {
		s, _ := openreports.PodSubject(x)
		out = append(out, s.Name+"/"+string(s.UID)+" "+x.Properties[openreports.PropPodUID])
	}
	return out
}

// TestMovedPodListedOnce: a bare pod with a result in its own Report is
// adopted by a ReplicaSet, and its next finding files it in the
// ReplicaSet's Report. Its result in the bare pod's Report must go (the
// Report with it, left empty), by the forwarder that wrote it, by one
// started since (which knows the old Report from its list at start) and
// by Write: the pod was listed twice, in two workloads, for as long as it
// lived.
func TestMovedPodListedOnce(t *testing.T) {
	for _, way := range []string{"staged", "staged after a restart", "written"} {
		t.Run(way, func(t *testing.T) {
			api := newFakeAPI()
			ctx := kubetest.Ctx(t)
			rs, err := api.kube.AppsV1().ReplicaSets("shop").Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-7c9", UID: "rs-uid"}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			life, end := context.WithCancel(context.Background())
			t.Cleanup(end)
			f := newForwarder(t, life, api.clients, "node-a", kubeapi.NewRefusals())
			w := openreports.New(api.kube, api.reports, "node-a")
			forward := func(rec findings.Record) {
				t.Helper()
				if way == "written" {
					if res, err := w.Write(ctx, rec); err != nil || res.Outcome != openreports.Written {
						t.Fatalf("Write = %+v, %v", res, err)
					}
					return
				}
				f.append(t, rec)
				if err := f.runner.Once(ctx); err != nil {
					t.Fatal(err)
				}
			}
			forward(record(api.pod, findings.StatePresent, 0, 1, 0))
			bare := openreports.Name(owner.Bare("web"), "node-a")
			if _, err := api.reports.OpenreportsV1alpha1().Reports("shop").Get(ctx, bare, metav1.GetOptions{}); err != nil {
				t.Fatalf("the bare pod's Report: %v", err)
			}

			pod := api.pod.DeepCopy()
			pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: new(true)}}
			if _, err := api.kube.CoreV1().Pods("shop").Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			written := 2.0
			if way == "staged after a restart" {
				f, written = newForwarder(t, life, api.clients, "node-a", kubeapi.NewRefusals()), 1
			}
			forward(record(pod, findings.StatePresent, 1, 1, 0))
			list, err := api.reports.OpenreportsV1alpha1().Reports("shop").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range list.Items {
				for _, s := range resultsOf(&r) {
					got = append(got, r.Name+": "+s)
				}
			}
			want := []string{openreports.Name(owner.Owner{Kind: "ReplicaSet", Name: "web-7c9"}, "node-a") + ": web/web-uid web-uid"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("results after the pod moved (-want +got):\n%s", diff)
			}
			if got := f.counts(t, "iptables_alerter_forward_reports_total"); way != "written" && got["written"] != written {
				t.Errorf("reports_total = %v, want written %v: the move's removal is no finding", got, written)
			}
		})
	}
}

// TestMovedBackInOneBatch: a pod filed in its Deployment's Report whose
// next finding goes to its ReplicaSet's (the Deployment's lookup refused)
// and the one after back to the Deployment's, all in one batch: one
// result must stay, in the Deployment's Report. Each Report's write took
// the pod out of the other, and the pod was in none.
func TestMovedBackInOneBatch(t *testing.T) {
	b := newBatch(t)
	dep, rs := b.owned("Deployment", "web"), b.owned("ReplicaSet", "web-7c9")
	b.stage(1, dep)
	b.flush()
	b.stage(2, rs)
	b.stage(3, dep)
	b.flush()
	if in := b.holding(); len(in) != 1 || in[0] != openreports.Name(dep.Owner, "node-a") {
		t.Errorf("the pod's results are in %v, want one, in the Deployment's Report", in)
	}
}

// TestResultIDs: Policy Reporter notifies a result whose resultID is new
// to its Report and keys results by it in all Reports at once. A pod that
// got worse gets a new one (it was its UID alone: no notification); a pod
// moved to another Report gets one its old Report's row does not hold
// (Policy Reporter dropped it there until the new Report changed again).
func TestResultIDs(t *testing.T) {
	b := newBatch(t)
	dep, rs := b.owned("Deployment", "web"), b.owned("ReplicaSet", "web-7c9")
	id := func() string {
		b.t.Helper()
		list, err := b.api.reports.OpenreportsV1alpha1().Reports("shop").List(b.ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 || len(list.Items[0].Results) != 1 {
			b.t.Fatalf("want one Report with one result: %v, %v", list, err)
		}
		return list.Items[0].Results[0].Properties[openreports.PropResultID]
	}
	if _, err := b.w.Stage(b.ctx, record(b.api.pod, findings.StatePresent, 0, 1, 0), dep); err != nil {
		t.Fatal(err)
	}
	b.flush()
	xt := id()
	b.stage(1, dep) // a legacy rule
	b.flush()
	legacy := id()
	// Better, then not inspected, then worse again: nothing new to tell.
	if _, err := b.w.Stage(b.ctx, record(b.api.pod, findings.StatePresent, 0, 1, 0), dep); err != nil {
		t.Fatal(err)
	}
	b.flush()
	better := id()
	if _, err := b.w.Stage(b.ctx, record(b.api.pod, findings.StateUnknown, 0, 0, 0), dep); err != nil {
		t.Fatal(err)
	}
	b.flush()
	unknown := id()
	b.stage(1, dep)
	b.flush()
	again := id()
	b.stage(1, rs)
	b.flush()
	moved := id()
	uid := string(b.api.pod.UID)
	depName, rsName := openreports.Name(dep.Owner, "node-a"), openreports.Name(rs.Owner, "node-a")
	inDep := "legacy/" + uid + "/" + depName
	want := []string{"xt/" + uid + "/" + depName, inDep, inDep, inDep, inDep, "legacy/" + uid + "/" + rsName}
	if diff := cmp.Diff(want, []string{xt, legacy, better, unknown, again, moved}); diff != "" {
		t.Errorf("resultIDs: xt, legacy, xt, unknown, legacy, then moved (-want +got):\n%s", diff)
	}
}

// batch stages findings of one pod under owners and flushes them, as
// the Keeper does between two checkpoint saves.
type batch struct {
	t   *testing.T
	ctx context.Context
	api *fakeAPI
	w   *openreports.Writer
}

func newBatch(t *testing.T) *batch {
	api := newFakeAPI()
	return &batch{t: t, ctx: kubetest.Ctx(t), api: api, w: openreports.New(api.kube, api.reports, "node-a")}
}

// owned is the pod under an apps/v1 owner.
func (b *batch) owned(kind, name string) owner.Owned {
	return owner.Owned{Pod: b.api.pod, Owner: owner.Owner{Kind: kind, Name: name}, Ref: metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID(name)}}
}

func (b *batch) stage(xt int, o owner.Owned) {
	b.t.Helper()
	if _, err := b.w.Stage(b.ctx, record(b.api.pod, findings.StatePresent, xt, 0, 0), o); err != nil {
		b.t.Fatal(err)
	}
}

// flush flushes twice: the moves' removals are staged by the Flush that
// wrote the new results, and written by the next.
func (b *batch) flush() {
	b.t.Helper()
	for i := 0; i < 2; i++ {
		done, _, err := b.w.Flush(b.ctx)
		if err != nil {
			b.t.Fatal(err)
		}
		for _, d := range done {
			b.t.Logf("flushed %s: %s %v", d.Name, d.Outcome, d.Why)
		}
	}
}

// holding names the Report of each result in shop.
func (b *batch) holding() []string {
	b.t.Helper()
	list, err := b.api.reports.OpenreportsV1alpha1().Reports("shop").List(b.ctx, metav1.ListOptions{})
	if err != nil {
		b.t.Fatal(err)
	}
	var in []string
	for _, r := range list.Items {
		for range r.Results {
			in = append(in, r.Name)
		}
	}
	return in
}

// TestPruneHoldsNoFindings: Prune asks the API whether each old result's
// pod is gone, a GET each, which after an outage may take minutes; a
// finding's Report write meanwhile must not wait for it. Prune held the
// writer's lock throughout.
func TestPruneHoldsNoFindings(t *testing.T) {
	api := newFakeAPI()
	ctx := kubetest.Ctx(t)
	w := openreports.New(api.kube, api.reports, "node-a")
	old, err := api.kube.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "old", UID: "old-uid"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := w.Write(ctx, record(old, findings.StatePresent, 0, 1, 0)); err != nil || res.Outcome != openreports.Written {
		t.Fatalf("Write = %+v, %v", res, err)
	}
	if err := api.kube.CoreV1().Pods("shop").Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.Grace = time.Nanosecond
	asked, release := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	api.kube.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if once.CompareAndSwap(false, true) {
			close(asked)
			<-release
		}
		return false, nil, nil
	})
	pruned := make(chan error, 1)
	go func() { _, _, err := w.Prune(ctx); pruned <- err }()
	<-asked
	wrote := make(chan error, 1)
	go func() {
		dep := owner.Owned{Pod: api.pod, Owner: owner.Owner{Kind: "Deployment", Name: "web"}, Ref: metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "d"}}
		_, err := w.Stage(ctx, record(api.pod, findings.StatePresent, 0, 1, 0), dep)
		if err == nil {
			_, _, err = w.Flush(ctx)
		}
		wrote <- err
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Errorf("a finding's write during Prune: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("a finding's write waited for Prune's pod lookups")
	}
	close(release)
	if err := <-pruned; err != nil {
		t.Errorf("Prune: %v", err)
	}
}

// TestRefusedMoveKeepsFiling: a pod's result is in its Deployment's
// Report; its next finding, under a ReplicaSet (the Deployment's lookup
// refused), goes to a Report whose write is refused for good, so the
// result stays in the Deployment's. The writer filed the pod under the
// ReplicaSet's Report all the same, and the pod's next move (to a
// StatefulSet here) took it out of that one, where it was not: the
// Deployment's Report listed the pod for as long as it ran.
func TestRefusedMoveKeepsFiling(t *testing.T) {
	b := newBatch(t)
	dep, rs, sts := b.owned("Deployment", "web"), b.owned("ReplicaSet", "web-7c9"), b.owned("StatefulSet", "web")
	b.stage(1, dep)
	b.flush()
	b.api.once("create", "reports", apierrors.NewInvalid(schema.GroupKind{Group: "openreports.io", Kind: "Report"}, "x", nil))
	b.stage(2, rs)
	b.flush()
	b.stage(3, sts)
	b.flush()
	if in := b.holding(); len(in) != 1 || in[0] != openreports.Name(sts.Owner, "node-a") {
		t.Errorf("the pod's results are in %v, want one, in the StatefulSet's Report", in)
	}
}

// TestListNamesFailureBacksOff: the node's Reports are listed once for
// their names; a LIST that fails (an API server down, a LIST refused)
// was tried again at every finding, a failing request each.
func TestListNamesFailureBacksOff(t *testing.T) {
	api := newFakeAPI()
	ctx := kubetest.Ctx(t)
	w := openreports.New(api.kube, api.reports, "node-a")
	now := time.Now()
	w.SetNow(func() time.Time { return now })
	var lists atomic.Int32
	api.reports.PrependReactor("list", "reports", func(k8stesting.Action) (bool, runtime.Object, error) {
		lists.Add(1)
		return true, nil, apierrors.NewServiceUnavailable("starting")
	})
	dep := owner.Owned{Pod: api.pod, Owner: owner.Owner{Kind: "Deployment", Name: "web"}, Ref: metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "d"}}
	for i := 0; i < 5; i++ {
		if _, err := w.Stage(ctx, record(api.pod, findings.StatePresent, i+1, 0, 0), dep); err != nil {
			t.Fatal(err)
		}
	}
	if n := lists.Load(); n != 1 {
		t.Errorf("5 findings listed the Reports %d times while the LIST failed, want 1", n)
	}
	now = now.Add(2 * time.Minute)
	if _, err := w.Stage(ctx, record(api.pod, findings.StatePresent, 9, 0, 0), dep); err != nil {
		t.Fatal(err)
	}
	if n := lists.Load(); n != 2 {
		t.Errorf("a finding 2 minutes later: %d LISTs in all, want 2 (tried again)", n)
	}
}

// TestUnverifiedOwnerNotReportOwner: a pod's owner references are not
// checked when it is created, so whoever may create pods can name a
// Deployment, a ReplicaSet or a Job that does not exist, or a custom
// resource. Such a reference became the owner of the new Report it was
// filed in, and the garbage collector, finding it dangling, deleted the
// Report with every other pod's results. The pod is still filed under
// what it names, and its result written, in a Report with no owner (Prune
// takes its results out once its pods are gone); an owner the API
// confirmed, as a ReplicaSet read with the pod's UID names it, is
// written once one of its pods writes there.
func TestUnverifiedOwnerNotReportOwner(t *testing.T) {
	for _, tc := range []struct {
		name string
		ref  metav1.OwnerReference
	}{
		{name: "deployment named by the pod", ref: metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "ghost"}},
		{name: "replicaset not found", ref: metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "ghost-7c9"}},
		{name: "job not found", ref: metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "ghost-2901"}},
		{name: "custom resource", ref: metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "Widget", Name: "ghost"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newFakeAPI()
			ctx := kubetest.Ctx(t)
			ref := tc.ref
			ref.UID, ref.Controller = "made-up", new(true)
			evil := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "evil", UID: "evil-uid", OwnerReferences: []metav1.OwnerReference{ref}}}
			if _, err := api.kube.CoreV1().Pods("shop").Create(ctx, evil, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			w := openreports.New(api.kube, api.reports, "node-a")
			res, err := w.Write(ctx, record(evil, findings.StatePresent, 1, 0, 0))
			if err != nil || res.Outcome != openreports.Written || res.Owner != (owner.Owner{Kind: ref.Kind, Name: ref.Name}) {
				t.Fatalf("Write = %+v, %v; want written under %s/%s", res, err, ref.Kind, ref.Name)
			}
			r, err := api.reports.OpenreportsV1alpha1().Reports("shop").Get(ctx, res.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.OwnerReferences) != 0 || r.Scope == nil || r.Scope.UID != "" || r.Scope.Name != ref.Name {
				t.Errorf("Report owners %+v, scope %+v; want none, and the workload named without the made-up UID", r.OwnerReferences, r.Scope)
			}
			if diff := cmp.Diff([]string{"evil/evil-uid evil-uid"}, resultsOf(r)); diff != "" {
				t.Errorf("the Report's results (-want +got):\n%s", diff)
			}
			if ref.Kind != "Deployment" {
				return
			}
			// A pod of a ReplicaSet read from the API names the
			// Deployment from it: that one owns the Report.
			rs, err := api.kube.AppsV1().ReplicaSets("shop").Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "ghost-7c9", UID: "rs-uid",
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "ghost", UID: "d-uid", Controller: new(true)}}}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			good := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "ghost-7c9-aaaaa", UID: "good-uid",
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: new(true)}}}}
			if _, err := api.kube.CoreV1().Pods("shop").Create(ctx, good, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if res, err := w.Write(ctx, record(good, findings.StatePresent, 1, 0, 0)); err != nil || res.Name != r.Name {
				t.Fatalf("Write of the ReplicaSet's pod = %+v, %v; want it in %s", res, err, r.Name)
			}
			r, err = api.reports.OpenreportsV1alpha1().Reports("shop").Get(ctx, res.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.OwnerReferences) != 1 || r.OwnerReferences[0].UID != "d-uid" || r.Scope == nil || r.Scope.UID != "d-uid" {
				t.Errorf("Report owners %+v, scope %+v; want the Deployment d-uid the ReplicaSet names", r.OwnerReferences, r.Scope)
			}
		})
	}
}

// TestPrunePastFailingWebhook: a webhook failing closed that the API
// server cannot call (left behind by an uninstall, say) fails every
// Report write in one namespace, the first the node's Reports list.
// Prune stopped there, and the list's order being the same each time, no
// later Report was pruned again. It skips that namespace, says why, and
// prunes it once the webhook is gone.
func TestPrunePastFailingWebhook(t *testing.T) {
	api := newFakeAPI()
	ctx := kubetest.Ctx(t)
	strict := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a-strict", Name: "x", UID: "x-uid"}}
	if _, err := api.kube.CoreV1().Pods("a-strict").Create(ctx, strict, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w := openreports.New(api.kube, api.reports, "node-a")
	for _, p := range []*corev1.Pod{strict, api.pod} {
		if res, err := w.Write(ctx, record(p, findings.StatePresent, 0, 1, 0)); err != nil || res.Outcome != openreports.Written {
			t.Fatalf("Write = %+v, %v", res, err)
		}
		if err := api.kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var down atomic.Bool
	down.Store(true)
	failed := apierrors.NewInternalError(errors.New(`failed calling webhook "check.a-strict.example.com": Post "https://check.a-strict.svc:443/validate": service "check" not found`))
	for _, verb := range []string{"update", "delete"} {
		api.reports.PrependReactor(verb, "reports", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetNamespace() == "a-strict" && down.Load() {
				return true, nil, failed
			}
			return false, nil, nil
		})
	}
	w.Grace = time.Nanosecond
	n, skipped, err := w.Prune(ctx)
	if err != nil || n != 1 || len(skipped) != 1 || !kubeapi.WebhookFailed(skipped[0]) || !strings.Contains(skipped[0].Error(), "a-strict") {
		t.Errorf("Prune = %d, %v, %v; want shop's result pruned and a-strict's Report skipped", n, skipped, err)
	}
	for _, ns := range []string{"shop", "a-strict"} {
		l, err := api.reports.OpenreportsV1alpha1().Reports(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]int{"shop": 0, "a-strict": 1}[ns]; len(l.Items) != want {
			t.Errorf("%s holds %d Reports after Prune, want %d", ns, len(l.Items), want)
		}
	}
	down.Store(false)
	if n, skipped, err := w.Prune(ctx); n != 1 || skipped != nil || err != nil {
		t.Errorf("Prune with the webhook gone = %d, %v, %v; want a-strict's result pruned", n, skipped, err)
	}
}
