#!/bin/sh
# Builds helm v3 from the Go module proxy into the tools cache, next to
# kubectl (the Makefile puts that directory first on PATH), for the tests
# that lint, render and apply the chart in packaging/helm. Not a dependency
# of the module: go install builds it from helm's own go.mod.
#
# Usage: build-helm.sh    prints the binary path on stdout
# Env:   HELM_VERSION (default v3.22.0), IPTA_CACHE (default /var/cache/iptables-alerter)
set -eu
. "$(dirname "$0")/progress.sh"

HELM_VERSION=${HELM_VERSION:-v3.22.0}
CACHE=${IPTA_CACHE:-/var/cache/iptables-alerter}/kube/bin
BIN=$CACHE/helm
STAMP=$CACHE/helm.version

cached "$BIN" "$STAMP" "$HELM_VERSION"

command -v go >/dev/null 2>&1 || PATH=$PATH:/usr/local/go/bin
mkdir -p "$CACHE"
# Into a directory of its own, then renamed: a half-built helm is never on PATH.
TMP=$(mktemp -d "$CACHE/.helm-build.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export CGO_ENABLED=0 GOBIN="$TMP" GOFLAGS=-mod=mod
progress "helm $HELM_VERSION" "$BIN" "a few minutes on 2 cores" go install -trimpath -gcflags=all=-dwarf=false \
	-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
	"helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
mv "$TMP/helm" "$BIN"
echo "$HELM_VERSION" >"$STAMP"
echo "$BIN"
