#!/usr/bin/env python3
"""Reads at a given resourceVersion through kache and directly against a real kube-apiserver,
alternating, in one run: a namespace's pods and all pods (limit 500) with
`resourceVersionMatch=NotOlderThan`, and one pod's GET, each at the apiserver's current RV
(read just before, so the listed kind is usually behind it: the cluster's leases move it),
then the same three at an RV 100,000 ahead (the apiserver waits 3 s and answers 504).

    python3 loadtest/real/rv_reads.py --kache https://127.0.0.1:PORT \
        --apiserver https://127.0.0.1:6443 --token-file ~/real-apiserver/admin.token -n 20

Rounds are 2 s apart. Prints, per read and target, the statuses and p50/p90/max seconds.
"""
import argparse, json, time
import realapi

p = argparse.ArgumentParser()
p.add_argument("--kache", required=True)
p.add_argument("--apiserver", required=True)
p.add_argument("--token-file", required=True)
p.add_argument("-n", type=int, default=20, help="rounds at the current RV")
p.add_argument("--future-rounds", type=int, default=3)
a = p.parse_args()
token = realapi.token_file(a.token_file)


def get(base, path):
    return realapi.request(base, path, token)


_, _, body = get(a.apiserver, "/api/v1/pods?limit=1")
md = json.loads(body)["items"][0]["metadata"]
ns, name = md["namespace"], md["name"]


def reads(rv):
    return {
        "ns pods NotOlderThan": f"/api/v1/namespaces/{ns}/pods?resourceVersion={rv}&resourceVersionMatch=NotOlderThan",
        "pod GET at RV": f"/api/v1/namespaces/{ns}/pods/{name}?resourceVersion={rv}",
        "all pods NotOlderThan limit 500": f"/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=NotOlderThan&limit=500",
    }


results = {}
targets = [("kache", a.kache), ("direct", a.apiserver)]
for phase, rounds, ahead in (("current", a.n, 0), ("future", a.future_rounds, 100000)):
    for i in range(rounds):
        _, _, body = get(a.apiserver, "/api/v1/namespaces?limit=1")
        rv = int(json.loads(body)["metadata"]["resourceVersion"]) + ahead
        order = targets if i % 2 == 0 else targets[::-1]
        for label, path in reads(rv).items():
            for t, base in order:
                code, secs, _ = get(base, path)
                results.setdefault((phase, label, t), []).append((code, secs))
        time.sleep(2)


def q(xs, f):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(f * len(xs)))]


print(f"{'RV':8} {'read':34} {'target':7} {'statuses':14} {'p50 s':>7} {'p90 s':>7} {'max s':>7}")
for (phase, label, t), rs in results.items():
    codes = {}
    for c, _ in rs:
        codes[c] = codes.get(c, 0) + 1
    secs = [s for _, s in rs]
    cs = ",".join(f"{c}x{n}" for c, n in sorted(codes.items()))
    print(f"{phase:8} {label:34} {t:7} {cs:14} {q(secs, .5):7.3f} {q(secs, .9):7.3f} {max(secs):7.3f}")
