//go:build !hookonly

package main

import (
	"syscall"
	"testing"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// TestForwardNodeRecord (issue 19 item 2): the built forwarder, with the
// token packaging/rbac binds and without --node-event, posts an agent
// node-mode record's Event on the Node, once, and writes no Report for it
// (Reports are namespaced, per pod namespace; the node has none), while a
// pod's record after it still gets both.
func TestForwardNodeRecord(t *testing.T) {
	e := newFwdEnv(t)
	e.c.CRD(t, crdFile, openreportsv1alpha1.SchemeGroupVersion.String(), "reports")
	rc, err := versioned.NewForConfig(e.c.Config(e.c.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	kubetest.Namespace(t, e.cs, "shop")
	pod := kubetest.Pod(t, e.cs, "shop", "web", nil, "")
	node := findings.Record{Schema: findings.Schema, Time: findings.Now(), Node: "node-a", Subject: findings.SubjectNode, Source: "watch", Stage: "nftables commit",
		State: findings.StatePresent, Nft: findings.Nft{Tables: []string{"ip nat"}, Chains: 1, Rules: 1},
		Examples:    []findings.Example{{Family: "ip", Table: "nat", Chain: "POSTROUTING", Rule: "-A POSTROUTING -s 10.8.0.0/16 -j MASQUERADE"}},
		Fingerprint: "fp-node", Writer: &findings.Writer{PID: 9, Comm: "iptables-nft-re", Unit: "mesh.service"}}
	p := fwdRecord(pod, string(pod.UID), "fp-pod", "app")
	p.State = findings.StatePresent
	e.append(t, node, node, p)

	f := e.start(t)
	nodeEvents := func() []corev1.Event {
		evs, err := kubetest.Events(kubetest.Ctx(t), e.cs, "", "Node", "node-a", types.UID("node-a"))
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	waitForLong(t, "the pod's Report result", 60*time.Second, func() bool { return len(fwdResults(t, rc, "shop")) == 1 })
	e.waitDelivered(t, 30*time.Second, []*corev1.Pod{pod}, 1)
	evs := nodeEvents()
	if len(evs) != 1 || evs[0].Reason != events.Reason || evs[0].Annotations[events.SubjectAnnotation] != "node" {
		t.Fatalf("node events %+v, want the node record's one", evs)
	}
	list, err := rc.OpenreportsV1alpha1().Reports("").List(kubetest.Ctx(t), metav1.ListOptions{LabelSelector: openreports.Selector("")})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Namespace != "shop" {
		t.Errorf("%d Reports, want the pod's only", len(list.Items))
	}
	f.stop(t, syscall.SIGTERM)
}
