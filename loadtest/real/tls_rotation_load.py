#!/usr/bin/env python3
"""Certificate rotation under load: WORKERS threads GET PATH from a TLS kache, each request
on a new TLS connection (so every request makes a handshake and sees the certificate served
at that moment), for DURATION seconds; at each of ROTATE_AT seconds the serving certificate
and key files are replaced (renamed into place) by the next pair given. Prints, per
certificate served (its SHA-256 fingerprint), how many requests got which status, and every failure (a refused
handshake, a reset, a non-200). Exit status 1 if any request failed.

    loadtest/real/tls_rotation_load.py --addr 127.0.0.1:6444 --ca ca.crt --token-file admin.token \
        --cert tls.crt --key tls.key --next chain2.crt,leaf2.key --next chain3.crt,leaf3.key \
        --duration 30 --workers 8 --path '/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-0001&resourceVersion=0'
"""
import argparse
import collections
import hashlib
import http.client
import os
import shutil
import ssl
import sys
import threading
import time

p = argparse.ArgumentParser()
p.add_argument("--addr", required=True)
p.add_argument("--ca", required=True)
p.add_argument("--token-file", required=True)
p.add_argument("--cert", required=True, help="the serving certificate file kache reads")
p.add_argument("--key", required=True, help="the serving key file kache reads")
p.add_argument("--next", action="append", default=[], help="CERT,KEY to rotate to, in order")
p.add_argument("--duration", type=float, default=30)
p.add_argument("--workers", type=int, default=8)
p.add_argument("--path", default="/api/v1/namespaces/default/pods?resourceVersion=0")
a = p.parse_args()

host, port = a.addr.rsplit(":", 1)
token = open(a.token_file).read().strip()
ctx = ssl.create_default_context(cafile=a.ca)
counts = collections.Counter()
failures = []
lock = threading.Lock()
stop = time.monotonic() + a.duration


def fingerprint(sock):
    """The served certificate's SHA-256, shortened: which certificate answered."""
    return hashlib.sha256(sock.getpeercert(binary_form=True)).hexdigest()[:12]


def worker():
    while time.monotonic() < stop:
        t = time.strftime("%H:%M:%S")
        try:
            c = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=30)
            c.connect()
            cert = fingerprint(c.sock)
            c.request("GET", a.path, headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
            r = c.getresponse()
            body = r.read()
            c.close()
            with lock:
                counts[(cert, r.status)] += 1
                if r.status != 200:
                    failures.append(f"{t} status {r.status}: {body[:200]!r}")
        except Exception as e:  # a refused handshake, a reset: a failed request
            with lock:
                counts[("-", "error")] += 1
                failures.append(f"{t} {type(e).__name__}: {e}")


def rotate(i, cert, key):
    # Key first, then certificate, each renamed into place (atomic per file), as a Secret
    # volume's update or cert-manager's does.
    for src, dst in ((key, a.key), (cert, a.cert)):
        tmp = dst + ".new"
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    print(f"{time.strftime('%H:%M:%S')} rotated to {cert} ({i + 1} of {len(a.next)})", flush=True)


threads = [threading.Thread(target=worker) for _ in range(a.workers)]
start = time.monotonic()
print(f"{time.strftime('%H:%M:%S')} {a.workers} workers, a new TLS connection per request, {a.duration:.0f} s", flush=True)
for t in threads:
    t.start()
for i, pair in enumerate(a.next):
    cert, key = pair.split(",")
    at = start + a.duration * (i + 1) / (len(a.next) + 1)
    time.sleep(max(0, at - time.monotonic()))
    rotate(i, cert, key)
for t in threads:
    t.join()
total = sum(counts.values())
print(f"{time.strftime('%H:%M:%S')} done: {total} requests in {time.monotonic() - start:.1f} s")
for (cert, status), n in sorted(counts.items(), key=lambda kv: str(kv[0])):
    print(f"  certificate {cert}: status {status}: {n}")
print(f"failed requests: {len(failures)}")
for f in failures[:20]:
    print("  " + f)
sys.exit(1 if failures else 0)
