#!/bin/sh
# Builds CRI-O (crio and pinns) from the source archive in shared/cri-o and
# runc from the Go module proxy into a cache outside the repo, for the hook's
# and the NRI agent's tests against the runtime OpenShift ships. The Go module
# proxy does not serve CRI-O, hence the archive; its snapshot lacks go-sqlite3's
# amalgamated C source, so the libsqlite3 tag links Debian's libsqlite3-dev.
# No seccomp tag: no libseccomp headers needed. runc is CRI-O's runtime here
# because Debian's crun 1.8.1 refuses CRI-O 1.35's spec version and Debian's
# runc 1.1.5 is too old for it.
#
# Usage: build-crio.sh          prints the bin directory on stdout
# Env:   CRIO_ARCHIVE (default ../shared/cri-o/cri-o-1.35.6.tar.zst beside the repo),
#        RUNC_VERSION (default v1.4.2), IPTA_CACHE (default /var/cache/iptables-alerter)
set -eu
. "$(dirname "$0")/../kube/progress.sh"

CRIO_VERSION=v1.35.6
RUNC_VERSION=${RUNC_VERSION:-v1.4.2}
HERE=$(cd "$(dirname "$0")" && pwd)
CRIO_ARCHIVE=${CRIO_ARCHIVE:-$HERE/../../../shared/cri-o/cri-o-${CRIO_VERSION#v}.tar.zst}
CACHE=${IPTA_CACHE:-/var/cache/iptables-alerter}/crio
BIN=$CACHE/bin
STAMP=$BIN/crio.version
WANT="crio $CRIO_VERSION runc $RUNC_VERSION"

if [ -x "$BIN/crio" ] && [ -x "$BIN/pinns" ] && [ -x "$BIN/runc" ] &&
	[ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
	echo "$BIN"
	exit 0
fi
if [ ! -f "$CRIO_ARCHIVE" ]; then
	echo "build-crio: no CRI-O source archive at $CRIO_ARCHIVE (set CRIO_ARCHIVE)" >&2
	exit 1
fi

command -v go >/dev/null 2>&1 || PATH=$PATH:/usr/local/go/bin
mkdir -p "$BIN"
rm -f "$STAMP"

# The tree is unpacked afresh each build so a half-built or older one never mixes in.
SRC=$CACHE/build/cri-o-${CRIO_VERSION#v}
rm -rf "$CACHE/build"
mkdir -p "$CACHE/build"
tar --zstd -xf "$CRIO_ARCHIVE" -C "$CACHE/build"
(
	cd "$SRC"
	CGO_ENABLED=1 GOFLAGS=-mod=vendor progress "crio $CRIO_VERSION" "$BIN" "a few minutes on 2 cores" go build -trimpath -gcflags=all=-dwarf=false \
		-tags "containers_image_ostree_stub containers_image_openpgp exclude_graphdriver_btrfs btrfs_noversion libsqlite3" \
		-ldflags "-s -w" -o "$BIN/crio" ./cmd/crio >&2
	# Not a job of make test's -j: pinns is two files, built one by one.
	MAKEFLAGS= make -C pinns >&2
	install -m 755 bin/pinns "$BIN/pinns"
)
rm -rf "$CACHE/build"

CGO_ENABLED=1 GOBIN="$BIN" GOFLAGS=-mod=mod progress "runc $RUNC_VERSION" "$BIN" "a minute on 2 cores" go install -trimpath -gcflags=all=-dwarf=false \
	"github.com/opencontainers/runc@$RUNC_VERSION" >&2

echo "$WANT" >"$STAMP"
echo "$BIN"
