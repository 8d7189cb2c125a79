#!/usr/bin/env bash
# Cold start (issue 22): kache and a client-go informer of every pod started together, in front
# of the real apiserver of ../shared/real-apiserver; then the same informer directly.
#   bash loadtest/real/coldstart.sh target/release/kache [true|false (WatchList)] [rounds]
# Needs ~/real-apiserver (kubeconfig, bin/informer-sync: loadtest/clientgo/build.sh).
set -euo pipefail
KB=$(realpath "$1"); WL=${2:-true}; ROUNDS=${3:-2}
REAL=${REAL_APISERVER:-$HOME/real-apiserver}
for _ in $(seq "$ROUNDS"); do
  D=$(mktemp -d)
  "$KB" serve --upstream-kubeconfig "$REAL/kubeconfig" --listen 127.0.0.1:0 --addr-file "$D/addr" \
    --admin-listen 127.0.0.1:0 --admin-addr-file "$D/admin" --client-kubeconfig-out "$D/kache.kubeconfig" >"$D/kache.log" 2>&1 &
  KP=$!
  t0=$(date +%s.%N)
  while [ ! -s "$D/kache.kubeconfig" ] || [ ! -s "$D/admin" ]; do sleep 0.02; done
  t1=$(date +%s.%N)
  out=$("$REAL/bin/informer-sync" -kubeconfig "$D/kache.kubeconfig" -watchlist="$WL" 2>&1 | tail -1)
  echo "through kache started with it (its kubeconfig after $(echo "$t1 - $t0" | bc) s): $out"
  curl -s "http://$(cat "$D/admin")/metrics" | grep -E '^kache_(passthrough|requests)_total' | grep -v ' 0$' | tr '\n' ' '; echo
  kill "$KP"; wait "$KP" 2>/dev/null || true; rm -rf "$D"
  echo "directly: $("$REAL/bin/informer-sync" -kubeconfig "$REAL/kubeconfig" -context admin -watchlist="$WL" 2>&1 | tail -1)"
done
