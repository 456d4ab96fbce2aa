package main

import (
	"github.com/sirupsen/logrus"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// logRecord says what the record step did with rec, for the hook and the
// agent alike; err is the one scan.Store.Record returned with out.
func logRecord(l *logrus.Entry, rec findings.Record, out findings.Outcome, err error) {
	l = l.WithFields(logrus.Fields{"fingerprint": rec.Fingerprint, "nft_rules": rec.Nft.Rules, "legacy_rules": rec.Legacy.Rules, "truncated": rec.Truncated})
	if rec.Error != "" {
		l = l.WithField("error", rec.Error)
	}
	switch out {
	case findings.Failed:
		l.WithError(err).Error("cannot record the finding")
		return
	case findings.Same:
		l.Debug("same usage already recorded for this sandbox")
		return
	case findings.Limited:
		l.Warn("finding dropped: this sandbox wrote its limit of findings this hour")
		return
	}
	if err != nil {
		// Recorded anyway; rotation or the per-sandbox memory is broken.
		l.WithError(err).Error("finding recorded, but the findings directory or the per-sandbox memory needs attention")
	}
	if rec.Truncated {
		l.Warn("iptables usage recorded, incomplete: the counts are a lower bound")
	} else {
		l.Info("iptables usage recorded")
	}
}
