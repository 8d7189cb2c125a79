#!/usr/bin/env bash
# Captures, from a real kube-apiserver, the watches testdata/table-watch/* hold: the same
# changes to ConfigMaps and Pods in one namespace, watched as objects (JSON) and as Tables
# (includeObject Metadata with bookmarks, and None), from the same resourceVersion.
# Usage: tools/capture_table_watch.sh [kubeconfig] [context]
set -euo pipefail
KC=${1:-$HOME/real-apiserver/kubeconfig}
CTX=${2:-admin}
K="kubectl --kubeconfig $KC --context $CTX"
# A new namespace each run: without a controller-manager a deleted namespace is never emptied.
NS=kache-capture-tw-$(date +%s)
OUT=$(cd "$(dirname "$0")/.." && pwd)/testdata/table-watch
SERVER=$($K config view --minify -o jsonpath='{.clusters[0].cluster.server}')
TOKEN=$($K config view --minify --raw -o jsonpath='{.users[0].user.token}')
$K create ns $NS >/dev/null
# No controller-manager runs: the namespace has no default ServiceAccount until one is made.
$K -n $NS create sa default >/dev/null
$K -n $NS create cm a --from-literal=x=1 >/dev/null
RV=$($K get --raw "/api/v1/namespaces/$NS/configmaps" | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["resourceVersion"])')
TABLE='application/json;as=Table;v=v1;g=meta.k8s.io'
pids=()
for kind in configmaps pods; do
  q="watch=true&resourceVersion=$RV&timeoutSeconds=8"
  curl -sk -H "Authorization: Bearer $TOKEN" -H "Accept: application/json" "$SERVER/api/v1/namespaces/$NS/$kind?$q" >"$OUT/$kind.objects.json" & pids+=($!)
  curl -sk -H "Authorization: Bearer $TOKEN" -H "Accept: $TABLE" "$SERVER/api/v1/namespaces/$NS/$kind?$q&allowWatchBookmarks=true" >"$OUT/$kind.table.json" & pids+=($!)
  curl -sk -H "Authorization: Bearer $TOKEN" -H "Accept: $TABLE" "$SERVER/api/v1/namespaces/$NS/$kind?$q&includeObject=None" >"$OUT/$kind.table-none.json" & pids+=($!)
done
sleep 1
$K -n $NS create cm b --from-literal=y=2 >/dev/null
$K -n $NS label cm b l=v >/dev/null
$K -n $NS delete cm b >/dev/null
$K -n $NS run p --image=registry.example/app:1 --restart=Never >/dev/null
$K -n $NS patch pod p --subresource=status --type=merge -p '{"status":{"phase":"Running","podIP":"10.1.2.3","containerStatuses":[{"name":"p","image":"registry.example/app:1","imageID":"","ready":true,"restartCount":2,"started":true,"state":{"running":{"startedAt":"2026-01-01T00:00:00Z"}},"lastState":{"terminated":{"exitCode":1,"reason":"Error","startedAt":"2025-12-31T23:00:00Z","finishedAt":"2025-12-31T23:59:00Z"}}}]}}' >/dev/null
$K -n $NS delete pod p --grace-period=0 --force >/dev/null 2>&1
wait "${pids[@]}"
$K -n $NS delete cm a >/dev/null
ls -l "$OUT"
