#!/usr/bin/env python3
"""Do watches passed through to a real kube-apiserver starve everything else?
Latency (p50/p99) of a non-admin client's requests through kache and directly against the
apiserver, first with nothing else open, then with WATCHES watches held open (passed through
by kache: Table watches with includeObject=Object and legacy /watch/ paths of one object,
spread over several service accounts so the per-client bound is not what answers), then
again after they are closed (the machine's own noise), and last while a writer changes
ConfigMaps 50 times a second with --stall-payload-bytes each (phase churn), then the same
beside one passed-through watch whose client stopped reading (phase stalled: a Table
watch with includeObject=Object of those ConfigMaps, read by nobody, on a socket with a 4 KB
receive buffer). A probe that gets no answer within 10 s counts as a timeout at 10 s.

    python3 loadtest/real/starvation.py --kache-bin target/release/kache -n 200 --watches 500

The probes, one at a time, as user `reader` (group:readers; a Role in the namespace lets it
write ConfigMaps there). kache runs with its TokenReview and SubjectAccessReview caches off
(TTL 0), so every probe through kache costs a TokenReview and (for cached reads) a
SubjectAccessReview on kache's own upstream connections:
  get0   a cached RV=0 GET of one pod
  list0  a cached RV=0 LIST of one node's pods (a field selector kache indexes)
  write  a merge PATCH of a ConfigMap in --namespace (passed through, impersonating reader)
  pass   a GET of that ConfigMap as a Table with includeObject=Object (passed through)
Setup (as admin, directly): the namespace, a Role and RoleBindings, --identities service
accounts and a TokenRequest for each. Nothing is deleted. 127.0.0.1 only; bounded by -n and
--watches. Prints one line per (target, phase, probe) and kache's upstream connections.
"""
import argparse, json, random, selectors, socket, ssl, string, sys, tempfile, threading, time
import requests, urllib3
import kacheproc, rawwatch, realapi

urllib3.disable_warnings()
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"

p = argparse.ArgumentParser()
p.add_argument("--kache-bin", default="target/release/kache")
p.add_argument("--apiserver", default="https://127.0.0.1:6443")
p.add_argument("--real", default="~/real-apiserver", help="the real apiserver's directory (kubeconfig, tokens)")
p.add_argument("--namespace", default="kache-starve")
p.add_argument("-n", type=int, default=100, help="rounds of probes per phase")
p.add_argument("--watches", type=int, default=500)
p.add_argument("--identities", type=int, default=5, help="service accounts the watches are spread over")
p.add_argument("--targets", default="kache,direct")
p.add_argument("--kache-arg", action="append", default=[], help="extra flag for kache (repeatable)")
p.add_argument("--stall-payload-bytes", type=int, default=65536, help="0: no stalled-watch phase")
a = p.parse_args()
REAL = realapi.home(a.real)
NS = a.namespace
ADMIN = realapi.token("admin", REAL)
READER = realapi.token("reader", REAL)


def admin(method, path, body=None, ok=(200, 201, 409)):
    r = requests.request(method, a.apiserver + path, headers={"Authorization": "Bearer " + ADMIN}, json=body, verify=False, timeout=30)
    assert r.status_code in ok, f"{method} {path}: {r.status_code} {r.text[:300]}"
    return r


def setup():
    """Namespace, RBAC, the write target, the watchers' service accounts and their tokens."""
    admin("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}"
    rules = [{"apiGroups": [""], "resources": ["configmaps", "pods"], "verbs": ["get", "list", "watch", "create", "update", "patch"]}]
    admin("POST", rbac + "/roles", {"metadata": {"name": "starve"}, "rules": rules})
    subjects = [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "reader"}]
    subjects += [{"kind": "ServiceAccount", "name": f"watcher-{i}", "namespace": NS} for i in range(a.identities)]
    rb = {"metadata": {"name": "starve"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "starve"}, "subjects": subjects}
    if admin("POST", rbac + "/rolebindings", rb).status_code == 409:
        admin("PUT", rbac + "/rolebindings/starve", rb, ok=(200,))
    admin("POST", f"/api/v1/namespaces/{NS}/configmaps", {"metadata": {"name": "starve-target"}, "data": {"n": "0"}})
    # No controller-manager makes the namespace's default service account: the pod needs it.
    admin("POST", f"/api/v1/namespaces/{NS}/serviceaccounts", {"metadata": {"name": "default"}})
    admin("POST", f"/api/v1/namespaces/{NS}/pods", {"metadata": {"name": "starve-pod"}, "spec": {"containers": [{"name": "c", "image": "none"}]}})
    tokens = []
    for i in range(a.identities):
        admin("POST", f"/api/v1/namespaces/{NS}/serviceaccounts", {"metadata": {"name": f"watcher-{i}"}})
        r = admin("POST", f"/api/v1/namespaces/{NS}/serviceaccounts/watcher-{i}/token",
                  {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
        tokens.append(r.json()["status"]["token"])
    pod = admin("GET", "/api/v1/namespaces/ns-007/pods?limit=1").json()["items"][0]["metadata"]["name"]
    return tokens, pod


def start_kache(work):
    flags = ["--preload", "pods,configmaps", "--token-cache-ttl", "0", "--authz-cache-allow-ttl", "0", *a.kache_arg]
    return kacheproc.start(a.kache_bin, REAL, work, flags, timeout=300, context=None)


class Watches:
    """Raw HTTP/1.1 watches over TLS, one connection each, read (and counted) by one thread."""

    def __init__(self, base, tokens, n):
        host, port = base.split("//")[1].split(":")
        self.sel, self.open, self.closed, self.codes = selectors.DefaultSelector(), 0, 0, {}
        self.stop = False
        ctx = realapi.tls()
        ctx.set_alpn_protocols(["http/1.1"])
        self.socks = []
        for i in range(n):
            # Half Table watches carrying whole objects, half legacy watches of one object:
            # kache passes both through (it serves neither from cache).
            path = (f"/api/v1/namespaces/{NS}/pods?watch=1&includeObject=Object" if i % 2 == 0
                    else f"/api/v1/watch/namespaces/{NS}/pods/starve-pod")
            accept = TABLE if i % 2 == 0 else "application/json"
            s = ctx.wrap_socket(socket.create_connection((host, int(port)), timeout=30), server_hostname=host)
            req = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {tokens[i % len(tokens)]}\r\nAccept: {accept}\r\n\r\n"
            s.sendall(req.encode())
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = s.recv(65536)
                assert chunk, f"watch {i}: closed before its response head"
                head += chunk
            code = int(head.split(b" ", 2)[1])
            self.codes[code] = self.codes.get(code, 0) + 1
            s.setblocking(False)
            self.sel.register(s, selectors.EVENT_READ)
            self.socks.append(s)
            self.open += 1
        self.t = threading.Thread(target=self.drain, daemon=True)
        self.t.start()

    def drain(self):
        while not self.stop:
            for key, _ in self.sel.select(0.2):
                try:
                    data = key.fileobj.recv(65536)
                except (ssl.SSLWantReadError, BlockingIOError):
                    continue
                except OSError:
                    data = b""
                if not data:
                    self.sel.unregister(key.fileobj)
                    self.open -= 1
                    self.closed += 1

    def close(self):
        self.stop = True
        self.t.join()
        for s in self.socks:
            s.close()


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def probes(base, pod):
    s = requests.Session()
    h = {"Authorization": "Bearer " + READER}
    n = [0]

    def get0():
        return s.get(f"{base}/api/v1/namespaces/ns-007/pods/{pod}?resourceVersion=0", headers=h, verify=False, timeout=10)

    def list0():
        return s.get(f"{base}/api/v1/pods?resourceVersion=0&fieldSelector=spec.nodeName%3Dnode-0007", headers=h, verify=False, timeout=10)

    def write():
        n[0] += 1
        return s.patch(f"{base}/api/v1/namespaces/{NS}/configmaps/starve-target", data=json.dumps({"data": {"n": str(n[0])}}),
                       headers={**h, "Content-Type": "application/merge-patch+json"}, verify=False, timeout=10)

    def passthrough():
        return s.get(f"{base}/api/v1/namespaces/{NS}/configmaps/starve-target?includeObject=Object", headers={**h, "Accept": TABLE},
                     verify=False, timeout=10)

    return [("get0", get0), ("list0", list0), ("write", write), ("pass", passthrough)]


def measure(target, phase, base, pod):
    ps = probes(base, pod)
    for _, f in ps:
        try:
            f()  # warm the connection
        except requests.RequestException:
            pass
    times = {name: [] for name, _ in ps}
    codes = {name: {} for name, _ in ps}
    for _ in range(a.n):
        for name, f in ps:
            t = time.time()
            try:
                code = f().status_code
            except requests.RequestException:
                code = "timeout"
            times[name].append(time.time() - t)
            codes[name][code] = codes[name].get(code, 0) + 1
        time.sleep(0.05)
    for name, ts in times.items():
        print(f"{target:6} {phase:8} {name:6} n={len(ts)} codes={codes[name]} p50={pct(ts, .5)*1000:.1f}ms "
              f"p99={pct(ts, .99)*1000:.1f}ms max={max(ts)*1000:.1f}ms", flush=True)


def connections(adm):
    out = {}
    for line in requests.get(adm + "/metrics", timeout=10).text.splitlines():
        if line.startswith("kache_upstream_connections{"):
            out[line.split('class="')[1].split('"')[0]] = line.split()[-1]
    return out


def stalled_watch(base, token):
    """A passed-through watch read up to its response head and never again."""
    path = f"/api/v1/namespaces/{NS}/configmaps?watch=1&includeObject=Object"
    return rawwatch.open_watch(base, token, path, accept=TABLE, rcvbuf=4096, timeout=None)


def churn(stop, rate=50, objects=10):
    """Change --stall-payload-bytes of ConfigMaps in NS `rate` times a second, directly."""
    s = requests.Session()
    h = {"Authorization": "Bearer " + ADMIN, "Content-Type": "application/merge-patch+json"}
    t0, i = time.time(), 0
    while not stop.is_set():
        time.sleep(max(0, t0 + i / rate - time.time()))
        value = "".join(random.choices(string.ascii_letters, k=a.stall_payload_bytes))
        s.patch(f"{a.apiserver}/api/v1/namespaces/{NS}/configmaps/stall-{i % objects}", data=json.dumps({"data": {"v": value}}),
                headers=h, verify=False, timeout=30)
        i += 1


def run_stalled(target, base, pod, tokens):
    for i in range(10):
        admin("POST", f"/api/v1/namespaces/{NS}/configmaps", {"metadata": {"name": f"stall-{i}"}})
    stop = threading.Event()
    t = threading.Thread(target=churn, args=(stop,), daemon=True)
    t.start()
    measure(target, "churn", base, pod)  # the changes alone: their cost to the machine
    w = stalled_watch(base, tokens[0])
    time.sleep(5)  # let the changes pile up behind the stalled reader
    measure(target, "stalled", base, pod)
    stop.set()
    t.join()
    w.close()


def run(target, base, pod, tokens, adm=None):
    measure(target, "baseline", base, pod)
    t = time.time()
    w = Watches(base, tokens, a.watches)
    print(f"{target:6} opened {a.watches} watches in {time.time()-t:.1f}s: codes={w.codes}"
          + (f" upstream connections={connections(adm)}" if adm else ""), flush=True)
    measure(target, "watches", base, pod)
    print(f"{target:6} watches still open after the probes: {w.open} (closed {w.closed})", flush=True)
    w.close()
    # Again with the watches closed: what the machine's load alone does to the tail.
    measure(target, "after", base, pod)
    if a.stall_payload_bytes:
        run_stalled(target, base, pod, tokens)


def main():
    tokens, pod = setup()
    targets = a.targets.split(",")
    if "kache" in targets:
        with tempfile.TemporaryDirectory(prefix="kache-starve-") as work:
            k, base, adm = start_kache(work)
            print("kache:", " ".join(k.args), flush=True)
            try:
                run("kache", base, pod, tokens, adm)
                print(f"kache  upstream connections after the watches closed: {connections(adm)}", flush=True)
            finally:
                k.terminate()
                k.wait()
    if "direct" in targets:
        run("direct", a.apiserver, pod, tokens)


if __name__ == "__main__":
    sys.exit(main())
