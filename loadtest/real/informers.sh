# Three client-go informers of pods (loadtest/clientgo `informer-sync -follow`): LIST mode,
# WatchList, and a kubelet's (spec.nodeName=$NODE), watching through a kache, and their stores
# compared with the same informers' directly. Sourced by warmstart.sh and rolling.sh, which set
# OUT, REAL, SYNC and NODE; the informers' PIDs are added to `pids`.
informers=(list:-watchlist=false watchlist:-watchlist=true "kubelet:-watchlist=false -field-selector=spec.nodeName=$NODE")

# Start them against kubeconfig $1, following for $2 (a Go duration), and wait for their sync.
informers_start() {
  local i name args
  for i in "${informers[@]}"; do
    name=${i%%:*}; args=${i#*:}
    # shellcheck disable=SC2086
    "$SYNC" -kubeconfig "$1" $args -follow "$2" -digest-at "$OUT/digest-now" >"$OUT/informer.$name" 2>&1 &
    pids+=($!)
  done
  for i in "${informers[@]}"; do
    until grep -q '^synced' "$OUT/informer.${i%%:*}"; do sleep 0.1; done
  done
}

# Have each write its store's digest, and wait until all have.
informers_digest() {
  local i
  touch "$OUT/digest-now"
  for i in "${informers[@]}"; do
    until grep -q 'digest=' "$OUT/informer.${i%%:*}"; do sleep 0.2; done
  done
}

# One line per informer: its events after its sync, its digest against the direct one's.
informers_compare() {
  local i name want got direct_list direct_node
  direct_list=$("$SYNC" -kubeconfig "$REAL/kubeconfig" -context admin -watchlist=false 2>&1 | grep -o 'digest=[0-9a-f]*')
  direct_node=$("$SYNC" -kubeconfig "$REAL/kubeconfig" -context admin -watchlist=false -field-selector "spec.nodeName=$NODE" 2>&1 | grep -o 'digest=[0-9a-f]*')
  for i in "${informers[@]}"; do
    name=${i%%:*}; want=$direct_list; [ "$name" = kubelet ] && want=$direct_node
    got=$(grep -o 'digest=[0-9a-f]*' "$OUT/informer.$name")
    echo "informer $name: $(grep '^events after sync' "$OUT/informer.$name"); $got, direct $want$([ "$got" = "$want" ] && echo ' (equal)' || echo ' (DIFFERENT)')" | tee -a "$OUT/summary"
  done
}
