#!/bin/sh
# Builds upstream Prometheus from the Go module proxy into the tools cache,
# for tests/monitoring's TestPrometheusOperator: the configuration the
# Prometheus Operator generates discovers its targets with
# kubernetes_sd_configs, which Debian 12's prometheus 2.42 (the one the other
# monitoring tests run) does not have. Lean on purpose: only cmd/prometheus,
# with every service discovery but Kubernetes left out (the remove_all_sd
# and enable_kubernetes_sd build tags of the module's plugins/ package) and
# no web UI assets (they are embedded only under the builtinassets tag).
# Not a dependency of the module: go install builds it from Prometheus's
# own go.mod (the v0.3xx.y module versions are the v3.xx.y releases).
#
# Usage: build-prometheus.sh    prints the binary path on stdout
# Env:   PROMETHEUS_MODULE_VERSION (default v0.316.0, Prometheus 3.16.0),
#        IPTA_CACHE (default /var/cache/iptables-alerter)
set -eu
. "$(dirname "$0")/../kube/progress.sh"

VERSION=${PROMETHEUS_MODULE_VERSION:-v0.316.0}
CACHE=${IPTA_CACHE:-/var/cache/iptables-alerter}/prometheus
BIN=$CACHE/prometheus
STAMP=$CACHE/prometheus.version
TAGS=remove_all_sd,enable_kubernetes_sd

# The stamp holds the tags too: a binary built with other discoveries is rebuilt.
cached "$BIN" "$STAMP" "$VERSION $TAGS"

command -v go >/dev/null 2>&1 || PATH=$PATH:/usr/local/go/bin
mkdir -p "$CACHE"
# Into a directory of its own, then renamed: a half-built prometheus is never used.
TMP=$(mktemp -d "$CACHE/.build.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export CGO_ENABLED=0 GOBIN="$TMP" GOFLAGS="-mod=mod -p=2" GOTOOLCHAIN=local
# 3.16.0 from v0.316.0: what `prometheus --version` prints.
minor=${VERSION#v0.}
minor=${minor%%.*}
release=3.$((minor - 300)).${VERSION##*.}
progress "prometheus $release ($VERSION, Kubernetes discovery only)" "$BIN" "several minutes on 2 cores" go install -trimpath \
	-tags "$TAGS" \
	-ldflags "-s -w -X github.com/prometheus/common/version.Version=$release" \
	"github.com/prometheus/prometheus/cmd/prometheus@$VERSION" >&2
mv "$TMP/prometheus" "$BIN"
echo "$VERSION $TAGS" >"$STAMP"
echo "$BIN"
