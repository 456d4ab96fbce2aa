#!/bin/sh
# Builds, from the Go module proxy into the tools cache, the Prometheus
# Operator's operator binary with the monitoring.coreos.com CRDs of the same
# release beside it, and the upstream Prometheus server that operator
# release is built against, for tests/monitoring's TestPrometheusOperator:
# the operator turns our ServiceMonitor and PrometheusRule into the
# configuration it writes to a Secret, and that Prometheus runs it. Debian
# 12's prometheus 2.42 (the one the other monitoring tests run) cannot: the
# configuration discovers its targets with kubernetes_sd_configs, which
# Debian builds without.
#
# Both come from one copy of the operator's module, so they share one
# module graph: Prometheus is the version the operator's go.mod requires
# (v0.305.0, Prometheus 3.5.0, also the operator's default Prometheus
# version), and the packages both link (client-go, the Kubernetes API
# types, Prometheus's own configuration and PromQL packages) are compiled
# once. Built apart, each compiled its own client-go: about twice the time.
# Prometheus is lean on purpose: only cmd/prometheus, with every service
# discovery but Kubernetes (and the built-in file and http ones) left out of
# its plugins package in the copy, and no web UI assets (embedded only
# under the builtinassets tag).
#
# The operator's go.mod replaces its two nested modules (pkg/apis/monitoring,
# pkg/client) with local paths, which the module's zip does not hold: the
# copy drops those replacements, so the same v0.85.0 of each comes from the
# proxy. Not a dependency of this project's module.
#
# Usage: build-prometheus-operator.sh    prints the operator's path on stdout
# Env:   PROMETHEUS_OPERATOR_VERSION (default v0.85.0),
#        IPTA_CACHE (default /var/cache/iptables-alerter)
set -eu
. "$(dirname "$0")/../kube/progress.sh"

VERSION=${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}
MOD=github.com/prometheus-operator/prometheus-operator
PROM=github.com/prometheus/prometheus
CACHE=${IPTA_CACHE:-/var/cache/iptables-alerter}/prometheus-operator
BIN=$CACHE/operator
STAMP=$CACHE/operator.version
# What the stamp holds: a cache of another layout (say, without the
# Prometheus built beside it) is built again.
WANT="$VERSION with prometheus, kubernetes discovery only"

# The CRDs and Prometheus are kept beside the binary: without them all is built again.
[ ! -d "$CACHE/crds" ] || [ ! -x "$CACHE/prometheus" ] || cached "$BIN" "$STAMP" "$WANT"

command -v go >/dev/null 2>&1 || PATH=$PATH:/usr/local/go/bin
mkdir -p "$CACHE"
TMP=$(mktemp -d "$CACHE/.build.XXXXXX")
trap 'chmod -R u+w "$TMP" 2>/dev/null; rm -rf "$TMP"' EXIT
export CGO_ENABLED=0 GOFLAGS="-mod=mod -p=2" GOTOOLCHAIN=local
# The module's source, from the proxy through the module cache.
srcdir() {
	(cd "$TMP" && go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
}
DIR=$(srcdir "$MOD@$VERSION")
[ -d "$DIR" ] || { echo "build-prometheus-operator: no source for $MOD@$VERSION" >&2; exit 1; }
cp -R "$DIR" "$TMP/src"
chmod -R u+w "$TMP/src"
PROM_VERSION=$(sed -n 's#^[[:space:]]*github\.com/prometheus/prometheus \(v[0-9.]*\)$#\1#p' "$TMP/src/go.mod")
PROM_DIR=$(srcdir "$PROM@$PROM_VERSION")
[ -d "$PROM_DIR" ] || { echo "build-prometheus-operator: no source for $PROM@$PROM_VERSION" >&2; exit 1; }
cp -R "$PROM_DIR" "$TMP/prom"
chmod -R u+w "$TMP/prom"
# Kubernetes discovery only (plugins/minimum.go keeps the file and http ones).
printf 'package plugins\n\nimport _ "%s/discovery/kubernetes"\n' "$PROM" >"$TMP/prom/plugins/plugins.go"
# One call adapted to the client-go the operator requires (v0.33, which
# gave DefaultWatchErrorHandler a context; Prometheus 3.5.0 was released
# against v0.32); the build fails if the call is not found as expected.
K8S_SD=$TMP/prom/discovery/kubernetes/kubernetes.go
grep -q 'cache\.DefaultWatchErrorHandler(r, err)' "$K8S_SD" || { echo "build-prometheus-operator: $K8S_SD changed, adapt the script" >&2; exit 1; }
sed -i 's/cache\.DefaultWatchErrorHandler(r, err)/cache.DefaultWatchErrorHandler(context.Background(), r, err)/' "$K8S_SD"
(cd "$TMP/src" && go mod edit -dropreplace=$MOD/pkg/apis/monitoring -dropreplace=$MOD/pkg/client -replace=$PROM="$TMP/prom")
# 3.5.0 from v0.305.0: what `prometheus --version` prints.
minor=${PROM_VERSION#v0.}
minor=${minor%%.*}
release=3.$((minor - 300)).${PROM_VERSION##*.}
(cd "$TMP/src" && progress "prometheus-operator $VERSION" "$BIN" "about 10 minutes on 2 cores" go build -trimpath -gcflags=all=-dwarf=false \
	-ldflags "-s -w -X github.com/prometheus/common/version.Version=${VERSION#v}" \
	-o "$TMP/operator" ./cmd/operator) >&2
(cd "$TMP/src" && progress "prometheus $release ($PROM_VERSION, Kubernetes discovery only)" "$CACHE/prometheus" "a few minutes more" go build -trimpath -gcflags=all=-dwarf=false \
	-ldflags "-s -w -X github.com/prometheus/common/version.Version=$release" \
	-o "$TMP/prometheus" "$PROM/cmd/prometheus") >&2
mkdir -p "$TMP/crds"
cp "$TMP/src/example/prometheus-operator-crd/"*.yaml "$TMP/crds/"
rm -rf "$CACHE/crds"
mv "$TMP/crds" "$CACHE/crds"
mv "$TMP/prometheus" "$CACHE/prometheus"
mv "$TMP/operator" "$BIN"
echo "$WANT" >"$STAMP"
echo "$BIN"
