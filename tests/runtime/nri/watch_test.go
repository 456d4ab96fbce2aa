package nri

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/findingstest"
	"github.com/iptables-alerter/iptables-alerter/internal/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/watch"
	"github.com/iptables-alerter/iptables-alerter/tests/runtime/critest"
)

// restoreThen is a container script: an iptables-nft-restore that stays
// alive (its stdin open), fed a rule after `after` seconds and its
// deletion `del` seconds later. A writer alive at its commit is one the
// agent can place in its container; a short-lived iptables-nft may exit
// before /proc is read (the finding then says gone, with pid and comm).
func restoreThen(after, del, table, rule string) string {
	return "{ sleep " + after + "; echo -e '*" + table + "\\n-A " + rule + "\\nCOMMIT'; sleep " + del +
		"; echo -e '*" + table + "\\n-D " + rule + "\\nCOMMIT'; sleep 100000; } | iptables-nft-restore --noflush & " + forever
}

// TestContainerdWatch (issue 19): on a real containerd, a pod's rules
// written well after its containers started are recorded by the watch
// (source "watch"), each finding naming the writing binary and its
// container; a native nftables table written into the pod's netns first
// is not usage and records nothing; removing every rule records gone.
func TestContainerdWatch(t *testing.T) {
	c := critest.Start(t).CRI
	f := newFiles(t)
	// A stand-in for the host's /proc (pid 1's netns is not a sandboxed
	// test's to open), shown the writers before they write.
	hostProc := nstest.HostProc(t, "/proc/self/ns/net")
	a := startAgentArgs(t, f, "--nri-socket", c.NRISocket, "--watch", "--host-proc", hostProc)
	a.waitMetric(t, 1, "iptables_alerter_agent_connected")

	p := c.RunPod("watched", false)
	// Native nftables first, from the host: had it queued a scan, its
	// finding (writer nft) would come before the iptables writers'.
	if out, err := exec.Command("nsenter", "--net="+c.NetnsPath(p), "nft", "add table inet mine; add chain inet mine c { type filter hook input priority 0; }").CombinedOutput(); err != nil {
		t.Fatalf("nft in the pod's netns: %v: %s", err, out)
	}
	started := time.Now()
	c.Run(p, "writer", restoreThen("10", "8", "nat", "OUTPUT -p tcp --dport 9100 -j REDIRECT --to-ports 15001"))
	c.Run(p, "second", restoreThen("13", "8", "filter", "INPUT -p tcp --dport 9200 -j DROP"))

	// Both restores, and their shells, shown to the agent before their
	// first commit, 10 s after their start.
	var pids []int
	for deadline := time.Now().Add(8 * time.Second); len(pids) < 2; time.Sleep(50 * time.Millisecond) {
		if pids = nstest.Pids(t, c.NetnsPath(p), "iptables-nft-re"); time.Now().After(deadline) {
			t.Fatalf("%d iptables-nft-restore processes in the pod's netns, want 2", len(pids))
		}
	}
	for _, pid := range pids {
		nstest.ShowProc(t, hostProc, pid)
		if w := (watch.Proc{Root: "/proc"}).Writer(pid, "iptables-nft-re"); !w.Gone {
			nstest.ShowProc(t, hostProc, w.PPID)
		}
	}
	if out, _ := exec.Command("nsenter", "--net="+c.NetnsPath(p), "iptables-nft-save").CombinedOutput(); strings.Contains(string(out), "9100") {
		t.Fatalf("the writer wrote before the test showed it to the agent (%v after its start): too slow a machine for this test", time.Since(started))
	}

	// writer adds at 10 s, second at 13 s, writer deletes at 18 s, second
	// at 21 s: the last is gone.
	var got []findings.Record
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got = nil
		for _, r := range forPod(findingstest.Read(t, f.findings), "watched") {
			if r.Source == "watch" {
				got = append(got, r)
			}
		}
		if n := len(got); n > 0 && got[n-1].KnownState() == findings.StateGone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no gone record within 2 minutes: %+v; agent log:\n%s", got, a.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i, r := range got {
		w := r.Writer
		if w == nil {
			t.Fatalf("record %d without writer: %+v", i, r)
		}
		t.Logf("record %d at +%v: state %s, %d rules, writer %s (pid %d) of container %q, parent %s",
			i, r.Time.Sub(started).Round(time.Millisecond), r.State, r.Nft.Rules, w.Comm, w.PID, w.Container, w.ParentComm)
		if w.Comm != "iptables-nft-re" || w.Gone || w.Pod.Name != "watched" || w.ParentComm != "sh" {
			t.Errorf("record %d: writer %+v, want iptables-nft-restore (comm iptables-nft-re), alive, child of sh, of pod watched", i, *w)
		}
	}
	// What each step recorded, in order: the first finding is the
	// writer's, then second's, then the writer's deletion, then gone.
	want := []struct {
		container string
		rules     int
		state     findings.State
	}{{"writer", 1, findings.StatePresent}, {"second", 2, findings.StatePresent}, {"writer", 1, findings.StatePresent}, {"second", 0, findings.StateGone}}
	if len(got) != len(want) {
		t.Fatalf("%d watch records, want %d", len(got), len(want))
	}
	for i, w := range want {
		if r := got[i]; r.Writer.Container != w.container || r.Nft.Rules != w.rules || r.KnownState() != w.state || r.Container != w.container {
			t.Errorf("record %d: container %q (record's %q), %d rules, %s; want %s, %d, %s", i, r.Writer.Container, r.Container, r.Nft.Rules, r.State, w.container, w.rules, w.state)
		}
	}
	// A scan the native table queued would record nothing (no usage, none
	// before): it shows as a clean watch scan. Any watch scan after it ran
	// after it (one queue, first in first out), so it is counted by now;
	// the iptables writers' four scans each found usage or its end.
	if v, _ := a.metric(t, "iptables_alerter_agent_scans_total", `source="watch"`, `outcome="clean"`); v != 0 {
		t.Errorf("%v clean watch scans, want 0: the native nftables table queued a scan; agent log:\n%s", v, a.log)
	}
}
