#!/usr/bin/env bash
# The hop's own latency: a consistent GET of one pod (passed through as cheaper_upstream)
# through kache and directly, alternating, each over a new TLS connection (curl).
#   bash loadtest/real/hop.sh target/release/kache [rounds]
# Prints the medians of TLS handshake, first byte and total, in seconds, per side.
set -euo pipefail
KB=$(realpath "$1"); N=${2:-40}
. "$(dirname "$0")/kache.sh"
T=$(admin_token)
start_kache "$KB"
trap 'kill $KP 2>/dev/null; rm -rf "$D"' EXIT
P=$(curl -sk -H "Authorization: Bearer $T" "$A/api/v1/namespaces/ns-001/pods?limit=1" |
  python3 -c "import json,sys; print(json.load(sys.stdin)['items'][0]['metadata']['name'])")
for _ in $(seq "$N"); do
  for side in kache direct; do
    base=$([ "$side" = kache ] && echo "$K" || echo "$A")
    echo "$side $(curl -sk -o /dev/null -w '%{time_appconnect} %{time_starttransfer} %{time_total}' \
      -H "Authorization: Bearer $T" "$base/api/v1/namespaces/ns-001/pods/$P")"
  done
done | python3 -c '
import statistics, sys
d = {}
for line in sys.stdin:
    side, *t = line.split()
    d.setdefault(side, []).append([float(x) for x in t])
for side, v in d.items():
    print(side, "tls %.4f first byte %.4f total %.4f" % tuple(statistics.median(x[i] for x in v) for i in range(3)))
'
curl -s "http://$(cat "$D/admin")/metrics" | grep '^kache_passthrough_total' | grep -v ' 0$'
