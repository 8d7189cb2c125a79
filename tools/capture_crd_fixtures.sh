#!/usr/bin/env bash
# Captures, from a real kube-apiserver, what testdata/crd/ holds: the CRDs of
# tools/crd_fixtures/crds.yaml and, for their custom resources (tools/crd_fixtures/objects.yaml,
# in the namespace kache-crd-1), the objects, Tables (includeObject Metadata and None) and
# metadata views (PartialObjectMetadataList / PartialObjectMetadata) of LIST and GET, each
# with the response's headers (its Date is when relative times were printed), and the same
# changes to a Widget watched as objects, Tables and metadata from the same resourceVersion,
# the bookmark ending a Table WatchList, and a Widget being deleted (its metadata GET).
# (curl is given another User-Agent: the apiserver pretty-prints JSON for curl.)
# Usage: tools/capture_crd_fixtures.sh [kubeconfig] [context]
set -euo pipefail
KC=${1:-$HOME/real-apiserver/kubeconfig}
CTX=${2:-admin}
K="kubectl --kubeconfig $KC --context $CTX"
DIR=$(cd "$(dirname "$0")/.." && pwd)
OUT=$DIR/testdata/crd
NS=kache-crd-1
SERVER=$($K config view --minify -o jsonpath='{.clusters[0].cluster.server}')
TOKEN=$($K config view --minify --raw -o jsonpath='{.users[0].user.token}')
TABLE='application/json;as=Table;v=v1;g=meta.k8s.io'
META='application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io'
METAL='application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io'
mkdir -p "$OUT"
$K apply -f "$DIR/tools/crd_fixtures/crds.yaml" >/dev/null
$K wait --for condition=established crd/widgets.crd.example.com crd/plains.crd.example.com >/dev/null
$K get ns $NS >/dev/null 2>&1 || $K create ns $NS >/dev/null
$K apply -f "$DIR/tools/crd_fixtures/objects.yaml" >/dev/null
get() { # name accept path
  curl -sk -A kache-capture/1 -D "$OUT/$1.headers" -H "Authorization: Bearer $TOKEN" -H "Accept: $2" "$SERVER$3" >"$OUT/$1.json"
}
C=/apis/apiextensions.k8s.io/v1/customresourcedefinitions
get crd-widgets application/json "$C/widgets.crd.example.com"
get crd-plains application/json "$C/plains.crd.example.com"
W=/apis/crd.example.com/v1/namespaces/$NS/widgets
P=/apis/crd.example.com/v1/plains
SEL='labelSelector=kache-crd%3D1'
get widgets.objects application/json "$W"
get widgets.table "$TABLE" "$W"
get widgets.table-none "$TABLE" "$W?includeObject=None"
get widgets.table-w1 "$TABLE" "$W/w1"
get widgets.metadata "$METAL" "$W"
get widgets.metadata-w1 "$META" "$W/w1"
get plains.objects application/json "$P?$SEL"
get plains.table "$TABLE" "$P?$SEL"
get plains.metadata "$METAL" "$P?$SEL"
# A WatchList of Tables that selects nothing: only the initial-events-end bookmark, whose row
# is the columns printed for an empty object.
curl -sk -A kache-capture/1 -H "Authorization: Bearer $TOKEN" -H "Accept: $TABLE" \
  "$SERVER$P?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=2&labelSelector=nope%3D1" \
  | grep BOOKMARK >"$OUT/watchlist-end.plains.table.json"
# Watches from the list's RV: a Widget created, changed and deleted.
RV=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["metadata"]["resourceVersion"])' "$OUT/widgets.objects.json")
q="watch=true&resourceVersion=$RV&timeoutSeconds=6"
pids=()
curl -sk -A kache-capture/1 -H "Authorization: Bearer $TOKEN" -H "Accept: application/json" "$SERVER$W?$q" >"$OUT/watch.objects.json" & pids+=($!)
curl -sk -A kache-capture/1 -H "Authorization: Bearer $TOKEN" -H "Accept: $TABLE" "$SERVER$W?$q" >"$OUT/watch.table.json" & pids+=($!)
curl -sk -A kache-capture/1 -H "Authorization: Bearer $TOKEN" -H "Accept: $TABLE" "$SERVER$W?$q&includeObject=None" >"$OUT/watch.table-none.json" & pids+=($!)
curl -sk -A kache-capture/1 -H "Authorization: Bearer $TOKEN" -H "Accept: $META" "$SERVER$W?$q" >"$OUT/watch.metadata.json" & pids+=($!)
sleep 1
$K -n $NS create -f - >/dev/null <<'YAML'
apiVersion: crd.example.com/v1
kind: Widget
metadata: {name: w9, labels: {kache-crd: "9"}}
spec: {replicas: 1, tags: [x]}
status: {phase: Pending, startedAt: "2026-02-02T02:02:02Z"}
YAML
$K -n $NS patch widget w9 --type=merge -p '{"spec":{"replicas":5},"status":{"phase":"Running","ready":true},"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"owner","uid":"00000000-0000-0000-0000-000000000001","controller":true}]}}' >/dev/null
$K -n $NS delete widget w9 >/dev/null
wait "${pids[@]}"
# A Widget being deleted (held by its finalizer), with owner references: its object and
# metadata GET, then the finalizer removed so that it goes.
$K -n $NS create -f - >/dev/null <<'YAML'
apiVersion: crd.example.com/v1
kind: Widget
metadata:
  name: w-terminating
  finalizers: [crd.example.com/hold]
  ownerReferences:
  - {apiVersion: v1, kind: ConfigMap, name: a, uid: 00000000-0000-0000-0000-00000000000a, blockOwnerDeletion: false}
  - {apiVersion: apps/v1, kind: Deployment, name: b, uid: 00000000-0000-0000-0000-00000000000b, controller: true, blockOwnerDeletion: true}
spec: {replicas: 1}
YAML
$K -n $NS delete widget w-terminating --wait=false >/dev/null
get terminating.object application/json "$W/w-terminating"
get terminating.metadata "$META" "$W/w-terminating"
$K -n $NS patch widget w-terminating --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null
ls -l "$OUT"
# The columns the apiserver adds to every custom resource's Table (Name) and to those of
# CRDs without printer columns (Age), as src/api/table/custom_columns.json holds them.
python3 - "$OUT/plains.table.json" "$DIR/src/api/table/custom_columns.json" <<'PY'
import json, sys
cols = json.load(open(sys.argv[1]))["columnDefinitions"]
assert [c["name"] for c in cols] == ["Name", "Age"], cols
with open(sys.argv[2], "w") as f:
    json.dump({"name": cols[0], "age": cols[1]}, f, indent=2, ensure_ascii=False)
    f.write("\n")
PY
