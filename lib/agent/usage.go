package agent

import (
	"sync"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// DefaultMaxUsage bounds the pods Usage follows: one metrics series per
// impact level and vendor each, far above the pods with usage one node
// runs, and small enough for any Prometheus.
const DefaultMaxUsage = 1000

// PodUsage is the iptables usage of one running pod as the agent's latest
// scan that saw it found it.
type PodUsage struct {
	SandboxID string
	Namespace string
	Name      string
	// Owner is the workload the pod's labels name (see ownerOf), or "".
	Owner string
	// Impact counts the rules per RHEL 10 level; Vendors holds the vendor
	// label values (findings.VendorLabels), bounded.
	Impact  findings.Impact
	Vendors []string
	// Time is the finding's: of two sandboxes of one pod name (a pod
	// recreated before the old sandbox's stop was seen), the newer wins.
	Time time.Time
}

// Usage follows which running pods have iptables usage, from the agent's
// scans: a pod enters with a finding of state present, and leaves when a
// complete scan finds nothing (clean), when its sandbox stops
// (StopPodSandbox, or its netns gone at a stop), or when the runtime's
// list at a sweep no longer holds it. A finding of state unknown changes
// nothing: what the pod uses is not known. At most max pods are followed;
// a pod past that is left out and counted. Its methods may be called
// concurrently.
type Usage struct {
	mu   sync.Mutex
	max  int
	pods map[string]PodUsage
	// left counts findings of pods left out for the bound.
	left uint64
}

// NewUsage follows at most max pods (DefaultMaxUsage for 0 or less).
func NewUsage(max int) *Usage {
	if max <= 0 {
		max = DefaultMaxUsage
	}
	return &Usage{max: max, pods: map[string]PodUsage{}}
}

// Scanned updates the sandbox's usage from one scan.
func (u *Usage) Scanned(s Scan) {
	id := s.Meta.SandboxID
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case s.Meta.Stage == stageStopPod || s.Outcome == Gone:
		// The pod stops, whatever its last look found.
		delete(u.pods, id)
	case s.Outcome == Clean:
		delete(u.pods, id)
	case s.Outcome == Found && s.Record.KnownState() == findings.StatePresent:
		if _, ok := u.pods[id]; !ok && len(u.pods) >= u.max {
			u.left++
			return
		}
		r := s.Record
		u.pods[id] = PodUsage{SandboxID: id, Namespace: r.Pod.Namespace, Name: r.Pod.Name, Owner: s.Meta.Owner,
			Impact: r.Levels(), Vendors: findings.VendorLabels(r.Vendors), Time: r.Time}
	case s.Outcome == Found && s.Record.KnownState() == findings.StateGone:
		delete(u.pods, id)
	}
	// Unknown, failed, unreachable, dropped: what the pod uses now is not
	// known; the last usage seen stays.
}

// Listed drops every pod whose sandbox is not in running: the runtime's
// list at a sweep, the pods that still run.
func (u *Usage) Listed(running map[string]bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for id := range u.pods {
		if !running[id] {
			delete(u.pods, id)
		}
	}
}

// Pods returns the pods with usage, one per namespace and name (the
// newest finding's, so series labels never repeat), ordered by both.
func (u *Usage) Pods() []PodUsage {
	u.mu.Lock()
	pods := make([]PodUsage, 0, len(u.pods))
	for _, p := range u.pods {
		pods = append(pods, p)
	}
	u.mu.Unlock()
	return findings.NewestPerPod(pods, func(p PodUsage) findings.PodKey {
		return findings.PodKey{Namespace: p.Namespace, Name: p.Name, Time: p.Time, ID: p.SandboxID}
	})
}

// Left counts the findings of pods left out because max pods were
// followed already.
func (u *Usage) Left() uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.left
}
