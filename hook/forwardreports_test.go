//go:build !hookonly && !agentonly

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

const crdFile = "../packaging/crds/openreports.io_reports.yaml"

// fwdMetrics is the forwarder's /metrics text.
func fwdMetrics(t *testing.T, addr string) string {
	t.Helper()
	_, body := fwdGet(t, addr, "/metrics")
	return body
}

// fwdGet is the status and body of GET path on the forwarder's addr.
func fwdGet(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// fwdResults maps pod name to the result of our Reports in namespace, and
// the Report's node label.
//
// A failed list is tried again, twice: the verdict is what the Reports
// hold, not one call (CI once saw a list hang for the client's 30 s while
// the forwarders' writes went on).
func fwdResults(t *testing.T, rc versioned.Interface, namespace string) map[string][2]string {
	t.Helper()
	var list *openreportsv1alpha1.ReportList
	var err error
	for try := 0; try < 3; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		list, err = rc.OpenreportsV1alpha1().Reports(namespace).List(ctx, metav1.ListOptions{LabelSelector: openreports.Selector("")})
		cancel()
		if err == nil {
			break
		}
		t.Logf("list Reports in %s (try %d of 3): %v", namespace, try+1, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]string{}
	for _, r := range list.Items {
		for _, x := range r.Results {
			pod, _ := openreports.PodSubject(x)
			out[pod.Name] = [2]string{string(x.Result), r.Labels[openreports.NodeLabel]}
		}
	}
	return out
}

// TestForwardReports runs two forwarders (nodes a and b) with a token
// bound only to packaging/rbac on one Deployment's pods at once: every
// pod's result lands in its node's Report, an unknown record is an error,
// and a gone record takes the result out.
func TestForwardReports(t *testing.T) {
	e := newFwdEnv(t)
	e.c.CRD(t, crdFile, openreportsv1alpha1.SchemeGroupVersion.String(), "reports")
	rc, err := versioned.NewForConfig(e.c.Config(e.c.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	kubetest.Namespace(t, e.cs, "shop")
	owned := kubetest.Workloads(t, e.cs, "shop")
	rs := owned["web-7c9-aaaaa"].Pod.OwnerReferences[0]
	ctx := kubetest.Ctx(t)

	b := &fwdEnv{c: e.c, cs: e.cs, kubeconfig: e.kubeconfig, findings: filepath.Join(t.TempDir(), "findings.jsonl"), state: filepath.Join(t.TempDir(), "state")}
	b.log = findings.Log{Path: b.findings}
	want := map[string][2]string{}
	var pods []*corev1.Pod
	for i := range 12 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-7c9-%02d", i), Namespace: "shop", OwnerReferences: []metav1.OwnerReference{rs}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
		got, err := e.cs.CoreV1().Pods("shop").Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, got)
		rec := fwdRecord(got, string(got.UID), "fp-"+got.Name, "app")
		rec.State, rec.Impact, rec.Worst = findings.StatePresent, findings.Impact{Xt: 5}, findings.ImpactXt
		env, node := e, "node-a"
		if i%2 == 1 {
			env, node = b, "node-b"
		}
		rec.Node = node
		env.append(t, rec)
		want[got.Name] = [2]string{"fail", node}
	}
	db := owned["db-0"].Pod
	unknown := fwdRecord(db, string(db.UID), "fp-db", "app")
	unknown.State, unknown.Nft, unknown.Examples, unknown.Error, unknown.Truncated = findings.StateUnknown, findings.Nft{}, nil, "inspect: deadline exceeded", true
	e.append(t, unknown)
	want[db.Name] = [2]string{"error", "node-a"}

	addr := nstest.FreeAddr(t)
	fa := e.start(t, "--health-addr", addr)
	fb := b.start(t, "--node-name", "node-b")
	waitForLong(t, "every result", 60*time.Second, func() bool { return len(fwdResults(t, rc, "shop")) == len(want) })
	if got := fwdResults(t, rc, "shop"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("results %v, want %v", got, want)
	}
	// The counter moves just after the write the test saw.
	waitForLong(t, "reports enabled and 7 written in /metrics", 30*time.Second, func() bool {
		m := fwdMetrics(t, addr)
		return strings.Contains(m, "iptables_alerter_forward_reports_enabled 1\n") && strings.Contains(m, `iptables_alerter_forward_reports_total{outcome="written"} 7`+"\n")
	})

	gone := fwdRecord(pods[0], string(pods[0].UID), "fp-gone", "app")
	gone.State, gone.Nft, gone.Examples = findings.StateGone, findings.Nft{}, nil
	e.append(t, gone)
	delete(want, pods[0].Name)
	waitForLong(t, "the gone pod's result removed", 60*time.Second, func() bool { return len(fwdResults(t, rc, "shop")) == len(want) })
	if got := fwdResults(t, rc, "shop"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after gone: results %v, want %v", got, want)
	}
	fa.stop(t, syscall.SIGTERM)
	fb.stop(t, syscall.SIGTERM)
}

// TestForwardNoCRD: without the Report CRD the forwarder posts Events,
// says so once and its metric says Reports are off.
func TestForwardNoCRD(t *testing.T) {
	e := newFwdEnv(t)
	kubetest.Namespace(t, e.cs, "shop")
	pod := kubetest.Pod(t, e.cs, "shop", "cart", nil, "")
	e.append(t, fwdRecord(pod, string(pod.UID), "fp-cart", "app"))
	addr := nstest.FreeAddr(t)
	f := e.start(t, "--health-addr", addr)
	e.waitDelivered(t, 30*time.Second, []*corev1.Pod{pod}, 1)
	const msg = "the API serves no OpenReports Reports (openreports.io/v1alpha1 CRD missing; kubectl apply -k packaging/crds): posting Events only, looking again every 1m0s"
	if n := len(f.entries(msg)); n != 1 {
		t.Errorf("%d CRD-missing log lines, want 1:\n%s", n, f.text())
	}
	if m := fwdMetrics(t, addr); !strings.Contains(m, "iptables_alerter_forward_reports_enabled 0\n") {
		t.Errorf("/metrics lacks reports enabled 0:\n%s", m)
	}
	f.stop(t, syscall.SIGTERM)
}
