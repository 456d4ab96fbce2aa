package textfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/fileio"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/follow"
)

// stateVersion changes when State changes incompatibly; an unknown version
// is an error rather than a silently empty state.
const stateVersion = 1

// maxState bounds the state file read back: far above what the pods of one
// node take.
const maxState = 64 << 20

// Pod is what the latest finding said about one pod.
type Pod struct {
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	UID         string `json:"uid"`
	Netns       string `json:"netns"`
	NftRules    int    `json:"nft_rules"`
	LegacyRules int    `json:"legacy_rules"`
	Flagged     bool   `json:"flagged"`
	// State is the latest finding's: present is exported with its rules,
	// unknown as pod_usage_unknown, gone not at all (kept so an older line
	// read after it cannot bring the usage back). "" in state files from
	// before the field: Flagged tells present from unknown.
	State findings.State `json:"state"`
	Time  time.Time      `json:"time"`
	// Impact and Worst are the finding's RHEL 10 levels; Vendors its
	// vendor label values (findings.VendorLabels), bounded.
	Impact  findings.Impact `json:"impact"`
	Worst   string          `json:"worst"`
	Vendors []string        `json:"vendors"`
	// Truncated: the latest look at the rules stopped early (the x_tables
	// lock kept busy, the deadline, a rule hiding the later ones), so the
	// counts are a lower bound: pod_usage_incomplete. Also set when a
	// milder partial look (truncated or unknown) left the earlier counts.
	Truncated bool `json:"truncated,omitempty"`
}

// State is everything that must survive a restart.
type State struct {
	Version int `json:"version"`
	// Pods is keyed by pod UID: the one id that does not repeat when a pod
	// is recreated under the same name.
	Pods        map[string]Pod    `json:"pods"`
	Findings    uint64            `json:"findings"`
	Malformed   uint64            `json:"malformed"`
	LastFinding time.Time         `json:"last_finding"`
	Checkpoint  follow.Checkpoint `json:"checkpoint"`
}

func newState() State { return State{Version: stateVersion, Pods: map[string]Pod{}} }

func loadState(path string) (State, error) {
	data, err := fileio.ReadFile(path, maxState)
	if errors.Is(err, os.ErrNotExist) {
		return newState(), nil
	}
	if errors.Is(err, fileio.ErrTooLarge) {
		return State{}, fmt.Errorf("load state: %w: %w", follow.ErrDamaged, err)
	}
	if err != nil {
		return State{}, fmt.Errorf("load state: %w", err)
	}
	s := newState()
	if err := json.Unmarshal(data, &s); err != nil {
		return State{}, fmt.Errorf("load state %q: %w: %w", path, follow.ErrDamaged, err)
	}
	if s.Version != stateVersion {
		return State{}, fmt.Errorf("load state %q: version %d, want %d", path, s.Version, stateVersion)
	}
	if s.Pods == nil {
		s.Pods = map[string]Pod{}
	}
	for uid, p := range s.Pods {
		if p.State == "" {
			// Before states, a pod without usage was kept for its
			// inspection error: unknown.
			p.State = findings.StateUnknown
			if p.Flagged {
				p.State = findings.StatePresent
			}
			s.Pods[uid] = p
		}
	}
	return s, nil
}

func saveState(path string, s State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("save state %q: %w", path, err)
	}
	if err := fileio.WriteFile(path, append(b, '\n'), 0o640); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return nil
}

// readiness orders the pod's level as the node label does: its worst
// level's readiness, unknown for a pod of state unknown.
func (p Pod) readiness() string {
	if p.State == findings.StateUnknown {
		return findings.ReadinessUnknown
	}
	return findings.Readiness(p.Worst)
}

// podOf condenses a record. Flagged means the finding's state is present;
// a record of state unknown or gone is kept (the pod is known) but not
// flagged.
func podOf(r findings.Record) Pod {
	st := r.KnownState()
	return Pod{
		State:       st,
		Namespace:   r.Pod.Namespace,
		Name:        r.Pod.Name,
		UID:         r.Pod.UID,
		Netns:       r.Netns,
		NftRules:    r.Nft.Rules,
		LegacyRules: r.Legacy.Rules,
		Flagged:     st == findings.StatePresent,
		Time:        r.Time,
		Impact:      r.Levels(),
		Worst:       r.WorstLevel(),
		Vendors:     findings.VendorLabels(r.Vendors),
		Truncated:   r.Truncated,
	}
}
