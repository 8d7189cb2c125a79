#!/usr/bin/env bash
# Cold start: kache and a client-go informer of every pod started together, in front
# of the real apiserver of ../shared/real-apiserver; then the same informer directly. Each round
# runs every build in turn, then directly; each line gives the informer's sync time, kache's CPU
# (its whole life), the apiserver's CPU over the run (from /proc) and where kache answered the
# informer's watch from (upstream: passed through; cache).
#   [TOUCH=1] bash loadtest/real/coldstart.sh "BIN_A [BIN_B ...]" [true|false (WatchList)] [rounds]
# TOUCH=1 labels one pod before each run, as pods change in a live cluster: a kube-apiserver
# answers a LIST's pages after the first from its watch cache only while it holds a snapshot of
# the kind newer than its last etcd compaction (an event of the kind in the last minutes), and
# from etcd otherwise. Needs ~/real-apiserver (kubeconfig, bin/informer-sync:
# loadtest/clientgo/build.sh).
set -euo pipefail
BINS=$1; WL=${2:-true}; ROUNDS=${3:-2}
. "$(dirname "$0")/kache.sh" # REAL (this script starts kache its own way, timed)
AP=$(pgrep -x kube-apiserver)
cpu() { awk '{print ($14+$15)*10}' "/proc/$1/stat"; }
sync_secs() { "$@" -watchlist="$WL" 2>&1 | tail -1 | awk '{print $5}'; }
touch_pod() {
  [ "${TOUCH:-0}" = 1 ] || return 0
  local k=(kubectl --kubeconfig "$REAL/kubeconfig" --context admin)
  "${k[@]}" label -n ns-001 "$("${k[@]}" get pods -n ns-001 -o name | head -1)" kache-touch="$RANDOM" --overwrite >/dev/null
}
through() {
  local KB D KP a0 secs src
  KB=$(realpath "$1"); D=$(mktemp -d); a0=$(cpu "$AP")
  "$KB" serve --upstream-kubeconfig "$REAL/kubeconfig" --listen 127.0.0.1:0 --addr-file "$D/addr" \
    --admin-listen 127.0.0.1:0 --admin-addr-file "$D/admin" --client-kubeconfig-out "$D/kache.kubeconfig" >"$D/kache.log" 2>&1 &
  KP=$!
  while [ ! -s "$D/kache.kubeconfig" ] || [ ! -s "$D/admin" ]; do sleep 0.02; done
  secs=$(sync_secs "$REAL/bin/informer-sync" -kubeconfig "$D/kache.kubeconfig")
  src=$(curl -s "http://$(cat "$D/admin")/metrics" | grep -E '^kache_requests_total\{verb="watch"' | sed 's/.*source="\([a-z]*\)".*/\1/' | tr '\n' ' ')
  echo "$(basename "$KB"): synced in $secs s; CPU ms: kache $(cpu "$KP"), apiserver $(( $(cpu "$AP") - a0 )); watch from $src"
  kill "$KP"; wait "$KP" 2>/dev/null || true; rm -rf "$D"
}
direct() {
  local a0 secs
  a0=$(cpu "$AP")
  secs=$(sync_secs "$REAL/bin/informer-sync" -kubeconfig "$REAL/kubeconfig" -context admin)
  echo "directly: synced in $secs s; CPU ms: apiserver $(( $(cpu "$AP") - a0 ))"
}
for _ in $(seq "$ROUNDS"); do
  for b in $BINS; do touch_pod; through "$b"; done
  touch_pod; direct
done
