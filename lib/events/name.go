package events

import (
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
)

// PodEventName is the name of the Event for a record: the same finding in
// the same sandbox of the same pod always gets the same name, so replaying
// the findings file cannot double an Event. A state other than present is
// part of the name, so a usage Event is never answered AlreadyExists by
// the unknown one of the same fingerprint; a present one's name is what it
// was before states, so a replay after an upgrade doubles nothing.
func PodEventName(rec findings.Record) string {
	if st := rec.KnownState(); st != findings.StatePresent {
		return kubeapi.ObjectName(rec.Pod.Name, rec.Fingerprint, rec.SandboxID, rec.Pod.UID, string(st))
	}
	return kubeapi.ObjectName(rec.Pod.Name, rec.Fingerprint, rec.SandboxID, rec.Pod.UID)
}

// NodeEventName is the name of the node summary Event: one per node and
// usage fingerprint, however many pods show the same rules.
func NodeEventName(node, fingerprint string) string {
	return kubeapi.ObjectName(node, "node", node, fingerprint)
}
