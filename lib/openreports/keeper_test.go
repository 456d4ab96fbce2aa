package openreports_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/iptables-alerter/iptables-alerter/lib/consumer"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/follow"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// discoveryPath is the openreports.io group version's discovery, which
// tells whether Reports and ClusterReports are served.
const discoveryPath = "/apis/openreports.io/v1alpha1"

// outage refuses, while down, the requests refuse picks, as an API
// server out of reach would (no HTTP answer).
type outage struct {
	down   atomic.Bool
	refuse func(*http.Request) bool
}

func (o *outage) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTrip(func(r *http.Request) (*http.Response, error) {
		if o.down.Load() && o.refuse(r) {
			return nil, errors.New("connection refused (test outage)")
		}
		return rt.RoundTrip(r)
	})
}

// forwarder is the forwarder's Reports path over clients through cfg: a
// keeper (started, after set changed it) and the runner following its
// own findings file.
type forwarder struct {
	keeper *openreports.Keeper
	runner *consumer.Runner
	reg    *prometheus.Registry
	file   string
	// flushed counts the Reports Flush wrote (Writer.Progress).
	flushed atomic.Int64
	// logged holds the keeper's and runner's log.
	logged *logtest.Hook
}

func newForwarder(t *testing.T, life context.Context, cfg func() (kubernetes.Interface, versioned.Interface), node string, refusals *kubeapi.Refusals, set ...func(*openreports.Keeper)) *forwarder {
	t.Helper()
	cs, rc := cfg()
	log, logged := logtest.NewNullLogger()
	w := openreports.New(cs, rc, node)
	keeper := openreports.NewKeeper(w, rc, cs, log)
	keeper.Refusals = refusals
	// The loop must not be what brings Reports on: the held line does.
	keeper.Prune, keeper.LookMissing, keeper.LookForbidden = time.Hour, time.Hour, time.Hour
	for _, set := range set {
		set(keeper)
	}
	reg := prometheus.NewRegistry()
	keeper.Register(reg)
	if refusals != nil {
		reg.MustRegister(refusals.Collector())
	}
	keeper.Start(life)
	dir := t.TempDir()
	file := filepath.Join(dir, "findings.jsonl")
	r := &consumer.Runner{Findings: file, Store: follow.FileStore(filepath.Join(dir, "checkpoint.json")), Batch: 64, Log: log,
		Consumers: []consumer.Named{{Name: "reports", Consumer: keeper}}}
	f := &forwarder{keeper: keeper, runner: r, reg: reg, file: file, logged: logged}
	// As the forwarder wires it; counted, for the tests that ask.
	w.Progress = func() { f.flushed.Add(1); r.Touch() }
	return f
}

func (f *forwarder) append(t *testing.T, recs ...findings.Record) {
	t.Helper()
	fd, err := os.OpenFile(f.file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	for _, rec := range recs {
		line, err := findings.Encode(rec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fd.Write(line); err != nil {
			t.Fatal(err)
		}
	}
}

// counts gives the values of the counter family name by its labels'
// values, joined with ",".
func (f *forwarder) counts(t *testing.T, name string) map[string]float64 {
	t.Helper()
	fams, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, fam := range fams {
		if fam.GetName() != name {
			continue
		}
		for _, m := range fam.GetMetric() {
			var values []string
			for _, l := range m.GetLabel() {
				values = append(values, l.GetValue())
			}
			out[strings.Join(values, ",")] = m.GetCounter().GetValue()
		}
	}
	return out
}

// nodeRecord is the agent's node-mode finding about node's own netns.
func nodeRecord(node string) findings.Record {
	return findings.Record{Schema: findings.Schema, Time: findings.Now(), Node: node, Subject: findings.SubjectNode, Source: "watch", Stage: "nftables commit",
		State: findings.StatePresent, Nft: findings.Nft{Tables: []string{"ip nat"}, Chains: 1, Rules: 1},
		Impact: findings.Impact{Xt: 1}, Worst: findings.ImpactXt,
		Examples:    []findings.Example{{Family: "ip", Table: "nat", Chain: "POSTROUTING", Rule: "-A POSTROUTING -s 10.8.0.0/16 -j MASQUERADE", Impact: findings.ImpactXt}},
		Fingerprint: "fp-node-" + node}
}

// resultPods names the pods with a result in node's Reports in namespace.
func resultPods(t *testing.T, rc versioned.Interface, namespace, node string) []string {
	t.Helper()
	list, err := rc.OpenreportsV1alpha1().Reports(namespace).List(kubetest.Ctx(t), metav1.ListOptions{LabelSelector: openreports.Selector(node)})
	if err != nil {
		t.Fatal(err)
	}
	var pods []string
	for _, r := range list.Items {
		for _, x := range r.Results {
			if s, ok := openreports.PodSubject(x); ok {
				pods = append(pods, s.Name)
			}
		}
	}
	sort.Strings(pods)
	return pods
}

// TestKeeperStartsDuringOutage: the forwarder starts while the API server
// cannot say whether Reports (or the node's ClusterReport) may be
// written. Its findings were taken for "Reports off" and never got their
// Report; now their line is held (ErrUnknown), the look tried again with
// it, and once the API answers every Report is written.
func TestKeeperStartsDuringOutage(t *testing.T) {
	c, admin, owned := start(t)
	c.CRD(t, clusterCRDPath, openreportsv1alpha1.SchemeGroupVersion.String(), "clusterreports")
	web, db := owned["web-7c9-aaaaa"].Pod, owned["db-0"].Pod
	isDiscovery := func(r *http.Request) bool { return r.URL.Path == discoveryPath }
	for _, tc := range []struct {
		name string
		// refuse picks the requests the outage refuses; nil: the API
		// server itself is stopped.
		refuse func(*http.Request) bool
		// reportsOn: the pods' Reports are on during the outage, the
		// node's ClusterReport alone unknown.
		reportsOn bool
	}{
		{name: "api server stopped"},
		{name: "discovery refused", refuse: isDiscovery},
		{name: "access reviews refused", refuse: func(r *http.Request) bool {
			return strings.HasSuffix(r.URL.Path, "/selfsubjectaccessreviews")
		}},
		{name: "clusterreports discovery refused", reportsOn: true, refuse: func() func(*http.Request) bool {
			// The first discovery (for Reports) answered, the next
			// (for ClusterReports) not.
			var n atomic.Int32
			return func(r *http.Request) bool { return isDiscovery(r) && n.Add(1) > 1 }
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := "node-" + strings.ReplaceAll(tc.name, " ", "-")
			life, end := context.WithCancel(context.Background())
			t.Cleanup(end)
			o := &outage{refuse: tc.refuse}
			stopped := tc.refuse == nil
			if stopped {
				o.refuse = func(*http.Request) bool { return false }
				c.StopAPIServer()
				// The next cases need it, whatever becomes of this one.
				t.Cleanup(func() {
					if stopped {
						c.StartAPIServer()
					}
				})
			}
			o.down.Store(true)
			f := newForwarder(t, life, func() (kubernetes.Interface, versioned.Interface) {
				return wrappedClients(t, c, o.wrap)
			}, node, nil)
			if f.keeper.Enabled() != tc.reportsOn {
				t.Errorf("Reports enabled %v during the outage, want %v", f.keeper.Enabled(), tc.reportsOn)
			}
			f.append(t, record(web, findings.StatePresent, 0, 1, 0), nodeRecord(node), record(db, findings.StatePresent, 1, 0, 0))
			// Twice: the line held is tried again, and so is the look.
			for range 2 {
				if err := f.runner.Once(kubetest.Ctx(t)); !errors.Is(err, openreports.ErrUnknown) || !kubeapi.Retryable(err) {
					t.Errorf("Once during the outage = %v, want a retryable ErrUnknown", err)
				}
			}

			o.down.Store(false)
			if stopped {
				c.StartAPIServer()
				stopped = false
				// Ready may come before the CRDs' discovery: a 404
				// then is the API's word that Reports are not served.
				for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
					if ok, _ := openreports.Available(kubetest.Ctx(t), admin); ok {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("Reports not served after the API server's restart")
					}
				}
			}
			if err := f.runner.Once(kubetest.Ctx(t)); err != nil {
				t.Fatalf("Once after the outage: %v", err)
			}
			if !f.keeper.Enabled() {
				t.Error("Reports not enabled after the outage")
			}
			if diff := cmp.Diff([]string{db.Name, web.Name}, resultPods(t, admin, "shop", node)); diff != "" {
				t.Errorf("pods with a result (-want +got):\n%s", diff)
			}
			cr, err := admin.OpenreportsV1alpha1().ClusterReports().Get(kubetest.Ctx(t), openreports.NodeReportName(node), metav1.GetOptions{})
			if err != nil || len(cr.Results) != 1 {
				t.Errorf("node's ClusterReport: %v, %v", cr, err)
			}
			if diff := cmp.Diff(map[string]float64{"written": 3}, f.counts(t, "iptables_alerter_forward_reports_total")); diff != "" {
				t.Errorf("reports by outcome (-want +got):\n%s", diff)
			}
		})
	}
}

// answer is a response to r as a server would give it, for a wrapper
// standing in for one.
func answer(r *http.Request, code int, body string) *http.Response {
	return &http.Response{StatusCode: code, Status: http.StatusText(code), Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(body)), Request: r, ProtoMajor: 1, ProtoMinor: 1}
}

// groupNotFound is the API server's 404 for a group it does not serve.
const groupNotFound = `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`

// TestKeeperStartsBesideItsAPIServer: the forwarder starts while its
// API server is starting too (a node booting beside it: a single-node
// cluster, the systemd units), which answers 404 for the Reports' group
// until it serves its CRDs and is not ready (/readyz) meanwhile. That 404
// turned Reports off, and the node's backlog of findings went past
// without a Report; now the line is held until a ready server answers.
// A server that will not say whether it is ready (no role for /readyz)
// is taken at its word, as before: the line is not held for it.
func TestKeeperStartsBesideItsAPIServer(t *testing.T) {
	c, admin, owned := start(t)
	web := owned["web-7c9-aaaaa"].Pod
	for _, tc := range []struct {
		name  string
		code  int
		ready string
	}{
		{"not ready", http.StatusInternalServerError, "[-]poststarthook/crd-informer-synced failed: not finished\nreadyz check failed"},
		{"readyz forbidden", http.StatusForbidden, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := "node-" + strings.ReplaceAll(tc.name, " ", "-")
			var starting atomic.Bool
			starting.Store(true)
			wrap := func(rt http.RoundTripper) http.RoundTripper {
				return roundTrip(func(r *http.Request) (*http.Response, error) {
					switch {
					case !starting.Load():
					case r.URL.Path == discoveryPath:
						return answer(r, http.StatusNotFound, groupNotFound), nil
					case r.URL.Path == "/readyz":
						return answer(r, tc.code, tc.ready), nil
					}
					return rt.RoundTrip(r)
				})
			}
			life, end := context.WithCancel(context.Background())
			t.Cleanup(end)
			f := newForwarder(t, life, func() (kubernetes.Interface, versioned.Interface) { return wrappedClients(t, c, wrap) }, node, nil)
			f.append(t, record(web, findings.StatePresent, 0, 1, 0))
			err := f.runner.Once(kubetest.Ctx(t))
			if tc.code == http.StatusForbidden {
				if err != nil || f.keeper.Enabled() {
					t.Errorf("Once = %v, Reports enabled %v: want the 404 taken, Reports off", err, f.keeper.Enabled())
				}
				return
			}
			if !errors.Is(err, openreports.ErrUnknown) || !kubeapi.Retryable(err) {
				t.Errorf("Once while the API server starts = %v, want a retryable ErrUnknown", err)
			}
			starting.Store(false)
			if err := f.runner.Once(kubetest.Ctx(t)); err != nil {
				t.Fatalf("Once once it is ready: %v", err)
			}
			if !f.keeper.Enabled() {
				t.Error("Reports not enabled once the API server is ready")
			}
			if diff := cmp.Diff([]string{web.Name}, resultPods(t, admin, "shop", node)); diff != "" {
				t.Errorf("pods with a result (-want +got):\n%s", diff)
			}
		})
	}
}

// TestKeeperStartHeldAcrossRestart: a starting API server (404, not
// ready) that goes away past LookMissing and comes back still starting
// is asked again whether it is ready: the minute of 404s it had given
// before going away does not make its next 404 the CRD's absence.
func TestKeeperStartHeldAcrossRestart(t *testing.T) {
	c, _, owned := start(t)
	web := owned["web-7c9-aaaaa"].Pod
	const lookMissing = 2 * time.Second
	var down atomic.Bool
	wrap := func(rt http.RoundTripper) http.RoundTripper {
		return roundTrip(func(r *http.Request) (*http.Response, error) {
			switch {
			case down.Load():
				return nil, errors.New("connection refused (test restart)")
			case r.URL.Path == discoveryPath:
				return answer(r, http.StatusNotFound, groupNotFound), nil
			case r.URL.Path == "/readyz":
				return answer(r, http.StatusInternalServerError, "readyz check failed"), nil
			}
			return rt.RoundTrip(r)
		})
	}
	life, end := context.WithCancel(context.Background())
	t.Cleanup(end)
	f := newForwarder(t, life, func() (kubernetes.Interface, versioned.Interface) { return wrappedClients(t, c, wrap) }, "node-restart", nil,
		func(k *openreports.Keeper) { k.LookMissing = lookMissing })
	f.append(t, record(web, findings.StatePresent, 0, 1, 0))
	for _, phase := range []string{"starting", "down past LookMissing", "starting again"} {
		down.Store(phase == "down past LookMissing")
		if phase == "down past LookMissing" {
			time.Sleep(lookMissing + 200*time.Millisecond)
		}
		if err := f.runner.Once(kubetest.Ctx(t)); !errors.Is(err, openreports.ErrUnknown) || !kubeapi.Retryable(err) {
			t.Fatalf("Once with the API server %s = %v (Reports enabled %v), want a retryable ErrUnknown", phase, err, f.keeper.Enabled())
		}
	}
}

// TestGoneFlushCounted: a gone record flushes the Reports staged before
// it (a result staged for its pod would come back after): what that
// flush wrote is counted, and a Report refused for good is counted and
// recorded as a refusal, as the checkpoint's Flush does; the gone record
// itself is removed, not taken for the refused Report.
func TestGoneFlushCounted(t *testing.T) {
	c, admin, owned := start(t)
	ctx := kubetest.Ctx(t)
	cs := c.Client()
	kubetest.Namespace(t, cs, "full")
	hard := corev1.ResourceList{"count/reports.openreports.io": resource.MustParse("0")}
	q, err := cs.CoreV1().ResourceQuotas("full").Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "no-reports", Namespace: "full"}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No controller-manager runs: the test sets the status its quota
	// controller would, and waits until admission uses it.
	q.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: corev1.ResourceList{"count/reports.openreports.io": resource.MustParse("0")}}
	if _, err := cs.CoreV1().ResourceQuotas("full").UpdateStatus(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	probe := &openreportsv1alpha1.Report{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "full"}}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		_, err := admin.OpenreportsV1alpha1().Reports("full").Create(ctx, probe, metav1.CreateOptions{})
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota") {
			break
		}
		if err == nil {
			_ = admin.OpenreportsV1alpha1().Reports("full").Delete(ctx, probe.Name, metav1.DeleteOptions{})
		}
		if time.Now().After(deadline) {
			t.Fatalf("the quota refuses no Report: %v", err)
		}
	}
	full := kubetest.Pod(t, cs, "full", "a", nil, "")
	web, other := owned["web-7c9-aaaaa"].Pod, owned["web-7c9-bbbbb"].Pod

	life, end := context.WithCancel(context.Background())
	t.Cleanup(end)
	f := newForwarder(t, life, func() (kubernetes.Interface, versioned.Interface) { return cs, admin }, "node-a", kubeapi.NewRefusals())
	if !f.keeper.Enabled() {
		t.Fatal("Reports not enabled")
	}
	// All in one batch: the gone record comes while full's and shop's
	// Reports are staged.
	f.append(t, record(full, findings.StatePresent, 0, 1, 0), record(web, findings.StatePresent, 0, 1, 0),
		record(other, findings.StatePresent, 0, 0, 1), record(web, findings.StateGone, 0, 0, 0))
	if err := f.runner.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{other.Name}, resultPods(t, admin, "shop", "node-a")); diff != "" {
		t.Errorf("pods with a result in shop (-want +got):\n%s", diff)
	}
	want := map[string]float64{"written": 2, "rejected": 1, "removed": 1}
	if diff := cmp.Diff(want, f.counts(t, "iptables_alerter_forward_reports_total")); diff != "" {
		t.Errorf("reports by outcome (-want +got):\n%s", diff)
	}
	// Each Report written is a sign of life (the liveness probe's).
	if f.flushed.Load() == 0 {
		t.Error("Progress never called, though Reports were written")
	}
	if diff := cmp.Diff(map[string]float64{"report,quota": 1}, f.counts(t, "iptables_alerter_forward_refused_total")); diff != "" {
		t.Errorf("refusals by kind and reason (-want +got):\n%s", diff)
	}
}

// TestKeeperRefusedOnce: a discovery the API server refuses for good (a
// 400) turns Reports off without holding the line, and is said once
// however often the loop looks again; Reports come on once it answers.
func TestKeeperRefusedOnce(t *testing.T) {
	c, admin, owned := start(t)
	var refusing atomic.Bool
	var refused atomic.Int32
	refusing.Store(true)
	cs, rc := wrappedClients(t, c, func(rt http.RoundTripper) http.RoundTripper {
		return roundTrip(func(r *http.Request) (*http.Response, error) {
			if r.URL.Path == discoveryPath && refusing.Load() {
				refused.Add(1)
				body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"refused (test)","reason":"BadRequest","code":400}`
				return &http.Response{StatusCode: http.StatusBadRequest, Header: http.Header{"Content-Type": {"application/json"}},
					Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
			}
			return rt.RoundTrip(r)
		})
	})
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	keeper := openreports.NewKeeper(openreports.New(cs, rc, "node-a"), rc, cs, log)
	keeper.LookMissing = 10 * time.Millisecond
	life, end := context.WithCancel(context.Background())
	t.Cleanup(end)
	keeper.Start(life)
	for deadline := time.Now().Add(time.Minute); refused.Load() < 5; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the loop looked %d times in a minute", refused.Load())
		}
	}
	web := owned["web-7c9-aaaaa"].Pod
	if err := keeper.Consume(kubetest.Ctx(t), record(web, findings.StatePresent, 0, 1, 0)); err != nil {
		t.Errorf("Consume while refused = %v, want the line handled (Reports off)", err)
	}
	warned := 0
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel && strings.Contains(e.Message, "refused to tell") {
			warned++
		}
	}
	if warned != 1 {
		t.Errorf("%d warnings over %d refused looks, want 1", warned, refused.Load())
	}
	refusing.Store(false)
	for deadline := time.Now().Add(time.Minute); !keeper.Enabled(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Reports not on a minute after discovery answered")
		}
	}
	if pods := resultPods(t, admin, "shop", "node-a"); len(pods) != 0 {
		t.Errorf("pods with a result while Reports were off: %v", pods)
	}
}

// TestFlushRefusedInOneNamespace: a webhook authorizer refuses the Report
// writes in one namespace, where RBAC lets the forwarder write Reports
// everywhere (and its access reviews say so: allowed cluster-wide,
// refused there). That Report is refused for good (forbidden) and the
// other Reports staged with it in the same batch are still written.
func TestFlushRefusedInOneNamespace(t *testing.T) {
	c, admin, owned := start(t)
	ctx := kubetest.Ctx(t)
	kubetest.Namespace(t, c.Client(), "muted")
	muted := kubetest.Pod(t, c.Client(), "muted", "a", nil, "")
	var denied atomic.Int32
	cs, rc := wrappedClients(t, c, func(rt http.RoundTripper) http.RoundTripper {
		return roundTrip(func(r *http.Request) (*http.Response, error) {
			if strings.HasSuffix(r.URL.Path, "/selfsubjectaccessreviews") {
				return mutedReview(r, rt)
			}
			if r.Method != http.MethodGet && strings.Contains(r.URL.Path, "/namespaces/muted/reports") {
				denied.Add(1)
				body := `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,` +
					`"message":"reports.openreports.io is forbidden: User \"system:serviceaccount:iptables-alerter:iptables-alerter-forward\" cannot create resource \"reports\" in API group \"openreports.io\" in the namespace \"muted\": walled off by policy"}`
				return &http.Response{StatusCode: http.StatusForbidden, Header: http.Header{"Content-Type": {"application/json"}},
					Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
			}
			return rt.RoundTrip(r)
		})
	})
	life, end := context.WithCancel(context.Background())
	t.Cleanup(end)
	f := newForwarder(t, life, func() (kubernetes.Interface, versioned.Interface) { return cs, rc }, "node-a", kubeapi.NewRefusals())
	web := owned["web-7c9-aaaaa"].Pod
	// One batch: muted's Report is flushed first, shop's after it.
	f.append(t, record(muted, findings.StatePresent, 0, 1, 0), record(web, findings.StatePresent, 0, 1, 0))
	if err := f.runner.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if denied.Load() == 0 {
		t.Fatal("no Report write was refused: the test did not test")
	}
	if diff := cmp.Diff([]string{web.Name}, resultPods(t, admin, "shop", "node-a")); diff != "" {
		t.Errorf("pods with a result in shop (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]float64{"written": 1, "rejected": 1}, f.counts(t, "iptables_alerter_forward_reports_total")); diff != "" {
		t.Errorf("reports by outcome (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]float64{"report,forbidden": 1}, f.counts(t, "iptables_alerter_forward_refused_total")); diff != "" {
		t.Errorf("refusals by kind and reason (-want +got):\n%s", diff)
	}
	if got := f.flushed.Load(); got != 2 {
		t.Errorf("Progress called %d times for a Report written and one refused, want 2 (each a sign of life)", got)
	}
	if got := f.keeper.Refusals.Degraded(); !strings.Contains(got, "namespace muted") {
		t.Errorf("/healthz says %q, want namespace muted named", got)
	}
}

// mutedReview answers an access review as the webhook authorizer of
// TestFlushRefusedInOneNamespace would: not allowed in namespace muted,
// as the API server says anywhere else.
func mutedReview(r *http.Request, rt http.RoundTripper) (*http.Response, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	// The client sends protobuf; the answer may be JSON.
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
	review, ok := obj.(*authorizationv1.SelfSubjectAccessReview)
	if err != nil || !ok || review.Spec.ResourceAttributes == nil || review.Spec.ResourceAttributes.Namespace != "muted" {
		r.Body = io.NopCloser(bytes.NewReader(body))
		return rt.RoundTrip(r)
	}
	review.APIVersion, review.Kind = "authorization.k8s.io/v1", "SelfSubjectAccessReview"
	review.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: false, Reason: "walled off by policy"}
	out, err := json.Marshal(review)
	if err != nil {
		return nil, err
	}
	return &http.Response{StatusCode: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader(out)), Request: r}, nil
}

// TestCRDRemovedWhileRunning: the Report CRD is deleted under a running
// forwarder (Policy Reporter uninstalled with it, say). Its findings'
// Reports are not rejected one by one, each with an error line: the
// keeper looks again, holding the line until looks LookMissing apart
// found the CRD gone, says so once and goes on with Reports off until it
// is back.
func TestCRDRemovedWhileRunning(t *testing.T) {
	c, admin, owned := start(t)
	c.CRD(t, clusterCRDPath, openreportsv1alpha1.SchemeGroupVersion.String(), "clusterreports")
	ctx := kubetest.Ctx(t)
	life, end := context.WithCancel(context.Background())
	t.Cleanup(end)
	const look = 200 * time.Millisecond
	f := newForwarder(t, life, func() (kubernetes.Interface, versioned.Interface) { return c.Client(), admin }, "node-a", kubeapi.NewRefusals(),
		func(k *openreports.Keeper) { k.LookMissing = look })
	web, other, db := owned["web-7c9-aaaaa"].Pod, owned["web-7c9-bbbbb"].Pod, owned["db-0"].Pod
	f.append(t, record(web, findings.StatePresent, 0, 1, 0), nodeRecord("node-a"))
	if err := f.runner.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{web.Name}, resultPods(t, admin, "shop", "node-a")); diff != "" {
		t.Fatalf("pods with a result before (-want +got):\n%s", diff)
	}
	if got := f.counts(t, "iptables_alerter_forward_reports_total")["written"]; got != 2 {
		t.Fatalf("%v Reports written before, want 2 (the pod's and the node's)", got)
	}
	c.RemoveCRD(t, "clusterreports.openreports.io", openreportsv1alpha1.SchemeGroupVersion.String(), "clusterreports")
	c.RemoveCRD(t, "reports.openreports.io", openreportsv1alpha1.SchemeGroupVersion.String(), "reports")
	// The node's finding first: its ClusterReport's 404 is the first.
	f.append(t, nodeRecord("node-a"), record(other, findings.StatePresent, 0, 0, 1), record(db, findings.StatePresent, 1, 0, 0), record(web, findings.StateGone, 0, 0, 0))
	// Held while the looks are not LookMissing apart: once for the
	// ClusterReport, once for the batch's Reports.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(look) {
		err := f.runner.Once(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with the CRD gone: %v, want the lines handled (Reports off)", err)
		}
	}
	if f.keeper.Enabled() {
		t.Error("Reports still on with the CRD gone")
	}
	counts := f.counts(t, "iptables_alerter_forward_reports_total")
	if counts["rejected"] != 0 {
		t.Errorf("reports by outcome %v: want none rejected", counts)
	}
	var errs, said []string
	for _, e := range f.logged.AllEntries() {
		switch {
		case e.Level <= logrus.ErrorLevel:
			errs = append(errs, e.Message+" "+fmt.Sprint(e.Data))
		case e.Level == logrus.WarnLevel && strings.Contains(e.Message, "serves no OpenReports"):
			said = append(said, e.Message)
		}
	}
	if len(errs) > 0 || len(said) != 2 {
		t.Errorf("errors logged %q and warnings of the missing CRDs %q: want none, and one for each CRD", errs, said)
	}
}
