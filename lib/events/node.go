package events

import (
	"context"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
	"github.com/iptables-alerter/iptables-alerter/lib/wording"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/iptables-alerter/iptables-alerter/lib/catalog"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

// A record of subject node (the agent's node mode) is about the node's own
// network namespace: no pod to put an Event on. Its Event regards the Node,
// whatever --node-event says (that flag adds a summary to a pod's Event;
// here the Node's is the only one), in the namespace the kubelet's node
// Events use. The writer, a host-network pod's container or a systemd
// unit, is named in the note.

// SubjectAnnotation marks a node record's Event (value "node"), which the
// report reads; the node summary Events, which repeat pods' ones, lack it.
const SubjectAnnotation = "iptables-alerter.io/subject"

// NodeUsageEventName is the name of a node record's Event: one per node,
// fingerprint and state, never a pod's or the node summary's.
func NodeUsageEventName(node string, rec findings.Record) string {
	return kubeapi.ObjectName(node, "node-netns", node, rec.Fingerprint, string(rec.KnownState()))
}

// postNode is Post for a record of subject node.
func (p *Poster) postNode(ctx context.Context, rec findings.Record) (Result, error) {
	if res, skip := noEvent(rec); skip {
		return res, nil
	}
	name := NodeUsageEventName(p.node, rec)
	// A record written before node hints carries the pod's wording.
	rec.Vendors = catalog.NodeWords(rec.Vendors)
	ev := p.base(rec, name, NodeEventNamespace, owner.Owner{})
	// As the node summary: the kubelet uses the node name as UID.
	ev.Regarding = corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: p.node, UID: types.UID(p.node)}
	ev.Annotations[SubjectAnnotation] = string(findings.SubjectNode)
	ev.Note = wording.NodeNote(rec)
	if rec.KnownState() == findings.StateUnknown {
		ev.Reason = UnknownReason
	}
	out, err := p.create(ctx, ev)
	if out == "" {
		return Result{}, err
	}
	return Result{Outcome: out, Namespace: ev.Namespace, Name: name, Why: err}, nil
}
