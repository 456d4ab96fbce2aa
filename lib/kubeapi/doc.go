// Package kubeapi holds what the consumers that talk to the API server
// share about its answers: which errors to retry and which are a refusal
// of one object (Retryable, Refusal, IsForbiddenToUs); the live pod a
// finding names (LivePod, with IsPodGone and IsInvalid on its error); and
// the names of objects derived from findings (ObjectName).
//
// Invariants: an error Retryable calls final is never a reason to hold
// a findings line; the authorizer's 403 (missing RBAC: the forwarder's own
// deployment error, fixed by an admin) and the admission plugins' 403
// while they start are retryable; every other 403 and a 422 name one
// object in one namespace (a ResourceQuota, an admission webhook or
// policy) and are final.
package kubeapi
