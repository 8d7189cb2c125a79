#!/usr/bin/env bash
# A burst of WatchList informers of every pod through a warm kache: one WatchList
# first (so a whole collection's runs are deflated and kept, `cache::deflated`), then ROUNDS
# rounds of N client-go informers (loadtest/clientgo's informer-sync) started at once. Prints
# per round kache's CPU (from /proc) and each client's sync, then kache's run counters.
#   bash loadtest/real/watchlist_burst.sh target/release/kache [N] [ROUNDS]
set -euo pipefail
N=${2:-4}; ROUNDS=${3:-3}
. "$(dirname "$0")/kache.sh"
start_kache "$(realpath "$1")"
trap 'kill $KP 2>/dev/null; wait $KP 2>/dev/null; rm -rf "$D"' EXIT
sync_one() { "$REAL/bin/informer-sync" -kubeconfig "$D/kache.kubeconfig" -watchlist=true 2>&1 | tail -1 | sed -n 's/.* in \([0-9.]*\) s.*/\1/p'; }
sync_one >/dev/null
cpu() { awk '{print $14+$15}' "/proc/$KP/stat"; }
for r in $(seq "$ROUNDS"); do
  before=$(cpu)
  pids=()
  for i in $(seq "$N"); do sync_one >"$D/sync.$i" & pids+=($!); done
  wait "${pids[@]}"
  after=$(cpu)
  echo "round $r kache_cpu=$(echo "($after-$before)/100" | bc -l | cut -c1-5) syncs=$(cat "$D"/sync.* | sort -n | tr '\n' ' ')"
done
curl -s "http://$(cat "$D/admin")/metrics" | grep '^kache_watch_list_runs_total' || true
