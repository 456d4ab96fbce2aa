package owner

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
)

// MirrorAnnotation marks a mirror pod, the API's copy of a static pod.
const MirrorAnnotation = "kubernetes.io/config.mirror"

// Kinds answered besides the controllers' own.
const (
	KindPod       = "Pod"
	KindStaticPod = "StaticPod"
)

// Owner is the workload a pod belongs to.
type Owner struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

// String is "Kind/name".
func (o Owner) String() string { return o.Kind + "/" + o.Name }

// Bare is the owner of a pod with no controller.
func Bare(pod string) Owner { return Owner{Kind: KindPod, Name: pod} }

// Cache bounds.
const (
	maxEntries = 4096
	maxAge     = 10 * time.Minute
)

// Resolver resolves owners through one client, caching what it learnt.
type Resolver struct {
	client kubernetes.Interface
	now    func() time.Time

	mu    sync.Mutex
	cache map[key]entry
}

// key names the exact object: a ReplicaSet recreated under the same name is
// another object, maybe of another Deployment.
type key struct{ namespace, kind, name, uid string }

type entry struct {
	look
	at time.Time
}

// New gives a Resolver; a nil client resolves from the pod alone.
func New(client kubernetes.Interface) *Resolver {
	return &Resolver{client: client, now: time.Now, cache: map[key]entry{}}
}

// Reference names the owner of pod and gives a reference to that object
// (its API version and UID), for objects that must be garbage-collected
// with the workload: a bare or static pod refers to the pod itself. The
// reference never sets controller or blockOwnerDeletion (OpenShift's
// admission refuses the latter without finalizer rights on the owner).
//
// err is set when the pod's controller (a ReplicaSet, say) could not be
// read for a reason other than its absence: an outage, throttling, a
// refusal. Owner and the reference then name that controller, the
// nearest owner known. A caller filing the pod under its owner must not
// take them when err may pass (lib/kubeapi.Retryable) but try again: the
// pod's later findings would name the workload (the Deployment), and the
// pod would be filed under two owners.
func (r *Resolver) Reference(ctx context.Context, pod *corev1.Pod) (Owner, metav1.OwnerReference, error) {
	o, err := r.reference(ctx, pod)
	return o.Owner, o.Ref, err
}

// reference is Reference, and tells how far the reference is to be
// trusted (Owned's Checked and Vouched): the pod itself, or its
// controller read from the API with the UID the pod names, is checked;
// what that controller names above it (a Deployment: not read, to spare
// a GET a finding) is vouched for by it; a kind it does not read (a
// custom resource) or could not (gone, no role) is neither.
func (r *Resolver) reference(ctx context.Context, pod *corev1.Pod) (Owned, error) {
	self := Owned{Ref: metav1.OwnerReference{APIVersion: "v1", Kind: KindPod, Name: pod.Name, UID: pod.UID}, Checked: true, Vouched: true}
	ref := metav1.GetControllerOf(pod)
	if ref != nil && !Plausible(*ref) {
		// No object has it: made up by whoever created the pod. Taken
		// whole it would carry a megabyte of the pod's choosing into a
		// GET path (refused by the client as if the server were down:
		// retried for good), every Event and the Report's results. As
		// no controller (lib/kubeapi's pod watch keeps none of it).
		ref = nil
	}
	if ref == nil {
		if _, ok := pod.Annotations[MirrorAnnotation]; ok {
			self.Owner = Owner{Kind: KindStaticPod, Name: pod.Name}
			return self, nil
		}
		self.Owner = Bare(pod.Name)
		return self, nil
	}
	// The kubelet makes a mirror pod's controller its Node.
	if ref.Kind == "Node" {
		self.Owner = Owner{Kind: KindStaticPod, Name: pod.Name}
		return self, nil
	}
	top := *ref
	var err error
	var l look
	k := key{pod.Namespace, ref.Kind, ref.Name, string(ref.UID)}
	switch {
	case ref.Kind == "ReplicaSet" && isGroup(ref.APIVersion, "apps"),
		ref.Kind == "Job" && isGroup(ref.APIVersion, "batch"),
		ref.Kind == "ReplicationController" && isGroup(ref.APIVersion, ""):
		l, err = r.parent(ctx, k)
	case (ref.Kind == "StatefulSet" || ref.Kind == "DaemonSet") && isGroup(ref.APIVersion, "apps"):
		// Read only to check the reference's UID (the pod is filed under
		// the set itself, whatever owns the set).
		l, err = r.parent(ctx, k)
		l.parent = nil
	}
	if l.other {
		// The object of that name has another UID: the reference is
		// stale, or made up by whoever created the pod (a pod's owner
		// references are not checked when it is created). Filed under
		// it, the pod would write that UID into the workload's Report as
		// its owner, and the garbage collector would delete the Report,
		// with every other pod's results, as it deletes the pod.
		self.Owner = Bare(pod.Name)
		return self, nil
	}
	o := Owned{Vouched: l.checked && err == nil}
	if l.parent != nil {
		// Read from the ReplicaSet, not checked: whoever made it wrote
		// it. Vouched for, unlike what the pod names: the garbage
		// collector deletes a ReplicaSet whose owners are all gone, so
		// one naming a made-up UID does not live on.
		top = *l.parent
	} else {
		o.Checked = o.Vouched
	}
	top.Controller, top.BlockOwnerDeletion = nil, nil
	o.Owner, o.Ref = Owner{Kind: top.Kind, Name: top.Name}, top
	return o, err
}

// The longest fields a reference to a real object can have: names are
// DNS subdomains, kinds DNS labels, an API version a group (a subdomain)
// and a version (a label); UIDs are UUIDs (36 bytes), with room to spare.
const (
	maxRefName       = 253
	maxRefKind       = 63
	maxRefAPIVersion = 253 + 1 + 63
	// MaxUID bounds any UID.
	MaxUID = 128
)

// Plausible tells whether ref's fields fit an object's: the API server
// checks a pod's owner references for emptiness only, so whoever creates
// a pod may write any length there.
func Plausible(ref metav1.OwnerReference) bool {
	return len(ref.Name) <= maxRefName && len(ref.Kind) <= maxRefKind &&
		len(ref.APIVersion) <= maxRefAPIVersion && len(ref.UID) <= MaxUID
}

// found is a typed client's Get as a metav1.Object: nil with its error.
func found[T metav1.Object](o T, err error) (metav1.Object, error) {
	if err != nil {
		return nil, err
	}
	return o, nil
}

// look is what parent learnt of a controller: its own controller
// (parent, nil when none), whether an object of that name has another
// UID than the pod's reference (other), and whether the UID was read
// from the API at all (checked; not for a refused read, see parent).
type look struct {
	parent         *metav1.OwnerReference
	other, checked bool
}

// isGroup checks the API group: a CRD may reuse a kind name.
func isGroup(apiVersion, group string) bool {
	gv, err := schema.ParseGroupVersion(apiVersion)
	return err == nil && gv.Group == group
}

// parent looks up a ReplicaSet, Job, ReplicationController, StatefulSet or
// DaemonSet: what it found (a zero look when it is gone), or the error of
// a lookup that failed otherwise.
func (r *Resolver) parent(ctx context.Context, k key) (look, error) {
	// An ownerReference's name is not validated as an object name, and
	// client-go refuses an impossible one before sending anything, with
	// an error that looks like a lost connection: no such object exists.
	if r.client == nil || k.name == "" || len(path.IsValidPathSegmentName(k.name)) > 0 {
		return look{}, nil
	}
	r.mu.Lock()
	e, ok := r.cache[k]
	r.mu.Unlock()
	if ok && r.now().Sub(e.at) < maxAge {
		return e.look, nil
	}
	var obj metav1.Object
	var err error
	get := metav1.GetOptions{}
	switch k.kind {
	case "ReplicaSet":
		obj, err = found(r.client.AppsV1().ReplicaSets(k.namespace).Get(ctx, k.name, get))
	case "Job":
		obj, err = found(r.client.BatchV1().Jobs(k.namespace).Get(ctx, k.name, get))
	case "ReplicationController":
		obj, err = found(r.client.CoreV1().ReplicationControllers(k.namespace).Get(ctx, k.name, get))
	case "StatefulSet":
		obj, err = found(r.client.AppsV1().StatefulSets(k.namespace).Get(ctx, k.name, get))
	case "DaemonSet":
		obj, err = found(r.client.AppsV1().DaemonSets(k.namespace).Get(ctx, k.name, get))
	}
	var l look
	switch {
	case apierrors.IsNotFound(err) || err == nil && obj == nil:
		// Final: the pod's controller is the nearest owner there is. Not
		// cached, as no failed lookup is.
		return look{}, nil
	case apierrors.IsForbidden(err) && (k.kind == "StatefulSet" || k.kind == "DaemonSet"):
		// A role from before the UID check (no get on them): unchecked,
		// as it was, instead of holding the pod's findings; cached, so a
		// set's pods do not each send a refused GET.
	case err != nil:
		// Not cached: a refusal or an outage may pass.
		return look{}, fmt.Errorf("get %s %q: %w", strings.ToLower(k.kind), k.namespace+"/"+k.name, err)
	default:
		// Another object under the pod's owner's name says nothing of
		// the pod.
		l = look{other: string(obj.GetUID()) != k.uid, checked: true}
		if ref := metav1.GetControllerOfNoCopy(obj); ref != nil && !l.other && Plausible(*ref) {
			c := *ref
			l.parent = &c
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.cache) >= maxEntries {
		// Dropping all is crude but bounded, and a node's pods refill it
		// with one GET per workload.
		clear(r.cache)
	}
	if obj != nil {
		// The object read is the one of that name now: what was learnt
		// of other UIDs under its name as matching (a previous object's
		// pods) is stale. A mismatch stays one: no UID comes back.
		for o, e := range r.cache {
			if o.namespace == k.namespace && o.kind == k.kind && o.name == k.name && o.uid != string(obj.GetUID()) && !e.other {
				delete(r.cache, o)
			}
		}
	}
	r.cache[k] = entry{look: l, at: r.now()}
	return l, nil
}

// Owned is a live pod with its owning workload and a reference to the
// workload's object, as Resolver.Owned reads them: what the Events side
// read, handed to the Reports side so it need not read them again.
type Owned struct {
	// Pod is nil when no live pod was found.
	Pod   *corev1.Pod
	Owner Owner
	Ref   metav1.OwnerReference
	// Checked is set when Ref's UID is a live object's, read from the API
	// (Resolver.reference): only such a reference may replace another UID
	// as a shared object's owner.
	Checked bool
	// Vouched is set when Ref is checked or was read from an object that
	// is (the Deployment a ReplicaSet names): only such a reference may
	// become an object's owner. One the pod alone names (a Deployment or
	// a custom resource as its controller, a controller not found, one
	// not read for want of a role) was written by whoever created the
	// pod: an object owned by a UID that is no live object's is deleted
	// by the garbage collector.
	Vouched bool
}

// Owned reads pod's owner and its reference; err and what comes with it
// are Reference's.
func (r *Resolver) Owned(ctx context.Context, pod *corev1.Pod) (Owned, error) {
	o, err := r.reference(ctx, pod)
	o.Pod = pod
	return o, err
}
