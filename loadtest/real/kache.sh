# Sourced by the load scripts here: the real apiserver of ../shared/real-apiserver and a kache
# in front of it.
# REAL: its directory (kubeconfig, tokens, bin/; $REAL_APISERVER, default ~/real-apiserver).
# A: its address, as its kubeconfig names it. admin_token prints its admin token.
# start_kache BIN [FLAGS...] starts a kache (FLAGS added to its own) in front of it (its admin
# context) in a new temporary directory $D (addresses, kache.kubeconfig, kache.log), waits
# until it is ready, and sets K (its https address) and KP (its pid); the caller's EXIT trap
# stops it.
REAL=${REAL_APISERVER:-$HOME/real-apiserver}
A=https://127.0.0.1:6443
admin_token() { cat "$REAL/admin.token"; }
start_kache() {
  D=$(mktemp -d)
  "$1" serve --upstream-kubeconfig "$REAL/kubeconfig" --upstream-context admin --listen 127.0.0.1:0 \
    --addr-file "$D/addr" --admin-listen 127.0.0.1:0 --admin-addr-file "$D/admin" \
    --client-kubeconfig-out "$D/kache.kubeconfig" "${@:2}" >"$D/kache.log" 2>&1 &
  KP=$!
  until [ -s "$D/admin" ] && curl -sf "http://$(cat "$D/admin")/readyz" >/dev/null; do sleep 0.5; done
  K=https://$(cat "$D/addr")
}
