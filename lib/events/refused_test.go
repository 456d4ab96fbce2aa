package events_test

import (
	"testing"

	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// A finding whose pod name or namespace no API path can hold ("..", "%",
// "/") was refused by client-go before any request, with an error Retryable
// took for a lost connection: the forwarder retried it forever and every
// later finding waited behind it. It is a definitive rejection.
func TestRefusedNamesRealAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	cs := c.Client()
	ctx := kubetest.Ctx(t)
	kubetest.Namespace(t, cs, "shop")
	live := kubetest.Pod(t, cs, "shop", "cart", nil, "")
	p := events.New(cs, "node-a", true)
	for _, pod := range []findings.Pod{
		{Namespace: "shop", Name: "..", UID: "u"},
		{Namespace: "shop", Name: ".", UID: "u"},
		{Namespace: "shop", Name: "%", UID: "u"},
		{Namespace: "shop", Name: "a/b", UID: "u"},
		{Namespace: "shop", Name: "/", UID: "u"},
		{Namespace: "%", Name: "cart", UID: "u"},
		{Namespace: "..", Name: "cart", UID: "u"},
		{Namespace: "a/b", Name: "cart", UID: "u"},
	} {
		res, err := p.Post(ctx, record(pod, "fp"))
		if err != nil || res.Outcome != events.Rejected || res.Why == nil {
			t.Errorf("%q/%q: Post = %+v, %v; want rejected with a reason and no error", pod.Namespace, pod.Name, res, err)
		}
	}
	// Names the API can hold but no pod has are the API's to judge.
	for _, name := range []string{"x y", "UPPER", "é"} {
		res, err := p.Post(ctx, record(findings.Pod{Namespace: "shop", Name: name, UID: "u"}, "fp"))
		if err != nil || res.Outcome != events.PodGone {
			t.Errorf("%q: Post = %+v, %v; want pod gone", name, res, err)
		}
	}
	if res, err := p.Post(ctx, record(findings.Pod{Namespace: "shop", Name: "cart", UID: string(live.UID)}, "fp")); err != nil || res.Outcome != events.Created {
		t.Errorf("valid finding after them: %+v, %v", res, err)
	}
}
