#!/usr/bin/env python3
"""LIST latency of a view (a Table, as `kubectl get` asks for it, or metadata) through kache
and directly against a real kube-apiserver, side by side in one run: requests alternate
between the two targets, one at a time, so both see the same cluster and machine load.

    python3 loadtest/real/view_reads.py --kache http://127.0.0.1:PORT \
        --apiserver https://127.0.0.1:6443 --token-file ~/real-apiserver/admin.token \
        --path '/api/v1/pods?resourceVersion=0' -n 20

Prints, for each target, p50/p90/max seconds and the body size. --accept picks the view
(default: kubectl's Table Accept).
"""
import argparse
import realapi

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
p = argparse.ArgumentParser()
p.add_argument("--kache", required=True)
p.add_argument("--apiserver", required=True)
p.add_argument("--token-file", required=True)
p.add_argument("--path", required=True)
p.add_argument("--accept", default=TABLE)
p.add_argument("-n", type=int, default=20)
p.add_argument("--writer", action="store_true", help="PUT a ConfigMap every 0.2 s (moves the global RV, as leases do)")
a = p.parse_args()
token = realapi.token_file(a.token_file)


def call(base):
    code, secs, body = realapi.request(base, a.path, token, accept=a.accept)
    assert code == 200, f"GET {base}{a.path}: {code}"
    return secs, len(body)


if a.writer:
    realapi.move_rv(a.apiserver, token)
times = {"kache": [], "direct": []}
size = {}
for base in (a.kache, a.apiserver):
    call(base)  # warm: connections, and the cache of a kind kache has not loaded yet
for _ in range(a.n):
    for name, base in (("kache", a.kache), ("direct", a.apiserver)):
        t, n = call(base)
        times[name].append(t)
        size[name] = n
for name, ts in times.items():
    ts.sort()
    q = lambda f: ts[min(len(ts) - 1, int(len(ts) * f))]
    print(f"{name:6} {a.path} n={len(ts)} p50={q(0.5):.3f} p90={q(0.9):.3f} max={ts[-1]:.3f} bytes={size[name]}")
