#!/usr/bin/env python3
"""Hostile-tenant probes of issue #23 against `kache sim` + `kache serve` on 127.0.0.1.

Runs one kache binary (before or after a change) with a simulator of its own, then:
  timeout   a watch with timeoutSeconds=2^63-1, a LIST with timeout=abc
  pretty    six concurrent pretty LISTs of all pods: kache's peak RSS over its baseline
  watches   stalled watches of 1 MB ConfigMaps (clients that never read): RSS held
  deadline  does kache close a connection whose client stopped reading?
  perclient how many watches one client may open

  tools/tenant_probe.py BINARY LABEL [extra kache serve flags...]

Prints one JSON object. Bounded: a few hundred MB of cluster, a few minutes.
"""
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

BIN, LABEL, EXTRA = sys.argv[1], sys.argv[2], sys.argv[3:]
PODS, POD_BYTES = 6000, 8000
CMS, CM_BYTES = 40, 1 << 20


def wait_file(path, secs=300):
    end = time.time() + secs
    while time.time() < end:
        if os.path.exists(path) and open(path).read().strip():
            return open(path).read().strip()
        time.sleep(0.05)
    raise SystemExit(f"{path} never written")


def rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def threads(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def request(addr, method, path, body=None, headers=None, timeout=120):
    host, port = addr.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=timeout)
    h = {"Accept": "application/json"}
    h.update(headers or {})
    if body is not None:
        body = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def raw(addr, path, headers=""):
    """Send a GET and never read: a client that stopped reading."""
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: kache\r\nAccept: application/json\r\n{headers}\r\n".encode())
    return s


def peak_during(pid, work):
    peak = [rss_mb(pid)]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_mb(pid))
            time.sleep(0.02)

    t = threading.Thread(target=sample)
    t.start()
    work()
    done.set()
    t.join()
    return peak[0]


def main():
    tmp = tempfile.mkdtemp()
    out = {"label": LABEL}
    sim = subprocess.Popen(
        [BIN, "sim", "--listen", "127.0.0.1:0", "--addr-file", f"{tmp}/sim.addr", "--kubeconfig-out", f"{tmp}/sim.kubeconfig",
         "--pods", str(PODS), "--pod-size", str(POD_BYTES), "--lease-churn-per-sec", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kache = None
    try:
        sim_addr = wait_file(f"{tmp}/sim.addr")
        wait_file(f"{tmp}/sim.kubeconfig")
        for i in range(CMS):
            st, _ = request(sim_addr, "POST", "/api/v1/namespaces/default/configmaps",
                            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"big-{i:03}"},
                             "data": {"k": "x" * CM_BYTES}})
            assert st == 201, st
        kache = subprocess.Popen(
            [BIN, "serve", "--upstream-kubeconfig", f"{tmp}/sim.kubeconfig", "--insecure-http", "--listen", "127.0.0.1:0",
             "--addr-file", f"{tmp}/kache.addr", "--allow-anonymous", "--preload", "pods,configmaps",
             "--admin-listen", "127.0.0.1:0", "--admin-addr-file", f"{tmp}/admin.addr",
             "--preload-encodings", "json"] + EXTRA,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        addr = wait_file(f"{tmp}/kache.addr")
        admin = wait_file(f"{tmp}/admin.addr")
        # Ready: the preloaded caches have synced (reads are answered from memory).
        end = time.time() + 300
        while time.time() < end:
            if request(admin, "GET", "/readyz")[0] == 200:
                break
            time.sleep(0.2)
        time.sleep(2)
        pid = kache.pid
        out["rss_baseline_mb"] = round(rss_mb(pid))

        # timeout
        try:
            st, body = request(addr, "GET", "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=9223372036854775807",
                               timeout=20)
            out["watch_timeout_max"] = f"HTTP {st}, {len(body)} bytes"
        except Exception as e:  # noqa: BLE001
            out["watch_timeout_max"] = f"no response: {type(e).__name__}: {e}"
        st, body = request(addr, "GET", "/api/v1/pods?limit=1&timeout=abc")
        out["list_timeout_abc"] = f"HTTP {st}"

        # pretty
        base = rss_mb(pid)

        def pretty():
            ts = [threading.Thread(target=request, args=(addr, "GET", "/api/v1/pods?resourceVersion=0&pretty=true")) for _ in range(6)]
            [t.start() for t in ts]
            [t.join() for t in ts]

        out["pretty_x6_peak_over_baseline_mb"] = round(peak_during(pid, pretty) - base)

        # stalled watches
        time.sleep(1)
        base = rss_mb(pid)
        held = [raw(addr, "/api/v1/configmaps?watch=1&resourceVersion=0") for _ in range(8)]
        time.sleep(5)
        out["stalled_watches_x8_rss_held_mb"] = round(rss_mb(pid) - base)
        for s in held:
            s.close()

        # deadline: a client that stops reading a cached LIST; 15 s later it reads again
        time.sleep(1)
        s = raw(addr, "/api/v1/pods?resourceVersion=0")
        time.sleep(15)
        s.settimeout(20)
        got, closed = 0, False
        # At most 60 s of reading: through a 4 KB receive buffer the rest of a 48 MB list can
        # crawl for many minutes (zero-window probes), while kache keeps a reader that takes
        # bytes.
        until = time.time() + 60
        try:
            while time.time() < until:
                chunk = s.recv(1 << 20)
                if not chunk:
                    closed = True
                    break
                got += len(chunk)
        except (ConnectionResetError, BrokenPipeError):
            closed = True
        except socket.timeout:
            pass
        s.close()
        out["stalled_list_reader_after_15s"] = f"{'closed by kache' if closed else 'still open'} after {got} bytes"

        # watches per client
        opened = []
        codes = []
        for _ in range(8):
            host, port = addr.rsplit(":", 1)
            c = http.client.HTTPConnection(host, int(port), timeout=20)
            c.request("GET", "/api/v1/namespaces/default/pods?watch=1", headers={"Accept": "application/json"})
            r = c.getresponse()
            codes.append(r.status)
            opened.append(c)
        out["watches_one_client_x8"] = codes
        for c in opened:
            c.close()
        out["rss_end_mb"] = round(rss_mb(pid))
    finally:
        for p in (kache, sim):
            if p:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
    print(json.dumps(out))


main()
