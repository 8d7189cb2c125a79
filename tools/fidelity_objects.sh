#!/bin/bash
# The objects tools/capture_fidelity.py and the differential tier (tests/it/real_differential.rs)
# read, in a real apiserver: namespaces kache-fid-a and kache-fid-b with three ConfigMaps and
# three Widgets each, CRDs widgets.fid.example.com (namespaced) and gadgets.fid.k8s.io
# (cluster-scoped, approved) and four Gadgets. Idempotent.
#   tools/fidelity_objects.sh ~/real-apiserver/kubeconfig admin
set -euo pipefail
K="kubectl --kubeconfig $1 --context $2"
$K apply -f - <<'YAML'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.fid.example.com
spec:
  group: fid.example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.fid.k8s.io
  annotations:
    api-approved.kubernetes.io: "https://github.com/kubernetes/enhancements/pull/1111"
spec:
  group: fid.k8s.io
  scope: Cluster
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
YAML
$K wait --for condition=established crd/widgets.fid.example.com crd/gadgets.fid.k8s.io
for ns in kache-fid-a kache-fid-b; do
  $K get ns $ns >/dev/null 2>&1 || $K create ns $ns
  for i in 1 2 3; do
    $K apply -f - <<YAML
apiVersion: fid.example.com/v1
kind: Widget
metadata: {name: w$i, namespace: $ns, labels: {app: w$i, tier: t$((i%2))}}
spec: {size: $i, color: "red"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cm$i, namespace: $ns, labels: {app: c$i, tier: t$((i%2))}}
data: {k: v$i}
YAML
  done
done
for i in 1 2 3 4; do
  $K apply -f - <<YAML
apiVersion: fid.k8s.io/v1
kind: Gadget
metadata: {name: g$i, labels: {app: g$i, tier: t$((i%2))}}
spec: {n: $i}
YAML
done
