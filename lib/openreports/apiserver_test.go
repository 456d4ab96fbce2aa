package openreports_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// crdPath is the shipped copy of the module's Report CRD, clusterCRDPath
// its ClusterReport CRD.
var (
	crdPath        = filepath.Join("..", "..", "packaging", "crds", "openreports.io_reports.yaml")
	clusterCRDPath = filepath.Join("..", "..", "packaging", "crds", "openreports.io_clusterreports.yaml")
)

// TestShippedCRD checks packaging/crds holds the module's CRDs unchanged
// (`make crds` copies them).
func TestShippedCRD(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/openreports/reports-api").Output()
	if err != nil {
		t.Skipf("go list the module: %v", err)
	}
	for _, p := range []string{crdPath, clusterCRDPath} {
		want, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "config", "crd", filepath.Base(p)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the module's CRD: run make crds", p)
		}
	}
}

func record(pod *corev1.Pod, state findings.State, legacy, xt, native int) findings.Record {
	rec := findings.Record{
		Schema: findings.Schema, Time: findings.Now(), ContainerID: "c-" + pod.Name, Container: "app",
		Pod:   findings.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)},
		State: state, Fingerprint: "fp-" + pod.Name,
	}
	if state == findings.StatePresent {
		rec.Impact = findings.Impact{Legacy: legacy, Xt: xt, Native: native}
		rec.Worst = rec.Impact.Worst()
		rec.Nft = findings.Nft{Tables: []string{"ip nat"}, Rules: xt + native}
		rec.Legacy = findings.Legacy{Rules: legacy}
		rec.Examples = []findings.Example{{Family: "ip", Table: "nat", Chain: "OUTPUT", Rule: "-A OUTPUT -p tcp -j REDIRECT --to-ports 15001", Impact: "xt"}}
		rec.Vendors = []findings.Vendor{{Name: "istio", Hint: "use the Istio CNI node agent", Doc: "https://istio.io/latest/docs/setup/additional-setup/cni/"}}
	} else {
		rec.Error = "inspect: deadline exceeded"
		rec.Truncated = true
	}
	return rec
}

// start gives an API server with the Report CRD, its clients and a
// namespace holding a Deployment's pods.
func start(t *testing.T) (*kubetest.Cluster, *versioned.Clientset, map[string]kubetest.Owned) {
	c := kubetest.Start(t)
	c.CRD(t, crdPath, openreportsv1alpha1.SchemeGroupVersion.String(), "reports")
	rc, err := versioned.NewForConfig(c.Config(c.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	kubetest.Namespace(t, c.Client(), "shop")
	return c, rc, kubetest.Workloads(t, c.Client(), "shop")
}

func get(t *testing.T, rc versioned.Interface, namespace, name string) *openreportsv1alpha1.Report {
	t.Helper()
	r, err := rc.OpenreportsV1alpha1().Reports(namespace).Get(kubetest.Ctx(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get report: %v", err)
	}
	return r
}

// TestWriteRealAPIServer writes through a real kube-apiserver with the
// module's CRD, so the API's schema (enums, required fields) judges the
// Reports.
func TestWriteRealAPIServer(t *testing.T) {
	c, rc, pods := start(t)
	ctx := kubetest.Ctx(t)
	web, db := pods["web-7c9-aaaaa"], pods["db-0"]
	if web.Pod == nil || db.Pod == nil {
		t.Fatalf("workload pods missing: %v", pods)
	}
	if ok, err := openreports.Available(ctx, rc); !ok || err != nil {
		t.Fatalf("Available = %v, %v", ok, err)
	}
	w := openreports.New(c.Client(), rc, "node-a")
	res, err := w.Write(ctx, record(web.Pod, findings.StatePresent, 2, 1, 0))
	if err != nil || res.Outcome != openreports.Written {
		t.Fatalf("Write = %+v, %v", res, err)
	}
	if res.Owner.Kind != "Deployment" || res.Owner.Name != "web" {
		t.Errorf("owner %v, want Deployment/web", res.Owner)
	}
	r := get(t, rc, "shop", res.Name)
	if len(r.Results) != 1 || r.Results[0].Result != "fail" || r.Results[0].Severity != "high" || r.Results[0].Rule != findings.ImpactLegacy {
		t.Fatalf("results %+v", r.Results)
	}
	x := r.Results[0]
	if !strings.HasPrefix(x.Description, findings.ImpactWords(findings.ImpactLegacy)) {
		t.Errorf("message does not lead with the impact: %q", x.Description)
	}
	for _, k := range []string{openreports.PropOwner, openreports.PropVendor, openreports.PropHint, openreports.PropDoc, openreports.PropPods, openreports.PropNodes, openreports.PropFirstSeen, openreports.PropLastSeen, openreports.PropExample + "1"} {
		if x.Properties[k] == "" {
			t.Errorf("property %q missing: %v", k, x.Properties)
		}
	}
	// The workload first (Policy Reporter's resource view files the
	// result under it), then the pod.
	if len(x.Subjects) != 2 || x.Subjects[0].Kind != "Deployment" || x.Subjects[0].Name != "web" || x.Subjects[0].UID == "" ||
		x.Subjects[1].Kind != "Pod" || x.Subjects[1].UID != web.Pod.UID {
		t.Errorf("subjects %+v", x.Subjects)
	}
	if r.Summary.Fail != 1 || r.Labels[openreports.ManagedByLabel] != openreports.ManagedBy {
		t.Errorf("summary %+v labels %v", r.Summary, r.Labels)
	}
	if len(r.OwnerReferences) != 1 || r.OwnerReferences[0].Kind != "Deployment" || r.OwnerReferences[0].BlockOwnerDeletion != nil || r.OwnerReferences[0].UID == "" {
		t.Errorf("owner references %+v", r.OwnerReferences)
	}

	// Seen again with native rules only: the one result is replaced, its
	// first sighting kept.
	first := x.Properties[openreports.PropFirstSeen]
	if _, err := w.Write(ctx, record(web.Pod, findings.StatePresent, 0, 0, 3)); err != nil {
		t.Fatal(err)
	}
	r = get(t, rc, "shop", res.Name)
	if len(r.Results) != 1 || r.Results[0].Result != "warn" || r.Results[0].Rule != findings.ImpactNative || r.Results[0].Properties[openreports.PropFirstSeen] != first {
		t.Fatalf("after native: %+v", r.Results)
	}

	// An inspection that could not finish is an error result.
	dres, err := w.Write(ctx, record(db.Pod, findings.StateUnknown, 0, 0, 0))
	if err != nil || dres.Outcome != openreports.Written {
		t.Fatalf("Write unknown = %+v, %v", dres, err)
	}
	if d := get(t, rc, "shop", dres.Name); len(d.Results) != 1 || d.Results[0].Result != "error" || d.Summary.Error != 1 {
		t.Fatalf("unknown: %+v", d.Results)
	}

	// Gone: the result is removed and the empty Report deleted.
	if g, err := w.Write(ctx, record(web.Pod, findings.StateGone, 0, 0, 0)); err != nil || g.Outcome != openreports.Removed {
		t.Fatalf("Write gone = %+v, %v", g, err)
	}
	if _, err := rc.OpenreportsV1alpha1().Reports("shop").Get(ctx, res.Name, metav1.GetOptions{}); err == nil {
		t.Errorf("report %s still there after its only pod's usage went", res.Name)
	}

	// A pod that is gone: nothing written.
	stale := record(web.Pod, findings.StatePresent, 1, 0, 0)
	stale.Pod.UID = "old"
	if g, err := w.Write(ctx, stale); err != nil || g.Outcome != openreports.PodGone {
		t.Fatalf("Write stale = %+v, %v", g, err)
	}
}

// TestTwoNodesOneWorkload runs two writers (two nodes' forwarders), each
// from two goroutines, on the pods of one workload at once: every result
// must be there.
func TestTwoNodesOneWorkload(t *testing.T) {
	c, rc, owned := start(t)
	// A minute for each call: about 100 of them on a loaded machine may
	// outlast one.
	cs := c.Client()
	rs := owned["web-7c9-aaaaa"].Pod.OwnerReferences[0]
	const perNode = 12
	var pods []*corev1.Pod
	for i := range 2 * perNode {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-7c9-%02d", i), Namespace: "shop", OwnerReferences: []metav1.OwnerReference{rs}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
		got, err := cs.CoreV1().Pods("shop").Create(kubetest.Ctx(t), p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, got)
	}
	nodes := []string{"node-a", "node-b"}
	var wg sync.WaitGroup
	errs := make(chan error, len(pods))
	for n, node := range nodes {
		w := openreports.New(cs, rc, node)
		for g := range 2 {
			wg.Go(func() {
				for i := n*perNode + g; i < (n+1)*perNode; i += 2 {
					if res, err := w.Write(kubetest.Ctx(t), record(pods[i], findings.StatePresent, 0, 1, 0)); err != nil || res.Outcome != openreports.Written {
						errs <- fmt.Errorf("%s: %+v, %v", pods[i].Name, res, err)
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	list, err := rc.OpenreportsV1alpha1().Reports("shop").List(kubetest.Ctx(t), metav1.ListOptions{LabelSelector: openreports.Selector("")})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, r := range list.Items {
		for _, x := range r.Results {
			pod, _ := openreports.PodSubject(x)
			seen[pod.Name] = r.Labels[openreports.NodeLabel]
		}
	}
	for i, p := range pods {
		if want := nodes[i/perNode]; seen[p.Name] != want {
			t.Errorf("pod %s: result in node %q's report, want %q", p.Name, seen[p.Name], want)
		}
	}
	if len(list.Items) != 2 {
		t.Errorf("%d reports, want one per node", len(list.Items))
	}
}

// TestBoundedReport writes more results than a Report keeps: the object
// stays small, the cut is counted and the summary says so.
func TestBoundedReport(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 150 pods")
	}
	c, rc, owned := start(t)
	// Unthrottled: 150 creates and 150 pod GETs at client-go's 5 a
	// second took a minute alone.
	cfg := c.Config(c.AdminToken)
	cfg.QPS = -1
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rs := owned["web-7c9-aaaaa"].Pod.OwnerReferences[0]
	w := openreports.New(cs, rc, "node-a")
	var name string
	const n = openreports.MaxResults + 50
	for i := range n {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-7c9-%03d", i), Namespace: "shop", OwnerReferences: []metav1.OwnerReference{rs}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
		// A minute a create, not for all 150: on a machine busy with
		// other work the loop took longer (the test's deadline bounds it).
		got, err := cs.CoreV1().Pods("shop").Create(kubetest.Ctx(t), p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rec := record(got, findings.StatePresent, 0, 0, 1)
		for range 50 {
			rec.Examples = append(rec.Examples, findings.Example{Family: "ip", Table: "nat", Rule: strings.Repeat("-A OUTPUT -m comment --comment x ", 30)})
		}
		res, err := w.Write(context.Background(), rec)
		if err != nil || res.Outcome != openreports.Written {
			t.Fatalf("Write %d = %+v, %v", i, res, err)
		}
		name = res.Name
	}
	r := get(t, rc, "shop", name)
	if len(r.Results) != openreports.MaxResults || r.Summary.Skip != 1 || r.Summary.Warn != openreports.MaxResults-1 {
		t.Errorf("%d results, summary %+v", len(r.Results), r.Summary)
	}
	if got, want := r.Annotations[openreports.CutAnnotation], fmt.Sprint(n-(openreports.MaxResults-1)); got != want {
		t.Errorf("cut annotation %q, want %q", got, want)
	}
	b, _ := json.Marshal(r)
	if len(b) > 700<<10 {
		t.Errorf("report is %d bytes", len(b))
	}
}

// calls counts the API requests of the clients it wraps, by verb and
// resource.
type calls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *calls) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTrip(func(r *http.Request) (*http.Response, error) {
		// .../namespaces/NS/RESOURCE[/NAME]
		parts := strings.Split(r.URL.Path, "/")
		resource := r.URL.Path
		for i, p := range parts {
			if p == "namespaces" && i+2 < len(parts) {
				resource = parts[i+2]
			}
		}
		c.mu.Lock()
		c.n[r.Method+" "+resource]++
		c.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

// wrappedClients are the admin's clients with every request going through
// wrap (counted, refused or failed by the test).
func wrappedClients(t *testing.T, c *kubetest.Cluster, wrap func(http.RoundTripper) http.RoundTripper) (kubernetes.Interface, versioned.Interface) {
	t.Helper()
	cfg := c.Config(c.AdminToken)
	cfg.WrapTransport = wrap
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs, rc
}

// take gives the counts since the last take or reset, and resets them.
func (c *calls) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

func (c *calls) reset() { c.take() }

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestWriteAfterPost (the forwarder's path): a finding's Report is written
// from the pod and owner its Event's post read, so the finding costs the
// Event's create, one pod GET, the owner's lookup, the list of the node's
// Reports (once a writer) and the Report's write, no more; the Report is the same as Write's.
func TestWriteAfterPost(t *testing.T) {
	c, _, owned := start(t)
	web := owned["web-7c9-aaaaa"].Pod
	ctx := kubetest.Ctx(t)
	counted := &calls{n: map[string]int{}}
	cs, rc := wrappedClients(t, c, counted.wrap)
	rec := record(web, findings.StatePresent, 0, 1, 0)
	posted, err := events.New(cs, "node-a", false).Post(ctx, rec)
	if err != nil || posted.Outcome != events.Created {
		t.Fatalf("Post = %+v, %v", posted, err)
	}
	res, err := openreports.New(cs, rc, "node-a").WriteAfter(ctx, rec, posted.Owned)
	if err != nil || res.Outcome != openreports.Written || res.Owner != posted.Owner {
		t.Fatalf("WriteAfter = %+v, %v; want written, owner %v", res, err, posted.Owner)
	}
	want := map[string]int{"POST events": 1, "GET pods": 1, "GET replicasets": 1, "GET " + listPath: 1, "POST reports": 1}
	if diff := cmp.Diff(want, counted.n); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}
	r := get(t, rc, "shop", res.Name)
	if len(r.OwnerReferences) != 1 || r.OwnerReferences[0].Kind != "Deployment" || r.OwnerReferences[0].Name != "web" ||
		len(r.Results) != 1 || r.Results[0].Subjects[1].UID != web.UID {
		t.Errorf("report owners %+v, results %+v", r.OwnerReferences, r.Results)
	}
}
