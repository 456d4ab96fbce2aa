package agent

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
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
	// Worst is the finding's worst level, "" when not classified.
	Worst string
	// Time is the finding's: of two sandboxes of one pod name (a pod
	// recreated before the old sandbox's stop was seen), the newer wins.
	Time time.Time
}

// Usage follows which running pods have iptables usage, from the agent's
// scans: a pod enters with a finding of state present, and leaves when a
// complete scan finds nothing (clean), when its sandbox stops
// (StopPodSandbox, or its netns gone at a stop), or when the runtime's
// list at a sweep no longer holds it. A finding of state unknown changes
// nothing: what the pod uses is not known (a pod not followed yet takes
// the record step's memory of it, Scan.Kept). At most max pods are followed;
// a pod past that is left out and counted. Its methods may be called
// concurrently.
type Usage struct {
	mu   sync.Mutex
	max  int
	pods map[string]PodUsage
	// left counts findings of pods left out for the bound; out holds the
	// running pods left out (Readiness), up to max of them, outFull once
	// more were: their usage is not known.
	left    uint64
	out     map[string]bool
	outFull bool
	// execs counts each running pod's iptables commands (the exec
	// watch), within the same bound; nil until the first.
	execs map[string]*podExecs
	// ended are the last maxEnded sandboxes the runtime said stopped
	// (Ended), oldest first in endedOrder: a scan or command of one that
	// ends after its stop (it ran when the stop came: CRI-O removes the
	// netns before StopPodSandbox, whose scan then ends at once) must not
	// bring its pod back. A sandbox id is never used again. A netns found
	// gone (Gone, a re-sweep's vanished) only drops the pod: a later scan
	// that finds it brings it back, as before.
	ended      map[string]bool
	endedOrder []string
	// platform is the worst level of the platform's rules in the node's
	// own namespace (Scan.Platform) by its latest complete look, kept
	// worse over a partial one; "" for none. node is the readiness the
	// rest of that namespace's usage gives (its findings'), kept so too:
	// the word stands for findings the forwarder may never read (rotated
	// away before it did), the node's among them.
	platform, node string
}

// maxEnded bounds the stopped sandboxes Usage remembers: more than stop
// while one scan runs.
const maxEnded = 1024

// podExecs counts one pod's iptables commands that ended.
type podExecs struct {
	namespace, name, owner string
	attempts, failures     uint64
	// missed: ran, ended before the watch could read it.
	missed uint64
	// lastFailure is when the latest failed command ended: the alert
	// rules tell a new failure from an old one by it where Prometheus has
	// no history of the counter (restarted, or a scrape failed).
	lastFailure time.Time
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
	case s.Meta.Stage == stageStopPod:
		// The pod stops, whatever its last look found.
		u.end(id)
	case s.Outcome == Gone:
		u.forget(id)
	case u.ended[id]:
		// A look from before its stop.
	case s.Outcome == Clean:
		delete(u.pods, id)
		delete(u.out, id)
	case s.Outcome == Found && s.Record.KnownState() == findings.StatePresent:
		if !u.admit(id) {
			return
		}
		r := s.Record
		p := podUsage(s)
		p.Impact, p.Vendors, p.Worst = r.Levels(), findings.VendorLabels(r.Vendors), r.WorstLevel()
		// A look that could not see everything (truncated: a pod keeping
		// the x_tables lock busy, issue 18) takes no level back: its
		// series, IPTablesBreakingOnRHEL10 and the agent's word would
		// clear while the rules seen before may still be there. The
		// next complete look decides (nodemark keeps the label so too).
		// A pod this agent has not followed yet (it restarted) has its
		// level from the record step's memory.
		old, ok := u.pods[id]
		if !ok && s.Kept != nil {
			old, ok = keptUsage(p, *s.Kept), true
		}
		if ok && r.MilderThan(old.Worst) {
			p.Impact, p.Vendors, p.Worst = old.Impact, old.Vendors, old.Worst
		}
		u.pods[id] = p
	case s.Outcome == Found && s.Record.KnownState() == findings.StateUnknown && s.Kept != nil:
		// Unknown now: the last usage seen stays, below; the memory's
		// for a pod this agent has not followed yet.
		if _, ok := u.pods[id]; !ok && u.admit(id) {
			u.pods[id] = keptUsage(podUsage(s), *s.Kept)
		}
	case s.Outcome == Found && s.Record.KnownState() == findings.StateGone:
		delete(u.pods, id)
		delete(u.out, id)
	}
	// Unknown, failed, unreachable, dropped: what the pod uses now is not
	// known; the last usage seen stays.
}

// NodeScanned takes the level of the platform's rules (Scan.Platform), and
// the readiness of the rest of the usage, from a scan of the node's own
// namespace: a complete look's replaces the last, a partial one's (a
// lower bound) only when worse; a look that read nothing changes nothing.
func (u *Usage) NodeScanned(s Scan) {
	u.mu.Lock()
	defer u.mu.Unlock()
	own := ""
	if s.Outcome == Found && s.Record.KnownState() == findings.StatePresent && s.Record.HasUsage() {
		own = findings.Readiness(s.Record.WorstLevel())
	}
	switch {
	case s.Outcome != Clean && s.Outcome != Found:
	case s.Outcome == Found && s.Record.Partial():
		u.platform = findings.WorseLevel(u.platform, s.Platform)
		if u.node == "" && s.Kept != nil && s.Kept.Worst != "" {
			// Not followed yet (the agent restarted): the record step's
			// memory, as for a pod.
			u.node = findings.Readiness(s.Kept.Worst)
		}
		if u.node == "" || own != "" && findings.WorseReadiness(u.node, own) == own {
			u.node = own
		}
	default:
		u.platform, u.node = s.Platform, own
	}
}

// admit tells whether the sandbox's pod is followed, or may be: a pod
// new past the bound is left out and counted. Called with mu held.
func (u *Usage) admit(id string) bool {
	if _, ok := u.pods[id]; !ok && len(u.pods) >= u.max {
		u.left++
		u.leaveOut(id)
		return false
	}
	delete(u.out, id)
	return true
}

// podUsage is the scanned pod, its usage not filled in.
func podUsage(s Scan) PodUsage {
	r := s.Record
	return PodUsage{SandboxID: s.Meta.SandboxID, Namespace: r.Pod.Namespace, Name: r.Pod.Name, Owner: s.Meta.Owner, Time: r.Time}
}

// keptUsage is p with the usage the record step's memory kept.
func keptUsage(p PodUsage, k findings.KeptUsage) PodUsage {
	p.Impact, p.Vendors, p.Worst = k.Impact, k.Vendors, k.Worst
	return p
}

// Stopped drops the sandbox's pod: its usage and its command counts.
func (u *Usage) Stopped(id string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.forget(id)
}

// Ended drops the sandbox's pod for good: the runtime said it stopped
// (its removal).
func (u *Usage) Ended(id string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.end(id)
}

// forget drops the sandbox's pod; called with mu held.
func (u *Usage) forget(id string) {
	delete(u.pods, id)
	delete(u.execs, id)
	delete(u.out, id)
}

// end drops the sandbox's pod for good (Ended); called with mu held.
func (u *Usage) end(id string) {
	u.forget(id)
	if u.ended[id] {
		return
	}
	if u.ended == nil {
		u.ended = map[string]bool{}
	}
	if len(u.endedOrder) >= maxEnded {
		delete(u.ended, u.endedOrder[0])
		u.endedOrder = u.endedOrder[1:]
	}
	u.ended[id] = true
	u.endedOrder = append(u.endedOrder, id)
}

// leaveOut notes a running pod whose usage was left out; called with mu
// held.
func (u *Usage) leaveOut(id string) {
	if len(u.out) >= u.max {
		u.outFull = true
		return
	}
	if u.out == nil {
		u.out = map[string]bool{}
	}
	u.out[id] = true
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
	for id := range u.execs {
		if !running[id] {
			delete(u.execs, id)
		}
	}
	for id := range u.out {
		if !running[id] {
			delete(u.out, id)
		}
	}
}

// Exec counts one iptables command of the sandbox's pod that ended at
// ended, a failed write or not. Past max pods counted, the pod is left
// out (Left).
func (u *Usage) Exec(m scan.Meta, failed bool, ended time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	p := u.podExecs(m)
	if p == nil {
		return
	}
	p.attempts++
	if failed {
		p.failures++
		if ended.After(p.lastFailure) {
			p.lastFailure = ended
		}
	}
}

// ExecMissed counts a command the pod ran that the exec watch could not
// record (it ended before it could be read).
func (u *Usage) ExecMissed(m scan.Meta) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if p := u.podExecs(m); p != nil {
		p.missed++
	}
}

// podExecs is the sandbox's counts, nil past the bound (counted left
// out). Called with mu held.
func (u *Usage) podExecs(m scan.Meta) *podExecs {
	p := u.execs[m.SandboxID]
	if p != nil || u.ended[m.SandboxID] {
		return p
	}
	if len(u.execs) >= u.max {
		u.left++
		return nil
	}
	if u.execs == nil {
		u.execs = map[string]*podExecs{}
	}
	p = &podExecs{namespace: m.Pod.Namespace, name: m.Pod.Name, owner: m.Owner}
	u.execs[m.SandboxID] = p
	return p
}

// execCounts are the pods' command counts, summed per namespace and name
// (two sandboxes of one pod name give one series), ordered by both.
func (u *Usage) execCounts() []podExecs {
	u.mu.Lock()
	byName := map[[2]string]*podExecs{}
	for _, p := range u.execs {
		k := [2]string{p.namespace, p.name}
		if q := byName[k]; q != nil {
			q.attempts, q.failures, q.missed = q.attempts+p.attempts, q.failures+p.failures, q.missed+p.missed
			if p.lastFailure.After(q.lastFailure) {
				q.lastFailure = p.lastFailure
			}
			continue
		}
		c := *p
		byName[k] = &c
	}
	u.mu.Unlock()
	out := make([]podExecs, 0, len(byName))
	for _, p := range byName {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b podExecs) int {
		return cmp.Or(strings.Compare(a.namespace, b.namespace), strings.Compare(a.name, b.name))
	})
	return out
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

// Readiness is the node's RHEL 10 readiness by the pods followed, each by
// its latest scan's finding, and by the node's own namespace: the
// platform's rules there (Scan.Platform, which no finding holds) and the
// rest of its usage (its findings', which may be lost): ready with none,
// unknown for usage not classified, and unknown while a running pod's
// usage was left out (max),
// until a later scan of it finds none or it stops (for good past max such
// pods). A pod left out of the command counts alone (exec) changes
// nothing: its rules are not.
func (u *Usage) Readiness() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.out) > 0 || u.outFull {
		return findings.ReadinessUnknown
	}
	r := findings.ReadinessReady
	for _, p := range u.pods {
		r = findings.WorseReadiness(r, findings.Readiness(p.Worst))
	}
	if u.platform != "" {
		r = findings.WorseReadiness(r, findings.Readiness(u.platform))
	}
	if u.node != "" {
		r = findings.WorseReadiness(r, u.node)
	}
	return r
}

// Left counts the findings with usage, and the commands, of pods left out
// because max pods were followed (or counted) already.
func (u *Usage) Left() uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.left
}
