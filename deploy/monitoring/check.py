#!/usr/bin/env python3
"""Offline check of the rendered Prometheus Operator objects (deploy/monitoring): the
fields of monitoring.coreos.com/v1 ServiceMonitor and PrometheusRule that these manifests
use, strictly (an unknown or misspelt field fails, as the CRDs' schemas would reject it),
durations in Prometheus' format, PromQL expressions with balanced brackets and quotes,
and every alert with a severity label and a summary. kubernetes-validate has no schemas
for custom resources, hence this. Usage: check.py RENDERED.yaml"""
import re
import sys

import yaml

DURATION = re.compile(r"^(([0-9]+)(ms|s|m|h|d|w|y))+$")
SEVERITIES = {"info", "warning", "critical"}


def fail(msg):
    sys.exit(f"deploy/monitoring: {msg}")


def only(obj, allowed, where):
    if not isinstance(obj, dict):
        fail(f"{where}: not an object")
    extra = set(obj) - set(allowed)
    if extra:
        fail(f"{where}: unknown field(s) {sorted(extra)}")


def balanced(expr, where):
    pairs, stack, quote = {")": "(", "]": "[", "}": "{"}, [], None
    for ch in expr:
        if quote:
            if ch == quote:
                quote = None
            continue
        if ch in "\"'`":
            quote = ch
        elif ch in "([{":
            stack.append(ch)
        elif ch in ")]}":
            if not stack or stack.pop() != pairs[ch]:
                fail(f"{where}: unbalanced {ch!r} in {expr!r}")
    if stack or quote:
        fail(f"{where}: unclosed {stack or quote} in {expr!r}")


def service_monitor(o):
    only(o["spec"], {"selector", "namespaceSelector", "endpoints", "jobLabel"}, "ServiceMonitor.spec")
    only(o["spec"]["selector"], {"matchLabels", "matchExpressions"}, "ServiceMonitor.spec.selector")
    if not o["spec"].get("endpoints"):
        fail("ServiceMonitor has no endpoints")
    for i, e in enumerate(o["spec"]["endpoints"]):
        only(e, {"port", "path", "interval", "scrapeTimeout", "scheme"}, f"ServiceMonitor endpoint {i}")
        for k in ("interval", "scrapeTimeout"):
            if k in e and not DURATION.match(e[k]):
                fail(f"ServiceMonitor endpoint {i}: {k} {e[k]!r} is not a duration")


def prometheus_rule(o):
    only(o["spec"], {"groups"}, "PrometheusRule.spec")
    names = set()
    for g in o["spec"]["groups"]:
        only(g, {"name", "interval", "rules"}, "PrometheusRule group")
        for r in g["rules"]:
            where = f"rule {r.get('alert') or r.get('record')}"
            only(r, {"alert", "record", "expr", "for", "labels", "annotations"}, where)
            if ("alert" in r) == ("record" in r):
                fail(f"{where}: exactly one of alert, record")
            if not isinstance(r.get("expr"), str) or not r["expr"].strip():
                fail(f"{where}: no expr")
            balanced(r["expr"], where)
            if "for" in r and not DURATION.match(r["for"]):
                fail(f"{where}: for {r['for']!r} is not a duration")
            if "alert" in r:
                if r["alert"] in names:
                    fail(f"{where}: alert defined twice")
                names.add(r["alert"])
                if r.get("labels", {}).get("severity") not in SEVERITIES:
                    fail(f"{where}: severity label one of {sorted(SEVERITIES)}")
                if not r.get("annotations", {}).get("summary"):
                    fail(f"{where}: no summary annotation")
    return names


def main(path):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    kinds = {}
    for o in docs:
        only(o, {"apiVersion", "kind", "metadata", "spec"}, f"{o.get('kind')}")
        if o["apiVersion"] != "monitoring.coreos.com/v1":
            fail(f"{o['kind']}: apiVersion {o['apiVersion']}")
        if not o.get("metadata", {}).get("name") or not o["metadata"].get("namespace"):
            fail(f"{o['kind']}: metadata.name and namespace")
        kinds[o["kind"]] = kinds.get(o["kind"], 0) + 1
        if o["kind"] == "ServiceMonitor":
            service_monitor(o)
        elif o["kind"] == "PrometheusRule":
            alerts = prometheus_rule(o)
        else:
            fail(f"unexpected kind {o['kind']}")
    if kinds != {"ServiceMonitor": 1, "PrometheusRule": 1}:
        fail(f"expected one ServiceMonitor and one PrometheusRule, got {kinds}")
    print(f"deploy/monitoring: ServiceMonitor and PrometheusRule ({len(alerts)} alerts) valid")


if __name__ == "__main__":
    main(sys.argv[1])
