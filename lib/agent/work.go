package agent

import (
	"context"
	"errors"
	"runtime/debug"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

// writeTimeout bounds appending one finding (the lock, a rotation).
const writeTimeout = 10 * time.Second

// memorySweepEvery spaces the per-sandbox memory's sweeps (see
// scan.Store.SweepEvery).
const memorySweepEvery = 10 * time.Minute

// work scans queued jobs, oldest first, until the queue closes.
func (a *Agent) work() {
	defer a.workers.Done()
	for {
		j, long, ok := a.queue.take(a.cfg.Workers)
		if !ok {
			return
		}
		// Before the hold: a test's token is for a scan that runs.
		if !a.live(j) {
			if j.h != nil {
				j.h.Close()
			}
			a.doneWith(j, notScanned)
			continue
		}
		if a.hold != nil {
			<-a.hold
		}
		s := a.scan(j, long)
		a.scanned(s)
		// After Scanned: an observer sees a sandbox's scans end in order.
		end := inTime
		if s.RanOut {
			end = ranOut
		}
		a.doneWith(j, end)
	}
}

// doneWith ends j's turn in the queue.
func (a *Agent) doneWith(j job, end scanEnd) {
	if a.queue.done(j, end) && a.swept.CompareAndSwap(true, false) {
		a.sweptGarbage()
	}
}

// sweptGarbage returns the heap a sweep left to the kernel, once per sweep
// when the queue empties after it: a sweep reads every pod's rules, so the
// heap grows to many times what the idle agent keeps, and the runtime
// gives the free part back only over minutes (its scavenger), the idle
// agent's RSS meanwhile several MB higher (docs/performance.md). One
// collection per Synchronize, the runtime's list at (re)connection.
func (a *Agent) sweptGarbage() { debug.FreeOSMemory() }

// scan runs one job: read the namespace, decide, record through the
// per-sandbox memory. Its deadline is ScanTimeout, StopScanTimeout when
// long; past it the finding is truncated, its counts lower bounds.
func (a *Agent) scan(j job, long bool) Scan {
	// Before the clock: the wait is no cost of the sandbox's (scanEnded).
	a.watchOpened(j.meta)
	start := time.Now()
	s := Scan{Meta: j.meta}
	defer func() { s.Duration = time.Since(start) }()
	// Before the look: an event after it makes its State no proof.
	began := a.known.begin(j.meta.SandboxID)
	h := j.h
	if h == nil {
		var err error
		if h, err = netns.Open(j.meta.Netns); err != nil {
			s.Outcome, s.Err = openFailed(j.meta.Source, err)
			return s
		}
	}
	defer h.Close()
	timeout := a.cfg.ScanTimeout
	if long {
		timeout = a.cfg.StopScanTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	// The agent is a daemon off the start path: its legacy look runs on a
	// thread of its own, abandoned if a neighbour holds the x_tables mutex,
	// instead of re-executing the full build for every scan.
	res := scan.RunFrom(ctx, h, j.meta.Pod.Namespace, a.loaders(j.meta), true)
	cancel()
	// The State the look read (the generation its nftables read began
	// with, the legacy tables it read): a change after it changes the
	// State, so a re-sweep never skips what this scan did not see. A
	// separate read before the look cost each scan a tenth of a sweep's.
	st, stOK := res.State, res.StateOK
	s.RanOut = inspect.NftRanOut(res.Err)
	defer func() {
		if isNodeJob(j.meta) {
			// Before noteScan moves the word's since: the word written
			// with it must carry this look's platform level.
			a.usage.NodeScanned(s)
		}
		a.noteScan(s, st, stOK, res.Complete(), began)
	}()
	s.AllowErr, s.VendorErr = res.AllowErr, res.VendorErr
	if !a.cfg.PlatformOSKept {
		s.Platform = res.Platform
	}
	d := scan.Decide(j.meta, res)
	// The generation the writer was named by: the look's, or the one read
	// after it; the fired writers up to it are this scan's (scanEnded).
	seen := st.Gen
	d.Record.Writer = a.writerOf(j, st, stOK, res.NftWhole(), func() (uint32, bool) {
		gctx, gcancel := context.WithTimeout(context.Background(), timeout/4)
		defer gcancel()
		g, err := inspect.Generation(gctx, h)
		if err == nil {
			seen = g
		}
		return g, err == nil
	})
	d.Record.Exec = j.exec
	s.Stored, s.Err = a.record(j.meta.SandboxID, d)
	rec := &d.Record
	if rec.Partial() && s.Stored != findings.Failed {
		s.Kept = a.kept(j.meta.SandboxID)
	}
	s.Duration = time.Since(start)
	if a.cfg.Watch {
		a.scanEnded(j.meta, res.NftTook, s.Duration, seen, stOK)
	}
	switch {
	case d.Clean() && s.Stored == findings.Same:
		// No usage recorded before, or its gone already: clean.
		s.Outcome = Clean
	case s.Stored == findings.Limited:
		s.Outcome, s.Record = Found, rec
		a.limited(j)
	default:
		s.Outcome, s.Record = Found, rec
		if s.Stored == findings.Same && rec.Partial() {
			a.doubted(j)
		}
	}
	return s
}

// kept is what the record step's memory keeps of the sandbox's usage
// (findings.Seen.Kept), nil when it keeps none.
func (a *Agent) kept(key string) *findings.KeptUsage {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	if k, ok := a.store.Seen.Kept(ctx, key); ok {
		return &k
	}
	return nil
}

// record goes through the record step the hook takes too: one memory for
// both, so a pod seen by both gets one finding per distinct usage.
func (a *Agent) record(key string, d scan.Decision) (findings.Outcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	return a.store.Record(ctx, key, d)
}

// openFailed is the outcome of a netns that could not be opened. Missing
// (or no longer a netns) at a stop event, the pod is going away and nothing
// is left to read: gone, benign. Missing while the runtime says the pod runs
// (sweep, poststart), the agent cannot see it, most likely because the
// netns directory is not mounted into its container: unreachable, an error,
// for an agent that sees no netns must not look like a node without usage.
func openFailed(source string, err error) (Outcome, error) {
	gone := errors.Is(err, netns.ErrNotExist) || errors.Is(err, netns.ErrNotNetns)
	switch {
	case !gone:
		return Failed, err
	case source == SourceStop || source == SourceWatch || source == SourceExec:
		// The watch's sandbox stopped between its commit (or the exec
		// watch's command) and the scan.
		return Gone, nil
	}
	return Unreachable, err
}
