// Package e2e runs the built iptables-alerter binary as a real OCI hook:
// crun and runc start containers whose config.json names it at poststart,
// and podman loads the shipped hooks.d file and injects it the way CRI-O
// does (same containers/common hooks library).
//
// It takes the repository (TestMain builds the hook with `go build`), the
// host's busybox-static and iptables files (copied into a throwaway rootfs,
// since no image registry is reachable), and network namespaces pinned by
// internal/testkit/nstest. It gives assertions on the findings file the hook writes.
//
// Invariant: nothing outside the test's temp dirs and its own netns is
// touched; every container, runtime state dir and netns is deleted when the
// test ends. Under CI=true a missing tool or privilege fails the test.
package e2e
