package wording

import (
	"strings"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

// nodeWords turns a pod's note into the node's: the same facts, about the
// node's namespace.
var nodeWords = strings.NewReplacer(
	"This pod created iptables rules in its network namespace.", "The node's own network namespace holds iptables rules beyond the platform's.",
	"seen in this pod:", "seen on the node:",
	"The check of this pod's network namespace", "The check of the node's network namespace",
	"whether the pod uses iptables", "whether the node's namespace holds iptables rules",
	"the next scan of the pod", "the node's next scan",
	"This pod runs iptables commands in its network namespace", "Processes in the node's own network namespace run iptables commands",
	"the check of this pod's rules", "the check of the node's rules",
	"the pod's rules changed", "the node's rules changed",
)

// NodeNote is the note of a record of subject node (the agent's node
// mode): Note, or UnknownNote for an unknown state, about the node's own
// network namespace. The caller gives the vendors node hints
// (catalog.NodeWords) first.
func NodeNote(rec findings.Record) string {
	note := Note(rec, owner.Owner{})
	if rec.KnownState() == findings.StateUnknown {
		note = UnknownNote(rec, owner.Owner{})
	}
	return safetext.Cut(nodeWords.Replace(note), NoteLimit)
}
