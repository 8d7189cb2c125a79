#!/usr/bin/env python3
"""Label selectors of thousands of terms, through kache and directly, alternating: a LIST of
one namespace's pods (600 in the real apiserver's populated cluster) with 5,000 `k!=vI` terms,
and with 8,000 `!kI` terms (`!`, `=` and `,` sent unescaped, so the query stays within kache's
default `--max-uri-bytes`). Prints each side's median of --rounds seconds.

    python3 loadtest/real/selector_terms.py --kache https://127.0.0.1:PORT \
        --apiserver https://127.0.0.1:6443 --token-file ~/real-apiserver/admin.token
"""
import argparse, statistics, urllib.parse
import realapi

p = argparse.ArgumentParser()
p.add_argument("--kache", required=True)
p.add_argument("--apiserver", required=True)
p.add_argument("--token-file", required=True)
p.add_argument("--namespace", default="ns-000")
p.add_argument("--rounds", type=int, default=5)
a = p.parse_args()
token = realapi.token_file(a.token_file)


def get(base, path):
    code, secs, _ = realapi.request(base, path, token)
    return code, secs


cases = {
    "5,000 k!=vI terms": ",".join(f"k!=v{i}" for i in range(5000)),
    "8,000 !kI terms": ",".join(f"!k{i}" for i in range(8000)),
}
print(f"{'selector':22} {'kache s':>8} {'direct s':>9} {'ratio':>6}  statuses")
for label, sel in cases.items():
    path = f"/api/v1/namespaces/{a.namespace}/pods?labelSelector={urllib.parse.quote(sel, safe='!=,')}"
    times = {"kache": [], "direct": []}
    codes = set()
    for i in range(a.rounds):
        order = [("kache", a.kache), ("direct", a.apiserver)]
        for name, base in (order if i % 2 == 0 else order[::-1]):
            code, secs = get(base, path)
            codes.add((name, code))
            times[name].append(secs)
    k, d = statistics.median(times["kache"]), statistics.median(times["direct"])
    print(f"{label:22} {k:8.3f} {d:9.3f} {k / d:6.2f}  {sorted(codes)}")
