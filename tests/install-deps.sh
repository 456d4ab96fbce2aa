#!/usr/bin/env bash
# Installs what the tests, the demo or the benchmark run against: Debian
# packages from apt, and the Kubernetes and containerd binaries Debian 12
# does not package, built from the Go module proxy into a cache outside the
# repo (${IPTA_CACHE:-/var/cache/iptables-alerter}).
#
# Usage: install-deps.sh [all|demo|bench|release]
#   all    (default, make test) everything below
#   demo   (make demo) the iptables clients, etcd, kube-apiserver, kubectl,
#          python3
#   bench  (make bench) the iptables clients, etcd, kube-apiserver, GNU time
#   release (make release-deps) rpmbuild, helm, cosign, cyclonedx-gomod
# Idempotent: apt runs only when a package is missing, and each build only
# when its binary is not cached at the wanted version.
set -euo pipefail
what=${1:-all}
here=$(dirname "$0")
case $what in
all)
  pkgs=(
    iptables arptables ebtables ipset nfacct nftables iproute2 util-linux mount curl openssl
    crun runc podman conmon busybox-static libc-bin
    prometheus-node-exporter prometheus
    etcd-server logrotate time
    rpm rpmlint man-db
    libxml2-utils
    chromium
    containernetworking-plugins
    jq gcc libc6-dev make pkg-config libsqlite3-dev zstd
    qemu-user-static
  ) ;;
# tests/demo.sh: the iptables clients write the rules, etcd and kube-apiserver
# stand in for the cluster, curl and python3 talk to it, openssl makes its
# keys, node-exporter (optional) serves the metrics.
demo) pkgs=(iptables iproute2 curl openssl python3 etcd-server prometheus-node-exporter) ;;
# tests/bench: iptables-nft-restore fills the netns, nsenter and the save
# tools are what the hook is measured against; etcd and kube-apiserver
# take the forwarder's Reports, GNU time measures the report's peak RSS.
bench) pkgs=(iptables iproute2 util-linux etcd-server time) ;;
# make release: rpmbuild for the RPM (the rest is Go, helm and cosign).
release) pkgs=(rpm) ;;
*) echo "install-deps: unknown set $what (all, demo or bench)" >&2; exit 2 ;;
esac
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  # sudo where it asks no password (a CI runner), else root is needed.
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo=(sudo -n)
    else
      echo "install-deps: must run as root to install packages" >&2
      exit 1
    fi
  fi
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The etcd-server package may start a system etcd on 2379; the tests start
# their own on free loopback ports and do not need it.
if command -v systemctl >/dev/null 2>&1; then systemctl disable --now etcd >/dev/null 2>&1 || true; fi

# make release's tools (helm pushes the chart, cosign signs, cyclonedx-gomod
# writes the SBOM); the all set builds them below for tests/release.
if [ "$what" = release ]; then
  "$here/kube/build-helm.sh" >/dev/null
  "$here/release/build-cosign.sh" >/dev/null
  "$here/release/build-cyclonedx-gomod.sh" >/dev/null
  exit 0
fi

# kube-apiserver for the demo, the bench and the Event forwarder tests;
# kubectl for the demo (it applies the Report CRD and lists the Reports)
# and the packaging and cluster tests (Debian 12 has no package; the
# Makefile puts the cache's bin directory first on PATH).
"$here/kube/build-kube.sh"
[ "$what" != bench ] || exit 0
"$here/kube/build-kube.sh" kubectl
[ "$what" = all ] || exit 0

# kubelet, kube-controller-manager, kube-scheduler and containerd 2.x (with
# its runc shim and ctr) for the NRI agent's end-to-end tests; CRI-O (with
# pinns and runc 1.4.2) from the source archive in ../shared/cri-o.
for c in kubelet kube-controller-manager kube-scheduler; do
  "$here/kube/build-kube.sh" "$c"
done
# helm v3 for the chart's tests (lint, template, package, and its output
# applied to the test API server), built into the same bin directory.
"$here/kube/build-helm.sh"
# Policy Reporter v3.9.0 from ../shared/policy-reporter, for the test that
# reads the forwarder's Reports through its REST API (docs/policy-reporter.md).
"$here/kube/build-policy-reporter.sh"
"$here/runtime/build-containerd.sh"
"$here/runtime/build-crio.sh"
# cosign and cyclonedx-gomod for tests/release (make release into a
# loopback registry, its signatures verified).
"$here/release/build-cosign.sh"
"$here/release/build-cyclonedx-gomod.sh"
# The Prometheus Operator (with its CRDs) and, from the same module graph,
# the upstream Prometheus it is built against with only Kubernetes
# discovery, for tests/monitoring's TestPrometheusOperator (the operator's
# configuration needs kubernetes_sd_configs, which Debian's prometheus 2.42
# lacks).
"$here/monitoring/build-prometheus-operator.sh"
