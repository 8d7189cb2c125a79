"""The real kube-apiserver the load scripts run against (../shared/real-apiserver's) and how
they talk to it and to a kache in front of it: its directory (`home`: a script's --real flag,
else $REAL_APISERVER, else ~/real-apiserver), the server its kubeconfig names (`server`; the
main apiserver listens on `MAIN`), its static bearer tokens (`token`, or `token_file` for a
--token-file flag), the TLS context for both (`tls`: their serving certificates come from
CAs of their own, which the scripts do not verify), one bearer-token request (`request`) and
a writer that moves the global resourceVersion as a real cluster's leases do (`move_rv`)."""
import json, os, re, ssl, threading, time, urllib.error, urllib.request

# The main apiserver's address, as its kubeconfig names it.
MAIN = "https://127.0.0.1:6443"


def home(path=None):
    """The real apiserver's directory (kubeconfig, tokens, bin/, pki/)."""
    return os.path.expanduser(path or os.environ.get("REAL_APISERVER", "~/real-apiserver"))


def token_file(path):
    """The bearer token a file holds."""
    return open(os.path.expanduser(path)).read().strip()


def token(name="admin", real=None):
    """One of the apiserver's static tokens (`admin`, `reader`, `nobody`)."""
    return token_file(f"{home(real)}/{name}.token")


def server(real=None):
    """The server the apiserver's kubeconfig names."""
    return re.search(r"server:\s*(\S+)", open(f"{home(real)}/kubeconfig").read()).group(1)


def tls():
    """A client TLS context that does not verify the server (a new one: callers may set ALPN)."""
    return ssl._create_unverified_context()


def request(base, path, bearer, method="GET", body=None, accept="application/json", timeout=None, ctx=None):
    """One request with a bearer token: (status, seconds to the end of its body, body). An HTTP
    error's status is returned, not raised; `body` (bytes, or a JSON value) is sent as
    application/json; `accept=None` sends no Accept header."""
    h = {"Authorization": "Bearer " + bearer}
    if accept:
        h["Accept"] = accept
    if body is not None:
        body = body if isinstance(body, bytes) else json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    r = urllib.request.Request(base + path, data=body, method=method, headers=h)
    t = time.time()
    try:
        with urllib.request.urlopen(r, context=ctx or _TLS, timeout=timeout) as resp:
            data, code = resp.read(), resp.status
    except urllib.error.HTTPError as e:
        data, code = e.read(), e.code
    return code, time.time() - t, data


def move_rv(base, bearer, namespace="default", name="kache-rv-mover", every=0.2, stop=None):
    """Start a thread that writes the ConfigMap `name` in `namespace` every `every` seconds
    (PUT, or POST while it is not there) until `stop` (a threading.Event) is set."""
    def run():
        cms, i = f"/api/v1/namespaces/{namespace}/configmaps", 0
        while not (stop and stop.is_set()):
            cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"i": str(i)}}
            if request(base, f"{cms}/{name}", bearer, "PUT", cm)[0] >= 400:
                request(base, cms, bearer, "POST", cm)
            i += 1
            time.sleep(every)
    threading.Thread(target=run, daemon=True).start()


_TLS = tls()
