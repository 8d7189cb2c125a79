#!/usr/bin/env bash
# Informer sync of every pod from a warm kache against directly (issue 22, item 4): client-go's
# shared informer (loadtest/clientgo, built by its build.sh into ~/real-apiserver/bin) in
# WatchList and LIST mode, with client-go's default content type and with protobuf set explicitly
# (as kube-controller-manager and kube-scheduler do), through a synced kache and directly,
# alternating, ROUNDS rounds. Note: client-go 1.36's typed clients prefer protobuf for built-in
# kinds when no content type is set, so the "default" rows speak protobuf too (a CPU profile,
# informer-sync -cpuprofile, shows Pod.Unmarshal in both; runs before 2026-11-26's fifth
# session labelled these rows "json").
#   [ENCS="default protobuf"] bash loadtest/real/informer_warm.sh target/release/kache [rounds]
# Prints one line per sync: "<default|protobuf> <mode> <kache|direct> <seconds>".
set -euo pipefail
KB=$(realpath "$1"); ROUNDS=${2:-3}
REAL=${REAL_APISERVER:-$HOME/real-apiserver}
. "$(dirname "$0")/kache.sh"
start_kache "$KB"
trap 'kill $KP 2>/dev/null; wait $KP 2>/dev/null; rm -rf "$D"' EXIT
sync() { # encoding mode where
  local args=(-watchlist="$([ "$2" = watchlist ] && echo true || echo false)")
  [ "$1" = protobuf ] && args+=(-protobuf)
  if [ "$3" = kache ]; then args+=(-kubeconfig "$D/kache.kubeconfig"); else args+=(-kubeconfig "$REAL/kubeconfig" -context admin); fi
  "$REAL/bin/informer-sync" "${args[@]}" 2>&1 | tail -1 | sed -n 's/.* in \([0-9.]*\) s.*/\1/p'
}
for _ in $(seq "$ROUNDS"); do
  for enc in ${ENCS:-default protobuf}; do
    for mode in watchlist list; do
      for where in kache direct; do
        echo "$enc $mode $where $(sync "$enc" "$mode" "$where")"
      done
    done
  done
done
