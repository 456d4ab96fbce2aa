package events_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/iptables-alerter/iptables-alerter/lib/catalog"
	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// nodeRecord is a record of the agent's node mode: no pod, its writer a
// host-network pod's container.
func nodeRecord(fingerprint string) findings.Record {
	rec := record(findings.Pod{}, fingerprint)
	rec.Subject, rec.SandboxID, rec.ContainerID, rec.Container = findings.SubjectNode, "", "", ""
	rec.Writer = &findings.Writer{PID: 4242, Comm: "iptables-nft-re", ContainerID: strings.Repeat("ab", 32), Container: "mesh-agent",
		Pod: findings.Pod{Namespace: "mesh", Name: "agent-x7", UID: "u1"}}
	return rec
}

// TestNodeSubjectRealAPIServer (issue 19 item 2): a node record's Event
// regards the Node, without --node-event, names its writer, and is posted
// once; a gone one posts nothing.
func TestNodeSubjectRealAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	cs := c.Client()
	ctx := kubetest.Ctx(t)
	p := events.New(cs, "worker-1", false)
	rec := nodeRecord("nodefp")
	// As recorded before node hints: the pod's wording (issue 25).
	kubeProxy := catalog.Builtin().Match([]string{"KUBE-SERVICES"}, nil)
	rec.Vendors = kubeProxy
	res, err := p.Post(ctx, rec)
	if err != nil || res.Outcome != events.Created || res.Namespace != events.NodeEventNamespace {
		t.Fatalf("Post = %+v, %v; want created in %q", res, err, events.NodeEventNamespace)
	}
	if again, err := p.Post(ctx, rec); err != nil || again.Outcome != events.Duplicate {
		t.Fatalf("replay = %+v, %v; want duplicate", again, err)
	}
	gone := nodeRecord("nodefp")
	gone.State = findings.StateGone
	if res, err := p.Post(ctx, gone); err != nil || res.Outcome != events.NoPod {
		t.Errorf("gone: %+v, %v; want no Event", res, err)
	}
	evs, err := kubetest.Events(ctx, cs, "", "Node", "worker-1", types.UID("worker-1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Reason != events.Reason {
		t.Fatalf("node events = %+v, want one", evs)
	}
	msg := evs[0].Message
	for _, want := range []string{"The node's own network namespace holds iptables rules", "mesh-agent", "mesh/agent-x7", "seen on the node:"} {
		if !strings.Contains(msg, want) {
			t.Errorf("note lacks %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, "this pod") || strings.Contains(msg, "in a pod") {
		t.Errorf("node note speaks of a pod: %s", msg)
	}
	if node := catalog.NodeWords(kubeProxy); !strings.Contains(msg, node[0].Hint[:120]) {
		t.Errorf("node note lacks the node hint %q: %s", node[0].Hint, msg)
	}
}
