#!/usr/bin/env python3
"""Capture the Table column definitions a real kube-apiserver serves for the kinds kache
prints, into src/api/table/columns.json (kache serves them byte for byte).

    python3 tools/gen_table_columns.py ~/real-apiserver/kubeconfig admin

The definitions (names, types, formats, descriptions, priorities) are the apiserver's
answer to `Accept: application/json;as=Table;v=v1;g=meta.k8s.io` for a LIST with limit=1;
they depend only on the kind and the apiserver's release (v1.36.2 here).
"""
import json
import ssl
import sys
import urllib.request

KINDS = [
    ("", "v1", "pods"),
    ("", "v1", "nodes"),
    ("", "v1", "namespaces"),
    ("", "v1", "configmaps"),
    ("", "v1", "secrets"),
    ("", "v1", "serviceaccounts"),
    ("", "v1", "services"),
    ("", "v1", "endpoints"),
    ("", "v1", "events"),
    ("", "v1", "persistentvolumeclaims"),
    ("", "v1", "persistentvolumes"),
    ("", "v1", "replicationcontrollers"),
    ("apps", "v1", "deployments"),
    ("apps", "v1", "replicasets"),
    ("apps", "v1", "statefulsets"),
    ("apps", "v1", "daemonsets"),
    ("apps", "v1", "controllerrevisions"),
    ("batch", "v1", "jobs"),
    ("batch", "v1", "cronjobs"),
    ("discovery.k8s.io", "v1", "endpointslices"),
    ("events.k8s.io", "v1", "events"),
    ("coordination.k8s.io", "v1", "leases"),
    ("networking.k8s.io", "v1", "ingresses"),
    ("networking.k8s.io", "v1", "ingressclasses"),
    ("networking.k8s.io", "v1", "networkpolicies"),
    ("storage.k8s.io", "v1", "storageclasses"),
    ("scheduling.k8s.io", "v1", "priorityclasses"),
    ("rbac.authorization.k8s.io", "v1", "rolebindings"),
    ("rbac.authorization.k8s.io", "v1", "clusterrolebindings"),
    ("policy", "v1", "poddisruptionbudgets"),
    # Built-in kinds the apiserver prints with its default table (Name, Created At).
    ("", "v1", "limitranges"),
    ("rbac.authorization.k8s.io", "v1", "roles"),
    ("rbac.authorization.k8s.io", "v1", "clusterroles"),
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
    ("storage.k8s.io", "v1", "csistoragecapacities"),
]


def main():
    kubeconfig, context = sys.argv[1], sys.argv[2]
    import yaml  # noqa: PLC0415 (PyYAML comes with the kubernetes client)

    kc = yaml.safe_load(open(kubeconfig))
    ctx = next(c["context"] for c in kc["contexts"] if c["name"] == context)
    cluster = next(c["cluster"] for c in kc["clusters"] if c["name"] == ctx["cluster"])
    user = next(u["user"] for u in kc["users"] if u["name"] == ctx["user"])
    token = user.get("token") or open(user["tokenFile"]).read().strip()
    tls = ssl.create_default_context()
    tls.check_hostname = False
    tls.verify_mode = ssl.CERT_NONE
    out = {}
    for group, version, plural in KINDS:
        base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
        req = urllib.request.Request(
            f"{cluster['server']}{base}/{plural}?limit=1",
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io", "User-Agent": "kache-gen"},
        )
        with urllib.request.urlopen(req, context=tls) as r:
            table = json.load(r)
        out[f"{group}/{plural}"] = table["columnDefinitions"]
    with open("src/api/table/columns.json", "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
