#!/usr/bin/env bash
# Build informer-sync (and watch-replay, replay/) inside the Kubernetes tree that
# ../../shared/real-apiserver/build.sh extracted (it uses that tree's vendored client-go and
# the Go it installed). Output:
# ~/real-apiserver/bin/informer-sync and ~/real-apiserver/bin/watch-replay.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
A=${REAL_APISERVER_HOME:-$HOME/real-apiserver}
K=${K8S_TREE:-$HOME/src/microshift/deps/github.com/openshift/kubernetes}
GOROOT_DIR=$("$A/go-venv/bin/python" -c 'import go, os; print(os.path.dirname(go.__file__))')
export PATH="$GOROOT_DIR/bin:$PATH" GOTOOLCHAIN=local GOPROXY=off GOFLAGS=-mod=vendor
mkdir -p "$K/cmd/kache-informer-sync"
cp "$HERE/main.go" "$K/cmd/kache-informer-sync/main.go"
mkdir -p "$K/cmd/kache-watch-replay"
cp "$HERE/replay/main.go" "$K/cmd/kache-watch-replay/main.go"
(cd "$K" && go build -trimpath -o "$A/bin/informer-sync" ./cmd/kache-informer-sync)
(cd "$K" && go build -trimpath -o "$A/bin/watch-replay" ./cmd/kache-watch-replay)
echo "$A/bin/informer-sync $A/bin/watch-replay"
