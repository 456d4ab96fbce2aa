#!/bin/sh
# Builds Policy Reporter (the UI's backend most clusters use to look at
# OpenReports) from the source archive in shared/policy-reporter into the
# tools cache, for TestPolicyReporter in lib/openreports: it reads the
# Reports the forwarder writes through its REST API. The module proxy does
# not serve it as a module of its own, hence the archive. CGO is needed for
# go-sqlite3; the libsqlite3 tag links Debian's libsqlite3-dev instead of
# compiling the amalgamation (minutes less). Its HTML templates are embedded.
#
# Usage: build-policy-reporter.sh    prints the binary path on stdout
# Env:   PR_ARCHIVE (default ../shared/policy-reporter/policy-reporter-3.9.0.tar.zst
#        beside the repo), IPTA_CACHE (default /var/cache/iptables-alerter)
set -eu
. "$(dirname "$0")/progress.sh"

PR_VERSION=v3.9.0
HERE=$(cd "$(dirname "$0")" && pwd)
PR_ARCHIVE=${PR_ARCHIVE:-$HERE/../../../shared/policy-reporter/policy-reporter-${PR_VERSION#v}.tar.zst}
CACHE=${IPTA_CACHE:-/var/cache/iptables-alerter}/policy-reporter
BIN=$CACHE/bin/policy-reporter
STAMP=$CACHE/bin/policy-reporter.version

cached "$BIN" "$STAMP" "$PR_VERSION"
if [ ! -f "$PR_ARCHIVE" ]; then
	echo "build-policy-reporter: no source archive at $PR_ARCHIVE (set PR_ARCHIVE)" >&2
	exit 1
fi

command -v go >/dev/null 2>&1 || PATH=$PATH:/usr/local/go/bin
mkdir -p "$CACHE/bin"
rm -f "$STAMP"
# The tree is unpacked afresh each build so a half-built or older one never mixes in.
SRC=$CACHE/build
rm -rf "$SRC"
mkdir -p "$SRC"
trap 'rm -rf "$SRC"' EXIT
tar --zstd -xf "$PR_ARCHIVE" -C "$SRC"
(
	cd "$SRC"
	CGO_ENABLED=1 GOFLAGS="-mod=mod -p=2" progress "policy-reporter $PR_VERSION" "$BIN" \
		"10-20 minutes on 2 cores" go build -trimpath -gcflags=all=-dwarf=false -tags libsqlite3 \
		-ldflags "-s -w" -o "$BIN.tmp" . >&2
)
mv "$BIN.tmp" "$BIN"
echo "$PR_VERSION" >"$STAMP"
echo "$BIN"
