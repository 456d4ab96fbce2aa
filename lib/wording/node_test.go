package wording

import (
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// TestNodeNoteNoPod: the node's notes (its Event, its ClusterReport)
// speak of the node's namespace, not of a pod there is none of: a
// command's own record (the exec watch in node mode), a look cut short,
// a look the node's rules kept changing under.
func TestNodeNoteNoPod(t *testing.T) {
	for name, rec := range map[string]findings.Record{
		"command": {Subject: findings.SubjectNode, State: findings.StatePresent, Worst: findings.ImpactLegacy,
			Exec: &findings.Exec{Argv: []string{"iptables-legacy", "-L"}, Exited: true}},
		"cut": {Subject: findings.SubjectNode, State: findings.StatePresent, Truncated: true, Worst: findings.ImpactNative,
			Impact: findings.Impact{Native: 1}},
		"changing": {Subject: findings.SubjectNode, State: findings.StateUnknown, Truncated: true,
			Error: "read nftables: nftables dump incomplete: the ruleset changed while it was read"},
	} {
		got := NodeNote(rec)
		for _, w := range []string{"this pod", "This pod", "the pod's", "the pod "} {
			if strings.Contains(got, w) {
				t.Errorf("%s: the node's note speaks of %q:\n%s", name, w, got)
			}
		}
	}
}
