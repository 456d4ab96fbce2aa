package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/iptables-alerter/iptables-alerter/lib/owner"
)

// Retryable tells whether an API error may go away by itself or by an admin
// fixing the cluster, so the finding must be kept and tried again; false
// means the API has decided about this object and trying again gets the
// same answer.
//
// Retryable (keep the line, back off, try again):
//   - no HTTP answer at all: connection refused or reset, DNS, TLS, timeouts;
//   - 429 Too Many Requests (priority and fairness, max-in-flight);
//   - every 5xx, and 504/ServerTimeout;
//   - 401 Unauthorized: a projected token is rotated on disk and re-read;
//   - 403 from the authorizer (IsForbiddenToUs): missing RBAC is a
//     deployment error an admin fixes, and it refuses every object alike;
//   - 403 "not yet ready to handle request": the NamespaceLifecycle,
//     webhook and policy admission plugins answer it while they start.
//
// Definitive (log, count, move on):
//   - LivePod's IsPodGone and IsInvalid: no such pod, or none can be;
//   - 403 with cause NamespaceTerminating: the pod's namespace is going away;
//   - every other 403 (Refusal): a ResourceQuota, an admission webhook or
//     policy refused this object in its namespace; retrying would hold
//     every later finding of the node behind one namespace's rule;
//   - an admission webhook's denial with any code (the webhook chooses
//     it: a 500 or 503 from its failing backend is common);
//   - 404 Not Found: the namespace is gone;
//   - 400, 405, 406, 409 other than AlreadyExists, 410, 413, 415, 422 and any
//     other 4xx: the request itself is wrong and will stay wrong.
func Retryable(err error) bool {
	if err == nil || IsPodGone(err) || IsInvalid(err) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	code := int(status.Status().Code)
	switch {
	case webhookDenied(status):
		// Whatever its code: the API server passes on the webhook's
		// own, which may be a 5xx, a 429 or a 401.
		return false
	case apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err):
		return true
	case apierrors.IsUnauthorized(err):
		return true
	case apierrors.IsForbidden(err):
		return IsForbiddenToUs(err) || notReady(status)
	case code >= http.StatusInternalServerError:
		return true
	case code == 0:
		// A status without a code did not come from the server.
		return true
	}
	return false
}

// authorizerDenial is the message the API server's authorizer gives
// (k8s.io/apiserver responsewriters.ForbiddenStatusError), after the
// object's "... is forbidden: ".
var authorizerDenial = regexp.MustCompile(`(?:^|: )User ".*" cannot [^ ]+ (?:resource|path) "`)

// IsForbiddenToUs reports whether err is a 403 of the authorizer (RBAC):
// the client itself may not make this call, in this namespace or at all,
// whatever the object. Confirm with a SelfSubjectAccessReview before
// acting on it: a webhook authorizer may word its reason alike.
func IsForbiddenToUs(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || !apierrors.IsForbidden(err) {
		return false
	}
	return authorizerDenial.MatchString(status.Status().Message)
}

// deniedCall reads the call an authorizer's 403 names: its verb, resource
// and API group ("" for the core group).
var deniedCall = regexp.MustCompile(`User ".*" cannot ([^ ]+) resource "([^"]+)" in API group "([^"]*)"(?: in the namespace "([^"]*)")?`)

// allowedEverywhere tells, for an authorizer's 403 (IsForbiddenToUs),
// whether the same call is allowed in every namespace and still refused
// for this object in its namespace (two SelfSubjectAccessReviews): then
// the refusal is about this object or its namespace alone (a webhook
// authorizer's rule), not missing RBAC, and holding every later call
// behind it would fix nothing. False for a 403 that names no call; an
// error when a review could not be made.
func allowedEverywhere(ctx context.Context, client kubernetes.Interface, err error) (bool, error) {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false, nil
	}
	m := deniedCall.FindStringSubmatch(status.Status().Message)
	if m == nil {
		return false, nil
	}
	ask := func(namespace, name string) (bool, error) {
		r, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: m[1], Resource: m[2], Group: m[3], Namespace: namespace, Name: name}},
		}, metav1.CreateOptions{})
		if err != nil {
			return false, fmt.Errorf("ask whether the forwarder may %s %s: %w", m[1], m[2], err)
		}
		return r.Status.Allowed, nil
	}
	everywhere, err := ask("", "")
	if err != nil || !everywhere {
		return false, err
	}
	// And still refused here: a 403 the authorizers gave while starting
	// (RBAC's informers not yet synced after an API server restart) is
	// allowed by now, and is retried, not taken for a rule.
	name := ""
	if d := status.Status().Details; d != nil {
		name = d.Name
	}
	here, err := ask(m[4], name)
	return err == nil && !here, err
}

// RefusedHere tells whether err, an authorizer's 403, is about its
// namespace or object alone: the same call is allowed in every namespace
// (allowedEverywhere), so a webhook authorizer's rule refused it, for
// good. False for any other error and for missing RBAC (retried until an
// admin grants it); an error when the review could not be made (retry).
func RefusedHere(ctx context.Context, client kubernetes.Interface, err error) (bool, error) {
	if !IsForbiddenToUs(err) {
		return false, nil
	}
	return allowedEverywhere(ctx, client, err)
}

// Owned is r.Owned of pod, but for an authorizer's 403 on the way up
// that RefusedHere says is about this namespace or object alone:
// then the nearest owner read (the pod's controller) stands, refused says
// why, and err is nil. Missing RBAC stays an error, retried until an admin
// grants it; a refusal of one namespace would hold every later finding of
// the node for good.
func Owned(ctx context.Context, client kubernetes.Interface, r *owner.Resolver, pod *corev1.Pod) (o owner.Owned, refused, err error) {
	o, err = r.Owned(ctx, pod)
	switch here, rerr := RefusedHere(ctx, client, err); {
	case rerr != nil:
		return o, nil, rerr
	case here:
		return o, err, nil
	}
	return o, nil, err
}

// WebhookFailed tells an admission webhook that the API server could not
// call (down, timing out, a malformed answer) and whose failurePolicy is
// Fail: a 500 "failed calling webhook" (k8s.io/apiserver's webhook
// dispatchers); or a call that ran out of time while the API server was
// ready (HeldUp), as a webhook chain longer than the request timeout
// does. It is Retryable, as the webhook may come back, but its
// namespaceSelector may match one namespace alone, so Refusals.Outlasted
// bounds how long it holds the node's line.
func WebhookFailed(err error) bool {
	var held *heldUpError
	if errors.As(err, &held) {
		return true
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	s := status.Status()
	return s.Code == http.StatusInternalServerError && strings.Contains(s.Message, "failed calling webhook")
}

// heldUpError is a call that ran out of time while the API server was
// ready (HeldUp).
type heldUpError struct{ err error }

func (e *heldUpError) Error() string {
	return e.err.Error() + " (the API server is ready: held up in admission)"
}

func (e *heldUpError) Unwrap() error { return e.err }

// readyWithin bounds HeldUp's readiness check: a server slower than this
// to say it is ready is not.
const readyWithin = 5 * time.Second

// HeldUp returns err, the error of a write (reads pass no admission),
// marked for WebhookFailed when the write ran out of time (timedOut) while
// the API server answers its readiness check (/readyz, which checks etcd)
// at once, and /version, which waits in the write's priority and fairness
// queues, too: admission webhooks held it up. A hanging webhook is cut by its
// own timeout (10 s by default, 30 s at most) with a 500 "failed calling
// webhook", but the client's --request-timeout (30 s) ends the write
// first when the webhook's is as long, and a chain of webhooks that each
// answer in time may add up to more; such a namespace's finding was
// retried for good, every later finding of the node behind it. err is
// unchanged otherwise: when ctx is done (its own deadline is no
// server's), and when the check fails or cannot be made (a server down
// or slow is retried for good: nothing is lost). Left: an etcd whose
// writes alone are slow passes the check and is taken for admission.
func HeldUp(ctx context.Context, client kubernetes.Interface, err error) error {
	if err == nil || ctx.Err() != nil || !timedOut(err) || client == nil {
		return err
	}
	// /readyz sees etcd, but priority and fairness exempt it: /version,
	// asked as the write was, waits in the same queues, where an
	// overloaded server holds a write until its deadline.
	if answers(ctx, client, "/readyz", "/version") != nil {
		return err
	}
	return &heldUpError{err}
}

// Ready returns nil when the API server says it is ready (/readyz, within
// readyWithin): past its start, with the CRDs registered before it served
// (its CRD informer synced) and etcd reached. An error when it is not, or
// cannot be asked.
func Ready(ctx context.Context, client kubernetes.Interface) error {
	return answers(ctx, client, "/readyz")
}

// answers asks the API server for each path in turn, within readyWithin
// in all, and returns the first error.
func answers(ctx context.Context, client kubernetes.Interface, paths ...string) error {
	var rc rest.Interface
	if client != nil {
		rc = client.Discovery().RESTClient()
	}
	if rc == nil {
		return errors.New("no client to ask the API server")
	}
	ctx, cancel := context.WithTimeout(ctx, readyWithin)
	defer cancel()
	for _, path := range paths {
		if err := rc.Get().AbsPath(path).Do(ctx).Error(); err != nil {
			return fmt.Errorf("GET %s: %w", path, err)
		}
	}
	return nil
}

// timedOut tells a call that ran out of time: the client's deadline (no
// answer in --request-timeout) or the API server's own (504, a 500
// ServerTimeout, or its stream reset: serverAborted). Not one client-go
// tried again within the deadline: the server answered it, with a 429 or
// a Retry-After, and an overloaded server sheds load that way (while its
// /readyz, exempt from priority and fairness, answers at once). client-go
// says so only in the text: its wrapper of the earlier try's error is
// unexported, and the rate limiter's wait ends in the deadline.
func timedOut(err error) bool {
	msg := err.Error()
	if strings.Contains(msg, "error from a previous attempt") || strings.Contains(msg, "client rate limiter Wait returned an error") {
		return false
	}
	if apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || serverAborted(msg) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// serverAborted tells, from an error's text, the API server's own
// deadline met after its answer had begun (a webhook's 500 being written
// as the deadline passed): its timeout filter then aborts the handler,
// and HTTP/2 resets the stream with INTERNAL_ERROR. The error's type is
// net/http's unexported copy of x/net/http2's; only its text says so.
func serverAborted(msg string) bool {
	return strings.Contains(msg, "stream error: ") && strings.Contains(msg, "INTERNAL_ERROR; received from peer")
}

// webhookDenied is an admission webhook's answer "no" (k8s.io/apiserver's
// webhook errors.ToStatusErr), which carries the code the webhook chose.
func webhookDenied(status apierrors.APIStatus) bool {
	msg := status.Status().Message
	return strings.Contains(msg, "admission webhook") && strings.Contains(msg, "denied the request")
}

// notReady is the admission plugins' 403 while their informers start.
func notReady(status apierrors.APIStatus) bool {
	return strings.Contains(status.Status().Message, "not yet ready to handle request")
}

// Reasons Refusal gives: a bounded set, for metric labels.
const (
	RefusedQuota     = "quota"
	RefusedAdmission = "admission"
	RefusedInvalid   = "invalid"
	RefusedForbidden = "forbidden"
	RefusedWebhook   = "webhook"
	RefusedOther     = "other"
)

// RefusedReasons lists every reason Refusal gives.
var RefusedReasons = []string{RefusedQuota, RefusedAdmission, RefusedInvalid, RefusedForbidden, RefusedWebhook, RefusedOther}

// Refusal names why the API server refused an object for good in its
// namespace: a 403 that is neither the authorizer's nor a namespace going
// away or starting up (a ResourceQuota, an admission webhook or policy),
// or a 422; RefusedForbidden for the authorizer's 403, which callers
// take for the object's refusal only once an access review said the call
// is allowed; and RefusedWebhook for a webhook that cannot be called
// (WebhookFailed), taken for one only once it outlasted Refusals.Hold.
// Empty for every other error: those are retried (Retryable), or say
// something other than "this namespace will not take it".
func Refusal(err error) string {
	switch {
	case err == nil:
		return ""
	case IsForbiddenToUs(err):
		// Retryable, but when a SelfSubjectAccessReview said the
		// forwarder may make the call, the 403 is about this object.
		return RefusedForbidden
	case WebhookFailed(err):
		// Before the status: HeldUp's has none.
		return RefusedWebhook
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return ""
	}
	if Retryable(err) {
		return ""
	}
	msg := status.Status().Message
	switch {
	case webhookDenied(status):
		return RefusedAdmission
	case apierrors.IsInvalid(err):
		if strings.Contains(msg, "denied request") {
			return RefusedAdmission
		}
		return RefusedInvalid
	case !apierrors.IsForbidden(err), apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return ""
	case strings.Contains(msg, "exceeded quota") || strings.Contains(msg, "for quota"):
		return RefusedQuota
	case strings.Contains(msg, "admission webhook") || strings.Contains(msg, "denied request"):
		return RefusedAdmission
	}
	return RefusedOther
}
