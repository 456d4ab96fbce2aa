#!/usr/bin/env bash
# The main job, end to end on this machine: two throwaway pod netns, one with
# real iptables rules (an Istio-style nat ruleset by iptables-nft, a legacy
# rule by iptables-legacy) and one clean; the hook runs on each exactly as a
# runtime runs it at poststart (state JSON on stdin, bundle with config.json);
# then the finding, the metrics and the Kubernetes Event it leads to.
set -euo pipefail
BIN=$(realpath "${1:-bin/iptables-alerter}")
HOOKBIN=$(realpath "${2:-bin/iptables-alerter-hook}")
if [ "$(id -u)" -ne 0 ]; then echo "demo: run as root (it creates network namespaces)" >&2; exit 1; fi
WORK=$(mktemp -d /tmp/iptables-alerter-demo.XXXXXX)
DIRTY=iptalert-demo-dirty-$$
CLEAN=iptalert-demo-clean-$$
cleanup() {
  ip netns del "$DIRTY" 2>/dev/null || true
  ip netns del "$CLEAN" 2>/dev/null || true
  [ -n "${DEMO_KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
FINDINGS=$WORK/log/findings.jsonl

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "Two pod network namespaces: $DIRTY (rules) and $CLEAN (none)"
ip netns add "$DIRTY"
ip netns add "$CLEAN"
ip netns exec "$DIRTY" iptables-nft-restore <<'RULES'
*nat
:ISTIO_INBOUND - [0:0]
:ISTIO_IN_REDIRECT - [0:0]
:ISTIO_OUTPUT - [0:0]
:ISTIO_REDIRECT - [0:0]
-A PREROUTING -p tcp -j ISTIO_INBOUND
-A OUTPUT -p tcp -j ISTIO_OUTPUT
-A ISTIO_INBOUND -p tcp --dport 15008 -j RETURN
-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT
-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006
-A ISTIO_OUTPUT -o lo -s 127.0.0.6/32 -j RETURN
-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -j ISTIO_REDIRECT
-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001
COMMIT
RULES
ip netns exec "$DIRTY" iptables-legacy -A OUTPUT -d 169.254.169.254 -p tcp --dport 80 -j DROP
echo "iptables-nft-save in $DIRTY:"
ip netns exec "$DIRTY" iptables-nft-save | grep -v '^#' | sed 's/^/    /'

# run_hook NETNS POD UID: what CRI-O does at poststart.
run_hook() {
  local ns=$1 pod=$2 uid=$3 bundle=$WORK/bundles/$2
  mkdir -p "$bundle"
  cat > "$bundle/config.json" <<JSON
{"ociVersion":"1.0.2","linux":{"namespaces":[{"type":"pid"},{"type":"network","path":"/run/netns/$ns"}]}}
JSON
  cat > "$WORK/$pod.state.json" <<JSON
{"ociVersion":"1.0.2","id":"$(printf '%s' "$pod" | sha256sum | cut -c1-64)","status":"running","pid":$$,"bundle":"$bundle",
 "annotations":{"io.kubernetes.pod.namespace":"demo","io.kubernetes.pod.name":"$pod","io.kubernetes.pod.uid":"$uid",
  "io.kubernetes.container.name":"app","io.kubernetes.cri-o.SandboxID":"sandbox-$pod",
  "io.kubernetes.cri-o.UserRequestedImage":"quay.io/example/$pod:1.0"}}
JSON
  echo "\$ iptables-alerter-hook hook --stage poststart < $pod.state.json"
  "$HOOKBIN" hook --stage poststart --node demo-node --findings "$FINDINGS" --state-dir "$WORK/run" < "$WORK/$pod.state.json"
  echo "    exit status $?"
}

say "The hook, as the runtime runs it at poststart"
run_hook "$DIRTY" mesh-app 7d1c0a52-0d3e-4c6b-9a51-2d0c3f1e5a11
run_hook "$CLEAN" plain-app 5b8e2f61-8c1d-4e2a-b7f0-6a9d4c3e2b10

say "Findings file $FINDINGS (one JSON object a line)"
if [ ! -s "$FINDINGS" ]; then echo "demo: no finding was recorded" >&2; exit 1; fi
python3 -m json.tool < "$FINDINGS" 2>/dev/null || cat "$FINDINGS"
n=$(wc -l < "$FINDINGS")
echo "$n finding(s): the clean pod has none."
[ "$n" -eq 1 ] || { echo "demo: expected exactly one finding" >&2; exit 1; }

say "Metrics: iptables-alerter textfile --once (node-exporter's textfile collector reads the .prom)"
mkdir -p "$WORK/textfile"
"$BIN" textfile --once --findings "$FINDINGS" --state-dir "$WORK/textfile-state" --textfile-dir "$WORK/textfile"
grep -v '^# HELP' "$WORK/textfile/iptables_alerter.prom" | sed 's/^/    /'
if command -v prometheus-node-exporter >/dev/null; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  prometheus-node-exporter --collector.disable-defaults --collector.textfile \
    --collector.textfile.directory="$WORK/textfile" --web.listen-address="127.0.0.1:$port" 2>/dev/null &
  NE_PID=$!
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/metrics" >/dev/null 2>&1 && break; sleep 0.1; done
  echo "node-exporter on 127.0.0.1:$port serves:"
  curl -sf "http://127.0.0.1:$port/metrics" | grep -E '^(iptables_alerter_pod|node_textfile_scrape_error)' | sed 's/^/    /'
  kill "$NE_PID" 2>/dev/null || true
fi
