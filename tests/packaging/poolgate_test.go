package packaging

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// warnings keeps the API server's Warning headers.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

var mcpGVR = schema.GroupVersionResource{Group: "machineconfiguration.openshift.io", Version: "v1", Resource: "machineconfigpools"}

// TestPoolGate (issue 29 item 4): packaging/pool-gate's policy on a real
// kube-apiserver with openshift/api's MachineConfigPool CRD: moving a pool
// to a RHEL 10 stream warns while a node its spec.nodeSelector selects
// (matchLabels or matchExpressions) carries iptables-alerter.io/rhel10=breaks,
// and only then: not another pool, not another stream, not a pool already
// on the stream, not once the node is ready; a pool on the stream whose
// new selector takes a breaking node in warns too; with the binding
// switched to Deny the move is refused.
func TestPoolGate(t *testing.T) {
	crd := filepath.Join(repo(t), "..", "shared", "openshift-api", "v1-0000_80_machine-config_01_machineconfigpools.crd.yaml")
	_, err := os.Stat(crd)
	nstest.Need(t, err == nil, "openshift/api's MachineConfigPool CRD in ../shared/openshift-api")
	c := kubetest.Start(t)
	c.CRD(t, crd, "machineconfiguration.openshift.io/v1", "machineconfigpools")
	cs := c.Client()
	kubetest.Apply(t, cs, filepath.Join(repo(t), "packaging", "pool-gate", "policy.yaml"))
	// A minute for each call, not one for the test: the waits for each
	// policy change to take effect run on a loaded machine's time.

	node := func(name, role, mark string) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"node-role.kubernetes.io/" + role: ""}}}
		if mark != "" {
			n.Labels["iptables-alerter.io/rhel10"] = mark
		}
		if _, err := cs.CoreV1().Nodes().Create(kubetest.Ctx(t), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	node("w1", "worker", "ready")
	node("w2", "worker", "breaks")
	node("i1", "infra", "ready")
	node("g1", "gpu", "needs-extra")
	node("e1", "edge", "") // no forwarder labelled it

	dyn, warned := warnedClient(t, c)
	pools := dyn.Resource(mcpGVR)
	pool := func(name string, selector map[string]any, stream string) {
		spec := map[string]any{"nodeSelector": selector}
		if stream != "" {
			spec["osImageStream"] = map[string]any{"name": stream}
		}
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
			"metadata": map[string]any{"name": name}, "spec": spec}}
		if _, err := pools.Create(kubetest.Ctx(t), obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pool %s: %v", name, err)
		}
	}
	role := func(r string) map[string]any {
		return map[string]any{"matchLabels": map[string]any{"node-role.kubernetes.io/" + r: ""}}
	}
	pool("worker", role("worker"), "")
	pool("infra", role("infra"), "")
	pool("gpu", map[string]any{"matchExpressions": []any{map[string]any{"key": "node-role.kubernetes.io/gpu", "operator": "Exists"}}}, "")
	pool("worker-rhel10", role("worker"), "rhel10-coreos")
	pool("edge", role("edge"), "")
	warned.take()

	// move is a dry-run update of the pool's stream: admission runs, nothing
	// changes. It returns the warnings and the error.
	move := func(name, stream string) ([]string, error) {
		p, err := pools.Get(kubetest.Ctx(t), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedField(p.Object, stream, "spec", "osImageStream", "name"); err != nil {
			t.Fatal(err)
		}
		warned.take()
		_, err = pools.Update(kubetest.Ctx(t), p, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return warned.take(), err
	}
	mentions := func(ws []string, node string) bool {
		for _, w := range ws {
			if strings.Contains(w, "iptables-alerter-pool-gate") && strings.Contains(w, "rhel10-coreos") &&
				(strings.Contains(w, "node "+node+" ") || strings.Contains(w, "node "+node+",")) {
				return true
			}
		}
		return false
	}
	// The policy and its params take a moment to reach admission.
	deadline := time.Now().Add(time.Minute)
	for {
		ws, err := move("worker", "rhel10-coreos")
		if err != nil {
			t.Fatalf("warn binding refused the move: %v", err)
		}
		if mentions(ws, "w2") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no warning for worker's move with w2 breaking after a minute: %q", ws)
		}
		time.Sleep(200 * time.Millisecond)
	}
	quiet := []struct{ what, pool, stream string }{
		{"another pool (infra)", "infra", "rhel10-coreos"},
		{"a pool by matchExpressions with no breaking node", "gpu", "rhel10-coreos"},
		{"another stream", "worker", "rhel-9.6"},
		{"a pool already on the stream", "worker-rhel10", "rhel10-coreos"},
		{"a pool whose node has no label (the binding as shipped)", "edge", "rhel10-coreos"},
	}
	for _, q := range quiet {
		ws, err := move(q.pool, q.stream)
		if err != nil || len(ws) > 0 {
			t.Errorf("%s: warnings %q, error %v", q.what, ws, err)
		}
	}
	// A pool pinned to RHEL 9 that drops its own stream follows the
	// cluster default, which may be RHEL 10: a move (it was not seen).
	// Naming another RHEL 9 stream is none.
	pool("pinned", role("worker"), "rhel-9.6")
	unpin := func() ([]string, error) {
		p, err := pools.Get(kubetest.Ctx(t), "pinned", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		unstructured.RemoveNestedField(p.Object, "spec", "osImageStream")
		warned.take()
		_, err = pools.Update(kubetest.Ctx(t), p, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return warned.take(), err
	}
	if ws, err := unpin(); err != nil || !slices.ContainsFunc(ws, func(w string) bool {
		return strings.Contains(w, "drops its own OS stream rhel-9.6") && strings.Contains(w, "node w2 is")
	}) {
		t.Errorf("pinned (rhel-9.6) un-pinned, w2 breaking: warnings %q, error %v", ws, err)
	}
	if ws, err := move("pinned", "rhel-9.7"); err != nil || len(ws) > 0 {
		t.Errorf("pinned moved to another RHEL 9 stream: warnings %q, error %v", ws, err)
	}
	// A pool already on the stream whose selector comes to take a
	// breaking node in (a canary widened) warns; one whose new selector
	// takes none in does not. (Failed before the policy compared the
	// selector with the old one: the stream unchanged, it said nothing.)
	pool("canary", map[string]any{"matchLabels": map[string]any{"canary": "yes"}}, "rhel10-coreos")
	reselect := func(name string, selector map[string]any) ([]string, error) {
		p, err := pools.Get(kubetest.Ctx(t), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedMap(p.Object, selector, "spec", "nodeSelector"); err != nil {
			t.Fatal(err)
		}
		warned.take()
		_, err = pools.Update(kubetest.Ctx(t), p, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return warned.take(), err
	}
	if ws, err := reselect("canary", role("worker")); err != nil || !mentions(ws, "w2") {
		t.Errorf("canary on rhel10-coreos widened to the workers, w2 breaking: warnings %q, error %v", ws, err)
	}
	// An empty selector selects no node, as the machine-config operator
	// reads it.
	if ws, err := reselect("canary", map[string]any{}); err != nil || len(ws) > 0 {
		t.Errorf("canary's selector emptied: warnings %q, error %v", ws, err)
	}
	narrowed := map[string]any{"matchLabels": map[string]any{"node-role.kubernetes.io/worker": "", "canary": "yes"}}
	if ws, err := reselect("worker-rhel10", narrowed); err != nil || len(ws) > 0 {
		t.Errorf("worker-rhel10 narrowed: warnings %q, error %v", ws, err)
	}
	// A breaking node selected by matchExpressions.
	setMark(t, cs, "g1", "breaks")
	waitWarn := func(what, pool, node string, want bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			ws, err := move(pool, "rhel10-coreos")
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if mentions(ws, node) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: warnings %q after a minute", what, ws)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitWarn("gpu pool with g1 breaking", "gpu", "g1", true)

	// Deny, as docs/pool-gate.md says to switch it.
	denyBinding(t, cs)
	waitDenied(t, func() error { _, err := move("worker", "rhel10-coreos"); return err })
	if _, err := move("infra", "rhel10-coreos"); err != nil {
		t.Errorf("deny binding refused infra's move: %v", err)
	}
	// w2 ready: the worker pool may move.
	setMark(t, cs, "w2", "ready")
	deadline = time.Now().Add(time.Minute)
	for {
		_, err := move("worker", "rhel10-coreos")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker's move still refused with every node ready: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The stricter binding docs/pool-gate.md gives: every node not
	// labelled ready gates, unknown, needs-extra and unlabelled alike, and
	// the message names the mark or says there is none.
	b, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(kubetest.Ctx(t), "iptables-alerter-pool-gate", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn}
	b.Spec.ParamRef.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "iptables-alerter.io/rhel10", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"ready"}}}}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Update(kubetest.Ctx(t), b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	setMark(t, cs, "i1", "unknown")
	waitWarn("infra with i1 unknown, the stricter binding", "infra", "i1", true)
	if ws, _ := move("infra", "rhel10-coreos"); !slices.ContainsFunc(ws, func(w string) bool {
		return strings.Contains(w, "iptables-alerter.io/rhel10=unknown: not everything on it was seen")
	}) {
		t.Errorf("the stricter binding's warning for i1: %q", ws)
	}
	if ws, err := move("edge", "rhel10-coreos"); err != nil || !slices.ContainsFunc(ws, func(w string) bool {
		return strings.Contains(w, "while its node e1 has no iptables-alerter.io/rhel10 label: no check of it was seen")
	}) {
		t.Errorf("the stricter binding, e1 not labelled: warnings %q, error %v", ws, err)
	}

	// As docs/pool-gate.md says: a node with the worker and infra roles
	// is managed by the infra pool (a custom pool takes it from worker),
	// yet the worker pool's selector selects it, and the policy, seeing
	// one pool at a time, cannot tell: moving worker warns of it too.
	node("wi", "worker", "breaks")
	setRole(t, cs, "wi", "infra")
	waitWarn("worker with wi (worker and infra) breaking", "worker", "wi", true)
}

func setRole(t *testing.T, cs kubernetes.Interface, node, role string) {
	t.Helper()
	setLabel(t, cs, node, "node-role.kubernetes.io/"+role, "")
}

func setMark(t *testing.T, cs kubernetes.Interface, node, mark string) {
	t.Helper()
	setLabel(t, cs, node, "iptables-alerter.io/rhel10", mark)
}

// setLabel sets a label of node.
func setLabel(t *testing.T, cs kubernetes.Interface, node, key, value string) {
	t.Helper()
	ctx := context.Background()
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels[key] = value
	if _, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitDenied waits until try is refused by the policy (Forbidden), for a
// minute.
func waitDenied(t *testing.T, try func() error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := try()
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "iptables-alerter-pool-gate") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not refused after a minute: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

var osImageStreamGVR = schema.GroupVersionResource{Group: "machineconfiguration.openshift.io", Version: "v1", Resource: "osimagestreams"}

// TestPoolGateDefaultStream: packaging/pool-gate's policy on a real
// kube-apiserver with openshift/api's OSImageStream CRD: moving the
// cluster default stream (spec.defaultStream of the OSImageStream named
// cluster, which every pool without its own stream follows) to a RHEL 10
// stream warns while any node the binding selects is labelled breaks, and
// is refused with the binding switched to Deny; a default moved to
// another stream, an update that leaves the default alone, or a move with
// every node ready passes. The same on v1alpha1. (Failed before the policy
// matched osimagestreams: the default moved every such pool with no
// warning.)
func TestPoolGateDefaultStream(t *testing.T) {
	dir := filepath.Join(repo(t), "..", "shared", "openshift-api")
	crd := filepath.Join(dir, "v1-0000_80_machine-config_01_osimagestreams.crd.yaml")
	_, err := os.Stat(crd)
	nstest.Need(t, err == nil, "openshift/api's OSImageStream CRD in ../shared/openshift-api")
	c := kubetest.Start(t)
	c.CRD(t, filepath.Join(dir, "v1-0000_80_machine-config_01_machineconfigpools.crd.yaml"), "machineconfiguration.openshift.io/v1", "machineconfigpools")
	c.CRD(t, crd, "machineconfiguration.openshift.io/v1", "osimagestreams")
	cs := c.Client()
	kubetest.Apply(t, cs, filepath.Join(repo(t), "packaging", "pool-gate", "policy.yaml"))
	for name, mark := range map[string]string{"w1": "ready", "w2": "breaks"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"node-role.kubernetes.io/worker": "", "iptables-alerter.io/rhel10": mark}}}
		if _, err := cs.CoreV1().Nodes().Create(kubetest.Ctx(t), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dyn, warned := warnedClient(t, c)

	// The singleton as the machine-config operator leaves it: the default
	// on RHEL 9, the streams it found in its status.
	version := "v1"
	streams := func() dynamic.ResourceInterface {
		gvr := osImageStreamGVR
		gvr.Version = version
		return dyn.Resource(gvr)
	}
	object := func(def string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "machineconfiguration.openshift.io/" + version, "kind": "OSImageStream",
			"metadata": map[string]any{"name": "cluster"}, "spec": map[string]any{"defaultStream": def}}}
	}
	image := func(name string) string {
		return "quay.io/openshift-release-dev/" + name + "@sha256:" + strings.Repeat("ab", 32)
	}
	create := func() {
		t.Helper()
		obj, err := streams().Create(kubetest.Ctx(t), object("rhel-9.6"), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create OSImageStream cluster (%s): %v", version, err)
		}
		var available []any
		for _, s := range []string{"rhel-9.6", "rhel-9.8", "rhel10-coreos"} {
			available = append(available, map[string]any{"name": s, "osImage": image("os-" + s), "osExtensionsImage": image("ext-" + s)})
		}
		obj.Object["status"] = map[string]any{"defaultStream": "rhel-9.6", "availableStreams": available}
		if _, err := streams().UpdateStatus(kubetest.Ctx(t), obj, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("OSImageStream cluster's status (%s): %v", version, err)
		}
	}
	create()
	warned.take()

	// setDefault updates spec.defaultStream (a dry run unless real): it
	// returns the warnings and the error.
	setDefault := func(def string, real bool) ([]string, error) {
		t.Helper()
		obj, err := streams().Get(kubetest.Ctx(t), "cluster", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedField(obj.Object, def, "spec", "defaultStream"); err != nil {
			t.Fatal(err)
		}
		opts := metav1.UpdateOptions{}
		if !real {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		warned.take()
		_, err = streams().Update(kubetest.Ctx(t), obj, opts)
		return warned.take(), err
	}
	mentions := func(ws []string, node string) bool {
		return slices.ContainsFunc(ws, func(w string) bool {
			return strings.Contains(w, "iptables-alerter-pool-gate") && strings.Contains(w, "cluster default OS stream") &&
				strings.Contains(w, "rhel10-coreos") && strings.Contains(w, "node "+node+" ")
		})
	}
	waitWarn := func(what string, try func() ([]string, error), node string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			ws, err := try()
			if err != nil {
				t.Fatalf("%s: warn binding refused it: %v", what, err)
			}
			if mentions(ws, node) {
				if mentions(ws, "w1") {
					t.Errorf("%s: ready node w1 named: %q", what, ws)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no warning naming %s after a minute: %q", what, node, ws)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// The policy and its params take a moment to reach admission.
	waitWarn("default to rhel10-coreos, w2 breaking", func() ([]string, error) { return setDefault("rhel10-coreos", false) }, "w2")
	if ws, err := setDefault("rhel-9.8", false); err != nil || len(ws) > 0 {
		t.Errorf("default to another stream: warnings %q, error %v", ws, err)
	}
	// Moved for real (warned), then an update that leaves the default
	// alone says nothing.
	if ws, err := setDefault("rhel10-coreos", true); err != nil || !mentions(ws, "w2") {
		t.Fatalf("default to rhel10-coreos for real: warnings %q, error %v", ws, err)
	}
	obj, err := streams().Get(kubetest.Ctx(t), "cluster", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	obj.SetLabels(map[string]string{"touched": "yes"})
	warned.take()
	_, err = streams().Update(kubetest.Ctx(t), obj, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	if ws := warned.take(); err != nil || len(ws) > 0 {
		t.Errorf("default already rhel10-coreos, a label changed: warnings %q, error %v", ws, err)
	}
	// Created with a RHEL 10 default: the same.
	if err := streams().Delete(kubetest.Ctx(t), "cluster", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	warned.take()
	_, err = streams().Create(kubetest.Ctx(t), object("rhel10-coreos"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if ws := warned.take(); err != nil || !mentions(ws, "w2") {
		t.Errorf("created with the default rhel10-coreos, w2 breaking: warnings %q, error %v", ws, err)
	}
	create()

	// Deny, as docs/pool-gate.md says to switch it: the one binding gates
	// pools and the default alike.
	denyBinding(t, cs)
	waitDenied(t, func() error { _, err := setDefault("rhel10-coreos", false); return err })
	if _, err := setDefault("rhel-9.8", false); err != nil {
		t.Errorf("deny binding refused the default to another stream: %v", err)
	}
	// Every node ready: the default may move.
	setMark(t, cs, "w2", "ready")
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := setDefault("rhel10-coreos", false)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the default's move still refused with every node ready: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The v1alpha1 OSImageStream (its defaultStream optional), on a
	// cluster that serves that one.
	setMark(t, cs, "w2", "breaks")
	c.RemoveCRD(t, "osimagestreams.machineconfiguration.openshift.io", "machineconfiguration.openshift.io/v1", "osimagestreams")
	version = "v1alpha1"
	c.CRD(t, filepath.Join(dir, "v1alpha1-0000_80_machine-config_01_osimagestreams.crd.yaml"), "machineconfiguration.openshift.io/v1alpha1", "osimagestreams")
	create()
	waitDenied(t, func() error { _, err := setDefault("rhel10-coreos", false); return err })
	if _, err := setDefault("rhel-9.8", false); err != nil {
		t.Errorf("v1alpha1: deny binding refused the default to another stream: %v", err)
	}
}

// denyBinding switches the shipped binding to Deny, as
// docs/pool-gate.md says to.
func denyBinding(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	b, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(kubetest.Ctx(t), "iptables-alerter-pool-gate", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Update(kubetest.Ctx(t), b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// warnedClient is a dynamic client of the admin whose warnings the test
// reads.
func warnedClient(t *testing.T, c *kubetest.Cluster) (dynamic.Interface, *warnings) {
	t.Helper()
	rc := c.Config(c.AdminToken)
	warned := &warnings{}
	rc.WarningHandler = warned
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return dyn, warned
}
