package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// mountTmpfs mounts a small tmpfs for disk-full and read-only cases.
func mountTmpfs(t *testing.T, opts string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	return dir
}

// TestHookBadInput: each case must exit 0, say one clear thing, and leave
// the findings file exactly as it was.
func TestHookBadInput(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft", "mount")
	ns := nstest.New(t)
	ns.Run("iptables-nft", "-A", "OUTPUT", "-j", "DROP")
	// One line already there: it must come out untouched.
	existing := `{"schema":"iptables-alerter/v1","fingerprint":"earlier"}` + "\n"

	tests := []struct {
		name string
		// prepare returns the findings path and the state on stdin.
		prepare func(t *testing.T) (string, string)
		log     string
	}{
		{
			name: "malformed state json",
			prepare: func(t *testing.T) (string, string) {
				return seeded(t, t.TempDir(), existing), `{"id": "x", "bundle": `
			},
			log: "cannot read the container state",
		},
		{
			name: "empty stdin",
			prepare: func(t *testing.T) (string, string) {
				return seeded(t, t.TempDir(), existing), ""
			},
			log: "cannot read the container state",
		},
		{
			name: "bundle without config.json",
			prepare: func(t *testing.T) (string, string) {
				return seeded(t, t.TempDir(), existing), pod{netns: ns.Path(), noConfig: true}.state(t)
			},
			log: "bundle has no config.json",
		},
		{
			name: "netns vanished",
			prepare: func(t *testing.T) (string, string) {
				return seeded(t, t.TempDir(), existing), pod{netns: "/run/netns/iptalert-gone-" + ns.Name}.state(t)
			},
			log: "netns is gone",
		},
		{
			name: "netns path is not a netns",
			prepare: func(t *testing.T) (string, string) {
				f := filepath.Join(t.TempDir(), "plain")
				os.WriteFile(f, []byte("x"), 0o644)
				return seeded(t, t.TempDir(), existing), pod{netns: f}.state(t)
			},
			log: "not a network namespace",
		},
		{
			name: "disk full mid-line",
			prepare: func(t *testing.T) (string, string) {
				// Two pages: the old content fills most of the first, a
				// filler takes the second, so the new line is cut short.
				dir := mountTmpfs(t, "size=8k")
				content := strings.Repeat(existing, 4000/len(existing))
				path := seeded(t, dir, content)
				os.WriteFile(filepath.Join(dir, "filler"), make([]byte, 4096), 0o644)
				return path, pod{netns: ns.Path()}.state(t)
			},
			log: "no space left on device",
		},
		{
			name: "read-only findings directory",
			prepare: func(t *testing.T) (string, string) {
				dir := mountTmpfs(t, "size=1m")
				path := seeded(t, dir, existing)
				if out, err := exec.Command("mount", "-o", "remount,ro", dir).CombinedOutput(); err != nil {
					t.Fatalf("remount ro: %v: %s", err, out)
				}
				return path, pod{netns: ns.Path()}.state(t)
			},
			log: "read-only file system",
		},
		{
			name: "findings file is a symlink",
			prepare: func(t *testing.T) (string, string) {
				target := seeded(t, t.TempDir(), existing)
				link := filepath.Join(t.TempDir(), "findings.jsonl")
				os.Symlink(target, link)
				t.Cleanup(func() { mustEqualFile(t, target, existing) })
				return link, pod{netns: ns.Path()}.state(t)
			},
			log: "too many levels of symbolic links",
		},
		{
			name: "findings directory is a symlink",
			prepare: func(t *testing.T) (string, string) {
				real := t.TempDir()
				target := seeded(t, real, existing)
				link := filepath.Join(t.TempDir(), "logdir")
				os.Symlink(real, link)
				t.Cleanup(func() { mustEqualFile(t, target, existing) })
				return filepath.Join(link, "findings.jsonl"), pod{netns: ns.Path()}.state(t)
			},
			log: "too many levels of symbolic links",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path, stdin := tc.prepare(t)
			before, _ := os.ReadFile(path)
			h := hookRun{findings: path}
			runHookProc(t, stdin, &h)
			if !strings.Contains(h.stderr, tc.log) {
				t.Errorf("log does not say %q:\n%s", tc.log, h.stderr)
			}
			if n := strings.Count(strings.TrimSpace(h.stderr), "\n") + 1; n != 1 {
				t.Errorf("want one log line, got %d:\n%s", n, h.stderr)
			}
			after, _ := os.ReadFile(path)
			if string(after) != string(before) {
				t.Errorf("findings file changed:\nbefore %q\nafter  %q", before, after)
			}
		})
	}
}

func seeded(t *testing.T, dir, content string) string {
	t.Helper()
	p := filepath.Join(dir, "findings.jsonl")
	if err := os.WriteFile(p, []byte(content), 0o640); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustEqualFile(t *testing.T, path, want string) {
	t.Helper()
	if got, _ := os.ReadFile(path); string(got) != want {
		t.Errorf("%s changed through a symlink: %q", path, got)
	}
}

// TestHookConcurrentAppends runs 100 hooks at once on one findings file:
// every line must parse and none may be lost.
func TestHookConcurrentAppends(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	ns := nstest.New(t)
	ns.Run("iptables-nft", "-A", "OUTPUT", "-p", "udp", "--dport", "53", "-j", "ACCEPT")
	findingsPath := filepath.Join(t.TempDir(), "findings.jsonl")
	stateDir := t.TempDir()
	const n = 100
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		// Each its own sandbox, so dedup keeps every finding.
		st := pod{netns: ns.Path(), sandbox: fmt.Sprintf("sb-%03d", i), container: fmt.Sprintf("c-%03d", i)}.state(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A deadline no load reaches: a hook past it gives up
			// without its line, and this test is about appends.
			cmd := exec.Command(bin, "hook", "--findings", findingsPath, "--state-dir", stateDir, "--timeout", "60s")
			cmd.Stdin = strings.NewReader(st)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("hook: %v: %s", err, out)
			}
		}()
	}
	wg.Wait()
	recs := findingstest.Read(t, findingsPath)
	ids := map[string]bool{}
	for _, r := range recs {
		ids[r.ContainerID] = true
	}
	if len(recs) != n || len(ids) != n {
		t.Fatalf("got %d lines for %d distinct containers, want %d of each", len(recs), len(ids), n)
	}
}

// TestHookOneFindingPerSandbox: the hook fires for every container of a pod;
// the same usage gives one finding, changed usage a new one, and the memory
// of a stopped sandbox is swept.
func TestHookOneFindingPerSandbox(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	ns := nstest.New(t)
	ns.Run("iptables-nft", "-A", "OUTPUT", "-j", "ACCEPT")
	h := hookRun{}
	for _, c := range []string{"init", "app", "sidecar"} {
		runHookProc(t, pod{netns: ns.Path(), sandbox: "sb-1", container: c}.state(t), &h)
	}
	if recs := findingstest.Read(t, h.findings); len(recs) != 1 || recs[0].ContainerID != "init" {
		t.Fatalf("3 containers, same usage: want 1 finding from the first, got %+v", recs)
	}
	// Counters change with traffic; the fingerprint must not.
	ns.Run("iptables-nft", "-Z")
	runHookProc(t, pod{netns: ns.Path(), sandbox: "sb-1", container: "app"}.state(t), &h)
	ns.Run("iptables-nft", "-A", "OUTPUT", "-p", "tcp", "-j", "ACCEPT")
	runHookProc(t, pod{netns: ns.Path(), sandbox: "sb-1", container: "late"}.state(t), &h)
	recs := findingstest.Read(t, h.findings)
	if len(recs) != 2 || recs[1].ContainerID != "late" || recs[1].Fingerprint == recs[0].Fingerprint {
		t.Fatalf("changed usage: want a second finding with a new fingerprint, got %+v", recs)
	}

	// A second pod records while the first pod's netns is gone: the sweep
	// forgets the first, once the memory's last sweep by any hook process
	// is hookSweepEvery old.
	other := nstest.New(t)
	other.Run("iptables-nft", "-A", "INPUT", "-j", "ACCEPT")
	gone := nstest.New(t)
	gone.Run("iptables-nft", "-A", "INPUT", "-j", "ACCEPT")
	runHookProc(t, pod{netns: gone.Path(), sandbox: "sb-gone"}.state(t), &h)
	gone.Delete()
	sandboxes := filepath.Join(h.stateDir, "sandboxes")
	entries := func() int {
		t.Helper()
		names, err := filepath.Glob(filepath.Join(sandboxes, "*.json"))
		if err != nil {
			t.Fatal(err)
		}
		return len(names)
	}
	mark := filepath.Join(sandboxes, ".swept")
	sweptAgo := func(ago time.Duration) {
		t.Helper()
		at := time.Now().Add(-ago)
		if err := os.Chtimes(mark, at, at); err != nil {
			t.Fatal(err)
		}
	}
	before := entries()
	sweptAgo(0)
	runHookProc(t, pod{netns: other.Path(), sandbox: "sb-2"}.state(t), &h)
	within := entries()
	sweptAgo(hookSweepEvery + time.Second)
	runHookProc(t, pod{netns: other.Path(), sandbox: "sb-3"}.state(t), &h)
	if after := entries(); before != 2 || within != 3 || after != 3 {
		t.Fatalf("state entries: %d before (want sb-1, sb-gone), %d after a finding within %v of a sweep (want sb-2 too), %d after the next (want sb-1, sb-2, sb-3)", before, within, hookSweepEvery, after)
	}
}

// TestHookDeadlineTruncates: a netns too big to read within --timeout still
// gives a finding, marked truncated, on time.
func TestHookDeadlineTruncates(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft-restore")
	ns := nstest.New(t)
	var b strings.Builder
	b.WriteString("*filter\n")
	for i := 0; i < 30000; i++ {
		fmt.Fprintf(&b, "-A INPUT -s 10.%d.%d.1 -j DROP\n", i/250, i%250)
	}
	b.WriteString("COMMIT\n")
	ns.Restore(b.String(), "iptables-nft-restore")
	h := hookRun{}
	runHookProc(t, pod{netns: ns.Path()}.state(t), &h, "--timeout", "20ms")
	recs := findingstest.Read(t, h.findings)
	if len(recs) != 1 || !recs[0].Truncated || !strings.Contains(recs[0].Error, "deadline") {
		t.Fatalf("want one truncated finding with a deadline error, got %+v\n%s", recs, h.stderr)
	}
	if recs[0].Nft.Rules >= 30000 {
		t.Errorf("truncated finding counted all %d rules in 20ms: the deadline was not applied", recs[0].Nft.Rules)
	}
}

// TestHookDeadlineBeforeAnything: a deadline that passes before anything
// was seen is not "clean": the hook records a truncated finding with the
// error, and the per-sandbox memory does not then skip the complete finding
// of the next container.
func TestHookDeadlineBeforeAnything(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	ns := nstest.New(t)
	ns.Run("iptables-nft", "-A", "INPUT", "-j", "DROP")
	h := hookRun{}
	p := pod{netns: ns.Path(), sandbox: "sb-slow"}
	runHookProc(t, p.state(t), &h, "--timeout", "1ns")
	recs := findingstest.Read(t, h.findings)
	if len(recs) != 1 || !recs[0].Truncated || !strings.Contains(recs[0].Error, "deadline") {
		t.Fatalf("deadline before anything was seen: want one truncated finding with the error, got %+v\n%s", recs, h.stderr)
	}
	runHookProc(t, p.state(t), &h, "--timeout", "1ns")
	if recs := findingstest.Read(t, h.findings); len(recs) != 1 {
		t.Fatalf("the same incomplete view twice: want it recorded once, got %d findings", len(recs))
	}
	runHookProc(t, p.state(t), &h)
	recs = findingstest.Read(t, h.findings)
	if len(recs) != 2 || recs[1].Truncated || recs[1].Nft.Rules != 1 {
		t.Fatalf("complete scan after an incomplete one: want a second, complete finding, got %+v\n%s", recs, h.stderr)
	}
}

// TestHookBigAnnotation: CRI-O copies every pod annotation into the state on
// stdin; a pod's own 250 KiB annotation, which JSON escaping inflates to
// 1.5 MiB, must not stop the inspection, nor grow the hook's memory with it.
func TestHookBigAnnotation(t *testing.T) {
	nstest.NeedRoot(t, "iptables-nft")
	ns := nstest.New(t)
	ns.Run("iptables-nft", "-A", "OUTPUT", "-j", "DROP")
	// json.Marshal writes each '<' as \u003c: six bytes.
	p := pod{netns: ns.Path(), sandbox: "sb-big", extraAnn: map[string]string{"a.example/blob": strings.Repeat("<", 250<<10)}}
	st := p.state(t)
	if len(st) < 1<<20 {
		t.Fatalf("state is only %d bytes, want over 1 MiB", len(st))
	}
	small := hookRun{}
	runHookProc(t, pod{netns: ns.Path(), sandbox: "sb-small"}.state(t), &small)
	h := hookRun{}
	runHookProc(t, st, &h)
	recs := findingstest.Read(t, h.findings)
	if len(recs) != 1 || recs[0].Nft.Rules != 1 || recs[0].Pod.Name != "web-1" || recs[0].SandboxID != "sb-big" {
		t.Fatalf("state of %d bytes: want the finding with the pod's labels, got %+v\n%s", len(st), recs, h.stderr)
	}
	// The state streams through: the hook holds the longest string while
	// it passes, never the whole state decoded into maps.
	if grew := h.maxRSS - small.maxRSS; grew > 8<<10 {
		t.Errorf("peak RSS %d KiB on a %d-byte state, %d KiB on a small one: grew by %d KiB, want under 8 MiB", h.maxRSS, len(st), small.maxRSS, grew)
	}
}

// A pod netns there that cannot be opened (an LSM's denial, no file
// descriptor left; here a path through a regular file, ENOTDIR) is not a
// clean pod: the hook records it unknown, with why, still exits 0 with
// one log line. A pod whose netns is gone records nothing (above).
func TestHookNetnsUnopenedRecordsUnknown(t *testing.T) {
	nstest.NeedRoot(t)
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := hookRun{}
	runHookProc(t, pod{netns: filepath.Join(plain, "net"), sandbox: "sb-unopened"}.state(t), &h)
	if n := strings.Count(strings.TrimSpace(h.stderr), "\n") + 1; n != 1 || !strings.Contains(h.stderr, "not a directory") {
		t.Errorf("want one log line naming the error, got %d:\n%s", n, h.stderr)
	}
	data, err := os.ReadFile(h.findings)
	if err != nil {
		t.Fatalf("no finding recorded: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	rec, err := findings.Parse([]byte(lines[0]))
	if len(lines) != 1 || err != nil || rec.KnownState() != findings.StateUnknown || !strings.Contains(rec.Error, "cannot open the pod netns") || rec.SandboxID != "sb-unopened" {
		t.Errorf("want one unknown finding naming the open error, got %d lines (%v): %+v", len(lines), err, rec)
	}
}
