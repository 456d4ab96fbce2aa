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
CACHE=${IPTA_CACHE:-/var/cache/iptables-alerter}/release/bin
BIN=$CACHE/cyclonedx-gomod
STAMP=$CACHE/cyclonedx-gomod.version

cached "$BIN" "$STAMP" "$CYCLONEDX_GOMOD_VERSION"

command -v go >/dev/null 2>&1 || PATH=$PATH:/usr/local/go/bin
mkdir -p "$CACHE"
TMP=$(mktemp -d "$CACHE/.cyclonedx-gomod-build.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export CGO_ENABLED=0 GOBIN="$TMP" GOFLAGS="-mod=mod -p=2"
progress "cyclonedx-gomod $CYCLONEDX_GOMOD_VERSION" "$BIN" "about a minute on 2 cores" go install -trimpath -gcflags=all=-dwarf=false -ldflags "-s -w" \
	"github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@$CYCLONEDX_GOMOD_VERSION" >&2
mv "$TMP/cyclonedx-gomod" "$BIN"
echo "$CYCLONEDX_GOMOD_VERSION" >"$STAMP"
echo "$BIN"
