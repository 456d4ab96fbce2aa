#!/usr/bin/env bash
# Installs the Debian packages the tests and the demo run against: the real
# iptables clients, nft, OCI runtimes, podman, node_exporter, promtool, etcd,
# logrotate, xmllint (JUnit schema check of `report`).
# Idempotent: apt runs only when a package is missing.
set -euo pipefail
pkgs=(
  iptables arptables ebtables ipset nfacct nftables iproute2 util-linux mount curl openssl
  crun runc podman conmon busybox-static libc-bin
  prometheus-node-exporter prometheus
  etcd-server logrotate
  rpm kubectl
  libxml2-utils
  containernetworking-plugins
  jq gcc libc6-dev make pkg-config libsqlite3-dev zstd
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: must run as root to install packages" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The etcd-server package may start a system etcd on 2379; the tests start
# their own on free loopback ports and do not need it.
if command -v systemctl >/dev/null 2>&1; then systemctl disable --now etcd >/dev/null 2>&1 || true; fi

# kube-apiserver for the Event forwarder tests: built from the Go module proxy
# once and cached outside the repo (${IPTA_CACHE:-/var/cache/iptables-alerter}).
"$(dirname "$0")/kube/build-kube.sh"

# kubelet and containerd 2.x (with its runc shim and ctr) for the NRI agent's
# end-to-end tests, built the same way and cached beside it.
"$(dirname "$0")/kube/build-kube.sh" kubelet
"$(dirname "$0")/kube/build-kube.sh" kube-controller-manager
"$(dirname "$0")/kube/build-kube.sh" kube-scheduler
"$(dirname "$0")/runtime/build-containerd.sh"
"$(dirname "$0")/runtime/build-crio.sh"
