package openreports

import (
	"context"
	"fmt"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/iptables-alerter/iptables-alerter/lib/consumer"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
)

// How often the keeper prunes, and looks again while Reports are off: for
// the CRD one discovery GET a minute; for RBAC one SelfSubjectAccessReview
// per verb every few minutes, since an admin's fix takes that long anyway.
const (
	DefaultPruneEvery    = 10 * time.Minute
	DefaultLookMissing   = time.Minute
	DefaultLookForbidden = 5 * time.Minute
)

// Verbs are the calls the Writer makes on reports, cluster-wide: get,
// list, create, update, delete (packaging/rbac's openreports.io rule).
var Verbs = []string{"get", "list", "create", "update", "delete"}

// Off is the outcome of a record while Reports are switched off (the CRD
// missing, or the forwarder not allowed to use it).
const Off Outcome = "off"

// Keeper decides whether Reports are written and keeps them: it looks for
// the Report CRD and asks the API server whether the forwarder may use it
// (at start, after an authorizer's 403 and again while off), and prunes
// results of pods long gone. While off, Write does nothing and the Events
// go on: a missing CRD or RBAC rule must not hold the node's Events.
type Keeper struct {
	w                          *Writer
	disc                       versioned.Interface
	kube                       kubernetes.Interface
	log                        logrus.FieldLogger
	Prune                      time.Duration
	LookMissing, LookForbidden time.Duration

	enabled atomic.Bool
	// nodeOn: node records go into ClusterReports (lookNode); nodeWarned
	// makes each reason they are off one log line.
	nodeOn     atomic.Bool
	nodeWarned string
	// mu guards denied, the verbs RBAC refuses (empty while allowed), and
	// warnedForbidden: the loop and the line's writes both set them.
	mu              sync.Mutex
	denied          []string
	warnedForbidden bool
	// warnedMissing makes "CRD missing" one log line until the CRD is
	// there (the loop alone looks).
	warnedMissing bool

	byOutcome *prometheus.CounterVec
	pruned    prometheus.Counter

	// Posted gives the live pod and owner rec's Event post read, when
	// there was one (events.Consumer.Posted): they save the lookups.
	Posted func(findings.Record) (owner.Owned, bool)
	// Refusals records a namespace's refusals (shared with the Events).
	Refusals *kubeapi.Refusals
}

// NewKeeper gives a keeper writing through w; disc answers discovery and
// kube the access reviews.
func NewKeeper(w *Writer, disc versioned.Interface, kube kubernetes.Interface, log logrus.FieldLogger) *Keeper {
	return &Keeper{w: w, disc: disc, kube: kube, log: log,
		Prune: DefaultPruneEvery, LookMissing: DefaultLookMissing, LookForbidden: DefaultLookForbidden,
		byOutcome: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "iptables_alerter_forward_reports_total",
			Help: "Findings written to OpenReports Reports, by outcome (written, removed, pod_gone, no_pod, rejected).",
		}, []string{"outcome"}),
		pruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "iptables_alerter_forward_reports_pruned_total",
			Help: "Results of pods gone for longer than --reports-grace removed from Reports.",
		}),
	}
}

// Register adds the keeper's metrics to reg. A nil keeper (--reports=false)
// registers the gauges alone, at 0.
func (k *Keeper) Register(reg prometheus.Registerer) {
	if k != nil {
		reg.MustRegister(k.byOutcome, k.pruned)
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "iptables_alerter_forward_reports_enabled",
		Help: "1 while the forwarder writes OpenReports Reports, 0 while it posts Events only (--reports=false, the Report CRD missing, or RBAC refusing the forwarder reports).",
	}, func() float64 {
		if k != nil && k.enabled.Load() {
			return 1
		}
		return 0
	}), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "iptables_alerter_forward_reports_forbidden",
		Help: "1 while RBAC refuses the forwarder a call it makes on reports.openreports.io (Reports are then off; packaging/rbac has the rule), else 0.",
	}, func() float64 {
		if k != nil && len(k.Denied()) > 0 {
			return 1
		}
		return 0
	}))
}

// Enabled tells whether Write writes.
func (k *Keeper) Enabled() bool { return k != nil && k.enabled.Load() }

// Denied lists the verbs on reports RBAC refuses the forwarder.
func (k *Keeper) Denied() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.denied
}

// Degraded says why Reports are off for RBAC, for /healthz; empty else.
func (k *Keeper) Degraded() string {
	if k == nil {
		return ""
	}
	if d := k.Denied(); len(d) > 0 {
		return "OpenReports Reports off: RBAC refuses the forwarder " + strings.Join(d, ", ") + " on reports.openreports.io"
	}
	return ""
}

// Start looks once, then keeps looking and pruning until ctx ends.
func (k *Keeper) Start(ctx context.Context) {
	k.look(ctx)
	go k.loop(ctx)
}

// look turns Reports on when the API serves them and the forwarder may use
// them, off otherwise, and says each change once.
func (k *Keeper) look(ctx context.Context) {
	ok, err := Available(ctx, k.disc)
	if err != nil {
		k.log.WithError(err).Warn("could not tell whether the API serves OpenReports Reports; will look again")
		return
	}
	if !ok {
		k.enabled.Store(false)
		if !k.warnedMissing {
			k.warnedMissing = true
			k.log.Warn("the API serves no OpenReports Reports (openreports.io/v1alpha1 CRD missing; kubectl apply -k packaging/crds): posting Events only, looking again every " + k.LookMissing.String())
		}
		return
	}
	k.warnedMissing = false
	denied, err := k.access(ctx)
	if err != nil {
		k.log.WithError(err).Warn("could not ask whether the forwarder may write OpenReports Reports; will look again")
		return
	}
	if k.setDenied(denied) {
		return
	}
	if !k.enabled.Load() {
		k.enabled.Store(true)
		k.log.Info("writing OpenReports Reports (openreports.io/v1alpha1) beside the Events")
	}
	k.lookNode(ctx)
}

// lookNode turns ClusterReports for node records on when the API serves
// them and RBAC lets the forwarder use them, off otherwise: then node
// records go to the Node's Events only.
func (k *Keeper) lookNode(ctx context.Context) {
	why := ""
	ok, err := served(ctx, k.disc, "clusterreports")
	switch {
	case err != nil:
		k.log.WithError(err).Warn("could not tell whether the API serves OpenReports ClusterReports; will look again")
		return
	case !ok:
		why = "the API serves no OpenReports ClusterReports (CRD missing; kubectl apply -k packaging/crds)"
	default:
		denied, err := k.review(ctx, "clusterreports", ClusterVerbs)
		if err != nil {
			k.log.WithError(err).Warn("could not ask whether the forwarder may write OpenReports ClusterReports; will look again")
			return
		}
		if len(denied) > 0 {
			why = "RBAC refuses the forwarder " + strings.Join(denied, ", ") + " on clusterreports.openreports.io (the openreports.io rule of packaging/rbac)"
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.nodeOn.Store(why == "")
	switch {
	case why != "" && why != k.nodeWarned:
		k.log.Warn(why + ": the node's own findings go to its Events only, looking again every " + k.Prune.String())
	case why == "" && k.nodeWarned != "":
		k.log.Info("writing the node's own findings into an OpenReports ClusterReport")
	}
	k.nodeWarned = why
}

// setDenied records what RBAC refuses; true when Reports must stay off.
func (k *Keeper) setDenied(denied []string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.denied = denied
	if len(denied) == 0 {
		k.warnedForbidden = false
		return false
	}
	k.enabled.Store(false)
	if !k.warnedForbidden {
		k.warnedForbidden = true
		k.log.WithField("verbs", strings.Join(denied, ",")).Warn("RBAC refuses the forwarder OpenReports Reports (the openreports.io rule of packaging/rbac is missing from its ClusterRole): posting Events only, looking again every " + k.LookForbidden.String())
	}
	return true
}

// access asks, with one SelfSubjectAccessReview per verb, which calls on
// reports cluster-wide the forwarder may not make.
func (k *Keeper) access(ctx context.Context) ([]string, error) {
	return k.review(ctx, "reports", Verbs)
}

// review asks which of verbs on resource (openreports.io, cluster-wide)
// the forwarder may not use.
func (k *Keeper) review(ctx context.Context, resource string, verbs []string) ([]string, error) {
	var denied []string
	for _, verb := range verbs {
		r, err := k.kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: verb, Group: openreportsv1alpha1.SchemeGroupVersion.Group, Resource: resource,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("ask whether the forwarder may %s %s: %w", verb, resource, err)
		}
		if !r.Status.Allowed {
			denied = append(denied, verb)
		}
	}
	return denied, nil
}

func (k *Keeper) loop(ctx context.Context) {
	for {
		wait := k.Prune
		switch {
		case len(k.Denied()) > 0:
			wait = k.LookForbidden
		case !k.enabled.Load():
			wait = k.LookMissing
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if !k.enabled.Load() {
			k.look(ctx)
			continue
		}
		if !k.nodeOn.Load() {
			k.lookNode(ctx)
		}
		n, err := k.w.Prune(ctx)
		k.pruned.Add(float64(n))
		switch {
		case err != nil && kubeapi.IsForbiddenToUs(err):
			k.forbidden(ctx, err)
		case err != nil:
			k.log.WithError(err).Warn("pruning reports of gone pods stopped; will try again")
		case n > 0:
			k.log.WithField("results", n).Info("pruned reports of pods gone longer than the grace")
		}
	}
}

// forbidden handles an authorizer's 403 on a Report call: when an access
// review confirms it, Reports go off; false when they may be used (the
// 403 was about this object or namespace alone) or the review failed
// (err set: try again later).
func (k *Keeper) forbidden(ctx context.Context, cause error) (bool, error) {
	denied, err := k.access(ctx)
	if err != nil {
		return false, err
	}
	if k.setDenied(denied) {
		k.log.WithError(cause).Debug("report call refused by RBAC")
		return true, nil
	}
	return false, nil
}

// stage puts rec into its Report after its Event's post (see
// Writer.Stage), or does nothing (Off) while Reports are off. An error
// means try the line again; an authorizer's 403 confirmed by an access
// review switches Reports off instead, and one the review does not
// confirm is this object's refusal (Rejected), so neither holds the line.
func (k *Keeper) stage(ctx context.Context, rec findings.Record, posted owner.Owned) (Result, error) {
	if !k.Enabled() {
		return Result{Outcome: Off}, nil
	}
	if rec.KnownSubject() == findings.SubjectNode {
		return k.writeNode(ctx, rec)
	}
	res, err := k.w.Stage(ctx, rec, posted)
	if err != nil && kubeapi.IsForbiddenToUs(err) {
		off, rerr := k.forbidden(ctx, err)
		switch {
		case rerr != nil:
			return Result{}, fmt.Errorf("%w (and %w)", err, rerr)
		case off:
			k.w.Unstage("", "")
			return Result{Outcome: Off, Why: err}, nil
		}
		return Result{Outcome: Rejected, Why: err}, nil
	}
	return res, err
}

// Consume stages rec for its Report (a lib/consumer Consumer; Flush
// writes it before the checkpoint is saved): an error means try the line
// again.
func (k *Keeper) Consume(ctx context.Context, rec findings.Record) error {
	var posted owner.Owned
	if k.Posted != nil {
		posted, _ = k.Posted(rec)
	}
	res, err := k.stage(ctx, rec, posted)
	if err != nil || res.Outcome == Off || (res.Outcome == Written && rec.KnownSubject() != findings.SubjectNode) {
		// A staged result is counted and said when Flush wrote it (a
		// node's ClusterReport is written at once).
		return err
	}
	k.finished(k.log.WithFields(consumer.LogFields(rec)), res, 1)
	return nil
}

// Flush writes the Reports staged since the last checkpoint save (a
// lib/consumer Flusher): one write a Report for all its findings. An
// error keeps them staged and is retried; a Report refused for good is
// said and dropped, an authorizer's 403 handled as Write's.
func (k *Keeper) Flush(ctx context.Context) error {
	if !k.Enabled() {
		k.w.Unstage("", "")
		return nil
	}
	for {
		done, failed, err := k.w.Flush(ctx)
		for _, res := range done {
			k.finished(k.log.WithFields(nil), res, res.Records)
		}
		if err == nil || !kubeapi.IsForbiddenToUs(err) {
			return err
		}
		off, rerr := k.forbidden(ctx, err)
		switch {
		case rerr != nil:
			return fmt.Errorf("%w (and %w)", err, rerr)
		case off:
			k.w.Unstage("", "")
			return nil
		}
		// This object's refusal: said, dropped, the rest written.
		k.w.Unstage(failed.Namespace, failed.Name)
		failed.Outcome, failed.Why = Rejected, err
		k.finished(k.log.WithFields(nil), failed, failed.Records)
	}
}

// finished counts and says a final Result of n findings.
func (k *Keeper) finished(entry *logrus.Entry, res Result, n int) {
	k.byOutcome.WithLabelValues(string(res.Outcome)).Add(float64(n))
	entry = entry.WithField("report_outcome", string(res.Outcome))
	switch {
	case res.Name != "" && res.Namespace == "":
		entry = entry.WithField("clusterreport", res.Name)
	case res.Name != "":
		entry = entry.WithField("report", res.Namespace+"/"+res.Name)
	}
	if res.Cut > 0 {
		entry.WithField("results_cut", res.Cut).Warn("report full: results cut, counted in the report")
	}
	switch {
	case res.Outcome == Rejected && kubeapi.Refusal(res.Why) != "" && k.Refusals != nil:
		k.Refusals.Refused(entry, kubeapi.KindReport, res.Namespace, res.Why)
	case res.Outcome == Rejected:
		entry.WithError(res.Why).Error("report rejected by the API server, finding's report skipped")
	case (res.Outcome == Written || res.Outcome == Removed) && k.Refusals != nil:
		k.Refusals.Clear(kubeapi.KindReport, res.Namespace)
	}
}

// writeNode is Write for a node record: Off while ClusterReports are; a
// 403 looks again (lookNode), and one RBAC does not confirm is this
// object's refusal.
func (k *Keeper) writeNode(ctx context.Context, rec findings.Record) (Result, error) {
	if !k.nodeOn.Load() {
		return Result{Outcome: Off}, nil
	}
	res, err := k.w.writeNode(ctx, rec)
	if err != nil && kubeapi.IsForbiddenToUs(err) {
		k.lookNode(ctx)
		if !k.nodeOn.Load() {
			return Result{Outcome: Off, Why: err}, nil
		}
		return Result{Outcome: Rejected, Why: err}, nil
	}
	return res, err
}
