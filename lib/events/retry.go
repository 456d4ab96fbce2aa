package events

import (
	"errors"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Retryable tells whether an API error may go away by itself or by an admin
// fixing the cluster, so the finding must be kept and tried again; false
// means the API has decided and trying again gets the same answer.
//
// Retryable (keep the line, back off, try again):
//   - no HTTP answer at all: connection refused or reset, DNS, TLS, timeouts;
//   - 429 Too Many Requests (priority and fairness, max-in-flight);
//   - every 5xx, and 504/ServerTimeout;
//   - 401 Unauthorized: a projected token is rotated on disk and re-read;
//   - 403 Forbidden, except for a terminating namespace: missing RBAC is a
//     deployment error an admin fixes, and the NamespaceLifecycle plugin
//     answers 403 "not yet ready to handle request" while it starts.
//
// Definitive (log, count, move on):
//   - 403 with cause NamespaceTerminating: the pod's namespace is going away;
//   - 404 Not Found: the namespace is gone;
//   - 400, 405, 406, 409 other than AlreadyExists, 410, 413, 415, 422 and any
//     other 4xx: the request itself is wrong and will stay wrong.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	code := int(status.Status().Code)
	switch {
	case apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err):
		return true
	case apierrors.IsUnauthorized(err):
		return true
	case apierrors.IsForbidden(err):
		return !apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause)
	case code >= http.StatusInternalServerError:
		return true
	case code == 0:
		// A status without a code did not come from the server.
		return true
	}
	return false
}
