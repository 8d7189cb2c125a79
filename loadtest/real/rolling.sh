#!/usr/bin/env bash
# A rolling update of two kache replicas behind one address, in front of the real apiserver of
# ../shared/real-apiserver, with three client-go informers of pods watching through it.
#
# Two kache processes (one certificate, their own ports and --state-dir) behind a TCP
# balancer (balancer.py: each connection goes to the next replica in rotation that is in
# service, or to the other when the connect fails). Three informers (loadtest/clientgo
# `informer-sync -follow`: LIST mode, WatchList, and a kubelet's, spec.nodeName) sync through
# the balancer while only replica a is in service, so that every informer watches through a;
# then b joins. The rolling update, one replica at a time: taken out of service (as a
# Service's endpoints drop a terminating pod), stopped with SIGTERM (it writes its caches),
# pods written while it is down (labels changed, a pod created on the kubelet's node, one
# deleted), started again on its address from its state, and put back in service once ready.
#
# Printed: for each start, the time to /readyz and the apiserver's LIST requests of the cached
# kinds and the objects they returned until then (apiserver_request_total: the other replica's
# one-key probes of the current resourceVersion count too), and the caches it restored from
# its state and the LISTs its informers sent; each stop's time; at the end, per replica since
# its restart, its informers' LISTs; the requests each run of each replica answered (from its
# access log: LISTs, and watches by where they were answered, with the pass-through reason);
# the connections the balancer relayed to each; and per informer its events after its first
# sync (an update with an unchanged resourceVersion is a relist's) and its store's digest
# against the same informer direct.
#   bash loadtest/real/rolling.sh [KACHE_BIN] [OUT_DIR]
# Needs ~/real-apiserver (kubeconfig, bin/informer-sync: loadtest/clientgo/build.sh).
set -euo pipefail
KB=$(realpath "${1:-target/release/kache}"); OUT=${2:-$(mktemp -d)}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
REAL=${REAL_APISERVER:-$HOME/real-apiserver}
SYNC=$REAL/bin/informer-sync
K=(kubectl --kubeconfig "$REAL/kubeconfig" --context admin)
KINDS='pods|nodes|namespaces|services|configmaps'
NS=ns-001
metric() { # $1: a pattern of the metric's line
  "${K[@]}" get --raw /metrics | awk -v m="$1" -v k="resource=\"($KINDS)\"" '$0 ~ m && $0 ~ k {s+=$2} END {printf "%d\n", s}'
}
# LIST requests (one-key reads of the current resourceVersion included), and the objects the
# apiserver's LISTs returned (from its watch cache or etcd).
lists() { metric '^apiserver_request_total\{.*verb="LIST"'; }
listed() { metric '^apiserver_(cache|storage)_list_returned_objects_total'; }
now() { date +%s.%N; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# A kache metric's sum on replica $1.
kmetric() { curl -s "http://$(cat "$OUT/admin.$1")/metrics" | awk -v m="^$2" '$0 ~ m {s+=$2} END {printf "%d\n", s}'; }
NODE=$("${K[@]}" get pods -n "$NS" -o jsonpath='{.items[0].spec.nodeName}')

rm -rf "$OUT"/state.* "$OUT"/lb "$OUT/digest-now" "$OUT"/informer.* "$OUT"/kache.*.log "$OUT/summary"
mkdir -p "$OUT/lb"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}" $(cat "$OUT"/kache.?.pid 2>/dev/null); do kill -TERM "$p" 2>/dev/null || true; done
  "${K[@]}" delete pod -n "$NS" rolling-0 rolling-a rolling-b --grace-period=0 --force --ignore-not-found >/dev/null 2>&1 || true
}
trap cleanup EXIT

# One certificate for both replicas and every start, so the informers trust whichever answers.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=kache \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$OUT/tls.key" -out "$OUT/tls.crt" 2>/dev/null
declare -A PORT=([a]=$(free_port) [b]=$(free_port))
LB=$(free_port)

start() { # $1: replica (a|b), $2: cold|warm
  local r=$1 t0 l0 o0 t1
  rm -f "$OUT/admin.$r"
  t0=$(now); l0=$(lists); o0=$(listed)
  "$KB" serve --upstream-kubeconfig "$REAL/kubeconfig" --upstream-context admin --listen "127.0.0.1:${PORT[$r]}" \
    --tls-cert-file "$OUT/tls.crt" --tls-private-key-file "$OUT/tls.key" \
    --admin-listen 127.0.0.1:0 --admin-addr-file "$OUT/admin.$r" --client-kubeconfig-out "$OUT/kache.$r.kubeconfig" \
    --state-dir "$OUT/state.$r" --state-interval 0 --access-log --log-format json >"$OUT/kache.$r.$2.log" 2>&1 &
  echo $! >"$OUT/kache.$r.pid"
  while [ ! -s "$OUT/admin.$r" ]; do sleep 0.02; done
  until curl -sf "http://$(cat "$OUT/admin.$r")/readyz" >/dev/null; do sleep 0.05; done
  t1=$(now)
  printf 'replica %s %s start: ready in %.2f s; apiserver LIST requests of the cached kinds %d, objects they returned %d; caches restored from its state %d, its informers'"'"' LISTs %d\n' \
    "$r" "$2" "$(echo "$t1 - $t0" | bc)" $(( $(lists) - l0 )) $(( $(listed) - o0 )) \
    "$(kmetric "$r" kache_state_restored_total)" "$(kmetric "$r" kache_informer_relists_total)" | tee -a "$OUT/summary"
}
stop() { # $1: replica
  local r=$1 t0 pid
  # Out of service first, as a terminating pod leaves the Service's endpoints (its preStop pause).
  touch "$OUT/lb/out.${PORT[$r]}"; sleep 1
  t0=$(now); pid=$(cat "$OUT/kache.$r.pid")
  kill -TERM "$pid"; while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  printf 'replica %s stopped (state written) in %.2f s; state %s\n' "$r" "$(echo "$(now) - $t0" | bc)" "$(du -sh "$OUT/state.$r" | cut -f1)" | tee -a "$OUT/summary"
}
in_service() { rm -f "$OUT/lb/out.${PORT[$1]}"; }
touch_pods() {
  local p
  for p in $("${K[@]}" get pods -n "$NS" -o name | head -"$1"); do
    "${K[@]}" label -n "$NS" "$p" kache-rolling="$RANDOM" --overwrite >/dev/null
  done
}
create_pod() { # $1: name; on the kubelet informer's node
  "${K[@]}" create -f - >/dev/null <<EOF
{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "$1", "namespace": "$NS", "labels": {"app": "kache-rolling"}},
 "spec": {"nodeName": "$NODE", "terminationGracePeriodSeconds": 0, "automountServiceAccountToken": false,
          "containers": [{"name": "c", "image": "registry.example.com/pause:3.10"}]}}
EOF
}
# No kubelet ends the pod: deleted at once.
delete_pod() { "${K[@]}" delete pod -n "$NS" "$1" --grace-period=0 --force >/dev/null 2>&1; }

start a cold
start b cold
touch "$OUT/lb/out.${PORT[b]}"
python3 "$HERE/balancer.py" "$LB" "$OUT/lb" "${PORT[a]}" "${PORT[b]}" >"$OUT/balancer.log" 2>&1 &
pids+=($!)
until [ -e "$OUT/lb/listening" ]; do sleep 0.05; done
sed "s#127.0.0.1:${PORT[a]}#127.0.0.1:$LB#" "$OUT/kache.a.kubeconfig" >"$OUT/balancer.kubeconfig"
create_pod rolling-0

# shellcheck source=loadtest/real/informers.sh
. "$(dirname "$0")/informers.sh"
informers_start "$OUT/balancer.kubeconfig" 15m
echo "informers synced through replica a (b out of service); connections relayed, by replica port: $(sort "$OUT/balancer.log" | uniq -c | tr -s ' ' | tr '\n' ';')" | tee -a "$OUT/summary"
in_service b
touch_pods 2
sleep 2

# The rolling update.
stop a
touch_pods 3; create_pod rolling-a; delete_pod rolling-0
sleep 2
start a warm
in_service a
sleep 3
stop b
touch_pods 3; "${K[@]}" label -n "$NS" pod/rolling-a kache-rolling=b-down >/dev/null; create_pod rolling-b; delete_pod rolling-a
sleep 2
start b warm
in_service b
sleep 10
touch_pods 2
sleep 3

informers_digest
for r in a b; do
  echo "replica $r since its restart: its informers' LISTs $(kmetric "$r" kache_informer_relists_total), upstream watch restarts $(kmetric "$r" kache_informer_watch_restarts_total)" | tee -a "$OUT/summary"
done
for log in a.cold b.cold a.warm b.warm; do
  python3 - "$OUT/kache.$log.log" "$log" <<'EOF' | tee -a "$OUT/summary"
import collections, json, sys
lists, watches = collections.Counter(), collections.Counter()
for line in open(sys.argv[1]):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    f = e.get("fields", {})
    if e.get("target") != "kache::access" or f.get("resource") != "pods":
        continue
    where = f["source"] + (f"/{f['reason']}" if f.get("reason") else "") + f" {f['code']}"
    if f.get("verb") == "list":
        lists[where] += 1
    elif f.get("verb") == "watch":
        watches[where] += 1
show = lambda c: ", ".join(f"{n} {w}" for w, n in sorted(c.items())) or "none"
print(f"replica {sys.argv[2]} run answered pod LISTs: {show(lists)}; pod watches: {show(watches)}")
EOF
done
echo "connections the balancer relayed, by replica port (a ${PORT[a]}, b ${PORT[b]}): $(sort "$OUT/balancer.log" | uniq -c | tr -s ' ' | tr '\n' ';')" | tee -a "$OUT/summary"
informers_compare
