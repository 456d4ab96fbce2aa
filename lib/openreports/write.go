package openreports

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

const (
	// MaxResults bounds the results of one Report, the cut note included:
	// each result is at most about 5 KiB, so a Report stays under 600 KiB.
	MaxResults = 100
	// DefaultGrace is how long the result of a pod that is gone stays: a
	// day, so a CronJob's or a rolled-out Deployment's results outlive
	// the pods and the Events' one-hour TTL until someone looked.
	DefaultGrace = 24 * time.Hour
	// conflictTries bounds the read-modify-write retries of one write.
	conflictTries = 8
)

// Outcome says what became of a record's result; the values are the
// metric label values (and, where they mean the same, lib/events').
type Outcome string

const (
	// Written: the pod's result is in its Report.
	Written Outcome = "written"
	// Removed: the pod's result was taken out (state gone), or there was
	// none.
	Removed Outcome = "removed"
	// PodGone: no pod with that name, or it is another pod now.
	PodGone Outcome = "pod_gone"
	// NoPod: the record names no pod, or holds no usage.
	NoPod Outcome = "no_pod"
	// Rejected: the API refused the Report for good (kubeapi.Retryable).
	Rejected Outcome = "rejected"
)

// Result reports one record's write.
type Result struct {
	Outcome Outcome
	// Namespace and Name of the Report, empty when none was written.
	Namespace, Name string
	Owner           owner.Owner
	// Cut counts results this write left out of the Report.
	Cut int
	// Records counts the findings one Flush wrote into the Report.
	Records int
	// Why explains PodGone, NoPod and Rejected.
	Why error
	// OwnerWhy says why Owner is only the pod's controller (a ReplicaSet,
	// a Job): the authorizer refused the owner's GET in this namespace
	// alone (kubeapi.Owned).
	OwnerWhy error
}

// Writer writes one node's Reports.
type Writer struct {
	kube kubernetes.Interface
	// Live finds the live pod a finding names (kubeapi.LivePod by
	// default; the forwarder sets a kubeapi.NodePods' LivePod).
	Live    func(context.Context, findings.Pod) (*corev1.Pod, error)
	reports versioned.Interface
	// Owners names each pod's owner (owner.New of kube by default; the
	// forwarder sets the Events' Poster's).
	Owners *owner.Resolver
	node   string
	// Grace is how long a gone pod's result stays (Prune).
	Grace time.Duration
	// Progress, when set, is called after each Report Flush wrote, and
	// each the Keeper dropped as refused: a batch's Reports (up to one
	// per line) written or refused at the API's pace (a slow webhook's)
	// may take minutes, which is progress to a liveness probe (the
	// forwarder sets its runner's Touch).
	Progress func()
	now      func() time.Time
	// mu serialises this writer's read-modify-writes: Write and Prune run
	// in different goroutines. It guards known and staged.
	mu sync.Mutex
	// known holds the Reports as this writer last wrote or listed them:
	// their resourceVersion makes a write by anyone else since a 409.
	// knownBytes is what they hold (footprint), bounded by maxKnownBytes.
	known      map[string]knownReport
	knownBytes int
	// staged holds the changes Stage kept back for Flush, by Report
	// (namespace/name), in order.
	staged map[string]*staged
	order  []string
	// names are the names (namespace/name) of this node's Reports, from
	// one LIST and kept by this writer's own creates and deletes, while
	// listed is true: a Report not among them is created without a GET
	// first (AlreadyExists reads it).
	names  map[string]bool
	listed bool
	// listTried is when listNames last failed: it tries again a
	// listRetry later, not at each finding (an API server down or a
	// LIST refused would cost every finding a failing request).
	listTried time.Time
	// filed names, by pod (namespace/podUID, the UID as PropPodUID holds
	// it), the Report its result was last staged or written in or listed
	// in (by listNames), up to maxFiled pods: a pod whose owner changed
	// (a bare pod adopted by a ReplicaSet or orphaned, its Deployment's
	// lookup refused then allowed) is filed in another workload's
	// Report, and its result in the old one must go, or the pod stays
	// listed twice while it lives.
	filed map[string]string
}

// New gives a Writer for node.
func New(kube kubernetes.Interface, reports versioned.Interface, node string) *Writer {
	return &Writer{kube: kube, reports: reports, Owners: owner.New(kube), node: node, Grace: DefaultGrace, now: time.Now,
		known: map[string]knownReport{}, staged: map[string]*staged{}, filed: map[string]string{},
		Live: func(ctx context.Context, want findings.Pod) (*corev1.Pod, error) {
			return kubeapi.LivePod(ctx, kube, want)
		}}
}

// Available reports whether the API server serves Reports; false with a
// nil error when the CRD is not installed.
func Available(ctx context.Context, reports versioned.Interface) (bool, error) {
	return served(ctx, reports, "reports")
}

// ClusterAvailable reports whether the API server serves ClusterReports;
// false with a nil error when their CRD is not installed.
func ClusterAvailable(ctx context.Context, reports versioned.Interface) (bool, error) {
	return served(ctx, reports, "clusterreports")
}

// served reports whether the API server serves resource of the
// openreports.io group version.
func served(ctx context.Context, reports versioned.Interface, resource string) (bool, error) {
	gv := openreportsv1alpha1.SchemeGroupVersion.String()
	list, err := reports.Discovery().ServerResourcesForGroupVersion(gv)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discover %q: %w", gv, err)
	}
	for _, r := range list.APIResources {
		if r.Name == resource {
			return true, nil
		}
	}
	return false, nil
}

// Name is the Report of a workload on a node.
func Name(o owner.Owner, node string) string {
	return kubeapi.ObjectName("iptables-"+o.Kind+"-"+o.Name+"-"+node, "report", o.Kind, o.Name, node)
}

// NodeLabelValue is the NodeLabel value of node: the name, or a hash
// when the name is no valid label value (over 63 bytes).
func NodeLabelValue(node string) string {
	if len(validation.IsValidLabelValue(node)) == 0 {
		return node
	}
	h := sha256.Sum256([]byte(node))
	return "sha256-" + hex.EncodeToString(h[:])[:32]
}

// Selector selects the Reports of node; empty node selects all of ours.
func Selector(node string) string {
	set := labels.Set{ManagedByLabel: ManagedBy}
	if node != "" {
		set[NodeLabel] = NodeLabelValue(node)
	}
	return set.String()
}

// Write puts rec into its Report, by its state (see the package doc).
func (w *Writer) Write(ctx context.Context, rec findings.Record) (Result, error) {
	return w.WriteAfter(ctx, rec, owner.Owned{})
}

// WriteAfter is Write after rec's Event was posted: the live pod and its
// owner that the post read (posted.Pod non-nil) are used as they are,
// saving a pod lookup and the owner's for each finding.
func (w *Writer) WriteAfter(ctx context.Context, rec findings.Record, posted owner.Owned) (Result, error) {
	res, change, err := w.route(ctx, rec, posted)
	if change == nil {
		return res, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	pod, from := w.moved(ctx, res.Namespace, res.Name, rec.Pod.UID)
	err = w.update(ctx, res.Namespace, res.Name, func(r *openreportsv1alpha1.Report) { res.Cut = change(r) })
	if res, err = w.finish(res, err); err != nil || res.Outcome != Written {
		return res, err
	}
	if from != "" {
		// After the new result is in, as Flush does; the pod stays filed
		// where it was until then, so a retry takes it out again.
		if err := w.update(ctx, res.Namespace, from, without(pod)); err != nil {
			return w.finish(Result{Namespace: res.Namespace, Name: from}, err)
		}
	}
	w.file(res.Namespace, pod, res.Name)
	return res, nil
}

// route is what WriteAfter and Stage share: a node's record goes to its
// ClusterReport and a gone one takes the pod's results out, both at once
// (a final Result and no change); any other gets plan's change.
func (w *Writer) route(ctx context.Context, rec findings.Record, posted owner.Owned) (Result, func(*openreportsv1alpha1.Report) int, error) {
	switch {
	case rec.KnownSubject() == findings.SubjectNode:
		res, err := w.writeNode(ctx, rec)
		return res, nil, err
	case rec.KnownState() == findings.StateGone:
		res, err := w.gone(ctx, rec)
		return res, nil, err
	}
	return w.plan(ctx, rec, posted)
}

// Stage is WriteAfter kept back for Flush: the findings of one Report
// between two checkpoint saves cost one write. A present record's
// Outcome is Written once staged (Flush says how the write went); the
// others are final as WriteAfter's. A gone record is written at once:
// Flush before staging it (Keeper.stage does, and accounts for each
// Report Flush wrote), or a result staged for its pod comes back after.
func (w *Writer) Stage(ctx context.Context, rec findings.Record, posted owner.Owned) (Result, error) {
	res, change, err := w.route(ctx, rec, posted)
	if change == nil {
		return res, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stage(res.Namespace, res.Name, change)
	s.records++
	pod, from := w.moved(ctx, res.Namespace, res.Name, rec.Pod.UID)
	if from != "" {
		s.moves = append(s.moves, move{pod: pod, from: from})
	}
	// Filed at once: the pod's next finding in this batch, under another
	// owner again, takes it out of this Report.
	w.file(res.Namespace, pod, res.Name)
	res.Outcome = Written
	return res, nil
}

// stage keeps change back for the Report's Flush, after those staged.
func (w *Writer) stage(namespace, name string, change func(*openreportsv1alpha1.Report) int) *staged {
	k := namespace + "/" + name
	s := w.staged[k]
	if s == nil {
		s = &staged{namespace: namespace, name: name}
		w.staged[k] = s
		w.order = append(w.order, k)
	}
	s.changes = append(s.changes, change)
	return s
}

// staged is one Report's changes kept back for Flush.
type staged struct {
	namespace, name string
	changes         []func(*openreportsv1alpha1.Report) int
	// records counts the findings among changes (a move's removal is
	// none).
	records int
	// moves are the pods whose results this Report's write takes from
	// other Reports.
	moves []move
}

// move is a pod's result to take out of Report from once it is written in
// another (Writer.filed).
type move struct{ pod, from string }

// Flush writes the staged changes, one write a Report, in the order
// first staged. done has the Reports finished with (Written, Records the
// findings in it; or Rejected for good); on an error that may pass
// (kubeapi.Retryable, a conflict that outlasted its tries) or a 404 (the
// CRD may be gone) it stops, failed names that Report, and it and the
// rest stay staged.
func (w *Writer) Flush(ctx context.Context) (done []Result, failed Result, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.order) > 0 {
		s := w.staged[w.order[0]]
		res := Result{Namespace: s.namespace, Name: s.name, Records: s.records}
		err := w.update(ctx, s.namespace, s.name, func(r *openreportsv1alpha1.Report) {
			res.Cut = 0
			for _, c := range s.changes {
				res.Cut += c(r)
			}
		})
		if res, err = w.finish(res, err); err != nil || res.Outcome == Rejected && apierrors.IsNotFound(res.Why) {
			// finish keeps no Result for an error that may pass; the
			// caller still needs to know which Report failed (to drop
			// it alone when it turns out to be refused for good). A
			// 404 may be the CRD deleted: the caller looks before the
			// rest are tried.
			return done, Result{Namespace: s.namespace, Name: s.name, Records: s.records}, cmp.Or(err, res.Why)
		}
		w.unstageLocked(s.namespace, s.name)
		if res.Outcome == Rejected {
			w.refiled(s)
		}
		if res.Outcome == Written {
			// The moved pods' old results go only once the new ones are
			// in: a write refused for good leaves them where they were,
			// not nowhere. Staged, each is written (or retried, or
			// refused) as any Report.
			for _, m := range s.moves {
				w.stage(s.namespace, m.from, func(r *openreportsv1alpha1.Report) int {
					// Not out of the Report the pod is filed in when
					// this is written: a pod moved back within one
					// batch (its owner's lookup refused, then allowed)
					// was put back in it, and would be in none.
					if w.filed[s.namespace+"/"+m.pod] == m.from {
						return 0
					}
					// Taking results out cuts none.
					without(m.pod)(r)
					return 0
				})
			}
		}
		done = append(done, res)
		if w.Progress != nil {
			w.Progress()
		}
	}
	return done, Result{}, nil
}

// Unstage drops a Report's staged changes (refused for good), or all with
// an empty name (Reports switched off).
func (w *Writer) Unstage(namespace, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if name == "" {
		for _, s := range w.staged {
			w.refiled(s)
		}
		clear(w.staged)
		w.order = nil
		return
	}
	if s := w.staged[namespace+"/"+name]; s != nil {
		w.unstageLocked(namespace, name)
		w.refiled(s)
	}
}

// refiled puts back the filing of the pods that s, dropped unwritten,
// would have moved: their results are still in the Reports they came
// from, and a later move must take them out of there. A pod that moved
// on within the batch is taken out of there by its later move instead.
func (w *Writer) refiled(s *staged) {
	for _, m := range s.moves {
		if k := s.namespace + "/" + m.pod; w.filed[k] == s.name {
			w.filed[k] = m.from
			continue
		}
		for _, o := range w.staged {
			if o.namespace != s.namespace {
				continue
			}
			for i := range o.moves {
				if o.moves[i].pod == m.pod && o.moves[i].from == s.name {
					o.moves[i].from = m.from
				}
			}
		}
	}
}

func (w *Writer) unstageLocked(namespace, name string) {
	k := namespace + "/" + name
	delete(w.staged, k)
	w.order = slices.DeleteFunc(w.order, func(o string) bool { return o == k })
}

// gone takes a gone record's results out of this node's Reports.
func (w *Writer) gone(ctx context.Context, rec findings.Record) (Result, error) {
	if res, ok := checkPod(rec); !ok {
		return res, nil
	}
	// Matched as stored: the property is escaped and cut.
	return w.remove(ctx, rec.Pod.Namespace, prop(rec.Pod.UID))
}

// checkPod says whether rec names a pod whose Report can be written;
// when not, the final Result says why.
func checkPod(rec findings.Record) (Result, bool) {
	if rec.Pod.Namespace == "" || rec.Pod.Name == "" || rec.Pod.UID == "" {
		return Result{Outcome: NoPod, Why: errors.New("record names no pod")}, false
	}
	if msgs := path.IsValidPathSegmentName(rec.Pod.Namespace); len(msgs) > 0 {
		return Result{Outcome: Rejected, Why: fmt.Errorf("invalid namespace %q: %s", rec.Pod.Namespace, strings.Join(msgs, ", "))}, false
	}
	return Result{}, true
}

// plan finds the Report a present or unknown record goes into and the
// change putting its result there (returning how many results it cut);
// with a nil change, the Result is final or the error says try again.
func (w *Writer) plan(ctx context.Context, rec findings.Record, posted owner.Owned) (Result, func(*openreportsv1alpha1.Report) int, error) {
	if res, ok := checkPod(rec); !ok {
		return res, nil, nil
	}
	if rec.KnownState() == findings.StatePresent && !rec.HasUsage() && !rec.CommandOnly() {
		return Result{Outcome: NoPod, Why: errors.New("record holds no iptables usage")}, nil, nil
	}
	var ownerWhy error
	if posted.Pod == nil {
		pod, err := w.Live(ctx, rec.Pod)
		switch gone, final, retry := kubeapi.PodRead(ctx, w.kube, err); {
		case gone:
			return Result{Outcome: PodGone, Why: err}, nil, nil
		case retry != nil:
			return Result{}, nil, retry
		case final:
			return Result{Outcome: Rejected, Namespace: rec.Pod.Namespace, Why: err}, nil, nil
		}
		// A refusal of this namespace alone leaves the pod's controller,
		// as the Events side does.
		if posted, ownerWhy, err = kubeapi.Owned(ctx, w.kube, w.Owners, pod); kubeapi.Retryable(err) {
			// The nearest owner would file the pod under its ReplicaSet
			// now and under the Deployment for its next finding.
			return Result{}, nil, err
		}
	}
	pod, o, ref := posted.Pod, posted.Owner, posted.Ref
	res := Result{Namespace: pod.Namespace, Name: Name(o, w.node), Owner: o, OwnerWhy: ownerWhy}
	return res, func(r *openreportsv1alpha1.Report) int {
		r.OwnerReferences = owners(r.OwnerReferences, posted)
		scope := ref
		if len(r.OwnerReferences) > 0 {
			scope = r.OwnerReferences[0]
		} else {
			// The workload the pod names, not a UID no one confirmed.
			scope.UID = ""
		}
		r.Scope = &corev1.ObjectReference{APIVersion: scope.APIVersion, Kind: scope.Kind, Namespace: pod.Namespace, Name: scope.Name, UID: scope.UID}
		var first time.Time
		var old *openreportsv1alpha1.ReportResult
		r.Results = slices.DeleteFunc(r.Results, func(x openreportsv1alpha1.ReportResult) bool {
			mine := x.Properties[PropPodUID] == prop(rec.Pod.UID)
			if mine {
				first, old = firstSeen(x), &x
			}
			return mine
		})
		x := resultOf(rec, pod, o, ref, w.node, first)
		if old != nil {
			x = after(*old, x, rec)
		}
		x.Properties[PropResultID] = resultKey(old, x.Rule, rec.Pod.UID, r.Name)
		r.Results = append(r.Results, x)
		return bound(r)
	}, nil
}

// owners gives a Report's owner references once o's pod is filed in it
// (cur, the ones it has). The Report is the workload's, shared by its
// pods, and the garbage collector deletes it, every pod's results with
// it, once its owner is no live object: only a reference the API vouched
// for (Owned.Vouched) may become its owner, and only one whose UID the
// API confirmed (Checked) may replace the UID it has. One the pod alone
// names (a Deployment, a custom resource, a controller not found; made
// up by whoever created the pod, or a previous object's) leaves it as it
// is: a Report that has none is pruned once its pods are gone (Prune),
// and a vouched one's pod gives it one. A workload recreated under the
// name leaves the Report to the old one's collection; the next write
// makes it anew. A vouched reference replaces one to another object or
// API version: one no collector resolves would never be collected.
func owners(cur []metav1.OwnerReference, o owner.Owned) []metav1.OwnerReference {
	ref := o.Ref
	same := len(cur) == 1 && cur[0].APIVersion == ref.APIVersion && cur[0].Kind == ref.Kind && cur[0].Name == ref.Name
	if o.Checked || o.Vouched && !same {
		return []metav1.OwnerReference{ref}
	}
	return cur
}

// finish turns an update error into an outcome.
func (w *Writer) finish(res Result, err error) (Result, error) {
	switch {
	case err == nil:
		if res.Outcome == "" {
			res.Outcome = Written
		}
		return res, nil
	case kubeapi.Retryable(err) || apierrors.IsConflict(err):
		return Result{}, err
	}
	res.Outcome, res.Why = Rejected, err
	return res, nil
}

// remove takes the pod's results out of this node's Reports in namespace.
func (w *Writer) remove(ctx context.Context, namespace, podUID string) (Result, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	res := Result{Outcome: Removed, Namespace: namespace}
	var werr error
	err := w.pages(ctx, namespace, func(items []openreportsv1alpha1.Report) bool {
		w.rememberAll(items)
		for _, r := range items {
			if !slices.ContainsFunc(r.Results, func(x openreportsv1alpha1.ReportResult) bool { return x.Properties[PropPodUID] == podUID }) {
				continue
			}
			res.Name = r.Name
			if werr = w.update(ctx, namespace, r.Name, without(podUID)); werr != nil {
				return false
			}
			w.unfile(namespace, podUID, r.Name)
		}
		return true
	})
	switch {
	case err != nil:
		return w.finish(Result{}, fmt.Errorf("list reports in %q: %w", namespace, err))
	case werr != nil:
		return w.finish(res, werr)
	}
	return res, nil
}

// without is the change taking a pod's results (podUID as PropPodUID
// holds it) out of a Report.
func without(podUID string) func(*openreportsv1alpha1.Report) {
	return func(r *openreportsv1alpha1.Report) {
		r.Results = slices.DeleteFunc(r.Results, func(x openreportsv1alpha1.ReportResult) bool { return x.Properties[PropPodUID] == podUID })
		bound(r)
	}
}

// maxFiled bounds the pods filed: each costs about 150 bytes (a Report's
// name may take 253), and a node runs at most a few thousand pods.
const maxFiled = 1 << 14

// moved gives the pod's UID as PropPodUID holds it, and from, the Report
// in namespace its result was filed in when not name (empty when none
// or the same). The node's Reports, listed once a writer (listNames),
// file the pods of results written before this writer started.
func (w *Writer) moved(ctx context.Context, namespace, name, podUID string) (pod, from string) {
	w.listNames(ctx)
	pod = prop(podUID)
	if f := w.filed[namespace+"/"+pod]; f != name {
		from = f
	}
	return pod, from
}

// file notes that the pod's result is in Report name.
func (w *Writer) file(namespace, pod, name string) {
	if len(w.filed) >= maxFiled {
		// Crude but bounded, as remember: a pod moved while forgotten
		// stays listed in its old Report until it is gone (Prune).
		clear(w.filed)
	}
	w.filed[namespace+"/"+pod] = name
}

// unfile forgets the pod's result taken out of Report name (a gone pod
// will not be filed again).
func (w *Writer) unfile(namespace, pod, name string) {
	if k := namespace + "/" + pod; w.filed[k] == name {
		delete(w.filed, k)
	}
}

// Prune removes, from this node's Reports, the results of pods that are
// gone (or are another pod now) and were last seen longer than Grace ago.
// It returns how many results it removed; skipped says why some were
// not (final answers about one Report or pod: its namespace's refusal;
// or a webhook failing there, tried again next time), err why it stopped
// (an error that may pass). It holds the writer's lock
// only to write a Report, not while it lists them or asks whether pods
// are gone (a pod GET each, as a gone pod is in no cache): a long prune
// after an outage, thousands of results, must not hold the findings back.
func (w *Writer) Prune(ctx context.Context) (removed int, skipped []error, err error) {
	refusing := map[string]bool{}
	var perr error
	if err := w.pages(ctx, metav1.NamespaceAll, func(items []openreportsv1alpha1.Report) bool {
		var n int
		var refused []error
		n, refused, perr = w.prunePage(ctx, items, refusing)
		removed += n
		skipped = append(skipped, refused...)
		return perr == nil
	}); err != nil {
		return removed, skipped, fmt.Errorf("list reports: %w", err)
	}
	return removed, skipped, perr
}

// listPage is how many Reports one LIST asks for.
const listPage = 50

// pages lists the node's Reports in namespace (metav1.NamespaceAll: in
// all) a page at a time, each page to each until it says stop (false):
// the node's Reports together, or one namespace's, may hold hundreds of
// MB (MaxResults each), past the forwarder's memory limit.
func (w *Writer) pages(ctx context.Context, namespace string, each func([]openreportsv1alpha1.Report) bool) error {
	opts := metav1.ListOptions{LabelSelector: Selector(w.node), Limit: listPage}
	for {
		l, err := w.reports.OpenreportsV1alpha1().Reports(namespace).List(ctx, opts)
		if err != nil {
			return err
		}
		if !each(l.Items) || l.Continue == "" {
			return nil
		}
		opts.Continue = l.Continue
	}
}

// prunePage is Prune's work on one page of Reports. An error that may
// pass stops it (err): an outage, a 404 that may be the CRD deleted. One
// final for a Report or a pod (its namespace's refusal), or a webhook
// that cannot be called, skips the rest of that namespace for this
// Prune (refusing) and is said in skipped: the list's order is the same
// each time, and stopping there would leave every later Report unpruned
// for good.
func (w *Writer) prunePage(ctx context.Context, items []openreportsv1alpha1.Report, refusing map[string]bool) (removed int, skipped []error, err error) {
	w.mu.Lock()
	w.rememberAll(items)
	w.mu.Unlock()
	for _, r := range items {
		stale := map[string]bool{}
		for _, x := range r.Results {
			if _, ok := PodSubject(x); refusing[r.Namespace] || x.Rule == CutRule || !ok || w.now().Sub(Seen(x)) < w.Grace {
				continue
			}
			gone, refused, err := w.podGone(ctx, x)
			switch {
			case err != nil:
				return removed, skipped, err
			case refused != nil:
				refusing[r.Namespace] = true
				skipped = append(skipped, refused)
			case gone:
				stale[x.Properties[PropPodUID]] = true
			}
		}
		if len(stale) == 0 || refusing[r.Namespace] {
			continue
		}
		w.mu.Lock()
		err := w.update(ctx, r.Namespace, r.Name, func(r *openreportsv1alpha1.Report) {
			r.Results = slices.DeleteFunc(r.Results, func(x openreportsv1alpha1.ReportResult) bool {
				return x.Rule != CutRule && stale[x.Properties[PropPodUID]]
			})
			bound(r)
		})
		if err == nil {
			for pod := range stale {
				w.unfile(r.Namespace, pod, r.Name)
			}
		}
		w.mu.Unlock()
		if err == nil {
			removed += len(stale)
			continue
		}
		// This namespace's alone (an admission denial, a webhook
		// authorizer's 403): the next Prune tries it again.
		here, rerr := kubeapi.RefusedHere(ctx, w.kube, err)
		switch {
		case rerr != nil:
			return removed, skipped, errors.Join(err, rerr)
		case kubeapi.WebhookFailed(err):
			// Its namespaceSelector may match this namespace alone (a
			// webhook left behind for good, say), and it may pass: one
			// failed try a namespace each Prune, each maybe its timeout.
		case apierrors.IsNotFound(err) && !namespaceGone(err),
			!here && (kubeapi.Retryable(err) || apierrors.IsConflict(err)):
			return removed, skipped, err
		}
		refusing[r.Namespace] = true
		skipped = append(skipped, fmt.Errorf("report %s/%s: %w", r.Namespace, r.Name, err))
	}
	return removed, skipped, nil
}

// podGone reports whether the result's pod no longer exists as that pod;
// refused is a final answer about it (kubeapi.PodRead: its namespace's
// refusal), err one that may pass.
func (w *Writer) podGone(ctx context.Context, x openreportsv1alpha1.ReportResult) (gone bool, refused, err error) {
	s, _ := PodSubject(x)
	// As the finding's pod was found: by the finding's UID, which for a
	// static pod is its config hash, named by whichever mirror pod stands
	// for it now. The subject's UID is the mirror pod's when the result
	// was written: a mirror pod deleted and made again by the kubelet
	// has another, and the running static pod's result would go.
	uid := cmp.Or(x.Properties[PropPodUID], string(s.UID))
	_, err = w.Live(ctx, findings.Pod{Namespace: s.Namespace, Name: s.Name, UID: uid})
	switch g, final, retry := kubeapi.PodRead(ctx, w.kube, err); {
	case g || kubeapi.IsInvalid(err):
		return true, nil, nil
	case retry != nil:
		return false, nil, retry
	case final:
		return false, err, nil
	}
	return false, nil, nil
}

// maxKnown bounds the Reports remembered (a node's forwarder writes one a
// workload), and maxKnownBytes what they hold: each may hold about
// 600 KiB (MaxResults), and the forwarder's memory limit is 128Mi.
const maxKnown = 512

// maxKnownBytes is a variable for the tests.
var maxKnownBytes = 16 << 20

// knownReport is a remembered Report and its footprint.
type knownReport struct {
	r    *openreportsv1alpha1.Report
	size int
}

// remember keeps r as the API server last served it (nil: forget it).
func (w *Writer) remember(namespace, name string, r *openreportsv1alpha1.Report) {
	k := namespace + "/" + name
	w.knownBytes -= w.known[k].size
	delete(w.known, k)
	if r == nil {
		return
	}
	size := footprint(r)
	if len(w.known) >= maxKnown || w.knownBytes+size > maxKnownBytes {
		// Crude but bounded: each forgotten Report costs one GET.
		clear(w.known)
		w.knownBytes = 0
	}
	if size > maxKnownBytes {
		return
	}
	w.known[k] = knownReport{r: r, size: size}
	w.knownBytes += size
}

// footprint estimates the bytes r holds in memory: its results' texts
// (what a pod's findings make large) and a fixed part for each object.
func footprint(r *openreportsv1alpha1.Report) int {
	n := 2048
	for _, x := range r.Results {
		n += 512 + len(x.Description) + len(x.Policy) + len(x.Rule) + len(x.Category)
		for k, v := range x.Properties {
			n += 64 + len(k) + len(v)
		}
		for _, s := range x.Subjects {
			n += 128 + len(s.Namespace) + len(s.Name) + len(s.UID)
		}
	}
	return n
}

// rememberAll keeps the Reports of a list, the freshest copies there are.
func (w *Writer) rememberAll(items []openreportsv1alpha1.Report) {
	for i := range items {
		w.remember(items[i].Namespace, items[i].Name, &items[i])
		w.named(items[i].Namespace, items[i].Name, true)
	}
}

// maxNames bounds names; past it, a new Report costs a GET again.
const maxNames = 1 << 16

// listNames lists the node's Reports once, a page at a time, for names.
// A failure (or a list past maxNames) leaves listed false: each new
// Report then costs a GET, and the list is tried again listRetry later.
func (w *Writer) listNames(ctx context.Context) {
	if w.listed || !w.listTried.IsZero() && w.now().Sub(w.listTried) < listRetry {
		return
	}
	names := map[string]bool{}
	full := false
	err := w.pages(ctx, metav1.NamespaceAll, func(items []openreportsv1alpha1.Report) bool {
		if full = len(names)+len(items) > maxNames; full {
			return false
		}
		for _, r := range items {
			names[r.Namespace+"/"+r.Name] = true
			for _, x := range r.Results {
				if pod := x.Properties[PropPodUID]; pod != "" && x.Rule != CutRule {
					w.file(r.Namespace, pod, r.Name)
				}
			}
		}
		return true
	})
	if err == nil && !full {
		w.names, w.listed = names, true
	} else {
		// A list past maxNames is as long again next time.
		w.listTried = w.now()
	}
}

// listRetry is how long a failed listNames waits before it lists again.
const listRetry = time.Minute

// named records that the Report exists or not, while names are kept.
func (w *Writer) named(namespace, name string, exists bool) {
	if !w.listed {
		return
	}
	if exists && len(w.names) >= maxNames {
		w.names, w.listed = nil, false
		return
	}
	if exists {
		w.names[namespace+"/"+name] = true
	} else {
		delete(w.names, namespace+"/"+name)
	}
}

// read is the Report as last served: the remembered copy; a new one when
// the node's Reports were listed without it; else a GET (create when the
// API server has none).
func (w *Writer) read(ctx context.Context, namespace, name string, fresh bool) (r *openreportsv1alpha1.Report, create bool, err error) {
	if k, ok := w.known[namespace+"/"+name]; ok {
		return k.r.DeepCopy(), false, nil
	}
	if w.listNames(ctx); !fresh && w.listed && !w.names[namespace+"/"+name] {
		return &openreportsv1alpha1.Report{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}, true, nil
	}
	r, err = w.reports.OpenreportsV1alpha1().Reports(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return &openreportsv1alpha1.Report{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("get report %q: %w", namespace+"/"+name, err)
	}
	return r, false, nil
}

// update applies change to the Report as last served (remembered from
// the last write or list, else read; a new one when missing) and writes
// it back under that resourceVersion: no GET before each write. A
// conflict (someone else wrote it, or it is gone or there already) reads
// it again and applies change anew. A Report left without results is
// deleted.
//
// A write (not a read) that runs out of time while the API server is
// ready comes back marked by kubeapi.HeldUp: admission held it up.
func (w *Writer) update(ctx context.Context, namespace, name string, change func(*openreportsv1alpha1.Report)) error {
	writing := false
	err := upsert(ctx, w.reports.OpenreportsV1alpha1().Reports(namespace), namespace+"/"+name, w.node,
		func(fresh bool) (*openreportsv1alpha1.Report, bool, error) {
			writing = false
			return w.read(ctx, namespace, name, fresh)
		},
		func(r *openreportsv1alpha1.Report, a afterWrite) {
			switch a {
			case wroteIt:
				w.remember(namespace, name, r)
				w.named(namespace, name, true)
			case deletedIt:
				w.remember(namespace, name, nil)
				w.named(namespace, name, false)
			default:
				// Whatever went wrong, the remembered copy may be stale now.
				w.remember(namespace, name, nil)
				writing = true
			}
		},
		func(r *openreportsv1alpha1.Report) bool {
			r.Source = Source
			change(r)
			return len(r.Results) == 0
		})
	if writing {
		err = kubeapi.HeldUp(ctx, w.kube, err)
	}
	return err
}

// reportAPI is the part of the Report and ClusterReport clients upsert
// uses.
type reportAPI[T metav1.Object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Create(ctx context.Context, r T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, r T, opts metav1.UpdateOptions) (T, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// afterWrite is what became of an object upsert wrote, for its after.
type afterWrite int

const (
	wroteIt afterWrite = iota
	deletedIt
	failedIt
)

// upsert is the read-modify-write of one of node's Reports or
// ClusterReports (what names it in errors): read gives the object as last
// served (create: none there yet; fresh: ask the API server, after a
// conflict); it is labelled ours and node's, change applies and says
// whether the object is left empty, and the object is written back under
// the resourceVersion read gave, again on a conflict. An object left
// empty is deleted (not created). after, when not nil, learns what the
// API server answered (a cache keeps it).
func upsert[T metav1.Object](ctx context.Context, api reportAPI[T], what, node string,
	read func(fresh bool) (T, bool, error), after func(T, afterWrite), change func(T) (empty bool)) error {
	if after == nil {
		after = func(T, afterWrite) {}
	}
	var err error
	for try := range conflictTries {
		r, create, rerr := read(try > 0)
		if rerr != nil {
			return rerr
		}
		l := r.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		l[ManagedByLabel] = ManagedBy
		l[NodeLabel] = NodeLabelValue(node)
		r.SetLabels(l)
		empty := change(r)
		var wrote T
		switch {
		case empty && create:
			return nil
		case empty:
			rv := r.GetResourceVersion()
			err = api.Delete(ctx, r.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
			if err == nil || apierrors.IsNotFound(err) {
				after(r, deletedIt)
				return nil
			}
		case create:
			wrote, err = api.Create(ctx, r, metav1.CreateOptions{FieldManager: Source})
		default:
			wrote, err = api.Update(ctx, r, metav1.UpdateOptions{FieldManager: Source})
		}
		if err == nil {
			after(wrote, wroteIt)
			return nil
		}
		after(r, failedIt)
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) && !(apierrors.IsNotFound(err) && !create) {
			return fmt.Errorf("write report %q: %w", what, err)
		}
	}
	return fmt.Errorf("write report %q: still conflicting after %d tries: %w", what, conflictTries, err)
}

// bound keeps at most MaxResults results, the worst and newest first,
// counts what it cut in CutAnnotation and in one skip result, sorts them
// by pod for a stable object and sets the summary. It returns how many
// results this call cut.
func bound(r *openreportsv1alpha1.Report) int {
	total, _ := strconv.Atoi(r.Annotations[CutAnnotation])
	var since *metav1.Timestamp
	r.Results = slices.DeleteFunc(r.Results, func(x openreportsv1alpha1.ReportResult) bool {
		if x.Rule == CutRule && x.Timestamp.Seconds > 0 {
			since = &x.Timestamp
		}
		return x.Rule == CutRule
	})
	cut := 0
	if len(r.Results) > MaxResults-1 && (total > 0 || len(r.Results) > MaxResults) {
		slices.SortStableFunc(r.Results, func(a, b openreportsv1alpha1.ReportResult) int {
			if d := rank(a) - rank(b); d != 0 {
				return d
			}
			return Seen(b).Compare(Seen(a))
		})
		cut = len(r.Results) - (MaxResults - 1)
		r.Results = r.Results[:MaxResults-1]
	}
	total += cut
	slices.SortFunc(r.Results, func(a, b openreportsv1alpha1.ReportResult) int {
		return strings.Compare(subject(a), subject(b))
	})
	if total > 0 {
		if r.Annotations == nil {
			r.Annotations = map[string]string{}
		}
		r.Annotations[CutAnnotation] = strconv.Itoa(total)
		// Dated when the first cut was (Policy Reporter shows 1970 for
		// none) and keyed by its Report: its description changes with
		// the count, which would make a new result of it each time.
		if since == nil {
			since = &metav1.Timestamp{Seconds: time.Now().Unix()}
		}
		r.Results = append(r.Results, openreportsv1alpha1.ReportResult{
			Source: Source, Policy: Policy, Rule: CutRule, Category: Category, Result: "skip", Severity: "info",
			Timestamp:   *since,
			Description: fmt.Sprintf("%d results were left out of this Report since it was made: it keeps at most %d, the worst and newest. Run `iptables-alerter report` or read the pods' Events for the rest.", total, MaxResults-1),
			Properties:  map[string]string{"cut": strconv.Itoa(total), PropResultID: ResultID(CutRule, r.Namespace, r.Name)},
		})
	}
	r.Summary = summary(r.Results)
	if n := len(r.Results); n == 1 && r.Results[0].Rule == CutRule {
		// Only the cut note left: nothing to report any more.
		r.Results = nil
	}
	return cut
}

// rank orders results worst first by the Verdicts table.
func rank(x openreportsv1alpha1.ReportResult) int {
	for i, v := range Verdicts {
		if v.Rule == x.Rule {
			return i
		}
	}
	return len(Verdicts)
}

func subject(x openreportsv1alpha1.ReportResult) string {
	s, ok := PodSubject(x)
	if !ok {
		return ""
	}
	return s.Name + "/" + string(s.UID)
}

// summary counts results by result.
func summary(results []openreportsv1alpha1.ReportResult) openreportsv1alpha1.ReportSummary {
	var sum openreportsv1alpha1.ReportSummary
	for _, x := range results {
		switch x.Result {
		case "pass":
			sum.Pass++
		case "fail":
			sum.Fail++
		case "warn":
			sum.Warn++
		case "error":
			sum.Error++
		case "skip":
			sum.Skip++
		}
	}
	return sum
}
