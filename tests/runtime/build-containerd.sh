#!/bin/sh
# Builds containerd 2.x, its runc shim and ctr from the Go module proxy into a
# cache outside the repo, for the NRI agent's tests (containerd 2.0+ has NRI on
# by default). CGO is off and the storage drivers that need C libraries are
# left out: the tests use the overlayfs or native snapshotter.
#
# Usage: build-containerd.sh          prints the bin directory on stdout
# Env:   CONTAINERD_VERSION (default v2.2.9), IPTA_CACHE (default /var/cache/iptables-alerter)
set -eu
. "$(dirname "$0")/../kube/progress.sh"

CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.2.9}
BIN=${IPTA_CACHE:-/var/cache/iptables-alerter}/containerd/bin
STAMP=$BIN/containerd.version

if [ -x "$BIN/containerd" ] && [ -x "$BIN/containerd-shim-runc-v2" ] && [ -x "$BIN/ctr" ] &&
	[ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$CONTAINERD_VERSION" ]; then
	echo "$BIN"
	exit 0
fi

command -v go >/dev/null 2>&1 || PATH=$PATH:/usr/local/go/bin
mkdir -p "$BIN"
export CGO_ENABLED=0 GOBIN="$BIN" GOFLAGS=-mod=mod
# One go install for the three: the module is resolved once, and the links
# run side by side.
M=github.com/containerd/containerd/v2
progress "containerd, its shim and ctr $CONTAINERD_VERSION" "$BIN" "a few minutes on 2 cores" go install -trimpath -gcflags=all=-dwarf=false -tags "no_btrfs no_devmapper no_zfs" \
	-ldflags "-s -w -X $M/version.Version=$CONTAINERD_VERSION" \
	"$M/cmd/containerd@$CONTAINERD_VERSION" "$M/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" "$M/cmd/ctr@$CONTAINERD_VERSION" >&2
echo "$CONTAINERD_VERSION" >"$STAMP"
echo "$BIN"
