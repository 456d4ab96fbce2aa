#!/bin/sh
# Installs what the forward tests run against: Debian's etcd and a
# kube-apiserver built from the Go module proxy (cached outside the repo).
# Idempotent; needs root for apt-get and Go on PATH (or /usr/local/go).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x /usr/bin/etcd ]; then
	apt-get update
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends etcd-server
	# The package starts a system etcd on 2379; the tests start their own.
	if command -v systemctl >/dev/null 2>&1; then
		systemctl disable --now etcd >/dev/null 2>&1 || true
	fi
fi
"$here/build-kube-apiserver.sh"
