package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// execScan waits for the next scan or record of the exec watch whose
// command line holds marker, skipping others.
func execScan(t *testing.T, rec *recorder, marker string) Scan {
	t.Helper()
	for {
		s := rec.wait(t, 1)[0]
		if s.Record != nil && s.Record.Exec != nil && strings.Contains(strings.Join(s.Record.Exec.Argv, " "), marker) {
			return s
		}
	}
}

// TestExecWatch (issue 28): real iptables commands in a watched pod's
// netns. A legacy write is scanned at once, with its command and writer; a
// write the kernel refuses (-t bogus: exit 3) is a failed finding with no
// rules, breaking; a -C of an absent rule (exit 1) is no failure, and a -C
// run 20 times is one finding; an iptables-nft write is one finding, the
// nftables watch's, with the command joined.
func TestExecWatch(t *testing.T) {
	nstest.NeedRoot(t, "iptables-legacy", "iptables-nft")
	dir := t.TempDir()
	rec := newRecorder()
	a := startWatching(t, dir, rec, func(c *Config) { c.ExecWatch = true })
	ns := nstest.New(t)
	p := pod("e1", ns.Path())
	if err := a.RunPodSandbox(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	ready(t, a, p.Id)
	if up, why := a.ExecWatching(); !up {
		t.Fatalf("exec watch off: %s", why)
	}

	ns.Run("iptables-legacy", "-t", "nat", "-A", "OUTPUT", "-m", "comment", "--comment", "legacy-write", "-j", "ACCEPT")
	s := execScan(t, rec, "legacy-write")
	r := s.Record
	if s.Meta.Source != SourceExec || s.Stored != findings.Recorded || r.Legacy.Rules != 1 || r.Exec.ExitCode != 0 || !r.Exec.Exited || r.Exec.Failed {
		t.Fatalf("legacy write: %s source %s legacy rules %d exec %+v", s.Label(), s.Meta.Source, r.Legacy.Rules, r.Exec)
	}
	if r.Exec.Backend != "legacy" || r.Exec.Operation != "write" || r.Exec.Table != "nat" || r.Exec.Chain != "OUTPUT" || r.Writer == nil || r.Writer.Gone {
		t.Errorf("legacy write: exec %+v writer %+v", r.Exec, r.Writer)
	}
	if r.Pod.UID != p.Uid {
		t.Errorf("pod %+v, want %s", r.Pod, p.Uid)
	}

	if out, err := ns.Exec("iptables-legacy", "-t", "bogus", "-A", "OUTPUT", "-m", "comment", "--comment", "bogus-write", "-j", "ACCEPT"); err == nil {
		t.Fatalf("-t bogus worked: %s", out)
	}
	s = execScan(t, rec, "bogus-write")
	r = s.Record
	if s.Stored != findings.Recorded || !r.Failed() || !r.Exec.MissingKernelSupport || r.Exec.ExitCode != 3 || r.Worst != findings.ImpactLegacy || r.HasUsage() || r.KnownState() != findings.StatePresent {
		t.Errorf("failed write: %s exec %+v worst %q", s.Label(), r.Exec, r.Worst)
	}

	for i := 0; i < 20; i++ {
		if _, err := ns.Exec("iptables-legacy", "-C", "INPUT", "-m", "comment", "--comment", "check-absent", "-j", "DROP"); err == nil {
			t.Fatal("-C of an absent rule exited 0")
		}
	}
	recorded := 0
	for i := 0; i < 20; i++ {
		s = execScan(t, rec, "check-absent")
		if s.Record.Failed() || s.Record.Exec.ExitCode != 1 || s.Record.Exec.Operation != "read" {
			t.Errorf("-C: exec %+v", s.Record.Exec)
		}
		if s.Stored == findings.Recorded {
			recorded++
		}
	}
	if recorded != 1 {
		t.Errorf("20 runs of -C recorded %d findings, want 1", recorded)
	}

	ns.Run("iptables-nft", "-A", "FORWARD", "-m", "comment", "--comment", "nft-write", "-j", "DROP")
	s = execScan(t, rec, "nft-write")
	if s.Meta.Source != SourceWatch || s.Record.Nft.Rules != 1 || s.Record.Writer == nil || s.Record.Exec.Backend != "nft" {
		t.Errorf("nft write: source %s rules %d writer %+v exec %+v", s.Meta.Source, s.Record.Nft.Rules, s.Record.Writer, s.Record.Exec)
	}
}
