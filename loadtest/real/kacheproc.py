"""Start a kache in front of the real apiserver for the load scripts and wait until it is
ready (every preloaded cache synced): `start(kache_bin, real, work, flags)` returns the
process (its command line is `args`), kache's https base URL and its admin http base URL.
Addresses, the client kubeconfig (`work/kache.kubeconfig`) and the log (`work/kache.log`) go
to `work`. kache uses the kubeconfig's `context` (`None`: its current one)."""
import os, subprocess, time, urllib.request


def start(kache_bin, real, work, flags, timeout=600, context="admin"):
    upstream = ["--upstream-kubeconfig", f"{real}/kubeconfig", *(["--upstream-context", context] if context else [])]
    cmd = [os.path.abspath(kache_bin), "serve", *upstream,
           "--listen", "127.0.0.1:0", "--addr-file", f"{work}/addr", "--admin-listen", "127.0.0.1:0",
           "--admin-addr-file", f"{work}/admin", "--client-kubeconfig-out", f"{work}/kache.kubeconfig", *flags]
    k = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(f"{work}/kache.log", "w"))
    deadline = time.time() + timeout
    while not (os.path.exists(f"{work}/addr") and os.path.exists(f"{work}/admin")):
        assert k.poll() is None and time.time() < deadline, f"kache did not start: see {work}/kache.log"
        time.sleep(0.2)
    admin = "http://" + open(f"{work}/admin").read().strip()
    while True:
        try:
            if urllib.request.urlopen(admin + "/readyz", timeout=5).status == 200:
                break
        except Exception:
            pass
        assert k.poll() is None and time.time() < deadline, f"kache not ready: see {work}/kache.log"
        time.sleep(0.5)
    return k, "https://" + open(f"{work}/addr").read().strip(), admin
