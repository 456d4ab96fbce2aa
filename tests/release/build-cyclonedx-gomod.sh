#!/bin/sh
# Builds cyclonedx-gomod from the Go module proxy into the tools cache, for
# `make release` (the SBOM of the binaries' Go modules) and tests/release.
# Chosen over syft: it builds in about a minute, and a FROM scratch image
# holds nothing but the Go binaries, whose modules are all it needs to list.
#
# Usage: build-cyclonedx-gomod.sh    prints the binary path on stdout
# Env:   CYCLONEDX_GOMOD_VERSION (default v1.10.0), IPTA_CACHE (default /var/cache/iptables-alerter)
set -eu
. "$(dirname "$0")/../kube/progress.sh"

CYCLONEDX_GOMOD_VERSION=${CYCLONEDX_GOMOD_VERSION:-v1.10.0}
go_tool cyclonedx-gomod "$CYCLONEDX_GOMOD_VERSION" "${IPTA_CACHE:-/var/cache/iptables-alerter}/release/bin" "about a minute on 2 cores" \
	github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod -ldflags "-s -w"
