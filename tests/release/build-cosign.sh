#!/bin/sh
# Builds cosign from the Go module proxy into the tools cache, for
# `make release` (it signs the image and the chart) and tests/release
# (it verifies them). Not a dependency of the module: go install builds it
# from cosign's own go.mod, only its cmd/cosign package.
#
# Usage: build-cosign.sh    prints the binary path on stdout
# Env:   COSIGN_VERSION (default v2.6.5), IPTA_CACHE (default /var/cache/iptables-alerter)
set -eu
. "$(dirname "$0")/../kube/progress.sh"

COSIGN_VERSION=${COSIGN_VERSION:-v2.6.5}
CACHE=${IPTA_CACHE:-/var/cache/iptables-alerter}/release/bin
BIN=$CACHE/cosign
STAMP=$CACHE/cosign.version

cached "$BIN" "$STAMP" "$COSIGN_VERSION"

command -v go >/dev/null 2>&1 || PATH=$PATH:/usr/local/go/bin
mkdir -p "$CACHE"
# Into a directory of its own, then renamed: a half-built cosign is never used.
TMP=$(mktemp -d "$CACHE/.cosign-build.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export CGO_ENABLED=0 GOBIN="$TMP" GOFLAGS="-mod=mod -p=2"
progress "cosign $COSIGN_VERSION" "$BIN" "about 5 minutes on 2 cores" go install -trimpath -gcflags=all=-dwarf=false \
	-ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN_VERSION" \
	"github.com/sigstore/cosign/v2/cmd/cosign@$COSIGN_VERSION" >&2
mv "$TMP/cosign" "$BIN"
echo "$COSIGN_VERSION" >"$STAMP"
echo "$BIN"
