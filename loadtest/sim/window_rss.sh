#!/usr/bin/env bash
# RSS of `kache serve` in front of `kache sim` while pods of POD_BYTES change CHURN times a
# second, sampled every STEP seconds for DURATION; extra `kache serve` flags from the
# arguments (e.g. `--cache-window-size 0` for no byte bound). Prints "seconds rss_mb
# window_events window_bytes" lines. Loopback only; stops everything it started.
#   KACHE=target/release/kache PODS=3000 POD_BYTES=16384 CHURN=100 DURATION=120 \
#     bash loadtest/sim/window_rss.sh --cache-window-size 0
set -euo pipefail
KACHE="${KACHE:-target/release/kache}"
PODS="${PODS:-3000}"; POD_BYTES="${POD_BYTES:-16384}"; CHURN="${CHURN:-100}"
SECONDS_TOTAL="${DURATION:-120}"; STEP="${STEP:-10}"
dir="$(mktemp -d)"
cleanup() { kill "${kp:-}" "${sp:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
"$KACHE" sim --nodes 100 --pods "$PODS" --pod-size "$POD_BYTES" --churn-per-sec "$CHURN" \
  --lease-churn-per-sec 0 --listen 127.0.0.1:0 --addr-file "$dir/sim" 2>"$dir/sim.log" & sp=$!
until [ -s "$dir/sim" ]; do sleep 0.2; done
printf 'apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster: {server: "http://%s"}\ncontexts:\n- name: sim\n  context: {cluster: sim, user: sim}\ncurrent-context: sim\nusers:\n- name: sim\n  user: {}\n' "$(cat "$dir/sim")" > "$dir/kubeconfig"
"$KACHE" serve --upstream-kubeconfig "$dir/kubeconfig" --insecure-http --allow-anonymous \
  --listen 127.0.0.1:0 --addr-file "$dir/kache" --admin-listen 127.0.0.1:0 --admin-addr-file "$dir/admin" \
  --preload pods --preload-encodings json,protobuf "$@" 2>"$dir/kache.log" & kp=$!
until [ -s "$dir/admin" ]; do sleep 0.2; done
admin="$(cat "$dir/admin")"
until curl -sf "http://$admin/readyz" >/dev/null; do sleep 0.5; done
echo "# pods=$PODS pod_bytes=$POD_BYTES churn=$CHURN/s flags: $*"
echo "# seconds rss_mb window_events(json,pb) window_mb(json,pb)"
for ((t = 0; t <= SECONDS_TOTAL; t += STEP)); do
  rss_kb="$(awk '/VmRSS/ {print $2}' "/proc/$kp/status")"
  m="$(curl -s "http://$admin/metrics")"
  pick() { echo "$m" | awk -v name="$1" -v enc="$2" -v div="$3" '$0 ~ "^" name "\\{" && /resource="pods"/ && $0 ~ "encoding=\"" enc "\"" {printf "%.1f", $2 / div}'; }
  ev="$(pick kache_cache_window_events json 1),$(pick kache_cache_window_events protobuf 1)"
  by="$(pick kache_cache_window_bytes json 1048576),$(pick kache_cache_window_bytes protobuf 1048576)"
  echo "$t $((rss_kb / 1024)) $ev $by"
  [ "$t" -lt "$SECONDS_TOTAL" ] && sleep "$STEP"
done
