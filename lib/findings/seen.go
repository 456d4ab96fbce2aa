package findings

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/fileio"
)

// DefaultStateDir holds the per-sandbox memory; under /run it is gone after
// a reboot, as are the sandboxes it describes.
const DefaultStateDir = "/run/iptables-alerter"

// Defaults for the per-sandbox write bound: a pod that keeps changing its
// rules (or its comments) gets at most this many findings per interval.
const (
	DefaultLimit    = 10
	DefaultInterval = time.Hour
)

// maxSweep bounds the entries looked at per sweep.
const maxSweep = 4096

// maxEntry bounds one memory entry read back.
const maxEntry = 64 << 10

// Seen remembers, per sandbox, the fingerprint last recorded, so the hook
// firing for every container of a pod gives one finding per usage, and how
// many findings the sandbox wrote lately, so no pod can flood the file.
type Seen struct {
	Dir string
	// Limit findings per sandbox per Interval (0: DefaultLimit and
	// DefaultInterval).
	Limit    int
	Interval time.Duration
	// Now is the clock (tests set it); nil is time.Now.
	Now func() time.Time
}

type seenEntry struct {
	Key         string `json:"key"`
	Netns       string `json:"netns"`
	Fingerprint string `json:"fingerprint"`
	// State is the last recorded finding's; "" in entries written before
	// it was kept, which only ever held findings with usage.
	State State `json:"state"`
	// Since starts the current interval; Count findings were written in it.
	Since time.Time `json:"since"`
	Count int       `json:"count"`
}

// Outcome says what the record step did with a finding: Seen.RecordFinding, and
// scan's Store.Record around it, which the hook and the agent call. The
// values are spelled as the agent's scans_total metric labels them.
type Outcome string

const (
	// Recorded: write was called and succeeded.
	Recorded Outcome = "recorded"
	// Same: the sandbox's last finding has this fingerprint.
	Same Outcome = "same"
	// Limited: the sandbox wrote Limit findings this interval; this one is
	// dropped, and the next one after the interval is written.
	Limited Outcome = "limited"
	// Failed: write failed.
	Failed Outcome = "failed"
)

// ErrNoMemory marks a finding written without the per-sandbox memory (a
// symlink planted at the directory, a full /run): a repeated finding is
// better than a lost one.
var ErrNoMemory = errors.New("per-sandbox memory not usable")

// RecordFinding calls write unless the sandbox's last recorded finding has
// the same fingerprint and state or the sandbox is over its limit, and
// remembers both when write succeeds. The state is compared too: an
// unknown or gone record never passes for, and then skips, the finding that
// follows it. A gone record is written only after a present or unknown one
// (there is nothing to take back otherwise), and never limited: it is
// the last word on the sandbox's usage, and bounded by the records before
// it, each gone needing a present one first. One crossing of the limit is allowed: a present finding after
// an unknown one is written even then, so a pod that makes its inspections
// fail until the limit is reached cannot leave "unknown" as the last word on
// usage that is there; it is bounded, the unknown ones being limited.
//
// The entry stays locked throughout, so two containers of one pod starting
// together give one finding. When the memory cannot be
// used, write is called anyway and the error, wrapping ErrNoMemory, comes
// back with Recorded. A write error wrapping ErrNotRotated counts as
// recorded.
func (s Seen) RecordFinding(ctx context.Context, key string, rec Record, write func() error) (Outcome, error) {
	state := rec.KnownState()
	d, f, err := s.open(key)
	if err != nil {
		werr := write()
		if werr != nil && !errors.Is(werr, ErrNotRotated) {
			return Failed, werr
		}
		return Recorded, errors.Join(fmt.Errorf("%w: %w", ErrNoMemory, err), werr)
	}
	defer d.Close()
	defer f.Close()
	if err := lock(ctx, f); err != nil {
		return Failed, err
	}
	var old seenEntry
	had := false
	if data, err := fileio.ReadLimited(f, maxEntry); err == nil && len(data) > 0 {
		// A damaged entry is forgotten: at worst one finding is repeated.
		had = json.Unmarshal(data, &old) == nil
	}
	if old.State == "" {
		old.State = StatePresent
	}
	if state == StateGone && !had {
		// Nothing to take back; the entry open made is not kept: the
		// watch's clean scans must not leave one per sandbox.
		_ = d.Remove(filepath.Base(f.Name()))
		return Same, nil
	}
	if old.Fingerprint == rec.Fingerprint && old.State == state || state == StateGone && old.State == StateGone {
		return Same, nil
	}
	now := s.now()
	limit, interval := s.Limit, s.Interval
	if limit <= 0 {
		limit, interval = DefaultLimit, DefaultInterval
	}
	if now.Sub(old.Since) >= interval || now.Before(old.Since) {
		old.Since, old.Count = now, 0
	}
	if old.Count >= limit && state != StateGone && (state != StatePresent || old.State != StateUnknown) {
		return Limited, nil
	}
	werr := write()
	if werr != nil && !errors.Is(werr, ErrNotRotated) {
		return Failed, werr
	}
	data, _ := json.Marshal(seenEntry{Key: key, Netns: rec.Netns, Fingerprint: rec.Fingerprint, State: state, Since: old.Since, Count: old.Count + 1})
	if err := f.Truncate(0); err != nil {
		return Recorded, errors.Join(werr, fmt.Errorf("%w: save sandbox state %q: %w", ErrNoMemory, f.Name(), err))
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		return Recorded, errors.Join(werr, fmt.Errorf("%w: save sandbox state %q: %w", ErrNoMemory, f.Name(), err))
	}
	return Recorded, werr
}

// Reopens is when the sandbox's current interval ends, after which a
// finding RecordFinding limited would be written; zero when the sandbox has
// no entry or it cannot be read (nothing was limited then). The agent's
// watch scans again then, so the last change of a burst is recorded.
func (s Seen) Reopens(key string) time.Time {
	d, err := fileio.OpenDir(filepath.Join(s.Dir, "sandboxes"), 0o750)
	if err != nil {
		return time.Time{}
	}
	defer d.Close()
	// Read only, never created: a sandbox without entry limited nothing.
	e, err := readEntry(d, entryName(key))
	if err != nil {
		return time.Time{}
	}
	interval := s.Interval
	if s.Limit <= 0 {
		interval = DefaultInterval
	}
	return e.Since.Add(interval)
}

func (s Seen) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// open opens the sandbox's entry, keyed by a hash of its id.
func (s Seen) open(key string) (*fileio.Dir, *os.File, error) {
	d, err := fileio.OpenDir(filepath.Join(s.Dir, "sandboxes"), 0o750)
	if err != nil {
		return nil, nil, err
	}
	name := entryName(key)
	f, err := d.Open(name, unix.O_RDWR|unix.O_CREAT, 0o640)
	if err != nil {
		d.Close()
		return nil, nil, fmt.Errorf("open sandbox state %q: %w", name, err)
	}
	return d, f, nil
}

// entryName is the sandbox's entry, a hash of its id.
func entryName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:16]) + ".json"
}

// Sweep removes entries whose network namespace is gone: the sandbox has
// stopped and its id will not come back. Like Record it never goes through
// a symlink: a planted one must not make it delete files elsewhere.
func (s Seen) Sweep() error {
	dir := filepath.Join(s.Dir, "sandboxes")
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	d, err := fileio.OpenDir(dir, 0o750)
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.Names(maxSweep)
	if err != nil {
		return err
	}
	for _, n := range names {
		if !strings.HasSuffix(n, ".json") {
			continue
		}
		e, err := readEntry(d, n)
		if err != nil || e.Netns == "" {
			continue
		}
		if _, err := os.Stat(e.Netns); errors.Is(err, os.ErrNotExist) {
			_ = d.Remove(n)
		}
	}
	return nil
}

func readEntry(d *fileio.Dir, name string) (seenEntry, error) {
	var e seenEntry
	f, err := d.Open(name, unix.O_RDONLY, 0)
	if err != nil {
		return e, err
	}
	defer f.Close()
	data, err := fileio.ReadLimited(f, maxEntry)
	if err != nil {
		return e, err
	}
	return e, json.Unmarshal(data, &e)
}
