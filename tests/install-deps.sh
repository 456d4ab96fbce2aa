#!/usr/bin/env bash
# Installs what the tests, the demo or the benchmark run against: Debian
# packages from apt, and the Kubernetes and containerd binaries Debian 12
# does not package, built from the Go module proxy into a cache outside the
# repo (${IPTA_CACHE:-/var/cache/iptables-alerter}).
#
# Usage: install-deps.sh [all|packages|tools|demo|bench|release]
#   all    (default, make deps) everything below
#   packages (make test, first) only the apt packages of the all set
#   tools  (make test, then) only the builds of the all set, its packages
#          installed; the tests that need no built tool run beside them
#   demo   (make demo) the iptables clients, etcd, kube-apiserver, kubectl,
#          python3
#   bench  (make bench) the iptables clients, etcd, kube-apiserver, GNU time
#   release (make release-deps) rpmbuild, helm, cosign, cyclonedx-gomod
# Idempotent: apt runs only when a package is missing, and each build only
# when its binary is not cached at the wanted version.
set -euo pipefail
what=${1:-all}
here=$(dirname "$0")
# part: which half of a set to do, apt's or the builds'.
part=both
case $what in
packages|tools) part=$what what=all ;;
esac
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
    jq gcc libc6-dev make pkg-config libsqlite3-dev zstd python3
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
*) echo "install-deps: unknown set $what (all, packages, tools, demo, bench or release)" >&2; exit 2 ;;
esac
# apt_install installs the missing packages of the set. Called where its
# status is tested (set -e does not apply there), it returns on each failure.
apt_install() {
  local missing=() p
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "install-deps: installing ${missing[*]}" >&2
    # sudo where it asks no password (a CI runner), else root is needed.
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
      if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo=(sudo -n)
      else
        echo "install-deps: must run as root to install packages" >&2
        return 1
      fi
    fi
    "${sudo[@]}" apt-get update -qq || return
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || return
    echo "install-deps: installed the packages" >&2
  fi
  # The etcd-server package may start a system etcd on 2379; the tests start
  # their own on free loopback ports and do not need it.
  if command -v systemctl >/dev/null 2>&1; then systemctl disable --now etcd >/dev/null 2>&1 || true; fi
}

# make release's tools (helm pushes the chart, cosign signs, cyclonedx-gomod
# writes the SBOM); the all set builds them below for tests/release.
if [ "$what" = release ]; then
  apt_install
  "$here/kube/build-helm.sh" >/dev/null
  "$here/release/build-cosign.sh" >/dev/null
  "$here/release/build-cyclonedx-gomod.sh" >/dev/null
  exit 0
fi
if [ "$part" = packages ]; then
  apt_install || { echo "install-deps: failed: apt (its messages are above)" >&2; exit 1; }
  exit 0
fi

# The rest runs side by side: on its own, apt waits on the network and on
# dpkg, and a Go build on module downloads and on its links, which use one
# core each; two or three at once keep both cores busy (a fresh machine's
# first make test is mostly these builds). Each lane is a background job
# whose status is collected at the end; its tools' messages are whole lines
# on stderr, each naming its tool.
jobs_failed=()
# lane NAME CMD...: runs CMD in the background, its stdout dropped (the
# scripts print their binary's path there).
declare -A lanes=()
lane() {
  local name=$1
  shift
  "$@" >/dev/null &
  lanes[$name]=$!
}
# finish NAME: waits for lane NAME and notes a failure.
finish() {
  wait "${lanes[$1]}" || jobs_failed+=("$1")
  unset "lanes[$1]"
}

# kube-apiserver for the demo, the bench and the Event forwarder tests;
# kubectl for the demo (it applies the Report CRD and lists the Reports)
# and the packaging and cluster tests (Debian 12 has no package; the
# Makefile puts the cache's bin directory first on PATH); kubelet,
# kube-controller-manager and kube-scheduler for the NRI agent's end-to-end
# tests and the DaemonSet's pods of tests/cluster. One build: they share
# most packages. None needs an apt package.
case $what in
bench) lane kube "$here/kube/build-kube.sh" kube-apiserver ;;
demo) lane kube "$here/kube/build-kube.sh" kube-apiserver kubectl ;;
all) lane kube "$here/kube/build-kube.sh" kube-apiserver kubectl kubelet kube-controller-manager kube-scheduler ;;
esac

if [ "$what" = all ]; then
  # The tools that need nothing from apt, one after another beside the
  # Kubernetes build, the longest first, so that the short ones fill the
  # end, when the other lanes are done:
  # - cosign and cyclonedx-gomod for tests/release (make release into a
  #   loopback registry, its signatures verified);
  # - the Prometheus Operator (with its CRDs) and, from the same module
  #   graph, the upstream Prometheus it is built against with only
  #   Kubernetes discovery, for tests/monitoring's TestPrometheusOperator
  #   (the operator's configuration needs kubernetes_sd_configs, which
  #   Debian's prometheus 2.42 lacks);
  # - helm v3 for the chart's tests (lint, template, package, and its output
  #   applied to the test API server), built into the same bin directory;
  # - containerd 2.x (with its runc shim and ctr) for the NRI agent's tests.
  gotools() {
    "$here/release/build-cosign.sh"
    "$here/monitoring/build-prometheus-operator.sh"
    "$here/kube/build-helm.sh"
    "$here/runtime/build-containerd.sh"
    "$here/release/build-cyclonedx-gomod.sh"
  }
  lane gotools gotools
fi

apt_status=0
[ "$part" = tools ] || apt_install || apt_status=$?

if [ "$what" = all ] && [ "$apt_status" -eq 0 ]; then
  # The builds that need apt's C toolchain, libraries and zstd: Policy
  # Reporter v3.9.0 from ../shared/policy-reporter, for the test that reads
  # the forwarder's Reports through its REST API (docs/policy-reporter.md);
  # CRI-O (with pinns and runc 1.4.2) from the source archive in
  # ../shared/cri-o.
  ctools() {
    "$here/kube/build-policy-reporter.sh"
    "$here/runtime/build-crio.sh"
  }
  lane ctools ctools
fi

for name in "${!lanes[@]}"; do finish "$name"; done
[ "$apt_status" -eq 0 ] || jobs_failed+=(apt)
if [ "${#jobs_failed[@]}" -gt 0 ]; then
  echo "install-deps: failed: ${jobs_failed[*]} (their messages are above)" >&2
  exit 1
fi
