#!/usr/bin/env python3
"""Everyday kubectl commands and client reads through kache and directly, alternating, with
a writer moving the global resourceVersion (as a real cluster's leases do): the parity
benchmark, the first table of BENCHMARKS.md (through `headline.sh`).

    python3 loadtest/real/parity.py --kache-kubeconfig kache.kubeconfig \
        --direct-kubeconfig ~/real-apiserver/kubeconfig --context admin -n 5 \
        [--json results.json] [--only get-ns,get-svc]

Each command runs -n times through each side, alternating kache/direct (so drift in the
machine's load hits both alike); the report gives medians, the ratio kache/direct and
whether it meets "<= 1.1x direct + 10 ms". kubectl's discovery cache is warmed once per side
first, as an everyday user's is. The pod read, its namespace, node and a label of it are taken
from the cluster (the first pod a LIST returns), so any cluster will do.

The raw reads (curl-like, via urllib) of every pod are included: consistent and RV=0, JSON,
protobuf and Table. With --static-url and --static-dir each is also timed from a static TLS
server (headline.sh starts nginx) serving the bytes kache answered: the physical limit of
sending those bytes over TLS to this client, so kache's own overhead shows as kache / static.

`kubectl get pods -A` (60 pages of 500 at 30,000 pods) also runs with -v=6, and its time is split in two: paging
(its first page's response to its last page's, the 60 requests after the first) and the rest
(the wall time outside that span, mostly kubectl's own work after the last page). kubectl's
client-side rate limiter (5 requests a second after a burst of 10) bounds the paging at about
10 s however fast the server is; the report gives that phase's medians and the time kubectl
said it waited for its limiter.
"""
import argparse, json, os, re, statistics, subprocess, sys, tempfile, threading, time, urllib.error, urllib.request
import realapi

p = argparse.ArgumentParser()
p.add_argument("--kache-kubeconfig", required=True)
p.add_argument("--direct-kubeconfig", required=True)
p.add_argument("--context", default=None, help="context in the direct kubeconfig (kache's has one)")
p.add_argument("-n", type=int, default=5)
p.add_argument("--only", default="", help="comma-separated command ids")
p.add_argument("--json", default="", help="write the results here")
p.add_argument("--no-writer", action="store_true")
p.add_argument("--writer-interval", type=float, default=0.2)
p.add_argument("--static-url", default="", help="a static TLS server serving --static-dir")
p.add_argument("--static-dir", default="", help="where the bytes kache answered are put for it")
a = p.parse_args()


def kubeconfig_target(path, context):
    """(server, token) of a kubeconfig's context, via kubectl config view."""
    args = ["kubectl", "--kubeconfig", os.path.expanduser(path), "config", "view", "--minify", "--raw", "-o", "json"]
    if context:
        args += ["--context", context]
    cfg = json.loads(subprocess.check_output(args))
    server = cfg["clusters"][0]["cluster"]["server"]
    user = cfg["users"][0]["user"] if cfg.get("users") else {}
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = open(user["tokenFile"]).read().strip()
    return server, token


ctx = realapi.tls()
sides = {
    "kache": {"kubeconfig": os.path.expanduser(a.kache_kubeconfig), "context": None},
    "direct": {"kubeconfig": os.path.expanduser(a.direct_kubeconfig), "context": a.context},
}
for s in sides.values():
    s["server"], s["token"] = kubeconfig_target(s["kubeconfig"], s["context"])
    s["cache"] = tempfile.mkdtemp(prefix="kubectl-cache-")


def kubectl(side, args, phases=None):
    """kubectl's wall time; with `phases` (a dict of lists per side), also run at -v=6 and
    append {paging, rest, throttled} to phases[side]."""
    s = sides[side]
    cmd = ["kubectl", "--kubeconfig", s["kubeconfig"], "--cache-dir", s["cache"]]
    if s["context"]:
        cmd += ["--context", s["context"]]
    if phases is not None:
        cmd += ["-v=6"]
    t = time.perf_counter()
    r = subprocess.run(cmd + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    took = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(f"{side}: kubectl {' '.join(args)}: {r.stderr.decode()[:300]}")
    if phases is not None:
        phases[side].append(split(r.stderr.decode(), took))
    return took


def klog_time(line):
    m = re.match(r"[IWE]\d{4} (\d+):(\d+):([\d.]+)", line)
    return int(m[1]) * 3600 + int(m[2]) * 60 + float(m[3]) if m else None


def split(log, took):
    """A -v=6 run's paging (first page's response to last page's, by their log lines), the
    rest of its wall time, and the time kubectl's client-side limiter made it wait."""
    lines = log.splitlines()
    first = next(t for t in map(klog_time, lines) if t is not None)
    responses = [klog_time(l) for l in lines if " OK in " in l and "/pods" in l]
    waited = sum(float(m[1]) for m in re.finditer(r"Waited for ([\d.]+)ms due to client-side throttling", log)) / 1000
    return {"paging": responses[-1] - responses[0], "rest": took - (responses[-1] - first), "throttled": waited, "requests": len(responses)}


def fetch_raw(side, path, accept):
    """The body of a raw read."""
    s = sides[side]
    h = {"Accept": accept}
    if s["token"]:
        h["Authorization"] = "Bearer " + s["token"]
    with urllib.request.urlopen(urllib.request.Request(s["server"] + path, headers=h), context=ctx) as r:
        return r.read()


def raw_static(name):
    """A read of the static server's copy `name`, timed as raw() is."""
    t = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(a.static_url + "/" + name), context=ctx) as r:
        while r.read(1 << 20):
            pass
    return time.perf_counter() - t


def raw(side, path, accept):
    s = sides[side]
    h = {"Accept": accept}
    if s["token"]:
        h["Authorization"] = "Bearer " + s["token"]
    req = urllib.request.Request(s["server"] + path, headers=h)
    t = time.perf_counter()
    with urllib.request.urlopen(req, context=ctx) as r:
        while r.read(1 << 20):
            pass
    return time.perf_counter() - t


def direct_json(path):
    s = sides["direct"]
    req = urllib.request.Request(s["server"] + path, headers={"Authorization": "Bearer " + s["token"], "Accept": "application/json"})
    return json.load(urllib.request.urlopen(req, context=ctx))


# What the commands read, taken from the cluster: the first pod's namespace, name, node and
# first label.
first = direct_json("/api/v1/pods?limit=1")["items"][0]
ns, pod = first["metadata"]["namespace"], first["metadata"]["name"]
node = first["spec"].get("nodeName", "")
label = next(iter(sorted((first["metadata"].get("labels") or {"app": "none"}).items())))
selector = f"{label[0]}={label[1]}"
PB = "application/vnd.kubernetes.protobuf"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"

COMMANDS = [
    ("get-ns", "kubectl get ns", lambda s: kubectl(s, ["get", "ns"])),
    ("get-svc-A", "kubectl get svc -A", lambda s: kubectl(s, ["get", "svc", "-A"])),
    ("get-pod-yaml", "kubectl get pod NAME -o yaml", lambda s: kubectl(s, ["-n", ns, "get", "pod", pod, "-o", "yaml"])),
    ("get-pod-json", "kubectl get pod NAME -o json", lambda s: kubectl(s, ["-n", ns, "get", "pod", pod, "-o", "json"])),
    ("describe-pod", "kubectl describe pod NAME", lambda s: kubectl(s, ["-n", ns, "describe", "pod", pod])),
    ("get-pods-node", "kubectl get pods -A --field-selector spec.nodeName=NODE",
     lambda s: kubectl(s, ["get", "pods", "-A", "--field-selector", f"spec.nodeName={node}"])),
    ("get-pods-label", "kubectl get pods -n NS -l KEY=VALUE", lambda s: kubectl(s, ["-n", ns, "get", "pods", "-l", selector])),
    ("get-nodes", "kubectl get nodes", lambda s: kubectl(s, ["get", "nodes"])),
    ("get-nodes-wide", "kubectl get nodes -o wide", lambda s: kubectl(s, ["get", "nodes", "-o", "wide"])),
    ("get-pods-ns", "kubectl get pods -n NS", lambda s: kubectl(s, ["-n", ns, "get", "pods"])),
    ("get-pods-ns-wide", "kubectl get pods -n NS -o wide", lambda s: kubectl(s, ["-n", ns, "get", "pods", "-o", "wide"])),
    ("get-cm-ns", "kubectl get cm -n NS", lambda s: kubectl(s, ["-n", ns, "get", "cm"])),
    ("get-all-ns", "kubectl get all -n NS", lambda s: kubectl(s, ["-n", ns, "get", "all"])),
    ("get-pods-A", "kubectl get pods -A", lambda s: kubectl(s, ["get", "pods", "-A"], phases)),
]
RAW = [
    ("raw-pods-pb", "consistent LIST of all pods, protobuf", "/api/v1/pods", PB),
    ("raw-pods-pb-rv0", "RV=0 LIST of all pods, protobuf", "/api/v1/pods?resourceVersion=0", PB),
    ("raw-pods-json", "consistent LIST of all pods, JSON", "/api/v1/pods", "application/json"),
    ("raw-pods-json-rv0", "RV=0 LIST of all pods, JSON", "/api/v1/pods?resourceVersion=0", "application/json"),
    ("raw-pods-table", "consistent Table of all pods", "/api/v1/pods", TABLE),
    ("raw-pods-table-rv0", "RV=0 Table of all pods", "/api/v1/pods?resourceVersion=0", TABLE),
]
COMMANDS += [(cid, label, (lambda path, accept: lambda s: raw(s, path, accept))(path, accept)) for cid, label, path, accept in RAW]
RAW_BY_ID = {cid: (path, accept) for cid, _, path, accept in RAW}
if a.only:
    keep = set(a.only.split(","))
    COMMANDS = [c for c in COMMANDS if c[0] in keep]

stop = False
phases = {"kache": [], "direct": []}


def writer():
    """PUTs one ConfigMap every --writer-interval seconds, directly: the global RV moves."""
    s = sides["direct"]
    base = s["server"] + "/api/v1/namespaces/default/configmaps"
    h = {"Authorization": "Bearer " + s["token"], "Content-Type": "application/json"}
    i = 0
    while not stop:
        body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kache-parity-rv"}, "data": {"i": str(i)}}).encode()
        for method, url in (("PUT", base + "/kache-parity-rv"), ("POST", base)):
            try:
                urllib.request.urlopen(urllib.request.Request(url, data=body, method=method, headers=h), context=ctx).read()
                break
            except urllib.error.HTTPError:
                continue
        i += 1
        time.sleep(a.writer_interval)


if not a.no_writer:
    threading.Thread(target=writer, daemon=True).start()
# Warm each side's discovery cache as an everyday user's is.
for s in sides:
    kubectl(s, ["get", "ns"])
    kubectl(s, ["api-resources"])

results = []
print(f"{'command':58} {'kache s':>9} {'direct s':>9} {'ratio':>7}  <=1.1x+10ms  {'static s':>9} {'kache/static':>12}")
for cid, label, run in COMMANDS:
    times = {"kache": [], "direct": [], "static": []}
    static = bool(a.static_url and a.static_dir and cid in RAW_BY_ID)
    if static:
        with open(os.path.join(a.static_dir, cid), "wb") as f:
            f.write(fetch_raw("kache", *RAW_BY_ID[cid]))
    for _ in range(a.n):
        for side in ("kache", "direct"):
            times[side].append(run(side))
        if static:
            times["static"].append(raw_static(cid))
    k, d = statistics.median(times["kache"]), statistics.median(times["direct"])
    ok = k <= 1.1 * d + 0.010
    results.append({"id": cid, "command": label, "kache": times["kache"], "direct": times["direct"], "kache_median": k, "direct_median": d, "ratio": k / d, "parity": ok})
    extra = ""
    if static:
        st = statistics.median(times["static"])
        results[-1].update({"static": times["static"], "static_median": st, "static_ratio": k / st,
                            "bytes": os.path.getsize(os.path.join(a.static_dir, cid))})
        extra = f"  {st:9.3f} {k / st:12.2f}"
    print(f"{label:58} {k:9.3f} {d:9.3f} {k / d:7.2f}  {'yes' if ok else 'NO ':11}{extra}", flush=True)
    if phases["kache"]:
        results[-1]["phases"] = dict(phases)
        for part in ("paging", "rest", "throttled"):
            pk, pd = (statistics.median(p[part] for p in phases[side]) for side in ("kache", "direct"))
            print(f"{'  ' + part:58} {pk:9.3f} {pd:9.3f} {pk / pd if pd else float('nan'):7.2f}", flush=True)
        phases = {"kache": [], "direct": []}
stop = True
if a.json:
    with open(a.json, "w") as f:
        json.dump({"n": a.n, "writer_interval": None if a.no_writer else a.writer_interval, "namespace": ns, "pod": pod, "node": node,
               "selector": selector, "results": results}, f, indent=1)
sys.exit(0 if all(r["parity"] for r in results if not r["id"].startswith("raw-")) else 1)
