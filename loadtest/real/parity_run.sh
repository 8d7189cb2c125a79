#!/usr/bin/env bash
# The parity benchmark against a kache this script starts: a release kache in front
# of the real apiserver with its default settings (plus any flags given after OUT), then
# parity.py through it and directly, then kache's pass-through and check counters.
#   [PARITY_ARGS="--only get-pods-A -n 9"] bash loadtest/real/parity_run.sh target/release/kache OUT [kache flags...]
# Writes OUT.txt (the table, then the counters) and OUT.json. Needs ~/real-apiserver of
# ../shared/real-apiserver.
set -euo pipefail
KB=$(realpath "$1"); OUT=$(realpath -m "$2"); shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/kache.sh"
start_kache "$KB" "$@"
trap 'kill $KP 2>/dev/null; rm -rf "$D"' EXIT
python3 "$HERE/parity.py" --kache-kubeconfig "$D/kache.kubeconfig" --direct-kubeconfig "$REAL/kubeconfig" \
  --context admin ${PARITY_ARGS:--n 5} --json "$OUT.json" >"$OUT.txt" 2>&1
curl -s "http://$(cat "$D/admin")/metrics" | grep -E '^kache_(consistent_checks|passthrough)_total' >>"$OUT.txt"
