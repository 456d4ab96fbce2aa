#!/bin/sh
# Builds cosign from the Go module proxy into the tools cache, for
# `make release` (it signs the image and the chart) and tests/release
# (it verifies them); only its cmd/cosign package.
#
# Usage: build-cosign.sh    prints the binary path on stdout
# Env:   COSIGN_VERSION (default v2.6.5), IPTA_CACHE (default /var/cache/iptables-alerter)
set -eu
. "$(dirname "$0")/../kube/progress.sh"

COSIGN_VERSION=${COSIGN_VERSION:-v2.6.5}
go_tool cosign "$COSIGN_VERSION" "${IPTA_CACHE:-/var/cache/iptables-alerter}/release/bin" "about 5 minutes on 2 cores" \
	github.com/sigstore/cosign/v2/cmd/cosign -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN_VERSION"
