#!/usr/bin/env python3
"""Capture what a real kube-apiserver prints for the objects of tools/table_fixtures/
(created there with `kubectl apply -f`, their status set by status.sh) into
testdata/tables/tables.json: per kind, the Table (includeObject=Object, so each row
holds the object it prints) and the time it was answered (its Date header), which the unit
tests render the relative times at.

    python3 tools/capture_table_fixtures.py ~/real-apiserver/kubeconfig admin [group/plural ...]

With kinds named, only those are captured again (the others' captures are kept).
"""
import email.utils
import json
import ssl
import sys
import urllib.request

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from gen_table_columns import KINDS  # noqa: E402

NS = "kache-print-1"
CLUSTER_SCOPED = {
    "nodes", "namespaces", "persistentvolumes", "ingressclasses", "storageclasses", "priorityclasses", "clusterrolebindings",
    "clusterroles", "customresourcedefinitions",
}


def main():
    kubeconfig, context = sys.argv[1], sys.argv[2]
    import yaml  # noqa: PLC0415

    kc = yaml.safe_load(open(kubeconfig))
    ctx = next(c["context"] for c in kc["contexts"] if c["name"] == context)
    cluster = next(c["cluster"] for c in kc["clusters"] if c["name"] == ctx["cluster"])
    user = next(u["user"] for u in kc["users"] if u["name"] == ctx["user"])
    token = user.get("token") or open(user["tokenFile"]).read().strip()
    tls = ssl.create_default_context()
    tls.check_hostname = False
    tls.verify_mode = ssl.CERT_NONE
    only = set(sys.argv[3:])
    out = json.load(open("testdata/tables/tables.json")) if only else {}
    for group, version, plural in KINDS:
        if plural in ("pods", "nodes", "namespaces", "configmaps", "secrets", "serviceaccounts", "customresourcedefinitions", "csistoragecapacities"):
            continue
        if only and f"{group}/{plural}" not in only:
            continue
        base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
        scope = "" if plural in CLUSTER_SCOPED else f"/namespaces/{NS}"
        req = urllib.request.Request(
            f"{cluster['server']}{base}{scope}/{plural}?labelSelector=kache-print%3D1&includeObject=Object",
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io", "User-Agent": "kache-gen"},
        )
        with urllib.request.urlopen(req, context=tls) as r:
            table = json.load(r)
            date = email.utils.parsedate_to_datetime(r.headers["Date"]).timestamp()
        rows = []
        for row in table["rows"]:
            row["object"]["metadata"].pop("managedFields", None)
            rows.append({"cells": row["cells"], "object": row["object"]})
        assert rows, f"{group}/{plural}: no objects (apply tools/table_fixtures first)"
        out[f"{group}/{plural}"] = {"answered": int(date), "rows": rows}
    with open("testdata/tables/tables.json", "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
