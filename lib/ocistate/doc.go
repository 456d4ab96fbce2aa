// Package ocistate reads what a container runtime hands an OCI hook: the
// runtime-spec State on stdin and the bundle's config.json.
//
// It gives a Container: ids, pod identity from the kubelet labels, image,
// and the network namespace to inspect (or HostNetwork). Invariant: every
// input is size-bounded and validated before use, and only the fields read
// are kept (the state streams through: a pod's annotations, copied into it,
// can be large); it only reads.
package ocistate
