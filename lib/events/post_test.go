package events

import (
	"context"
	"errors"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/lib/wording"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func livePod(uid string, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: "shop", Name: "cart-7d9f", UID: types.UID(uid), Annotations: annotations,
	}}
}

// TestPostFake drives Post through client-go's fake clientset: the logic of
// outcomes and retries. The same paths run against a real API server in
// apiserver_test.go.
func TestPostFake(t *testing.T) {
	rec := findingstest.Sample()
	rec.Time = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	noPod := rec
	noPod.Pod = findings.Pod{}
	// A line without usage and without a state is read as unknown.
	noUsage := rec
	noUsage.Nft, noUsage.Truncated, noUsage.Error = findings.Nft{}, true, "legacy x_tables busy"
	gone := rec
	gone.Nft, gone.Examples, gone.State = findings.Nft{}, nil, findings.StateGone
	presentNoCounts := noUsage
	presentNoCounts.State = findings.StatePresent
	events := schema.GroupResource{Group: "events.k8s.io", Resource: "events"}
	fail := func(verb, resource string, err error) func(*fake.Clientset) {
		return func(cs *fake.Clientset) {
			cs.PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err })
		}
	}
	// A ReplicaSet's pod: its Deployment is looked up.
	ofReplicaSet := livePod(rec.Pod.UID, nil)
	ofReplicaSet.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "cart-7d9", UID: "rs-uid", Controller: new(true)}}

	cases := []struct {
		name       string
		pod        *corev1.Pod
		rec        findings.Record
		setup      func(*fake.Clientset)
		want       Outcome
		wantUID    types.UID
		wantMirror bool
		wantRetry  bool
		wantEvents int
	}{
		{name: "live pod", pod: livePod(rec.Pod.UID, nil), rec: rec, want: Created, wantUID: types.UID(rec.Pod.UID), wantEvents: 1},
		{name: "static pod via mirror", pod: livePod("mirror-uid", map[string]string{MirrorAnnotation: rec.Pod.UID}), rec: rec, want: Created, wantUID: "mirror-uid", wantMirror: true, wantEvents: 1},
		{name: "replaced pod", pod: livePod("new-uid", nil), rec: rec, want: PodGone},
		{name: "mirror of another config", pod: livePod("mirror-uid", map[string]string{MirrorAnnotation: "other-hash"}), rec: rec, want: PodGone},
		{name: "pod gone", rec: rec, want: PodGone},
		{name: "record without pod", pod: livePod(rec.Pod.UID, nil), rec: noPod, want: NoPod},
		{name: "record without usage: unknown", pod: livePod(rec.Pod.UID, nil), rec: noUsage, want: Created, wantUID: types.UID(rec.Pod.UID), wantEvents: 1},
		{name: "usage gone", pod: livePod(rec.Pod.UID, nil), rec: gone, want: NoPod},
		{name: "present without counts", pod: livePod(rec.Pod.UID, nil), rec: presentNoCounts, want: NoPod},
		{name: "api unavailable on create", pod: livePod(rec.Pod.UID, nil), rec: rec, setup: fail("create", "events", apierrors.NewServiceUnavailable("down")), wantRetry: true},
		{name: "throttled on get", pod: livePod(rec.Pod.UID, nil), rec: rec, setup: fail("get", "pods", apierrors.NewTooManyRequests("slow", 1)), wantRetry: true},
		{name: "rbac missing", pod: livePod(rec.Pod.UID, nil), rec: rec, setup: fail("create", "events", apierrors.NewForbidden(events, "x", errors.New(`User "system:serviceaccount:a:b" cannot create resource "events" in API group "events.k8s.io" in the namespace "shop"`))), wantRetry: true},
		{name: "quota", pod: livePod(rec.Pod.UID, nil), rec: rec, setup: fail("create", "events", apierrors.NewForbidden(events, "x", errors.New("exceeded quota: q, requested: count/events.events.k8s.io=1, used: count/events.events.k8s.io=0, limited: count/events.events.k8s.io=0"))), want: Rejected, wantUID: types.UID(rec.Pod.UID)},
		{name: "invalid", pod: livePod(rec.Pod.UID, nil), rec: rec, setup: fail("create", "events", apierrors.NewInvalid(schema.GroupKind{Group: "events.k8s.io", Kind: "Event"}, "x", field.ErrorList{field.Required(field.NewPath("note"), "")})), want: Rejected, wantUID: types.UID(rec.Pod.UID)},
		{name: "owner lookup unavailable", pod: ofReplicaSet, rec: rec, setup: fail("get", "replicasets", apierrors.NewServiceUnavailable("down")), wantRetry: true},
		{name: "owner gone: its pod's controller named", pod: ofReplicaSet, rec: rec, want: Created, wantUID: types.UID(rec.Pod.UID), wantEvents: 1},
		{name: "already exists", pod: livePod(rec.Pod.UID, nil), rec: rec, setup: fail("create", "events", apierrors.NewAlreadyExists(events, "x")), want: Duplicate, wantUID: types.UID(rec.Pod.UID)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.pod != nil {
				objs = append(objs, tc.pod)
			}
			cs := fake.NewClientset(objs...)
			if tc.setup != nil {
				tc.setup(cs)
			}
			res, err := New(cs, "node-a", false).Post(context.Background(), tc.rec)
			if tc.wantRetry {
				if err == nil || !kubeapi.Retryable(err) {
					t.Fatalf("Post = %+v, %v; want a retryable error", res, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Post: %v", err)
			}
			if res.Outcome != tc.want || res.PodUID != tc.wantUID || res.Mirror != tc.wantMirror {
				t.Errorf("Post = %+v, want outcome %q uid %q mirror %v", res, tc.want, tc.wantUID, tc.wantMirror)
			}
			if (res.Why != nil) != (tc.want == PodGone || tc.want == NoPod || tc.want == Rejected) {
				t.Errorf("Why = %v for outcome %q", res.Why, res.Outcome)
			}
			l, err := cs.EventsV1().Events("shop").List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Items) != tc.wantEvents {
				t.Errorf("%d events stored, want %d", len(l.Items), tc.wantEvents)
			}
		})
	}
}

func TestPodEventFields(t *testing.T) {
	rec := findingstest.Sample()
	rec.Time = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cs := fake.NewClientset(livePod("mirror-uid", map[string]string{MirrorAnnotation: rec.Pod.UID}))
	p := New(cs, "node-a", true)
	res, err := p.Post(context.Background(), rec)
	if err != nil || res.Outcome != Created || res.Node != Created {
		t.Fatalf("Post = %+v, %v", res, err)
	}
	got, err := cs.EventsV1().Events("shop").Get(context.Background(), PodEventName(rec), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	static := owner.Owner{Kind: owner.KindStaticPod, Name: "cart-7d9f"}
	if res.Owner != static {
		t.Errorf("owner %+v, want %+v", res.Owner, static)
	}
	want := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name: PodEventName(rec), Namespace: "shop",
			Annotations: map[string]string{FingerprintAnnotation: rec.Fingerprint, ContainerAnnotation: rec.ContainerID,
				SummaryAnnotation: SummaryOf(rec, "node-a", static).JSON()},
		},
		EventTime:           metav1.NewMicroTime(rec.Time),
		ReportingController: Controller,
		ReportingInstance:   "node-a",
		Action:              Action,
		Reason:              Reason,
		Type:                corev1.EventTypeWarning,
		Regarding:           corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: "shop", Name: "cart-7d9f", UID: "mirror-uid"},
		Note:                wording.Note(rec, static),
	}
	// Bookkeeping the fake tracker adds.
	got.ManagedFields, got.TypeMeta = nil, metav1.TypeMeta{}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pod event (-want +got):\n%s", diff)
	}

	node, err := cs.EventsV1().Events(NodeEventNamespace).Get(context.Background(), NodeEventName("node-a", rec.Fingerprint), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: "node-a", UID: "node-a"}, node.Regarding); diff != "" {
		t.Errorf("node event regarding (-want +got):\n%s", diff)
	}
	if node.Related == nil || node.Related.UID != "mirror-uid" {
		t.Errorf("node event related = %+v, want the mirror pod", node.Related)
	}
	if !strings.HasPrefix(node.Note, "Pod shop/cart-7d9f on this node") || len(node.Note) > wording.NoteLimit {
		t.Errorf("node note = %q", node.Note)
	}

	// A second pod with the same usage adds no second node Event.
	rec2 := rec
	rec2.Pod = findings.Pod{Namespace: "shop", Name: "cart-7d9f", UID: rec.Pod.UID}
	rec2.SandboxID = "another-sandbox"
	res, err = p.Post(context.Background(), rec2)
	if err != nil || res.Outcome != Created || res.Node != Duplicate {
		t.Errorf("second Post = %+v, %v; want pod created, node duplicate", res, err)
	}
}

// TestUnknownEvent: a record whose inspection could not finish gets its
// own Warning, reason UnknownReason, saying so and why in plain words,
// under a name of its own (the usage Event that may follow is another);
// the node summary, which says the pod created rules, is not posted.
func TestUnknownEvent(t *testing.T) {
	rec := findingstest.Sample()
	rec.Nft, rec.Examples, rec.Truncated = findings.Nft{}, nil, true
	rec.Error = "inspect legacy: legacy x_tables busy: probe did not answer"
	rec.State = findings.StateUnknown
	cs := fake.NewClientset(livePod(rec.Pod.UID, nil))
	p := New(cs, "node-a", true)
	res, err := p.Post(context.Background(), rec)
	if err != nil || res.Outcome != Created || res.Node != "" {
		t.Fatalf("Post = %+v, %v; want created, no node Event", res, err)
	}
	got, err := cs.EventsV1().Events("shop").Get(context.Background(), PodEventName(rec), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Reason != UnknownReason || got.Type != corev1.EventTypeWarning || got.Regarding.Name != "cart-7d9f" {
		t.Errorf("event: reason %q type %q regarding %+v", got.Reason, got.Type, got.Regarding)
	}
	for _, want := range []string{"could not finish", "x_tables lock", "(inspect legacy: legacy x_tables busy: probe did not answer)", "Container: istio-init", "iptables-alerter scan"} {
		if !strings.Contains(got.Note, want) {
			t.Errorf("note lacks %q:\n%s", want, got.Note)
		}
	}
	if s := got.Annotations[SummaryAnnotation]; !strings.Contains(s, `"state":"unknown"`) || !strings.Contains(s, "legacy x_tables busy") {
		t.Errorf("summary annotation %s, want the state and the error", s)
	}
	if again, err := p.Post(context.Background(), rec); err != nil || again.Outcome != Duplicate {
		t.Errorf("replay = %+v, %v; want duplicate", again, err)
	}
	present := findingstest.Sample()
	present.SandboxID = rec.SandboxID
	if PodEventName(present) == PodEventName(rec) {
		t.Errorf("the unknown and the usage Event share the name %s", PodEventName(rec))
	}
	if l, _ := cs.EventsV1().Events(NodeEventNamespace).List(context.Background(), metav1.ListOptions{}); len(l.Items) != 0 {
		t.Errorf("node Events for an unknown record: %d", len(l.Items))
	}
}

// TestTruncatedEvent: a look that stopped early and saw native rules only
// (the pod kept the x_tables lock busy over its legacy ones) is usage, but
// no verdict: its Event does not say the pod keeps loading on RHEL 10, it
// says the check was cut, what it saw and why; its summary says truncated,
// so report does not read it as a complete native look.
func TestTruncatedEvent(t *testing.T) {
	rec := findingstest.Sample()
	rec.State, rec.Impact, rec.Worst, rec.Truncated = findings.StatePresent, findings.Impact{Native: 12}, findings.ImpactNative, true
	rec.Error = "inspect legacy: legacy x_tables busy: probe did not answer"
	cs := fake.NewClientset(livePod(rec.Pod.UID, nil))
	p := New(cs, "node-a", true)
	if res, err := p.Post(context.Background(), rec); err != nil || res.Outcome != Created || res.Node != Created {
		t.Fatalf("Post = %+v, %v; want pod and node Events created", res, err)
	}
	pod, err := cs.EventsV1().Events("shop").Get(context.Background(), PodEventName(rec), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Reason != Reason || !strings.Contains(pod.Annotations[SummaryAnnotation], `"truncated":true`) {
		t.Errorf("reason %q, summary %s; want usage, truncated", pod.Reason, pod.Annotations[SummaryAnnotation])
	}
	node, err := cs.EventsV1().Events(NodeEventNamespace).Get(context.Background(), NodeEventName("node-a", rec.Fingerprint), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, note := range []string{pod.Note, node.Note} {
		if strings.Contains(note, "Keeps loading") {
			t.Errorf("note says the pod keeps loading:\n%s", note)
		}
		for _, want := range []string{"stopped early", "native nftables rules", "x_tables lock", "(inspect legacy: legacy x_tables busy: probe did not answer)"} {
			if !strings.Contains(note, want) {
				t.Errorf("note lacks %q:\n%s", want, note)
			}
		}
	}
}

// TestCommandEvent: a command's own finding (the exec watch's failed write
// or read: state present, no rules) is no "usage gone": a legacy write the
// kernel refused is the RHEL 10 breakage itself and gets the pod's Event,
// with the command and its own wording; the node summary, which says the
// pod created rules, is not posted, and a node record's gets its Event.
func TestCommandEvent(t *testing.T) {
	rec := findingstest.Sample()
	rec.Nft, rec.Legacy, rec.Examples, rec.Vendors = findings.Nft{}, findings.Legacy{}, nil, nil
	rec.Source, rec.State, rec.Worst, rec.Fingerprint = findings.SourceExec, findings.StatePresent, findings.ImpactLegacy, "0123456789abcdef0123456789abcdef"
	rec.Exec = &findings.Exec{Argv: []string{"iptables-legacy", "-t", "nat", "-A", "OUTPUT"}, Backend: "legacy", Operation: "write",
		Exited: true, ExitCode: 3, Failed: true, MissingKernelSupport: true}
	cs := fake.NewClientset(livePod(rec.Pod.UID, nil))
	p := New(cs, "node-a", true)
	res, err := p.Post(context.Background(), rec)
	if err != nil || res.Outcome != Created || res.Node != "" {
		t.Fatalf("Post = %+v, %v; want created, no node summary", res, err)
	}
	got, err := cs.EventsV1().Events("shop").Get(context.Background(), PodEventName(rec), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Command: FAILED", "iptables-legacy -t nat -A OUTPUT", "runs iptables commands"} {
		if !strings.Contains(got.Note, want) {
			t.Errorf("note lacks %q:\n%s", want, got.Note)
		}
	}
	if l, _ := cs.EventsV1().Events(NodeEventNamespace).List(context.Background(), metav1.ListOptions{}); len(l.Items) != 0 {
		t.Errorf("node summary Events for a command's own finding: %d", len(l.Items))
	}
	node := rec
	node.Subject, node.Pod, node.SandboxID = findings.SubjectNode, findings.Pod{}, ""
	if res, err := p.Post(context.Background(), node); err != nil || res.Outcome != Created {
		t.Errorf("node record's Post = %+v, %v; want created", res, err)
	}
}
