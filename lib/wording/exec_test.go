package wording

import (
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

func TestExecLine(t *testing.T) {
	ok := &findings.Exec{Argv: []string{"iptables-legacy", "-A", "INPUT", "-m", "comment", "--comment", "two words", "-j", "DROP"}, Exited: true}
	if got := ExecLine(ok); got != `iptables-legacy -A INPUT -m comment --comment "two words" -j DROP (exit 0)` {
		t.Errorf("ok: %s", got)
	}
	bad := &findings.Exec{Argv: []string{"iptables", strings.Repeat("x", 1000)}, Exited: true, Signal: 9, Failed: true}
	if got := ExecLine(bad); !strings.HasPrefix(got, "FAILED (signal 9): iptables ") || len(got) > MaxExecLine {
		t.Errorf("killed: %s", got)
	}
	// Without CAP_NET_ADMIN the kernel refuses every table: the line
	// says why, a failed write's and a read's alike.
	read := &findings.Exec{Argv: []string{"iptables", "-L"}, Exited: true, ExitCode: 4, NoNetAdmin: true}
	if got := ExecLine(read); got != "iptables -L (exit 4, no CAP_NET_ADMIN: permission denied)" {
		t.Errorf("read without CAP_NET_ADMIN: %s", got)
	}
	write := &findings.Exec{Argv: []string{"iptables", "-A", "INPUT"}, Exited: true, ExitCode: 4, Failed: true, NoNetAdmin: true}
	if got := ExecLine(write); got != "FAILED (exit 4, no CAP_NET_ADMIN: permission denied): iptables -A INPUT" {
		t.Errorf("write without CAP_NET_ADMIN: %s", got)
	}
	if got := ExecLine(&findings.Exec{Argv: []string{"iptables", "-L"}, Exited: true, NoNetAdmin: true}); got != "iptables -L (exit 0)" {
		t.Errorf("a read that worked: %s", got)
	}
	if ExecLine(nil) != "" {
		t.Error("no command: a line")
	}
	rec := findings.Record{State: findings.StatePresent, Worst: findings.ImpactLegacy, Exec: &findings.Exec{Argv: []string{"iptables-legacy", "-t", "nat", "-A", "OUTPUT"},
		Exited: true, ExitCode: 3, Failed: true, MissingKernelSupport: true}}
	if n := Note(rec, owner.Owner{}); !strings.Contains(n, "Command: FAILED (exit 3, missing kernel support): iptables-legacy -t nat -A OUTPUT\n") {
		t.Errorf("note without the failed command:\n%s", n)
	}
}
