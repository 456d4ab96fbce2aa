package textfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/iptables-alerter/iptables-alerter/internal/fileio"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/follow"
)

// Defaults for the subcommand's flags.
const (
	DefaultTextfileDir = "/var/lib/node_exporter/textfile_collector"
	DefaultStateDir    = "/var/lib/iptables-alerter/textfile"
	DefaultForgetAfter = 24 * time.Hour
	// FileName ends in .prom because node-exporter reads only those; the
	// temp file fileio.WriteFile renames from does not, so it is never read
	// half-written.
	FileName  = "iptables_alerter.prom"
	stateFile = "state.json"
	// oldCheckpointFile is where versions before the state carried the
	// only checkpoint kept a second copy; the state's was always saved
	// first, so it is the one that matches the counters.
	oldCheckpointFile = "checkpoint.json"
)

// Collector holds the state and writes the textfile. Its methods may be
// called from several goroutines.
type Collector struct {
	// ForgetAfter drops a pod whose latest finding is older than this
	// (0: never), only when the netns check cannot decide: a pod whose
	// netns is still there runs, however old its finding.
	ForgetAfter time.Duration
	// Now is the clock (tests set it).
	Now func() time.Time
	// Netns says whether a pod's pinned netns still exists.
	Netns func(path string) NetnsState
	// Malformed, if set, is told about each line counted as malformed.
	Malformed func(err error)

	stateDir, promPath string

	mu    sync.Mutex
	state State
	// saved are the counters as last saved (or loaded): the textfile
	// publishes them, never the lines handled since, which a crash before
	// the next save forgets; published, those made the counters go down
	// at the restart (a reset to Prometheus, counted again whole).
	saved struct{ findings, malformed uint64 }
	// damaged is the error of a state file that could not be read back; the
	// collector started empty and Load hands it to the follower once, which
	// then replays the findings file from its oldest line.
	damaged error
}

// Open loads the state from stateDir (creating the directory) and returns a
// collector writing into textfileDir.
func Open(stateDir, textfileDir string) (*Collector, error) {
	if err := os.MkdirAll(stateDir, 0o750); err != nil {
		return nil, fmt.Errorf("create state directory %q: %w", stateDir, err)
	}
	if fi, err := os.Stat(textfileDir); err != nil {
		return nil, fmt.Errorf("check textfile directory %q: %w", textfileDir, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("check textfile directory %q: not a directory", textfileDir)
	}
	s, err := loadState(filepath.Join(stateDir, stateFile))
	var damaged error
	if errors.Is(err, follow.ErrDamaged) {
		s, damaged, err = newState(), err, nil
	}
	if err != nil {
		return nil, err
	}
	if err := os.Remove(filepath.Join(stateDir, oldCheckpointFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove old checkpoint: %w", err)
	}
	return &Collector{
		damaged:     damaged,
		ForgetAfter: DefaultForgetAfter,
		Now:         time.Now,
		Netns:       netnsState,
		stateDir:    stateDir,
		promPath:    filepath.Join(textfileDir, FileName),
		state:       s,
		saved:       struct{ findings, malformed uint64 }{s.Findings, s.Malformed},
	}, nil
}

// NetnsState is what the check of a pod's pinned netns found.
type NetnsState int

const (
	// NetnsUnknown: no path, or its directory not visible (a container
	// that does not mount /run/netns), or it could not be read.
	NetnsUnknown NetnsState = iota
	// NetnsHere: the pin is there; the pod runs.
	NetnsHere
	// NetnsGone: the directory is visible and the pin is not in it.
	NetnsGone
)

// netnsState checks the pin. Gone only when the directory holding it is
// visible: a container that does not mount /run/netns must not conclude
// that every pod is gone.
func netnsState(path string) NetnsState {
	if path == "" {
		return NetnsUnknown
	}
	if _, err := os.Stat(filepath.Dir(path)); err != nil {
		return NetnsUnknown
	}
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return NetnsHere
	case errors.Is(err, os.ErrNotExist):
		return NetnsGone
	}
	return NetnsUnknown
}

// Follower returns a follower of the findings file wired to c: c is its
// checkpoint store, so the checkpoint is saved in one write with the state
// it belongs to, and malformed and oversized lines are counted.
func (c *Collector) Follower(findingsPath string) *follow.Follower {
	f := follow.New(findingsPath, c)
	f.Skipped = c.Skipped
	return f
}

// Load is follow.Store's: the checkpoint saved with the state. A damaged
// state is reported once, with the zero checkpoint: the follower replays.
func (c *Collector) Load() (follow.Checkpoint, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.damaged; err != nil {
		c.damaged = nil
		return follow.Checkpoint{}, err
	}
	return c.state.Checkpoint, nil
}

// Handle is a follow.Handler. It never fails: a line it cannot use is
// counted as malformed and skipped, never retried.
func (c *Collector) Handle(ctx context.Context, line []byte) error {
	r, err := findings.Parse(line)
	if err != nil {
		c.CountMalformed(err)
		return nil
	}
	return c.Consume(ctx, r)
}

// Consume takes one finding into the state (a lib/consumer Consumer). It
// never fails: a finding without a pod is counted as malformed.
func (c *Collector) Consume(_ context.Context, r findings.Record) error {
	// A node's record (the agent's node mode) has no pod: it is counted,
	// its usage is not a pod's series (the node's Event carries it).
	node := r.KnownSubject() == findings.SubjectNode
	if r.Pod.UID == "" && !node {
		c.CountMalformed(fmt.Errorf("decode finding: no pod uid"))
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state.Findings++
	if r.Time.After(c.state.LastFinding) {
		c.state.LastFinding = r.Time
	}
	if node {
		return nil
	}
	// Replayed or out-of-order lines must not replace a newer finding;
	// one from the future (written before the node's clock was stepped
	// back) holds back no line written since, one of the present.
	now := c.Now()
	if old, ok := c.state.Pods[r.Pod.UID]; !ok || !r.Time.Before(old.Time) || old.Time.After(now) && !r.Time.After(now) {
		p := podOf(r)
		// A look that could not see everything (Partial: unknown, or
		// truncated, as a pod keeping the x_tables lock busy leaves
		// it) takes no level back either: the rules it did not see may
		// still be there, and the legacy series would drop to 0 under
		// the "what will break" alert. The worse level stays until a
		// complete look, as nodemark's label and the agent's usage keep
		// it; a partial look that is itself worse takes effect.
		milder := ok && r.Partial() && findings.WorseReadiness(p.readiness(), old.readiness()) != p.readiness()
		if ok && old.State == findings.StateUnknown && (r.KnownState() == findings.StatePresent && r.CommandOnly() || milder) {
			// A command's own finding does not answer what the unknown
			// look could not see: zero rule series would say "no
			// legacy rules" of a pod that hid them (keeping the
			// x_tables lock busy). It stays unknown until a look at
			// the rules, complete or worse, says otherwise.
			p = old
			p.Time = r.Time
		} else if ok && old.State == findings.StatePresent && (r.CommandOnly() || milder) {
			// A command's own finding (the exec watch's failed write or
			// read) says nothing of the rules: the pod's counts stay,
			// its worst level the worse of both. After a milder partial
			// look they stay too, the pod present (not unknown), with
			// pod_usage_incomplete: the latest look was partial.
			p.NftRules, p.LegacyRules, p.Impact, p.Vendors = old.NftRules, old.LegacyRules, old.Impact, old.Vendors
			p.State, p.Flagged, p.Truncated = old.State, old.Flagged, old.Truncated || r.Partial()
			if milder || findings.ImpactRank(old.Worst) < findings.ImpactRank(p.Worst) {
				p.Worst = old.Worst
			}
		}
		c.state.Pods[r.Pod.UID] = p
	}
	return nil
}

// CountMalformed counts a line that is no usable finding.
func (c *Collector) CountMalformed(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.malformed(err)
}

// Skipped counts a line the follower did not hand over.
func (c *Collector) Skipped(s follow.Skip) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.malformed(fmt.Errorf("skip %q offset %d (%d bytes): %s", s.File, s.Offset, s.Size, s.Reason))
}

func (c *Collector) malformed(err error) {
	c.state.Malformed++
	if c.Malformed != nil {
		c.Malformed(err)
	}
}

// Save is follow.Store's: it saves the state with cp in one atomic write,
// then rewrites the textfile.
func (c *Collector) Save(cp follow.Checkpoint) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prune()
	c.state.Checkpoint = cp
	if err := saveState(filepath.Join(c.stateDir, stateFile), c.state); err != nil {
		return err
	}
	c.saved.findings, c.saved.malformed = c.state.Findings, c.state.Malformed
	return c.write()
}

// Refresh drops pods that are gone and rewrites the textfile. It does not
// save the state: handled lines past the last commit are in memory only
// and must not be saved with an older checkpoint.
func (c *Collector) Refresh() (dropped int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	dropped = c.prune()
	return dropped, c.write()
}

// Pods returns the pods currently exported (present or unknown), ordered by namespace and name.
func (c *Collector) Pods() []Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exported()
}

// Counts returns the findings and malformed-line counters.
func (c *Collector) Counts() (findingsSeen, malformed uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state.Findings, c.state.Malformed
}

func (c *Collector) prune() int {
	now := c.Now()
	n := 0
	for uid, p := range c.state.Pods {
		// The age only where the netns cannot tell: a running pod whose
		// usage stayed the same has no newer finding.
		st := c.Netns(p.Netns)
		if st == NetnsGone || (st == NetnsUnknown && c.ForgetAfter > 0 && now.Sub(p.Time) > c.ForgetAfter) {
			delete(c.state.Pods, uid)
			n++
		}
	}
	return n
}

// exported picks one pod per namespace/name, the newest, so the textfile
// never holds two series with the same labels (node-exporter would refuse
// the whole file). A pod whose usage is gone has no series.
func (c *Collector) exported() []Pod {
	// The newest per name first, gone ones with the rest: a pod made again
	// under its name whose newest finding says gone must not leave the
	// older pod's usage exported in its place.
	all := make([]Pod, 0, len(c.state.Pods))
	for _, p := range c.state.Pods {
		all = append(all, p)
	}
	newest := findings.NewestPerPod(all, func(p Pod) findings.PodKey {
		return findings.PodKey{Namespace: p.Namespace, Name: p.Name, Time: p.Time, ID: p.UID}
	})
	pods := newest[:0]
	for _, p := range newest {
		if p.State != findings.StateGone {
			pods = append(pods, p)
		}
	}
	return pods
}

func (c *Collector) write() error {
	reg := prometheus.NewPedanticRegistry()
	st := c.state
	st.Findings, st.Malformed = c.saved.findings, c.saved.malformed
	if err := reg.Register(snapshot{pods: c.exported(), state: st}); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		return fmt.Errorf("gather metrics: %w", err)
	}
	var buf bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			return fmt.Errorf("format metrics: %w", err)
		}
	}
	// node-exporter runs as nobody: the file is world-readable, as
	// client_golang's WriteToTextfile leaves it.
	if err := fileio.WriteFile(c.promPath, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write textfile: %w", err)
	}
	return nil
}
