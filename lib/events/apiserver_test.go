package events_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/iptables-alerter/iptables-alerter/lib/wording"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

func record(pod findings.Pod, fingerprint string) findings.Record {
	return findings.Record{
		Schema: findings.Schema, Time: findings.Now(), Node: "node-a",
		ContainerID: "c-" + fingerprint, SandboxID: "s-" + string(pod.UID), Pod: pod, Container: "app",
		Nft:         findings.Nft{Tables: []string{"ip filter"}, Chains: 1, Rules: 2},
		Fingerprint: fingerprint,
		Examples:    []findings.Example{{Family: "ip", Table: "filter", Chain: "INPUT", Rule: "-A INPUT -p tcp --dport 22 -j DROP"}},
	}
}

// TestPostRealAPIServer posts through a real kube-apiserver, so the API's
// own validation, admission and field selectors judge the Events.
func TestPostRealAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	cs := c.Client()
	ctx := kubetest.Ctx(t)
	kubetest.Namespace(t, cs, "shop")
	live := kubetest.Pod(t, cs, "shop", "cart", nil, "")
	mirror := kubetest.Pod(t, cs, "shop", "static-web-node-a", map[string]string{events.MirrorAnnotation: "5f3c0c0c0ffee"}, "node-a")
	replaced := kubetest.Pod(t, cs, "shop", "db-0", nil, "")

	hostile := record(findings.Pod{Namespace: "shop", Name: "cart", UID: string(live.UID)}, "hostile")
	for range 100 {
		hostile.Examples = append(hostile.Examples, findings.Example{Family: "ip", Table: "nat", Rule: "-A OUTPUT -m comment --comment \"\x1b[2J\u202eé\xff\" -j REDIRECT --to-ports 15001"})
	}

	cases := []struct {
		name    string
		rec     findings.Record
		want    events.Outcome
		lookup  *corev1.Pod // the pod whose describe must show the Event
		replays int
		fullish bool // the note must come near the API's limit
	}{
		{name: "live pod", rec: record(findings.Pod{Namespace: "shop", Name: "cart", UID: string(live.UID)}, "fp1"), want: events.Created, lookup: live, replays: 2},
		{name: "static pod", rec: record(findings.Pod{Namespace: "shop", Name: mirror.Name, UID: "5f3c0c0c0ffee"}, "fp2"), want: events.Created, lookup: mirror, replays: 1},
		{name: "full note with hostile text", rec: hostile, want: events.Created, lookup: live, fullish: true},
		{name: "replaced pod", rec: record(findings.Pod{Namespace: "shop", Name: "db-0", UID: "old-uid"}, "fp3"), want: events.PodGone},
		{name: "pod gone", rec: record(findings.Pod{Namespace: "shop", Name: "nope", UID: "u"}, "fp4"), want: events.PodGone},
		{name: "namespace gone", rec: record(findings.Pod{Namespace: "gone", Name: "nope", UID: "u"}, "fp5"), want: events.PodGone},
	}
	p := events.New(cs, "node-a", false)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := p.Post(ctx, tc.rec)
			if err != nil {
				t.Fatalf("Post: %v", err)
			}
			if res.Outcome != tc.want {
				t.Fatalf("Post = %+v, want %q", res, tc.want)
			}
			// The live pod and its owner come back for lib/openreports: a bare
			// pod (here every one) is its own owner.
			if tc.lookup == nil && res.Pod != nil || tc.lookup != nil && (res.Pod == nil || res.Pod.UID != tc.lookup.UID ||
				res.Ref.Kind != "Pod" || res.Ref.UID != tc.lookup.UID || res.Ref.Name != res.Owner.Name) {
				t.Errorf("Post's pod %v, owner %v, reference %+v; want the live pod %v, its own owner", res.Pod != nil, res.Owner, res.Ref, tc.lookup != nil)
			}
			for i := range tc.replays {
				again, err := p.Post(ctx, tc.rec)
				if err != nil || again.Outcome != events.Duplicate {
					t.Fatalf("replay %d = %+v, %v; want duplicate", i, again, err)
				}
			}
			if tc.lookup == nil {
				return
			}
			evs, err := kubetest.Events(ctx, cs, tc.lookup.Namespace, "Pod", tc.lookup.Name, tc.lookup.UID)
			if err != nil {
				t.Fatal(err)
			}
			var mine []corev1.Event
			for _, e := range evs {
				if e.Name == events.PodEventName(tc.rec) {
					mine = append(mine, e)
				}
			}
			if len(mine) != 1 {
				t.Fatalf("describe finds %d events named %s, want 1 (all: %d)", len(mine), events.PodEventName(tc.rec), len(evs))
			}
			e := mine[0]
			if e.Reason != events.Reason || e.Type != corev1.EventTypeWarning || e.ReportingController != events.Controller || e.ReportingInstance != "node-a" || e.Action != events.Action {
				t.Errorf("event fields: reason %q type %q controller %q instance %q action %q", e.Reason, e.Type, e.ReportingController, e.ReportingInstance, e.Action)
			}
			if e.Message != wording.Note(tc.rec, res.Owner) || len(e.Message) > wording.NoteLimit {
				t.Errorf("stored note (%d bytes) differs from the rendered one:\n%s", len(e.Message), e.Message)
			}
			if tc.fullish && len(e.Message) < wording.NoteLimit-100 {
				t.Errorf("note is %d bytes, want close to %d", len(e.Message), wording.NoteLimit)
			}
			if !strings.Contains(e.Message, "RHEL 10") {
				t.Errorf("note lacks the deprecation: %q", e.Message)
			}
		})
	}
	if _, err := cs.CoreV1().Pods("shop").Get(ctx, replaced.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("replaced pod vanished: %v", err)
	}
}

// TestNodeEventRealAPIServer checks the Node summary the way `kubectl
// describe node` finds kubelet Events: by the node name as UID.
func TestNodeEventRealAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	cs := c.Client()
	ctx := kubetest.Ctx(t)
	kubetest.Namespace(t, cs, "shop")
	a := kubetest.Pod(t, cs, "shop", "a", nil, "")
	b := kubetest.Pod(t, cs, "shop", "b", nil, "")
	p := events.New(cs, "worker-1", true)
	for _, pod := range []*corev1.Pod{a, b} {
		if res, err := p.Post(ctx, record(findings.Pod{Namespace: "shop", Name: pod.Name, UID: string(pod.UID)}, "same")); err != nil || res.Outcome != events.Created {
			t.Fatalf("Post %s = %+v, %v", pod.Name, res, err)
		}
	}
	evs, err := kubetest.Events(ctx, cs, "", "Node", "worker-1", types.UID("worker-1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Namespace != events.NodeEventNamespace || evs[0].Reason != events.Reason {
		t.Fatalf("node events = %+v, want one in %q", evs, events.NodeEventNamespace)
	}
	if !strings.HasPrefix(evs[0].Message, "Pod shop/a on this node") {
		t.Errorf("node note = %q", evs[0].Message)
	}
}

// TestTerminatingNamespaceRejected: the NamespaceLifecycle plugin refuses
// new Events in a terminating namespace for good; that must not block.
func TestTerminatingNamespaceRejected(t *testing.T) {
	c := kubetest.Start(t)
	cs := c.Client()
	ctx := kubetest.Ctx(t)
	kubetest.Namespace(t, cs, "leaving")
	pod := kubetest.Pod(t, cs, "leaving", "x", nil, "")
	// No namespace controller runs, so the namespace stays Terminating.
	if err := cs.CoreV1().Namespaces().Delete(ctx, "leaving", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec := record(findings.Pod{Namespace: "leaving", Name: "x", UID: string(pod.UID)}, "fp")
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := events.New(cs, "node-a", false).Post(ctx, rec)
		if err == nil && res.Outcome == events.Rejected {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Post = %+v, %v; want rejected", res, err)
		}
		// The plugin's namespace cache may not have seen the deletion yet.
		time.Sleep(200 * time.Millisecond)
	}
}

// TestUnknownRealAPIServer: the Event of a record whose inspection could
// not finish passes the API's validation, regards the live pod and is
// found by its own reason.
func TestUnknownRealAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	cs := c.Client()
	ctx := kubetest.Ctx(t)
	kubetest.Namespace(t, cs, "shop")
	live := kubetest.Pod(t, cs, "shop", "hider", nil, "")
	rec := record(findings.Pod{Namespace: "shop", Name: "hider", UID: string(live.UID)}, "unknown-fp")
	rec.Nft, rec.Examples, rec.Truncated, rec.State = findings.Nft{Tables: []string{}}, nil, true, findings.StateUnknown
	rec.Error = "inspect legacy tables: legacy x_tables busy"
	res, err := events.New(cs, "node-a", true).Post(ctx, rec)
	if err != nil || res.Outcome != events.Created || res.Node != "" {
		t.Fatalf("Post = %+v, %v; want created, no node Event", res, err)
	}
	evs, err := kubetest.Events(ctx, cs, "shop", "Pod", "hider", live.UID)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Reason != events.UnknownReason || evs[0].Type != corev1.EventTypeWarning || evs[0].Message != wording.UnknownNote(rec, res.Owner) {
		t.Fatalf("events on the pod: %+v, want one %s Warning with the unknown note", evs, events.UnknownReason)
	}
}

// TestNodeSummaryRetryCounted: the pod Event is created, then the node
// summary's create fails (no answer) and the line is tried again; the
// pod Event then answers AlreadyExists. It was counted as a duplicate
// and never as created (created_total, the Events by impact); the Poster
// remembers it was its own and counts it as created once.
func TestNodeSummaryRetryCounted(t *testing.T) {
	c := kubetest.Start(t)
	ctx := kubetest.Ctx(t)
	kubetest.Namespace(t, c.Client(), "shop")
	live := kubetest.Pod(t, c.Client(), "shop", "cart", nil, "")
	var left atomic.Int32
	left.Store(1)
	cfg := c.Config(c.AdminToken)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTrip(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/namespaces/"+events.NodeEventNamespace+"/events") && left.Add(-1) >= 0 {
				return nil, errors.New("connection refused (test fault)")
			}
			return rt.RoundTrip(r)
		})
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	ev := events.NewConsumer(events.New(cs, "node-a", true), log, kubeapi.NewRefusals())
	reg := prometheus.NewRegistry()
	ev.Register(reg, func() int64 { return 0 }, func() int64 { return 0 })

	rec := record(findings.Pod{Namespace: "shop", Name: "cart", UID: string(live.UID)}, "fp")
	rec.Impact, rec.Worst = findings.Impact{Xt: 1}, findings.ImpactXt
	if err := ev.Consume(ctx, rec); !kubeapi.Retryable(err) {
		t.Fatalf("Consume with the node summary refused = %v, want a retryable error", err)
	}
	if err := ev.Consume(ctx, rec); err != nil {
		t.Fatalf("Consume again: %v", err)
	}
	// Another line with the same Event is a duplicate again.
	if err := ev.Consume(ctx, rec); err != nil {
		t.Fatalf("Consume a replay: %v", err)
	}
	got := ev.Fields()
	if got["created_total"] != int64(1) || got["duplicate_total"] != int64(1) {
		t.Errorf("created_total %v, duplicate_total %v; want 1 and 1", got["created_total"], got["duplicate_total"])
	}
	byImpact := map[string]float64{}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range fams {
		if fam.GetName() == "iptables_alerter_forward_events_by_impact_total" {
			for _, m := range fam.GetMetric() {
				var labels []string
				for _, l := range m.GetLabel() {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
				byImpact[strings.Join(labels, ",")] = m.GetCounter().GetValue()
			}
		}
	}
	if diff := cmp.Diff(map[string]float64{"impact=xt,vendor=unknown": 1}, byImpact); diff != "" {
		t.Errorf("pod Events by impact (-want +got):\n%s", diff)
	}
	for _, e := range []struct{ namespace, name string }{{"shop", events.PodEventName(rec)}, {events.NodeEventNamespace, events.NodeEventName("node-a", rec.Fingerprint)}} {
		if _, err := c.Client().EventsV1().Events(e.namespace).Get(ctx, e.name, metav1.GetOptions{}); err != nil {
			t.Errorf("event %s/%s: %v", e.namespace, e.name, err)
		}
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestOwnerRefusedInOneNamespace: a webhook authorizer (in front of RBAC,
// which grants the forwarder its ClusterRole) refuses the forwarder the
// ReplicaSets of one namespace. That 403 held the node's whole forwarder
// for good, every namespace behind one namespace's rule. An access review
// now says the call is allowed everywhere, so the refusal is that
// namespace's: the Event is posted with the pod's ReplicaSet, the nearest
// owner read. Its refusal of Events in another namespace held the node
// the same way: that Event is now rejected (the namespace's refusal),
// not retried. Missing RBAC (a Role in one namespace only, no ClusterRole)
// still holds the line for an admin to fix.
func TestOwnerRefusedInOneNamespace(t *testing.T) {
	kubetest.Need(t)
	var refused atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var sar authorizationv1.SubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&sar); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		a := sar.Spec.ResourceAttributes
		if a != nil && (a.Resource == "replicasets" && a.Namespace == "walled" || a.Resource == "events" && a.Verb == "create" && a.Namespace == "muted" ||
			a.Resource == "pods" && a.Verb == "get" && a.Namespace == "hidden") &&
			strings.HasSuffix(sar.Spec.User, ":iptables-alerter-forward") {
			sar.Status = authorizationv1.SubjectAccessReviewStatus{Denied: true, Reason: "walled off by policy"}
			refused.Add(1)
		}
		_ = json.NewEncoder(w).Encode(sar)
	}))
	t.Cleanup(hook.Close)
	cfg := filepath.Join(t.TempDir(), "authz.kubeconfig")
	kc := "apiVersion: v1\nkind: Config\nclusters:\n- name: authz\n  cluster: {server: " + hook.URL + "}\nusers:\n- name: apiserver\n  user: {}\n" +
		"contexts:\n- name: authz\n  context: {cluster: authz, user: apiserver}\ncurrent-context: authz\n"
	if err := os.WriteFile(cfg, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	c := kubetest.StartArgs(t, "--authorization-mode=Webhook,RBAC", "--authorization-webhook-config-file="+cfg, "--authorization-webhook-version=v1")
	cs := c.Client()
	ctx := kubetest.Ctx(t)
	kubetest.Apply(t, cs, "../../packaging/rbac/forward.yaml")
	fwd, err := kubernetes.NewForConfig(c.Config(kubetest.Token(t, cs, "iptables-alerter", "iptables-alerter-forward")))
	if err != nil {
		t.Fatal(err)
	}
	kubetest.Namespace(t, cs, "walled")
	kubetest.Namespace(t, cs, "open")
	walled, open := kubetest.Workloads(t, cs, "walled")["web-7c9-aaaaa"], kubetest.Workloads(t, cs, "open")["web-7c9-aaaaa"]
	p := events.New(fwd, "node-a", false)
	for _, tc := range []struct {
		pod   kubetest.Owned
		owner string
	}{{open, "Deployment/web"}, {walled, "ReplicaSet/web-7c9"}} {
		pod := findings.Pod{Namespace: tc.pod.Pod.Namespace, Name: tc.pod.Pod.Name, UID: string(tc.pod.Pod.UID)}
		res, err := p.Post(ctx, record(pod, "fp-"+pod.Namespace))
		if err != nil || res.Outcome != events.Created {
			t.Fatalf("%s: %+v, %v: want created (a refusal of one namespace held the forwarder)", pod.Namespace, res, err)
		}
		if got := res.Owner.String(); got != tc.owner {
			t.Errorf("%s: owner %s, want %s", pod.Namespace, got, tc.owner)
		}
		if (res.OwnerWhy != nil) != (pod.Namespace == "walled") {
			t.Errorf("%s: OwnerWhy %v", pod.Namespace, res.OwnerWhy)
		}
	}
	if refused.Load() == 0 {
		t.Error("the webhook refused nothing: the test did not test")
	}
	kubetest.Namespace(t, cs, "muted")
	muted := kubetest.Workloads(t, cs, "muted")["web-7c9-aaaaa"]
	mpod := findings.Pod{Namespace: "muted", Name: muted.Pod.Name, UID: string(muted.Pod.UID)}
	if res, err := p.Post(ctx, record(mpod, "fp-muted")); err != nil || res.Outcome != events.Rejected || kubeapi.Refusal(res.Why) != kubeapi.RefusedForbidden {
		t.Errorf("muted: %+v, %v: want the Event rejected as this namespace's refusal (forbidden), not an error that holds the line", res, err)
	}
	// The pod's own GET refused in one namespace: the same.
	kubetest.Namespace(t, cs, "hidden")
	hidden := kubetest.Workloads(t, cs, "hidden")["web-7c9-aaaaa"]
	hpod := findings.Pod{Namespace: "hidden", Name: hidden.Pod.Name, UID: string(hidden.Pod.UID)}
	if res, err := p.Post(ctx, record(hpod, "fp-hidden")); err != nil || res.Outcome != events.Rejected || kubeapi.Refusal(res.Why) != kubeapi.RefusedForbidden || res.Namespace != "hidden" {
		t.Errorf("hidden: %+v, %v: want the Event rejected as this namespace's refusal (forbidden), not an error that holds the line", res, err)
	}
	// The Reports side, on its own (a forwarder not posting Events),
	// takes the same stand and says why.
	c.CRD(t, "../../packaging/crds/openreports.io_reports.yaml", openreportsv1alpha1.SchemeGroupVersion.String(), "reports")
	rc, err := versioned.NewForConfig(c.Config(kubetest.Token(t, cs, "iptables-alerter", "iptables-alerter-forward")))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := openreports.New(fwd, rc, "node-a").Write(ctx, record(hpod, "fp-hidden-report")); err != nil || res.Outcome != openreports.Rejected || kubeapi.Refusal(res.Why) != kubeapi.RefusedForbidden {
		t.Errorf("hidden, Reports: %+v, %v: want the Report rejected as this namespace's refusal (forbidden)", res, err)
	}
	wpod := findings.Pod{Namespace: "walled", Name: walled.Pod.Name, UID: string(walled.Pod.UID)}
	wres, err := openreports.New(fwd, rc, "node-a").Write(ctx, record(wpod, "fp-reports"))
	if err != nil || wres.Outcome != openreports.Written || wres.Owner.String() != "ReplicaSet/web-7c9" || wres.OwnerWhy == nil {
		t.Errorf("Reports: %+v, %v; want written under ReplicaSet/web-7c9 with the refusal said", wres, err)
	}
	// The forwarder's Reports path (its Keeper) logs the refusal with
	// the finding, where no Event says it.
	klog, logged := logtest.NewNullLogger()
	keeper := openreports.NewKeeper(openreports.New(fwd, rc, "node-a"), rc, fwd, klog)
	keeper.Start(ctx)
	if err := keeper.Consume(ctx, record(wpod, "fp-keeper")); err != nil {
		t.Fatalf("Reports keeper: %v", err)
	}
	said, lines := false, []string{}
	for _, e := range logged.AllEntries() {
		why, _ := e.Data["owner_error"].(string)
		said = said || e.Level == logrus.WarnLevel && strings.Contains(why, "walled off by policy") && e.Data["pod_name"] == wpod.Name
		lines = append(lines, fmt.Sprintf("%s %s %v", e.Level, e.Message, e.Data))
	}
	if !said {
		t.Errorf("the Reports keeper did not log the refusal (owner_error with the pod); log:\n%s", strings.Join(lines, "\n"))
	}

	// Missing RBAC: the ClusterRoleBinding gone, the ReplicaSet get is
	// refused everywhere, and the finding is held (an error to retry).
	if err := cs.RbacV1().ClusterRoleBindings().Delete(ctx, "iptables-alerter-forward", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "pods-only"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "pods-only"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "pods-only"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "iptables-alerter-forward", Namespace: "iptables-alerter"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := findings.Pod{Namespace: "open", Name: open.Pod.Name, UID: string(open.Pod.UID)}
	deadline := time.Now().Add(30 * time.Second)
	for {
		// A fresh poster: the owner cache holds the ReplicaSet's answer.
		res, err := events.New(fwd, "node-a", false).Post(ctx, record(pod, "fp-norbac"))
		if err != nil && kubeapi.IsForbiddenToUs(err) && kubeapi.Retryable(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("missing RBAC: %+v, %v; want a retryable 403", res, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
