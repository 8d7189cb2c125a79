#!/usr/bin/env bash
# Bytes of a WatchList of every pod from a synced kache (start_kache waits for /readyz: every
# preloaded kind synced), asked as a Go client asks (protobuf,
# Accept-Encoding: gzip, HTTP/2), and its Content-Encoding. The watch ends
# after 8 s (timeoutSeconds), long after its initial events.
#   bash loadtest/real/watchlist_bytes.sh target/release/kache
set -euo pipefail
. "$(dirname "$0")/kache.sh"
start_kache "$(realpath "$1")"
trap 'kill $KP 2>/dev/null; wait $KP 2>/dev/null; rm -rf "$D"' EXIT
curl -sk -D "$D/headers" -o /dev/null -w '%{size_download} bytes in %{time_total} s\n' --http2 \
  -H "Authorization: Bearer $(admin_token)" -H 'Accept: application/vnd.kubernetes.protobuf;stream=watch' \
  -H 'Accept-Encoding: gzip' \
  "$K/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=8"
grep -i '^content-encoding' "$D/headers" || echo "content-encoding: none"
curl -s "http://$(cat "$D/admin")/metrics" | grep '^kache_requests_total{verb="watch"'
