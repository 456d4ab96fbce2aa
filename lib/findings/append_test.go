package findings

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/fileio"
)

// lines returns the lines of the file at p, or none when it is missing.
func lines(t *testing.T, p string) []string {
	t.Helper()
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

func TestAppendRotatesGenerations(t *testing.T) {
	dir := t.TempDir()
	l := Log{Path: filepath.Join(dir, "sub", "findings.jsonl"), MaxBytes: 1200, Generations: 3}
	const n = 40
	for i := 0; i < n; i++ {
		if err := l.Append(context.Background(), Record{Fingerprint: "f", ContainerID: fmt.Sprintf("%0100d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Oldest generation first: the container ids must be in order, with
	// nothing missing from the oldest kept line on.
	var ids []int
	for _, p := range []string{l.Path + ".3", l.Path + ".2", l.Path + ".1", l.Path} {
		if fi, err := os.Stat(p); err != nil || fi.Size() > 1200 {
			t.Fatalf("%s: %v, size over the bound", p, err)
		}
		for _, line := range lines(t, p) {
			r, err := Parse([]byte(line))
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			id, _ := strconv.Atoi(r.ContainerID)
			ids = append(ids, id)
		}
	}
	if _, err := os.Stat(l.Path + ".4"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a fourth generation exists: %v", err)
	}
	for i, id := range ids {
		if id != ids[0]+i || ids[len(ids)-1] != n-1 {
			t.Fatalf("ids across generations not contiguous up to %d: %v", n-1, ids)
		}
	}
	if fi, _ := os.Stat(filepath.Dir(l.Path)); fi.Mode().Perm() != 0o750 {
		t.Errorf("directory mode %v, want 0750", fi.Mode().Perm())
	}
	if fi, _ := os.Stat(l.Path); fi.Mode().Perm() != 0o640 {
		t.Errorf("file mode %v, want 0640", fi.Mode().Perm())
	}
}

// A hostile pod controls names, comments and rule text: its record must
// stay within MaxRecordBytes whatever it puts there, and stay one valid
// line.
func TestEncodeBoundsHostileRecord(t *testing.T) {
	evil := strings.Repeat("\x01<\xff\u2028", 100000)
	rec := Record{Node: evil, Source: evil, Stage: evil, ContainerID: evil, SandboxID: evil,
		Pod: Pod{Namespace: evil, Name: evil, UID: evil}, Container: evil, Image: evil, Netns: evil, Error: evil,
		Fingerprint: "0123456789abcdef0123456789abcdef"}
	writer := &Writer{PID: 4242, Comm: evil, ParentComm: evil, ContainerID: evil, Container: evil,
		Pod: Pod{Namespace: evil, Name: evil, UID: evil}, Unit: evil}
	rec.Writer = writer
	for i := 0; i < 10000; i++ {
		rec.Nft.Tables = append(rec.Nft.Tables, "inet "+evil[:1000])
		rec.Nft.PerTable = append(rec.Nft.PerTable, TableCount{Table: "inet " + evil[:1000], Chains: 3, Rules: 62})
		rec.Legacy.Tables = append(rec.Legacy.Tables, evil[:1000])
		rec.AllowlistEntries = append(rec.AllowlistEntries, evil[:1000])
		rec.Examples = append(rec.Examples, Example{Family: evil, Table: evil, Chain: evil, Rule: evil})
		rec.Vendors = append(rec.Vendors, Vendor{Name: evil, Hint: evil, Doc: evil})
	}
	rec.Nft.Rules = 621000
	rec.Worst = evil
	line, err := Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	if len(line) > MaxRecordBytes || bytes.Count(line, []byte("\n")) != 1 {
		t.Fatalf("encoded %d bytes, %d newlines; bound %d", len(line), bytes.Count(line, []byte("\n")), MaxRecordBytes)
	}
	back, err := Parse(line[:len(line)-1])
	if err != nil {
		t.Fatal(err)
	}
	// Its lists cut, its counts whole: not a partial look.
	if !back.ListsCut || back.Partial() || back.Nft.Rules != 621000 || back.Fingerprint != rec.Fingerprint || back.Worst != "" {
		t.Errorf("cut record: lists cut %v, partial %v, rules %d, fingerprint %q", back.ListsCut, back.Partial(), back.Nft.Rules, back.Fingerprint)
	}
	if len(back.Nft.PerTable) > maxList {
		t.Errorf("per_table kept %d entries, bound %d", len(back.Nft.PerTable), maxList)
	}
	if back.Writer == nil || back.Writer.PID != 4242 || writer.Comm != evil {
		t.Errorf("writer: kept %+v; caller's comm changed %v", back.Writer, writer.Comm != evil)
	}
	// An ordinary record is not touched.
	plain := Record{Pod: Pod{Namespace: "shop", Name: "cart-7d9f", UID: "7d1c0a52-0d3e-4c6b-9a51-2d0c3f1e5a11"}, Fingerprint: "f",
		Nft: Nft{Tables: []string{"ip nat"}, Rules: 9}, Examples: []Example{{Family: "ip", Table: "nat", Chain: "X", Rule: "-A X -j RETURN"}}}
	line, err = Encode(plain)
	if err != nil {
		t.Fatal(err)
	}
	if back, _ := Parse(line[:len(line)-1]); back.Truncated || back.ListsCut || len(back.Examples) != 1 || back.Pod != plain.Pod {
		t.Errorf("ordinary record changed: %s", line)
	}
}

// TestMain lets the test binary act as a writer that is killed while its
// line is half written.
func TestMain(m *testing.M) {
	if p := os.Getenv("FINDINGS_TORN_WRITER"); p != "" {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			os.Exit(3)
		}
		// The first part of a line, as a write cut short leaves it.
		if _, err := f.WriteString(`{"schema":"iptables-alerter/v1","time":"2026-`); err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString("written\n")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// SIGKILL in the middle of an append leaves a torn last line. The next
// finding used to be glued onto it and lost with it.
func TestAppendAfterKilledWriter(t *testing.T) {
	p := filepath.Join(t.TempDir(), "findings.jsonl")
	l := Log{Path: p}
	if err := l.Append(context.Background(), Record{Fingerprint: "before"}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FINDINGS_TORN_WRITER="+p)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatalf("writer: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if err := l.Append(context.Background(), Record{Fingerprint: "after"}); err != nil {
		t.Fatal(err)
	}
	got := lines(t, p)
	if len(got) != 3 {
		t.Fatalf("%d lines, want 3 (whole, torn, whole): %q", len(got), got)
	}
	for i, want := range map[int]string{0: "before", 2: "after"} {
		r, err := Parse([]byte(got[i]))
		if err != nil || r.Fingerprint != want {
			t.Errorf("line %d: %v, fingerprint %q, want %q", i, err, r.Fingerprint, want)
		}
	}
	if _, err := Parse([]byte(got[1])); err == nil {
		t.Errorf("torn line parses: %q", got[1])
	}
}

// A hard link planted at findings.jsonl (to /etc/shadow, say) used to be
// written through.
func TestAppendRefusesHardLink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("root:x:0:0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "log", "findings.jsonl")
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(victim, p); err != nil {
		t.Fatal(err)
	}
	err := Log{Path: p}.Append(context.Background(), Record{Fingerprint: "f"})
	if !errors.Is(err, fileio.ErrLinked) {
		t.Errorf("Append through a hard link: %v, want ErrLinked", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "root:x:0:0\n" {
		t.Errorf("victim written: %q", b)
	}
}

// Directories and files planted world-writable, or by another user, before
// the hook first ran used to keep their modes and owners: anyone could
// forge findings.
func TestAppendFixesPlantedModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "findings.jsonl")
	for _, f := range []string{p, p + ".lock"} {
		if err := os.WriteFile(f, nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	// The umask may have kept the bits from being set.
	for _, f := range []string{dir, p, p + ".lock"} {
		if err := os.Chmod(f, map[bool]os.FileMode{true: 0o777, false: 0o666}[f == dir]); err != nil {
			t.Fatal(err)
		}
	}
	// Planted by another user, the lock file by root.
	if os.Geteuid() == 0 {
		for _, f := range []string{dir, p} {
			if err := os.Chown(f, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := (Log{Path: p}).Append(context.Background(), Record{Fingerprint: "f"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]os.FileMode{dir: 0o775, p: 0o664, p + ".lock": 0o664}
	if os.Geteuid() == 0 {
		want[dir], want[p] = 0o755, 0o644
	}
	for f, mode := range want {
		fi, err := os.Stat(f)
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v (%v), want %v", f, fi.Mode().Perm(), err, mode)
			continue
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != uint32(os.Geteuid()) {
			t.Errorf("%s: owner %d, want %d", f, uid, os.Geteuid())
		}
	}
}

// A directory planted at findings.jsonl.1 used to make every append fail
// (rotation first, then the write): every later finding was lost.
func TestAppendWhenRotationIsBroken(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "findings.jsonl")
	if err := os.MkdirAll(filepath.Join(p+".1", "keep"), 0o750); err != nil {
		t.Fatal(err)
	}
	l := Log{Path: p, MaxBytes: 300}
	for i := 0; i < 5; i++ {
		err := l.Append(context.Background(), Record{Fingerprint: strconv.Itoa(i), ContainerID: strings.Repeat("c", 100)})
		if i > 0 && !errors.Is(err, ErrNotRotated) {
			t.Errorf("append %d: %v, want ErrNotRotated", i, err)
		}
	}
	if got := lines(t, p); len(got) != 5 {
		t.Errorf("%d findings in the file, want all 5", len(got))
	}
}

func TestSeenLimitsEachSandbox(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := Seen{Dir: t.TempDir(), Limit: 3, Interval: time.Hour, Now: func() time.Time { return now }}
	written := map[string]int{}
	rec := func(key, fp string) Outcome {
		t.Helper()
		out, err := s.RecordFinding(context.Background(), key, Record{Fingerprint: fp, State: StatePresent}, Parts{}, func() error { written[key]++; return nil })
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for i := 0; i < 3; i++ {
		if out := rec("hostile", strconv.Itoa(i)); out != Recorded {
			t.Fatalf("finding %d: outcome %v, want Recorded", i, out)
		}
	}
	if out := rec("hostile", "2"); out != Same {
		t.Errorf("same fingerprint: outcome %v, want Same", out)
	}
	if out := rec("hostile", "3"); out != Limited {
		t.Errorf("fourth finding in the hour: outcome %v, want Limited", out)
	}
	if out := rec("other", "x"); out != Recorded {
		t.Errorf("another sandbox: outcome %v, want Recorded", out)
	}
	now = now.Add(time.Hour)
	if out := rec("hostile", "3"); out != Recorded {
		t.Errorf("after the interval: outcome %v, want Recorded", out)
	}
	if written["hostile"] != 4 || written["other"] != 1 {
		t.Errorf("writes %v", written)
	}
}

// A symlink planted at the memory directory used to make every finding
// fail: the memory must never be followed through it, and the finding is
// written anyway; a gone is not (every clean look would write one).
func TestSeenWithPlantedSymlink(t *testing.T) {
	dir := t.TempDir()
	elsewhere := filepath.Join(dir, "elsewhere")
	if err := os.Mkdir(elsewhere, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(dir, "sandboxes")); err != nil {
		t.Fatal(err)
	}
	s := Seen{Dir: dir}
	calls := 0
	out, err := s.RecordFinding(context.Background(), "sb", Record{Fingerprint: "f", State: StatePresent}, Parts{}, func() error { calls++; return nil })
	if out != Recorded || calls != 1 || !errors.Is(err, ErrNoMemory) {
		t.Errorf("Record = %v, %v after %d writes; want Recorded, ErrNoMemory, 1", out, err, calls)
	}
	if names, _ := os.ReadDir(elsewhere); len(names) != 0 {
		t.Errorf("memory written through the symlink: %v", names)
	}
	// A clean look's gone: nothing known to take back, nothing written,
	// and the memory's failure said (a usage recorded before may stand).
	if out, err := s.RecordFinding(context.Background(), "sb", Record{State: StateGone}, Parts{}, func() error { calls++; return nil }); out != Same || calls != 1 || !errors.Is(err, ErrNoMemory) {
		t.Errorf("gone without a memory: %v, %v after %d writes, want Same, ErrNoMemory and no write", out, err, calls-1)
	}
	// Where the memory is usable and holds nothing for the sandbox, a
	// clean look is no error.
	ok := Seen{Dir: t.TempDir()}
	if out, err := ok.RecordFinding(context.Background(), "sb", Record{State: StateGone}, Parts{}, func() error { calls++; return nil }); out != Same || err != nil || calls != 1 {
		t.Errorf("gone with no entry: %v, %v, want Same and no error", out, err)
	}
	if err := s.Sweep(); err == nil {
		t.Error("Sweep went through the symlink")
	}
}
