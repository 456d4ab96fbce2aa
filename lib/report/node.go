package report

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

// KindNode is the owner kind of a finding about a node's own network
// namespace (the agent's node mode): no pod, no namespace; its writer, a
// host-network pod's container or a systemd unit, is the item's Writer.
const KindNode = "Node"

func nodeOwner(node string) owner.Owner { return owner.Owner{Kind: KindNode, Name: node} }

// isNodeEvent tells a node record's Event (events.SubjectAnnotation) from
// the node summary Events, which repeat pods' Events and are not read.
func isNodeEvent(obj corev1.ObjectReference, annotations map[string]string) bool {
	return obj.Kind == "Node" && annotations[events.SubjectAnnotation] == string(findings.SubjectNode)
}
