//go:build !hookonly

package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/reports"
)

// reportsSweep is how often the forwarder prunes its Reports of pods gone
// for longer than the grace; reportsLook how often, while the CRD is
// missing or discovery failed, it looks again (one discovery GET).
const (
	reportsSweep = 10 * time.Minute
	reportsLook  = time.Minute
)

// reporter writes the forwarder's OpenReports Reports beside the Events;
// with the CRD missing it stays off and the forwarder posts Events only.
type reporter struct {
	w       *reports.Writer
	client  versioned.Interface
	log     *logrus.Logger
	enabled atomic.Bool
	// warned makes "CRD missing" one log line, not one per sweep.
	warned bool
	// byOutcome counts writes; pruned counts results Prune removed.
	byOutcome *prometheus.CounterVec
	pruned    prometheus.Counter
}

func newReporter(rc *rest.Config, kube kubernetes.Interface, node string, grace time.Duration, log *logrus.Logger) (*reporter, error) {
	client, err := versioned.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	w := reports.New(kube, client, node)
	w.Grace = grace
	return &reporter{w: w, client: client, log: log,
		byOutcome: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "iptables_alerter_forward_reports_total",
			Help: "Findings written to OpenReports Reports, by outcome (written, removed, pod_gone, no_pod, rejected).",
		}, []string{"outcome"}),
		pruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "iptables_alerter_forward_reports_pruned_total",
			Help: "Results of pods gone for longer than --reports-grace removed from Reports.",
		}),
	}, nil
}

// register adds the metrics, among them whether Reports are written.
// A nil reporter (--reports=false) registers the gauge alone, at 0.
func (r *reporter) register(reg *prometheus.Registry) {
	if r != nil {
		reg.MustRegister(r.byOutcome, r.pruned)
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "iptables_alerter_forward_reports_enabled",
		Help: "1 while the forwarder writes OpenReports Reports, 0 while it posts Events only (--reports=false or the Report CRD is missing).",
	}, func() float64 {
		if r != nil && r.enabled.Load() {
			return 1
		}
		return 0
	}))
}

// check turns Reports on when the API serves them, and says once that it
// does not.
func (r *reporter) check(ctx context.Context) {
	ok, err := reports.Available(ctx, r.client)
	switch {
	case err != nil:
		r.log.WithError(err).Warn("could not tell whether the API serves OpenReports Reports; will look again")
	case ok && !r.enabled.Load():
		r.enabled.Store(true)
		r.log.Info("writing OpenReports Reports (openreports.io/v1alpha1) beside the Events")
	case !ok && !r.warned:
		r.warned = true
		r.log.Warn("the API serves no OpenReports Reports (openreports.io/v1alpha1 CRD missing; kubectl apply -k packaging/crds): posting Events only, looking again every " + reportsLook.String())
	}
}

// sweep checks for the CRD while it is missing and prunes while it is
// there, until ctx ends.
func (r *reporter) sweep(ctx context.Context) {
	for {
		wait := reportsSweep
		if !r.enabled.Load() {
			wait = reportsLook
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if !r.enabled.Load() {
			r.check(ctx)
			continue
		}
		n, err := r.w.Prune(ctx)
		r.pruned.Add(float64(n))
		if err != nil {
			r.log.WithError(err).Warn("pruning reports of gone pods stopped; will try again")
		} else if n > 0 {
			r.log.WithField("results", n).Info("pruned reports of pods gone longer than the grace")
		}
	}
}

// write puts rec into its Report, from the pod and owner its Event's post
// read; an error means try the line again.
func (r *reporter) write(ctx context.Context, rec findings.Record, posted events.Result, fields logrus.Fields) error {
	if r == nil || !r.enabled.Load() {
		return nil
	}
	res, err := r.w.WriteAfter(ctx, rec, posted)
	if err != nil {
		return err
	}
	r.byOutcome.WithLabelValues(string(res.Outcome)).Inc()
	entry := r.log.WithFields(fields).WithField("report_outcome", string(res.Outcome))
	if res.Name != "" {
		entry = entry.WithField("report", res.Namespace+"/"+res.Name)
	}
	if res.Cut > 0 {
		entry.WithField("results_cut", res.Cut).Warn("report full: results cut, counted in the report")
	}
	if res.Outcome == events.Rejected {
		entry.WithError(res.Why).Error("report rejected by the API server, finding's report skipped")
	}
	return nil
}
