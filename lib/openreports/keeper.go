package openreports

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/iptables-alerter/iptables-alerter/lib/consumer"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
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

// ErrUnknown is wrapped, with the look's error, by Consume's error while
// no look has told whether Reports (or the node's ClusterReport) may be
// written: the line is kept and tried again, and with it the look.
var ErrUnknown = errors.New("cannot tell yet whether to write OpenReports Reports")

// state is what the looks learnt of Reports or of ClusterReports. It is
// unknown until a look gets an answer and stays as it was when a look
// fails for a passing reason: a finding handled while off never gets its
// Report, so only a definite answer (the API serves no such resource, an
// access review says no, or a refusal for good) turns them off.
type state int32

const (
	unknown state = iota
	on
	off
)

// switched is a state the loop and the line's calls both read and set.
// refused is the API's last refusal for good that turned it off (final),
// said once until another answer: the loop looks again every minute.
// unserved is when a look first found the CRD not served, and no look
// or write since found it served (missing, served), nor, while not on,
// failed to reach the API (final), in Unix nanoseconds, 0 for none.
// Keeper.looking guards refused and the looks' use of unserved; a write
// clears it without waiting for a look.
type switched struct {
	v        atomic.Int32
	refused  string
	unserved atomic.Int64
}

func (s *switched) load() state   { return state(s.v.Load()) }
func (s *switched) store(v state) { s.v.Store(int32(v)) }

// Keeper decides whether Reports are written and keeps them: it looks for
// the Report CRD and asks the API server whether the forwarder may use it
// (at start, after an authorizer's 403 and again while off), and prunes
// results of pods long gone. While off, Write does nothing and the Events
// go on: a missing CRD or RBAC rule must not hold the node's Events.
// While it cannot tell yet (the API out of reach at start), each line
// that needs a Report is held and looks again: handled as off, its
// Report would never be written.
type Keeper struct {
	w                          *Writer
	disc                       versioned.Interface
	kube                       kubernetes.Interface
	log                        logrus.FieldLogger
	Prune                      time.Duration
	LookMissing, LookForbidden time.Duration

	// reports: Write writes (lookReports); node: node records go into
	// ClusterReports (lookNode).
	reports, node switched
	// looking lets one look run at a time: the loop's, and a line's
	// while unknown or after a 403. It guards nodeWarned, which makes
	// each reason ClusterReports are off one log line, and
	// warnedMissing, which makes "CRD missing" one until the CRD is there.
	looking       sync.Mutex
	nodeWarned    string
	warnedMissing bool
	// mu guards denied, the verbs RBAC refuses (empty while allowed),
	// which /metrics and /healthz read, and warnedForbidden.
	mu              sync.Mutex
	denied          []string
	warnedForbidden bool

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
			Help: "Results of pods gone, last seen more than --reports-grace ago, removed from Reports.",
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
		if k.Enabled() {
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
func (k *Keeper) Enabled() bool { return k != nil && k.reports.load() == on }

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
	k.look(ctx, k.lookAll)
	go k.loop(ctx)
}

// look runs what (a look, one at a time) for the loop and Start, and
// says when it could not tell: its findings are held meanwhile (settle).
func (k *Keeper) look(ctx context.Context, what func(context.Context) error) {
	k.looking.Lock()
	defer k.looking.Unlock()
	if err := what(ctx); err != nil {
		k.log.WithError(err).Warn("could not tell whether to write OpenReports Reports; holding the findings that need them, will look again")
	}
}

// settle gives s, looked at first with what while it is unknown: a line
// is not handled as off because a look failed for a passing reason. An
// error (ErrUnknown) means try the line again, which looks again.
func (k *Keeper) settle(ctx context.Context, s *switched, what func(context.Context) error) (state, error) {
	if v := s.load(); v != unknown {
		return v, nil
	}
	k.looking.Lock()
	defer k.looking.Unlock()
	// The loop may have got the answer while this waited.
	if v := s.load(); v != unknown {
		return v, nil
	}
	if err := what(ctx); err != nil {
		return unknown, fmt.Errorf("%w: %w", ErrUnknown, err)
	}
	return s.load(), nil
}

// lookAll looks at Reports and, when they are on, at ClusterReports.
func (k *Keeper) lookAll(ctx context.Context) error {
	if err := k.lookReports(ctx); err != nil || k.reports.load() != on {
		return err
	}
	return k.lookNode(ctx)
}

// lookReports turns Reports on when the API serves them and the
// forwarder may use them, off when it does not or may not, and says each
// change once. An error is a look that failed for a passing reason (see
// final): Reports stay as they were. Callers hold looking.
func (k *Keeper) lookReports(ctx context.Context) error {
	ok, err := Available(ctx, k.disc)
	if err != nil {
		return k.final(&k.reports, err)
	}
	if err := k.missing(ctx, &k.reports, ok, "Reports"); err != nil {
		return err
	}
	if !ok {
		k.reports.refused = ""
		k.reports.store(off)
		if !k.warnedMissing {
			k.warnedMissing = true
			k.log.Warn("the API serves no OpenReports Reports (openreports.io/v1alpha1 CRD missing; kubectl apply -k packaging/crds): posting Events only, looking again every " + k.LookMissing.String())
		}
		return nil
	}
	k.warnedMissing = false
	denied, err := k.access(ctx)
	if err != nil {
		return k.final(&k.reports, err)
	}
	k.reports.refused = ""
	if k.setDenied(denied) {
		return nil
	}
	if k.reports.load() != on {
		k.reports.store(on)
		k.log.Info("writing OpenReports Reports (openreports.io/v1alpha1) beside the Events")
	}
	return nil
}

// final returns a look's error when it may pass (kubeapi.Retryable),
// leaving s as it was; any other is the API's answer for good, which
// turns s off (said; the loop looks again) so that it holds no line.
func (k *Keeper) final(s *switched, err error) error {
	if kubeapi.Retryable(err) {
		// Not on, an API server that could not answer ends the 404s'
		// run (missing): its next 404 may be a restarted server's,
		// asked again whether it is ready.
		if s.load() != on {
			s.unserved.Store(0)
		}
		return err
	}
	s.store(off)
	entry := k.log.WithError(err)
	if s.refused == err.Error() {
		entry.Debug("the API server still refuses to tell whether the forwarder may write OpenReports reports")
		return nil
	}
	s.refused = err.Error()
	entry.Warn("the API server refused to tell whether the forwarder may write OpenReports reports: writing none of these, looking again later")
	return nil
}

// missing is a look's answer whether s's CRD is served (ok), and tells
// whether to take a "not served" for the CRD's absence: once looks
// LookMissing apart or more all found it so, or sooner while s is not on
// (at start, and while off) when the API server says it is ready
// (kubeapi.Ready: its CRDs loaded) or will not say (no role for /readyz);
// a look that could not reach it starts the run again (final).
// Until then the error says look again and keep what waits for it: an
// API server restarting answers 404 for its CRDs' group until it serves
// them, and taken at its word, each Report of the batch in hand would be
// dropped for good, at start the whole backlog of a node booting beside
// its API server (a single-node cluster, the systemd units). Callers
// hold looking.
func (k *Keeper) missing(ctx context.Context, s *switched, ok bool, what string) error {
	if ok {
		s.unserved.Store(0)
		return nil
	}
	now := time.Now()
	s.unserved.CompareAndSwap(0, now.UnixNano())
	since := now.Sub(time.Unix(0, s.unserved.Load()))
	switch {
	case since >= k.LookMissing:
		return nil
	case s.load() == on:
		return fmt.Errorf("the API server has not served OpenReports %s for %s (a restarting one serves its CRDs late): looking again before taking the CRD for deleted", what, since.Round(time.Millisecond))
	}
	if err := kubeapi.Ready(ctx, k.kube); err != nil && !apierrors.IsForbidden(err) && !apierrors.IsUnauthorized(err) {
		return fmt.Errorf("the API server serves no OpenReports %s and is not ready (a starting one serves its CRDs late): looking again before taking the CRD for missing: %w", what, err)
	}
	return nil
}

// lookNode turns ClusterReports for node records on when the API serves
// them and RBAC lets the forwarder use them, off otherwise: then node
// records go to the Node's Events only. An error is as lookReports'.
// Callers hold looking.
func (k *Keeper) lookNode(ctx context.Context) error {
	why := ""
	ok, err := served(ctx, k.disc, "clusterreports")
	if err != nil {
		return k.final(&k.node, err)
	}
	if err := k.missing(ctx, &k.node, ok, "ClusterReports"); err != nil {
		return err
	}
	switch {
	case !ok:
		why = "the API serves no OpenReports ClusterReports (CRD missing; kubectl apply -k packaging/crds)"
	default:
		denied, err := k.review(ctx, "clusterreports", ClusterVerbs)
		if err != nil {
			return k.final(&k.node, err)
		}
		if len(denied) > 0 {
			why = "RBAC refuses the forwarder " + strings.Join(denied, ", ") + " on clusterreports.openreports.io (the openreports.io rule of packaging/rbac)"
		}
	}
	k.node.refused = ""
	if why == "" {
		k.node.store(on)
	} else {
		k.node.store(off)
	}
	switch {
	case why != "" && why != k.nodeWarned:
		k.log.Warn(why + ": the node's own findings go to its Events only, looking again every " + k.Prune.String())
	case why == "" && k.nodeWarned != "":
		k.log.Info("writing the node's own findings into an OpenReports ClusterReport")
	}
	k.nodeWarned = why
	return nil
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
	k.reports.store(off)
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
		case k.reports.load() != on:
			wait = k.LookMissing
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if k.reports.load() != on {
			k.look(ctx, k.lookAll)
			continue
		}
		if k.node.load() != on {
			k.look(ctx, k.lookNode)
		}
		n, skipped, err := k.w.Prune(ctx)
		k.pruned.Add(float64(n))
		if len(skipped) > 0 {
			k.log.WithError(skipped[0]).WithField("skipped", len(skipped)).Warn("some results of gone pods not pruned, refused or failing in their namespace; will try again")
		}
		gone, gerr := k.crdGone(ctx, err)
		switch {
		case err != nil && kubeapi.IsForbiddenToUs(err):
			k.look(ctx, k.lookAccess)
		case gone:
		case err != nil:
			k.log.WithError(cmp.Or(gerr, err)).Warn("pruning reports of gone pods stopped; will try again")
		case n > 0:
			k.log.WithField("results", n).Info("pruned reports of pods gone longer than the grace")
		}
	}
}

// lookAccess asks the access reviews again and switches Reports off when
// RBAC refuses the forwarder a call on them (setDenied). Callers hold
// looking.
func (k *Keeper) lookAccess(ctx context.Context) error {
	denied, err := k.access(ctx)
	if err != nil {
		return err
	}
	k.setDenied(denied)
	return nil
}

// forbidden handles an authorizer's 403 (cause) on a call on what s
// switches (Reports, looked at with lookAccess, or ClusterReports, with
// lookNode). refused is true when the 403 is this object's refusal for
// good: the same call is allowed in every namespace and still refused in
// its own (kubeapi.RefusedHere, as an Event's create), a webhook
// authorizer's rule. Else look asks whether RBAC refuses the forwarder
// these objects, and s is off when it does. Any other 403 is returned,
// so the line is tried again: an API server still starting behind the
// load balancer, its RBAC not yet synced, refuses calls an access review
// allows, and taking that for a refusal would drop the Report for good.
func (k *Keeper) forbidden(ctx context.Context, cause error, s *switched, look func(context.Context) error) (refused bool, err error) {
	switch here, err := kubeapi.RefusedHere(ctx, k.kube, cause); {
	case err != nil:
		return false, fmt.Errorf("%w (and %w)", cause, err)
	case here:
		return true, nil
	}
	k.looking.Lock()
	defer k.looking.Unlock()
	if err := look(ctx); err != nil {
		return false, fmt.Errorf("%w (and %w)", cause, err)
	}
	if s.load() == off {
		return false, nil
	}
	return false, cause
}

// stage puts rec into its Report after its Event's post (see
// Writer.Stage), or does nothing (Off) while Reports are off. An error
// means try the line again (so does not knowing yet whether Reports are
// off); an authorizer's 403 confirmed by an access review switches
// Reports off instead, and one refused in its namespace alone is this
// object's refusal (Rejected), so neither holds the line (forbidden).
func (k *Keeper) stage(ctx context.Context, rec findings.Record, posted owner.Owned) (Result, error) {
	switch s, err := k.settle(ctx, &k.reports, k.lookReports); {
	case err != nil:
		return Result{}, err
	case s == off:
		return Result{Outcome: Off}, nil
	}
	if rec.KnownSubject() == findings.SubjectNode {
		return k.writeNode(ctx, rec)
	}
	if rec.KnownState() == findings.StateGone {
		// The gone record takes the pod's results out at once: what is
		// staged goes first, or a result staged for the pod would come
		// back after; each Report counted and said as Flush's.
		if err := k.Flush(ctx); err != nil {
			return Result{}, err
		}
		// Flush's 403 may have switched Reports off.
		if !k.Enabled() {
			return Result{Outcome: Off}, nil
		}
	}
	res, err := k.w.Stage(ctx, rec, posted)
	if res.Outcome == Removed {
		// A gone record's removal, written at once.
		wentThrough(&k.reports, err)
	}
	if res.Outcome == Rejected {
		switch gone, gerr := k.crdGone(ctx, res.Why); {
		case gerr != nil:
			return Result{}, gerr
		case gone:
			return Result{Outcome: Off, Why: res.Why}, nil
		}
	}
	// A gone record's removal writes at once: a refusal of its namespace
	// is said as Flush's.
	refused := Result{Outcome: Rejected, Namespace: rec.Pod.Namespace, Why: err}
	if k.Refusals.Outlasted(kubeapi.KindReport, rec.Pod.Namespace, err) {
		return refused, nil
	}
	if err != nil && kubeapi.IsForbiddenToUs(err) {
		switch here, ferr := k.forbidden(ctx, err, &k.reports, k.lookAccess); {
		case ferr != nil:
			return Result{}, ferr
		case here:
			return refused, nil
		}
		k.w.Unstage("", "")
		return Result{Outcome: Off, Why: err}, nil
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
	if res.OwnerWhy != nil {
		// Said here, with the finding: Flush says each Report once.
		k.log.WithFields(consumer.LogFields(rec)).WithField("owner_error", res.OwnerWhy.Error()).
			Warn("pod owner refused in its namespace: the pod's controller stands as its owner")
	}
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
// said and dropped, an authorizer's 403 handled as Write's. Only Reports
// switched off drop what is staged: while unknown, stage staged nothing.
func (k *Keeper) Flush(ctx context.Context) error {
	if k.reports.load() == off {
		k.w.Unstage("", "")
		return nil
	}
	for {
		done, failed, err := k.w.Flush(ctx)
		if len(done) > 0 {
			wentThrough(&k.reports, nil)
		}
		for _, res := range done {
			k.finished(k.log.WithFields(nil), res, res.Records)
		}
		switch gone, gerr := k.crdGone(ctx, err); {
		case gerr != nil:
			return gerr
		case gone:
			return nil
		}
		if apierrors.IsNotFound(err) {
			// This Report's namespace is gone: final.
			k.refuse(failed, err)
			continue
		}
		if k.Refusals.Outlasted(kubeapi.KindReport, failed.Namespace, err) {
			// A webhook that cannot be called, for longer than the
			// hold: this Report's refusal, as below.
			k.refuse(failed, err)
			continue
		}
		if err == nil || !kubeapi.IsForbiddenToUs(err) {
			return err
		}
		switch here, ferr := k.forbidden(ctx, err, &k.reports, k.lookAccess); {
		case ferr != nil:
			return ferr
		case here:
			k.refuse(failed, err)
			continue
		}
		k.w.Unstage("", "")
		return nil
	}
}

// crdGone tells whether err, a Report call's 404, came from the Report
// CRD deleted under the running forwarder (unserved), and then drops
// what is staged: those findings were forwarded while the CRD was
// missing, which gets them no Report, as at a start without it, and
// holding them would hold the node's Events until the CRD is back.
func (k *Keeper) crdGone(ctx context.Context, err error) (bool, error) {
	gone, err := k.unserved(ctx, err, &k.reports, k.lookReports)
	if gone {
		k.w.Unstage("", "")
	}
	return gone, err
}

// wentThrough notes a call on what s switches that went through (err nil): its
// CRD is served, so a 404 after starts a count of its own (missing). A
// restart's 404 followed by writes that work would otherwise leave the
// first look's time, and the next restart's first look, a minute or more
// later, would take the CRD for deleted.
func wentThrough(s *switched, err error) {
	if err == nil && s.unserved.Load() != 0 {
		s.unserved.Store(0)
	}
}

// unserved tells whether err, a 404 of a call on what s switches
// (Reports or ClusterReports), came from its CRD deleted under the running
// forwarder: then looks find it no longer served and turn s off (the
// look says so once and the loop looks again), and each finding is not
// rejected with an error line of its own. False for any other error,
// and for a 404 while the CRD is served (a namespace gone). An error
// (err with the look's) while the looks cannot tell yet, or have not
// found it missing for long enough (missing): try again, losing nothing.
func (k *Keeper) unserved(ctx context.Context, err error, s *switched, look func(context.Context) error) (bool, error) {
	if !apierrors.IsNotFound(err) || namespaceGone(err) {
		return false, nil
	}
	k.looking.Lock()
	defer k.looking.Unlock()
	if lerr := look(ctx); lerr != nil {
		return false, fmt.Errorf("%w (and %w)", err, lerr)
	}
	return s.load() == off, nil
}

// namespaceGone tells a 404 about the object's namespace (the
// NamespaceLifecycle admission's), which needs no look at the CRD.
func namespaceGone(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d != nil && d.Kind == "namespaces"
}

// refuse drops the staged Report Flush failed on (this object's refusal):
// said and counted, and the rest written.
func (k *Keeper) refuse(failed Result, why error) {
	if k.w.Progress != nil {
		// Each answer a sign of life: after a webhook's hold, each of
		// its namespace's Reports may take its timeout to be refused.
		k.w.Progress()
	}
	k.w.Unstage(failed.Namespace, failed.Name)
	failed.Outcome, failed.Why = Rejected, why
	k.finished(k.log.WithFields(nil), failed, failed.Records)
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

// writeNode is Write for a node record: Off while ClusterReports are,
// an error (try again) while that is unknown; a 403 is handled as a
// Report's (forbidden), looking again with lookNode.
func (k *Keeper) writeNode(ctx context.Context, rec findings.Record) (Result, error) {
	switch s, err := k.settle(ctx, &k.node, k.lookNode); {
	case err != nil:
		return Result{}, err
	case s == off:
		return Result{Outcome: Off}, nil
	}
	res, err := k.w.writeNode(ctx, rec)
	if res.Outcome == Written {
		wentThrough(&k.node, err)
	}
	if res.Outcome == Rejected {
		switch gone, gerr := k.unserved(ctx, res.Why, &k.node, k.lookNode); {
		case gerr != nil:
			return Result{}, gerr
		case gone:
			return Result{Outcome: Off, Why: res.Why}, nil
		}
	}
	if err != nil && kubeapi.IsForbiddenToUs(err) {
		switch here, ferr := k.forbidden(ctx, err, &k.node, k.lookNode); {
		case ferr != nil:
			return Result{}, ferr
		case here:
			return Result{Outcome: Rejected, Why: err}, nil
		}
		return Result{Outcome: Off, Why: err}, nil
	}
	return res, err
}
