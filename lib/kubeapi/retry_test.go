package kubeapi

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
)

var (
	events  = schema.GroupResource{Group: "events.k8s.io", Resource: "events"}
	quota   = apierrors.NewForbidden(events, "x", errors.New("exceeded quota: q, requested: count/events.events.k8s.io=1, used: count/events.events.k8s.io=0, limited: count/events.events.k8s.io=0"))
	webhook = apierrors.NewForbidden(events, "x", errors.New(`admission webhook "deny.example.com" denied the request: no`))
	policy  = apierrors.NewForbidden(events, "x", errors.New(`ValidatingAdmissionPolicy 'deny' with binding 'deny' denied request: no`))
	// failedCall is what kube-apiserver answers when a webhook with
	// failurePolicy Fail cannot be called (its dispatcher's NewInternalError).
	// denied500 is a webhook's denial with the code it chose, passed on
	// by the API server.
	denied500 = &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 500,
		Message: `admission webhook "check.example.com" denied the request: backend error`}}
	failedCall = apierrors.NewInternalError(errors.New(`failed calling webhook "check.example.com": failed to call webhook: Post "https://check.example.svc:443/validate?timeout=10s": dial tcp 10.96.0.9:443: connect: connection refused`))
)

func TestRetryable(t *testing.T) {
	terminating := apierrors.NewForbidden(events, "x", errors.New("unable to create new content in namespace shop because it is being terminated"))
	terminating.ErrStatus.Details.Causes = append(terminating.ErrStatus.Details.Causes, metav1.StatusCause{Type: corev1.NamespaceTerminatingCause})

	rbac := apierrors.NewForbidden(events, "x", errors.New(`User "system:serviceaccount:a:b" cannot create resource "events" in API group "events.k8s.io" in the namespace "shop"`))
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{name: "connection refused", err: &url.Error{Op: "Post", URL: "https://127.0.0.1:6443", Err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}}, want: true},
		{name: "eof", err: fmt.Errorf("create event: %w", io.EOF), want: true},
		{name: "client timeout", err: context.DeadlineExceeded, want: true},
		{name: "429", err: apierrors.NewTooManyRequests("slow down", 1), want: true},
		{name: "500", err: apierrors.NewInternalError(errors.New("etcd")), want: true},
		{name: "503", err: apierrors.NewServiceUnavailable("later"), want: true},
		{name: "504", err: apierrors.NewTimeoutError("etcd slow", 1), want: true},
		{name: "server timeout", err: apierrors.NewServerTimeout(events, "create", 1), want: true},
		{name: "401", err: apierrors.NewUnauthorized("token expired"), want: true},
		{name: "403 rbac", err: rbac, want: true},
		{name: "403 rbac cluster scope", err: apierrors.NewForbidden(events, "", errors.New(`User "system:serviceaccount:a:b" cannot list resource "events" in API group "events.k8s.io" at the cluster scope`)), want: true},
		{name: "403 namespace not ready", err: apierrors.NewForbidden(events, "x", errors.New("not yet ready to handle request")), want: true},
		{name: "403 quota", err: quota, want: false},
		{name: "403 webhook", err: webhook, want: false},
		{name: "webhook denies with a 500", err: denied500, want: false},
		{name: "webhook cannot be called", err: failedCall, want: true},
		{name: "403 policy", err: policy, want: false},
		{name: "403 namespace terminating", err: fmt.Errorf("create event: %w", terminating), want: false},
		{name: "404 namespace gone", err: apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "shop"), want: false},
		{name: "422", err: apierrors.NewInvalid(schema.GroupKind{Group: "events.k8s.io", Kind: "Event"}, "x", field.ErrorList{field.Invalid(field.NewPath("note"), "", "too long")}), want: false},
		{name: "400", err: apierrors.NewBadRequest("bad"), want: false},
		{name: "409 conflict", err: apierrors.NewConflict(events, "x", errors.New("changed")), want: false},
		{name: "413", err: apierrors.NewRequestEntityTooLargeError("big"), want: false},
		{name: "405", err: apierrors.NewMethodNotSupported(events, "create"), want: false},
		{name: "nil", err: nil, want: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Retryable(tc.err); got != tc.want {
				t.Errorf("Retryable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestRefusal(t *testing.T) {
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: "events.k8s.io", Kind: "Event"}, "x", field.ErrorList{field.Invalid(field.NewPath("note"), "", "too long")})
	rbac := apierrors.NewForbidden(events, "x", errors.New(`User "u" cannot create resource "events" in API group "events.k8s.io" in the namespace "shop"`))
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"quota", fmt.Errorf("write: %w", quota), RefusedQuota},
		{"quota status unknown", apierrors.NewForbidden(events, "x", errors.New("status unknown for quota: q, resources: count/events.events.k8s.io")), RefusedQuota},
		{"webhook", webhook, RefusedAdmission},
		{"policy", policy, RefusedAdmission},
		{"policy invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "Report"}, "x", field.ErrorList{field.Invalid(field.NewPath(""), "", "ValidatingAdmissionPolicy 'deny' with binding 'deny' denied request: no")}), RefusedAdmission},
		{"422", invalid, RefusedInvalid},
		{"other 403", apierrors.NewForbidden(events, "x", errors.New("something else")), RefusedOther},
		{"rbac", rbac, RefusedForbidden},
		{"webhook cannot be called", fmt.Errorf("create: %w", failedCall), RefusedWebhook},
		{"webhook denies with a 500", fmt.Errorf("create: %w", denied500), RefusedAdmission},
		{"webhook denies with a 429", &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 429, Reason: metav1.StatusReasonTooManyRequests,
			Message: `admission webhook "check.example.com" denied the request: slow down`}}, RefusedAdmission},
		{"not ready is retried", apierrors.NewForbidden(events, "x", errors.New("not yet ready to handle request")), ""},
		{"503", apierrors.NewServiceUnavailable("later"), ""},
		{"404", apierrors.NewNotFound(events, "x"), ""},
		{"no status", errors.New("boom"), ""},
		{"nil", nil, ""},
	}
	for _, tc := range cases {
		if got := Refusal(tc.err); got != tc.want {
			t.Errorf("%s: Refusal(%v) = %q, want %q", tc.name, tc.err, got, tc.want)
		}
	}
	if !IsForbiddenToUs(fmt.Errorf("get: %w", rbac)) || IsForbiddenToUs(quota) || IsForbiddenToUs(errors.New(`User "u" cannot get resource "x"`)) {
		t.Error("IsForbiddenToUs: want true for the authorizer's 403 only")
	}
}

// TestRefusedHereOnlyWhileRefused: an authorizer's 403 whose call the
// access reviews now allow here too (RBAC's informers not yet synced
// when it was given, after an API server restart) is no namespace's
// rule: retried, not refused for good. One the review still refuses in
// its namespace, while allowing it everywhere, is.
func TestRefusedHereOnlyWhileRefused(t *testing.T) {
	err := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "web-30",
		errors.New(`User "system:serviceaccount:a:b" cannot get resource "pods" in API group "" in the namespace "shop"`))
	for _, tc := range []struct {
		name        string
		deniedInNS  bool
		wantRefused bool
	}{{"allowed by now", false, false}, {"still refused there", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			var asked []authorizationv1.ResourceAttributes
			cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
				r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
				attrs := *r.Spec.ResourceAttributes
				asked = append(asked, attrs)
				r.Status.Allowed = !(tc.deniedInNS && attrs.Namespace == "shop")
				return true, r, nil
			})
			here, rerr := RefusedHere(context.Background(), cs, err)
			if rerr != nil || here != tc.wantRefused {
				t.Errorf("RefusedHere = %v, %v; want %v", here, rerr, tc.wantRefused)
			}
			if len(asked) != 2 || asked[1].Namespace != "shop" || asked[1].Name != "web-30" || asked[0].Namespace != "" {
				t.Errorf("reviews asked %+v; want everywhere, then pods/web-30 in shop", asked)
			}
		})
	}
}

// TestHeldUp: against a stand-in API server, a create that runs out of
// time (the client's deadline, or the server's 504) is marked for the
// webhook hold while the server says it is ready, and left as it is
// (retried for good) when the server is not, cannot say, or the call
// failed otherwise.
func TestHeldUp(t *testing.T) {
	reasons := map[int]metav1.StatusReason{http.StatusGatewayTimeout: metav1.StatusReasonTimeout,
		http.StatusInternalServerError: metav1.StatusReasonInternalError, http.StatusForbidden: metav1.StatusReasonForbidden}
	for _, tc := range []struct {
		name   string
		create int // status of the create; 0: no answer
		readyz int // status of /readyz; 0: no answer
		done   bool
		// queued: /version waits past the deadline (priority and
		// fairness queues, which exempt /readyz).
		queued bool
		// abort: the create's handler is aborted after its answer began,
		// as the API server's timeout filter does (an HTTP/2 reset).
		abort bool
		held  bool
	}{
		{name: "timeout, server ready", readyz: http.StatusOK, held: true},
		{name: "504, server ready", create: http.StatusGatewayTimeout, readyz: http.StatusOK, held: true},
		{name: "timeout, server not ready", readyz: http.StatusInternalServerError},
		{name: "timeout, no readiness answer"},
		{name: "timeout, readiness refused", readyz: http.StatusForbidden},
		{name: "another 500, server ready", create: http.StatusInternalServerError, readyz: http.StatusOK},
		{name: "timeout, caller gone", readyz: http.StatusOK, done: true},
		// Priority and fairness shedding load: client-go waits and tries
		// again until the deadline, while /readyz is exempt.
		{name: "429s until the deadline, server ready", create: http.StatusTooManyRequests, readyz: http.StatusOK},
		{name: "timeout, server ready but queueing", readyz: http.StatusOK, queued: true},
		{name: "the server's deadline after its answer began, server ready", readyz: http.StatusOK, abort: true, held: true},
		{name: "the server's deadline after its answer began, server not ready", readyz: http.StatusInternalServerError, abort: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			quit := make(chan struct{})
			answer := func(w http.ResponseWriter, r *http.Request, code int) {
				if code == 0 {
					select {
					case <-quit:
					case <-r.Context().Done():
					}
					return
				}
				w.Header().Set("Content-Type", "application/json")
				if code == http.StatusTooManyRequests {
					// Past the client's deadline: it ends in the wait.
					w.Header().Set("Retry-After", "2")
				}
				w.WriteHeader(code)
				_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
					Status: metav1.StatusFailure, Code: int32(code), Reason: reasons[code], Message: "stand-in"})
			}
			// Over TLS and HTTP/2, as client-go speaks to an API server.
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/version" {
					if tc.queued {
						answer(w, r, 0)
						return
					}
					_, _ = io.WriteString(w, `{"major":"1","minor":"35"}`)
					return
				}
				if r.URL.Path == "/readyz" {
					if tc.readyz == http.StatusOK {
						_, _ = io.WriteString(w, "ok")
						return
					}
					answer(w, r, tc.readyz)
					return
				}
				if tc.abort {
					w.WriteHeader(http.StatusInternalServerError)
					w.(http.Flusher).Flush()
					panic(http.ErrAbortHandler)
				}
				answer(w, r, tc.create)
			}))
			srv.EnableHTTP2 = true
			srv.StartTLS()
			t.Cleanup(srv.Close)
			t.Cleanup(func() { close(quit) })
			ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
			client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, Timeout: time.Second, TLSClientConfig: rest.TLSClientConfig{CAData: ca}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, err = client.CoreV1().ConfigMaps("shop").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
			if err == nil || !Retryable(err) {
				t.Fatalf("the create gave %v, want a retryable error", err)
			}
			if tc.done {
				cancel()
			}
			// As the callers pass it, wrapped.
			err = fmt.Errorf("create configmap: %w", err)
			got := HeldUp(ctx, client, err)
			if WebhookFailed(got) != tc.held || (Refusal(got) == RefusedWebhook) != tc.held {
				t.Errorf("HeldUp(%v) = %v: WebhookFailed %v, Refusal %q; want held %v", err, got, WebhookFailed(got), Refusal(got), tc.held)
			}
			if !errors.Is(got, err) || !Retryable(got) {
				t.Errorf("HeldUp(%v) = %v: want the same error, still retryable", err, got)
			}
		})
	}
}
