#!/usr/bin/env python3
"""The probes of issue #23 that need the real kube-apiserver, against one kache binary:

  timeout  a watch with timeoutSeconds=9223372036854775807 (the apiserver clamps)
  deep     custom resources nested 130, 200, 500 and 9,990 levels (a CRD with
           x-kubernetes-preserve-unknown-fields): is the kind cached, with how many objects,
           relists failed, watch restarts, objects skipped, warnings logged in 30 s
  wide     a CRD with 300 printer columns whose jsonPath is `.`, 20 objects of 100 KB: kache's
           RSS growth, and a Table LIST's size through kache and from the apiserver
  pretty   six concurrent `pretty=true` LISTs of all 30,000 pods: kache's peak RSS
  tokens   2,000 random bearer tokens: statuses and time, and an honest write and read after

  python3 tools/tenant_probe_real.py BINARY [--real ~/real-apiserver]

kache is started as loadtest/real/hostile.py starts it (preload pods, nodes, namespaces,
services, configmaps in JSON and protobuf). Prints one JSON object. Wrap in
`flock /tmp/real-apiserver.lock` when others measure the same apiserver. The namespace and
CRDs it makes (kache-probe, *.probe.kache.test) are deleted at the end.
"""
import argparse, base64, json, os, re, subprocess, sys, tempfile, threading, time

sys.argv, _argv = [sys.argv[0]], sys.argv
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "loadtest", "real"))
import hostile as H  # noqa: E402  (its helpers: connections, kache start, scrape)

sys.argv = _argv
p = argparse.ArgumentParser()
p.add_argument("binary")
p.add_argument("--real", default="~/real-apiserver")
a = p.parse_args()
H.a.kache_bin, H.a.real, H.a.kache_arg = a.binary, a.real, []
H.REAL = os.path.expanduser(a.real)
NS, GROUP = "kache-probe", "probe.kache.test"


def gone(direct, admin, path):
    end = time.time() + 90
    while time.time() < end and H.once(direct, "GET", path, admin)[0] == 200:
        time.sleep(0.5)


def crd(direct, admin, plural, kind, columns):
    gone(direct, admin, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{GROUP}")
    o = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": f"{plural}.{GROUP}"},
         "spec": {"group": GROUP, "scope": "Namespaced", "names": {"plural": plural, "singular": plural[:-1], "kind": kind},
                  "versions": [{"name": "v1", "served": True, "storage": True,
                                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                                **({"additionalPrinterColumns": columns} if columns else {})}]}}
    st, data = H.once(direct, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", admin, o)
    assert st in (201, 409), (st, data[:300])
    end = time.time() + 60
    while time.time() < end:
        st, data = H.once(direct, "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{GROUP}", admin)
        if any(c["type"] == "Established" and c["status"] == "True" for c in (json.loads(data).get("status") or {}).get("conditions") or []):
            return
        time.sleep(0.2)
    raise SystemExit(f"CRD {plural} not established")


def cleanup(direct, admin):
    for plural in ("deeps", "wides"):
        H.once(direct, "DELETE", f"/apis/{GROUP}/v1/namespaces/{NS}/{plural}", admin)
        H.once(direct, "DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{GROUP}", admin)
    H.once(direct, "DELETE", f"/api/v1/namespaces/{NS}/configmaps", admin)
    H.once(direct, "DELETE", f"/api/v1/namespaces/{NS}/serviceaccounts", admin)
    H.once(direct, "DELETE", f"/api/v1/namespaces/{NS}", admin)
    st, data = H.once(direct, "GET", f"/api/v1/namespaces/{NS}", admin)
    if st == 200:
        o = json.loads(data)
        o["spec"]["finalizers"] = []
        H.once(direct, "PUT", f"/api/v1/namespaces/{NS}/finalize", admin, o)
    gone(direct, admin, f"/api/v1/namespaces/{NS}")
    for plural in ("deeps", "wides"):
        gone(direct, admin, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{GROUP}")


def peak_rss_during(pid, fn):
    peak, done = [H.rss_kb(pid)], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], H.rss_kb(pid))
            time.sleep(0.02)

    t = threading.Thread(target=sample)
    t.start()
    try:
        fn()
    finally:
        done.set()
        t.join()
    return peak[0]


def main():
    direct, admin = H.upstream(), H.token_of("admin")
    out = {"binary": a.binary}
    work = tempfile.mkdtemp(prefix="kache-probe-")
    st, _ = H.once(direct, "POST", "/api/v1/namespaces", admin, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    crd(direct, admin, "deeps", "Deep", [])
    crd(direct, admin, "wides", "Wide", [{"name": f"c{i}", "type": "string", "jsonPath": "."} for i in range(300)])
    k = None
    try:
        k, base, adm = H.start_kache(work)
        time.sleep(3)
        out["rss_ready_mb"] = H.rss_kb(k.pid) // 1024

        # timeout
        t = time.time()
        try:
            st, body = H.once(base, "GET", f"/api/v1/namespaces/{NS}/configmaps?watch=1&timeoutSeconds=9223372036854775807", admin, timeout=20)
            out["watch_timeout_max"] = f"HTTP {st}, {len(body)} bytes, {time.time() - t:.2f} s"
        except Exception as e:  # noqa: BLE001
            out["watch_timeout_max"] = f"no response: {type(e).__name__}: {e}"

        # deep: the kind's cache starts on the first request, then the objects come as watch events
        p = f"/apis/{GROUP}/v1/namespaces/{NS}/deeps"
        H.once(base, "GET", p + "?resourceVersion=0", admin)
        log_before = open(f"{work}/kache.log").read().count("\n")
        created = {}
        for levels in (130, 200, 500, 9990):
            o = json.dumps({"apiVersion": f"{GROUP}/v1", "kind": "Deep", "metadata": {"name": f"deep-{levels}"}, "spec": {}})
            o = o.replace('"spec": {}', '"spec": ' + H.deep(levels)).encode()
            st, _ = H.once(direct, "POST", p, admin, o)
            created[levels] = st
        time.sleep(30)
        st, body = H.once(base, "GET", p + "?resourceVersion=0", admin)
        # (Python's json cannot parse an object 9,990 levels deep: the names by pattern)
        names = sorted(set(re.findall(rb'"name":"(deep-[0-9]+)"', body))) if st == 200 else []
        names = [n.decode() for n in names]
        m = H.scrape(adm)
        try:
            cache = [c for c in H.debug_cache(adm)["caches"] if c["resource"] == "deeps"]
        except Exception:  # noqa: BLE001  (no /debug/cache in older builds)
            cache = []
        new_log = open(f"{work}/kache.log").read().splitlines()[log_before:]
        out["deep"] = {
            "created (levels: HTTP status)": created,
            "kache LIST RV=0": f"HTTP {st}, items {sorted(names)}",
            "cache": {c["encoding"]: {"synced": c["synced"], "objects": c["objects"]} for c in cache},
            "kache_cache_objects": {k2: v for k2, v in m.items() if k2.startswith("kache_cache_objects{") and "deeps" in k2},
            "relists_failed": sum(v for k2, v in m.items() if k2.startswith("kache_informer_relists_total{resource=\"deeps\"") and 'outcome="failed"' in k2),
            "watch_restarts": sum(v for k2, v in m.items() if k2.startswith("kache_informer_watch_restarts_total{resource=\"deeps\"")),
            "objects_skipped": {k2: v for k2, v in m.items() if k2.startswith("kache_objects_skipped_total") and v},
            "log_lines_in_30s": len(new_log),
            "warn_lines_in_30s": sum(1 for line in new_log if "WARN" in line),
            "requests_from_cache": m.get('kache_requests_total{verb="list",source="cache",code="200"}'),
        }

        # wide
        w = f"/apis/{GROUP}/v1/namespaces/{NS}/wides"
        H.once(base, "GET", w + "?resourceVersion=0", admin)
        time.sleep(2)
        r0 = H.rss_kb(k.pid)
        for i in range(20):
            o = {"apiVersion": f"{GROUP}/v1", "kind": "Wide", "metadata": {"name": f"wide-{i:02d}"}, "spec": {"blob": "w" * 100_000}}
            st, _ = H.once(direct, "POST", w, admin, o)
            assert st == 201, st
        time.sleep(5)
        r1 = H.rss_kb(k.pid)
        table = "application/json;as=Table;v=v1;g=meta.k8s.io"
        st_k, tk = H.once(base, "GET", w, admin, headers={"Accept": table})
        st_kc, tkc = H.once(base, "GET", w + "?resourceVersion=0", admin, headers={"Accept": table})
        st_d, td = H.once(direct, "GET", w, admin, headers={"Accept": table})
        r2 = H.rss_kb(k.pid)
        m = H.scrape(adm)
        out["wide"] = {"rss_before_mb": r0 // 1024, "rss_after_20_objects_mb": r1 // 1024, "rss_after_tables_mb": r2 // 1024,
                       "growth_mb": (max(r1, r2) - r0) // 1024,
                       "table_kache_consistent": f"HTTP {st_k}, {len(tk)} bytes", "table_kache_rv0": f"HTTP {st_kc}, {len(tkc)} bytes",
                       "table_apiserver": f"HTTP {st_d}, {len(td)} bytes",
                       "cells_equal_apiserver": st_kc == 200 and st_d == 200 and
                       [r["cells"] for r in json.loads(tkc)["rows"]] == [r["cells"] for r in json.loads(td)["rows"]],
                       "limit_hits_table_cells": m.get('kache_limit_hits_total{limit="max-table-cell-bytes-per-object"}')}

        # pretty
        time.sleep(2)
        base_rss = H.rss_kb(k.pid)
        got = []

        def pretty():
            def one():
                st, body = H.once(base, "GET", "/api/v1/pods?resourceVersion=0&pretty=true", admin, timeout=600)
                got.append((st, len(body)))
            ts = [threading.Thread(target=one) for _ in range(6)]
            [t.start() for t in ts]
            [t.join() for t in ts]

        t = time.time()
        peak = peak_rss_during(k.pid, pretty)
        out["pretty_x6"] = {"rss_before_mb": base_rss // 1024, "rss_peak_mb": peak // 1024, "peak_over_before_mb": (peak - base_rss) // 1024,
                            "answers": sorted(set(got)), "seconds": round(time.time() - t, 1)}

        # tokens
        t = time.time()
        c = H.conn(base)
        codes = {}
        for _ in range(2000):
            st, _ = H.call(c, "GET", "/api/v1/namespaces/default/pods?limit=1", base64.b64encode(os.urandom(24)).decode())
            codes[st] = codes.get(st, 0) + 1
        c.close()
        took = time.time() - t
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "honest"}, "data": {"t": str(time.time())}}
        w_st, _ = H.once(base, "POST", f"/api/v1/namespaces/{NS}/configmaps", admin, cm)
        r_st, _ = H.once(base, "GET", f"/api/v1/namespaces/{NS}/configmaps/honest", admin)
        m = H.scrape(adm)
        out["junk_tokens_2000"] = {"statuses": codes, "seconds": round(took, 1), "honest_write": w_st, "honest_read": r_st,
                                   "upstream_up": m.get("kache_upstream_up"),
                                   "upstream_faults": sum(v for k2, v in m.items() if k2.startswith("kache_upstream_faults_total"))}
        log = open(f"{work}/kache.log").read()
        out["panics"] = log.count("panicked")
        out["rss_end_mb"] = H.rss_kb(k.pid) // 1024
    finally:
        if k and k.poll() is None:
            k.terminate()
            try:
                k.wait(40)
            except subprocess.TimeoutExpired:
                k.kill()
        cleanup(direct, admin)
    print(json.dumps(out, indent=1))


main()
