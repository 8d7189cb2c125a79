# Sourced by the load scripts here: start_kache BIN starts a release kache in front of the real
# apiserver ($REAL, its admin context) in a new temporary directory $D, waits until it is
# ready, and sets K (its https address) and KP (its pid); the caller's EXIT trap stops it.
start_kache() {
  D=$(mktemp -d)
  "$1" serve --upstream-kubeconfig "$REAL/kubeconfig" --upstream-context admin --listen 127.0.0.1:0 \
    --addr-file "$D/addr" --admin-listen 127.0.0.1:0 --admin-addr-file "$D/admin" \
    --client-kubeconfig-out "$D/kache.kubeconfig" >"$D/kache.log" 2>&1 &
  KP=$!
  until [ -s "$D/admin" ] && curl -sf "http://$(cat "$D/admin")/readyz" >/dev/null; do sleep 0.5; done
  K=https://$(cat "$D/addr")
}
