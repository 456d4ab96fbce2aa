package findings

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestKnownState: what a record says of its pod's usage, for lines of
// this writer and of writers before the field existed.
func TestKnownState(t *testing.T) {
	tests := []struct {
		name string
		rec  Record
		want State
	}{
		{name: "present", rec: Record{State: StatePresent, Nft: Nft{Rules: 1}}, want: StatePresent},
		{name: "gone, no usage", rec: Record{State: StateGone}, want: StateGone},
		{name: "unknown", rec: Record{State: StateUnknown, Truncated: true, Error: "legacy x_tables busy"}, want: StateUnknown},
		{name: "older line with usage", rec: Record{Nft: Nft{Rules: 2}, Truncated: true}, want: StatePresent},
		{name: "older line, error only", rec: Record{Truncated: true, Error: "deadline"}, want: StateUnknown},
		// Never written by an older writer (a clean look is not recorded);
		// still not clean.
		{name: "older line, nothing at all", rec: Record{}, want: StateUnknown},
		{name: "a newer writer's value, usage", rec: Record{State: "partial", Legacy: Legacy{Rules: 1}}, want: StatePresent},
		{name: "a newer writer's value, no usage", rec: Record{State: "partial"}, want: StateUnknown},
	}
	for _, tt := range tests {
		if got := tt.rec.KnownState(); got != tt.want {
			t.Errorf("%s: KnownState = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestStateOnTheLine: every line written carries a state, and a newer
// reader reads an older line (no "state") with the meaning it had.
func TestStateOnTheLine(t *testing.T) {
	line, err := Encode(Record{Fingerprint: "f", Truncated: true, Error: "legacy x_tables busy"})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(line, []byte(`"state":"unknown"`)) {
		t.Errorf("no state on an error-only line: %s", line)
	}
	older := `{"schema":"iptables-alerter/v1","time":"2026-03-01T12:00:00Z","pod":{"namespace":"a","name":"b","uid":"u"},` +
		`"nft":{"tables":[],"chains":0,"rules":0},"legacy":{"tables":[],"rules":0},"fingerprint":"f","truncated":true,"error":"legacy x_tables busy"}`
	r, err := Parse([]byte(older))
	if err != nil || r.State != StateUnknown {
		t.Errorf("older error-only line: state %q, %v; want unknown", r.State, err)
	}
	older = `{"schema":"iptables-alerter/v1","nft":{"tables":["ip filter"],"chains":1,"rules":1},"fingerprint":"f"}`
	if r, err := Parse([]byte(older)); err != nil || r.State != StatePresent {
		t.Errorf("older line with usage: state %q, %v; want present", r.State, err)
	}
	if r, err := Parse([]byte(`{"schema":"iptables-alerter/v1","state":"gone","fingerprint":"f"}`)); err != nil || r.State != StateGone {
		t.Errorf("gone line: state %q, %v; want gone", r.State, err)
	}
}

// TestSeenState: the per-sandbox memory compares the state with the
// fingerprint, so an unknown record never hides the present one after it,
// not even when a pod ran its sandbox into the limit with failed looks.
func TestSeenState(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := Seen{Dir: t.TempDir(), Limit: 2, Interval: time.Hour, Now: func() time.Time { return now }}
	written := 0
	rec := func(fp string, st State) Outcome {
		t.Helper()
		out, err := s.RecordFinding(context.Background(), "sb", Record{Fingerprint: fp, State: st}, Parts{}, func() error { written++; return nil })
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	steps := []struct {
		name string
		fp   string
		st   State
		want Outcome
	}{
		{name: "inspection could not finish", fp: "u", st: StateUnknown, want: Recorded},
		{name: "again", fp: "u", st: StateUnknown, want: Same},
		{name: "usage, same fingerprint (a writer that does not mark it)", fp: "u", st: StatePresent, want: Recorded},
		{name: "unknown again: the limit", fp: "u2", st: StateUnknown, want: Limited},
		// The last word stays the live rules' (see TestSeenReapplied).
		{name: "gone after present over the limit", fp: "", st: StateGone, want: Limited},
		{name: "gone again", fp: "", st: StateGone, want: Limited},
	}
	for _, st := range steps {
		if got := rec(st.fp, st.st); got != st.want {
			t.Errorf("%s: %v, want %v", st.name, got, st.want)
		}
	}
	// Over the limit, usage after an unknown record is still written, once.
	now = now.Add(time.Hour)
	for i, st := range []struct {
		fp   string
		st   State
		want Outcome
	}{
		{"u", StateUnknown, Recorded}, {"p1", StatePresent, Recorded}, {"u", StateUnknown, Limited},
		{"p2", StatePresent, Limited}, {"p1", StatePresent, Same},
	} {
		if got := rec(st.fp, st.st); got != st.want {
			t.Errorf("hour 2, step %d (%s %s): %v, want %v", i, st.st, st.fp, got, st.want)
		}
	}
	s.Limit = 1
	now = now.Add(time.Hour)
	if got := rec("u", StateUnknown); got != Recorded {
		t.Fatalf("hour 3 unknown: %v", got)
	}
	if got := rec("p1", StatePresent); got != Recorded {
		t.Errorf("present after unknown over the limit: %v, want Recorded", got)
	}
	if got := rec("u", StateUnknown); got != Limited {
		t.Errorf("unknown after that: %v, want Limited", got)
	}
	if written != 6 {
		t.Errorf("%d writes, want 6", written)
	}
	if got, want := s.Reopens("sb"), now.Add(time.Hour); !got.Equal(want) {
		t.Errorf("Reopens = %v, want %v", got, want)
	}
	if got := s.Reopens("other"); !got.IsZero() {
		t.Errorf("Reopens of a sandbox without entry = %v, want zero", got)
	}
	if got := rec2(t, s, "fresh", StateGone); got != Same {
		t.Errorf("gone of a sandbox that recorded nothing: %v, want Same (nothing to take back)", got)
	}
	if ents, _ := os.ReadDir(filepath.Join(s.Dir, "sandboxes")); len(ents) != 1 {
		t.Errorf("%d entries after a gone of a sandbox without one, want 1 (sb's)", len(ents))
	}
}

func rec2(t *testing.T, s Seen, key string, st State) Outcome {
	t.Helper()
	out, err := s.RecordFinding(context.Background(), key, Record{State: st}, Parts{}, func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSeenReapplied: a pod that re-applies its rules flush-then-add (a gone
// then the same present, again and again) never leaves gone as its last
// word while its rules are live, however far over its limit it goes, and
// its records stay bounded.
func TestSeenReapplied(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := Seen{Dir: t.TempDir(), Now: func() time.Time { return now }}
	var last State
	written := 0
	rec := func(fp string, st State) Outcome {
		t.Helper()
		out, err := s.RecordFinding(context.Background(), "sb", Record{Fingerprint: fp, State: st}, Parts{Nft: "n" + fp, Legacy: "l"},
			func() error { written++; last = st; return nil })
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// An odd start (present, unknown, present) puts a gone at the limit
	// itself in one of the two phases below.
	for start := 0; start < 2; start++ {
		now = now.Add(2 * time.Hour)
		written = 0
		rec("p", StatePresent)
		if start == 1 {
			rec("u", StateUnknown)
			rec("p", StatePresent)
		}
		for i := 0; i < 3*DefaultLimit; i++ {
			now = now.Add(time.Second)
			rec("", StateGone)
			rec("p", StatePresent)
			if last != StatePresent {
				t.Fatalf("start %d, re-apply %d (%d written): last word %q while the rules are live, want present", start, i, written, last)
			}
		}
		if written > DefaultLimit+2 {
			t.Errorf("start %d: %d records in the hour, want at most %d", start, written, DefaultLimit+2)
		}
	}
	// Rules really removed over the limit: the gone waits for the
	// interval's end (the agent's watch looks again then).
	if out := rec("", StateGone); out != Limited {
		t.Errorf("gone after present over the limit: %v, want limited", out)
	}
	now = now.Add(DefaultInterval)
	if out := rec("", StateGone); out != Recorded || last != StateGone {
		t.Errorf("gone in the next interval: %v (last %q), want recorded", out, last)
	}
}

// TestSeenPartialLook: a look the x_tables mutex cut short (its legacy
// part unread) is compared with what the records said on the part it did
// read: the same visible usage is Same, whatever its fingerprint, so a busy
// mutex makes no records; a complete look after a partial or unknown record
// writes the record that resolves it; and a clean pod once seen whole
// goes back to unknown only for two partial looks in a row.
func TestSeenPartialLook(t *testing.T) {
	// Each step doubtGap after the one before, unless its name says "the
	// same moment".
	clock := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	s := Seen{Dir: t.TempDir(), Limit: 4, Interval: 24 * time.Hour, Now: func() time.Time { return clock }}
	steps := []struct {
		name  string
		key   string
		fp    string
		st    State
		parts Parts
		want  Outcome
	}{
		{"complete look", "istio", "F1", StatePresent, Parts{"n1", "l1"}, Recorded},
		{"legacy unread, same nftables", "istio", "P1", StatePresent, Parts{"n1", ""}, Same},
		{"legacy unread, same nftables, no usage visible", "istio", "U1", StateUnknown, Parts{"n1", ""}, Same},
		{"again", "istio", "P1", StatePresent, Parts{"n1", ""}, Same},
		{"legacy unread, nftables changed", "istio", "P2", StatePresent, Parts{"n2", ""}, Recorded},
		{"that again", "istio", "P2", StatePresent, Parts{"n2", ""}, Same},
		{"nftables unread, legacy as recorded", "istio", "P3", StatePresent, Parts{"", "l1"}, Same},
		{"complete look resolves the partial record", "istio", "F2", StatePresent, Parts{"n2", "l1"}, Recorded},
		{"nothing read whole: by fingerprint", "istio", "P4", StatePresent, Parts{}, Recorded},

		{"clean pod, first look partial", "clean", "U0", StateUnknown, Parts{"n0", ""}, Recorded},
		{"again", "clean", "U0", StateUnknown, Parts{"n0", ""}, Same},
		{"complete clean look resolves the unknown", "clean", "G", StateGone, Parts{"n0", "l0"}, Recorded},
		// A gone is not confirmed for long by looks that could not read
		// a part: the part may hold usage since. One such look is
		// passing (Same), a complete one between clears it, another of
		// the same moment counts as the same, a second in a row later
		// writes unknown.
		{"partial clean look after", "clean", "U0", StateUnknown, Parts{"n0", ""}, Same},
		{"a complete clean look between", "clean", "G", StateGone, Parts{"n0", "l0"}, Same},
		{"partial again", "clean", "U0", StateUnknown, Parts{"n0", ""}, Same},
		{"the same moment's other look", "clean", "U0", StateUnknown, Parts{"n0", ""}, Same},
		{"partial in a row", "clean", "U0", StateUnknown, Parts{"n0", ""}, Recorded},
		{"partial look with new usage", "clean", "P5", StatePresent, Parts{"n5", ""}, Recorded},
		{"over the limit: unknown limited", "clean", "U6", StateUnknown, Parts{"", ""}, Limited},

		// A pod that had usage, took it back, then keeps its nftables
		// unreadable (a rule no dump gets past, placed first) and adds
		// rules behind it: its gone must not stand.
		{"usage", "hidden", "F1", StatePresent, Parts{"n1", "l0"}, Recorded},
		{"taken back", "hidden", "G", StateGone, Parts{"n0", "l0"}, Recorded},
		{"nftables unread, legacy as recorded", "hidden", "U1", StateUnknown, Parts{"", "l0"}, Same},
		{"again, in a row", "hidden", "U1", StateUnknown, Parts{"", "l0"}, Recorded},
		{"that again", "hidden", "U1", StateUnknown, Parts{"", "l0"}, Same},
		{"a complete clean look resolves it", "hidden", "G", StateGone, Parts{"n0", "l0"}, Recorded},

		// Usage seen by a partial look over a gone is written at once.
		{"usage", "seen", "F1", StatePresent, Parts{"n1", "l0"}, Recorded},
		{"taken back", "seen", "G", StateGone, Parts{"n0", "l0"}, Recorded},
		{"usage among the nftables read in part", "seen", "P8", StatePresent, Parts{"", "l0"}, Recorded},

		// Over the limit, a complete clean look still resolves an unknown.
		{"failed look", "failing", "U1", StateUnknown, Parts{}, Recorded},
		{"failed look", "failing", "U2", StateUnknown, Parts{}, Recorded},
		{"failed look", "failing", "U3", StateUnknown, Parts{}, Recorded},
		{"failed look", "failing", "U4", StateUnknown, Parts{}, Recorded},
		{"complete clean look over the limit", "failing", "G", StateGone, Parts{"n", "l"}, Recorded},
		{"failed look over the limit", "failing", "U5", StateUnknown, Parts{}, Limited},
	}
	for _, st := range steps {
		if !strings.Contains(st.name, "the same moment") {
			clock = clock.Add(doubtGap)
		}
		out, err := s.RecordFinding(context.Background(), st.key, Record{Fingerprint: st.fp, State: st.st}, st.parts, func() error { return nil })
		if err != nil || out != st.want {
			t.Errorf("%s %s: %v %v, want %v", st.key, st.name, out, err, st.want)
		}
	}
}

// TestSeenKeptUsage: the sandbox's entry keeps what its records said of
// its usage, and keeps a worse level over a partial look that said milder,
// for an agent that comes back with no memory of its own (Seen.Kept): a
// complete look replaces it, a gone one clears it, an unknown one leaves
// it. An older writer's entry learns it from a complete look that is Same.
func TestSeenKeptUsage(t *testing.T) {
	s := Seen{Dir: t.TempDir(), Limit: 100, Interval: time.Hour}
	legacy := Record{Fingerprint: "F1", State: StatePresent, Legacy: Legacy{Rules: 3}, Nft: Nft{Rules: 1},
		Impact: Impact{Legacy: 3, Native: 1}, Worst: ImpactLegacy, Vendors: []Vendor{{Name: "istio"}}}
	cut := Record{Fingerprint: "P1", State: StatePresent, Truncated: true, Error: "legacy x_tables busy", Nft: Nft{Rules: 2},
		Impact: Impact{Native: 2}, Worst: ImpactNative}
	native := Record{Fingerprint: "F2", State: StatePresent, Nft: Nft{Rules: 2}, Impact: Impact{Native: 2}, Worst: ImpactNative}
	unknown := Record{Fingerprint: "U1", State: StateUnknown, Truncated: true, Error: "deadline"}
	gone := Record{Fingerprint: "G", State: StateGone}
	ctx := context.Background()
	for _, st := range []struct {
		name  string
		rec   Record
		parts Parts
		worst string // "" for none kept
		rules int
	}{
		{"complete legacy look", legacy, Parts{"n1", "l1"}, ImpactLegacy, 3},
		{"partial native look, new nftables", cut, Parts{"n2", ""}, ImpactLegacy, 3},
		{"unknown look", unknown, Parts{}, ImpactLegacy, 3},
		{"complete native look", native, Parts{"n2", "l0"}, ImpactNative, 0},
		{"gone", gone, Parts{"n0", "l0"}, "", 0},
	} {
		if _, err := s.RecordFinding(ctx, "sb", st.rec, st.parts, func() error { return nil }); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		k, ok := s.Kept(ctx, "sb")
		if ok != (st.worst != "") || k.Worst != st.worst || k.Impact.Legacy != st.rules {
			t.Errorf("%s: kept %+v %v, want worst %q with %d legacy rules", st.name, k, ok, st.worst, st.rules)
		}
	}
	if k, _ := s.Kept(ctx, "sb"); k.Vendors != nil {
		t.Errorf("vendors kept after gone: %v", k.Vendors)
	}

	// An older writer's entry: no usage kept until a complete look.
	dir := filepath.Join(s.Dir, "sandboxes")
	old, _ := json.Marshal(seenEntry{Key: "old", Fingerprint: "F1", State: StatePresent, Parts: Parts{"n1", "l1"}})
	if err := os.WriteFile(filepath.Join(dir, entryName("old")), old, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Kept(ctx, "old"); ok {
		t.Error("an older entry keeps usage")
	}
	if out, err := s.RecordFinding(ctx, "old", legacy, Parts{"n1", "l1"}, func() error { return nil }); err != nil || out != Same {
		t.Fatalf("complete look on an older entry: %v %v", out, err)
	}
	if k, ok := s.Kept(ctx, "old"); !ok || k.Worst != ImpactLegacy || len(k.Vendors) != 1 {
		t.Errorf("older entry after a complete look: %+v %v", k, ok)
	}
}

// TestSeenEntryRemovedBeforeLock: a look whose entry another look removed
// between its open and its lock (a clean look of the same sandbox, or the
// sweep) saves what it recorded under the entry's name, not into the
// removed file: otherwise the sandbox keeps no memory of its finding, and
// the next look records it again.
func TestSeenEntryRemovedBeforeLock(t *testing.T) {
	s := Seen{Dir: t.TempDir()}
	dir := filepath.Join(s.Dir, "sandboxes")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, entryName("sb"))
	// The other look: it holds the entry's lock while the record opens it.
	held, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	written := 0
	done := make(chan Outcome, 1)
	go func() {
		out, err := s.RecordFinding(context.Background(), "sb", Record{Fingerprint: "f", State: StatePresent}, Parts{}, func() error { written++; return nil })
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	// The record has the entry open once a second descriptor names it.
	for deadline := time.Now().Add(time.Minute); openers(t, path) < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the record never opened the entry")
		}
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	held.Close()
	if out := <-done; out != Recorded {
		t.Fatalf("record = %v, want Recorded", out)
	}
	var e seenEntry
	if b, err := os.ReadFile(path); err != nil || json.Unmarshal(b, &e) != nil || e.Fingerprint != "f" {
		t.Fatalf("entry after the record: %+v, %v; want fingerprint f under its name", e, err)
	}
	out, err := s.RecordFinding(context.Background(), "sb", Record{Fingerprint: "f", State: StatePresent}, Parts{}, func() error { written++; return nil })
	if err != nil || out != Same || written != 1 {
		t.Errorf("the same finding again: %v, %v after %d writes, want Same after 1", out, err, written)
	}
}

// openers counts this process's descriptors open on path.
func openers(t *testing.T, path string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && l == path {
			n++
		}
	}
	return n
}

// TestSweepKeepsNodeEntry: the node's own entry is never swept, though the
// path the agent read its namespace by does not exist where the sweep runs
// (a hook, in the node's mount namespace); a pod's entry whose namespace
// is gone is.
func TestSweepKeepsNodeEntry(t *testing.T) {
	s := Seen{Dir: t.TempDir()}
	gone := filepath.Join(t.TempDir(), "no-such-netns")
	for _, r := range []struct {
		key string
		rec Record
	}{
		{"node", Record{Subject: SubjectNode, Netns: gone, Fingerprint: "n", State: StatePresent}},
		{"/exec/x", Record{Subject: SubjectNode, Netns: gone, Fingerprint: "x", State: StatePresent}},
		{"pod", Record{Netns: gone, Fingerprint: "p", State: StatePresent}},
	} {
		if out, err := s.RecordFinding(context.Background(), r.key, r.rec, Parts{}, func() error { return nil }); out != Recorded || err != nil {
			t.Fatalf("record %s: %v, %v", r.key, out, err)
		}
	}
	if err := s.Sweep(); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{"node": true, "/exec/x": true, "pod": false} {
		_, err := os.Stat(filepath.Join(s.Dir, "sandboxes", entryName(key)))
		if got := err == nil; got != want {
			t.Errorf("entry %s after the sweep: present %v, want %v", key, got, want)
		}
	}
}

// TestSeenEntryCutBySave: an entry rewritten shorter by a process killed
// before save cut it (the hook's watchdog, timeout's KILL) still reads as
// its new content, so a later gone takes its usage back. save cut the
// entry first before: killed then, it left an empty entry, and the gone
// was dropped as having nothing to take back.
func TestSeenEntryCutBySave(t *testing.T) {
	s := Seen{Dir: t.TempDir(), Limit: 100, Interval: time.Hour}
	ctx := context.Background()
	long := Record{Fingerprint: "F1", State: StatePresent, Nft: Nft{Rules: 1}, Impact: Impact{Native: 1}, Worst: ImpactNative,
		Vendors: []Vendor{{Name: strings.Repeat("v", 500)}}}
	if out, err := s.RecordFinding(ctx, "sb", long, Parts{"n1", "l0"}, func() error { return nil }); err != nil || out != Recorded {
		t.Fatalf("first record: %v %v", out, err)
	}
	path := filepath.Join(s.Dir, "sandboxes", entryName("sb"))
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A shorter entry written over it, not cut yet.
	short, _ := json.Marshal(seenEntry{Key: "sb", Fingerprint: "F2", State: StatePresent, Parts: Parts{"n2", "l0"}})
	if len(short) >= len(old) {
		t.Fatalf("the new entry (%d bytes) is not shorter than the old (%d)", len(short), len(old))
	}
	if err := os.WriteFile(path, append(short, old[len(short):]...), 0o640); err != nil {
		t.Fatal(err)
	}
	written := 0
	out, err := s.RecordFinding(ctx, "sb", Record{Fingerprint: "G", State: StateGone}, Parts{"n0", "l0"}, func() error { written++; return nil })
	if err != nil || out != Recorded || written != 1 {
		t.Fatalf("gone after an uncut entry: %v %v, %d writes; want Recorded, 1", out, err, written)
	}
	// And save leaves exactly the new entry.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var e seenEntry
	if err := json.Unmarshal(b, &e); err != nil || e.State != StateGone {
		t.Fatalf("entry after the gone: %q (%v)", b, err)
	}
}

// TestSweepStaleEmptyEntry: an entry no record was saved to (the
// sandbox's first append failed: a full /var/log) is removed by the sweep
// once it is an hour old; a fresh one, which a look may be writing, stays.
func TestSweepStaleEmptyEntry(t *testing.T) {
	s := Seen{Dir: t.TempDir()}
	dir := filepath.Join(s.Dir, "sandboxes")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	old, fresh := filepath.Join(dir, entryName("old")), filepath.Join(dir, entryName("fresh"))
	for _, p := range []string{old, fresh} {
		if err := os.WriteFile(p, nil, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	then := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(old, then, then); err != nil {
		t.Fatal(err)
	}
	if err := s.Sweep(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the empty entry two hours old is still there (%v)", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("the fresh empty entry: %v", err)
	}
	// An old empty entry a look holds (its lock: the look is about to
	// save its record there) stays.
	held, err := os.OpenFile(old, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(old, then, then); err != nil {
		t.Fatal(err)
	}
	if err := s.Sweep(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); err != nil {
		t.Errorf("the sweep removed an entry a look holds: %v", err)
	}
}

// TestSeenNodePartialLook: the node's namespace stays gone through partial
// looks in a row (kube-proxy's commits change the generation under a long
// read): no pod writes there, and each unknown would flip its label and
// ClusterReport.
func TestSeenNodePartialLook(t *testing.T) {
	clock := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	s := Seen{Dir: t.TempDir(), Limit: 100, Interval: 24 * time.Hour, Now: func() time.Time { return clock }}
	ctx := context.Background()
	for i, st := range []struct {
		rec   Record
		parts Parts
		want  Outcome
	}{
		{Record{Subject: SubjectNode, Fingerprint: "G", State: StateGone}, Parts{"n0", "l0"}, Recorded},
		{Record{Subject: SubjectNode, Fingerprint: "U", State: StateUnknown}, Parts{"", "l0"}, Same},
		{Record{Subject: SubjectNode, Fingerprint: "U", State: StateUnknown}, Parts{"", "l0"}, Same},
		{Record{Subject: SubjectNode, Fingerprint: "U", State: StateUnknown}, Parts{"n0", ""}, Same},
		// Usage seen, though in part: written.
		{Record{Subject: SubjectNode, Fingerprint: "P", State: StatePresent}, Parts{"", "l0"}, Recorded},
	} {
		clock = clock.Add(doubtGap)
		if out, err := s.RecordFinding(ctx, "node", st.rec, st.parts, func() error { return nil }); err != nil || out != st.want {
			t.Errorf("step %d: %v %v, want %v", i, out, err, st.want)
		}
	}
}

// TestSeenPartialLookWorse: a partial look whose read parts agree with a
// present record, but that saw a worse level than the record keeps (xt
// rules put in the part read in part), is written; one that saw the same
// level or milder is Same.
func TestSeenPartialLookWorse(t *testing.T) {
	s := Seen{Dir: t.TempDir(), Limit: 100, Interval: time.Hour}
	ctx := context.Background()
	native := Record{Fingerprint: "F1", State: StatePresent, Nft: Nft{Rules: 2}, Impact: Impact{Native: 2}, Worst: ImpactNative}
	if out, err := s.RecordFinding(ctx, "sb", native, Parts{"n1", "l0"}, func() error { return nil }); err != nil || out != Recorded {
		t.Fatalf("native record: %v %v", out, err)
	}
	cutNative := Record{Fingerprint: "P1", State: StatePresent, Truncated: true, Nft: Nft{Rules: 1}, Impact: Impact{Native: 1}, Worst: ImpactNative}
	if out, err := s.RecordFinding(ctx, "sb", cutNative, Parts{"", "l0"}, func() error { return nil }); err != nil || out != Same {
		t.Errorf("cut look, native as recorded: %v %v, want Same", out, err)
	}
	cutXt := Record{Fingerprint: "P2", State: StatePresent, Truncated: true, Nft: Nft{Rules: 1}, Impact: Impact{Xt: 1}, Worst: ImpactXt}
	if out, err := s.RecordFinding(ctx, "sb", cutXt, Parts{"", "l0"}, func() error { return nil }); err != nil || out != Recorded {
		t.Errorf("cut look seeing xt over a native record: %v %v, want Recorded", out, err)
	}
}

// TestSeenDoubts: the wait until a cut look would write unknown over the
// sandbox's gone, from the mark its first cut look left; none without a
// mark.
func TestSeenDoubts(t *testing.T) {
	clock := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	s := Seen{Dir: t.TempDir(), Limit: 100, Interval: 24 * time.Hour, Now: func() time.Time { return clock }}
	ctx := context.Background()
	record := func(fp string, st State, parts Parts) {
		t.Helper()
		if _, err := s.RecordFinding(ctx, "sb", Record{Fingerprint: fp, State: st}, parts, func() error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	record("F1", StatePresent, Parts{"n1", "l0"})
	record("G", StateGone, Parts{"n0", "l0"})
	if _, ok := s.Doubts("sb"); ok {
		t.Fatal("a wait without a mark")
	}
	record("U", StateUnknown, Parts{"n0", ""})
	clock = clock.Add(20 * time.Second)
	if wait, ok := s.Doubts("sb"); !ok || wait != doubtGap-20*time.Second {
		t.Errorf("wait %v %v, want %v", wait, ok, doubtGap-20*time.Second)
	}
	record("G", StateGone, Parts{"n0", "l0"})
	if _, ok := s.Doubts("sb"); ok {
		t.Error("a wait after a complete look cleared the mark")
	}
	if _, ok := s.Doubts("none"); ok {
		t.Error("a wait for a sandbox with no entry")
	}
}
