package findings

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/fileio"
)

// Swept is the agent's word, kept in a file beside the findings
// (SweptPath), that it has looked at every pod the runtime runs: a clean
// pod leaves no line, so without it a node nobody looked at (no agent, an
// agent that cannot reach the runtime, a sweep still running, pods whose
// netns it cannot open) reads like a node of clean pods. The node label
// (lib/nodemark) says ready only under a valid one.
type Swept struct {
	Node string `json:"node"`
	// Since is when the agent's look became complete: connected, its
	// sweep of the runtime's list done, and every pod's last scan
	// complete with its finding, if any, written to the findings file.
	// It changes only when the look was lost and regained, so a reader
	// that has read the findings up to a moment after Since has read
	// every finding the look rests on.
	Since time.Time `json:"since"`
	// Until is how long the word holds: the agent writes the file again
	// every SweptRefresh while the look stays complete, each time Until
	// SweptValid ahead. An agent that stopped, lost the runtime or has a
	// pod it cannot finish looking at writes no more, and the word lapses.
	Until time.Time `json:"until"`
	// Pods counts the pods looked at (their own netns).
	Pods int `json:"pods"`
	// Readiness is the node's RHEL 10 readiness as the agent's latest
	// scans found its pods (one of Readinesses; "" from an older agent):
	// the node label takes the worse of it and of the findings it read,
	// so a line the reader lost (rotated away unread, torn) does not make
	// a breaking pod's node ready, which no finding would ever correct
	// (a pod's usage is recorded once).
	Readiness string `json:"readiness,omitempty"`
}

// How often the agent writes Swept, and how long each write holds: three
// refreshes, so a busy minute (a scan still running at the check) does not
// make the label flap.
const (
	SweptRefresh = time.Minute
	SweptValid   = 3 * SweptRefresh
)

// maxSwept bounds the file read: a few hundred bytes.
const maxSwept = 4 << 10

// SweptPath is the mark's file for the findings at path: beside them, so
// the forwarder, which reads the findings, reads it too (and no name a
// generation of the findings could take).
func SweptPath(path string) string { return path + ".swept" }

// WriteSwept writes s to path (replaced whole, links not followed).
func WriteSwept(path string, s Swept) error {
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return fileio.WriteFile(path, data, 0o640)
}

// ErrNotSwept says why a Swept read does not vouch for node at now.
var ErrNotSwept = errors.New("the agent has not said it looked at every pod")

// ReadSwept reads the mark at path and checks that it vouches for node at
// now: its node, Until ahead (and not further than SweptValid, a clock
// set back aside). Every failure wraps ErrNotSwept and says why.
func ReadSwept(path, node string, now time.Time) (Swept, error) {
	data, err := fileio.ReadFile(path, maxSwept)
	if errors.Is(err, os.ErrNotExist) {
		return Swept{}, fmt.Errorf("%w: no %s (is the agent running on this node, with the same --findings?)", ErrNotSwept, path)
	}
	if err != nil {
		return Swept{}, fmt.Errorf("%w: %w", ErrNotSwept, err)
	}
	var s Swept
	if err := json.Unmarshal(data, &s); err != nil {
		return Swept{}, fmt.Errorf("%w: %s: %w", ErrNotSwept, path, err)
	}
	switch {
	case s.Node != node:
		return s, fmt.Errorf("%w: %s names node %q, not %q", ErrNotSwept, path, s.Node, node)
	case !now.Before(s.Until):
		return s, fmt.Errorf("%w: its word lapsed at %s (the agent stopped, lost the runtime, or has a pod it cannot finish looking at)", ErrNotSwept, s.Until.UTC().Format(time.RFC3339))
	case s.Until.Sub(now) > SweptValid || s.Since.After(now):
		return s, fmt.Errorf("%w: %s is dated ahead of this clock (since %s, until %s)", ErrNotSwept, path,
			s.Since.UTC().Format(time.RFC3339), s.Until.UTC().Format(time.RFC3339))
	}
	return s, nil
}
