#!/usr/bin/env bash
# kache's cold start against its warm start (--state-dir), in front of the real apiserver of
# ../shared/real-apiserver, and three client-go informers of pods across the restart.
#
# kache starts with an empty state directory (cold) and is stopped with SIGTERM (it writes its
# caches), a few pods are changed while it is down, then it starts again on the same address
# and certificate (warm). For each start: the time to /readyz, the apiserver's CPU (from
# /proc) and its LIST requests of the preloaded kinds (apiserver_request_total) until ready.
# Three informers (loadtest/clientgo `informer-sync -follow`: LIST mode, WatchList, and a
# kubelet's, spec.nodeName) watch through kache from the cold start to the end: their events
# after the first sync (updates with an unchanged resourceVersion are a relist's), kache's own
# LISTs served after the restart, and each store's digest against the same informer direct.
#   bash loadtest/real/warmstart.sh [KACHE_BIN] [OUT_DIR]
# Needs ~/real-apiserver (kubeconfig, bin/informer-sync: loadtest/clientgo/build.sh).
set -euo pipefail
KB=$(realpath "${1:-target/release/kache}"); OUT=${2:-$(mktemp -d)}; mkdir -p "$OUT"
REAL=${REAL_APISERVER:-$HOME/real-apiserver}
SYNC=$REAL/bin/informer-sync
K=(kubectl --kubeconfig "$REAL/kubeconfig" --context admin)
AP=$(pgrep -x kube-apiserver)
KINDS='pods|nodes|namespaces|services|configmaps'
cpu() { awk '{print ($14+$15)*10}' "/proc/$1/stat"; }
metric() { # $1: a pattern of the metric's line
  "${K[@]}" get --raw /metrics | awk -v m="$1" -v k="resource=\"($KINDS)\"" '$0 ~ m && $0 ~ k {s+=$2} END {printf "%d\n", s}'
}
# LIST requests (one-key reads of the current resourceVersion included), and the objects the
# apiserver's LISTs returned (from its watch cache or etcd).
lists() { metric '^apiserver_request_total\{.*verb="LIST"'; }
listed() { metric '^apiserver_(cache|storage)_list_returned_objects_total'; }
now() { date +%s.%N; }
NODE=$("${K[@]}" get pods -A -o jsonpath='{.items[0].spec.nodeName}')

# One certificate for both starts, so the informers trust the restarted kache.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=kache \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$OUT/tls.key" -out "$OUT/tls.crt" 2>/dev/null
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

start() { # $1: cold|warm
  local t0 a0 l0 o0 t1
  t0=$(now); a0=$(cpu "$AP"); l0=$(lists); o0=$(listed)
  "$KB" serve --upstream-kubeconfig "$REAL/kubeconfig" --upstream-context admin --listen "127.0.0.1:$PORT" \
    --tls-cert-file "$OUT/tls.crt" --tls-private-key-file "$OUT/tls.key" \
    --admin-listen 127.0.0.1:0 --admin-addr-file "$OUT/admin.$1" --client-kubeconfig-out "$OUT/kache.kubeconfig" \
    --state-dir "$OUT/state" --state-interval 0 >"$OUT/kache.$1.log" 2>&1 &
  echo $! >"$OUT/kache.pid"
  while [ ! -s "$OUT/admin.$1" ]; do sleep 0.02; done
  until curl -sf "http://$(cat "$OUT/admin.$1")/readyz" >/dev/null; do sleep 0.05; done
  t1=$(now)
  printf '%s start: ready in %.2f s; apiserver CPU %d ms; LIST requests of the cached kinds %d, objects they returned %d\n' "$1" \
    "$(echo "$t1 - $t0" | bc)" $(( $(cpu "$AP") - a0 )) $(( $(lists) - l0 )) $(( $(listed) - o0 )) | tee -a "$OUT/summary"
}
stop() {
  local t0 pid; t0=$(now); pid=$(cat "$OUT/kache.pid")
  kill -TERM "$pid"; while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  printf 'stopped (state written) in %.2f s; state %s\n' "$(echo "$(now) - $t0" | bc)" "$(du -sh "$OUT/state" | cut -f1)" | tee -a "$OUT/summary"
}
touch_pods() {
  local p
  for p in $("${K[@]}" get pods -n ns-001 -o name | head -"$1"); do
    "${K[@]}" label -n ns-001 "$p" kache-warm="$RANDOM" --overwrite >/dev/null
  done
}

rm -rf "$OUT/state" "$OUT/digest-now" "$OUT"/informer.*
start cold
# shellcheck source=loadtest/real/informers.sh
. "$(dirname "$0")/informers.sh"
informers_start "$OUT/kache.kubeconfig" 10m
touch_pods 3
sleep 2
stop
touch_pods 5
start warm
sleep 10
touch_pods 2
sleep 3
informers_digest
served=$(curl -s "http://$(cat "$OUT/admin.warm")/metrics" | awk '/^kache_requests_total\{/ && /verb="list"/ {s+=$2} END {printf "%d\n", s}')
echo "LISTs the restarted kache answered (the informers are its only clients): $served" | tee -a "$OUT/summary"
informers_compare
kill -TERM "$(cat "$OUT/kache.pid")"; wait 2>/dev/null || true
