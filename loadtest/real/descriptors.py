#!/usr/bin/env python3
"""kache out of file descriptors: a kache started with a low open-file limit (--nofile, 256)
in front of the real apiserver; --silent TCP connections (300) are opened and held without a
byte, then an honest client's request is timed while they are held (2 s in, and 12 s in: past
kache's preface timeout, which closes the connections it took), and again after they are
closed. Reports kache's CPU seconds while the connections were held, its log lines about
accepting, and kache_connections_open / kache_accept_errors_total / the limit hits.

    python3 loadtest/real/descriptors.py --kache-bin target/release/kache
"""
import argparse, os, re, socket, subprocess, tempfile, time, urllib.request
import realapi

p = argparse.ArgumentParser()
p.add_argument("--kache-bin", required=True)
p.add_argument("--real", default="~/real-apiserver")
p.add_argument("--nofile", type=int, default=256)
p.add_argument("--silent", type=int, default=300)
p.add_argument("--hold-seconds", type=float, default=20)
a = p.parse_args()
real = realapi.home(a.real)
d = tempfile.mkdtemp()
log = open(os.path.join(d, "kache.log"), "w")
cmd = f"ulimit -n {a.nofile}; exec {a.kache_bin} serve --upstream-kubeconfig {real}/kubeconfig --upstream-context admin " \
      f"--listen 127.0.0.1:0 --addr-file {d}/addr --admin-listen 127.0.0.1:0 --admin-addr-file {d}/admin " \
      f"--preload namespaces"
proc = subprocess.Popen(["bash", "-c", cmd], stdout=log, stderr=log)
token = realapi.token("admin", real)
while True:
    try:
        admin = open(os.path.join(d, "admin")).read().strip()
        urllib.request.urlopen(f"http://{admin}/readyz").read()
        break
    except Exception:
        time.sleep(0.3)
addr = open(os.path.join(d, "addr")).read().strip()


def honest():
    t = time.time()
    try:
        code = realapi.request(f"https://{addr}", "/api/v1/namespaces?resourceVersion=0", token, accept=None, timeout=30)[0]
    except Exception as e:
        code = type(e).__name__ + ": " + str(e)[:80]
    return code, time.time() - t


def cpu():
    f = open(f"/proc/{proc.pid}/stat").read().split(")")[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def metrics():
    text = urllib.request.urlopen(f"http://{admin}/metrics").read().decode()
    keep = [l for l in text.splitlines() if re.match(r"kache_(connections_open|accept_errors_total|limit_hits_total\{limit=\"max-connections)", l)]
    return keep


print("baseline honest GET:", honest())
socks = []
for _ in range(a.silent):
    s = socket.socket()
    s.connect(tuple(addr.rsplit(":", 1)[0:1]) + (int(addr.rsplit(":", 1)[1]),))
    socks.append(s)
c0 = cpu()
t0 = time.time()
time.sleep(2)
print(f"{a.silent} silent connections held; honest GET meanwhile:", honest())
time.sleep(max(0, 12 - (time.time() - t0)))
print("12 s in (past kache's 10 s preface timeout), honest GET:", honest())
time.sleep(max(0, a.hold_seconds - (time.time() - t0)))
print(f"kache CPU while held: {cpu() - c0:.2f} s in {time.time() - t0:.1f} s")
print("metrics:", *metrics(), sep="\n  ")
for s in socks:
    s.close()
time.sleep(1)
print("after they closed, honest GET:", honest())
proc.terminate()
proc.wait()
log.close()
lines = open(os.path.join(d, "kache.log")).read().splitlines()
print("log lines:", len(lines), "of which about accepting:", sum("accept" in l for l in lines))
for l in lines:
    if "accept" in l or "connections" in l:
        print("  ", re.sub(r"\x1b\[[0-9;]*m", "", l)[:200])
