package events

import (
	"context"
	"errors"
	"fmt"
	"github.com/iptables-alerter/iptables-alerter/lib/wording"
	"sync"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

const (
	// Reason and Action are the ones OpenShift's own alerter uses, so
	// existing searches and alerts on them keep working.
	Reason = "IPTablesUsageObserved"
	Action = "IPTablesUsageObserved"
	// UnknownReason is the reason of the Event for a record whose state is
	// unknown: the inspection could not finish and saw no usage. It is not
	// Reason, so searches for usage do not count it, and alerts can.
	UnknownReason = "IPTablesUsageUnknown"
	// Controller names us as the reporter; it must be a qualified name.
	Controller = "iptables-alerter.io/forward"
	// MirrorAnnotation on a mirror pod holds the static pod's UID as the
	// kubelet labels its containers (the config hash).
	MirrorAnnotation = owner.MirrorAnnotation
	// NodeEventNamespace holds Events about Nodes, as the kubelet's.
	NodeEventNamespace = metav1.NamespaceDefault

	// Annotations let tools find the finding behind an Event.
	FingerprintAnnotation = "iptables-alerter.io/fingerprint"
	ContainerAnnotation   = "iptables-alerter.io/container-id"
	// SummaryAnnotation holds the Summary as JSON: what `report` reads
	// back from the cluster's Events.
	SummaryAnnotation = "iptables-alerter.io/finding"

	// instanceLimit is the API's limit on reportingInstance.
	instanceLimit = 128
	// maxOwed bounds Poster.owed: the runner retries one line at a time,
	// so it holds one entry unless a line is never retried.
	maxOwed = 64
)

// Outcome says what became of a record.
type Outcome string

const (
	// Created: the API stored a new Event, now or on an earlier try of
	// the same record that failed on its node summary.
	Created Outcome = "created"
	// Duplicate: the Event existed already (a replay after a restart).
	Duplicate Outcome = "duplicate"
	// PodGone: no pod with that name, or it is another pod now.
	PodGone Outcome = "pod_gone"
	// NoPod: the record names no pod, or its state is gone (the usage is
	// no longer there), so there is nothing to tell anyone about.
	NoPod Outcome = "no_pod"
	// Rejected: the API refused the Event for good (see kubeapi.Retryable).
	Rejected Outcome = "rejected"
)

// Result reports one delivered (or definitively undeliverable) record.
type Result struct {
	Outcome Outcome
	// Event is the pod Event's namespace/name, empty when none was tried.
	Namespace, Name string
	// PodUID is the live pod's UID the Event regards; for a static pod it
	// differs from the record's.
	PodUID types.UID
	// Mirror is true when the record's pod is a static pod.
	Mirror bool
	// Owned is the live pod the Event regards (nil when none was found),
	// its owning workload and a reference to that (owner.Resolver.Owned):
	// lib/openreports writes the pod's result from it without reading
	// them again.
	owner.Owned
	// Node is the outcome of the node summary Event, empty when not asked;
	// NodeWhy explains a Rejected one.
	Node    Outcome
	NodeWhy error
	// Why explains PodGone, NoPod and Rejected.
	Why error
	// OwnerWhy says why Owner is only the pod's controller (a ReplicaSet,
	// a Job): the API refused to show what owns it, in this namespace
	// alone.
	OwnerWhy error
}

// Poster posts Events through one client for one node.
type Poster struct {
	client kubernetes.Interface
	// Live finds the live pod a finding names (kubeapi.LivePod by
	// default; the forwarder sets a kubeapi.NodePods' LivePod).
	Live func(context.Context, findings.Pod) (*corev1.Pod, error)
	// Owners names each pod's owner (owner.New of the client by
	// default); the forwarder gives the Reports' Writer the same one, so
	// both learn of a workload made again under its name at once.
	Owners    *owner.Resolver
	node      string
	nodeEvent bool
	now       func() time.Time
	// refusals is the Consumer's (NewConsumer): a write that got
	// through clears its namespace's, and it bounds how long a webhook
	// that cannot be called holds the line (Outlasted). Nil: no bound.
	refusals *kubeapi.Refusals

	// owed holds the pod Events (namespace/name) a Post created before
	// their node summary failed: the retry finds them there
	// (AlreadyExists) and must still say Created, or they are never
	// counted as created.
	mu   sync.Mutex
	owed map[string]bool
}

// New gives a Poster reporting as node; nodeEvent adds the summary Event on
// the Node object.
func New(client kubernetes.Interface, node string, nodeEvent bool) *Poster {
	return &Poster{client: client, Owners: owner.New(client), node: node, nodeEvent: nodeEvent, now: time.Now, owed: map[string]bool{},
		Live: func(ctx context.Context, want findings.Pod) (*corev1.Pod, error) {
			return kubeapi.LivePod(ctx, client, want)
		}}
}

// Post delivers the Events for rec, by its state: present, the usage
// Event (Reason); unknown, an Event saying the inspection could not finish
// (UnknownReason), without the node summary, which says the pod created
// rules; gone, none (NoPod): the Events already posted stay, as Events do,
// and expire with the API's event TTL. A non-nil error is always retryable:
// the caller keeps rec and calls Post again with it later. Everything
// final, including a rejection, comes back as a Result with a nil error.
func (p *Poster) Post(ctx context.Context, rec findings.Record) (Result, error) {
	if rec.KnownSubject() == findings.SubjectNode {
		return p.postNode(ctx, rec)
	}
	res, err := p.postPod(ctx, rec)
	// No summary for a record without rules (unknown, a command's own):
	// it says the pod created rules.
	if err != nil || !p.nodeEvent || res.Outcome == NoPod || rec.State == findings.StateUnknown || rec.CommandOnly() {
		return res, err
	}
	// The node summary is posted even when the pod is gone: the node did
	// run a workload using iptables, which is what the summary says.
	out, err := p.create(ctx, p.nodeEventFor(rec, res))
	podEvent := res.Namespace + "/" + res.Name
	if out == "" {
		if res.Outcome == Created {
			p.owe(podEvent)
		}
		return Result{}, err
	}
	if p.paid(podEvent) && res.Outcome == Duplicate {
		res.Outcome = Created
	}
	res.Node, res.NodeWhy = out, err
	return res, nil
}

// owe remembers that a Post created the pod Event named so and failed
// on its node summary.
func (p *Poster) owe(podEvent string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.owed) >= maxOwed {
		// Crude but bounded: a forgotten one is counted a duplicate.
		clear(p.owed)
	}
	p.owed[podEvent] = true
}

// paid forgets podEvent (its node summary is done) and says whether an
// earlier Post had created it.
func (p *Poster) paid(podEvent string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	was := p.owed[podEvent]
	delete(p.owed, podEvent)
	return was
}

// noEvent tells a record that gets no Event, and why: its usage gone (the
// Events already posted stay), or none in a present record.
func noEvent(rec findings.Record) (Result, bool) {
	switch rec.KnownState() {
	case findings.StateGone:
		return Result{Outcome: NoPod, Why: errors.New("usage gone: no Event for it, the earlier ones stay")}, true
	case findings.StatePresent:
		// A command's own finding (the exec watch's failed write or read)
		// holds no rules and is still usage: a legacy write the kernel
		// refused is the RHEL 10 breakage itself (wording.Note words it).
		if !rec.HasUsage() && !rec.CommandOnly() {
			return Result{Outcome: NoPod, Why: errors.New("record holds no iptables usage")}, true
		}
	}
	return Result{}, false
}

func (p *Poster) postPod(ctx context.Context, rec findings.Record) (Result, error) {
	if rec.Pod.Namespace == "" || rec.Pod.Name == "" || rec.Pod.UID == "" {
		return Result{Outcome: NoPod, Why: errors.New("record names no pod")}, nil
	}
	if res, skip := noEvent(rec); skip {
		return res, nil
	}
	pod, err := p.Live(ctx, rec.Pod)
	switch gone, final, retry := kubeapi.PodRead(ctx, p.client, err); {
	case gone:
		return Result{Outcome: PodGone, Why: err}, nil
	case retry != nil:
		return Result{}, retry
	case final:
		return Result{Outcome: Rejected, Namespace: rec.Pod.Namespace, Why: err}, nil
	}
	owned, ownerWhy, err := kubeapi.Owned(ctx, p.client, p.Owners, pod)
	if kubeapi.Retryable(err) {
		// Not the ReplicaSet in its stead: the Event would name it, and
		// the Report it is handed to would file the pod under it while
		// its later findings go under the Deployment.
		return Result{}, err
	}
	res := Result{Namespace: pod.Namespace, PodUID: pod.UID, Mirror: kubeapi.IsMirror(pod, rec.Pod), Name: PodEventName(rec), Owned: owned, OwnerWhy: ownerWhy}
	res.Outcome, err = p.create(ctx, p.podEvent(rec, pod, res.Name, res.Owner))
	if res.Outcome == "" {
		return Result{}, err
	}
	res.Why = err
	return res, nil
}

// create posts ev; AlreadyExists means an earlier attempt got through. An
// empty Outcome means err is retryable; with Rejected, err says why.
func (p *Poster) create(ctx context.Context, ev *eventsv1.Event) (Outcome, error) {
	_, err := p.client.EventsV1().Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	switch {
	case err == nil:
		p.refusals.Clear(kubeapi.KindEvent, ev.Namespace)
		return Created, nil
	case apierrors.IsAlreadyExists(err):
		p.refusals.Clear(kubeapi.KindEvent, ev.Namespace)
		return Duplicate, nil
	}
	err = fmt.Errorf("create event %q: %w", ev.Namespace+"/"+ev.Name, err)
	// An authorizer's 403 in one namespace, where an access review says
	// the forwarder may create Events everywhere, is that namespace's rule
	// (a webhook authorizer's): refused there for good, as owners' GETs
	// and Reports are, instead of holding every later finding of the node.
	switch here, rerr := kubeapi.RefusedHere(ctx, p.client, err); {
	case rerr != nil:
		return "", errors.Join(err, rerr)
	case here:
		return Rejected, err
	}
	// A webhook that cannot be called, or a create that ran out of time
	// while the API server was ready, for longer than the hold: that
	// namespace's refusal, for the same reason.
	err = kubeapi.HeldUp(ctx, p.client, err)
	if kubeapi.Retryable(err) && !p.refusals.Outlasted(kubeapi.KindEvent, ev.Namespace, err) {
		return "", err
	}
	return Rejected, err
}

func (p *Poster) podEvent(rec findings.Record, pod *corev1.Pod, name string, o owner.Owner) *eventsv1.Event {
	ev := p.base(rec, name, pod.Namespace, o)
	ev.Regarding = corev1.ObjectReference{
		APIVersion: "v1",
		Kind:       "Pod",
		Namespace:  pod.Namespace,
		Name:       pod.Name,
		UID:        pod.UID,
	}
	ev.Note = wording.Note(rec, o)
	if rec.KnownState() == findings.StateUnknown {
		ev.Reason, ev.Note = UnknownReason, wording.UnknownNote(rec, o)
	}
	return ev
}

func (p *Poster) nodeEventFor(rec findings.Record, pod Result) *eventsv1.Event {
	ev := p.base(rec, NodeEventName(p.node, rec.Fingerprint), NodeEventNamespace, pod.Owner)
	// The kubelet uses the node name as UID in its node Events and
	// `kubectl describe node` looks for both, so no nodes get is needed.
	ev.Regarding = corev1.ObjectReference{
		APIVersion: "v1",
		Kind:       "Node",
		Name:       p.node,
		UID:        types.UID(p.node),
	}
	if pod.Outcome == Created || pod.Outcome == Duplicate {
		ev.Related = &corev1.ObjectReference{
			APIVersion: "v1",
			Kind:       "Pod",
			Namespace:  pod.Namespace,
			Name:       rec.Pod.Name,
			UID:        pod.PodUID,
		}
	}
	head := fmt.Sprintf("Pod %s/%s on this node created iptables rules. ", safetext.Display(rec.Pod.Namespace), safetext.Display(rec.Pod.Name))
	ev.Note = safetext.Cut(head+wording.Note(rec, pod.Owner), wording.NoteLimit)
	return ev
}

func (p *Poster) base(rec findings.Record, name, namespace string, o owner.Owner) *eventsv1.Event {
	when := rec.Time
	if when.IsZero() {
		when = p.now()
	}
	instance := p.node
	if len(instance) > instanceLimit {
		instance = instance[:instanceLimit]
	}
	return &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespace,
			Annotations: map[string]string{
				FingerprintAnnotation: rec.Fingerprint,
				ContainerAnnotation:   rec.ContainerID,
				SummaryAnnotation:     SummaryOf(rec, p.node, o).JSON(),
			},
		},
		EventTime:           metav1.NewMicroTime(when),
		ReportingController: Controller,
		ReportingInstance:   instance,
		Action:              Action,
		Reason:              Reason,
		Type:                corev1.EventTypeWarning,
	}
}
