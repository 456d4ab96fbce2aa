package scan

import (
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// maxWarned bounds the sandboxes RecordLog remembers a warning for: one
// entry per pod over its limit within the hour, far fewer than the pods a
// node runs.
const maxWarned = 4096

// RecordLog says what the record step did with each record, for the hook
// and the agent alike. A sandbox over its limit is warned about once per
// limit window (findings.DefaultInterval), then at debug: a churning pod
// must not flood the node's journal with one warning per scan. The drops
// themselves are counted by the agent's scans_total{outcome="limited"}.
// The hook makes one per run (one record), the agent one for its life.
type RecordLog struct {
	mu sync.Mutex
	// warned holds when each sandbox was last warned about.
	warned map[string]time.Time
	// Now is the clock (tests set it); nil is time.Now.
	Now func() time.Time
}

// firstDrop tells whether a drop of key's record is the first of its
// window, and if so remembers it.
func (g *RecordLog) firstDrop(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if g.Now != nil {
		now = g.Now()
	}
	if at, ok := g.warned[key]; ok && now.Sub(at) < findings.DefaultInterval && !now.Before(at) {
		return false
	}
	if g.warned == nil {
		g.warned = map[string]time.Time{}
	}
	if len(g.warned) >= maxWarned {
		for k, at := range g.warned {
			if now.Sub(at) >= findings.DefaultInterval || now.Before(at) {
				delete(g.warned, k)
			}
		}
	}
	// Full of sandboxes warned within the hour: say it, at the cost of
	// repeating it, rather than hide a drop.
	if len(g.warned) < maxWarned {
		g.warned[key] = now
	}
	return true
}

// Log says what the record step did with rec, the record of sandbox key;
// err is the one scan.Store.Record returned with out.
func (g *RecordLog) Log(l *logrus.Entry, key string, rec findings.Record, out findings.Outcome, err error) {
	l = l.WithFields(logrus.Fields{"fingerprint": rec.Fingerprint, "nft_rules": rec.Nft.Rules, "legacy_rules": rec.Legacy.Rules, "truncated": rec.Truncated})
	if rec.Error != "" {
		l = l.WithField("error", rec.Error)
	}
	gone := rec.State == findings.StateGone
	switch out {
	case findings.Failed:
		l.WithError(err).Error("cannot record the finding")
		return
	case findings.Same:
		if gone && err != nil {
			l.WithError(err).Warn("clean look, but the per-sandbox memory cannot be read: a usage recorded before for this sandbox may still stand")
			return
		}
		if gone {
			// A clean look; nothing recorded before to take back.
			l.Debug("no iptables usage")
			return
		}
		l.Debug("same usage already recorded for this sandbox")
		return
	case findings.Limited:
		if g.firstDrop(key) {
			l.Warn("finding dropped: this sandbox wrote its limit of findings this hour; its further drops this hour are logged at debug and counted in iptables_alerter_agent_scans_total{outcome=\"limited\"}")
		} else {
			l.Debug("finding dropped: this sandbox wrote its limit of findings this hour")
		}
		return
	}
	lvl, msg := logrus.InfoLevel, "iptables usage recorded"
	switch {
	case gone:
		msg = "iptables usage gone, recorded"
	case rec.Truncated:
		lvl, msg = logrus.WarnLevel, "iptables usage recorded, incomplete: the counts are a lower bound"
	}
	if err != nil {
		// Recorded anyway; rotation or the per-sandbox memory is broken.
		// One line still: the hook logs one line a container.
		l.WithError(err).Error(msg + "; but the findings directory or the per-sandbox memory needs attention")
		return
	}
	l.Log(lvl, msg)
}
