package openreports_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// TestPrune drops the result of a pod that is gone once the grace passed
// and keeps the live pod's.
func TestPrune(t *testing.T) {
	c, rc, owned := start(t)
	ctx := kubetest.Ctx(t)
	cs := c.Client()
	w := openreports.New(cs, rc, "node-a")
	a, b := owned["web-7c9-aaaaa"].Pod, owned["web-7c9-bbbbb"].Pod
	var name string
	for _, p := range []string{a.Name, b.Name} {
		res, err := w.Write(ctx, record(owned[p].Pod, findings.StatePresent, 0, 1, 0))
		if err != nil || res.Outcome != openreports.Written {
			t.Fatalf("Write = %+v, %v", res, err)
		}
		name = res.Name
	}
	// No kubelet runs to finish a graceful delete.
	if err := cs.CoreV1().Pods("shop").Delete(ctx, a.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	// Within the grace nothing goes.
	if n, skipped, err := w.Prune(ctx); n != 0 || err != nil || skipped != nil {
		t.Fatalf("Prune within grace = %d, %v, %v", n, skipped, err)
	}
	w.Grace = time.Nanosecond
	if n, skipped, err := w.Prune(ctx); n != 1 || err != nil || skipped != nil {
		t.Fatalf("Prune = %d, %v, %v; want 1", n, skipped, err)
	}
	r := get(t, rc, "shop", name)
	if len(r.Results) != 1 || r.Results[0].Subjects[1].Name != b.Name {
		t.Errorf("after prune: %+v", r.Results)
	}
}

// TestPruneBounded: Prune reads the node's Reports a page at a time and
// remembers no more of them than maxKnownBytes allows (each may hold
// about 600 KiB, the forwarder's limit is 128Mi), and still prunes a
// result on the last page. A gone record's removal reads its namespace's
// Reports a page at a time too, and finds the pod's result on the last.
func TestPruneBounded(t *testing.T) {
	c, rc, owned := start(t)
	ctx := kubetest.Ctx(t)
	cs := c.Client()
	w := openreports.New(cs, rc, "node-a")
	res, err := w.Write(ctx, record(owned["web-7c9-aaaaa"].Pod, findings.StatePresent, 0, 1, 0))
	if err != nil || res.Outcome != openreports.Written {
		t.Fatalf("Write = %+v, %v", res, err)
	}
	tmpl := get(t, rc, "shop", res.Name)
	// 60 Reports of 40 results, each 1 KiB of text, of pods still seen;
	// the last (listed last) also holds a pod gone two hours ago.
	const reports, results = 60, 40
	now := time.Now().UTC()
	for i := range reports {
		r := &openreportsv1alpha1.Report{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprintf("bulk-%02d", i), Labels: tmpl.Labels}}
		for j := range results {
			x := *tmpl.Results[0].DeepCopy()
			x.Description = strings.Repeat("d", 1024)
			x.Properties[openreports.PropPodUID] = fmt.Sprintf("uid-%d-%d", i, j)
			x.Properties[openreports.PropLastSeen] = now.Format(time.RFC3339)
			r.Results = append(r.Results, x)
		}
		if i == reports-1 {
			x := *tmpl.Results[0].DeepCopy()
			for k := range x.Subjects {
				if openreports.IsPod(x.Subjects[k].APIVersion, x.Subjects[k].Kind) {
					x.Subjects[k].Name, x.Subjects[k].UID = "gone-pod", "uid-gone"
				}
			}
			x.Properties[openreports.PropPodUID] = "uid-gone"
			x.Properties[openreports.PropLastSeen] = now.Add(-2 * time.Hour).Format(time.RFC3339)
			r.Results = append(r.Results, x)
		}
		made, err := rc.OpenreportsV1alpha1().Reports("shop").Create(ctx, r, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if raw, _ := json.Marshal(made); openreports.Footprint(made) < len(raw) {
			t.Fatalf("footprint %d below the Report's %d bytes of JSON", openreports.Footprint(made), len(raw))
		}
	}

	const bound = 1 << 20
	openreports.SetMaxKnownBytes(t, bound)
	var lists []string
	var mu sync.Mutex
	_, counted := wrappedClients(t, c, func(rt http.RoundTripper) http.RoundTripper {
		return roundTrip(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/reports") {
				mu.Lock()
				lists = append(lists, r.URL.Query().Get("limit"))
				mu.Unlock()
			}
			return rt.RoundTrip(r)
		})
	})
	p := openreports.New(cs, counted, "node-a")
	p.Grace = time.Hour
	if n, skipped, err := p.Prune(ctx); n != 1 || err != nil || skipped != nil {
		t.Fatalf("Prune = %d, %v, %v; want 1", n, skipped, err)
	}
	// 61 Reports: two pages.
	if diff := cmp.Diff([]string{"50", "50"}, lists); diff != "" {
		t.Errorf("LIST requests' limits (-want +got):\n%s", diff)
	}
	if n, bytes := p.Known(); bytes > bound || n == 0 {
		t.Errorf("remembers %d Reports of %d bytes, want some and at most %d bytes", n, bytes, bound)
	}
	last := get(t, rc, "shop", fmt.Sprintf("bulk-%02d", reports-1))
	for _, x := range last.Results {
		if x.Properties[openreports.PropPodUID] == "uid-gone" {
			t.Error("the gone pod's result on the last page is still there")
		}
	}
	if len(last.Results) != results {
		t.Errorf("last Report holds %d results, want %d", len(last.Results), results)
	}

	lists = nil
	gone := fmt.Sprintf("uid-%d-0", reports-1)
	res, err = p.Write(ctx, findings.Record{Schema: findings.Schema, Time: findings.Now(), State: findings.StateGone,
		Pod: findings.Pod{Namespace: "shop", Name: "gone-pod", UID: gone}})
	if err != nil || res.Outcome != openreports.Removed || res.Name != last.Name {
		t.Fatalf("Write of the gone record = %+v, %v; want its result removed from %s", res, err, last.Name)
	}
	if diff := cmp.Diff([]string{"50", "50"}, lists); diff != "" {
		t.Errorf("LIST requests' limits of the gone record's removal (-want +got):\n%s", diff)
	}
	last = get(t, rc, "shop", last.Name)
	for _, x := range last.Results {
		if x.Properties[openreports.PropPodUID] == gone {
			t.Error("the gone record's result on the last page is still there")
		}
	}
}

// TestGarbageCollected deletes the Deployment: kube-controller-manager's
// garbage collector must delete its Report through the owner reference.
func TestGarbageCollected(t *testing.T) {
	c, rc, owned := start(t)
	ctx := kubetest.Ctx(t)
	cs := c.Client()
	logPath := c.ControllerManager(t, "garbagecollector")
	w := openreports.New(cs, rc, "node-a")
	res, err := w.Write(ctx, record(owned["web-7c9-aaaaa"].Pod, findings.StatePresent, 1, 0, 0))
	if err != nil || res.Outcome != openreports.Written {
		t.Fatalf("Write = %+v, %v", res, err)
	}
	if err := cs.AppsV1().Deployments("shop").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Each look gets its own minute: the collector's start and sync run
	// on a loaded machine's time.
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		look, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := rc.OpenreportsV1alpha1().Reports("shop").Get(look, res.Name, metav1.GetOptions{})
		cancel()
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("report %s not garbage-collected after 3 minutes (%v); kube-controller-manager log:\n%s", res.Name, err, b)
		}
	}
}

// TestViewRole: packaging/rbac's read-only role, aggregated into the
// built-in view role by kube-controller-manager, lets a namespace's
// viewer read its Reports and not change them, nor read another's.
func TestViewRole(t *testing.T) {
	c, rc, owned := start(t)
	ctx := kubetest.Ctx(t)
	cs := c.Client()
	kubetest.Apply(t, cs, filepath.Join("..", "..", "packaging", "rbac", "reports-view.yaml"))
	c.ControllerManager(t, "clusterrole-aggregation")
	kubetest.Namespace(t, cs, "other")
	w := openreports.New(cs, rc, "node-a")
	res, err := w.Write(ctx, record(owned["db-0"].Pod, findings.StatePresent, 1, 0, 0))
	if err != nil || res.Outcome != openreports.Written {
		t.Fatalf("Write = %+v, %v", res, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "dev"}}
	if _, err := cs.CoreV1().ServiceAccounts("shop").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "dev-view"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "view"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "shop", Name: "dev"}}}
	if _, err := cs.RbacV1().RoleBindings("shop").Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dev, err := versioned.NewForConfig(c.Config(kubetest.Token(t, cs, "shop", "dev")))
	if err != nil {
		t.Fatal(err)
	}
	// The aggregation controller adds the rules soon after it starts;
	// each look gets its own minute, and what follows a new one.
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		look, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := dev.OpenreportsV1alpha1().Reports("shop").List(look, metav1.ListOptions{})
		cancel()
		if err == nil {
			break
		}
		if !apierrors.IsForbidden(err) || time.Now().After(deadline) {
			t.Fatalf("viewer lists reports: %v", err)
		}
	}
	ctx = kubetest.Ctx(t)
	r, err := dev.OpenreportsV1alpha1().Reports("shop").Get(ctx, res.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("viewer gets the report: %v", err)
	}
	r.Results = nil
	if _, err := dev.OpenreportsV1alpha1().Reports("shop").Update(ctx, r, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("viewer update: %v, want forbidden", err)
	}
	if err := dev.OpenreportsV1alpha1().Reports("shop").Delete(ctx, res.Name, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("viewer delete: %v, want forbidden", err)
	}
	if _, err := dev.OpenreportsV1alpha1().Reports("other").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("viewer lists another namespace: %v, want forbidden", err)
	}
}

// TestPrunePastARefusal: a webhook denies Report updates and deletes in
// one namespace that the node's Reports list first (namespace
// "a-strict"), or fails them, failing closed with nothing listening at
// its URL. Prune skips that Report, says why, and still prunes the
// Reports after it: stopping there would leave them unpruned for good,
// the list's order being the same each time.
func TestPrunePastARefusal(t *testing.T) {
	for _, down := range []bool{false, true} {
		t.Run(map[bool]string{false: "denied", true: "webhook down"}[down], func(t *testing.T) { pruneHeldInOneNamespace(t, down) })
	}
}

func pruneHeldInOneNamespace(t *testing.T, down bool) {
	c, rc, owned := start(t)
	ctx := kubetest.Ctx(t)
	cs := c.Client()
	kubetest.Namespace(t, cs, "a-strict")
	strict := kubetest.Pod(t, cs, "a-strict", "x", nil, "")
	web := owned["web-7c9-aaaaa"].Pod
	w := openreports.New(cs, rc, "node-a")
	for _, p := range []*corev1.Pod{strict, web} {
		if res, err := w.Write(ctx, record(p, findings.StatePresent, 0, 1, 0)); err != nil || res.Outcome != openreports.Written {
			t.Fatalf("Write = %+v, %v", res, err)
		}
	}
	for _, p := range []*corev1.Pod{strict, web} {
		if err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	held := apierrors.IsForbidden
	if down {
		installWebhook(t, cs, "a-strict", "https://127.0.0.1:1/validate", nil, 2, admissionregistrationv1.Update, admissionregistrationv1.Delete)
		held = kubeapi.WebhookFailed
	} else {
		denyingWebhook(t, cs, "a-strict", http.StatusForbidden, admissionregistrationv1.Update, admissionregistrationv1.Delete)
	}
	// The API server picks the webhook up from its informer: wait until
	// it holds up an update of a Report there.
	probe, err := rc.OpenreportsV1alpha1().Reports("a-strict").Create(ctx, &openreportsv1alpha1.Report{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		probe.Annotations = map[string]string{"try": time.Now().String()}
		got, err := rc.OpenreportsV1alpha1().Reports("a-strict").Update(ctx, probe, metav1.UpdateOptions{})
		if held(err) {
			break
		}
		if err == nil {
			probe = got
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook holds up no Report update in a-strict: %v", err)
		}
	}
	w.Grace = time.Nanosecond
	n, skipped, err := w.Prune(ctx)
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if n != 1 || len(skipped) != 1 || !strings.Contains(skipped[0].Error(), "a-strict") {
		t.Errorf("Prune = %d, %v; want shop's result pruned and a-strict's Report skipped", n, skipped)
	}
	if pods := resultPods(t, rc, "shop", "node-a"); len(pods) != 0 {
		t.Errorf("shop still has results of %v", pods)
	}
}
