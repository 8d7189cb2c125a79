#!/usr/bin/env bash
# Consistent LIST of every pod through kache and directly, with a writer moving the
# global resourceVersion every 0.2 s (a ConfigMap PATCHed directly, as leases move it).
#   bash loadtest/real/consistent_list.sh target/release/kache [rounds] [accept]
# Prints one line per request: `kache-cons|kache-rv0|direct-cons TTFB TOTAL` (seconds).
# Needs ~/real-apiserver (kubeconfig, admin.token) of ../shared/real-apiserver.
set -euo pipefail
KB=$(realpath "$1"); N=${2:-12}; ACCEPT=${3:-application/vnd.kubernetes.protobuf}
. "$(dirname "$0")/kache.sh"
T=$(admin_token)
start_kache "$KB"
trap 'kill $KP ${WP:-} 2>/dev/null; rm -rf "$D"' EXIT
curl -sk -o /dev/null -X POST -H "Authorization: Bearer $T" -H 'Content-Type: application/json' \
  "$A/api/v1/namespaces/default/configmaps" -d '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"rv-mover"}}' || true
( i=0; while true; do i=$((i+1)); curl -sk -o /dev/null -X PATCH -H "Authorization: Bearer $T" \
    -H 'Content-Type: application/merge-patch+json' "$A/api/v1/namespaces/default/configmaps/rv-mover" \
    -d "{\"data\":{\"i\":\"$i\"}}"; sleep 0.2; done ) &
WP=$!
t() { curl -sk -o /dev/null -w '%{time_starttransfer} %{time_total}\n' -H "Authorization: Bearer $T" -H "Accept: $ACCEPT" "$1"; }
for _ in $(seq "$N"); do
  sleep "$(python3 -c 'import random; print(random.uniform(0.5, 3))')"
  echo "kache-cons $(t "$K/api/v1/pods")"
  echo "kache-rv0 $(t "$K/api/v1/pods?resourceVersion=0")"
  echo "direct-cons $(t "$A/api/v1/pods")"
done
