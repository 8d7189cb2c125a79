#!/usr/bin/env python3
"""One tenant cannot take the cache down: a hostile tenant against one release kache in
front of the real kube-apiserver, while honest clients keep working.

    python3 loadtest/real/hostile.py --kache-bin target/release/kache [--seconds 60] \
        [--real ~/real-apiserver] [--json out.json] [--md out.md] [--kache-arg=--flag=value ...]

(stdlib only; kubectl on PATH). Everything runs on 127.0.0.1; wrap a run in
`flock /tmp/real-apiserver.lock ...` when others measure the same apiserver.

kache is started as deploy/replicas runs it (preload pods, nodes, namespaces, services,
configmaps in JSON and protobuf, impersonating pass-through, default bounds), then:

1. Baseline (--seconds): honest clients only, all through kache with the admin token:
   - an informer: LIST pods of `kache-honest` at resourceVersion=0, then WATCH from its RV,
     while a writer (direct to the apiserver) creates, labels and deletes pods there ~8 times
     a second. A watch of the apiserver itself from the same RV is the reference: the
     informer must see exactly its events (type, name, resourceVersion), in order, none lost
     or duplicated; every write's RV must be among them. Event lag (write answered ->
     event read through kache) is recorded;
   - kubectl (`get pods -n ns-001`, `get pod NAME -n ns-001`) in a loop, timed;
   - HTTP readers, one per read, each in a loop 0.05 s apart: a consistent GET of one pod,
     a resourceVersion=0 LIST of ns-001's pods and of one node's pods (`spec.nodeName`),
     timed; and the same consistent GET sent to the apiserver itself, the reference for the
     one read kache passes through (not gated).
   kache's RSS is sampled from /proc every 0.2 s (and VmHWM, the kernel's peak, at the end).
2. Hostile (--seconds): the same honest clients while a hostile tenant, in a process of its
   own, does at once the list below. The tenant's process runs under SCHED_IDLE: a tenant's
   clients run on machines of their own, and here on the one machine its Python, reading
   gigabytes of answers, would otherwise take the honest clients' and the apiserver's cores
   (at nice 10 it used 0.4 of the 2 cores and even the apiserver's own watch, which kache
   does not touch, slowed 1.6-2x). It still takes every cycle nobody else wants
   (20 CPU seconds a minute). `--hostile-nice N` runs it at niceness N instead.
   - watches and lists with hostile numbers (timeoutSeconds=9223372036854775807, -2^63,
     18446744074, limit=-5, limit=2^64+, resourceVersion=abc, timeout=abc);
   - custom resources nested 130, 200, 500 and 9,990 levels deep (a CRD with
     x-kubernetes-preserve-unknown-fields in the scratch group hostile.kache.test; 130 and
     200 just past serde_json's default recursion limit of 128), listed and watched;
   - a CRD with 300 printer columns whose jsonPath is `.`, 20 objects of 100 KB, and Table
     LISTs of them (2 loops); at the end kache's Table of them (resourceVersion=0) is
     compared with the apiserver's, cell for cell;
   - six concurrent `pretty=true` LISTs of all 30,000 pods and one with a curl user agent,
     in loops (identity `reader`: the tenant's own account may list only its namespace);
   - stalled clients that never read: 100 watches of 20 ConfigMaps of ~900 KB (a second
     account of the tenant), 6 pretty LISTs and 6 gzip LISTs of all pods, renewed every 20 s;
   - a stalled list reader: a LIST of all pods not read for 20 s (past kache's 15 s
     --stall-timeout), then read: kache should have closed it;
   - as many watches as one account may open (1,100 asked; --max-watches-per-client 1000);
   - random bearer tokens as fast as one connection goes, no token at all, forged
     X-Remote-User/X-Remote-Group headers, Impersonate-User without the right, and exec
     upgrade attempts (SPDY and WebSocket).
   The tenant is a ServiceAccount with every right in namespace kache-hostile and none
   elsewhere; the CRDs are installed by the admin, as a cluster's would be.
3. Report (JSON and a markdown table): honest p50/p99 per client, baseline vs hostile, and
   the ratio; the informer's check; kache's peak RSS against the bound below;
   kache_limit_hits_total and other counters (upstream faults among them) from /metrics; the
   wide objects' Table against the apiserver's; panics in kache's log; what the
   hostile tenant got (status counts; any 2xx to a forged or junk identity is a leak).
   Exit status 1 if the RSS peak exceeds the bound, an honest p99 is over 2x its baseline,
   the informer saw anything but the apiserver's events, kache panicked, or anything leaked.

The RSS bound (documented in BENCHMARKS.md, "What does a hostile tenant cost the others?"), from kache's
flags and what the run made kache hold:

    bound = R_ready                                  RSS once every preloaded cache synced
          + caches x --cache-window-size             each cache's window of past versions
          + (sum kache_cache_bytes at end - at ready) objects the run created
          + --max-watch-buffers-size                 events queued for all watches' clients
          + --max-concurrent-encodes x 1 MiB          a 256 KiB frame + its indented/gzip copy
          + connections x 64 KiB                     TLS + HTTP buffers per client connection
          + 128 MiB                                  runtime, allocator slack, upstream pools

Cleanup: the namespaces kache-hostile and kache-honest and the two CRDs are deleted at the
end (the populated cluster is left as it was).
"""
import argparse, base64, functools, http.client, json, os, re, signal, socket, ssl, subprocess, sys, tempfile, threading, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kacheproc  # noqa: E402
import rawwatch  # noqa: E402
import realapi  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--kache-bin", default="target/release/kache")
p.add_argument("--real", default="~/real-apiserver")
p.add_argument("--seconds", type=float, default=60)
p.add_argument("--ns", default="ns-001", help="namespace of the populated cluster the honest reads look at")
p.add_argument("--node", default="node-0001")
p.add_argument("--hostile-nice", type=int, default=None,
               help="run the hostile tenant's process at this niceness instead of under SCHED_IDLE (the default, chrt -i 0): "
                    "it then competes for the cores with the honest clients, the apiserver and kache")
p.add_argument("--stalled-watches", type=int, default=100)
p.add_argument("--max-watches", type=int, default=1100)
p.add_argument("--pretty-loops", type=int, default=6)
p.add_argument("--only", default="", help="hostile actions to run (comma-separated: numbers, deep_objects, wide_objects, stalled, "
               "stalled_reader, many_watches, junk_tokens, anonymous, forged, impersonation, exec_upgrades, pretty); default all")
p.add_argument("--kache-arg", action="append", default=[])
p.add_argument("--json", default="")
p.add_argument("--md", default="")
p.add_argument("--keep", action="store_true", help="leave the namespaces and CRDs")
p.add_argument("--worker", default="", help=argparse.SUPPRESS)
a = p.parse_args()

REAL = realapi.home(a.real)
CTX = realapi.tls()
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
GROUP = "hostile.kache.test"
TENANT_NS, HONEST_NS = "kache-hostile", "kache-honest"


def hostport(base):
    h, port = base.split("//")[1].rsplit(":", 1)
    return h, int(port)


def conn(base, timeout=60):
    h, port = hostport(base)
    return http.client.HTTPSConnection(h, port, context=CTX, timeout=timeout)


def call(c, method, path, token=None, body=None, headers=None, read=True):
    """One request on connection `c`: (status, body bytes)."""
    h = {"Accept": "application/json"}
    if token:
        h["Authorization"] = "Bearer " + token
    if body is not None:
        body = json.dumps(body).encode() if not isinstance(body, bytes) else body
        h.setdefault("Content-Type", "application/json")
    h.update(headers or {})
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read() if read else b""
    return r.status, data


def once(base, method, path, token=None, body=None, headers=None, timeout=120):
    c = conn(base, timeout)
    try:
        return call(c, method, path, token, body, headers)
    finally:
        c.close()


def must(what, st, data, ok=(200, 201)):
    if st not in ok:
        raise SystemExit(f"{what}: HTTP {st}: {data[:300]!r}")
    return json.loads(data) if data else None


def rss_kb(pid, key="VmRSS"):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / TICK
    except (OSError, ValueError, TypeError):
        return 0.0


def run_delay(pid):
    """Seconds the threads of `pid` have waited on a CPU runqueue (schedstat), summed."""
    total = 0
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                total += int(open(f"/proc/{pid}/task/{t}/schedstat").read().split()[1])
            except (OSError, IndexError, ValueError):
                pass
    except OSError:
        pass
    return total / 1e9


def machine_busy():
    """(busy, total) jiffies of the whole machine."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(f) - f[3] - f[4], sum(f)


def pid_file(name):
    try:
        return int(open(f"{REAL}/run/{name}.pid").read().strip())
    except (OSError, ValueError):
        return None


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


# ---------------------------------------------------------------------------------------
# Setup and cleanup (the admin, directly against the apiserver)


def deep(levels):
    """A value nested `levels` levels deep: {"a":{"a":...{"a":1}...}}."""
    return "{\"a\":" * levels + "1" + "}" * levels


def setup(direct, admin):
    def ensure(path, obj):
        st, data = once(direct, "POST", path, admin, obj)
        if st not in (201, 409):
            raise SystemExit(f"create {path}: HTTP {st}: {data[:300]!r}")

    for ns in (TENANT_NS, HONEST_NS):
        ensure("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    # no controller-manager makes the `default` account the ServiceAccount admission wants for pods
    ensure(f"/api/v1/namespaces/{HONEST_NS}/serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})
    for sa in ("tenant", "tenant-b"):
        ensure(f"/api/v1/namespaces/{TENANT_NS}/serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}})
    ensure(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{TENANT_NS}/roles",
           {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "everything"},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]})
    ensure(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{TENANT_NS}/rolebindings",
           {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "tenant-everything"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "everything"},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": TENANT_NS} for sa in ("tenant", "tenant-b")]})
    open_schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    crds = [
        {"plural": "deeps", "kind": "Deep", "columns": []},
        {"plural": "wides", "kind": "Wide", "columns": [{"name": f"c{i}", "type": "string", "jsonPath": "."} for i in range(300)]},
    ]
    for c in crds:
        crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": f"{c['plural']}.{GROUP}"},
               "spec": {"group": GROUP, "scope": "Namespaced",
                        "names": {"plural": c["plural"], "singular": c["plural"][:-1], "kind": c["kind"], "listKind": c["kind"] + "List"},
                        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": open_schema},
                                      **({"additionalPrinterColumns": c["columns"]} if c["columns"] else {})}]}}
        ensure("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    for c in crds:
        end = time.time() + 60
        while True:
            st, data = once(direct, "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{c['plural']}.{GROUP}", admin)
            conds = (json.loads(data).get("status") or {}).get("conditions") or [] if st == 200 else []
            if any(x["type"] == "Established" and x["status"] == "True" for x in conds):
                break
            assert time.time() < end, f"CRD {c['plural']} not established"
            time.sleep(0.2)
    tokens = {}
    for sa in ("tenant", "tenant-b"):
        st, data = once(direct, "POST", f"/api/v1/namespaces/{TENANT_NS}/serviceaccounts/{sa}/token", admin,
                        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 7200}})
        tokens[sa] = must(f"token for {sa}", st, data)["status"]["token"]
    # The tenant's data at rest: 20 ConfigMaps of ~900 KB for its stalled watches to hold.
    for i in range(20):
        o = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"big-{i:02d}"}, "data": {"k": "x" * 900_000}}
        st, data = once(direct, "POST", f"/api/v1/namespaces/{TENANT_NS}/configmaps", tokens["tenant-b"], o)
        if st not in (201, 409):
            raise SystemExit(f"big ConfigMap: HTTP {st}: {data[:300]!r}")
    return tokens


def cleanup(direct, admin):
    """Delete what the run made. With no controller-manager a deleted namespace stays
    Terminating for good: its contents are deleted here and its finalizer removed."""
    for ns in (TENANT_NS, HONEST_NS):
        for coll in ("api/v1/{}/pods", "api/v1/{}/configmaps", "api/v1/{}/serviceaccounts", "api/v1/{}/secrets",
                     "apis/rbac.authorization.k8s.io/v1/{}/roles", "apis/rbac.authorization.k8s.io/v1/{}/rolebindings",
                     f"apis/{GROUP}/v1/{{}}/deeps", f"apis/{GROUP}/v1/{{}}/wides"):
            once(direct, "DELETE", "/" + coll.format(f"namespaces/{ns}") + "?gracePeriodSeconds=0", admin)
        once(direct, "DELETE", f"/api/v1/namespaces/{ns}", admin)
        st, data = once(direct, "GET", f"/api/v1/namespaces/{ns}", admin)
        if st == 200:
            o = json.loads(data)
            o["spec"]["finalizers"] = []
            once(direct, "PUT", f"/api/v1/namespaces/{ns}/finalize", admin, o)
    for plural in ("deeps", "wides"):
        once(direct, "DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{GROUP}", admin)
    for plural in ("deeps", "wides"):
        end = time.time() + 60
        while time.time() < end and once(direct, "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{GROUP}", admin)[0] == 200:
            time.sleep(0.5)
    for ns in (TENANT_NS, HONEST_NS):
        end = time.time() + 60
        while time.time() < end and once(direct, "GET", f"/api/v1/namespaces/{ns}", admin)[0] == 200:
            time.sleep(0.5)


# ---------------------------------------------------------------------------------------
# kache


def start_kache(work):
    flags = ["--preload", "pods,nodes,namespaces,services,configmaps,leases.coordination.k8s.io", "--preload-encodings", "json,protobuf",
             "--passthrough-auth", "impersonate", *a.kache_arg]
    return kacheproc.start(a.kache_bin, REAL, work, flags)


def scrape(admin):
    text = urllib.request.urlopen(admin + "/metrics", timeout=30).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"(\w+)(\{[^}]*\})? (\S+)", line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def apiserver_requests(direct, token):
    """The apiserver's own count of the requests it has served (`apiserver_request_total`), summed
    by (verb, resource, subresource): who sent them is not in the metric, so a phase's figure is
    every client's, kache's included."""
    req = urllib.request.Request(direct + "/metrics", headers={"Authorization": "Bearer " + token})
    text = urllib.request.urlopen(req, timeout=30, context=CTX).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("apiserver_request_total{"):
            prefix = ""
        elif line.startswith("apiserver_request_duration_seconds_sum{"):
            prefix = "seconds "
        else:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        key = prefix + " ".join(x for x in (labels.get("verb"), labels.get("resource"), labels.get("subresource")) if x)
        out[key] = out.get(key, 0) + float(line.rsplit(" ", 1)[1])
    return out


def split_seconds(d):
    """`per_second` of `apiserver_requests` into requests a second and, apart, the seconds a
    second the apiserver spent answering them (its request-duration histogram's sum: wall
    time, not CPU; watches, which last their whole life, left out)."""
    reqs = {k: v for k, v in d.items() if not k.startswith("seconds ")}
    secs = {k[len("seconds "):]: v for k, v in d.items() if k.startswith("seconds ") and not k.startswith("seconds WATCH")}
    return reqs, dict(sorted(((k, v) for k, v in secs.items() if v), key=lambda kv: -kv[1])[:15])


def per_second(x, y, secs):
    """Requests a second by kind between two `apiserver_requests`, the busiest first."""
    d = {k: round((y.get(k, 0) - x.get(k, 0)) / secs, 3 if k.startswith("seconds ") else 1) for k in y}
    return dict(sorted(((k, v) for k, v in d.items() if v), key=lambda kv: -kv[1]))


def debug_cache(admin):
    return json.loads(urllib.request.urlopen(admin + "/debug/cache", timeout=30).read())


def flag_value(name, default):
    for x in a.kache_arg:
        if x.startswith(f"--{name}="):
            return int(x.split("=", 1)[1])
    return default


# ---------------------------------------------------------------------------------------
# Honest clients


class Samples:
    def __init__(self):
        self.lock = threading.Lock()
        self.items = []  # (t, class, seconds, ok)
        self.failures = {}

    def fail(self, cls, why):
        with self.lock:
            self.failures.setdefault(cls, {}).setdefault(why, 0)
            self.failures[cls][why] += 1

    def add(self, cls, secs, ok):
        with self.lock:
            self.items.append((time.time(), cls, secs, ok))


def watch_lines(base, token, path, on_event, stop, opened=None):
    """Read a watch's JSON lines, calling on_event(event, t) until stop is set or it ends."""
    c = conn(base, timeout=120)
    c.request("GET", path, headers={"Authorization": "Bearer " + token, "Accept": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"watch {path}: HTTP {r.status} {r.read()[:200]!r}")
    if opened:
        opened.set()
    try:
        while not stop.is_set():
            line = r.readline()
            if not line:
                return "ended"
            on_event(json.loads(line), time.time())
        return "stopped"
    finally:
        c.close()


class Informer:
    """LIST + WATCH of kache-honest's pods through `base`, resuming from its last RV if the
    watch ends (as client-go does); events as (type, name, rv, t)."""

    def __init__(self, base, token, rv, name):
        self.base, self.token, self.rv, self.name = base, token, rv, name
        self.events, self.resumes, self.errors = [], 0, []
        self.stop, self.opened = threading.Event(), threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def on(self, e, t):
        o = e.get("object", {})
        md = o.get("metadata", {})
        if e.get("type") == "BOOKMARK":
            self.rv = md.get("resourceVersion", self.rv)
            return
        if e.get("type") == "ERROR":
            self.errors.append(o)
            raise RuntimeError(f"ERROR event {o}")
        self.rv = md["resourceVersion"]
        self.events.append((e["type"], md["name"], int(md["resourceVersion"]), t))

    def run(self):
        while not self.stop.is_set():
            path = f"/api/v1/namespaces/{HONEST_NS}/pods?watch=1&allowWatchBookmarks=true&resourceVersion={self.rv}&timeoutSeconds=1800"
            try:
                how = watch_lines(self.base, self.token, path, self.on, self.stop, self.opened)
            except Exception as e:  # noqa: BLE001
                self.errors.append(f"{type(e).__name__}: {e}")
                if len(self.errors) > 50:
                    return
                time.sleep(0.2)
                how = "error"
            if how != "stopped":
                self.resumes += 1


def writer(direct, admin, stop, log):
    """Creates a pod, labels it, deletes the one made 5 before, ~8 writes a second."""
    c = conn(direct)
    i = 0
    while not stop.is_set():
        name = f"w-{i:05d}"
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"w": "0"}},
               "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}], "terminationGracePeriodSeconds": 0,
                        "automountServiceAccountToken": False}}
        try:
            st, data = call(c, "POST", f"/api/v1/namespaces/{HONEST_NS}/pods", admin, pod)
            if st != 201:
                raise SystemExit(f"writer: create {name}: HTTP {st}: {data[:300]!r}")
            log.append(("ADDED", name, int(json.loads(data)["metadata"]["resourceVersion"]), time.time()))
            st, data = call(c, "PATCH", f"/api/v1/namespaces/{HONEST_NS}/pods/{name}", admin, {"metadata": {"labels": {"w": "1"}}},
                            {"Content-Type": "application/merge-patch+json"})
            if st == 200:
                log.append(("MODIFIED", name, int(json.loads(data)["metadata"]["resourceVersion"]), time.time()))
            if i >= 5:
                old = f"w-{i - 5:05d}"
                call(c, "DELETE", f"/api/v1/namespaces/{HONEST_NS}/pods/{old}?gracePeriodSeconds=0", admin)
                log.append(("DELETED", old, 0, time.time()))
        except (OSError, http.client.HTTPException):
            c.close()
            c = conn(direct)
        i += 1
        time.sleep(0.2)
    c.close()


def kubectl_loop(kubeconfig, cachedir, pod, samples, stop):
    env = dict(os.environ, KUBECACHEDIR=cachedir)
    cmds = [("kubectl get pods -n", ["get", "pods", "-n", a.ns]), ("kubectl get pod NAME", ["get", "pod", pod, "-n", a.ns])]
    i = 0
    while not stop.is_set():
        cls, args = cmds[i % 2]
        t = time.time()
        r = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *args], capture_output=True, env=env)
        samples.add(cls, time.time() - t, r.returncode == 0)
        if r.returncode:
            samples.fail(cls, r.stderr.decode()[-160:])
        i += 1


def http_loop(base, token, pod, samples, stop, which, direct=False):
    """An HTTP reader's loop of read `which` (each read has a reader of its own, so each
    class has as many samples as the next: a p99 of ~1,000, not the 4th of ~330); `direct`:
    the consistent GET sent to the apiserver itself (the reference for the one read kache
    passes through)."""
    reqs = [("GET pod (consistent)", f"/api/v1/namespaces/{a.ns}/pods/{pod}"),
            ("LIST ns pods RV=0", f"/api/v1/namespaces/{a.ns}/pods?resourceVersion=0"),
            ("LIST node's pods RV=0", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{a.node}&resourceVersion=0")]
    reqs = [reqs[which]]
    if direct:
        reqs = [("apiserver's own GET pod (consistent, not gated)", reqs[0][1])]
    c = conn(base)
    i = 0
    while not stop.is_set():
        cls, path = reqs[i % len(reqs)]
        t = time.time()
        try:
            st, body = call(c, "GET", path, token)
            samples.add(cls, time.time() - t, st == 200)
            if st != 200:
                samples.fail(cls, f"HTTP {st}: {body[:160]!r}")
        except (OSError, http.client.HTTPException):
            samples.add(cls, time.time() - t, False)
            samples.fail(cls, "no response")
            c.close()
            c = conn(base)
        i += 1
        time.sleep(0.05)
    c.close()


# ---------------------------------------------------------------------------------------
# The hostile tenant (a process of its own: --worker hostile)


def hostile_worker():
    cfg = json.loads(os.environ["KACHE_HOSTILE"])
    base, end, toks = cfg["base"], cfg["end"], cfg["tokens"]
    tenant, tenant_b, reader = toks["tenant"], toks["tenant-b"], toks["reader"]
    lock = threading.Lock()
    out = {}

    def count(group, key, n=1):
        with lock:
            g = out.setdefault(group, {})
            g[str(key)] = g.get(str(key), 0) + n

    def guarded(fn):
        @functools.wraps(fn)
        def run():
            try:
                fn()
            except Exception as e:  # noqa: BLE001
                count("worker_errors", f"{fn.__name__}: {type(e).__name__}: {e}"[:200])
        return run

    def loop(group, reqs, token_fn, pause=0.0, headers_fn=None):
        c = conn(base, timeout=30)
        i = 0
        while time.time() < end:
            method, path, body = reqs[i % len(reqs)]
            i += 1
            try:
                st, _ = call(c, method, path, token_fn(), body, headers_fn() if headers_fn else None)
                count(group, f"{method} {path.split('?')[0][-40:]} -> {st}")
                if group in ("forged", "impersonation") and 200 <= st < 300:
                    count("leaks", f"{method} {path} -> {st}")
            except (OSError, http.client.HTTPException) as e:
                count(group, f"no response: {type(e).__name__}")
                c.close()
                c = conn(base, timeout=30)
            if pause:
                time.sleep(pause)
        c.close()

    ns = f"/api/v1/namespaces/{TENANT_NS}"

    @guarded
    def numbers():
        q = ["watch=1&timeoutSeconds=9223372036854775807", "watch=1&timeoutSeconds=-9223372036854775808", "watch=1&timeoutSeconds=18446744074",
             "watch=1&timeoutSeconds=1e99", "limit=-5", "limit=99999999999999999999", "resourceVersion=abc", "timeout=abc",
             "resourceVersion=0&limit=9223372036854775807", "watch=1&resourceVersion=99999999999999999999999"]
        i = 0
        while time.time() < end:
            x = q[i % len(q)]
            i += 1
            try:
                st, _ = once(base, "GET", f"{ns}/pods?{x}", tenant, timeout=3)
                count("numbers", f"{x} -> {st}")
            except socket.timeout:
                count("numbers", f"{x} -> stream open after 3 s")
            except (OSError, http.client.HTTPException) as e:
                count("numbers", f"{x} -> no response: {type(e).__name__}")
            time.sleep(0.02)

    @guarded
    def deep_objects():
        for levels in (130, 200, 500, 9990):
            o = json.dumps({"apiVersion": f"{GROUP}/v1", "kind": "Deep", "metadata": {"name": f"deep-{levels}"}, "spec": {}})
            o = o.replace('"spec": {}', '"spec": ' + deep(levels)).encode()
            st, data = once(base, "POST", f"/apis/{GROUP}/v1/namespaces/{TENANT_NS}/deeps", tenant, o)
            count("deep_create", f"{levels} levels -> {st}")
        p = f"/apis/{GROUP}/v1/namespaces/{TENANT_NS}/deeps"
        loop("deep_reads", [("GET", p + "?resourceVersion=0", None), ("GET", p + "/deep-500", None), ("GET", p, None),
                            ("GET", p + "?watch=1&resourceVersion=0&timeoutSeconds=1", None)], lambda: tenant, pause=0.05)

    @guarded
    def wide_objects():
        p = f"/apis/{GROUP}/v1/namespaces/{TENANT_NS}/wides"
        for i in range(20):
            o = {"apiVersion": f"{GROUP}/v1", "kind": "Wide", "metadata": {"name": f"wide-{i:02d}"}, "spec": {"blob": "w" * 100_000}}
            st, _ = once(base, "POST", p, tenant, o)
            count("wide_create", st)
        done = threading.Event()

        def tables():
            c = conn(base, timeout=60)
            while time.time() < end:
                try:
                    st, data = call(c, "GET", p, tenant, headers={"Accept": TABLE})
                    count("wide_table_lists", st)
                    with lock:
                        out["wide_table_bytes_max"] = max(out.get("wide_table_bytes_max", 0), len(data))
                except (OSError, http.client.HTTPException) as e:
                    count("wide_table_lists", f"no response: {type(e).__name__}")
                    c.close()
                    c = conn(base, timeout=60)
            c.close()

        ts = [threading.Thread(target=tables) for _ in range(2)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        done.set()

    def pretty_loop(i):
        ua = {"User-Agent": "curl/8.5.0"} if i == a.pretty_loops else {}
        path = "/api/v1/pods?resourceVersion=0" + ("" if ua else "&pretty=true")
        c = conn(base, timeout=120)
        while time.time() < end:
            try:
                c.request("GET", path, headers={"Authorization": "Bearer " + reader, "Accept": "application/json", **ua})
                r = c.getresponse()
                n = 0
                while True:
                    chunk = r.read(1 << 20)
                    if not chunk:
                        break
                    n += len(chunk)
                count("pretty_lists", f"{'curl UA' if ua else 'pretty=true'} -> {r.status}")
                count("pretty_bytes", "total", n)
            except (OSError, http.client.HTTPException) as e:
                count("pretty_lists", f"no response: {type(e).__name__}")
                c.close()
                c = conn(base, timeout=120)
        c.close()

    def raw_request(token, path, headers=""):
        """Send a GET and never read past the status line: a client that stopped reading."""
        s = rawwatch.send_get(base, token, path, rcvbuf=4096, headers=headers)
        head = b""
        while b"\r\n" not in head:
            b = s.recv(1)
            if not b:
                break
            head += b
        st = head.split(b" ", 2)[1].decode() if b" " in head else "no response"
        return s, st

    @guarded
    def stalled():
        held = []
        while time.time() < end:
            batch = []
            for _ in range(a.stalled_watches):
                if time.time() >= end:
                    break
                try:
                    s, st = raw_request(tenant_b, f"{ns}/configmaps?watch=1&resourceVersion=0&timeoutSeconds=3600")
                    count("stalled_watches", st)
                    batch.append(s)
                except OSError as e:
                    count("stalled_watches", f"no response: {type(e).__name__}")
            for i in range(6):
                for path, hdr in (("/api/v1/pods?resourceVersion=0&pretty=true", ""), ("/api/v1/pods?resourceVersion=0", "Accept-Encoding: gzip\r\n")):
                    try:
                        s, st = raw_request(reader, path, hdr)
                        count("stalled_lists", f"{'pretty' if 'pretty' in path else 'gzip'} -> {st}")
                        batch.append(s)
                    except OSError as e:
                        count("stalled_lists", f"no response: {type(e).__name__}")
            for s in held:
                s.close()
            held = batch
            time.sleep(max(0, min(20, end - time.time())))
        for s in held:
            s.close()

    @guarded
    def stalled_reader():
        """A LIST of every pod left unread past kache's stall timeout, then read (at most 30 s):
        closed by kache, or still open."""
        while time.time() + 25 < end:
            s, st = raw_request(reader, "/api/v1/pods?resourceVersion=0")
            time.sleep(20)
            s.settimeout(5)
            got, how = 0, "still open"
            until = min(time.time() + 30, end)
            try:
                while time.time() < until:
                    chunk = s.recv(1 << 20)
                    if not chunk:
                        how = "closed by kache"
                        break
                    got += len(chunk)
            except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
                how = "closed by kache"
            except socket.timeout:
                pass
            s.close()
            count("stalled_reader", f"HTTP {st}, {how}")
            count("stalled_reader_bytes", how, got)

    @guarded
    def many_watches():
        ts = [threading.Thread(target=guarded(some_watches), args=()) for _ in range(4)]
        [t.start() for t in ts]
        [t.join() for t in ts]

    def some_watches():
        held = []
        for i in range(a.max_watches // 4):
            if time.time() >= end:
                break
            try:
                s, st = raw_request(tenant, f"{ns}/pods?watch=1&timeoutSeconds=3600")
                count("watches_one_account", st)
                if st == "200":
                    held.append(s)
                else:
                    s.close()
            except OSError as e:
                count("watches_one_account", f"no response: {type(e).__name__}")
        while time.time() < end:
            time.sleep(0.5)
        for s in held:
            s.close()

    @guarded
    def junk_tokens():
        loop("junk_tokens", [("GET", "/api/v1/namespaces/default/pods?limit=1", None), ("GET", "/api/v1/pods?resourceVersion=0&limit=1", None)],
             lambda: base64.b64encode(os.urandom(24)).decode())

    @guarded
    def anonymous():
        loop("anonymous", [("GET", "/api/v1/namespaces/default/pods?limit=1", None), ("GET", "/api/v1/pods?watch=1&timeoutSeconds=1", None),
                           ("GET", "/apis", None)], lambda: None, pause=0.02)

    @guarded
    def forged():
        forge = lambda: {"X-Remote-User": "admin", "X-Remote-Group": "system:masters", "X-Remote-Extra-Scopes": "all"}  # noqa: E731
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "forged"}}
        loop("forged", [("GET", "/api/v1/namespaces/kube-system/secrets", None), ("GET", f"/api/v1/namespaces/{a.ns}/pods?resourceVersion=0", None),
                        ("GET", "/api/v1/pods?resourceVersion=0&limit=5", None), ("POST", f"/api/v1/namespaces/{a.ns}/configmaps", cm),
                        ("GET", f"/api/v1/namespaces/{a.ns}/configmaps?watch=1&timeoutSeconds=1", None)],
             lambda: tenant, pause=0.02, headers_fn=forge)

    @guarded
    def impersonation():
        loop("impersonation", [("GET", f"/api/v1/namespaces/{a.ns}/pods?resourceVersion=0", None), ("GET", "/api/v1/nodes?resourceVersion=0&limit=1", None)],
             lambda: tenant, pause=0.05, headers_fn=lambda: {"Impersonate-User": "admin", "Impersonate-Group": "system:masters"})

    @guarded
    def exec_upgrades():
        spdy = {"Connection": "Upgrade", "Upgrade": "SPDY/3.1", "X-Stream-Protocol-Version": "v4.channel.k8s.io"}
        ws = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
              "Sec-WebSocket-Protocol": "v5.channel.k8s.io"}
        i = 0
        while time.time() < end:
            hdr = spdy if i % 2 == 0 else ws
            method = "POST" if i % 2 == 0 else "GET"
            target = f"{ns}/pods/nope/exec?command=sh&stdin=true&stdout=true" if i % 3 else f"/api/v1/namespaces/{a.ns}/pods/nope/exec?command=sh&stdout=true"
            try:
                st, _ = once(base, method, target, tenant, headers=hdr, timeout=30)
                count("exec_upgrades", f"{hdr['Upgrade']} -> {st}")
            except (OSError, http.client.HTTPException) as e:
                count("exec_upgrades", f"no response: {type(e).__name__}")
            i += 1
            time.sleep(0.2)

    threads = [numbers, deep_objects, wide_objects, stalled, stalled_reader, many_watches, junk_tokens, anonymous, forged, impersonation,
               exec_upgrades]
    only = set(a.only.split(",")) if a.only else None
    ts = [threading.Thread(target=f, daemon=True) for f in threads if not only or f.__name__.split(".")[-1] in only]
    if not only or "pretty" in only:
        ts += [threading.Thread(target=guarded(lambda i=i: pretty_loop(i)), daemon=True) for i in range(a.pretty_loops + 1)]
    [t.start() for t in ts]
    for t in ts:
        t.join(max(0.1, end + 60 - time.time()))
    out["threads_unfinished"] = sum(t.is_alive() for t in ts)
    out["cpu_seconds"] = round(sum(os.times()[:2]), 1)
    print(json.dumps(out), flush=True)
    os._exit(0)


# ---------------------------------------------------------------------------------------
# The run


def check_informer(got, ref, writes):
    """The informer's events against the apiserver's own watch from the same RV."""
    g = [(t, n, rv) for t, n, rv, _ in got]
    r = [(t, n, rv) for t, n, rv, _ in ref]
    k = min(len(g), len(r))
    first_diff = next((i for i in range(k) if g[i] != r[i]), None)
    dups = len(g) - len(set(g))
    order = all(g[i][2] < g[i + 1][2] for i in range(len(g) - 1))
    rvs = {rv for _, _, rv in g}
    missing_writes = [w for w in writes if w[0] != "DELETED" and w[2] not in rvs]
    return {"events": len(g), "reference_events": len(r), "equal_to_reference": g == r, "first_difference": first_diff,
            "duplicates": dups, "rv_strictly_increasing": order, "writes": len(writes), "writes_not_seen": len(missing_writes),
            "ok": g == r and dups == 0 and order and not missing_writes and len(g) > 0}


def wide_table(base, direct, token):
    """The wide objects' Table through kache (resourceVersion=0, from its cache) and from the
    apiserver: sizes, and whether the cells are the same (None when either did not answer 200)."""
    p = f"/apis/{GROUP}/v1/namespaces/{TENANT_NS}/wides"
    try:
        st_k, tk = once(base, "GET", p + "?resourceVersion=0", token, headers={"Accept": TABLE})
        st_d, td = once(direct, "GET", p, token, headers={"Accept": TABLE})
    except (OSError, http.client.HTTPException) as e:
        return {"error": f"{type(e).__name__}: {e}"}
    cells = lambda t: [r["cells"] for r in json.loads(t).get("rows") or []]  # noqa: E731
    return {"kache_rv0": f"HTTP {st_k}, {len(tk)} bytes", "apiserver": f"HTTP {st_d}, {len(td)} bytes",
            "cells_equal": cells(tk) == cells(td) if st_k == 200 and st_d == 200 else None}


def lag_of(got, writes):
    at = {(t, n, rv): ts for t, n, rv, ts in got}
    lags = []
    for t, n, rv, ts in writes:
        if t != "DELETED" and (t, n, rv) in at:
            lags.append((ts, at[(t, n, rv)] - ts))
    return lags


def main():
    if a.worker == "hostile":
        return hostile_worker()
    direct = realapi.server(REAL)
    admin_tok = realapi.token("admin", REAL)
    work = tempfile.mkdtemp(prefix="kache-hostile-")
    print(f"work dir {work}", flush=True)
    tokens = setup(direct, admin_tok)
    tokens["reader"] = realapi.token("reader", REAL)
    k = base = admin = None
    result = {"seconds": a.seconds, "kache_args": a.kache_arg}
    try:
        t = time.time()
        k, base, admin = start_kache(work)
        result["kache_ready_seconds"] = round(time.time() - t, 1)
        time.sleep(2)
        r_ready = rss_kb(k.pid)
        m_ready = scrape(admin)
        cache_ready = debug_cache(admin)
        print(f"kache ready in {result['kache_ready_seconds']} s at {base}, RSS {r_ready // 1024} MB", flush=True)

        # a pod of ns-001 for the GETs
        st, data = once(base, "GET", f"/api/v1/namespaces/{a.ns}/pods?limit=1", admin_tok)
        pod = must("a pod of " + a.ns, st, data)["items"][0]["metadata"]["name"]

        rss = []
        stop_rss = threading.Event()

        def sample_rss():
            while not stop_rss.is_set():
                rss.append((time.time(), rss_kb(k.pid)))
                time.sleep(0.2)

        threading.Thread(target=sample_rss, daemon=True).start()
        # informer and reference from kache's RV
        st, data = once(base, "GET", f"/api/v1/namespaces/{HONEST_NS}/pods?resourceVersion=0", admin_tok)
        rv = must("informer LIST", st, data)["metadata"]["resourceVersion"]
        inf = Informer(base, admin_tok, rv, "kache")
        ref = Informer(direct, admin_tok, rv, "apiserver")
        inf.opened.wait(30), ref.opened.wait(30)
        writes, stop = [], threading.Event()
        samples = Samples()
        cachedir = f"{work}/kubectl-cache"
        subprocess.run(["kubectl", "--kubeconfig", f"{work}/kache.kubeconfig", "get", "ns"], capture_output=True, env=dict(os.environ, KUBECACHEDIR=cachedir))
        workers = [threading.Thread(target=writer, args=(direct, admin_tok, stop, writes), daemon=True),
                   threading.Thread(target=kubectl_loop, args=(f"{work}/kache.kubeconfig", cachedir, pod, samples, stop), daemon=True),
                   *[threading.Thread(target=http_loop, args=(base, admin_tok, pod, samples, stop, i), daemon=True) for i in range(3)],
                   threading.Thread(target=http_loop, args=(direct, admin_tok, pod, samples, stop, 0, True), daemon=True)]
        procs = {"kache": k.pid, "kube-apiserver": pid_file("kube-apiserver"), "etcd": pid_file("etcd")}
        cpu = lambda: ({n: cpu_s(pid) for n, pid in procs.items()}, machine_busy(), {n: run_delay(pid) for n, pid in procs.items()})  # noqa: E731
        c0 = cpu()
        q0 = apiserver_requests(direct, admin_tok)
        t0 = time.time()
        [w.start() for w in workers]
        time.sleep(a.seconds)
        t1 = time.time()
        c1 = cpu()
        q1 = apiserver_requests(direct, admin_tok)
        m_base = scrape(admin)
        rss_base_peak = max(v for ts, v in rss if ts >= t0)
        print(f"baseline done: RSS peak {rss_base_peak // 1024} MB; hostile tenant starts", flush=True)
        env = dict(os.environ, KACHE_HOSTILE=json.dumps({"base": base, "end": t1 + a.seconds, "tokens": tokens}))
        sched = ["chrt", "-i", "0"] if a.hostile_nice is None else ["nice", "-n", str(a.hostile_nice)]
        h = subprocess.Popen([*sched, sys.executable, os.path.abspath(__file__), "--worker", "hostile",
                              "--stalled-watches", str(a.stalled_watches), "--max-watches", str(a.max_watches),
                              "--pretty-loops", str(a.pretty_loops), "--ns", a.ns, "--real", a.real, "--only", a.only],
                             env=env, stdout=subprocess.PIPE, stderr=open(f"{work}/hostile.err", "w"))
        time.sleep(max(0, t1 + a.seconds - time.time()))
        t2 = time.time()
        c2 = cpu()
        q2 = apiserver_requests(direct, admin_tok)
        m_hostile = scrape(admin)
        cache_hostile = debug_cache(admin)
        stop.set()
        try:
            hout, _ = h.communicate(timeout=120)
            hostile = json.loads(hout.decode().strip().splitlines()[-1])
        except Exception as e:  # noqa: BLE001
            h.kill()
            hostile = {"error": f"{type(e).__name__}: {e}"}
        for w in workers:
            w.join(60)
        # the informer catches up with the writer's last write (bounded)
        last = max((rv for _, _, rv, _ in writes if rv), default=0)
        end = time.time() + 60
        while time.time() < end and (not inf.events or inf.events[-1][2] < last or len(ref.events) != len(inf.events)):
            time.sleep(0.2)
        time.sleep(1)
        inf.stop.set(), ref.stop.set()
        stop_rss.set()
        hwm = rss_kb(k.pid, "VmHWM")
        m_end = scrape(admin)
        alive = k.poll() is None

        # -- report
        def stats(lo, hi):
            by = {}
            for ts, cls, secs, ok in samples.items:
                if lo <= ts < hi:
                    d = by.setdefault(cls, {"lat": [], "failed": 0})
                    d["lat"].append(secs)
                    d["failed"] += 0 if ok else 1
            lag = [x for ts, x in lag_of(inf.events, writes) if lo <= ts < hi]
            if lag:
                by["informer event lag"] = {"lat": lag, "failed": 0}
            lag = [x for ts, x in lag_of(ref.events, writes) if lo <= ts < hi]
            if lag:
                by["apiserver's own watch: event lag (not gated)"] = {"lat": lag, "failed": 0}
            return {c: {"n": len(d["lat"]), "failed": d["failed"], "p50_ms": round(pct(d["lat"], 50) * 1000, 1),
                        "p99_ms": round(pct(d["lat"], 99) * 1000, 1)} for c, d in by.items()}

        sb, sh = stats(t0, t1), stats(t1, t2 + 0.001)
        honest = []
        for cls in sb:
            b, hh = sb[cls], sh.get(cls)
            ratio = round(hh["p99_ms"] / b["p99_ms"], 2) if hh and b["p99_ms"] else None
            honest.append({"client": cls, "baseline": b, "hostile": hh, "p99_ratio": ratio})
        informer = check_informer(inf.events, ref.events, writes)
        informer.update({"resumes": inf.resumes, "errors": inf.errors[:5], "reference_resumes": ref.resumes})

        caches = {(c["resource"], c["group"], c["encoding"]): c for c in cache_hostile["caches"]}
        cache_bytes = lambda dc: sum(c["bytes"] for c in dc["caches"])  # noqa: E731
        window = flag_value("cache-window-bytes", 33554432)
        wbufs = flag_value("max-watch-buffers-bytes", 1073741824)
        encodes = flag_value("max-concurrent-encodes", 64)
        conns = a.stalled_watches + 12 + 1 + min(a.max_watches, flag_value("max-watches-per-client", 1000)) + a.pretty_loops + 1 + 20
        terms = {"R_ready": r_ready * 1024, "windows": len(caches) * window, "objects_created": max(0, cache_bytes(cache_hostile) - cache_bytes(cache_ready)),
                 "watch_buffers": wbufs, "encodes": encodes * (1 << 20), "connections": conns * 64 * 1024, "fixed": 128 << 20}
        bound = sum(terms.values())
        peak = max(hwm * 1024, max(v for _, v in rss) * 1024)
        limits = {k2.split('"')[1]: m_end[k2] - m_base.get(k2, 0) for k2 in m_end if k2.startswith("kache_limit_hits_total{")}
        counters = {}
        for k2 in m_end:
            if k2.startswith(("kache_watchers_ended_slow_total", "kache_objects_skipped_total", "kache_informer_relists_total", "kache_informer_watch_restarts_total",
                              "kache_upstream_faults_total")):
                d = m_end[k2] - m_ready.get(k2, 0)
                if d:
                    counters[k2] = d
        log = open(f"{work}/kache.log").read()
        panics = log.count("panicked")
        leaks = sum(hostile.get("leaks", {}).values()) if isinstance(hostile.get("leaks"), dict) else 0
        custom = {f"{c['resource']}.{c['group']} {c['encoding']}": {"synced": c["synced"], "objects": c["objects"], "bytes": c["bytes"]}
                  for c in cache_hostile["caches"] if c["group"] == GROUP}
        wide = wide_table(base, direct, admin_tok)

        def cpu_use(x, y, secs):
            d = {n: round((y[0][n] - x[0][n]) / secs, 2) for n in x[0]}
            d["machine, cores busy"] = round((y[1][0] - x[1][0]) / max(1, y[1][1] - x[1][1]) * os.cpu_count(), 2)
            for n in x[2]:
                d[f"{n} runqueue wait (s/s)"] = round((y[2][n] - x[2][n]) / secs, 2)
            return d

        (base_reqs, base_secs), (host_reqs, host_secs) = split_seconds(per_second(q0, q1, t1 - t0)), split_seconds(per_second(q1, q2, t2 - t1))
        result.update({
            "cores_used": {"baseline": cpu_use(c0, c1, t1 - t0), "hostile": cpu_use(c1, c2, t2 - t1)},
            "apiserver_requests_per_second": {"baseline": base_reqs, "hostile": host_reqs},
            "apiserver_request_seconds_per_second": {"baseline": base_secs, "hostile": host_secs},
            "kache_counters_hostile_phase": {k2: m_hostile[k2] - m_base.get(k2, 0) for k2 in m_hostile
                                             if k2.startswith(("kache_freshness_probes_total", "kache_passthrough_total")) and m_hostile[k2] != m_base.get(k2, 0)},
            "honest": honest, "informer": informer,
            "rss": {"ready_mb": r_ready // 1024, "baseline_peak_mb": rss_base_peak // 1024,
                    "hostile_peak_mb": max((v for ts, v in rss if t1 <= ts), default=0) // 1024, "vmhwm_mb": hwm // 1024,
                    "bound_mb": bound >> 20, "bound_terms_mb": {k2: round(v / 2**20, 1) for k2, v in terms.items()}},
            "limit_hits_hostile_phase": limits, "counters_run": counters, "custom_caches": custom, "wide_table": wide,
            "watch_buffered_bytes_at_end_of_hostile": m_hostile.get("kache_watch_buffered_bytes"),
            "panics": panics, "kache_alive": alive, "leaks": leaks, "hostile": hostile,
            "log_warnings": len(re.findall(r"\bWARN\b", log)), "log_errors": len(re.findall(r"\bERROR\b", log)),
        })
        bad = []
        if peak > bound:
            bad.append(f"RSS peak {peak >> 20} MB over the bound {bound >> 20} MB")
        result["honest_failures"] = samples.failures
        for x in honest:
            if "not gated" in x["client"]:
                continue
            if x["p99_ratio"] is None or x["p99_ratio"] > 2:
                bad.append(f"{x['client']}: p99 ratio {x['p99_ratio']}")
        if not informer["ok"]:
            bad.append("informer incorrect")
        if wide.get("cells_equal") is False:
            bad.append("the wide objects' Table cells differ from the apiserver's")
        if panics:
            bad.append(f"{panics} panics")
        if leaks:
            bad.append(f"{leaks} leaks")
        if not alive:
            bad.append("kache exited")
        result["failed"] = bad
        md = markdown(result)
        print(json.dumps(result, indent=1))
        print(md)
        if a.json:
            open(a.json, "w").write(json.dumps(result, indent=1))
        if a.md:
            open(a.md, "w").write(md)
        return 1 if bad else 0
    finally:
        if k and k.poll() is None:
            k.send_signal(signal.SIGTERM)
            try:
                k.wait(40)
            except subprocess.TimeoutExpired:
                k.kill()
        if not a.keep:
            cleanup(direct, admin_tok)


def markdown(r):
    L = ["| honest client | baseline n | baseline p50 / p99 ms | hostile n | hostile p50 / p99 ms | p99 ratio | failed (base/hostile) |",
         "|---|---|---|---|---|---|---|"]
    for x in r["honest"]:
        b, h = x["baseline"], x["hostile"] or {}
        L.append(f"| {x['client']} | {b['n']} | {b['p50_ms']} / {b['p99_ms']} | {h.get('n')} | {h.get('p50_ms')} / {h.get('p99_ms')} | "
                 f"{x['p99_ratio']}x | {b['failed']} / {h.get('failed')} |")
    i, s = r["informer"], r["rss"]
    L += ["", f"Informer: {i['events']} events through kache, {i['reference_events']} from the apiserver's own watch; equal: "
          f"{i['equal_to_reference']}; duplicates {i['duplicates']}; RVs increasing: {i['rv_strictly_increasing']}; "
          f"writes {i['writes']}, not seen {i['writes_not_seen']}; resumes {i['resumes']}.",
          "", f"RSS: ready {s['ready_mb']} MB, baseline peak {s['baseline_peak_mb']} MB, hostile peak {s['hostile_peak_mb']} MB "
          f"(VmHWM {s['vmhwm_mb']} MB); bound {s['bound_mb']} MB = " + " + ".join(f"{k} {v}" for k, v in s["bound_terms_mb"].items()) + ".",
          "", "Cores used (baseline -> hostile): " + ", ".join(f"{n} {r['cores_used']['baseline'][n]} -> {r['cores_used']['hostile'][n]}"
                                                             for n in r["cores_used"]["baseline"]) + f"; the hostile tenant's own processes {r['hostile'].get('cpu_seconds')} CPU s.",
          "", "The apiserver's requests a second (every client's; baseline -> hostile): "
          + ", ".join(f"{k} {r['apiserver_requests_per_second']['baseline'].get(k, 0)} -> {v}" for k, v in list(r["apiserver_requests_per_second"]["hostile"].items())[:8]) + ".",
          "", "Limit hits in the hostile phase: " + ", ".join(f"{k} {int(v)}" for k, v in r["limit_hits_hostile_phase"].items()) + ".",
          "", f"Wide objects' Table: kache {r['wide_table'].get('kache_rv0')}, apiserver {r['wide_table'].get('apiserver')}; "
          f"cells equal: {r['wide_table'].get('cells_equal')}. Stalled list reader: {r['hostile'].get('stalled_reader')}.",
          "", f"Panics: {r['panics']}; leaks: {r['leaks']}; kache alive at the end: {r['kache_alive']}; failed: {r['failed'] or 'none'}."]
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    sys.exit(main())
