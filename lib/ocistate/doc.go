// Package ocistate reads what a container runtime hands an OCI hook: the
// runtime-spec State on stdin and the bundle's config.json.
//
// It gives a Container: ids, pod identity from the kubelet labels, image,
// and the network namespace to inspect (or HostNetwork). Invariant: every
// input is size-bounded and validated before use; it only reads.
package ocistate
