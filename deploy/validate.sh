#!/usr/bin/env bash
# Offline validation of the manifests under deploy/: render every kustomization with
# `kubectl kustomize` and validate each rendered object against the Kubernetes OpenAPI
# schemas shipped in the `kubernetes-validate` package (strict: unknown fields fail), for
# the oldest Kubernetes the manifests support (1.30: native sidecars, preStop sleep) and
# the newest schema the package has; the ServiceMonitor and PrometheusRule of monitoring/
# by monitoring/check.py. Also fails on a manifest no kustomization includes.
# Needs: kubectl (with kustomize), python3 with `kubernetes-validate` (.ci/run installs it).
set -euo pipefail
cd "$(dirname "$0")"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

validate() { python3 -m kubernetes_validate "$@"; }
oldest=1.30.0
newest="$(validate --help | sed -n 's/.*Defaults to \([0-9.]*\).*/\1/p' | head -1)"
newest="${newest:-1.37.0}"

kustomizations=(base replicas sidecar)
for k in "${kustomizations[@]}"; do
  kubectl kustomize "$k" > "$out/$k.yaml"
  n="$(grep -c '^kind:' "$out/$k.yaml" || true)"
  [ "$n" -gt 0 ] || { echo "deploy/$k renders no objects" >&2; exit 1; }
  for v in "$oldest" "$newest"; do
    validate --strict --quiet --kubernetes-version "$v" "$out/$k.yaml"
  done
  echo "deploy/$k: $n objects valid against Kubernetes $oldest and $newest"
done

# The Prometheus Operator objects: custom resources, which kubernetes-validate has no
# schemas for, checked field by field by monitoring/check.py.
kubectl kustomize monitoring > "$out/monitoring.yaml"
python3 monitoring/check.py "$out/monitoring.yaml"

# Every manifest is part of some kustomization (a file nothing includes is never validated).
status=0
while IFS= read -r f; do
  dir="$(dirname "$f")"; base="$(basename "$f")"
  case "$base" in kustomization.yaml|client-kubeconfig.yaml) continue ;; esac
  if ! grep -Eq "^[[:space:]]*-[[:space:]]*(\.\./[a-z]+/)?$base\$|=$base\$" "$dir/kustomization.yaml" 2>/dev/null; then
    echo "deploy/${f#./} is not listed in $dir/kustomization.yaml" >&2
    status=1
  fi
done < <(find . -name '*.yaml' -not -path './*/charts/*' | sort)
exit "$status"
