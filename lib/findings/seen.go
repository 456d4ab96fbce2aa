package findings

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
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
	// DoubtGap is doubtGap for tests (0: doubtGap).
	DoubtGap time.Duration
}

type seenEntry struct {
	Key         string `json:"key"`
	Netns       string `json:"netns"`
	Fingerprint string `json:"fingerprint"`
	// State is the last recorded finding's; "" in entries written before
	// it was kept, which only ever held findings with usage.
	State State `json:"state"`
	// Parts are, per part of a look, what the sandbox's records last said
	// of it (Parts.over); zero in entries of older writers.
	Parts Parts `json:"parts"`
	// Usage is what the records last said of the usage (KeptUsage); nil
	// after a gone record and in entries of older writers.
	Usage *KeptUsage `json:"usage,omitempty"`
	// Since starts the current interval; Count findings were written in it.
	Since time.Time `json:"since"`
	Count int       `json:"count"`
	// Doubted is when a look, after a gone record of a pod, could not
	// read every part and agreed with the gone on what it read; such a
	// look doubtGap or more later, with no complete look between, does
	// not pass for the gone (RecordFinding). nil: none since.
	Doubted *time.Time `json:"doubted,omitempty"`
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
// the same fingerprint and state, the look behind rec agrees with what was
// recorded, or the sandbox is over its limit, and remembers what it wrote
// when write succeeds. The state is compared too: an unknown or gone
// record never passes for, and then skips, the finding that follows it, so
// a complete look after an unknown or truncated record writes the present
// or gone that resolves it. A gone record is written only after a present
// or unknown one (there is nothing to take back otherwise).
//
// parts are what the look behind rec read whole (Parts). A look cut short
// (a neighbour holding the x_tables mutex leaves the legacy part unread)
// that read at least one part whole, and saw on each such part what the
// sandbox's records last said of it, is Same: nothing seen differs, and a
// partial record would only replace the complete one before it (and spend
// the limit). After a pod's gone, only once in a row: a second such look
// writes its unknown (see below). Otherwise it is compared by
// fingerprint, as any record.
//
// Over the limit a record is written only when the last one misstates the
// usage the way consumers act on: present after unknown or gone (live rules
// must not read as gone or unknown, however often a pod flushes and
// re-adds them), gone after unknown. Anything else is Limited, gone after
// present too: a pod's last word then stays its live rules, and the
// agent's watch looks again when the interval ends. This bounds a sandbox
// to Limit+2 records an interval: over the limit, each write moves the
// last state towards present, and from present nothing passes.
//
// The entry stays locked throughout, so two containers of one pod starting
// together give one finding. When the memory cannot be
// used, write is called anyway and the error, wrapping ErrNoMemory, comes
// back with Recorded. A write error wrapping ErrNotRotated counts as
// recorded.
func (s Seen) RecordFinding(ctx context.Context, key string, rec Record, parts Parts, write func() error) (Outcome, error) {
	state := rec.KnownState()
	// The node's own namespace outlives the memory: under /run, a reboot
	// empties it, while the node's records before it still stand with
	// the consumers (the node label, its ClusterReport), whatever was
	// cleared before the reboot. So its first clean look with no entry is
	// written, once per memory, and kept.
	takeBack := state != StateGone || rec.KnownSubject() == SubjectNode
	var d *fileio.Dir
	var f *os.File
	for try := 0; ; try++ {
		var err error
		// A gone takes back only what an entry holds: without one (every
		// clean container start of a pod that never had usage) there is
		// nothing to open, and none is created.
		d, f, err = s.open(key, takeBack)
		if err != nil && state == StateGone {
			// Absent: nothing to take back. Otherwise whether there is
			// anything is not known: a clean look must not write a gone
			// line each time the memory fails, but the failure is said
			// (a usage recorded before may stand).
			if errors.Is(err, fs.ErrNotExist) {
				return Same, nil
			}
			return Same, fmt.Errorf("%w: %w", ErrNoMemory, err)
		}
		if err != nil {
			werr := write()
			if werr != nil && !errors.Is(werr, ErrNotRotated) {
				return Failed, werr
			}
			return Recorded, errors.Join(fmt.Errorf("%w: %w", ErrNoMemory, err), werr)
		}
		if err := lock(ctx, f); err != nil {
			d.Close()
			f.Close()
			return Failed, err
		}
		// An entry removed between the open and the lock (by a clean
		// look of the same sandbox, below, or the sweep) is a file
		// nobody reads again: what this look saved there would be lost,
		// and its finding repeated. The name is opened again.
		if try == maxReopens || linked(f) {
			break
		}
		d.Close()
		f.Close()
	}
	defer d.Close()
	defer f.Close()
	// An empty or damaged entry is forgotten: at worst one finding is
	// repeated.
	old, err := decodeEntry(f)
	had := err == nil
	if old.State == "" {
		old.State = StatePresent
	}
	if state == StateGone && !had && !takeBack {
		// Nothing to take back from an empty or damaged entry, and it is
		// not kept: the watch's clean scans must not leave one per sandbox.
		_ = d.Remove(filepath.Base(f.Name()))
		return Same, nil
	}
	if old.Fingerprint == rec.Fingerprint && old.State == state || state == StateGone && old.State == StateGone {
		learn := parts.Whole() && old.Parts != parts
		if learn {
			// An entry of an older writer, or one whose record was
			// partial with a fingerprint that happens to match: learn
			// the parts, so a later partial look can be compared.
			old.Parts = parts
		}
		if old.Usage == nil && state == StatePresent && !rec.Partial() {
			// An older writer's entry keeps no usage yet.
			old.Usage, learn = keptOf(rec, nil), true
		}
		if old.Doubted != nil && parts.Whole() {
			// A complete look confirms the gone: the partial one
			// before it was passing.
			old.Doubted, learn = nil, true
		}
		if learn {
			_ = save(f, old)
		}
		return Same, nil
	}
	// A look that read some parts whole, each as the last record had it,
	// adds nothing to a present or unknown record, unless it saw a worse
	// level than the record's. Over a gone, one that saw usage is written
	// (present: the parts it read agree with the gone's, the usage is in
	// the part it read only in part). One that saw
	// none does not confirm a pod's gone for long: the part it could not
	// read may hold usage since, and a pod can keep a part unreadable
	// itself (a rule no dump gets past, issue 7 item 2), so clean would
	// stand for good. The first such look is Same and marks the entry;
	// one doubtGap or more later, with no complete look between, writes
	// its unknown record (once: its own fingerprint, then Same). The gap
	// keeps the looks of one moment (the hook's and the agent's at one
	// container start, containers starting together) from counting twice;
	// a passing cause (the x_tables mutex busy a moment, a generation
	// changed mid-read) is resolved by the complete look the re-sweep
	// makes next. The node's namespace keeps Same: no pod writes there,
	// and its looks come out partial as kube-proxy commits.
	now := s.now()
	// Usage the record does not hold: any over a gone, a worse level over
	// the usage the entry keeps (a pod's xt rules put in the part read in
	// part, behind a rule no dump gets past, over its native record).
	seesMore := state == StatePresent && (old.State == StateGone ||
		old.Usage != nil && ImpactRank(rec.WorstLevel()) < ImpactRank(old.Usage.Worst))
	if had && parts.agree(old.Parts) && !seesMore {
		if old.State != StateGone || rec.KnownSubject() == SubjectNode {
			return Same, nil
		}
		switch {
		case old.Doubted == nil || now.Before(*old.Doubted):
			old.Doubted = &now
			if err := save(f, old); err != nil {
				// Unmarked, every later look would be the first.
				return Same, fmt.Errorf("%w: save sandbox state %q: %w", ErrNoMemory, f.Name(), err)
			}
			return Same, nil
		case now.Sub(*old.Doubted) < s.doubtGap():
			return Same, nil
		}
	}
	limit, interval := s.Limit, s.Interval
	if limit <= 0 {
		limit, interval = DefaultLimit, DefaultInterval
	}
	if now.Sub(old.Since) >= interval || now.Before(old.Since) {
		old.Since, old.Count = now, 0
	}
	if old.Count >= limit && !corrects(old.State, state) {
		return Limited, nil
	}
	werr := write()
	if werr != nil && !errors.Is(werr, ErrNotRotated) {
		return Failed, werr
	}
	e := seenEntry{Key: key, Netns: sweptBy(rec), Fingerprint: rec.Fingerprint, State: state, Parts: parts.over(old.Parts), Usage: keptOf(rec, old.Usage),
		Since: old.Since, Count: old.Count + 1}
	if err := save(f, e); err != nil {
		return Recorded, errors.Join(werr, fmt.Errorf("%w: save sandbox state %q: %w", ErrNoMemory, f.Name(), err))
	}
	return Recorded, werr
}

// KeptUsage is what a sandbox's records last said of its usage: its
// worst level, its rules per level and its vendors, kept over a look that
// could not see everything (Record.Partial) when that said milder, as the
// consumers keep it. A process that comes to the pod with no memory of its
// own (the agent restarted, meeting a pod that keeps the x_tables lock
// busy over its legacy rules) reads it with Seen.Kept instead of taking
// the partial look's level.
type KeptUsage struct {
	Worst   string   `json:"worst"`
	Impact  Impact   `json:"impact"`
	Vendors []string `json:"vendors,omitempty"`
}

// keptOf is the usage an entry keeps once rec is recorded, given the one
// it kept (old, nil: none).
func keptOf(rec Record, old *KeptUsage) *KeptUsage {
	switch rec.KnownState() {
	case StateGone:
		return nil
	case StateUnknown:
		return old
	}
	if old != nil && rec.MilderThan(old.Worst) {
		return old
	}
	return &KeptUsage{Worst: rec.WorstLevel(), Impact: rec.Levels(), Vendors: VendorLabels(rec.Vendors)}
}

// Kept is the usage the sandbox's entry keeps (KeptUsage); false without
// an entry, or one that keeps none, or when it cannot be read.
func (s Seen) Kept(ctx context.Context, key string) (KeptUsage, bool) {
	d, f, err := s.open(key, false)
	if err != nil {
		return KeptUsage{}, false
	}
	defer d.Close()
	defer f.Close()
	// Locked: a record step saving it at once must not be read half
	// written.
	if lock(ctx, f) != nil {
		return KeptUsage{}, false
	}
	e, err := decodeEntry(f)
	if err != nil || e.Usage == nil {
		return KeptUsage{}, false
	}
	return *e.Usage, true
}

// sweptBy is the namespace path the sweep judges rec's entry by: none for
// the node's own, which never goes away and whose path is the agent's
// (/host/proc/1/ns/net in its container): a hook sweeping from the node's
// mount namespace finds no such path there and removed the entry, so the
// node's usage was recorded again and its limit restarted.
func sweptBy(rec Record) string {
	if rec.Subject == SubjectNode {
		return ""
	}
	return rec.Netns
}

// maxReopens bounds the times RecordFinding opens an entry again after
// finding it removed once locked; past it the look goes on with the one it
// holds (at worst its finding is repeated).
const maxReopens = 3

// linked tells whether f still has a name: false only when fstat says it
// was unlinked.
func linked(f *os.File) bool {
	var st unix.Stat_t
	return unix.Fstat(int(f.Fd()), &st) != nil || st.Nlink > 0
}

// corrects tells whether a record of state now, after one of state last,
// is written over the limit: when last misstates the usage consumers act
// on (see RecordFinding).
func corrects(last, now State) bool {
	return now == StatePresent && (last == StateUnknown || last == StateGone) ||
		now == StateGone && last == StateUnknown
}

// save writes e over the entry f.
func save(f *os.File, e seenEntry) error {
	data, _ := json.Marshal(e)
	// Written over the old entry, then cut to its length: a process killed
	// in between (the watchdog, timeout's KILL) leaves the new entry with
	// the old one's tail, which decodeEntry reads past. Cut first, it left
	// an empty entry, and a later gone found nothing to take back.
	if _, err := f.WriteAt(data, 0); err != nil {
		return err
	}
	return f.Truncate(int64(len(data)))
}

// Parts are what a look read whole, part by part: the fingerprint of its
// nftables usage and of its legacy x_tables usage, "" for a part it did not
// read whole (a deadline, a size bound, the x_tables mutex held by a
// neighbour). The per-sandbox memory keeps, for each part, what the
// sandbox's records last said of it.
type Parts struct {
	Nft    string `json:"nft"`
	Legacy string `json:"legacy"`
}

// Whole tells whether the look read every part whole.
func (p Parts) Whole() bool { return p.Nft != "" && p.Legacy != "" }

// agree tells whether a look that did not read everything saw what known
// holds: at least one part read whole, and each equal to known's.
func (p Parts) agree(known Parts) bool {
	if p.Whole() || p.Nft == "" && p.Legacy == "" {
		return false
	}
	return (p.Nft == "" || p.Nft == known.Nft) && (p.Legacy == "" || p.Legacy == known.Legacy)
}

// over is p with the parts it did not read whole taken from old.
func (p Parts) over(old Parts) Parts {
	if p.Nft == "" {
		p.Nft = old.Nft
	}
	if p.Legacy == "" {
		p.Legacy = old.Legacy
	}
	return p
}

// Reopens is when the sandbox's current interval ends, after which a
// finding RecordFinding limited would be written; zero when the sandbox has
// no entry or it cannot be read (nothing was limited then). The agent's
// watch scans again then, so the last change of a burst is recorded.
func (s Seen) Reopens(key string) time.Time {
	e, ok := s.entry(key)
	if !ok {
		return time.Time{}
	}
	interval := s.Interval
	if s.Limit <= 0 {
		interval = DefaultInterval
	}
	return e.Since.Add(interval)
}

// Doubts is how long until a cut look of the sandbox would write its
// unknown over its gone (RecordFinding: the gap after the cut look that
// marked the entry); ok is false when the entry holds no such mark. The
// agent's watch scans again then: while the x_tables mutex stays busy,
// nothing else looks at a pod looked at before.
func (s Seen) Doubts(key string) (wait time.Duration, ok bool) {
	e, ok := s.entry(key)
	if !ok || e.State != StateGone || e.Doubted == nil {
		return 0, false
	}
	return e.Doubted.Add(s.doubtGap()).Sub(s.now()), true
}

// entry reads the sandbox's entry, never creating one; ok is false when
// there is none or it cannot be read.
func (s Seen) entry(key string) (seenEntry, bool) {
	d, err := fileio.OpenDir(filepath.Join(s.Dir, "sandboxes"), 0o750)
	if err != nil {
		return seenEntry{}, false
	}
	defer d.Close()
	e, _, err := readEntry(d, entryName(key))
	return e, err == nil
}

func (s Seen) doubtGap() time.Duration {
	if s.DoubtGap > 0 {
		return s.DoubtGap
	}
	return doubtGap
}

func (s Seen) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// open opens the sandbox's entry, keyed by a hash of its id, creating it
// when create is set.
func (s Seen) open(key string, create bool) (*fileio.Dir, *os.File, error) {
	d, err := fileio.OpenDir(filepath.Join(s.Dir, "sandboxes"), 0o750)
	if err != nil {
		return nil, nil, err
	}
	name := entryName(key)
	flags := unix.O_RDWR
	if create {
		flags |= unix.O_CREAT
	}
	f, err := d.Open(name, flags, 0o640)
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
	_, err := s.SweepIfDue(0)
	return err
}

// sweptMark is the memory's file whose modification time is its last
// sweep, by the hook or the agent. Hook processes share nothing else, and
// each one read every entry after each finding it recorded: on a node of
// 250 pods with usage, 250 files for every new pod's first container.
const sweptMark = ".swept"

// SweepIfDue sweeps (Sweep) unless some process swept the memory less than
// every ago, and tells whether it swept; every <= 0 sweeps each time.
func (s Seen) SweepIfDue(every time.Duration) (bool, error) {
	dir := filepath.Join(s.Dir, "sandboxes")
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	d, err := fileio.OpenDir(dir, 0o750)
	if err != nil {
		return false, err
	}
	defer d.Close()
	if every > 0 && !due(d, every, time.Now()) {
		return false, nil
	}
	names, err := d.Names(maxSweep)
	if err != nil {
		return true, err
	}
	for _, n := range names {
		if !strings.HasSuffix(n, ".json") {
			continue
		}
		e, age, err := readEntry(d, n)
		if err != nil && age >= staleEntry {
			// Empty (its sandbox's first record was never appended: a
			// full /var/log) or damaged, and untouched for that long: a
			// gone takes nothing back from it. Kept, they piled up, one
			// per sandbox, past the sweep's reach (maxSweep).
			removeUndecodable(d, n)
			continue
		}
		if err != nil || e.Netns == "" {
			continue
		}
		if _, err := os.Stat(e.Netns); errors.Is(err, os.ErrNotExist) {
			_ = d.Remove(n)
		}
	}
	return true, nil
}

// due tells whether d's sweep mark is every old or more, and if so sets it
// to now. A mark just created, unreadable or in the future (a clock set
// back) is due: a sweep too many costs only its reads.
func due(d *fileio.Dir, every time.Duration, now time.Time) bool {
	// The mark exists but on a memory's first sweep: one open on the
	// common path, a second only to create it.
	f, err := d.Open(sweptMark, unix.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		if f, err = d.Open(sweptMark, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o640); err == nil {
			f.Close()
		}
		return true
	}
	if err != nil {
		return true
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return true
	}
	if age := now.Sub(fi.ModTime()); age >= 0 && age < every {
		return false
	}
	tv := unix.NsecToTimeval(now.UnixNano())
	_ = unix.Futimes(int(f.Fd()), []unix.Timeval{tv, tv})
	return true
}

// readEntry reads the entry name, and how long ago it was last written
// (0 where that is not known).
func readEntry(d *fileio.Dir, name string) (seenEntry, time.Duration, error) {
	f, err := d.Open(name, unix.O_RDONLY, 0)
	if err != nil {
		return seenEntry{}, 0, err
	}
	defer f.Close()
	var age time.Duration
	if fi, err := f.Stat(); err == nil {
		age = time.Since(fi.ModTime())
	}
	e, err := decodeEntry(f)
	return e, age, err
}

// removeUndecodable removes the entry name unless a look holds it (its
// lock) or it decodes now: removed under a look that holds it, what the
// look saves there would go to a file with no name, and the sandbox's
// memory of its record with it. A look that opened it before the removal
// and locks after sees it unlinked and opens the name again.
func removeUndecodable(d *fileio.Dir, name string) {
	f, err := d.Open(name, unix.O_RDONLY, 0)
	if err != nil {
		return
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return
	}
	if _, err := decodeEntry(f); err == nil {
		return
	}
	_ = d.Remove(name)
}

// doubtGap is how long after a partial look over a pod's gone another
// one writes its unknown (RecordFinding): longer than the looks of one
// event take, shorter than the re-sweep's interval.
const doubtGap = time.Minute

// staleEntry is how long an entry that cannot be decoded is kept.
const staleEntry = time.Hour

// decodeEntry reads the entry f holds, from its start.
func decodeEntry(f *os.File) (seenEntry, error) {
	var e seenEntry
	data, err := fileio.ReadLimited(f, maxEntry)
	if err != nil {
		return e, err
	}
	// The first JSON value: what follows it is the tail of a longer
	// entry that save had not cut yet (see save).
	return e, json.NewDecoder(bytes.NewReader(data)).Decode(&e)
}
