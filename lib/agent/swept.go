package agent

import (
	"context"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// sweptCheck is how often the agent asks itself whether it has looked at
// every pod (Looked): soon after a sweep ends, the word is written.
const sweptCheck = 5 * time.Second

// SweptObserver hears when the agent's word that it looked at every pod
// (findings.Swept) could first not be written, and when it was again (err
// nil): meanwhile the node label says unknown. (Optional, as
// ResweepObserver.)
type SweptObserver interface {
	SweptWritten(path string, err error)
}

// withSwept runs loop while keeping findings.Swept beside the findings
// file: written as soon as the look is complete, again every
// findings.SweptRefresh while it stays so. A look lost writes nothing: the
// word lapses on its own (findings.SweptValid), so an agent killed at
// once is no different from one that lost the runtime.
func (a *Agent) withSwept(ctx context.Context, loop func() error) error {
	if a.cfg.Log.Path == "" {
		return loop()
	}
	return beside(ctx, loop, func(ctx context.Context) { a.keepSwept(ctx, findings.SweptPath(a.cfg.Log.Path)) })
}

func (a *Agent) keepSwept(ctx context.Context, path string) {
	t := time.NewTicker(sweptCheck)
	defer t.Stop()
	var written, last time.Time
	var failed, revoked bool
	for {
		pods, since, ok := a.Looked()
		now := time.Now()
		switch {
		case !ok:
			a.metrics.looked.Set(0)
			// A pod out of reach takes the word back at once (a new
			// pod not scanned yet, a lost connection only let it
			// lapse: those pass).
			if blind, _ := a.known.blind(); blind && !revoked && !last.IsZero() {
				if err := findings.WriteSwept(path, findings.Swept{Node: a.cfg.Node, Since: written, Until: now}); err == nil {
					revoked, last, written = true, time.Time{}, time.Time{}
				}
			}
		case !since.Equal(written) || now.Sub(last) >= findings.SweptRefresh:
			// At once when a later scan moved since: the word must not
			// vouch for a pod whose finding the reader has not read.
			err := findings.WriteSwept(path, findings.Swept{Node: a.cfg.Node, Since: since, Until: now.Add(findings.SweptValid), Pods: pods,
				Readiness: a.usage.Readiness()})
			if err != nil {
				a.metrics.errors.WithLabelValues("swept").Inc()
			} else {
				written, last, revoked = since, now, false
			}
			// Said once the file holds it (a reader may look at once).
			a.metrics.looked.Set(one(err == nil))
			// Told of the first failure and of the recovery, not of
			// each try in between (every sweptCheck).
			if o, is := a.cfg.Observer.(SweptObserver); is && (err != nil) != failed {
				o.SweptWritten(path, err)
			}
			failed = err != nil
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
