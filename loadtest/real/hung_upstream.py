#!/usr/bin/env python3
"""Cached reads through kache while its upstream apiserver hangs: the apiserver process is
stopped (SIGSTOP) for --stop-seconds, then continued. Readers GET one pod at
resourceVersion=0 through kache every --interval-ms, each with its own token (so each
token's authentication and authorization decisions, cached for 10 s by default, expire and
are renewed while the apiserver is stopped). Prints statuses and latency for before, during
and after the stop.

    python3 loadtest/real/hung_upstream.py --kache https://127.0.0.1:PORT \
        --apiserver-pid $(pgrep -f kube-apiserver) \
        --token-file ~/real-apiserver/admin.token --token-file ~/real-apiserver/reader.token

The apiserver is always continued, also on an error or Ctrl-C.
"""
import argparse, json, os, signal, threading, time
import realapi

p = argparse.ArgumentParser()
p.add_argument("--kache", required=True)
p.add_argument("--apiserver-pid", type=int, required=True)
p.add_argument("--token-file", action="append", required=True)
p.add_argument("--stop-seconds", type=float, default=30)
p.add_argument("--before-seconds", type=float, default=10)
p.add_argument("--after-seconds", type=float, default=10)
p.add_argument("--interval-ms", type=float, default=50)
a = p.parse_args()
tokens = [realapi.token_file(f) for f in a.token_file]


def get(token, path, timeout=60):
    t = time.time()
    try:
        code, secs, _ = realapi.request(a.kache, path, token, timeout=timeout)
    except Exception as e:
        code, secs = type(e).__name__, time.time() - t
    return code, secs


_, _ = get(tokens[0], "/api/v1/pods?limit=1")
code, _, body = realapi.request(a.kache, "/api/v1/pods?limit=1&resourceVersion=0", tokens[0], accept=None)
assert code == 200, f"a pod through kache: {code}"
md = json.loads(body)["items"][0]["metadata"]
path = f"/api/v1/namespaces/{md['namespace']}/pods/{md['name']}?resourceVersion=0"

phase = ["before"]
results = {}
stop = threading.Event()


def reader(token):
    while not stop.is_set():
        ph = phase[0]
        code, secs = get(token, path)
        results.setdefault((ph, code), []).append(secs)
        time.sleep(a.interval_ms / 1000)


threads = [threading.Thread(target=reader, args=(t,), daemon=True) for t in tokens]
for t in threads:
    t.start()
try:
    time.sleep(a.before_seconds)
    os.kill(a.apiserver_pid, signal.SIGSTOP)
    phase[0] = "stopped"
    time.sleep(a.stop_seconds)
finally:
    os.kill(a.apiserver_pid, signal.SIGCONT)
phase[0] = "after"
time.sleep(a.after_seconds)
stop.set()
for t in threads:
    t.join()


def q(xs, f):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(f * len(xs)))]


print(f"{'phase':8} {'status':>8} {'count':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
for (ph, code), xs in sorted(results.items(), key=lambda kv: (["before", "stopped", "after"].index(kv[0][0]), str(kv[0][1]))):
    print(f"{ph:8} {str(code):>8} {len(xs):6} {q(xs, .5) * 1000:8.1f} {q(xs, .99) * 1000:8.1f} {max(xs) * 1000:8.1f}")
