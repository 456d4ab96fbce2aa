package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

// TestExecCommands (issue 28): a workload's findings of the exec watch show
// their command lines, a failed one marked FAILED first and never crowded
// out by reads; every format carries them.
func TestExecCommands(t *testing.T) {
	rec := func(pod string, e *findings.Exec) findings.Record {
		return findings.Record{Source: findings.SourceExec, State: findings.StatePresent, Node: "n", Worst: findings.ImpactLegacy,
			Pod: findings.Pod{Namespace: "shop", Name: pod, UID: "u-" + pod}, Exec: e}
	}
	read := func(chain string) *findings.Exec {
		return &findings.Exec{Argv: []string{"iptables-legacy", "-C", chain, "-j", "DROP"}, Backend: "legacy", Exited: true, ExitCode: 1}
	}
	failed := &findings.Exec{Argv: []string{"iptables-legacy", "-t", "nat", "-A", "OUTPUT", "-j", "ACCEPT", "evil\x1b[2J"}, Backend: "legacy",
		Exited: true, ExitCode: 3, Failed: true, MissingKernelSupport: true}
	var items []Item
	for i, e := range []*findings.Exec{read("A"), read("B"), read("C"), read("D"), failed} {
		it := itemOf(rec("web-"+string(rune('1'+i)), e), "findings")
		it.Owner = owner.Owner{Kind: "Deployment", Name: "web"}
		items = append(items, it)
	}
	gs := GroupItems(items, nil)
	if len(gs) != 1 {
		t.Fatalf("%d groups", len(gs))
	}
	cs := gs[0].Commands
	if len(cs) != MaxWriters || !strings.HasPrefix(cs[len(cs)-1], "FAILED (exit 3, missing kernel support): iptables-legacy -t nat -A OUTPUT") {
		t.Fatalf("commands %q: want %d, the failed one kept", cs, MaxWriters)
	}
	for _, format := range []string{"text", "markdown", "json", "junit"} {
		var b bytes.Buffer
		if err := Write(&b, Report{Groups: gs}, format); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), "FAILED") || strings.Contains(b.String(), "\x1b") {
			t.Errorf("%s: no FAILED command, or an escape let through:\n%s", format, b.String())
		}
	}
}
