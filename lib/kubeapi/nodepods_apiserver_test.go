package kubeapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/owner"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// TestNodePodsKeepLittle: whoever creates a pod bound to the node writes
// its owner references and annotations, about a megabyte each if they
// like, and the node's pod watch keeps every pod listed: kept whole, a
// hundred such pods outgrew the forwarder's 128Mi limit at each start (a
// LIST, then the OOM kill, for good). A real kube-apiserver serves the
// pods; each kept is a few hundred bytes, with what owner reads: the
// controller reference of a plausible one, none for an implausible one,
// the mirror annotation's presence.
func TestNodePodsKeepLittle(t *testing.T) {
	c := kubetest.Start(t)
	cs := c.Client()
	ctx := kubetest.Ctx(t)
	kubetest.Namespace(t, cs, "shop")
	big := strings.Repeat("r", 1<<20)
	controller := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7c9", UID: "00000000-0000-0000-0000-0000000000f1", Controller: new(true)}
	other := metav1.OwnerReference{APIVersion: "example.com/v1", Kind: "Widget", Name: big, UID: "00000000-0000-0000-0000-0000000000f2"}
	huge := controller
	huge.Name = big
	for i, refs := range [][]metav1.OwnerReference{{other, controller}, {huge}, {other}} {
		annotations := map[string]string{"other": big[:50<<10]}
		if i == 2 {
			annotations[owner.MirrorAnnotation] = big[:200<<10]
		}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprintf("p%d", i), OwnerReferences: refs, Annotations: annotations},
			Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
		if _, err := cs.CoreV1().Pods("shop").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("the API server refused pod %s: %v", p.Name, err)
		}
	}
	n := WatchNodePods(ctx, cs, "node-a")
	if !n.WaitSynced(ctx, time.Minute) {
		t.Fatal("the node's pods not listed within a minute")
	}
	kept := n.informer.GetStore().List()
	if len(kept) != 3 {
		t.Fatalf("%d pods kept, want 3", len(kept))
	}
	for _, obj := range kept {
		pod := obj.(*corev1.Pod)
		b, err := json.Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 4<<10 {
			t.Errorf("pod %s kept in %d bytes, want at most 4 KiB", pod.Name, len(b))
		}
		want := 0
		if pod.Name == "p0" {
			want = 1
		}
		if len(pod.OwnerReferences) != want || want == 1 && pod.OwnerReferences[0].Name != "web-7c9" {
			t.Errorf("pod %s kept %d owner references, want %d (the controller's)", pod.Name, len(pod.OwnerReferences), want)
		}
		if _, ok := pod.Annotations[owner.MirrorAnnotation]; ok != (pod.Name == "p2") {
			t.Errorf("pod %s kept annotations %.100q", pod.Name, pod.Annotations)
		}
	}
	// Served from what was kept, as before: owner reads the controller
	// of p0, finds none in p1 (bare), and p2 a mirror pod.
	for _, obj := range kept {
		pod := obj.(*corev1.Pod)
		live, err := n.LivePod(ctx, findings.Pod{Namespace: "shop", Name: pod.Name, UID: string(pod.UID)})
		if err != nil {
			t.Fatalf("LivePod %s: %v", pod.Name, err)
		}
		o, err := owner.New(nil).Owned(ctx, live)
		want := map[string]owner.Owner{"p0": {Kind: "ReplicaSet", Name: "web-7c9"}, "p1": owner.Bare("p1"),
			"p2": {Kind: owner.KindStaticPod, Name: "p2"}}[pod.Name]
		if err != nil || o.Owner != want {
			t.Errorf("owner of %s: %.300s, %v; want %s", pod.Name, o.Owner, err, want)
		}
	}
	if hits, misses := n.Counts(); hits != 3 || misses != 0 {
		t.Errorf("%d pods served from the watch, %d asked for; want 3 and 0", hits, misses)
	}
}
