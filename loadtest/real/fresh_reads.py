#!/usr/bin/env python3
"""Consistent-read latency through kache and directly against a real kube-apiserver, side
by side in one run, while a ConfigMap writer moves the global resourceVersion (as a real
cluster's leases do) and the listed kind stays quiet.

    python3 loadtest/real/fresh_reads.py --kache http://127.0.0.1:PORT \
        --apiserver https://127.0.0.1:6443 --token-file ~/real-apiserver/admin.token \
        --path /api/v1/nodes -n 100

Each request is a consistent LIST (no resourceVersion); requests are 0.3 s apart, one at a
time. Prints p50/p90/p99/max seconds for each target.
"""
import argparse, threading, time
import realapi

p = argparse.ArgumentParser()
p.add_argument("--kache", required=True)
p.add_argument("--apiserver", required=True)
p.add_argument("--token-file", required=True)
p.add_argument("--path", default="/api/v1/nodes")
p.add_argument("-n", type=int, default=100)
p.add_argument("--namespace", default="default", help="where the writer's ConfigMap lives")
a = p.parse_args()
token = realapi.token_file(a.token_file)


def call(base, path):
    code, secs, _ = realapi.request(base, path, token)
    assert code == 200, f"GET {base}{path}: {code}"
    return secs


stop = threading.Event()
realapi.move_rv(a.apiserver, token, a.namespace, stop=stop)
for name, base in (("kache", a.kache), ("direct", a.apiserver)):
    ts = []
    for _ in range(a.n):
        time.sleep(0.3)
        ts.append(call(base, a.path))
    ts.sort()
    q = lambda f: ts[min(len(ts) - 1, int(len(ts) * f))]
    print(f"{name:6} {a.path} n={len(ts)} p50={q(0.5):.3f} p90={q(0.9):.3f} p99={q(0.99):.3f} max={ts[-1]:.3f}")
stop.set()
