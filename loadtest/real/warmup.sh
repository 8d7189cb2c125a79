#!/usr/bin/env bash
# kache's own warm-up against the real apiserver: start a release kache that preloads only the
# given kind and encoding, and print how long until its log says the kind synced and the CPU
# kache, the kube-apiserver and etcd spent by then (from /proc). ROUNDS rounds of each binary,
# alternating.
#   bash loadtest/real/warmup.sh "BIN_A BIN_B" [pods] [protobuf|json] [rounds]
set -euo pipefail
BINS=$1; KIND=${2:-pods}; ENC=${3:-protobuf}; ROUNDS=${4:-3}
. "$(dirname "$0")/kache.sh" # REAL (this script starts kache its own way, timed)
cpu() { awk '{printf "%.2f", ($14+$15)/100}' "/proc/$1/stat"; }
AP=$(pgrep -x kube-apiserver); ET=$(pgrep -x etcd)
one() {
  local D P t0 t1 a0 e0
  D=$(mktemp -d)
  a0=$(cpu "$AP"); e0=$(cpu "$ET")
  "$1" serve --upstream-kubeconfig "$REAL/kubeconfig" --upstream-context admin --listen 127.0.0.1:0 --addr-file "$D/addr" \
    --admin-listen 127.0.0.1:0 --admin-addr-file "$D/admin" --preload "$KIND" --preload-encodings "$ENC" >"$D/log" 2>&1 &
  P=$!; t0=$(date +%s.%N)
  until sed 's/\x1b\[[0-9;]*m//g' "$D/log" | grep -q "informer synced resource=$KIND "; do
    kill -0 "$P" 2>/dev/null || { cat "$D/log"; exit 1; }
    sleep 0.05
  done
  t1=$(date +%s.%N)
  echo "$(basename "$1") $KIND $ENC: synced after $(echo "$t1 - $t0" | bc) s, CPU: kache $(cpu "$P") s," \
    "apiserver $(echo "$(cpu "$AP") - $a0" | bc) s, etcd $(echo "$(cpu "$ET") - $e0" | bc) s"
  kill "$P"; wait "$P" 2>/dev/null || true; rm -rf "$D"
}
for _ in $(seq "$ROUNDS"); do for b in $BINS; do one "$(realpath "$b")"; done; done
