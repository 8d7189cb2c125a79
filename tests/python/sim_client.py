#!/usr/bin/env python3
"""Drive the simulated apiserver with the official Python `kubernetes` client.

Usage: sim_client.py http://HOST:PORT PODS NODES

Lists pods across all namespaces and per namespace, lists with a field selector, changes a
pod, and watches from the list's resourceVersion. Asserts along the way and exits non-zero
(with a message on stderr) on the first failure.
"""

import sys

from kubernetes import client, watch


def main():
    host, pods, nodes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    cfg = client.Configuration(host=host)
    api = client.CoreV1Api(client.ApiClient(cfg))

    everything = api.list_pod_for_all_namespaces()
    assert len(everything.items) == pods, f"all namespaces: {len(everything.items)} pods, want {pods}"
    rv = everything.metadata.resource_version
    assert rv and rv.isdigit(), f"list resourceVersion {rv!r}"
    print(f"list_pod_for_all_namespaces: {len(everything.items)} pods at resourceVersion {rv}")

    by_ns = {}
    for p in everything.items:
        by_ns.setdefault(p.metadata.namespace, []).append(p.metadata.name)
    for ns, names in sorted(by_ns.items()):
        got = api.list_namespaced_pod(ns)
        got_names = [p.metadata.name for p in got.items]
        assert got_names == names, f"namespace {ns}: {len(got_names)} pods, want {len(names)}"
    print(f"list_namespaced_pod: {len(by_ns)} namespaces agree with the full list")

    node = "node-0007"
    on_node = api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
    want = sorted(f"{p.metadata.namespace}/{p.metadata.name}" for p in everything.items if p.spec.node_name == node)
    got = sorted(f"{p.metadata.namespace}/{p.metadata.name}" for p in on_node.items)
    assert got == want, f"field selector: {got} != {want}"
    assert len(got) == pods // nodes, f"{len(got)} pods on {node}, want {pods // nodes}"
    print(f"field_selector spec.nodeName={node}: {len(got)} pods")

    paged = api.list_pod_for_all_namespaces(limit=50)
    assert len(paged.items) == 50 and paged.metadata._continue, "limit=50 gives a page and a continue token"
    assert paged.metadata.remaining_item_count == pods - 50, paged.metadata.remaining_item_count

    # A change after the list's RV, so the watch below has something to deliver.
    target = everything.items[0]
    ns, name = target.metadata.namespace, target.metadata.name
    patched = api.patch_namespaced_pod(name, ns, {"metadata": {"labels": {"python-client": "saw-it"}}})
    assert patched.metadata.labels["python-client"] == "saw-it"
    print(f"patched {ns}/{name} at resourceVersion {patched.metadata.resource_version}")

    w = watch.Watch()
    events = []
    for ev in w.stream(api.list_pod_for_all_namespaces, timeout_seconds=3, resource_version=rv):
        events.append(ev)
        obj = ev["object"]
        print(f"event {ev['type']} {obj.metadata.namespace}/{obj.metadata.name} rv={obj.metadata.resource_version}")
    assert events, "the watch from the list's resourceVersion delivered nothing"
    first = events[0]
    assert first["type"] == "MODIFIED", first["type"]
    assert isinstance(first["object"], client.V1Pod)
    assert first["object"].metadata.name == name
    assert first["object"].metadata.labels.get("python-client") == "saw-it"
    assert first["object"].metadata.resource_version == patched.metadata.resource_version
    rvs = [int(e["object"].metadata.resource_version) for e in events]
    assert rvs == sorted(rvs) and len(set(rvs)) == len(rvs), f"event RVs not increasing: {rvs}"

    # A watch from resourceVersion 0 starts with an ADDED per pod.
    added = 0
    for ev in watch.Watch().stream(api.list_namespaced_pod, ns, timeout_seconds=1, resource_version="0"):
        assert ev["type"] == "ADDED", ev["type"]
        added += 1
    assert added == len(by_ns[ns]), f"{added} ADDED in {ns}, want {len(by_ns[ns])}"
    print(f"watch from resourceVersion 0 in {ns}: {added} ADDED")
    print("python kubernetes client: all checks passed")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        raise
