package kubeapi

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

// NodePods keeps the pods bound to one node as a watch serves them (one
// LIST and one WATCH for the node instead of a GET per finding): a
// finding is about a pod on its own node. Only what the consumers read
// is kept (name, namespace, UID, owner references, the mirror
// annotation), so a node's pods cost a few hundred bytes each.
type NodePods struct {
	// client serves LivePod's GETs: not the watch's, whose requests
	// need not end (WatchNodePodsConfig).
	client   kubernetes.Interface
	informer cache.SharedIndexInformer
	// hits and misses count the pods served from the watch and the GETs
	// made instead (not seen yet, or another pod under the name).
	hits, misses atomic.Int64
}

// WatchNodePods starts watching node's pods until ctx ends, every request
// through client (a fake's; the forwarder's is WatchNodePodsConfig's).
// Until the first LIST came back, LivePod asks the API server.
func WatchNodePods(ctx context.Context, client kubernetes.Interface, node string) *NodePods {
	return watchNodePods(ctx, client, client, node)
}

// WatchNodePodsConfig is WatchNodePods with clients made from rc. The
// watch's has no rc.Timeout: that cuts a watch (its whole body) short,
// and the reflector would list and watch again every timeout. The LIST
// and LivePod's GETs keep it: the forwarder's line waits on a GET with
// no deadline of its own, and a LIST that never ends leaves the watch
// unsynced for good.
func WatchNodePodsConfig(ctx context.Context, rc *rest.Config, node string) (*NodePods, error) {
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("make kubernetes client: %w", err)
	}
	wc := rest.CopyConfig(rc)
	wc.Timeout = 0
	watchClient, err := kubernetes.NewForConfig(wc)
	if err != nil {
		return nil, fmt.Errorf("make kubernetes watch client: %w", err)
	}
	return watchNodePods(ctx, client, watchClient, node), nil
}

func watchNodePods(ctx context.Context, client, watchClient kubernetes.Interface, node string) *NodePods {
	selector := fields.OneTermEqualSelector("spec.nodeName", node).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return watchClient.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, o)
		},
	}
	// No resync: the watch alone keeps the store current. Its first list
	// is a LIST, not client-go's default streamed list (a watch with its
	// initial events, 1.35): that would go through the watch's client,
	// with no timeout, and a server or proxy that never answered it left
	// the watch unsynced for good.
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, noWatchList{}), &corev1.Pod{}, 0, cache.Indexers{})
	if err := inf.SetTransform(slimPod); err != nil {
		panic(fmt.Sprintf("set pod transform: %v", err)) // only fails once started
	}
	n := &NodePods{client: client, informer: inf}
	go inf.RunWithContext(ctx)
	return n
}

// noWatchList tells client-go's reflector not to stream the first list.
type noWatchList struct{}

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

// slimPod keeps what LivePod's callers read of a pod.
func slimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a DeletedFinalStateUnknown tombstone
	}
	// The controller reference alone (what owner reads), and the mirror
	// annotation's UID: whoever creates a pod bound to the node writes
	// both, any length (a pod may be 1.5 MB), and the node's store keeps
	// every pod listed: whole, a hundred such pods outgrew the forwarder's
	// memory limit at each start.
	slim := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
	}}
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil && owner.Plausible(*ref) {
		// One no object has is owner's no controller.
		slim.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	if v, ok := pod.Annotations[owner.MirrorAnnotation]; ok {
		if len(v) > owner.MaxUID {
			v = v[:owner.MaxUID+1] // longer than a UID: it matches none
		}
		slim.Annotations = map[string]string{owner.MirrorAnnotation: v}
	}
	return slim, nil
}

// WaitSynced waits up to timeout for the first LIST; false when it has
// not come (LivePod then asks the API server meanwhile).
func (n *NodePods) WaitSynced(ctx context.Context, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return cache.WaitForCacheSync(ctx.Done(), n.informer.HasSynced)
}

// Counts are the pods served from the watch and the GETs made instead.
func (n *NodePods) Counts() (hits, misses int64) { return n.hits.Load(), n.misses.Load() }

// LivePod is LivePod served from the node's watch when it holds the
// finding's pod; a pod it has not seen (just created, or not on this
// node) or another pod under the name is asked of the API server, so the
// answer is never staler than a GET's.
func (n *NodePods) LivePod(ctx context.Context, want findings.Pod) (*corev1.Pod, error) {
	if n.informer.HasSynced() {
		obj, ok, err := n.informer.GetStore().GetByKey(want.Namespace + "/" + want.Name)
		if err == nil && ok {
			if pod := obj.(*corev1.Pod); string(pod.UID) == want.UID || pod.Annotations[owner.MirrorAnnotation] == want.UID {
				n.hits.Add(1)
				return pod, nil
			}
		}
	}
	n.misses.Add(1)
	return LivePod(ctx, n.client, want)
}
