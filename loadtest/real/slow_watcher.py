#!/usr/bin/env python3
"""A watcher that stops reading while its kind changes 50 times a second. kache (a
fresh process) in front of a real kube-apiserver; a raw watch of ConfigMaps in --namespace
through kache (a kind kache caches: the watch is served from memory) whose socket has a small
receive buffer and is never read; a second watch of the same that is read, for comparison;
and writers that patch --objects ConfigMaps round-robin, --rate times a second, each change
a fresh --payload-bytes value (directly against the apiserver). The writes start
--warmup-seconds before the stalled watcher (where RSS is taken as the baseline); then
--seconds of both. Samples kache's RSS (/proc/PID/status VmRSS) and its
/metrics every second.

    python3 loadtest/real/slow_watcher.py --kache-bin target/release/kache
    python3 loadtest/real/slow_watcher.py --kache-bin target/release/kache --no-watcher   # control

Prints when the stalled watcher was ended (kache_watchers_ended_slow_total, and the stalled
socket's data ending with the response's last chunk), whether the reading watcher saw every
change, and RSS at the baseline, peak and end. --no-watcher runs the same writes without the stalled watcher, so the growth that
is the cache window's (its last --cache-window-events changes, held by every cache) can be
told from the watcher's. 127.0.0.1 only; nothing is deleted.
"""
import argparse, json, random, socket, string, tempfile, threading, time
import requests, urllib3
import kacheproc, rawwatch, realapi

urllib3.disable_warnings()
p = argparse.ArgumentParser()
p.add_argument("--kache-bin", default="target/release/kache")
p.add_argument("--apiserver", default="https://127.0.0.1:6443")
p.add_argument("--real", default="~/real-apiserver")
p.add_argument("--namespace", default="kache-starve")
p.add_argument("--rate", type=int, default=50, help="changes per second")
p.add_argument("--seconds", type=int, default=60)
p.add_argument("--payload-bytes", type=int, default=4096)
p.add_argument("--objects", type=int, default=20)
p.add_argument("--rcvbuf", type=int, default=4096, help="SO_RCVBUF of the stalled watcher's socket")
p.add_argument("--preload", default="pods,configmaps")
p.add_argument("--no-watcher", action="store_true", help="control run: the writes only")
p.add_argument("--warmup-seconds", type=int, default=15, help="writes before the baseline RSS and the stalled watcher")
p.add_argument("--kache-arg", action="append", default=[])
a = p.parse_args()
REAL = realapi.home(a.real)
NS = a.namespace
TOKEN = realapi.token("admin", REAL)
H = {"Authorization": "Bearer " + TOKEN}


def api(method, path, body=None, ok=(200, 201, 409), ctype="application/json"):
    r = requests.request(method, a.apiserver + path, headers={**H, "Content-Type": ctype}, data=json.dumps(body) if body else None,
                         verify=False, timeout=30)
    assert r.status_code in ok, f"{method} {path}: {r.status_code} {r.text[:300]}"
    return r


def payload():
    return "".join(random.choices(string.ascii_letters + string.digits, k=a.payload_bytes))


def rss_kb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def metrics(adm):
    out = {}
    for line in requests.get(adm + "/metrics", timeout=10).text.splitlines():
        for name in ("kache_watchers_ended_slow_total", "kache_watches_open", "kache_cache_window_events", "kache_cache_bytes"):
            if line.startswith(name) and 'resource="configmaps"' in line:
                key = name + ("{" + line.split('encoding="')[1].split('"')[0] + "}" if 'encoding="' in line else "")
                out[key] = float(line.split()[-1])
    return out


def open_watch(base, rv, rcvbuf=None):
    path = f"/api/v1/namespaces/{NS}/configmaps?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"
    return rawwatch.open_watch(base, TOKEN, path, rcvbuf=rcvbuf)


def main():
    api("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
    names = [f"slow-{i}" for i in range(a.objects)]
    for n in names:
        api("POST", f"/api/v1/namespaces/{NS}/configmaps", {"metadata": {"name": n}, "data": {"v": ""}})
    work = tempfile.mkdtemp(prefix="kache-slow-")
    t = time.time()
    k, base, adm = kacheproc.start(a.kache_bin, REAL, work, ["--preload", a.preload, *a.kache_arg], context=None)
    print("kache:", " ".join(k.args), flush=True)
    print(f"kache ready after {time.time()-t:.1f}s", flush=True)
    try:
        run(k, base, adm, names)
    finally:
        k.terminate()
        k.wait()


def run(k, base, adm, names):
    rv = requests.get(f"{base}/api/v1/namespaces/{NS}/configmaps?resourceVersion=0", headers=H, verify=False).json()["metadata"]["resourceVersion"]
    seen = {"events": 0, "bytes": 0, "ended": None}
    reader = open_watch(base, rv)

    def read():
        buf = b""
        while True:
            try:
                data = reader.recv(65536)
            except OSError:
                data = b""
            if not data:
                seen["ended"] = time.time()
                return
            seen["bytes"] += len(data)
            buf += data
            end = buf.rfind(b"\n") + 1  # whole events only: one may span several reads
            seen["events"] += buf[:end].count(b'"type":"MODIFIED"')
            buf = buf[end:]

    threading.Thread(target=read, daemon=True).start()
    writes = {"ok": 0, "failed": 0}
    stop = threading.Event()

    def write(offset, step):
        s = requests.Session()
        i = offset
        while not stop.is_set():
            due = t0 + i / a.rate  # change i is due at its place in the whole run's schedule
            time.sleep(max(0, due - time.time()))
            r = s.patch(f"{a.apiserver}/api/v1/namespaces/{NS}/configmaps/{names[i % len(names)]}",
                        data=json.dumps({"data": {"v": payload()}}), headers={**H, "Content-Type": "application/merge-patch+json"},
                        verify=False, timeout=30)
            writes["ok" if r.status_code == 200 else "failed"] += 1
            i += step

    # Two writers, interleaved, so one slow PATCH does not hold back the rate. They run
    # --warmup-seconds before the baseline: jemalloc gives start-up's freed pages back to
    # the system only once the process allocates again, tens of MB that would otherwise
    # read as the run shrinking kache.
    t0 = time.time()
    ws = [threading.Thread(target=write, args=(j, 2), daemon=True) for j in range(2)]
    for w in ws:
        w.start()
    time.sleep(a.warmup_seconds)
    rss0, m0 = rss_kb(k.pid), metrics(adm)
    print(f"after {a.warmup_seconds}s of writes: rss={rss0/1024:.1f}MB metrics={m0}", flush=True)
    # From the current RV: it must be in the window (an older one gets 410 and ends at once).
    now_rv = requests.get(f"{base}/api/v1/namespaces/{NS}/configmaps?resourceVersion=0", headers=H, verify=False).json()["metadata"]["resourceVersion"]
    stalled = None if a.no_watcher else open_watch(base, now_rv, a.rcvbuf)
    t1 = time.time()
    peak, ended_at, samples = rss0, None, []
    while time.time() - t1 < a.seconds:
        time.sleep(max(0, 1 - (time.time() - t1) % 1))
        r, m = rss_kb(k.pid), metrics(adm)
        peak = max(peak, r)
        slow = m.get("kache_watchers_ended_slow_total", 0) - m0.get("kache_watchers_ended_slow_total", 0)
        if slow and ended_at is None:
            ended_at = time.time() - t1
        samples.append((round(time.time() - t1), r))
        print(f"t={time.time()-t1:4.0f}s rss={r/1024:7.1f}MB ({(r-rss0)/1024:+5.1f}) writes={writes} reader_events={seen['events']} "
              f"slow_ended={slow:g} watches_open={m.get('kache_watches_open{json}', -1):g} window={m.get('kache_cache_window_events{json}', -1):g}",
              flush=True)
    stop.set()
    for w in ws:
        w.join()
    r = rss_kb(k.pid)
    peak = max(peak, r)
    secs = time.time() - t0
    print(f"writes: {writes} in {secs:.0f}s ({writes['ok']/secs:.1f}/s), payload {a.payload_bytes} B")
    print(f"reading watcher: {seen['events']} MODIFIED events, {seen['bytes']/1e6:.1f} MB, "
          f"{'ended' if seen['ended'] else 'still open'}")
    if stalled is not None:
        # Read out what kache had queued for the stalled watcher: a chunked body's last
        # chunk (`0` CRLF CRLF) says kache ended the response (the connection stays open).
        stalled.settimeout(10)
        got, tail, end = 0, b"", "no end of the response within 10 s"
        try:
            while True:
                d = stalled.recv(65536)
                if not d:
                    end = "the connection closed"
                    break
                got += len(d)
                tail = (tail + d)[-16:]
                if tail.endswith(b"\r\n0\r\n\r\n"):
                    end = "the response's end (last chunk)"
                    break
        except socket.timeout:
            pass
        except OSError as e:
            end = f"{type(e).__name__}"
        print(f"stalled watcher: ended by kache (kache_watchers_ended_slow_total) at t={ended_at}s after it stopped reading; "
              f"then {got/1e6:.2f} MB left to read, then {end}")
    print(f"rss: at the stalled watcher's start {rss0/1024:.1f} MB, peak {peak/1024:.1f} MB ({(peak-rss0)/1024:+.1f}), "
          f"end {r/1024:.1f} MB ({(r-rss0)/1024:+.1f})")
    print("samples:", json.dumps(samples))


if __name__ == "__main__":
    main()
