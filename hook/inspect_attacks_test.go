package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// TestHookXTMutexHeldByNeighbour: a neighbour holding the host-wide x_tables
// mutex (issue 7 item 1) must not hold the hook process past its deadline;
// the finding records the nftables usage, truncated, with the reason. The
// hook runs as a runtime runs it, stderr a pipe the test waits on: a probe
// left behind must not hold it.
func TestHookXTMutexHeldByNeighbour(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "iptables-legacy-restore")
	_, err := os.Stat("/proc/self/net/ip_tables_names")
	nstest.Need(t, err == nil, "needs the ip_tables module loaded")
	victim := nstest.New(t)
	victim.Run("iptables-nft", "-A", "OUTPUT", "-j", "DROP")
	nstest.HoldXTMutex(t)

	h := hookRun{}
	start := time.Now()
	runHookProc(t, pod{netns: victim.Path()}.state(t), &h, "--timeout", "1s")
	// Held, the mutex would hold the hook until the test ends: the margin
	// is a loaded machine's process start and exit.
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("hook took %v with --timeout 1s while a neighbour held the x_tables mutex\n%s", took, h.stderr)
	}
	recs := findingstest.Read(t, h.findings)
	if len(recs) != 1 || !recs[0].Truncated || !strings.Contains(recs[0].Error, "legacy x_tables busy") || recs[0].Nft.Rules != 1 {
		t.Fatalf("want one truncated finding with the nft rule and \"legacy x_tables busy\", got %+v\n%s", recs, h.stderr)
	}
}

// TestHookTooManyChains: 300,000 empty native chains made before an
// iptables user chain (issue 7 item 4) give a finding with what was
// counted, truncated, not nothing.
func TestHookTooManyChains(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "nft")
	ns := nstest.New(t)
	ns.EmptyChains(300000)
	ns.Run("iptables-nft", "-N", "MINE")
	ns.Run("iptables-nft", "-A", "MINE", "-j", "RETURN")
	h := hookRun{}
	runHookProc(t, pod{netns: ns.Path()}.state(t), &h, "--timeout", "1s")
	recs := findingstest.Read(t, h.findings)
	if len(recs) != 1 || !recs[0].Truncated || recs[0].Error == "" || recs[0].Nft.Rules != 1 {
		t.Fatalf("want one truncated finding with the user chain's rule and the reason, got %+v\n%s", recs, h.stderr)
	}
}

// TestHookUndumpableRule: a rule over 32 KiB ends every dump of the netns
// (issue 7 item 2); the rules after it are unseen by anyone, so the finding
// must say it is truncated, never clean.
func TestHookUndumpableRule(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	ns := nstest.New(t)
	ns.UndumpableRule()
	ns.Run("iptables-nft", "-A", "OUTPUT", "-j", "DROP")
	h := hookRun{}
	runHookProc(t, pod{netns: ns.Path()}.state(t), &h)
	recs := findingstest.Read(t, h.findings)
	if len(recs) != 1 || !recs[0].Truncated || !strings.Contains(recs[0].Error, "incomplete") {
		t.Fatalf("want one truncated finding saying the dump was incomplete, got %+v\n%s", recs, h.stderr)
	}
}

// TestHookUndumpableRuleAfterGone: a pod that had usage and took it back
// (its last record gone), then puts a rule no dump gets past before new
// rules of its own, is not left clean: the look that reads its nftables
// only in part, and sees a rule there, writes it (truncated). Its legacy
// part, read whole as before, agreed with the gone, which then stood.
func TestHookUndumpableRuleAfterGone(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	ns := nstest.New(t)
	h := hookRun{}
	p := pod{netns: ns.Path(), sandbox: "sb-hidden"}
	usageThenGone(t, ns, p, &h)
	ns.UndumpableRule()
	ns.Run("iptables-nft", "-A", "OUTPUT", "-j", "DROP")
	runHookProc(t, p.state(t), &h)
	recs := findingstest.Read(t, h.findings)
	last := recs[len(recs)-1]
	if len(recs) != 3 || last.State != findings.StatePresent || !last.Truncated {
		t.Fatalf("rules behind an undumpable one after gone: want a third record, present (what it read), truncated; got %+v\n%s", recs, h.stderr)
	}
}

// TestHookXTMutexHidesAfterGone: a pod that had usage and took it back,
// then writes legacy rules and keeps the x_tables mutex busy (its own
// table's read stalled), is not left clean: its first cut look that sees
// nothing may be passing (Same), the next a minute or more later writes
// unknown.
func TestHookXTMutexHidesAfterGone(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "iptables-legacy-restore")
	_, err := os.Stat("/proc/self/net/ip_tables_names")
	nstest.Need(t, err == nil, "needs the ip_tables module loaded")
	ns := nstest.New(t)
	h := hookRun{}
	p := pod{netns: ns.Path(), sandbox: "sb-hider-after-gone"}
	usageThenGone(t, ns, p, &h)
	stop := nstest.HoldXTMutexIn(t, ns)
	defer stop()
	// The first cut look, and another of the same moment (the agent's,
	// another container's): they may be passing.
	for range 2 {
		runHookProc(t, p.state(t), &h, "--timeout", "1s")
		if recs := findingstest.Read(t, h.findings); len(recs) != 2 {
			t.Fatalf("a cut look over the gone within a minute of the first wrote %d records, want none new; %+v\n%s", len(recs)-2, recs, h.stderr)
		}
	}
	backdateDoubt(t, h.stateDir)
	runHookProc(t, p.state(t), &h, "--timeout", "1s")
	stop()
	recs := findingstest.Read(t, h.findings)
	last := recs[len(recs)-1]
	if len(recs) != 3 || last.State != findings.StateUnknown || !last.Truncated {
		t.Fatalf("the second cut look a minute later: want a third record, unknown, truncated; got %+v\n%s", recs, h.stderr)
	}
	// Written through the memory, which holds it now, the mark gone.
	if entry := memoryEntry(t, h.stateDir); entry["state"] != string(findings.StateUnknown) || entry["doubted"] != nil {
		t.Errorf("the entry after the unknown: %v, want state unknown and no mark", entry)
	}
}

// usageThenGone records a present then a gone for pod p in ns: an
// iptables-nft rule, then none.
func usageThenGone(t *testing.T, ns *nstest.NS, p pod, h *hookRun) {
	t.Helper()
	ns.Run("iptables-nft", "-A", "OUTPUT", "-p", "tcp", "--dport", "80", "-j", "ACCEPT")
	runHookProc(t, p.state(t), h)
	ns.Run("iptables-nft", "-F", "OUTPUT")
	runHookProc(t, p.state(t), h)
	recs := findingstest.Read(t, h.findings)
	if len(recs) != 2 || recs[1].State != findings.StateGone {
		t.Fatalf("usage then none: want present then gone, got %+v\n%s", recs, h.stderr)
	}
}

// backdateDoubt moves the time the memory's one entry under stateDir
// marked a cut look over a gone two minutes back: the next cut look is
// then one the memory's gap (a minute) later, which a test does not wait
// for.
func backdateDoubt(t *testing.T, stateDir string) {
	t.Helper()
	entry := memoryEntry(t, stateDir)
	if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(entry["doubted"])); err != nil {
		t.Fatalf("the entry after the first cut look: %v, want a doubted time (%v)", entry, err)
	}
	entry["doubted"] = time.Now().Add(-2 * time.Minute).Format(time.RFC3339Nano)
	b, err := json.Marshal(entry)
	if err == nil {
		err = os.WriteFile(memoryEntryPath(t, stateDir), b, 0o640)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// memoryEntryPath is the one entry of the per-sandbox memory under
// stateDir.
func memoryEntryPath(t *testing.T, stateDir string) string {
	t.Helper()
	entries, err := filepath.Glob(filepath.Join(stateDir, "sandboxes", "*.json"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("the sandbox's memory entry: %v %v", entries, err)
	}
	return entries[0]
}

// memoryEntry is that entry, decoded.
func memoryEntry(t *testing.T, stateDir string) map[string]any {
	t.Helper()
	var entry map[string]any
	b, err := os.ReadFile(memoryEntryPath(t, stateDir))
	if err == nil {
		err = json.Unmarshal(b, &entry)
	}
	if err != nil {
		t.Fatalf("the sandbox's memory entry: %s (%v)", b, err)
	}
	return entry
}

// TestHookTrafficKeepsFingerprint: traffic through a quota and counters
// (issue 7 item 12) changes no fingerprint, so the next container of the
// same pod records nothing new.
func TestHookTrafficKeepsFingerprint(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "nft", "bash")
	ns := nstest.New(t)
	ns.Run("ip", "link", "set", "lo", "up")
	ns.Run("iptables-nft", "-A", "OUTPUT", "-p", "udp", "--dport", "9", "-m", "quota", "--quota", "100000000", "-j", "ACCEPT")
	// iptables-nft's own quota does not report what it used; nft's does.
	ns.Run("nft", "insert rule ip filter OUTPUT udp dport 9 counter quota until 100 mbytes")
	h := hookRun{}
	p := pod{netns: ns.Path(), sandbox: "sb-traffic"}
	runHookProc(t, p.state(t), &h)
	ns.Run("bash", "-c", "for i in $(seq 20); do echo hello > /dev/udp/127.0.0.1/9; done")
	if out := ns.Run("nft", "list", "ruleset"); !strings.Contains(out, "used 680 bytes") {
		t.Fatalf("the traffic did not pass the rule:\n%s", out)
	}
	runHookProc(t, p.state(t), &h)
	if recs := findingstest.Read(t, h.findings); len(recs) != 1 {
		t.Fatalf("traffic made %d findings for one pod, want 1 (fingerprints %v)", len(recs), fingerprints(recs))
	}
}

func fingerprints(recs []findings.Record) []string {
	var fps []string
	for _, r := range recs {
		fps = append(fps, r.Fingerprint)
	}
	return fps
}
