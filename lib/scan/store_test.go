package scan

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// TestStoreRecord: the record step writes a sandbox's usage once per
// fingerprint, up to its limit, and says which it did.
func TestStoreRecord(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "findings.jsonl")
	s := &Store{Log: findings.Log{Path: path}, Seen: findings.Seen{Dir: filepath.Join(dir, "state"), Limit: 2, Interval: time.Hour}}
	steps := []struct {
		name, key, fingerprint string
		want                   findings.Outcome
	}{
		{name: "first", key: "a", fingerprint: "1", want: findings.Recorded},
		{name: "same usage, another container", key: "a", fingerprint: "1", want: findings.Same},
		{name: "changed usage", key: "a", fingerprint: "2", want: findings.Recorded},
		{name: "over the sandbox's limit", key: "a", fingerprint: "3", want: findings.Limited},
		{name: "another sandbox", key: "b", fingerprint: "3", want: findings.Recorded},
	}
	for _, st := range steps {
		out, err := s.Record(context.Background(), st.key, Decision{Record: findings.Record{SandboxID: st.key, Fingerprint: st.fingerprint}})
		if out != st.want || err != nil {
			t.Errorf("%s: %v, %v; want %v, nil", st.name, out, err, st.want)
		}
	}
	if n := len(findingstest.Read(t, path)); n != 3 {
		t.Errorf("%d findings in the file, want 3", n)
	}
}

// TestStoreRecordFailed: a finding that cannot be written is Failed, with
// why.
func TestStoreRecordFailed(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := &Store{Log: findings.Log{Path: filepath.Join(file, "findings.jsonl")}, Seen: findings.Seen{Dir: filepath.Join(dir, "state")}}
	out, err := s.Record(context.Background(), "a", Decision{Record: findings.Record{Fingerprint: "1"}})
	if out != findings.Failed || err == nil {
		t.Errorf("findings dir under a regular file: %v, %v; want failed with an error", out, err)
	}
}

// TestStoreSweep: after a recorded finding the memory forgets sandboxes
// whose netns is gone, at most once per SweepEvery, also across processes
// (each hook run is one, with a Store of its own); 0 sweeps each time.
func TestStoreSweep(t *testing.T) {
	for _, tt := range []struct {
		name  string
		every time.Duration
		// other: the second finding is another process's, a new Store;
		// ago backdates the memory's mark of the first sweep by that much.
		other bool
		ago   time.Duration
		// swept is whether the second recorded finding sweeps again.
		swept bool
	}{
		{name: "each time", every: 0, swept: true},
		{name: "once per interval", every: time.Hour, swept: false},
		{name: "once per interval across processes", every: time.Hour, other: true, swept: false},
		{name: "another process after the interval", every: time.Hour, other: true, ago: 2 * time.Hour, swept: true},
		{name: "a mark in the future", every: time.Hour, other: true, ago: -time.Hour, swept: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := &Store{Log: findings.Log{Path: filepath.Join(dir, "findings.jsonl")}, Seen: findings.Seen{Dir: filepath.Join(dir, "state")}, SweepEvery: tt.every}
			ctx := context.Background()
			// stopped remembers a sandbox whose netns is gone, and tells
			// whether the memory still had it.
			stopped := func() bool {
				t.Helper()
				out, err := s.Seen.RecordFinding(ctx, "stopped", findings.Record{Netns: filepath.Join(dir, "gone-netns"), Fingerprint: "fp", State: findings.StatePresent}, findings.Parts{}, func() error { return nil })
				if err != nil {
					t.Fatal(err)
				}
				return out == findings.Same
			}
			record := func(fp string) {
				t.Helper()
				if out, err := s.Record(ctx, "running", Decision{Record: findings.Record{Netns: dir, Fingerprint: fp}}); out != findings.Recorded || err != nil {
					t.Fatalf("record %s: %v, %v", fp, out, err)
				}
			}
			stopped()
			record("1")
			if stopped() {
				t.Fatal("the first recorded finding did not sweep the memory")
			}
			if tt.other {
				s = &Store{Log: s.Log, Seen: s.Seen, SweepEvery: tt.every}
			}
			if tt.ago != 0 {
				at := time.Now().Add(-tt.ago)
				if err := os.Chtimes(filepath.Join(dir, "state", "sandboxes", ".swept"), at, at); err != nil {
					t.Fatal(err)
				}
			}
			record("2")
			if swept := !stopped(); swept != tt.swept {
				t.Errorf("second finding swept the memory: %v, want %v", swept, tt.swept)
			}
		})
	}
}

// TestStoreSweepError: a sweep that fails leaves the finding recorded and
// says the memory needs attention.
func TestStoreSweepError(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	s := &Store{Log: findings.Log{Path: filepath.Join(dir, "findings.jsonl")}, Seen: findings.Seen{Dir: state}}
	// The memory's directory replaced by a symlink: Record writes without
	// it (ErrNoMemory) and Sweep refuses to follow it.
	if err := os.Symlink(t.TempDir(), filepath.Join(dir, "elsewhere")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(state, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "elsewhere"), filepath.Join(state, "sandboxes")); err != nil {
		t.Fatal(err)
	}
	out, err := s.Record(context.Background(), "a", Decision{Record: findings.Record{Fingerprint: "1"}})
	if out != findings.Recorded || !errors.Is(err, findings.ErrNoMemory) {
		t.Errorf("Record with a planted symlink: %v, %v; want recorded, ErrNoMemory", out, err)
	}
	// Both the memory and its sweep failed: two errors, joined.
	if j, ok := err.(interface{ Unwrap() []error }); !ok || len(j.Unwrap()) != 2 {
		t.Errorf("Record with a planted symlink: %q, want the memory's and the sweep's errors", err)
	}
}
