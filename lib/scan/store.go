package scan

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// Store is the record step: the findings file, written through the
// per-sandbox memory. The hook and the agent share both, so a pod seen by
// both (or by the hook once per container) gets one finding per distinct
// usage.
type Store struct {
	Log  findings.Log
	Seen findings.Seen
	// SweepEvery spaces the memory's sweeps after recorded findings, by
	// this Store and, through the memory's mark (findings.Seen.SweepIfDue),
	// by every process sharing it: the hook is one process per container.
	// 0 sweeps after each one. A sweep reads every entry: after each
	// finding of an agent's registration sweep it would be quadratic in
	// the pods, and an entry of a stopped sandbox only costs a small file
	// until the next.
	SweepEvery time.Duration

	// mu guards swept, when the memory was last swept.
	mu    sync.Mutex
	swept time.Time
}

// Record appends d's record, keyed by its sandbox, unless the memory
// already holds it (findings.Seen.RecordFinding: its fingerprint and state,
// or a partial look that agrees with it) or the sandbox wrote its limit;
// after a recorded
// finding it sweeps the memory of stopped sandboxes when due. The error
// comes with findings.Failed (nothing written) and with findings.Recorded:
// the line is in the file, but rotation (errors.Is findings.ErrNotRotated),
// the memory (findings.ErrNoMemory) or its sweep needs attention.
func (s *Store) Record(ctx context.Context, key string, d Decision) (findings.Outcome, error) {
	out, err := s.Seen.RecordFinding(ctx, key, d.Record, d.Parts, func() error {
		return s.Log.Append(ctx, d.Record)
	})
	// Only after the line is written: a sweep never delays a finding.
	if out != findings.Recorded || !s.sweepDue() {
		return out, err
	}
	if _, serr := s.Seen.SweepIfDue(s.SweepEvery); serr != nil {
		err = errors.Join(err, fmt.Errorf("sweep per-sandbox memory: %w", serr))
	}
	return out, err
}

// sweepDue tells whether the memory was last swept SweepEvery ago or more
// (or never), and if so counts this as the sweep.
func (s *Store) sweepDue() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.swept.IsZero() && time.Since(s.swept) < s.SweepEvery {
		return false
	}
	s.swept = time.Now()
	return true
}
