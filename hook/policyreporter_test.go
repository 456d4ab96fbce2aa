//go:build !hookonly && !agentonly

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
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

// policyReporterPath is the Policy Reporter binary
// tests/kube/build-policy-reporter.sh builds into the tools cache.
func policyReporterPath() string {
	cache := os.Getenv("IPTA_CACHE")
	if cache == "" {
		cache = "/var/cache/iptables-alerter"
	}
	return filepath.Join(cache, "policy-reporter", "bin", "policy-reporter")
}

// prResult is one result of Policy Reporter's v2 REST API (the fields
// its UI shows).
type prResult struct {
	Namespace  string            `json:"namespace"`
	Kind       string            `json:"kind"`
	Name       string            `json:"name"`
	Policy     string            `json:"policy"`
	Rule       string            `json:"rule"`
	Status     string            `json:"status"`
	Source     string            `json:"source"`
	Severity   string            `json:"severity"`
	Properties map[string]string `json:"properties"`
}

// prResource is one entry of its resource view.
type prResource struct {
	Namespace string         `json:"namespace"`
	Kind      string         `json:"kind"`
	Name      string         `json:"name"`
	Source    string         `json:"source"`
	Status    map[string]int `json:"status"`
}

// TestPolicyReporterListsForwarderReports runs Policy Reporter v3.9.0
// against the real kube-apiserver serving the CRDs of packaging/crds, with
// Reports the real forwarder wrote, and reads its REST API (what its UI
// shows): our results under our source, by namespace, policy and severity,
// each naming its pod, and the resource view holding one entry per
// workload that stays one entry when a rollout replaces the pods.
func TestPolicyReporterListsForwarderReports(t *testing.T) {
	_, err := os.Stat(policyReporterPath())
	nstest.Need(t, err == nil, "needs "+policyReporterPath()+" (run tests/kube/build-policy-reporter.sh)")
	e := newFwdEnv(t)
	gv := openreportsv1alpha1.SchemeGroupVersion.String()
	e.c.CRD(t, "../packaging/crds/openreports.io_reports.yaml", gv, "reports")
	e.c.CRD(t, "../packaging/crds/openreports.io_clusterreports.yaml", gv, "clusterreports")
	rc, err := versioned.NewForConfig(e.c.Config(e.c.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	// Each call gets its own minute: the whole runs behind Policy
	// Reporter's start and the forwarder's waits.
	kubetest.Namespace(t, e.cs, "shop")
	kubetest.Namespace(t, e.cs, "tools")
	owned := kubetest.Workloads(t, e.cs, "shop")
	rs := owned["web-7c9-aaaaa"].Pod.OwnerReferences[0]
	webPod := func(name string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", OwnerReferences: []metav1.OwnerReference{rs}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
		got, err := e.cs.CoreV1().Pods("shop").Create(kubetest.Ctx(t), p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	present := func(p *corev1.Pod, level string) findings.Record {
		rec := fwdRecord(p, string(p.UID), "fp-"+p.Name, "app")
		rec.State, rec.Worst = findings.StatePresent, level
		switch level {
		case findings.ImpactLegacy:
			rec.Impact = findings.Impact{Legacy: 2}
		case findings.ImpactXt:
			rec.Impact = findings.Impact{Xt: 5}
		default:
			rec.Impact = findings.Impact{Native: 5}
		}
		return rec
	}
	// p1 and p4 differ only by pod: Policy Reporter must keep both.
	p1, p2, p4 := webPod("web-7c9-p1"), webPod("web-7c9-p2"), webPod("web-7c9-p4")
	debug := kubetest.Pod(t, e.cs, "tools", "debug", nil, "")
	e.append(t, present(p1, findings.ImpactXt), present(p2, findings.ImpactLegacy), present(p4, findings.ImpactXt), present(debug, findings.ImpactNative))
	fwd := e.start(t)
	count := func() int {
		// Polled: a context per call, ended at once (kubetest.Ctx's end
		// at the test's).
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		list, err := rc.OpenreportsV1alpha1().Reports(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: openreports.Selector("")})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range list.Items {
			n += len(r.Results)
		}
		return n
	}
	waitForLong(t, "the forwarder's 4 results", 60*time.Second, func() bool { return count() == 4 })

	// A webhook target, as an admin's Slack or Teams: Policy Reporter
	// sends it each result whose resultID is new to its Report.
	var hookMu sync.Mutex
	var notified []prResult
	hookSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var x prResult
		if err := json.NewDecoder(r.Body).Decode(&x); err == nil {
			hookMu.Lock()
			notified = append(notified, x)
			hookMu.Unlock()
		}
	}))
	t.Cleanup(hookSrv.Close)
	notifiedOf := func(pod, rule string) bool {
		hookMu.Lock()
		defer hookMu.Unlock()
		return slices.ContainsFunc(notified, func(x prResult) bool {
			return x.Properties[openreports.PropPods] == pod && x.Rule == rule
		})
	}
	base := startPolicyReporter(t, e.c.Kubeconfig("policy-reporter", e.c.AdminToken), hookSrv.URL)
	get := func(path string, q url.Values, v any) {
		t.Helper()
		resp, err := http.Get(base + path + "?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	results := func(q url.Values) []prResult {
		t.Helper()
		var page struct {
			Items []prResult `json:"items"`
		}
		q.Set("sources", openreports.Source)
		get("/v2/namespace-scoped/results", q, &page)
		return page.Items
	}
	waitForLong(t, "Policy Reporter listing the 4 results", 90*time.Second, func() bool { return len(results(url.Values{})) == 4 })

	var sources, namespaces []string
	get("/v2/sources", url.Values{}, &sources)
	get("/v2/namespaces", url.Values{"sources": {openreports.Source}}, &namespaces)
	slices.Sort(namespaces)
	if !slices.Contains(sources, openreports.Source) || !slices.Equal(namespaces, []string{"shop", "tools"}) {
		t.Errorf("sources %v, namespaces %v", sources, namespaces)
	}
	// Each result: our policy, the level as rule, the verdict's status and
	// severity, filed under its workload with the pod named.
	want := map[string]prResult{
		"web-7c9-p1": {Namespace: "shop", Kind: "Deployment", Name: "web", Rule: "xt", Status: "fail", Severity: "medium"},
		"web-7c9-p2": {Namespace: "shop", Kind: "Deployment", Name: "web", Rule: "legacy", Status: "fail", Severity: "high"},
		"web-7c9-p4": {Namespace: "shop", Kind: "Deployment", Name: "web", Rule: "xt", Status: "fail", Severity: "medium"},
		"debug":      {Namespace: "tools", Kind: "Pod", Name: "debug", Rule: "native", Status: "warn", Severity: "low"},
	}
	for _, r := range results(url.Values{}) {
		pod := r.Properties[openreports.PropPods]
		w, ok := want[pod]
		w.Policy, w.Source = openreports.Policy, openreports.Source
		got := r
		got.Properties = nil
		if !ok || fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("result of pod %q: %+v, want %+v", pod, got, w)
		}
	}
	for _, tc := range []struct {
		q    url.Values
		pods []string
	}{
		{url.Values{"namespaces": {"shop"}}, []string{"web-7c9-p1", "web-7c9-p2", "web-7c9-p4"}},
		{url.Values{"severities": {"high"}}, []string{"web-7c9-p2"}},
		{url.Values{"policies": {openreports.Policy}, "namespaces": {"tools"}}, []string{"debug"}},
		{url.Values{"status": {"fail"}, "severities": {"medium"}}, []string{"web-7c9-p1", "web-7c9-p4"}},
	} {
		var pods []string
		for _, r := range results(tc.q) {
			pods = append(pods, r.Properties[openreports.PropPods])
		}
		slices.Sort(pods)
		if !slices.Equal(pods, tc.pods) {
			t.Errorf("results %v: pods %v, want %v", tc.q, pods, tc.pods)
		}
	}

	// The resource view: one entry for the Deployment, through a rollout
	// (p1 gone, p3 new).
	resources := func() []prResource {
		var page struct {
			Items []prResource `json:"items"`
		}
		get("/v2/namespace-scoped/resource-results", url.Values{"sources": {openreports.Source}, "namespaces": {"shop"}}, &page)
		return page.Items
	}
	if rs := resources(); len(rs) != 1 || rs[0].Kind != "Deployment" || rs[0].Name != "web" || rs[0].Status["fail"] != 3 {
		t.Errorf("resource view of shop: %+v, want Deployment web with 3 fail", rs)
	}
	gone := fwdRecord(p1, string(p1.UID), "fp-gone", "app")
	gone.State, gone.Nft, gone.Examples = findings.StateGone, findings.Nft{}, nil
	p3 := webPod("web-7c9-p3")
	e.append(t, gone, present(p3, findings.ImpactXt))
	waitForLong(t, "Policy Reporter showing the rollout", 90*time.Second, func() bool {
		var pods []string
		for _, r := range results(url.Values{"namespaces": {"shop"}}) {
			pods = append(pods, r.Properties[openreports.PropPods])
		}
		slices.Sort(pods)
		return slices.Equal(pods, []string{"web-7c9-p2", "web-7c9-p3", "web-7c9-p4"})
	})
	if rs := resources(); len(rs) != 1 || rs[0].Kind != "Deployment" || rs[0].Name != "web" || rs[0].Status["fail"] != 3 {
		t.Errorf("resource view after the rollout: %+v, want still one entry, Deployment web with 3 fail", rs)
	}
	// A pod whose rules got worse (p4: xt, then legacy) is news to the
	// webhook, as its first finding was; it stays one result.
	waitForLong(t, "the webhook told of p4's xt", 90*time.Second, func() bool { return notifiedOf("web-7c9-p4", findings.ImpactXt) })
	e.append(t, present(p4, findings.ImpactLegacy))
	waitForLong(t, "the webhook told that p4 got worse (legacy)", 90*time.Second, func() bool { return notifiedOf("web-7c9-p4", findings.ImpactLegacy) })
	// Polled: it may notify before its store has the Report's update, and
	// it stores one as a removal and then an insert.
	var p4s []string
	waitForLong(t, "Policy Reporter listing p4 once, as legacy", 90*time.Second, func() bool {
		p4s = nil
		for _, r := range results(url.Values{"namespaces": {"shop"}}) {
			if r.Properties[openreports.PropPods] == "web-7c9-p4" {
				p4s = append(p4s, r.Rule)
			}
		}
		return slices.Equal(p4s, []string{findings.ImpactLegacy})
	})
	fwd.stop(t, syscall.SIGTERM)
}

// startPolicyReporter runs Policy Reporter with its REST API on a free
// loopback port until the test ends, and returns the API's base URL once
// /healthz answers (its informers synced). A webhook URL, if any, is its
// one notification target (results already there at its start included).
func startPolicyReporter(t *testing.T, kubeconfig, webhook string) string {
	t.Helper()
	addr := nstest.FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	dir := t.TempDir()
	args := []string{"run", "--kubeconfig", kubeconfig, "--rest-enabled", "--port", port,
		"--dbfile", filepath.Join(dir, "pr.db"), "--template-dir", dir, "--lease-name", "pr-test"}
	if webhook != "" {
		conf := filepath.Join(dir, "config.yaml")
		y := "target:\n  webhook:\n    name: test\n    skipExistingOnStartup: false\n    config:\n      webhook: " + strconv.Quote(webhook) + "\n"
		if err := os.WriteFile(conf, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", conf)
	}
	cmd := exec.Command(policyReporterPath(), args...)
	logf, err := os.Create(filepath.Join(dir, "policy-reporter.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			logf.Close()
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("policy-reporter log tail:\n%s", b)
		}
	})
	base := "http://" + addr
	waitForLong(t, "Policy Reporter's /healthz", 90*time.Second, func() bool {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return base
}
