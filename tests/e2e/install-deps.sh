#!/bin/sh
# Installs what the end-to-end tests run: the OCI runtimes, podman with
# conmon, and the files the test rootfs is assembled from (busybox-static,
# iptables). Debian/Ubuntu; run as root.
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends \
	crun runc podman conmon \
	busybox-static iptables nftables iproute2 util-linux libc-bin
