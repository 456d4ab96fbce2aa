package agent

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxWarned bounds the warned set (sandbox ids come from the runtime, one
// per pod ever started); past it the set starts over.
const maxWarned = 4096

// Health follows whether the agent is alive and whether it sees what it
// should: the agent feeds it its syncs, connections and scans, and the
// caller serves Alive and Degraded (Agent.Health, for /healthz; the
// gauges are in Agent.Collectors). Make one with NewHealth; its methods
// may be called concurrently.
type Health struct {
	// up is set while connected; lastTry is when the connection was last
	// lost (the loop retries from there), Unix nanoseconds.
	up      atomic.Bool
	lastTry atomic.Int64
	// mu guards the rest.
	mu sync.Mutex
	// sweepQueued, sweepDone and sweepUnreachable tally the last sweep's
	// scans; blind is set when every scan of a finished sweep was
	// unreachable, and cleared by the next scan that reached its netns.
	sweepQueued, sweepDone, sweepUnreachable int
	blind                                    bool
	// execOff is why the exec watch is off, "" while on or not asked for.
	execOff string
	// warned holds the sandboxes whose unreachable netns was reported to
	// warn about: one line per sandbox, not one per scan.
	warned map[string]bool
}

// NewHealth gives the health of an agent starting now: not connected, its
// first attempt now.
func NewHealth() *Health {
	h := &Health{warned: map[string]bool{}}
	h.lastTry.Store(time.Now().UnixNano())
	return h
}

// Synced starts the tally of a sweep of queued scans.
func (h *Health) Synced(queued int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweepQueued, h.sweepDone, h.sweepUnreachable = queued, 0, 0
}

// Connection notes a connection made (up) or lost.
func (h *Health) Connection(up bool) {
	h.up.Store(up)
	if !up {
		h.lastTry.Store(time.Now().UnixNano())
	}
}

// Connected tells whether the agent is connected to the runtime.
func (h *Health) Connected() bool { return h.up.Load() }

// Alive is when the agent's loop last went round: now while connected,
// else when the connection was lost (it retries at least every 30 s).
func (h *Health) Alive() time.Time {
	if h.up.Load() {
		return time.Now()
	}
	return time.Unix(0, h.lastTry.Load())
}

// Scanned counts a scan into the sweep's tally and the degraded state, and
// tells whether it is the first unreachable scan of its sandbox, the one
// to warn about.
func (h *Health) Scanned(s Scan) (warn bool) {
	if isNodeJob(s.Meta) {
		// The node's namespace says nothing of whether the pods' are
		// reachable: its scans would clear blind on every node commit.
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	unreachable := s.Outcome == Unreachable
	if s.Meta.Source == SourceSweep {
		h.sweepDone++
		if unreachable {
			h.sweepUnreachable++
		}
		if h.sweepQueued > 0 && h.sweepDone == h.sweepQueued && h.sweepUnreachable == h.sweepQueued {
			h.blind = true
		}
	}
	// A dropped scan did not try: it says nothing of what the agent sees.
	if !unreachable && s.Outcome != Dropped {
		h.blind = false
	}
	if !unreachable || h.warned[s.Meta.SandboxID] {
		return false
	}
	if len(h.warned) >= maxWarned {
		clear(h.warned)
	}
	h.warned[s.Meta.SandboxID] = true
	return true
}

// Degraded is why the agent works but cannot see what it should, or "":
// every pod netns of the last sweep was unreachable, and no scan has
// reached one since; or the exec watch is off (ExecOff).
func (h *Health) Degraded() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var why []string
	if h.blind {
		why = append(why, fmt.Sprintf("every pod netns of the last sweep (%d) was unreachable: is the host's /run/netns mounted at /var/run/netns?", h.sweepQueued))
	}
	if h.execOff != "" {
		why = append(why, "exec watch off: "+h.execOff)
	}
	return strings.Join(why, "; ")
}

// blindNow tells whether every pod netns of the last sweep was unreachable
// (the degraded gauge: the exec watch has a gauge of its own).
func (h *Health) blindNow() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.blind
}

// ExecOff notes why the exec watch is off: seeing no command is not seeing
// none run.
func (h *Health) ExecOff(why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.execOff = why
}
