#!/usr/bin/env python3
"""Informers across an upstream pause and restart, through kache and directly.

kache runs in front of a SECOND kube-apiserver (port $PORT, default 6444) on the etcd of
../shared/real-apiserver, started as loadtest/real/fault_run.py does. Four client-go shared
informers of all pods (loadtest/clientgo, `informer-sync -follow`) run meanwhile: LIST mode
and WatchList, each through kache and directly against that second apiserver. A writer
patches pods at $RATE/s (default 10) through the MAIN apiserver (6443, same etcd), so writes
go on while the second one is away, as with several apiservers behind a load balancer.

Timeline: informers sync; 10 s; SIGSTOP for $PAUSE s (default 30); SIGCONT; 10 s; SIGKILL for
$KILL s (default 30); start again; wait for its /readyz; 30 s; writes stop; informers take
their final digest.
($AFTER s, default 30, is how long writes go on after the restart.) Meanwhile kache's /readyz?verbose is read every 250 ms: the time its
`[-]cache` lines clear after the upstream's /readyz is when its caches are back.

Printed: per informer the events its handler got after its initial sync (adds, updates, of
which with an unchanged resourceVersion, i.e. a relist, deletes) against the writes made, and
whether its store's digest equals the apiserver's state after the writes.

  REAL_APISERVER=~/real-apiserver KACHE_BIN=target/release/kache python3 loadtest/real/restart_informers.py
"""
import json, os, re, signal, subprocess, sys, threading, time
import requests, urllib3

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fault_run as rf  # noqa: E402  (its apiserver command, start and readiness, and its kache)
import realapi  # noqa: E402

urllib3.disable_warnings()
PAUSE = int(os.environ.get("PAUSE", "30"))
KILL = int(os.environ.get("KILL", "30"))
RATE = float(os.environ.get("RATE", "10"))
AFTER = int(os.environ.get("AFTER", "30"))
A, WORK, H = rf.A, rf.WORK, rf.H
SYNC = f"{A}/bin/informer-sync"
MAIN = realapi.MAIN
STOPPED = f"{WORK}/writes-stopped"
t0 = time.time()
stop = threading.Event()
writes = [0]
ready_log = []  # (t, number of [-]cache lines, upstream line)


def writer(targets):
    s = requests.Session()
    i = 0
    while not stop.is_set():
        ns, name = targets[i % len(targets)]
        i += 1
        try:
            r = s.patch(f"{MAIN}/api/v1/namespaces/{ns}/pods/{name}", verify=False, timeout=10,
                        headers={**H, "Content-Type": "application/merge-patch+json"},
                        data=json.dumps({"metadata": {"labels": {"kache-restart-run": str(i)}}}))
            if r.status_code == 200:
                writes[0] += 1
        except requests.RequestException:
            pass
        time.sleep(1 / RATE)


def watch_readyz(adm):
    s = requests.Session()
    while not stop.is_set():
        try:
            text = s.get(adm + "/readyz?verbose", timeout=5).text
            bad = sum(1 for l in text.splitlines() if l.startswith("[-]cache"))
            up = next((l for l in text.splitlines() if l[3:].startswith("upstream")), "")
            ready_log.append((time.time() - t0, bad, up[:3]))
        except requests.RequestException:
            pass
        time.sleep(0.25)


def informer(name, server, watchlist, kubeconfig):
    args = [SYNC, "-kubeconfig", kubeconfig, "-context", "admin", f"-watchlist={str(watchlist).lower()}",
            "-follow", "15m", "-digest-at", STOPPED]
    if server:
        args += ["-server", server]
    out = open(f"{WORK}/informer-{name}.log", "w")
    return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)


def main():
    if os.path.exists(STOPPED):
        os.remove(STOPPED)
    if not rf.alive(f"{WORK}/apiserver2.pid"):
        rf.start_apiserver()
        rf.wait_ready()
    k, K, ADM = rf.start_kache()
    print(f"kache ready at {time.time()-t0:.1f}s", flush=True)
    pods = requests.get(f"{MAIN}/api/v1/namespaces/ns-001/pods?limit=50", headers=H, verify=False).json()["items"]
    targets = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods]
    procs = {
        "kache-list": informer("kache-list", K, False, f"{WORK}/kubeconfig"),
        "kache-watchlist": informer("kache-watchlist", K, True, f"{WORK}/kubeconfig"),
        "direct-list": informer("direct-list", "", False, f"{WORK}/kubeconfig"),
        "direct-watchlist": informer("direct-watchlist", "", True, f"{WORK}/kubeconfig"),
    }
    for name in procs:
        while "following" not in open(f"{WORK}/informer-{name}.log").read():
            if procs[name].poll() is not None:
                sys.exit(f"{name} ended: {open(f'{WORK}/informer-{name}.log').read()}")
            time.sleep(0.5)
    print(f"informers synced at {time.time()-t0:.1f}s", flush=True)
    threading.Thread(target=writer, args=(targets,), daemon=True).start()
    threading.Thread(target=watch_readyz, args=(ADM,), daemon=True).start()
    pid = int(open(f"{WORK}/apiserver2.pid").read())
    time.sleep(10)
    os.kill(pid, signal.SIGSTOP)
    print(f"SIGSTOP at {time.time()-t0:.1f}s", flush=True)
    time.sleep(PAUSE)
    os.kill(pid, signal.SIGCONT)
    print(f"SIGCONT at {time.time()-t0:.1f}s", flush=True)
    time.sleep(10)
    os.kill(pid, signal.SIGKILL)
    print(f"SIGKILL at {time.time()-t0:.1f}s", flush=True)
    time.sleep(KILL)
    rf.start_apiserver()
    print(f"restarted at {time.time()-t0:.1f}s", flush=True)
    rf.wait_ready()
    tready = time.time() - t0
    print(f"upstream /readyz ok at {tready:.1f}s", flush=True)
    time.sleep(AFTER)
    stop.set()
    print(f"writes stopped at {time.time()-t0:.1f}s: {writes[0]} pod patches", flush=True)
    time.sleep(2)
    open(STOPPED, "w").write("")
    for p in procs.values():
        p.wait()
    ref = subprocess.run([SYNC, "-kubeconfig", f"{A}/kubeconfig", "-context", "admin", "-watchlist=false"],
                         capture_output=True, text=True).stdout
    want = re.search(r"digest=(\w+)", ref).group(1)
    k.terminate()
    k.wait()
    # When kache's caches were back: the first time after the upstream's /readyz that no
    # [-]cache line was left.
    back = next((t for t, bad, _ in ready_log if t >= tready and bad == 0), None)
    print(f"kache caches back {back - tready:.1f}s after the upstream's /readyz" if back else "kache caches not back")
    print(f"reference digest (direct LIST of the main apiserver after the writes): {want}")
    print("| informer | adds | updates | of which same RV (relist) | deletes | writes | store equals the apiserver's |")
    print("|---|---|---|---|---|---|---|")
    for name in procs:
        log = open(f"{WORK}/informer-{name}.log").read()
        ev = re.search(r"adds=(\d+) updates=(\d+) \(same RV: (\d+)\) deletes=(\d+)", log)
        got = re.search(r"digest=(\w+)", log)
        if not ev or not got:
            print(f"| {name} | ? | ? | ? | ? | {writes[0]} | {log.strip()[-200:]} |")
            continue
        print(f"| {name} | {ev[1]} | {ev[2]} | {ev[3]} | {ev[4]} | {writes[0]} | {got[1] == want} |")


if __name__ == "__main__":
    main()
