#!/usr/bin/env python3
"""How long a real kube-apiserver takes to answer /readyz while it is busy.

Runs N loops of full LISTs (consistent, the costliest read) against the apiserver and times
a /readyz every --every seconds meanwhile; prints the percentiles. kache's SUSPECT_AFTER
(src/upstream/health.rs) must sit well above the worst of these.

  python3 loadtest/real/readyz_under_load.py --apiserver https://127.0.0.1:6443 \
      --token-file ~/real-apiserver/admin.token --path /api/v1/pods --loads 2 --seconds 60
"""
import argparse, threading, time
import realapi

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--apiserver", required=True)
    ap.add_argument("--token-file", required=True)
    ap.add_argument("--path", default="/api/v1/pods")
    ap.add_argument("--loads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--every", type=float, default=0.1)
    a = ap.parse_args()
    token = realapi.token_file(a.token_file)
    def get(path, timeout=60):
        code, _, body = realapi.request(a.apiserver, path, token, accept=None, timeout=timeout)
        assert code == 200, f"GET {path}: {code}"
        return body
    end = time.monotonic() + a.seconds
    lists = [0]
    def load():
        while time.monotonic() < end:
            get(a.path)
            lists[0] += 1
    threads = [threading.Thread(target=load, daemon=True) for _ in range(a.loads)]
    for t in threads:
        t.start()
    took = []
    while time.monotonic() < end:
        t0 = time.monotonic()
        get("/readyz", timeout=10)
        took.append(time.monotonic() - t0)
        time.sleep(max(0.0, a.every - (time.monotonic() - t0)))
    for t in threads:
        t.join()
    took.sort()
    pct = lambda p: took[min(len(took) - 1, int(p * len(took)))] * 1000
    print(f"{a.loads} loops of GET {a.path}: {lists[0]} LISTs in {a.seconds:.0f} s; /readyz n={len(took)} "
          f"p50 {pct(0.5):.1f} ms, p99 {pct(0.99):.1f} ms, max {took[-1]*1000:.1f} ms")

if __name__ == "__main__":
    main()
