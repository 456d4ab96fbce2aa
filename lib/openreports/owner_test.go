package openreports_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/iptables-alerter/iptables-alerter/lib/consumer"
	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
	"github.com/iptables-alerter/iptables-alerter/lib/wording"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// fault fails the first requests pick chooses, as many as left says:
// with a Status of code, or with no HTTP answer at all when code is 0.
type fault struct {
	code int
	pick func(*http.Request) bool
	left atomic.Int32
}

func (f *fault) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTrip(func(r *http.Request) (*http.Response, error) {
		if !f.pick(r) || f.left.Add(-1) < 0 {
			return rt.RoundTrip(r)
		}
		if f.code == 0 {
			return nil, errors.New("connection refused (test fault)")
		}
		// No Retry-After: client-go hands the error up instead of
		// waiting and trying again itself.
		body := fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected","code":%d}`, f.code)
		return &http.Response{StatusCode: f.code, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: r}, nil
	})
}

// withEvents puts an Events consumer through cs before the Reports, as
// the forwarder does: the Reports take the pod and owner its posts read.
func (f *forwarder) withEvents(cs kubernetes.Interface, node string) *events.Consumer {
	ev := events.NewConsumer(events.New(cs, node, false), f.runner.Log, kubeapi.NewRefusals())
	f.keeper.Posted = ev.Posted
	f.runner.Consumers = append([]consumer.Named{{Name: "events", Consumer: ev}}, f.runner.Consumers...)
	return ev
}

// TestOwnerLookupRetried: the first GET of a pod's ReplicaSet fails once
// (a 503, a refused connection). The pod's result went into a
// ReplicaSet/<rs> Report and its Event named the ReplicaSet, while its
// later findings went under the Deployment: one pod in two Reports. Now
// the line is held and tried again, and in the end the pod has one
// result, in the Deployment's Report, and its Event names the Deployment.
func TestOwnerLookupRetried(t *testing.T) {
	c, admin, owned := start(t)
	web := owned["web-7c9-aaaaa"].Pod
	deployment := owner.Owner{Kind: "Deployment", Name: "web"}
	isReplicaSetGet := func(r *http.Request) bool {
		return r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/replicasets/")
	}
	for _, tc := range []struct {
		name string
		code int
	}{
		{name: "unavailable", code: http.StatusServiceUnavailable},
		{name: "refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := "node-" + tc.name
			life, end := context.WithCancel(context.Background())
			t.Cleanup(end)
			f := &fault{code: tc.code, pick: isReplicaSetGet}
			f.left.Store(1)
			var cs kubernetes.Interface
			fwd := newForwarder(t, life, func() (kubernetes.Interface, versioned.Interface) {
				var rc versioned.Interface
				cs, rc = wrappedClients(t, c, f.wrap)
				return cs, rc
			}, node, nil)
			ev := fwd.withEvents(cs, node)

			first := record(web, findings.StatePresent, 0, 1, 0)
			first.Fingerprint += "-" + tc.name
			fwd.append(t, first)
			if err := fwd.runner.Once(kubetest.Ctx(t)); !kubeapi.Retryable(err) {
				t.Errorf("Once with the ReplicaSet unread = %v, want a retryable error", err)
			}
			if err := fwd.runner.Once(kubetest.Ctx(t)); err != nil {
				t.Fatalf("Once retrying the line: %v", err)
			}
			// A later finding of the same pod.
			later := first
			later.Fingerprint, later.ContainerID, later.Time = first.Fingerprint+"-later", "c-later", findings.Now()
			fwd.append(t, later)
			if err := fwd.runner.Once(kubetest.Ctx(t)); err != nil {
				t.Fatalf("Once with the later finding: %v", err)
			}
			if f.left.Load() >= 0 {
				t.Fatal("the fault was never served")
			}

			list, err := admin.OpenreportsV1alpha1().Reports("shop").List(kubetest.Ctx(t), metav1.ListOptions{LabelSelector: openreports.Selector(node)})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, r := range list.Items {
				names = append(names, r.Name)
			}
			if diff := cmp.Diff([]string{openreports.Name(deployment, node)}, names); diff != "" {
				t.Errorf("the node's Reports (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{web.Name}, resultPods(t, admin, "shop", node)); diff != "" {
				t.Errorf("pods with a result (-want +got):\n%s", diff)
			}
			e, err := c.Client().EventsV1().Events("shop").Get(kubetest.Ctx(t), events.PodEventName(first), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if e.Note != wording.Note(first, deployment) {
				t.Errorf("the first finding's Event note names another owner than %s:\n%s", deployment, e.Note)
			}
			if got := ev.Fields()["created_total"]; got != int64(2) {
				t.Errorf("created_total %v, want 2", got)
			}
		})
	}
}

// TestWriteOwnerLookupFails: Write, which reads the owner itself, gives
// a failed ReplicaSet lookup back as the error to retry instead of
// writing the pod's result into the ReplicaSet's Report.
func TestWriteOwnerLookupFails(t *testing.T) {
	c, admin, owned := start(t)
	web := owned["web-7c9-aaaaa"].Pod
	ctx := kubetest.Ctx(t)
	f := &fault{code: http.StatusTooManyRequests, pick: func(r *http.Request) bool {
		return r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/replicasets/")
	}}
	f.left.Store(1)
	cs, _ := wrappedClients(t, c, f.wrap)
	w := openreports.New(cs, admin, "node-a")
	rec := record(web, findings.StatePresent, 0, 1, 0)
	if res, err := w.Write(ctx, rec); !kubeapi.Retryable(err) {
		t.Fatalf("Write with the ReplicaSet unread = %+v, %v; want a retryable error", res, err)
	}
	if diff := cmp.Diff([]string(nil), resultPods(t, admin, "shop", "node-a")); diff != "" {
		t.Errorf("pods with a result after the failed Write (-want +got):\n%s", diff)
	}
	res, err := w.Write(ctx, rec)
	if err != nil || res.Outcome != openreports.Written || res.Owner != (owner.Owner{Kind: "Deployment", Name: "web"}) {
		t.Fatalf("Write again = %+v, %v; want written under Deployment/web", res, err)
	}
}
