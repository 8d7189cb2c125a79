#!/usr/bin/env bash
# The headline table of BENCHMARKS.md against any cluster: a release kache started in front of
# KUBECONFIG's context (its default settings), then everyday kubectl commands and reads of
# every pod through it and directly, alternating (parity.py, medians of N), and the table and
# its plot written to OUT (headline.md, headline.json, headline.svg).
#
#   cargo build --release
#   bash loadtest/real/headline.sh KUBECONFIG [CONTEXT] [OUT]     # N=5 by default
#
# The context's user must be allowed what kubectl's commands do and to PUT a ConfigMap in
# `default` (the writer that moves the resourceVersion, as a real cluster's leases do;
# WRITER=0 turns it off). kubectl must be on PATH.
set -euo pipefail
KC=$(realpath "$1"); CONTEXT=${2:-}; OUT=$(realpath -m "${3:-headline}")
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../.." && pwd)
BIN=${KACHE_BIN:-$ROOT/target/release/kache}
[ -x "$BIN" ] || { echo "headline.sh: $BIN not built (cargo build --release)" >&2; exit 2; }
mkdir -p "$OUT"
D=$(mktemp -d)
ctx=(); [ -n "$CONTEXT" ] && ctx=(--upstream-context "$CONTEXT")
"$BIN" serve --upstream-kubeconfig "$KC" "${ctx[@]}" --listen 127.0.0.1:0 --addr-file "$D/addr" \
  --admin-listen 127.0.0.1:0 --admin-addr-file "$D/admin" --client-kubeconfig-out "$D/kache.kubeconfig" \
  >"$D/kache.log" 2>&1 &
KP=$!
trap 'kill $KP 2>/dev/null; wait $KP 2>/dev/null; rm -rf "$D"' EXIT
for _ in $(seq 600); do
  [ -s "$D/admin" ] && curl -sf "http://$(cat "$D/admin")/readyz" >/dev/null && break
  kill -0 $KP 2>/dev/null || { cat "$D/kache.log" >&2; exit 1; }
  sleep 0.5
done
pctx=(); [ -n "$CONTEXT" ] && pctx=(--context "$CONTEXT")
writer=(); [ "${WRITER:-1}" = 0 ] && writer=(--no-writer)
python3 "$HERE/parity.py" --kache-kubeconfig "$D/kache.kubeconfig" --direct-kubeconfig "$KC" "${pctx[@]}" \
  -n "${N:-5}" "${writer[@]}" --json "$OUT/headline.json" | tee "$OUT/parity.txt" || true
python3 "$HERE/headline_table.py" "$OUT/headline.json" --commit "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  --svg "$OUT/headline.svg" >"$OUT/headline.md"
cat "$OUT/headline.md"
