#!/usr/bin/env python3
"""Fault run against a real kube-apiserver: kache in front of a SECOND kube-apiserver of its own
(port $PORT, default 6444) on the etcd of ../shared/real-apiserver (never the main one on 6443).
Starts that apiserver if $WORK/apiserver2.pid names no live process, pauses it (SIGSTOP) for
$PAUSE s, resumes it, kills it (SIGKILL) for $KILL s and starts it again, while probing kache:
cached RV=0 GET and LIST every 200 ms, a write and a consistent GET every second, /readyz?verbose
every 500 ms and /metrics every second. Writes $WORK/faultrun.json; summarize with
`python3 loadtest/real/fault_run.py --summary`. Stop the second apiserver afterwards:
`kill $(cat $WORK/apiserver2.pid)`.

  REAL_APISERVER=~/real-apiserver KACHE_BIN=target/debug/kache python3 loadtest/real/fault_run.py
"""
import collections, json, os, signal, subprocess, sys, threading, time
import requests, urllib3
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import realapi  # noqa: E402
urllib3.disable_warnings()

PAUSE = int(os.environ.get("PAUSE", "60")); KILL = int(os.environ.get("KILL", "60"))
PORT = os.environ.get("PORT", "6444")
assert PORT != "6443", "never the main apiserver"
A = realapi.home()
WORK = os.environ.get("WORK", "/tmp/kache-faultrun")
os.makedirs(f"{WORK}/pki", exist_ok=True)
TOK = realapi.token("admin", A)
H = {"Authorization": f"Bearer {TOK}"}
KACHE = os.path.abspath(os.environ.get("KACHE_BIN", "target/debug/kache"))
APISERVER_CMD = [f"{A}/bin/kube-apiserver", "--etcd-servers=http://127.0.0.1:2379", "--bind-address=127.0.0.1",
    f"--secure-port={PORT}", "--advertise-address=127.0.0.1", f"--cert-dir={WORK}/pki",
    f"--service-account-key-file={A}/pki/sa.pub", f"--service-account-signing-key-file={A}/pki/sa.key",
    "--service-account-issuer=https://kubernetes.default.svc.cluster.local", "--authorization-mode=RBAC",
    f"--token-auth-file={A}/auth/tokens.csv", "--service-cluster-ip-range=10.96.0.0/16",
    "--endpoint-reconciler-type=none", "--allow-privileged=true", "--v=1"]

events = []  # (t, phase, probe, code, seconds, note)
phase = "steady"
t0 = time.time()
stop = False
lock = threading.Lock()

def log(probe, code, secs, note=""):
    with lock:
        events.append((time.time() - t0, phase, probe, code, secs, note))

def probe_loop(name, fn, every):
    s = requests.Session()
    while not stop:
        start = time.time()
        try:
            code, note = fn(s)
        except Exception as e:
            code, note = -1, type(e).__name__
        log(name, code, time.time() - start, note)
        time.sleep(max(0, every - (time.time() - start)))

def alive(path):
    try:
        os.kill(int(open(path).read()), 0); return True
    except Exception:
        return False

def start_apiserver():
    alog = open(f"{WORK}/apiserver2.log", "a")
    p = subprocess.Popen(APISERVER_CMD, stdout=alog, stderr=alog, start_new_session=True)
    open(f"{WORK}/apiserver2.pid", "w").write(str(p.pid))
    return p.pid

def wait_ready():
    while True:
        try:
            if requests.get(f"https://127.0.0.1:{PORT}/readyz", headers=H, verify=False, timeout=2).text == "ok": return
        except Exception: pass
        time.sleep(0.1)

def start_kache():
    """kache (plain HTTP) in front of the second apiserver, through a copy of the main
    apiserver's kubeconfig at PORT (WORK/kubeconfig): (process, its base URL, its admin base
    URL) once it is ready."""
    kc = open(f"{A}/kubeconfig").read().replace("127.0.0.1:6443", f"127.0.0.1:{PORT}")
    open(f"{WORK}/kubeconfig", "w").write(kc); os.chmod(f"{WORK}/kubeconfig", 0o600)
    for f in [f"{WORK}/k.addr", f"{WORK}/k.admin"]:
        if os.path.exists(f): os.remove(f)
    klog = open(f"{WORK}/kache.log", "w")
    k = subprocess.Popen([KACHE, "serve", "--upstream-kubeconfig", f"{WORK}/kubeconfig", "--insecure-http",
        "--listen", "127.0.0.1:0", "--addr-file", f"{WORK}/k.addr", "--admin-listen", "127.0.0.1:0",
        "--admin-addr-file", f"{WORK}/k.admin", "--preload", "pods,namespaces,configmaps"], stdout=klog, stderr=klog)
    while not (os.path.exists(f"{WORK}/k.addr") and os.path.exists(f"{WORK}/k.admin")):
        time.sleep(0.2)
    K = "http://" + open(f"{WORK}/k.addr").read().strip()
    ADM = "http://" + open(f"{WORK}/k.admin").read().strip()
    while requests.get(ADM + "/readyz").status_code != 200:
        time.sleep(0.5)
    return k, K, ADM

def main():
    global phase, stop
    if not alive(f"{WORK}/apiserver2.pid"):
        start_apiserver(); wait_ready()
    t_start = time.time()
    k, K, ADM = start_kache()
    print(f"kache ready after {time.time()-t_start:.1f}s", flush=True)
    pod = requests.get(K + "/api/v1/pods?resourceVersion=0&limit=1", headers=H).json()["items"][0]["metadata"]
    ns, name = pod["namespace"], pod["name"]
    requests.post(K + "/api/v1/namespaces/default/configmaps", headers=H,
                  json={"metadata": {"name": "kache-faultrun"}, "data": {"n": "0"}})

    def get0(s):
        r = s.get(f"{K}/api/v1/namespaces/{ns}/pods/{name}?resourceVersion=0", headers=H, timeout=30); return r.status_code, ""
    def list0(s):
        r = s.get(f"{K}/api/v1/pods?resourceVersion=0&fieldSelector=spec.nodeName%3Dnode-0007", headers=H, timeout=30); return r.status_code, ""
    n = [0]
    def write(s):
        n[0] += 1
        r = s.patch(f"{K}/api/v1/namespaces/default/configmaps/kache-faultrun", headers={**H, "Content-Type": "application/merge-patch+json"},
                    data=json.dumps({"data": {"n": str(n[0])}}), timeout=30)
        return r.status_code, r.headers.get("Retry-After", "")
    def consistent(s):
        r = s.get(f"{K}/api/v1/namespaces/{ns}/pods/{name}", headers=H, timeout=30); return r.status_code, ""
    def readyz(s):
        r = s.get(ADM + "/readyz?verbose", timeout=30)
        up = [l for l in r.text.splitlines() if l[3:].startswith("upstream")]
        bad = sum(1 for l in r.text.splitlines() if l.startswith("[-]cache"))
        return r.status_code, (up[0] if up else "") + f" | caches[-]={bad}"
    def metric(s):
        r = s.get(ADM + "/metrics", timeout=30)
        up = [l for l in r.text.splitlines() if l.startswith("kache_upstream_up")]
        relists = sum(float(l.split()[-1]) for l in r.text.splitlines() if l.startswith("kache_informer_relists_total"))
        return r.status_code, (up[0].split()[-1] if up else "?") + f" relists={relists:g}"
    threads = [threading.Thread(target=probe_loop, args=a, daemon=True) for a in
               [("get0", get0, 0.2), ("list0", list0, 0.2), ("write", write, 1.0), ("consistent", consistent, 1.0),
                ("readyz", readyz, 0.5), ("metric", metric, 1.0)]]
    for t in threads: t.start()
    pid = int(open(f"{WORK}/apiserver2.pid").read())
    time.sleep(10)
    phase = "paused"; tp = time.time() - t0; os.kill(pid, signal.SIGSTOP); print(f"SIGSTOP at {tp:.1f}", flush=True)
    time.sleep(PAUSE)
    phase = "resumed"; tr = time.time() - t0; os.kill(pid, signal.SIGCONT); print(f"SIGCONT at {tr:.1f}", flush=True)
    time.sleep(20)
    phase = "killed"; tk = time.time() - t0; os.kill(pid, signal.SIGKILL); print(f"SIGKILL at {tk:.1f}", flush=True)
    time.sleep(KILL)
    phase = "restarted"
    pid = start_apiserver()
    ts = time.time() - t0; print(f"restarted at {ts:.1f} pid {pid}", flush=True)
    wait_ready()
    tready = time.time() - t0; print(f"upstream /readyz ok at {tready:.1f}", flush=True)
    time.sleep(60)
    stop = True
    time.sleep(1.5)
    k.terminate(); k.wait()
    json.dump({"events": events, "marks": {"pause": tp, "resume": tr, "kill": tk, "restart": ts, "ready": tready}}, open(f"{WORK}/faultrun.json", "w"))

def summary():
    d = json.load(open(f"{WORK}/faultrun.json")); ev = d["events"]; m = d["marks"]
    def pct(xs, p):
        xs = sorted(xs); return xs[min(len(xs)-1, int(p*len(xs)))] if xs else float('nan')
    by = collections.defaultdict(list)
    for t, ph, probe, code, secs, note in ev:
        by[(ph, probe)].append((t, code, secs, note))
    for ph in ["steady", "paused", "resumed", "killed", "restarted"]:
        for probe in ["get0", "list0", "write", "consistent"]:
            xs = by[(ph, probe)]
            if not xs: continue
            codes = collections.Counter(c for _, c, _, _ in xs)
            lat = [s for _, _, s, _ in xs]
            print(f"{ph:9} {probe:10} n={len(xs):4} codes={dict(codes)} p50={pct(lat,.5)*1000:.0f}ms p99={pct(lat,.99)*1000:.0f}ms max={max(lat)*1000:.0f}ms")
    print("marks", {k: round(v, 1) for k, v in m.items()})
    # readyz transitions
    last = None
    for t, ph, probe, code, secs, note in ev:
        if probe in ("readyz", "metric"):
            key = (probe, code, note.split(" for ")[0] if probe == "readyz" else note.split()[0])
            if probe == "readyz":
                key = (probe, code, note.split(" for ")[0][:40], note.split("|")[-1])
            if key != last and probe == "readyz":
                print(f"{t:7.1f} {ph:9} readyz {code} {note[:150]}")
                last = key
    lastm = None
    for t, ph, probe, code, secs, note in ev:
        if probe == "metric" and note != lastm:
            print(f"{t:7.1f} {ph:9} metric kache_upstream_up={note}"); lastm = note


if __name__ == "__main__":
    summary() if sys.argv[1:] == ["--summary"] else main()
