package openreports_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/iptables-alerter/iptables-alerter/lib/consumer"
	"github.com/iptables-alerter/iptables-alerter/lib/events"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/follow"
	"github.com/iptables-alerter/iptables-alerter/lib/kubeapi"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
)

// TestWebhookDownInOneNamespace: a validating webhook for Events and
// Reports in one namespace fails closed, and the API server cannot call
// it: nothing listens at its URL ("refused"), or it never answers and its
// timeout outlasts the client's ("hangs": no 500 comes back, the client's
// deadline ends each call). The forwarder's line (Events, then Reports)
// holds that namespace's finding for the hold, with later findings
// behind it, then refuses its Event and its Report there (counted, on
// /healthz) and delivers the finding behind it. Once the webhook is
// gone, that namespace's next finding is delivered and its refusals
// cleared.
func TestWebhookDownInOneNamespace(t *testing.T) {
	for _, hangs := range []bool{false, true} {
		t.Run(map[bool]string{false: "refused", true: "hangs"}[hangs], func(t *testing.T) { webhookDown(t, hangs) })
	}
}

func webhookDown(t *testing.T, hangs bool) {
	c, admin, owned := start(t)
	ctx := kubetest.Ctx(t)
	cs := c.Client()
	kubetest.Namespace(t, cs, "down")
	downPod := kubetest.Pod(t, cs, "down", "a", nil, "")
	web := owned["web-7c9-aaaaa"].Pod

	// Nothing listens at its URL: the API server cannot call it.
	url, ca := "https://127.0.0.1:1/validate", []byte(nil)
	// The forwarder's client; what a try of a held finding may take
	// beyond the line's pauses; how many holds the finding may wait.
	fwd, rfwd, slack, holds := cs, versioned.Interface(admin), time.Duration(0), 1
	webhookTimeout := int32(2)
	if hangs {
		// A webhook that never answers, with a timeout longer than the
		// forwarder's client's.
		webhookTimeout = 8
		stop := make(chan struct{})
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-stop:
			case <-r.Context().Done():
			}
		}))
		t.Cleanup(srv.Close)
		t.Cleanup(func() { close(stop) })
		url, ca = srv.URL+"/validate", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
		cfg := c.Config(c.AdminToken)
		cfg.Timeout = 3 * time.Second
		var err error
		if fwd, err = kubernetes.NewForConfig(cfg); err != nil {
			t.Fatal(err)
		}
		if rfwd, err = versioned.NewForConfig(cfg); err != nil {
			t.Fatal(err)
		}
		// The clock starts at the first call's timeout, and the Report's
		// call times out once more before it is refused.
		slack = 2 * cfg.Timeout
		// A timeout names no webhook: the Events' hold and the Reports'
		// are not tied, unless the API server's 500 came first once.
		holds = 2
	}
	hook := installWebhook(t, cs, "down", url, ca, webhookTimeout, admissionregistrationv1.Create, admissionregistrationv1.Update)
	// The API server picks the webhook up from its informer: wait until
	// an Event create in "down" fails calling it.
	probe := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: "down"}, EventTime: metav1.NowMicro(),
		ReportingController: "example.com/probe", ReportingInstance: "probe", Action: "Probe", Reason: "Probe", Type: corev1.EventTypeNormal,
		Regarding: corev1.ObjectReference{Kind: "Pod", Namespace: "down", Name: downPod.Name}}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		ev, err := cs.EventsV1().Events("down").Create(ctx, probe, metav1.CreateOptions{})
		if kubeapi.WebhookFailed(err) {
			break
		}
		if err == nil {
			_ = cs.EventsV1().Events("down").Delete(ctx, ev.Name, metav1.DeleteOptions{})
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook fails no Event create in \"down\": %v", err)
		}
	}

	life, end := context.WithCancel(context.Background())
	t.Cleanup(end)
	log := logrus.New()
	log.SetOutput(io.Discard)
	refusals := kubeapi.NewRefusals()
	const hold = 6 * time.Second
	refusals.Hold = hold
	ev := events.NewConsumer(events.New(fwd, "node-a", false), log, refusals)
	keeper := openreports.NewKeeper(openreports.New(fwd, rfwd, "node-a"), rfwd, fwd, log)
	keeper.Posted, keeper.Refusals = ev.Posted, refusals
	keeper.Start(life)
	if !keeper.Enabled() {
		t.Fatal("Reports not enabled")
	}
	reg := prometheus.NewRegistry()
	keeper.Register(reg)
	reg.MustRegister(refusals.Collector())
	f := &forwarder{keeper: keeper, reg: reg, file: filepath.Join(t.TempDir(), "findings.jsonl")}
	f.runner = &consumer.Runner{Findings: f.file, Store: follow.FileStore(filepath.Join(t.TempDir(), "checkpoint.json")), Batch: 64, Log: log,
		Consumers: []consumer.Named{{Name: "events", Consumer: ev}, {Name: "reports", Consumer: keeper}}}
	// until runs the line until it has gone through, and says how long
	// that took and how many times it was held; heldUp counts the holds
	// on a write that ran out of time (kubeapi.HeldUp).
	heldUp := 0
	until := func() (time.Duration, int) {
		t.Helper()
		begin, held := time.Now(), 0
		for deadline := begin.Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			err := f.runner.Once(ctx)
			if err == nil {
				return time.Since(begin), held
			}
			if !kubeapi.WebhookFailed(err) {
				t.Fatalf("the line failed otherwise: %v", err)
			}
			held++
			if strings.Contains(err.Error(), "held up in admission") {
				heldUp++
			}
			if time.Now().After(deadline) {
				t.Fatalf("the line still held after a minute: %v", err)
			}
		}
	}

	f.append(t, record(downPod, findings.StatePresent, 0, 1, 0), record(web, findings.StatePresent, 0, 1, 0))
	took, held := until()
	// One hold for the finding, not one for its Event and another for
	// its Report: the Reports' clock is outlasted with the Events'
	// webhook's (a timeout names none: two).
	if held == 0 || took < hold || took > time.Duration(holds)*hold*7/4+slack {
		t.Errorf("the line went through in %v, held %d times: want it held for the hold (%v), %d times at most", took, held, hold, holds)
	}
	if hangs && heldUp == 0 {
		t.Errorf("held %d times, never on a write that ran out of time", held)
	}
	if diff := cmp.Diff([]string{web.Name}, resultPods(t, admin, "shop", "node-a")); diff != "" {
		t.Errorf("pods with a result in shop, behind the held finding (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]float64{"event,webhook": 1, "report,webhook": 1}, f.counts(t, "iptables_alerter_forward_refused_total")); diff != "" {
		t.Errorf("refusals by kind and reason (-want +got):\n%s", diff)
	}
	if got := refusals.Degraded(); !strings.Contains(got, "event refused in namespace down (webhook)") || !strings.Contains(got, "report refused in namespace down (webhook)") {
		t.Errorf("/healthz says %q, want down's Events and Reports named", got)
	}

	// Once outlasted, the namespace's next finding is tried once, not
	// held again.
	f.append(t, record(downPod, findings.StateUnknown, 0, 0, 0))
	if took, held := until(); held > 0 || took > hold+slack {
		t.Errorf("the next finding in down took %v, held %d times: want it refused at once", took, held)
	}

	// The webhook gone, the next finding there is delivered and the
	// refusals are cleared.
	if err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, hook.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		ev, err := cs.EventsV1().Events("down").Create(ctx, probe, metav1.CreateOptions{})
		if err == nil {
			_ = cs.EventsV1().Events("down").Delete(ctx, ev.Name, metav1.DeleteOptions{})
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Event creates in \"down\" still fail with the webhook deleted: %v", err)
		}
	}
	rec := record(downPod, findings.StatePresent, 0, 2, 0)
	rec.Fingerprint = "fp-down-again"
	f.append(t, rec)
	if _, held := until(); held > 0 {
		t.Errorf("held %d times with the webhook gone", held)
	}
	if diff := cmp.Diff([]string{downPod.Name}, resultPods(t, admin, "down", "node-a")); diff != "" {
		t.Errorf("pods with a result in down once the webhook is gone (-want +got):\n%s", diff)
	}
	if got := refusals.Degraded(); got != "" {
		t.Errorf("/healthz still says %q", got)
	}
}

// installWebhook installs a validating webhook at url (trusting ca) on
// ops of Events and Reports in namespace, failing closed, with a 2 s
// timeout.
func installWebhook(t *testing.T, cs kubernetes.Interface, namespace, url string, ca []byte, timeout int32, ops ...admissionregistrationv1.OperationType) *admissionregistrationv1.ValidatingWebhookConfiguration {
	t.Helper()
	fail, none := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone
	hook := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "check-" + namespace},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "check." + namespace + ".example.com",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: ops,
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"", "events.k8s.io", "openreports.io"},
					APIVersions: []string{"*"}, Resources: []string{"events", "reports"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": namespace}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          &timeout,
		}},
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(kubetest.Ctx(t), hook, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return hook
}

// denyingWebhook installs a validating webhook (served here, over TLS)
// that denies ops on Events and Reports in namespace with code, and
// returns how many requests it was asked about.
func denyingWebhook(t *testing.T, cs kubernetes.Interface, namespace string, code int32, ops ...admissionregistrationv1.OperationType) *atomic.Int32 {
	t.Helper()
	var asked atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "no review", http.StatusBadRequest)
			return
		}
		asked.Add(1)
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: false,
			Result: &metav1.Status{Code: code, Message: "policy says no (test)"}}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(review)
	}))
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	installWebhook(t, cs, namespace, srv.URL+"/validate", ca, 2, ops...)
	return &asked
}

// TestWebhookDeniesWith5xx: a validating webhook says no to Events and
// Reports in one namespace with code 503 (its backend failing; the API
// server passes the webhook's code on). That is the namespace's
// refusal (admission), not an outage to wait out: neither the Event nor
// the Report holds the line.
func TestWebhookDeniesWith5xx(t *testing.T) {
	c, admin, _ := start(t)
	ctx := kubetest.Ctx(t)
	cs := c.Client()
	kubetest.Namespace(t, cs, "strict")
	pod := kubetest.Pod(t, cs, "strict", "a", nil, "")
	asked := denyingWebhook(t, cs, "strict", http.StatusServiceUnavailable, admissionregistrationv1.Create, admissionregistrationv1.Update)
	p := events.New(cs, "node-a", false)
	rec := record(pod, findings.StatePresent, 0, 1, 0)
	var res events.Result
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		var err error
		res, err = p.Post(ctx, rec)
		if err == nil && asked.Load() > 0 {
			break
		}
		if err == nil {
			// Created before the API server had the webhook: another
			// finding.
			rec.Fingerprint += "x"
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("Post: %v; want the webhook's 503 taken as the namespace's refusal", err)
		}
	}
	if res.Outcome != events.Rejected || kubeapi.Refusal(res.Why) != kubeapi.RefusedAdmission {
		t.Errorf("Post = %+v; want rejected, refused by admission", res)
	}
	wres, err := openreports.New(cs, admin, "node-a").Write(ctx, rec)
	if err != nil || wres.Outcome != openreports.Rejected || kubeapi.Refusal(wres.Why) != kubeapi.RefusedAdmission {
		t.Errorf("Write = %+v, %v; want rejected, refused by admission", wres, err)
	}

	// The node's summary Event (--node-event) refused in its namespace
	// is said and counted as a pod Event's refusal is, not dropped
	// silently.
	kubetest.Namespace(t, cs, "open")
	open := kubetest.Pod(t, cs, "open", "b", nil, "")
	denyingWebhook(t, cs, events.NodeEventNamespace, http.StatusForbidden, admissionregistrationv1.Create)
	refusals := kubeapi.NewRefusals()
	log := logrus.New()
	log.SetOutput(io.Discard)
	ev := events.NewConsumer(events.New(cs, "node-a", true), log, refusals)
	orec := record(open, findings.StatePresent, 0, 1, 0)
	for deadline := time.Now().Add(time.Minute); !strings.Contains(refusals.Degraded(), "namespace default"); time.Sleep(100 * time.Millisecond) {
		// Until the API server has the webhook, the summary goes
		// through: another finding.
		orec.Fingerprint += "x"
		if err := ev.Consume(ctx, orec); err != nil {
			t.Fatalf("Consume: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node's summary Event refused in default is not said: /healthz says %q", refusals.Degraded())
		}
	}
}
