#!/usr/bin/env bash
# Consistent LISTs of every pod (protobuf) through a warm release kache with nothing writing: the time
# to first byte of each. With no new revision upstream, a read needs no new bookmark.
#   bash loadtest/real/quiet_reads.sh target/release/kache [reads]
set -euo pipefail
. "$(dirname "$0")/kache.sh"
start_kache "$(realpath "$1")"
trap 'kill $KP 2>/dev/null; wait $KP 2>/dev/null; rm -rf "$D"' EXIT
for _ in $(seq "${2:-12}"); do
  curl -sk -o /dev/null -w "%{time_starttransfer} " -H "Authorization: Bearer $(admin_token)" \
    -H "Accept: application/vnd.kubernetes.protobuf" "$K/api/v1/pods"
  sleep "0.$((RANDOM % 9))"
done
echo
curl -s "http://$(cat "$D/admin")/metrics" | grep -E "^kache_freshness_probes_total\{resource=\"pods\""
