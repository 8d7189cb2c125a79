#!/usr/bin/env bash
# kache's RSS per 10,000 pods and per open watch, in front of `kache sim` (loopback only;
# stops everything it started). For each pod size (POD_SIZES: the simulator's default
# when "default", else --pod-size) and encoding (ENCODINGS), it starts the simulator with
# PODS pods (no churn), kache preloading pods in that encoding alone, and prints kache's RSS
# once ready with what its cache holds; a kache preloading nodes only gives the baseline.
# Then, in front of the first pod size, it opens WATCHES pod watches (as kubelets do:
# `fieldSelector=spec.nodeName=NODE`, from the current resourceVersion) and prints the RSS
# with them open.
#   KACHE=target/release/kache PODS=10000 WATCHES=1000 bash loadtest/sim/sizing.sh
set -euo pipefail
KACHE="${KACHE:-target/release/kache}"
PODS="${PODS:-10000}"; NODES="${NODES:-100}"; WATCHES="${WATCHES:-1000}"
POD_SIZES="${POD_SIZES:-default 16384}"; ENCODINGS="${ENCODINGS:-json protobuf}"
dir="$(mktemp -d)"
cleanup() { kill "${kp:-}" "${sp:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

start_sim() { # pod size
  local size_flag=()
  [ "$1" != default ] && size_flag=(--pod-size "$1")
  rm -f "$dir/sim"
  "$KACHE" sim --nodes "$NODES" --pods "$PODS" "${size_flag[@]}" --churn-per-sec 0 --lease-churn-per-sec 0 \
    --listen 127.0.0.1:0 --addr-file "$dir/sim" 2>"$dir/sim.log" & sp=$!
  until [ -s "$dir/sim" ]; do sleep 0.2; done
  printf 'apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster: {server: "http://%s"}\ncontexts:\n- name: sim\n  context: {cluster: sim, user: sim}\ncurrent-context: sim\nusers:\n- name: sim\n  user: {}\n' "$(cat "$dir/sim")" > "$dir/kubeconfig"
}
start_kache() { # preload encodings
  rm -f "$dir/kache" "$dir/admin"
  "$KACHE" serve --upstream-kubeconfig "$dir/kubeconfig" --insecure-http --allow-anonymous \
    --listen 127.0.0.1:0 --addr-file "$dir/kache" --admin-listen 127.0.0.1:0 --admin-addr-file "$dir/admin" \
    --preload "$1" --preload-encodings "$2" --log-level warn 2>"$dir/kache.log" & kp=$!
  until [ -s "$dir/admin" ]; do sleep 0.2; done
  admin="$(cat "$dir/admin")"
  until curl -sf "http://$admin/readyz" >/dev/null; do sleep 0.5; done
}
stop() { kill "${kp:-}" "${sp:-}" 2>/dev/null || true; wait "${kp:-}" "${sp:-}" 2>/dev/null || true; kp=; sp=; }
rss_mb() { awk '/VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$kp/status"; }
held() { # resource encoding -> "objects bytes_mb"
  curl -s "http://$admin/metrics" | awk -v r="$1" -v e="$2" '
    /^kache_cache_objects\{/ && $0 ~ "resource=\"" r "\"" && $0 ~ "encoding=\"" e "\"" {o = $2}
    /^kache_cache_bytes\{/ && $0 ~ "resource=\"" r "\"" && $0 ~ "encoding=\"" e "\"" {b = $2}
    END {printf "%d %.1f", o, b / 1048576}'
}

echo "# kache $("$KACHE" --version 2>/dev/null || echo "$KACHE"), $PODS pods on $NODES nodes, no churn"
first="${POD_SIZES%% *}"
start_sim "$first"; start_kache nodes json; sleep 2
echo "baseline (nodes only): rss_mb $(rss_mb)"
stop
echo "# pod_size encoding pods cache_mb rss_mb"
for size in $POD_SIZES; do
  for enc in $ENCODINGS; do
    start_sim "$size"; start_kache pods "$enc"; sleep 2
    echo "$size $enc $(held pods "$enc") $(rss_mb)"
    stop
  done
done

# Open watches: kubelet-like, each on its own connection, from the current resourceVersion.
start_sim "$first"; start_kache pods "${ENCODINGS%% *}"; sleep 2
kache_addr="$(cat "$dir/kache")"
before="$(rss_mb)"
rv="$(curl -s "http://$kache_addr/api/v1/pods?limit=1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["resourceVersion"])')"
mkfifo "$dir/opened" "$dir/release"
python3 - "$kache_addr" "$WATCHES" "$NODES" "$rv" "$dir/opened" "$dir/release" <<'PY' &
import asyncio, sys
addr, n, nodes, rv, opened, release = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
host, port = addr.rsplit(":", 1)
async def watch(i):
    r, w = await asyncio.open_connection(host, int(port))
    node = f"node-{i % nodes:04d}"
    w.write(f"GET /api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion={rv}&fieldSelector=spec.nodeName%3D{node} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\n\r\n".encode())
    await w.drain()
    head = await r.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return r, w
async def main():
    conns = []
    for start in range(0, n, 100):
        conns += await asyncio.gather(*(watch(i) for i in range(start, min(n, start + 100))))
    with open(opened, "w") as f:
        f.write(f"{len(conns)}\n")
    await asyncio.get_running_loop().run_in_executor(None, lambda: open(release).read())
asyncio.run(main())
PY
wp=$!
opened_n="$(cat "$dir/opened")"
sleep 2
echo "# watches_open rss_mb_before rss_mb_with_watches kache_watches_open"
echo "$opened_n $before $(rss_mb) $(curl -s "http://$admin/metrics" | awk '/^kache_watches_open\{/ && /resource="pods"/ {s += $2} END {print s}')"
echo done > "$dir/release"
wait "$wp" || true
