// Package release tests `make release` (docs/release.md) end to end: a
// real OCI registry (go-containerregistry's) in the test process on
// loopback, the release pushed into it and verified with cosign, and the
// install from it alone against a real kube-apiserver; and the release
// workflow, which may run nothing but make targets.
package release
