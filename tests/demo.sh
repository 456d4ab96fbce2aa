#!/usr/bin/env bash
# The main job, end to end on this machine: two throwaway pod netns, one with
# real iptables rules (an Istio-style nat ruleset by iptables-nft, a legacy
# rule by iptables-legacy) and one clean; the hook runs on each exactly as a
# runtime runs it at poststart (state JSON on stdin, bundle with config.json);
# then the finding, the metrics, the Kubernetes Event and the OpenReports
# Report it leads to, and the RHEL 10 readiness report grouped by owning
# workload (a bare Pod and a Deployment's Pod), read from the Reports; last,
# the agent's watch catching a rule written after it started, with its writer;
# and its exec watch: a pod running iptables-legacy after its start, another
# whose command fails, each with its finding and writer.
#
# Usage: tests/demo.sh [BIN] [HOOKBIN]   as root (make demo builds them first)
# Env:   DEMO_JSON=1  also print the findings file's raw JSON lines
#        DEMO_KEEP=1  keep the work directory (findings, logs, kubeconfig) and
#                     say where it is
# Every line the demo prints itself fits 120 columns; the raw JSON does not.
set -euo pipefail
BIN=$(realpath "${1:-bin/iptables-alerter}")
HOOKBIN=$(realpath "${2:-bin/iptables-alerter-hook}")
# The repository, for the shared test fixtures.
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" -ne 0 ]; then echo "demo: run as root (it creates network namespaces)" >&2; exit 1; fi
WORK=$(mktemp -d /tmp/iptables-alerter-demo.XXXXXX)
DIRTY=iptalert-demo-dirty-$$
CLEAN=iptalert-demo-clean-$$
PIDS=()
EXECNS=()
EXECID=()
cleanup() {
  # Newest first, so the API server stops before the etcd it would wait for;
  # whatever is still running after 10 s is killed.
  local i p alive
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill "${PIDS[i]}" 2>/dev/null || true; done
  for _ in $(seq 50); do
    alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.2
  done
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  ip netns del "$DIRTY" 2>/dev/null || true
  ip netns del "$CLEAN" 2>/dev/null || true
  ip netns del "${SHOPNS:-none}" 2>/dev/null || true
  ip netns del "${WATCHNS:-none}" 2>/dev/null || true
  for ns in "${EXECNS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  for id in "${EXECID[@]}"; do rmdir "$CGROUP/$id" 2>/dev/null || true; done
  [ -n "${CGROUP:-}" ] && rmdir "$CGROUP" 2>/dev/null || true
  if [ -n "${DEMO_KEEP:-}" ]; then
    echo "demo: kept $WORK (findings in log/, logs, kubeconfig; the API server is stopped)"
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
FINDINGS=$WORK/log/findings.jsonl

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# wrapped indents stdin's lines by 4 and wraps them at 120 columns, their
# continuations indented by 8: log lines and Event notes stay readable.
wrapped() {
  python3 -c '
import sys, textwrap
for l in sys.stdin.read().splitlines():
    print(textwrap.fill(l, 120, initial_indent="    ", subsequent_indent="        ",
                        break_on_hyphens=False) if l.strip() else "")
'
}

APISERVER=${IPTA_CACHE:-/var/cache/iptables-alerter}/kube/bin/kube-apiserver
KUBECTL=${IPTA_CACHE:-/var/cache/iptables-alerter}/kube/bin/kubectl
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
api() { curl -sfk -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' "$@"; }

# A real etcd and kube-apiserver on loopback stand in for the cluster, so
# the Pods exist with the UIDs the kubelet would label their containers with.
say "A throwaway Kubernetes API server: etcd $(etcd --version 2>/dev/null | head -1 | awk '{print $3}'), kube-apiserver $("$APISERVER" --version 2>/dev/null | awk '{print $2}')"
mkdir -p "$WORK/kube"
openssl genrsa -out "$WORK/kube/sa.key" 2048 2>/dev/null
openssl rsa -in "$WORK/kube/sa.key" -pubout -out "$WORK/kube/sa.pub" 2>/dev/null
echo "$TOKEN,admin,admin-uid,\"system:masters\"" > "$WORK/kube/tokens.csv"
EC=$(freeport); EP=$(freeport); AP=$(freeport)
etcd --name demo --data-dir "$WORK/kube/etcd" --listen-client-urls "http://127.0.0.1:$EC" \
  --advertise-client-urls "http://127.0.0.1:$EC" --listen-peer-urls "http://127.0.0.1:$EP" \
  --initial-advertise-peer-urls "http://127.0.0.1:$EP" --initial-cluster "demo=http://127.0.0.1:$EP" \
  > "$WORK/kube/etcd.log" 2>&1 &
PIDS+=($!)
"$APISERVER" --etcd-servers "http://127.0.0.1:$EC" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
  --secure-port "$AP" --cert-dir "$WORK/kube/certs" --token-auth-file "$WORK/kube/tokens.csv" \
  --authorization-mode RBAC --service-account-issuer https://kubernetes.default.svc \
  --service-account-key-file "$WORK/kube/sa.pub" --service-account-signing-key-file "$WORK/kube/sa.key" \
  --service-cluster-ip-range 10.96.0.0/24 --disable-admission-plugins ServiceAccount \
  > "$WORK/kube/kube-apiserver.log" 2>&1 &
PIDS+=($!)
API=https://127.0.0.1:$AP
for _ in $(seq 600); do api "$API/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
api "$API/readyz" >/dev/null || { echo "demo: kube-apiserver did not get ready:" >&2; tail -20 "$WORK/kube/kube-apiserver.log" >&2; exit 1; }
echo "kube-apiserver ready at $API"
echo "    ($APISERVER)"
cat > "$WORK/kube/kubeconfig" <<KCFG
apiVersion: v1
kind: Config
clusters: [{name: demo, cluster: {server: "$API", insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: "$TOKEN"}}]
contexts: [{name: demo, context: {cluster: demo, user: admin}}]
current-context: demo
KCFG
# The Report CRD, as an admin applies it on a cluster that lacks it; the
# forwarder writes Reports only while the API serves them.
echo "\$ kubectl apply -k packaging/crds"
"$KUBECTL" --kubeconfig "$WORK/kube/kubeconfig" apply -k "$ROOT/packaging/crds" | sed 's/^/    /'
"$KUBECTL" --kubeconfig "$WORK/kube/kubeconfig" wait --for condition=Established --timeout 60s \
  crd/reports.openreports.io >/dev/null
api -X POST "$API/api/v1/namespaces" -d '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"demo"}}' >/dev/null
# mkpod NAME prints the UID the API server gave the Pod.
mkpod() {
  api -X POST "$API/api/v1/namespaces/demo/pods" \
    -d "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$1\"},\"spec\":{\"nodeName\":\"demo-node\",\"containers\":[{\"name\":\"app\",\"image\":\"quay.io/example/$1:1.0\"}]}}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["uid"])'
}
MESH_UID=$(mkpod mesh-app)
PLAIN_UID=$(mkpod plain-app)
echo "Pod demo/mesh-app          uid $MESH_UID"
echo "Pod demo/plain-app         uid $PLAIN_UID"
# A Deployment, its ReplicaSet and Pod, linked by ownerReferences as the
# controllers would link them (no controller manager runs here).
uidof() { python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["uid"])'; }
TMPL='"selector":{"matchLabels":{"app":"shop"}},"template":{"metadata":{"labels":{"app":"shop"}},"spec":{"containers":[{"name":"app","image":"quay.io/example/shop:2.3"}]}}'
DEP_UID=$(api -X POST "$API/apis/apps/v1/namespaces/demo/deployments" \
  -d "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{\"name\":\"shop\"},\"spec\":{$TMPL}}" | uidof)
RS_UID=$(api -X POST "$API/apis/apps/v1/namespaces/demo/replicasets" \
  -d "{\"apiVersion\":\"apps/v1\",\"kind\":\"ReplicaSet\",\"metadata\":{\"name\":\"shop-5d8f7\",\"labels\":{\"app\":\"shop\"},\"ownerReferences\":[{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"name\":\"shop\",\"uid\":\"$DEP_UID\",\"controller\":true}]},\"spec\":{$TMPL}}" | uidof)
SHOP_UID=$(api -X POST "$API/api/v1/namespaces/demo/pods" \
  -d "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"shop-5d8f7-x2k4q\",\"labels\":{\"app\":\"shop\"},\"ownerReferences\":[{\"apiVersion\":\"apps/v1\",\"kind\":\"ReplicaSet\",\"name\":\"shop-5d8f7\",\"uid\":\"$RS_UID\",\"controller\":true}]},\"spec\":{\"nodeName\":\"demo-node\",\"containers\":[{\"name\":\"app\",\"image\":\"quay.io/example/shop:2.3\"}]}}" | uidof)
echo "Pod demo/shop-5d8f7-x2k4q  uid $SHOP_UID"
echo "    of ReplicaSet demo/shop-5d8f7, of Deployment demo/shop"

SHOPNS=iptalert-demo-shop-$$
say "Pod network namespaces: mesh-app's and shop's with iptables rules, plain-app's without"
echo "ip netns: $DIRTY (mesh-app), $SHOPNS (shop), $CLEAN (plain-app)"
ip netns add "$DIRTY"
ip netns add "$CLEAN"
ip netns add "$SHOPNS"
ip netns exec "$DIRTY" iptables-nft-restore < "$ROOT/internal/testkit/nstest/testdata/istio-nat.rules"
ip netns exec "$DIRTY" iptables-legacy -A OUTPUT -d 169.254.169.254 -p tcp --dport 80 -j DROP
# shop: a plain port filter and a masquerade, by iptables-nft.
ip netns exec "$SHOPNS" iptables-nft -A INPUT -p tcp --dport 8080 -j ACCEPT
ip netns exec "$SHOPNS" iptables-nft -A INPUT -p tcp --dport 9000:9100 -j DROP
ip netns exec "$SHOPNS" iptables-nft -t nat -A POSTROUTING -o eth0 -j MASQUERADE
echo "iptables-nft-save in $DIRTY:"
ip netns exec "$DIRTY" iptables-nft-save 2>/dev/null | grep -v '^#' | sed 's/^/    /'
echo "iptables-legacy-save in $DIRTY:"
ip netns exec "$DIRTY" iptables-legacy-save | grep -v '^#' | sed 's/^/    /'
echo "iptables-nft-save in $SHOPNS:"
ip netns exec "$SHOPNS" iptables-nft-save | grep -v '^#' | sed 's/^/    /'

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
  local rc=0
  "$HOOKBIN" hook --stage poststart --node demo-node --findings "$FINDINGS" --state-dir "$WORK/run" \
    < "$WORK/$pod.state.json" 2> "$WORK/hook-$pod.log" || rc=$?
  wrapped < "$WORK/hook-$pod.log"
  echo "    exit status $rc"
}

say "The hook, as the runtime runs it at poststart"
run_hook "$DIRTY" mesh-app "$MESH_UID"
run_hook "$CLEAN" plain-app "$PLAIN_UID"
run_hook "$SHOPNS" shop-5d8f7-x2k4q "$SHOP_UID"

say "The findings, as iptables-alerter report FINDINGS-FILE shows them"
if [ ! -s "$FINDINGS" ]; then echo "demo: no finding was recorded" >&2; exit 1; fi
n=$(wc -l < "$FINDINGS")
echo "$n findings in $FINDINGS, one JSON object a line; the clean pod has none."
[ "$n" -eq 2 ] || { echo "demo: expected exactly two findings" >&2; exit 1; }
echo "\$ iptables-alerter report findings.jsonl"
"$BIN" report "$FINDINGS"
if [ -n "${DEMO_JSON:-}" ]; then
  echo "The raw lines (DEMO_JSON=1):"
  cat "$FINDINGS"
fi

say "Metrics: iptables-alerter textfile --once (node-exporter's textfile collector reads the .prom)"
mkdir -p "$WORK/textfile"
"$BIN" textfile --once --findings "$FINDINGS" --checkpoint-dir "$WORK/textfile-state" --textfile-dir "$WORK/textfile" \
  2> "$WORK/textfile.log"
wrapped < "$WORK/textfile.log"
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

say "Event and Report: iptables-alerter forward posts the Event on the Pod and keeps the workload's Report"
"$BIN" forward --findings "$FINDINGS" --checkpoint-dir "$WORK/forward-state" --kubeconfig "$WORK/kube/kubeconfig" \
  --node-name demo-node --poll 100ms > "$WORK/forward.log" 2>&1 &
FWD=$!
PIDS+=($FWD)
REPORTS=$API/apis/openreports.io/v1alpha1/namespaces/demo/reports
events=""
# The forwarder writes a finding's Report after its Events: wait for both
# workloads' Reports too.
nreports() { api "$REPORTS" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["items"]))'; }
for _ in $(seq 100); do
  shop=$(api "$API/api/v1/namespaces/demo/events?fieldSelector=involvedObject.name=shop-5d8f7-x2k4q" || true)
  events=$(api "$API/api/v1/namespaces/demo/events?fieldSelector=involvedObject.name=mesh-app,involvedObject.uid=$MESH_UID" || true)
  printf '%s' "$events" | grep -q IPTablesUsageObserved && printf '%s' "$shop" | grep -q IPTablesUsageObserved &&
    [ "$(nreports || echo 0)" -ge 2 ] && break
  sleep 0.2
done
kill -TERM "$FWD" 2>/dev/null || true
echo "forward's log says:"
grep -E 'OpenReports' "$WORK/forward.log" | sed 's/^time="[^"]*" //' | wrapped
printf '%s' "$events" | python3 -c '
import json, sys
items = json.load(sys.stdin)["items"]
if not items:
    sys.exit("demo: no Event was posted")
for e in items:
    o = e["involvedObject"]
    print("%s/%s %s %s (uid %s)" % (o["kind"], o["name"], e["type"], e["reason"], o["uid"]))
    print("from %s on %s" % (e.get("reportingComponent", ""), e.get("reportingInstance", "")))
    print(e["message"])
' | wrapped
plain=$(api "$API/api/v1/namespaces/demo/events?fieldSelector=involvedObject.name=plain-app" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["items"]))')
echo "Events on demo/plain-app: $plain"

say "Reports: one per workload and node, owned by the workload; they stay when the Events expire (1 h)"
[ "$(nreports)" -eq 2 ] || { echo "demo: expected a Report for each of the two workloads" >&2; exit 1; }
echo "\$ kubectl get reports -A"
"$KUBECTL" --kubeconfig "$WORK/kube/kubeconfig" get reports -A | sed 's/^/    /'
echo "Their results, one per pod (kubectl get reports -n demo -o yaml shows every field):"
api "$REPORTS" | python3 -c '
import json, sys
for r in json.load(sys.stdin)["items"]:
    s = r["scope"]
    print("%s: scope %s/%s, owner %s/%s" % (r["metadata"]["name"], s["kind"], s["name"],
          r["metadata"]["ownerReferences"][0]["kind"], r["metadata"]["ownerReferences"][0]["name"]))
    for x in r.get("results", []):
        p = x.get("properties", {})
        pod = x["resources"][0]
        print("  %s %s/%s: %s, severity %s, rule %s; rules %s" % (pod["kind"], pod["namespace"], pod["name"],
              x["result"], x["severity"], x["rule"], p.get("rules", "")))
        for k in sorted(k for k in p if k.startswith("example")):
            print("    " + p[k])
' | wrapped

say "RHEL 10 readiness: iptables-alerter report (from the cluster's Reports)"
"$BIN" report --kubeconfig "$WORK/kube/kubeconfig" | tee "$WORK/report.txt"
# The header line names the source read; Events are only the fallback.
head -1 "$WORK/report.txt" | grep -q 'from reports\.$' ||
  { echo "demo: the report was not read from the Reports" >&2; exit 1; }
say "The same as Markdown, with an expectations file, as a CI step would run it"
# An expectation covers the rules it matches, not the whole workload: shop
# is expected because its only breaking rule, the masquerade, is named and
# shown; its native port rules keep loading and are not judged. A rule
# "--dport 8080" alone would leave the masquerade, and shop failing.
cat > "$WORK/expected.yaml" <<'YAML'
expected:
  - owner: Deployment/shop
    rule: "-j MASQUERADE"
    reason: shop's egress masquerade; its nodes install kernel-modules-extra
YAML
sed 's/^/    /' "$WORK/expected.yaml"
echo "\$ iptables-alerter report --format markdown --expectations expected.yaml --fail-on breaks"
rc=0
"$BIN" report --kubeconfig "$WORK/kube/kubeconfig" --format markdown --expectations "$WORK/expected.yaml" \
  --fail-on breaks > "$WORK/report.md" || rc=$?
# A Markdown table keeps whole cells, for a CI page; a terminal gets its
# lines cut at 120 columns.
awk '{ if (length($0) > 120) print substr($0, 1, 117) "..."; else print }' "$WORK/report.md"
echo "    exit status $rc (1: mesh-app's breaking rules are not expected); lines over 120 columns cut here"

say "The agent's watch: a rule written after the agent started, caught with the process that wrote it"
# Node mode on a throwaway netns standing in for the node's: it needs no
# runtime. With the runtime's NRI socket the same watch holds every pod's
# netns from its sandbox's start to its stop.
WATCHNS=iptalert-demo-watch-$$
ip netns add "$WATCHNS"
mkdir -p "$WORK/watch"
echo "\$ iptables-alerter agent --host-netns=/run/netns/$WATCHNS --host-proc= ..."
"$BIN" agent --nri-socket "$WORK/watch/no-nri.sock" --host-netns="/run/netns/$WATCHNS" --host-proc="" \
  --node demo-node --findings "$WORK/watch/findings.jsonl" --state-dir "$WORK/watch/run" --health-addr "" \
  > "$WORK/watch/agent.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do grep -q 'agent starting' "$WORK/watch/agent.log" && break; sleep 0.1; done
# The watch's netlink listener opens off the start: give it a moment.
sleep 1
echo "\$ ip netns exec $WATCHNS iptables-nft -t nat -A POSTROUTING -o eth0 -j MASQUERADE"
ip netns exec "$WATCHNS" iptables-nft -t nat -A POSTROUTING -o eth0 -j MASQUERADE
# The clean node's first look is a gone (it takes back what an earlier
# boot recorded); the rule's finding is the one that holds usage.
watched() { grep '"source":"watch"' "$WORK/watch/findings.jsonl" 2>/dev/null | grep '"state":"present"'; }
for _ in $(seq 100); do watched >/dev/null && break; sleep 0.1; done
watched >/dev/null ||
  { echo "demo: the watch recorded no finding:" >&2; tail -20 "$WORK/watch/agent.log" >&2; exit 1; }
watched | tail -1 | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
w = r.get("writer") or {}
print("finding: source %s, subject %s, node %s, worst %s, %d rule(s)" % (r["source"], r["subject"], r["node"],
      r["worst"], r["nft"]["rules"]))
print("writer:  pid %s, command %s%s%s" % (w.get("pid"), w.get("comm"),
      ", parent %s (%s)" % (w.get("ppid"), w.get("parent_comm")) if w.get("ppid") else "",
      ", exited before it could be read" if w.get("gone") else ""))
for e in r.get("examples", []):
    print("rule:    [%s %s] %s" % (e["family"], e["table"], e["rule"]))
' | wrapped

say "The agent's exec watch: iptables commands as they run, whether they worked, and who ran them"
# Two pods of a stand-in runtime: tests/demo/nripods serves NRI as containerd
# and CRI-O do (their library), listing the pods and containers; the pods are
# network namespaces made here, each container a cgroup named by its id, as
# containerd's cgroupfs driver names it. The exec watch hears every exec on
# the node from the kernel's process events: it needs the host's pid
# namespace (hostPID in a pod) and CAP_NET_ADMIN.
EXEC=$WORK/exec
mkdir -p "$EXEC"
(cd "$ROOT" && ${GO:-go} build -o "$EXEC/nripods" ./tests/demo/nripods)
# The cgroup v2 hierarchy: /sys/fs/cgroup, or its unified part on a hybrid
# host (a v1 tmpfs there would take the directories without being cgroups).
CGROUP=/sys/fs/cgroup/unified/iptalert-demo-$$
[ -e /sys/fs/cgroup/cgroup.controllers ] && CGROUP=/sys/fs/cgroup/iptalert-demo-$$
[ -e "$(dirname "$CGROUP")/cgroup.controllers" ] || { echo "demo: no cgroup v2 hierarchy under /sys/fs/cgroup" >&2; exit 1; }
EXECNS=(iptalert-demo-legacy-$$ iptalert-demo-failing-$$)
EXECPOD=(legacy-app failing-app)
mkdir "$CGROUP"
ARGS=()
for i in 0 1; do
  ip netns add "${EXECNS[i]}"
  EXECID[i]=$(printf '%s-%s' "${EXECPOD[i]}" "$$" | sha256sum | cut -c1-64)
  mkdir "$CGROUP/${EXECID[i]}"
  ARGS+=("shop/${EXECPOD[i]}/setup/${EXECID[i]}=/run/netns/${EXECNS[i]}")
done
"$EXEC/nripods" -dir "$EXEC/nri" "${ARGS[@]}" > "$EXEC/nripods.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do grep -q '^ready' "$EXEC/nripods.log" && break; sleep 0.1; done
HP=$(freeport)
echo "\$ iptables-alerter agent --nri-socket $EXEC/nri/nri.sock --watch --resweep-interval 1h ..."
"$BIN" agent --nri-socket "$EXEC/nri/nri.sock" --watch --resweep-interval 1h --host-proc="" --node demo-node \
  --findings "$EXEC/findings.jsonl" --state-dir "$EXEC/run" --health-addr "127.0.0.1:$HP" > "$EXEC/agent.log" 2>&1 &
PIDS+=($!)
up=""
for _ in $(seq 150); do
  up=$(curl -sf "http://127.0.0.1:$HP/metrics" | awk '$1 == "iptables_alerter_agent_exec_watch_up" {print $2}') || true
  [ "$up" = 1 ] && break
  curl -sf "http://127.0.0.1:$HP/healthz" 2>/dev/null | grep -q 'exec watch off' && break
  sleep 0.1
done
if [ "$up" != 1 ]; then
  echo "the exec watch is off here: $(curl -s "http://127.0.0.1:$HP/healthz" | grep -o 'exec watch off[^"]*' | head -1)" | wrapped
  exit 0
fi
echo "    exec watch up; the agent knows the pods shop/${EXECPOD[0]} and shop/${EXECPOD[1]} (container setup in each)"
# in_container I CMD... runs CMD in pod I's netns from its container's cgroup.
in_container() {
  local i=$1; shift
  sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec ip netns exec "$@"' sh "$CGROUP/${EXECID[i]}" "${EXECNS[i]}" "$@"
}
echo "\$ (${EXECPOD[0]}, after its start) iptables-legacy -t nat -A POSTROUTING -o eth0 -j MASQUERADE"
in_container 0 iptables-legacy -t nat -A POSTROUTING -o eth0 -j MASQUERADE
echo "\$ (${EXECPOD[1]}) iptables-legacy -t bogus -A OUTPUT -j ACCEPT   # a table the kernel lacks, as ip_tables on RHEL 10"
in_container 1 iptables-legacy -t bogus -A OUTPUT -j ACCEPT 2>&1 | wrapped || true
for _ in $(seq 100); do [ "$(grep -c '"source":"exec"' "$EXEC/findings.jsonl" 2>/dev/null)" -ge 2 ] && break; sleep 0.1; done
[ "$(grep -c '"source":"exec"' "$EXEC/findings.jsonl" 2>/dev/null)" -ge 2 ] ||
  { echo "demo: the exec watch recorded no finding of both commands:" >&2; tail -20 "$EXEC/agent.log" >&2; exit 1; }
grep '"source":"exec"' "$EXEC/findings.jsonl" | python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    e, w = r["exec"], r.get("writer") or {}
    status = "exit %s" % e.get("exit_code", 0) if not e.get("signal") else "signal %s" % e["signal"]
    print("finding: source %s, stage %s, pod %s/%s, container %s, worst %s, legacy rules %d" % (r["source"], r["stage"],
          r["pod"]["namespace"], r["pod"]["name"], r["container"], r["worst"] or "-", (r.get("legacy") or {}).get("rules", 0)))
    print("command: %s%s (%s backend, %s %s, table %s)%s" % ("FAILED " if e.get("failed") else "", " ".join(e["argv"]),
          e["backend"], e["operation"], e["command"], e["table"],
          ", %s, missing kernel support" % status if e.get("missing_kernel_support") else ", " + status))
    print("writer:  pid %s, command %s, container %s%s" % (w.get("pid"), w.get("comm"), w.get("container"),
          ", parent %s (%s)" % (w.get("ppid"), w.get("parent_comm")) if w.get("ppid") else ""))
' | wrapped
echo "The agent's /metrics, iptables_alerter_agent_pod_iptables_commands_total by pod and result (the alert"
echo "IPTablesCommandsFailing fires once per workload on result=\"failed\"):"
curl -sf "http://127.0.0.1:$HP/metrics" | grep '^iptables_alerter_agent_pod_iptables_commands_total' |
  sed -E 's/.*pod_name="([^"]*)",pod_namespace="([^"]*)",result="([^"]*)"\} (.*)/\2\/\1 \3 \4/' |
  awk '{ printf "    %-20s %-7s %s\n", $1, $2, $3 }'
