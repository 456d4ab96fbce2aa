//go:build !hookonly

package main

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
	"github.com/iptables-alerter/iptables-alerter/lib/reports"
)

// refusedKinds name what a namespace refused, in logs, /healthz and the
// refused metric's kind label.
const (
	kindEvent  = "event"
	kindReport = "report"
)

// newRefusedCounter counts refusals of one object by its namespace.
func newRefusedCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "iptables_alerter_forward_refused_total",
		Help: "Events and Reports the API server refused for good in their namespace, by kind (event, report) and reason (quota: a ResourceQuota; admission: a webhook or policy; invalid: 422; forbidden: a 403 RBAC does not confirm; other); the finding's line moved on.",
	}, []string{"kind", "reason"})
}

// refused records a refusal of one object: a metric, /healthz, and one log
// line per kind, namespace and reason (debug after), so one namespace's
// quota or policy neither holds the node's line nor floods the journal.
func (h *forwarder) refused(kind, namespace string, why error, entry *logrus.Entry) {
	reason := kubeapi.Refusal(why)
	h.stats.refused.WithLabelValues(kind, reason).Inc()
	entry = entry.WithError(why).WithFields(logrus.Fields{"kind": kind, "namespace": namespace, "reason": reason})
	if h.refusals.Note(kind, namespace, reason, why) {
		entry.Error(kind + " refused by the API server in this namespace, finding's " + kind + " skipped (said once per namespace and reason; /healthz and iptables_alerter_forward_refused_total count the rest)")
		return
	}
	entry.Debug(kind + " refused by the API server, finding's " + kind + " skipped")
}

// writeReport puts rec into its Report, from the pod and owner its Event's
// post read; an error means try the line again.
func (h *forwarder) writeReport(ctx context.Context, rec findings.Record, posted events.Result, fields logrus.Fields) error {
	if h.reports == nil {
		return nil
	}
	res, err := h.reports.Write(ctx, rec, posted)
	if err != nil || res.Outcome == reports.Off {
		return err
	}
	entry := h.log.WithFields(fields).WithField("report_outcome", string(res.Outcome))
	if res.Name != "" {
		entry = entry.WithField("report", res.Namespace+"/"+res.Name)
	}
	if res.Cut > 0 {
		entry.WithField("results_cut", res.Cut).Warn("report full: results cut, counted in the report")
	}
	switch {
	case res.Outcome == events.Rejected && kubeapi.Refusal(res.Why) != "":
		h.refused(kindReport, rec.Pod.Namespace, res.Why, entry)
	case res.Outcome == events.Rejected:
		entry.WithError(res.Why).Error("report rejected by the API server, finding's report skipped")
	case res.Outcome == reports.Written || res.Outcome == reports.Removed:
		h.refusals.Clear(kindReport, rec.Pod.Namespace)
	}
	return nil
}
