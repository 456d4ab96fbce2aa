package events

import (
	"context"
	"github.com/iptables-alerter/iptables-alerter/lib/consumer"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
)

// Consumer posts each finding's Events (a lib/consumer Consumer) and
// counts what became of them, for the logs and /metrics.
type Consumer struct {
	poster   *Poster
	log      logrus.FieldLogger
	refusals *kubeapi.Refusals

	created, duplicate, podGone, noPod, rejected atomic.Int64
	// byImpact counts created pod Events by worst impact and vendor label,
	// both from bounded sets (findings.ImpactLevels, VendorLabels).
	byImpact *prometheus.CounterVec
	// forbidden says why RBAC refuses the Events, until one gets through.
	forbidden atomic.Pointer[string]

	// last is the latest record's Result: the Reports consumer writes
	// from the pod and owner its post read (Posted).
	mu   sync.Mutex
	last struct {
		rec findings.Record
		res Result
	}
}

// NewConsumer posts through p; refusals is shared with the Reports, and
// with p.
func NewConsumer(p *Poster, log logrus.FieldLogger, refusals *kubeapi.Refusals) *Consumer {
	if p != nil {
		p.refusals = refusals
	}
	return &Consumer{poster: p, log: log, refusals: refusals, byImpact: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "iptables_alerter_forward_events_by_impact_total",
		Help: "Pod Events created, by the finding's worst RHEL 10 impact (legacy, xt, native; unclassified findings left out) and recognised vendor (unknown: none; other: an admin-added vendor; a finding naming two vendors counts under both).",
	}, []string{"impact", "vendor"})}
}

// Posted is the live pod and owner rec's post read (owner.Owned; its Pod
// nil when none), when rec is the latest record posted: the Reports
// consumer writes from them without reading them again.
func (c *Consumer) Posted(rec findings.Record) (owner.Owned, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !sameRecord(c.last.rec, rec) {
		return owner.Owned{}, false
	}
	return c.last.res.Owned, true
}

func sameRecord(a, b findings.Record) bool {
	return a.Pod == b.Pod && a.Fingerprint == b.Fingerprint && a.SandboxID == b.SandboxID && a.ContainerID == b.ContainerID && a.Time.Equal(b.Time) && a.State == b.State
}

// Degraded says, for /healthz, why the Events are held; empty else.
func (c *Consumer) Degraded() string {
	if why := c.forbidden.Load(); why != nil {
		return *why
	}
	return ""
}

// Fields are the totals for the stop log.
func (c *Consumer) Fields() logrus.Fields {
	return logrus.Fields{
		"created_total":   c.created.Load(),
		"duplicate_total": c.duplicate.Load(),
		"pod_gone_total":  c.podGone.Load(),
		"no_pod_total":    c.noPod.Load(),
		"rejected_total":  c.rejected.Load(),
	}
}

// Register adds the counters to reg; malformed and retries are the
// runner's, under this consumer's metric names.
func (c *Consumer) Register(reg prometheus.Registerer, malformed, retries func() int64) {
	for outcome, n := range map[string]func() int64{
		string(Created): c.created.Load, string(Duplicate): c.duplicate.Load, string(PodGone): c.podGone.Load,
		string(NoPod): c.noPod.Load, string(Rejected): c.rejected.Load, "malformed": malformed,
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "iptables_alerter_forward_findings_total",
			Help:        "Findings the forwarder finished with, by outcome (rejected: set aside for good).",
			ConstLabels: prometheus.Labels{"outcome": outcome},
		}, func() float64 { return float64(n()) }))
	}
	reg.MustRegister(c.byImpact, prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "iptables_alerter_forward_retries_total",
		Help: "Attempts that failed and will be retried (API server down, throttling, 401, RBAC's 403).",
	}, func() float64 { return float64(retries()) }))
}

// countImpact counts a created Event under its impact and vendors.
func (c *Consumer) countImpact(rec findings.Record) {
	w := rec.WorstLevel()
	if findings.ImpactRank(w) == len(findings.ImpactLevels) {
		return
	}
	for _, v := range findings.VendorLabels(rec.Vendors) {
		c.byImpact.WithLabelValues(w, v).Inc()
	}
}

// Consume posts rec's Events. It returns an error only for what may
// succeed later (the line comes again); a refusal by RBAC is kept so
// (an admin's fix delivers every Event) and said on /healthz.
func (c *Consumer) Consume(ctx context.Context, rec findings.Record) error {
	res, err := c.poster.Post(ctx, rec)
	if err != nil {
		if kubeapi.IsForbiddenToUs(err) {
			why := "Events held: RBAC refuses the forwarder (" + err.Error() + ")"
			c.forbidden.Store(&why)
		}
		return err
	}
	c.forbidden.Store(nil)
	c.mu.Lock()
	c.last.rec, c.last.res = rec, res
	c.mu.Unlock()
	fields := consumer.LogFields(rec)
	fields["outcome"] = string(res.Outcome)
	if res.Name != "" {
		fields["event"] = res.Namespace + "/" + res.Name
	}
	if res.Owner.Kind != "" {
		fields["owner"] = res.Owner.String()
	}
	if res.Node != "" {
		fields["node_event"] = string(res.Node)
	}
	if res.NodeWhy != nil {
		fields["node_event_error"] = res.NodeWhy.Error()
	}
	if res.OwnerWhy != nil {
		fields["owner_error"] = res.OwnerWhy.Error()
	}
	entry := c.log.WithFields(fields)
	if res.Why != nil {
		entry = entry.WithError(res.Why)
	}
	switch res.Outcome {
	case Created:
		c.created.Add(1)
		c.countImpact(rec)
		entry.WithField("live_pod_uid", string(res.PodUID)).WithField("mirror", res.Mirror).Info("event created")
	case Duplicate:
		c.duplicate.Add(1)
		entry.Info("event already delivered")
	case PodGone:
		c.podGone.Add(1)
		entry.Warn("pod gone, finding skipped")
	case NoPod:
		c.noPod.Add(1)
		entry.Info("finding without a pod or with its usage gone, skipped")
	case Rejected:
		// Set aside for good: retrying would hold every later finding.
		entry = entry.WithField("rejected_total", c.rejected.Add(1))
		if kubeapi.Refusal(res.Why) != "" {
			c.refusals.Refused(entry, kubeapi.KindEvent, res.Namespace, res.Why)
			break
		}
		entry.Error("event rejected by the API server, finding skipped")
	}
	if res.Node == Rejected && kubeapi.Refusal(res.NodeWhy) != "" {
		// The node's summary Event refused in its namespace: said and
		// counted as the pod's would be.
		c.refusals.Refused(c.log.WithFields(consumer.LogFields(rec)), kubeapi.KindEvent, NodeEventNamespace, res.NodeWhy)
	}
	return nil
}
