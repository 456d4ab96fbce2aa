#!/bin/sh
# Builds helm v3 from the Go module proxy into the tools cache, next to
# kubectl (the Makefile puts that directory first on PATH), for the tests
# that lint, render and apply the chart in packaging/helm.
#
# Usage: build-helm.sh    prints the binary path on stdout
# Env:   HELM_VERSION (default v3.22.0), IPTA_CACHE (default /var/cache/iptables-alerter)
set -eu
. "$(dirname "$0")/progress.sh"

HELM_VERSION=${HELM_VERSION:-v3.22.0}
go_tool helm "$HELM_VERSION" "${IPTA_CACHE:-/var/cache/iptables-alerter}/kube/bin" "a few minutes on 2 cores" \
	helm.sh/helm/v3/cmd/helm -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
