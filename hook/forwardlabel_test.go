//go:build !hookonly && !agentonly

package main

import (
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/nodemark"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

const nodeLabelRBAC = "../packaging/rbac/node-label.yaml"

// boundToken is a token of the forwarder's service account bound to a pod
// of it, name, on node, as the kubelet projects it: kube-apiserver adds the node
// claim (authentication.kubernetes.io/node-name).
func boundToken(t *testing.T, cs kubernetes.Interface, name, node string) string {
	t.Helper()
	ctx := kubetest.Ctx(t)
	pod, err := cs.CoreV1().Pods(fwdNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: fwdNS},
		Spec: corev1.PodSpec{ServiceAccountName: fwdSA, NodeName: node, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "forward", Image: "registry.example/iptables-alerter:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	exp := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(fwdNS).CreateToken(ctx, fwdSA, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &exp,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

func labelPatch(value string) []byte {
	return []byte(`{"metadata":{"labels":{"` + nodemark.DefaultLabel + `":"` + value + `"}}}`)
}

// TestForwardNodeLabel (issue 29 item 4): with packaging/rbac's
// forward.yaml and node-label.yaml on a real kube-apiserver, the
// forwarder's service account, through a token bound to a pod on node-a,
// may set only iptables-alerter.io/rhel10, only to a known value, only on
// node-a: node-b's forwarder cannot clear node-a's mark, a token without
// a node claim labels nothing, and nothing else of a Node moves; RBAC
// grants no other call on nodes. Then the built forwarder keeps node-a's
// label from the node's and its pods' records, worst first, across a
// restart.
func TestForwardNodeLabel(t *testing.T) {
	e := newFwdEnv(t)
	kubetest.Apply(t, e.cs, nodeLabelRBAC)
	// A minute for each call, not one for the test: it waits on policies
	// and two forwarders.
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := e.cs.CoreV1().Nodes().Create(kubetest.Ctx(t), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"team": "x"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	client := func(token string) kubernetes.Interface {
		cs, err := kubernetes.NewForConfig(e.c.Config(token))
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	a, b := client(boundToken(t, e.cs, "forward-a", "node-a")), client(boundToken(t, e.cs, "forward-b", "node-b"))
	unbound := client(kubetest.Token(t, e.cs, fwdNS, fwdSA))
	patch := func(cs kubernetes.Interface, node string, typ types.PatchType, body string) error {
		_, err := cs.CoreV1().Nodes().Patch(kubetest.Ctx(t), node, typ, []byte(body), metav1.PatchOptions{})
		return err
	}
	// The policy takes effect a moment after it is created.
	waitForLong(t, "the node label policy refusing node-b's forwarder on node-a", 60*time.Second, func() bool {
		return apierrors.IsForbidden(patch(b, "node-a", types.MergePatchType, string(labelPatch(nodemark.Breaks))))
	})
	if err := patch(a, "node-a", types.MergePatchType, string(labelPatch(nodemark.Breaks))); err != nil {
		t.Fatalf("node-a's forwarder labelling node-a: %v", err)
	}
	refused := []struct {
		what string
		cs   kubernetes.Interface
		node string
		typ  types.PatchType
		body string
	}{
		{"node-b's forwarder clearing node-a's mark", b, "node-a", types.MergePatchType, string(labelPatch(nodemark.Ready))},
		{"node-a's forwarder marking node-b", a, "node-b", types.MergePatchType, string(labelPatch(nodemark.Breaks))},
		{"a token bound to no node", unbound, "node-a", types.MergePatchType, string(labelPatch(nodemark.Ready))},
		{"another label", a, "node-a", types.MergePatchType, `{"metadata":{"labels":{"team":"y"}}}`},
		{"another label removed", a, "node-a", types.MergePatchType, `{"metadata":{"labels":{"team":null}}}`},
		{"an unknown value", a, "node-a", types.MergePatchType, string(labelPatch("fine"))},
		{"an annotation", a, "node-a", types.MergePatchType, `{"metadata":{"annotations":{"x":"y"}}}`},
		{"cordoning", a, "node-a", types.MergePatchType, `{"spec":{"unschedulable":true}}`},
		{"a taint", a, "node-a", types.MergePatchType, `{"spec":{"taints":[{"key":"x","effect":"NoSchedule"}]}}`},
	}
	for _, r := range refused {
		if err := patch(r.cs, r.node, r.typ, r.body); err == nil {
			t.Errorf("%s: admitted", r.what)
		}
	}
	n, err := e.cs.CoreV1().Nodes().Get(kubetest.Ctx(t), "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// (The API server's own admission adds a not-ready taint.)
	if n.Labels[nodemark.DefaultLabel] != nodemark.Breaks || n.Labels["team"] != "x" || n.Spec.Unschedulable ||
		slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == "x" }) || len(n.Annotations) > 0 {
		t.Errorf("node-a after the refused patches: labels %v, annotations %v, spec %+v", n.Labels, n.Annotations, n.Spec)
	}
	// RBAC: patch of nodes and nothing more.
	for _, ra := range []authorizationv1.ResourceAttributes{
		{Verb: "get", Resource: "nodes"}, {Verb: "list", Resource: "nodes"}, {Verb: "update", Resource: "nodes"},
		{Verb: "delete", Resource: "nodes"}, {Verb: "create", Resource: "nodes"}, {Verb: "patch", Resource: "nodes", Subresource: "status"},
	} {
		r, err := a.AuthorizationV1().SelfSubjectAccessReviews().Create(kubetest.Ctx(t), &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ra}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed {
			t.Errorf("the forwarder may %s nodes/%s", ra.Verb, ra.Subresource)
		}
	}

	// The built forwarder, with node-a's bound token.
	e.kubeconfig = e.c.Kubeconfig("forward-a", boundToken(t, e.cs, "forward-a2", "node-a"))
	kubetest.Namespace(t, e.cs, "shop")
	pod := kubetest.Pod(t, e.cs, "shop", "web", nil, "")
	label := func() string {
		n, err := e.cs.CoreV1().Nodes().Get(kubetest.Ctx(t), "node-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Labels[nodemark.DefaultLabel]
	}
	want := func(f *fwdProc, v string) {
		t.Helper()
		waitForLong(t, "label "+v, 30*time.Second, func() bool { return label() == v })
	}
	podXt := fwdRecord(pod, string(pod.UID), "fp-pod", "app")
	podXt.State, podXt.Impact, podXt.Worst = findings.StatePresent, findings.Impact{Xt: 5}, findings.ImpactXt
	node := findings.Record{Schema: findings.Schema, Time: findings.Now(), Node: "node-a", Subject: findings.SubjectNode, Source: "sweep",
		State: findings.StatePresent, Legacy: findings.Legacy{Tables: []string{"ip filter"}, Rules: 1}, Impact: findings.Impact{Legacy: 1}, Worst: findings.ImpactLegacy,
		Fingerprint: "fp-node"}
	gone := func(r findings.Record) findings.Record {
		r.State, r.Nft, r.Legacy, r.Impact, r.Worst, r.Examples = findings.StateGone, findings.Nft{}, findings.Legacy{}, findings.Impact{}, "", nil
		return r
	}
	// No word from the agent (findings.Swept), no findings file: nobody
	// looked at the node, and no finding says nothing. (Failed before the
	// marker read the agent's word: ready.)
	f := e.start(t)
	want(f, nodemark.Unknown)
	keepSwept(t, e.findings, "node-a")
	e.append(t, podXt)
	want(f, nodemark.NeedsExtra)
	e.append(t, node)
	want(f, nodemark.Breaks)
	f.stop(t, syscall.SIGTERM)
	// A restart resumes after the checkpoint: the levels seen before it
	// stay (the state file), so the node's gone record leaves the pod's.
	e.append(t, gone(node))
	f = e.start(t)
	want(f, nodemark.NeedsExtra)
	e.append(t, gone(podXt))
	want(f, nodemark.Ready)
	for _, l := range strings.Split(f.text(), "\n") {
		if strings.Contains(l, "could not label the node") {
			t.Errorf("a refused patch: %s", l)
		}
	}
	f.stop(t, syscall.SIGTERM)
}

// TestForwardNodeLabelReplay: the label turned on for a forwarder that
// already has a checkpoint (or whose label state was lost) reads the
// findings again before labelling: the legacy pod handled while the label
// was off makes the node breaks, not ready.
func TestForwardNodeLabelReplay(t *testing.T) {
	e := newFwdEnv(t)
	kubetest.Apply(t, e.cs, nodeLabelRBAC)
	if _, err := e.cs.CoreV1().Nodes().Create(kubetest.Ctx(t), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.kubeconfig = e.c.Kubeconfig("forward-a", boundToken(t, e.cs, "forward-a", "node-a"))
	kubetest.Namespace(t, e.cs, "shop")
	pod := kubetest.Pod(t, e.cs, "shop", "web", nil, "")
	legacy := fwdRecord(pod, string(pod.UID), "fp-legacy", "app")
	legacy.State, legacy.Nft, legacy.Legacy = findings.StatePresent, findings.Nft{}, findings.Legacy{Tables: []string{"ip filter"}, Rules: 3}
	legacy.Impact, legacy.Worst = findings.Impact{Legacy: 3}, findings.ImpactLegacy
	e.append(t, legacy)
	f := e.start(t, "--node-label=")
	e.waitDelivered(t, 30*time.Second, []*corev1.Pod{pod}, 1)
	f.stop(t, syscall.SIGTERM)

	f = e.start(t)
	waitForLong(t, "label breaks", 30*time.Second, func() bool {
		n, err := e.cs.CoreV1().Nodes().Get(kubetest.Ctx(t), "node-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Labels[nodemark.DefaultLabel] == nodemark.Breaks
	})
	f.stop(t, syscall.SIGTERM)
}

// keepSwept writes the agent's word that it looked at every pod beside
// the findings, as the agent does, until the test ends.
func keepSwept(t *testing.T, findingsPath, node string) {
	t.Helper()
	since := time.Now()
	write := func() {
		now := time.Now()
		if err := findings.WriteSwept(findings.SweptPath(findingsPath), findings.Swept{Node: node, Since: since, Until: now.Add(findings.SweptValid)}); err != nil {
			t.Error(err)
		}
	}
	write()
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Second):
				write()
			}
		}
	}()
	t.Cleanup(func() { close(done); <-ended })
}
