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
# A static TLS server (nginx, if installed) of the bytes kache answers to the raw reads: the
# cost of sending those bytes at all, in the same run.
static=()
if command -v nginx >/dev/null; then
  mkdir -p "$D/static" "$D/nginx"
  chmod o+x "$D"; chmod o+rx "$D/static"  # nginx's workers run as another user when started as root
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=static \
    -keyout "$D/nginx/tls.key" -out "$D/nginx/tls.crt" 2>/dev/null
  SPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  cat >"$D/nginx/nginx.conf" <<EOF
worker_processes 1;
pid $D/nginx/pid;
error_log $D/nginx/error.log;
events {}
http {
  access_log off;
  client_body_temp_path $D/nginx; proxy_temp_path $D/nginx; fastcgi_temp_path $D/nginx;
  uwsgi_temp_path $D/nginx; scgi_temp_path $D/nginx;
  server {
    listen 127.0.0.1:$SPORT ssl;
    ssl_certificate $D/nginx/tls.crt;
    ssl_certificate_key $D/nginx/tls.key;
    root $D/static;
    default_type application/octet-stream;
  }
}
EOF
  nginx -c "$D/nginx/nginx.conf" -g 'daemon off;' &
  NP=$!
  trap 'kill $KP $NP 2>/dev/null; wait $KP $NP 2>/dev/null; rm -rf "$D"' EXIT
  static=(--static-url "https://127.0.0.1:$SPORT" --static-dir "$D/static")
else
  echo "headline.sh: nginx not installed: no static TLS column" >&2
fi
pctx=(); [ -n "$CONTEXT" ] && pctx=(--context "$CONTEXT")
writer=(); [ "${WRITER:-1}" = 0 ] && writer=(--no-writer)
python3 "$HERE/parity.py" --kache-kubeconfig "$D/kache.kubeconfig" --direct-kubeconfig "$KC" "${pctx[@]}" \
  -n "${N:-5}" ${ONLY:+--only "$ONLY"} "${writer[@]}" "${static[@]}" --json "$OUT/headline.json" | tee "$OUT/parity.txt" || true
python3 "$HERE/headline_table.py" "$OUT/headline.json" --commit "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  --svg "$OUT/headline.svg" >"$OUT/headline.md"
cat "$OUT/headline.md"
