#!/usr/bin/env bash
# The seed's scale (#49) against the real apiserver of ../shared/real-apiserver brought to
# 100,000 pods on 5,000 nodes (its README: populate.py --nodes 5000 --pods 100000
# --start-index 30000): a release kache at its defaults in front of it, its RSS against the
# bytes it caches once ready, then the `seed` scenario (5,000 kubelets + 100 cluster-wide
# pod watchers under 100 PATCHes/s, direct and through kache in one run).
#   bash loadtest/real/seed.sh [OUT_DIR]           (RSS_ONLY=1: stop after the RSS line)
# Needs target/release/kache and target/release/kache-loadtest (cargo build --release --workspace).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$(realpath -m "${1:-$(mktemp -d)}"); mkdir -p "$OUT"
REAL=${REAL_APISERVER:-$HOME/real-apiserver}
ulimit -n 20000
"$ROOT/target/release/kache" serve --upstream-kubeconfig "$REAL/kubeconfig" --upstream-context admin \
  --listen 127.0.0.1:0 --addr-file "$OUT/addr" --admin-listen 127.0.0.1:0 --admin-addr-file "$OUT/admin" \
  --client-kubeconfig-out "$OUT/kache.kubeconfig" >"$OUT/kache.log" 2>&1 &
KP=$!
trap 'kill $KP 2>/dev/null; wait $KP 2>/dev/null' EXIT
t0=$(date +%s.%N)
until [ -s "$OUT/admin" ] && curl -sf "http://$(cat "$OUT/admin")/readyz" >/dev/null; do
  kill -0 $KP 2>/dev/null || { cat "$OUT/kache.log" >&2; exit 1; }
  sleep 0.2
done
printf 'kache ready in %.1f s\n' "$(echo "$(date +%s.%N) - $t0" | bc)" | tee "$OUT/summary"
sleep 10
m=$(curl -s "http://$(cat "$OUT/admin")/metrics")
cached=$(awk '/^kache_cache_bytes\{/ {s+=$2} END {printf "%d\n", s}' <<<"$m")
rss=$(awk '/^VmRSS/ {printf "%d\n", $2*1024}' "/proc/$KP/status")
printf 'RSS %d MB for %d MB cached: %.3fx\n' $((rss >> 20)) $((cached >> 20)) "$(echo "$rss / $cached" | bc -l)" | tee -a "$OUT/summary"
[ -n "${RSS_ONLY:-}" ] && exit 0
"$ROOT/target/release/kache-loadtest" run seed --allow-writes --out "$OUT" \
  --direct-kubeconfig "$REAL/kubeconfig" --direct-context admin --kache-kubeconfig "$OUT/kache.kubeconfig" \
  --kache-pid $KP --kache-admin "$(cat "$OUT/admin")" --upstream-pid "$(pgrep -x kube-apiserver)" | tee -a "$OUT/summary"
rss=$(awk '/^VmRSS/ {printf "%d\n", $2*1024}' "/proc/$KP/status")
echo "kache RSS after the run: $((rss >> 20)) MB" | tee -a "$OUT/summary"
