#!/bin/sh
# Builds the Prometheus Operator's operator binary from the Go module proxy
# into the tools cache, with the monitoring.coreos.com CRDs of the same
# release beside it, for tests/monitoring's TestPrometheusOperator: the
# operator turns our ServiceMonitor and PrometheusRule into the Prometheus
# configuration it writes to a Secret. Not a dependency of the module. Its
# go.mod replaces its two nested modules (pkg/apis/monitoring, pkg/client)
# with local paths, which `go install pkg@version` refuses and the module's
# zip does not hold: it is built in a copy of the module with those
# replacements dropped, so the same v0.85.0 of each comes from the proxy.
#
# Usage: build-prometheus-operator.sh    prints the binary path on stdout
# Env:   PROMETHEUS_OPERATOR_VERSION (default v0.85.0),
#        IPTA_CACHE (default /var/cache/iptables-alerter)
set -eu
. "$(dirname "$0")/../kube/progress.sh"

VERSION=${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}
MOD=github.com/prometheus-operator/prometheus-operator
CACHE=${IPTA_CACHE:-/var/cache/iptables-alerter}/prometheus-operator
BIN=$CACHE/operator
STAMP=$CACHE/operator.version

# The CRDs are kept beside the binary: without them it is built again.
[ ! -d "$CACHE/crds" ] || cached "$BIN" "$STAMP" "$VERSION"

command -v go >/dev/null 2>&1 || PATH=$PATH:/usr/local/go/bin
mkdir -p "$CACHE"
TMP=$(mktemp -d "$CACHE/.build.XXXXXX")
trap 'chmod -R u+w "$TMP" 2>/dev/null; rm -rf "$TMP"' EXIT
export CGO_ENABLED=0 GOFLAGS="-mod=mod -p=2" GOTOOLCHAIN=local
# The module's source, from the proxy through the module cache.
DIR=$(cd "$TMP" && go mod download -json "$MOD@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$DIR" ] || { echo "build-prometheus-operator: no source for $MOD@$VERSION" >&2; exit 1; }
cp -R "$DIR" "$TMP/src"
chmod -R u+w "$TMP/src"
(cd "$TMP/src" && go mod edit -dropreplace=$MOD/pkg/apis/monitoring -dropreplace=$MOD/pkg/client)
(cd "$TMP/src" && progress "prometheus-operator $VERSION" "$BIN" "several minutes on 2 cores" go build -trimpath \
	-ldflags "-s -w -X github.com/prometheus/common/version.Version=${VERSION#v}" \
	-o "$TMP/operator" ./cmd/operator) >&2
mkdir -p "$TMP/crds"
cp "$TMP/src/example/prometheus-operator-crd/"*.yaml "$TMP/crds/"
rm -rf "$CACHE/crds"
mv "$TMP/crds" "$CACHE/crds"
mv "$TMP/operator" "$BIN"
echo "$VERSION" >"$STAMP"
echo "$BIN"
