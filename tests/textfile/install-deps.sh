#!/bin/sh
# Installs what the textfile tests run against: the real node-exporter,
# promtool (Debian ships it in "prometheus") and ip(8) for real netns.
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends prometheus-node-exporter prometheus iproute2
