#!/bin/sh
# Builds a Kubernetes component (kube-apiserver by default, kubelet,
# kube-controller-manager, kube-scheduler or kubectl) from the Go module proxy
# into a cache outside the repo. kube-controller-manager and kube-scheduler
# run the DaemonSet pods of tests/cluster; kubectl is for the tests that apply
# the kustomize trees (Debian 12 does not package it).
#
# k8s.io/kubernetes cannot be required directly: its go.mod replaces every
# k8s.io/* staging module with ./staging/..., which does not exist in the
# module zip, and requires them at v0.0.0. A throwaway module therefore
# replaces each staging module with its published v0.<minor>.<patch> tag.
#
# Several components are built by one `go build`: the module graph is
# loaded and tidied once, and the links (single-threaded, the longest steps
# once the packages are compiled) run side by side.
#
# Usage: build-kube.sh [COMPONENT...]   prints each binary's path on stdout
# Env:   KUBE_VERSION (default v1.35.4), IPTA_CACHE (default /var/cache/iptables-alerter)
set -eu
. "$(dirname "$0")/progress.sh"

KUBE_VERSION=${KUBE_VERSION:-v1.35.4}
CACHE=${IPTA_CACHE:-/var/cache/iptables-alerter}/kube
[ "$#" -gt 0 ] || set -- kube-apiserver
WANT="" PKGS="" PATHS=""
for c in "$@"; do
	case $c in kube-apiserver|kubelet|kube-controller-manager|kube-scheduler|kubectl) ;; *) echo "build-kube: unknown component $c" >&2; exit 2;; esac
	PATHS="$PATHS $CACHE/bin/$c"
	if ! built "$CACHE/bin/$c" "$CACHE/bin/$c.version" "$KUBE_VERSION"; then
		WANT="$WANT $c"
		PKGS="$PKGS k8s.io/kubernetes/cmd/$c"
	fi
done
if [ -z "$WANT" ]; then
	printf '%s\n' $PATHS
	exit 0
fi

command -v go >/dev/null 2>&1 || PATH=$PATH:/usr/local/go/bin
STAGING_VERSION=v0.${KUBE_VERSION#v1.}
MOD=$CACHE/mod
mkdir -p "$MOD" "$CACHE/bin"
cd "$MOD"
echo "fetching k8s.io/kubernetes $KUBE_VERSION and the modules it needs (a first run downloads several hundred MB)" >&2

# The staging list is read from kubernetes' own go.mod so that a version bump
# needs no edit here.
GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" >"$CACHE/kubernetes.json"
KGOMOD=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p' "$CACHE/kubernetes.json")
[ -f "$KGOMOD" ] || { echo "build-kube: no go.mod for k8s.io/kubernetes@$KUBE_VERSION" >&2; exit 1; }
STAGING=$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/.*#\1#p' "$KGOMOD" | sort -u)
[ -n "$STAGING" ] || { echo "build-kube: no staging replaces found in $KGOMOD" >&2; exit 1; }

GOVER=$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$KGOMOD")
{
	echo "module iptables-alerter.local/kubebuild"
	echo
	echo "go $GOVER"
	echo
	echo "require k8s.io/kubernetes $KUBE_VERSION"
	echo
	echo "replace ("
	for m in $STAGING; do echo "	$m => $m $STAGING_VERSION"; done
	echo ")"
} >go.mod
# The imports only keep go mod tidy from dropping what the commands need:
# each cmd/X is a main package, which cannot be imported; its code lives in
# cmd/X/app, and kubectl's in the staging module k8s.io/kubectl.
cat >main.go <<'GO'
package kubebuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kubelet/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "k8s.io/kubectl/pkg/cmd"
)
GO

export CGO_ENABLED=0 GOFLAGS=-mod=mod
go mod tidy >&2
# Later components reuse most of the first one's Go build cache.
EST="about 10 minutes on 2 cores"
ls "$CACHE"/bin/*.version >/dev/null 2>&1 && EST="a few minutes on 2 cores with a warm Go build cache"
OUT=$(mktemp -d "$CACHE/bin/.build.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
# -dwarf=false: see progress.sh.
# shellcheck disable=SC2086 # one word per package
progress "${WANT# } $KUBE_VERSION" "$CACHE/bin" "$EST" go build -trimpath -gcflags=all=-dwarf=false \
	-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION" \
	-o "$OUT/" $PKGS
for c in $WANT; do
	mv "$OUT/$c" "$CACHE/bin/$c"
	echo "$KUBE_VERSION" >"$CACHE/bin/$c.version"
done
printf '%s\n' $PATHS
