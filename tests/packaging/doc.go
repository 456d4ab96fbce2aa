// Package packaging tests what packaging/ ships, on real parts: the image
// built by `make image` with podman and the installer run in it against a
// scratch node root; the kustomize base and OpenShift overlay applied
// server-side to a real kube-apiserver; the Helm chart linted, rendered and
// compared with them object by object, applied and installed with helm
// against the same kind of server; the RPM built by `make rpm` and
// installed with rpm into a scratch root; the MachineConfig against its
// Butane source and the repo's files; `make install` against a fake CRI-O
// configuration.
package packaging
