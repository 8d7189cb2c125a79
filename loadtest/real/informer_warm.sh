#!/usr/bin/env bash
# Informer sync of every pod from a warm kache against directly (issue 22, item 4): client-go's
# shared informer (loadtest/clientgo, built by its build.sh into ~/real-apiserver/bin) in
# WatchList and LIST mode, with client-go's default content type and with protobuf set explicitly
# (as kube-controller-manager and kube-scheduler do), through each synced kache build and
# directly, alternating, ROUNDS rounds. Note: client-go 1.36's typed clients prefer protobuf for
# built-in kinds when no content type is set, so the "default" rows speak protobuf too (a CPU
# profile, informer-sync -cpuprofile, shows Pod.Unmarshal in both; runs before 2026-11-26's
# fifth session labelled these rows "json"). With several builds, all run at once (each with
# its own feeds), so each round compares them on the same machine state.
#   [ENCS="default protobuf"] bash loadtest/real/informer_warm.sh "BIN_A [BIN_B ...]" [rounds]
# Prints one line per sync: "<default|protobuf> <mode> <build|direct> <seconds>".
set -euo pipefail
BINS=$1; ROUNDS=${2:-3}
REAL=${REAL_APISERVER:-$HOME/real-apiserver}
. "$(dirname "$0")/kache.sh"
declare -A DIR
PIDS=() DIRS=()
trap 'kill "${PIDS[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "${DIRS[@]}"' EXIT
for b in $BINS; do
  start_kache "$(realpath "$b")"
  DIR[$b]=$D; PIDS+=("$KP"); DIRS+=("$D")
done
sync() { # encoding mode kubeconfig [context]
  local args=(-watchlist="$([ "$2" = watchlist ] && echo true || echo false)" -kubeconfig "$3")
  [ "$1" = protobuf ] && args+=(-protobuf)
  [ -n "${4:-}" ] && args+=(-context "$4")
  local out
  out=$("$REAL/bin/informer-sync" "${args[@]}" 2>&1) || true
  # A sync that did not print its time (an error) shows its last lines on stderr.
  grep -m1 '^synced ' <<<"$out" | sed -n 's/.* in \([0-9.]*\) s.*/\1/p' | grep . || tail -n 5 <<<"$out" >&2
}
for _ in $(seq "$ROUNDS"); do
  for enc in ${ENCS:-default protobuf}; do
    for mode in watchlist list; do
      for b in $BINS; do
        echo "$enc $mode $(basename "$b") $(sync "$enc" "$mode" "${DIR[$b]}/kache.kubeconfig")"
      done
      echo "$enc $mode direct $(sync "$enc" "$mode" "$REAL/kubeconfig" admin)"
    done
  done
done
