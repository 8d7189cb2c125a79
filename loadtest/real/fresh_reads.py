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
import argparse, json, os, ssl, threading, time, urllib.error, urllib.request

p = argparse.ArgumentParser()
p.add_argument("--kache", required=True)
p.add_argument("--apiserver", required=True)
p.add_argument("--token-file", required=True)
p.add_argument("--path", default="/api/v1/nodes")
p.add_argument("-n", type=int, default=100)
p.add_argument("--namespace", default="default", help="where the writer's ConfigMap lives")
a = p.parse_args()
token = open(os.path.expanduser(a.token_file)).read().strip()
ctx = ssl._create_unverified_context()


def call(base, path, method="GET", body=None):
    h = {"Authorization": "Bearer " + token, "Accept": "application/json"}
    if body is not None:
        h["Content-Type"] = "application/json"
    r = urllib.request.Request(base + path, data=body, method=method, headers=h)
    t = time.time()
    urllib.request.urlopen(r, context=ctx).read()
    return time.time() - t


stop = False


def writer():
    i = 0
    cms = f"/api/v1/namespaces/{a.namespace}/configmaps"
    while not stop:
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kache-rv-mover"}, "data": {"i": str(i)}}
        body = json.dumps(cm).encode()
        try:
            call(a.apiserver, cms + "/kache-rv-mover", "PUT", body)
        except urllib.error.HTTPError:
            try:
                call(a.apiserver, cms, "POST", body)
            except urllib.error.HTTPError:
                pass
        i += 1
        time.sleep(0.2)


threading.Thread(target=writer, daemon=True).start()
for name, base in (("kache", a.kache), ("direct", a.apiserver)):
    ts = []
    for _ in range(a.n):
        time.sleep(0.3)
        ts.append(call(base, a.path))
    ts.sort()
    q = lambda f: ts[min(len(ts) - 1, int(len(ts) * f))]
    print(f"{name:6} {a.path} n={len(ts)} p50={q(0.5):.3f} p90={q(0.9):.3f} p99={q(0.99):.3f} max={ts[-1]:.3f}")
stop = True
