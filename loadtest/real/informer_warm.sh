#!/usr/bin/env bash
# Informer sync of every pod from a warm kache against directly: client-go's
# shared informer (loadtest/clientgo, built by its build.sh into ~/real-apiserver/bin) in
# WatchList and LIST mode, with client-go's default content type and with protobuf set explicitly
# (as kube-controller-manager and kube-scheduler do), through each synced kache build and
# directly, alternating, ROUNDS rounds. Note: client-go 1.36's typed clients prefer protobuf for
# built-in kinds when no content type is set, so the "default" rows speak protobuf too (a CPU
# profile, informer-sync -cpuprofile, shows Pod.Unmarshal in both; runs before 2026-11-26's
# fifth session labelled these rows "json"). With several builds, all run at once (each with
# its own feeds), so each round compares them on the same machine state.
# With REPLAY=1, each round also syncs a WatchList from watch-replay (loadtest/clientgo/replay,
# built by its build.sh): the first build's gzipped WatchList of every pod, recorded once
# after a warm-up sync, served from memory over TLS and HTTP/2. No server can hand the client
# those bytes sooner, so that row is the client's own floor.
#   [ENCS="default protobuf"] [REPLAY=1] bash loadtest/real/informer_warm.sh "BIN_A [BIN_B ...]" [rounds]
# Prints one line per sync: "<default|protobuf> <mode> <build|direct> <seconds>".
set -euo pipefail
BINS=$1; ROUNDS=${2:-3}
. "$(dirname "$0")/kache.sh"
declare -A DIR
PIDS=() DIRS=()
trap 'kill "${PIDS[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "${DIRS[@]}"' EXIT
for b in $BINS; do
  start_kache "$(realpath "$b")"
  DIR[$b]=$D; PIDS+=("$KP"); DIRS+=("$D")
done
sync() { # encoding mode kubeconfig [context] [server]
  local args=(-watchlist="$([ "$2" = watchlist ] && echo true || echo false)" -kubeconfig "$3")
  [ "$1" = protobuf ] && args+=(-protobuf)
  [ -n "${4:-}" ] && args+=(-context "$4")
  [ -n "${5:-}" ] && args+=(-server "$5")
  local out
  out=$("$REAL/bin/informer-sync" "${args[@]}" 2>&1) || true
  # A sync that did not print its time (an error) shows its last lines on stderr.
  grep -m1 '^synced ' <<<"$out" | sed -n 's/.* in \([0-9.]*\) s.*/\1/p' | grep . || tail -n 5 <<<"$out" >&2
}
REPLAY_URL=
if [ -n "${REPLAY:-}" ]; then
  FIRST=${BINS%% *}; KC=${DIR[$FIRST]}/kache.kubeconfig
  sync default watchlist "$KC" >/dev/null # the runs kept, as for every warm sync after it
  TOKEN=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["users"][0]["user"]["token"])' "$KC")
  curl -sk --max-time 6 -o "${DIR[$FIRST]}/watch-list.gz" -H "Authorization: Bearer $TOKEN" \
    -H 'Accept: application/vnd.kubernetes.protobuf,application/json' -H 'Accept-Encoding: gzip' \
    "https://$(cat "${DIR[$FIRST]}/addr")/api/v1/pods?allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&watch=true" || true
  "$REAL/bin/watch-replay" -body "${DIR[$FIRST]}/watch-list.gz" >"${DIR[$FIRST]}/replay.addr" &
  PIDS+=("$!")
  until [ -s "${DIR[$FIRST]}/replay.addr" ]; do sleep 0.2; done
  REPLAY_URL=$(cat "${DIR[$FIRST]}/replay.addr")
fi
for _ in $(seq "$ROUNDS"); do
  for enc in ${ENCS:-default protobuf}; do
    for mode in watchlist list; do
      for b in $BINS; do
        echo "$enc $mode $(basename "$b") $(sync "$enc" "$mode" "${DIR[$b]}/kache.kubeconfig")"
      done
      echo "$enc $mode direct $(sync "$enc" "$mode" "$REAL/kubeconfig" admin)"
      if [ -n "$REPLAY_URL" ] && [ "$mode" = watchlist ]; then
        echo "$enc $mode replay $(sync "$enc" "$mode" "${DIR[$FIRST]}/kache.kubeconfig" "" "$REPLAY_URL")"
      fi
    done
  done
done
