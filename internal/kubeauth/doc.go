// Package kubeauth lets an HTTP request through only when the API server
// says who sent it and that they may: the bearer token is authenticated
// with a TokenReview (authentication.k8s.io/v1), then the user and groups
// it names are authorised with a SubjectAccessReview
// (authorization.k8s.io/v1) for the request's verb on its path, a
// non-resource URL, as the kubelet and kube-rbac-proxy guard /metrics.
// RBAC then grants it like any other: a ClusterRole with
// nonResourceURLs ["/metrics"] and verbs ["get"].
//
// It takes a clientset allowed to create tokenreviews and
// subjectaccessreviews and gives an http.Handler wrapper: 401 without a
// token or with one the API server does not authenticate, 403 when the
// user may not, 429 past the review budget, 503 when the API server
// cannot be asked.
//
// Invariant: no request reaches the wrapped handler without a verdict of
// the API server for its token, verb and path, at most CacheTTL old.
// Verdicts are cached by a hash of the token (never the token itself), in
// bounded caches (tokens the API server does not authenticate in one of
// their own, so they never evict a scraper's), so a scrape every 30 s
// costs no API call and a flood of tokens costs no unbounded memory. New
// tokens are reviewed within a budget (ReviewQPS, ReviewBurst), past it
// answered 429, through a client of the guard's own (NewForConfig): a
// flood of tokens costs the API server a bounded amount and never takes
// the rate limit of the daemon's other work (the forwarder's Events).
package kubeauth
