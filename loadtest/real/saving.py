#!/usr/bin/env python3
"""What kache spares a real kube-apiserver: one realistic read mix run directly against the
apiserver and then through kache, in one run, measuring the apiserver's CPU seconds (and
kache's) from /proc, and kache's requests and bytes by source from its /metrics.

    pip install aiohttp
    python3 loadtest/real/saving.py --kache-bin target/release/kache --real ~/real-apiserver \
        --seconds 60 [--kache-arg=--consistent-passthrough-factor=0 ...] [--json out.json]

The mix (every client with the admin token, each phase the same length):
- node agents (--agents, default 200): each LISTs its node's pods at resourceVersion=0
  (`fieldSelector=spec.nodeName=node-NNNN`, protobuf), then WATCHes from the list's RV;
- informers (--informers, default 3): LIST every pod at resourceVersion=0 (protobuf) every
  --relist-seconds (default 20), as informers relisting do;
- kubectl users (--kubectl-users, default 5): each, once a second, a consistent Table LIST of
  one namespace's pods (`limit=500`, as `kubectl get pods -n ns-NNN` sends);
- node listers (--node-listers, default 2): each, once a second, a consistent JSON LIST of
  all nodes (`limit=500`).
Meanwhile a writer PUTs one ConfigMap every 0.2 s (the global RV moves, as leases move it).

kache is started by the script (`kache serve` with the real apiserver's kubeconfig, preloading
its default kinds (pods, nodes, namespaces, services, configmaps) in both encodings, its per-client bounds lifted: see
PER_CLIENT_BOUNDS_OFF) and its caches are synced before its phase. A client's non-200 answers
are counted by status in its `statuses`. Before each phase's settle the apiserver is made to
collect its garbage (`collect_garbage`; `--no-gc` not to), so that neither phase pays for a
collection owed by what came before it.
"""
import argparse, asyncio, json, os, re, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kacheproc  # noqa: E402
import realapi  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--kache-bin", default="target/release/kache")
p.add_argument("--real", default="~/real-apiserver")
p.add_argument("--seconds", type=float, default=60)
p.add_argument("--agents", type=int, default=200)
p.add_argument("--informers", type=int, default=3)
p.add_argument("--relist-seconds", type=float, default=20)
p.add_argument("--kubectl-users", type=int, default=5)
p.add_argument("--node-listers", type=int, default=2)
p.add_argument("--nodes", type=int, default=1000)
p.add_argument("--namespaces", type=int, default=50)
p.add_argument("--kache-arg", action="append", default=[])
p.add_argument("--json", default="")
p.add_argument("--settle", type=float, default=15,
               help="idle seconds before each phase, so that neither pays for what came before it (the other phase, kache's own initial lists)")
p.add_argument("--no-gc", action="store_true",
               help="do not make the apiserver collect its garbage before each phase's settle (see collect_garbage)")
p.add_argument("--phases", default="direct,through", help="which phases to run: direct, through or both (a component's cost alone)")
a = p.parse_args()
REAL = realapi.home(a.real)
TOKEN = realapi.token("admin", REAL)
PB = "application/vnd.kubernetes.protobuf"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
CTX = realapi.tls()
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def pid_of(name):
    out = subprocess.check_output(["pgrep", "-x", name]).split()
    assert len(out) == 1, f"{name}: {out}"
    return int(out[0])


class Counts:
    def __init__(self):
        self.requests, self.bytes, self.errors, self.events = 0, 0, 0, 0
        self.statuses = {}
        self.seconds = []

    def latency(self):
        """Median and p99 of the answers' times (headers to last byte), for the paced clients."""
        if not self.seconds:
            return {}
        xs = sorted(self.seconds)
        return {"p50_s": round(xs[len(xs) // 2], 3), "p99_s": round(xs[min(len(xs) - 1, int(len(xs) * 0.99))], 3)}


async def get(session, base, path, accept, c):
    t = time.time()
    async with session.get(base + path, headers={"Authorization": "Bearer " + TOKEN, "Accept": accept}, ssl=CTX) as r:
        body = await r.read()
        c.seconds.append(time.time() - t)
        c.requests += 1
        c.bytes += len(body)
        if r.status != 200:
            c.errors += 1
        return r.status, body


async def agent(session, base, node, end, c):
    import aiohttp
    path = f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node}&resourceVersion=0"
    status, body = await get(session, base, path, "application/json", c)
    if status != 200:
        c.statuses[status] = c.statuses.get(status, 0) + 1
        return
    rv = json.loads(body)["metadata"]["resourceVersion"]
    w = f"{path}&watch=1&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds={int(end - time.time()) + 5}"
    try:
        async with session.get(base + w, headers={"Authorization": "Bearer " + TOKEN}, ssl=CTX,
                               timeout=aiohttp.ClientTimeout(total=None, sock_read=None)) as r:
            c.requests += 1
            while time.time() < end:
                try:
                    line = await asyncio.wait_for(r.content.readline(), timeout=max(0.1, end - time.time()))
                except asyncio.TimeoutError:
                    break
                if not line:
                    break
                c.events += 1
                c.bytes += len(line)
    except Exception:
        c.errors += 1


async def every(period, end, fn):
    while time.time() < end:
        t = time.time()
        await fn()
        await asyncio.sleep(max(0, period - (time.time() - t)))


async def writer(session, base, end):
    path = f"{base}/api/v1/namespaces/default/configmaps"
    h = {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"}
    i = 0
    while time.time() < end:
        body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kache-saving-rv"}, "data": {"i": str(i)}})
        async with session.put(f"{path}/kache-saving-rv", data=body, headers=h, ssl=CTX) as r:
            if r.status == 404:
                async with session.post(path, data=body, headers=h, ssl=CTX):
                    pass
        i += 1
        await asyncio.sleep(0.2)


async def mix(base, direct):
    import aiohttp
    end = time.time() + a.seconds
    c = {k: Counts() for k in ("agents", "informers", "kubectl", "nodes")}
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as s:
        tasks = [asyncio.create_task(writer(s, direct, end))]
        tasks += [asyncio.create_task(agent(s, base, f"node-{i * (a.nodes // max(1, a.agents)):04d}", end, c["agents"])) for i in range(a.agents)]
        for i in range(a.informers):
            tasks.append(asyncio.create_task(every(a.relist_seconds, end, lambda: get(s, base, "/api/v1/pods?resourceVersion=0", PB, c["informers"]))))
        for i in range(a.kubectl_users):
            ns = f"ns-{(i % a.namespaces) + 1:03d}"
            tasks.append(asyncio.create_task(every(1, end, lambda ns=ns: get(s, base, f"/api/v1/namespaces/{ns}/pods?limit=500", TABLE, c["kubectl"]))))
        for i in range(a.node_listers):
            tasks.append(asyncio.create_task(every(1, end, lambda: get(s, base, "/api/v1/nodes?limit=500", "application/json", c["nodes"]))))
        await asyncio.gather(*tasks)
    return {k: {**{f: getattr(v, f) for f in ("requests", "bytes", "errors", "events", "statuses")}, **v.latency()} for k, v in c.items()}


def metrics(admin):
    text = urllib.request.urlopen(admin + "/metrics").read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r'(kache_requests_total|kache_response_bytes_total|kache_passthrough_total|kache_consistent_checks_total|kache_freshness_probes_total)\{([^}]*)\} (\S+)', line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            key = m.group(1) + ":" + (labels.get("source") or labels.get("reason") or labels.get("outcome") or labels.get("resource", ""))
            out[key] = out.get(key, 0) + float(m.group(3))
    return out


# The mix's 210 clients share one token and one address, where a cluster's node agents,
# informers and kubectl users are as many identities: kache's per-client bounds
# would treat them as one tenant, refuse some (429) and answer others differently (a
# client's cheaper-upstream budget), and so change the mix. They are lifted here (a later
# --kache-arg sets one back).
PER_CLIENT_BOUNDS_OFF = ["--max-large-answers-per-client", "0", "--max-cheaper-upstream-rate-per-client", "0",
                         "--max-watch-starts-per-client", "0", "--max-consistent-reads-per-client", "0", "--max-watches-per-client", "0",
                         "--max-passthrough-per-client", "0", "--max-inflight-reads-per-user", "0"]


def start_kache(work):
    # The kinds deploy/replicas preloads (ConfigMaps among them, the writer's kind, and
    # Leases, the apiserver's identity lease), in both encodings the clients ask for.
    args = ["--preload", "pods,nodes,namespaces,services,configmaps,leases.coordination.k8s.io", "--preload-encodings", "json,protobuf", *PER_CLIENT_BOUNDS_OFF,
            *a.kache_arg]
    return kacheproc.start(a.kache_bin, REAL, work, args)


def collect_garbage(direct):
    """Make the apiserver run a garbage collection now (its pprof heap endpoint with gc=1),
    before a phase's settle: one collection of its heap (30,000 pods) costs it about 2 s of
    CPU, and one left over from what came before (the other phase, kache's initial lists)
    would otherwise fall into a phase or not by chance (two through phases of the same build
    measured 9.3 and 6.1 s). Whether it was done is in the phase's output."""
    if a.no_gc:
        return False
    req = urllib.request.Request(f"{direct}/debug/pprof/heap?gc=1", headers={"Authorization": "Bearer " + TOKEN})
    try:
        with urllib.request.urlopen(req, context=CTX, timeout=60) as r:
            r.read()
        return True
    except OSError as e:
        print(f"could not make the apiserver collect its garbage ({e}); the phase may pay for a collection owed by what came before", file=sys.stderr)
        return False


def phase(name, base, direct, kache_pid=None, admin=None):
    api = pid_of("kube-apiserver")
    gc = collect_garbage(direct)
    settle = cpu_seconds(api)
    time.sleep(a.settle)
    settle = cpu_seconds(api) - settle
    before = (cpu_seconds(api), cpu_seconds(kache_pid) if kache_pid else 0.0, metrics(admin) if admin else {})
    t = time.time()
    counts = asyncio.run(mix(base, direct))
    took = time.time() - t
    after = (cpu_seconds(api), cpu_seconds(kache_pid) if kache_pid else 0.0, metrics(admin) if admin else {})
    r = {"phase": name, "seconds": took, "apiserver_cpu_s": after[0] - before[0], "apiserver_cpu_settling_s": settle, "apiserver_gc_before": gc, "kache_cpu_s": after[1] - before[1], "clients": counts,
         "kache_metrics": {k: after[2].get(k, 0) - before[2].get(k, 0) for k in after[2]}}
    print(json.dumps(r, indent=1), flush=True)
    return r


def main():
    direct = realapi.server(REAL)
    work = tempfile.mkdtemp(prefix="kache-saving-")
    phases = a.phases.split(",")
    results = [phase("direct", direct, direct)] if "direct" in phases else []
    if "through" in phases:
        k, base, admin = start_kache(work)
        try:
            results.append(phase("through kache", base, direct, k.pid, admin))
        finally:
            k.terminate()
            k.wait()
    if len(results) < 2:
        if a.json:
            json.dump({"args": vars(a), "phases": results}, open(a.json, "w"), indent=1)
        return
    d, t = results
    summary = {
        "apiserver_cpu_direct_s": d["apiserver_cpu_s"], "apiserver_cpu_through_kache_s": t["apiserver_cpu_s"],
        "ratio": t["apiserver_cpu_s"] / max(d["apiserver_cpu_s"], 1e-9), "kache_cpu_s": t["kache_cpu_s"],
        "saved_cpu_s": d["apiserver_cpu_s"] - t["apiserver_cpu_s"],
    }
    print(json.dumps(summary, indent=1))
    if a.json:
        json.dump({"args": vars(a), "phases": results, "summary": summary}, open(a.json, "w"), indent=1)


main()
