#!/usr/bin/env bash
# squall's e2e suite on kind, for users' CI (needs Docker, kind, kubectl, helm and cargo on
# PATH). Creates a cluster, builds and loads the image, installs the chart, waits for the
# webhooks, runs the kind-compatible tests and exports the cluster's logs.
#
# kind-compatible tests are marked in e2e/tests/suite/*/*.rs by a `// kind-compatible` line above
# the test function: they need no kubelet emulation (kind runs real kubelets, so pods of
# made-up images never become Ready), no squall process started by the harness, and no
# operator on loopback. `e2e/kind.sh --list` prints them.
#
# Environment: KIND_CLUSTER (default squall-e2e), SQUALL_IMAGE (default squall:e2e),
# ARTIFACTS (logs, default target/kind-artifacts), KEEP_CLUSTER=1 to keep the cluster.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CLUSTER=${KIND_CLUSTER:-squall-e2e}
IMAGE=${SQUALL_IMAGE:-squall:e2e}
ARTIFACTS=${ARTIFACTS:-$ROOT/target/kind-artifacts}
NAMESPACE=squall-system

# The module path of every marked test (`shared::canary::name`).
kind_tests() {
  local file
  for file in "$ROOT"/e2e/tests/suite/*/*.rs; do
    awk -v module="$(basename "$(dirname "$file")")::$(basename "$file" .rs)" '
      /^\/\/ kind-compatible/ { marked = 1; next }
      marked && match($0, /^(async )?fn [a-z0-9_]+/) {
        name = substr($0, RSTART, RLENGTH); sub(/^(async )?fn /, "", name)
        print module "::" name; marked = 0
      }' "$file"
  done
}

if [[ ${1:-} == --list ]]; then
  kind_tests
  exit 0
fi

for tool in docker kind kubectl helm cargo; do
  command -v "$tool" >/dev/null || { echo "kind.sh: $tool is required on PATH" >&2; exit 1; }
done

cleanup() {
  local status=$?
  mkdir -p "$ARTIFACTS"
  kubectl get all,stormservices,rolesets,podsets,events -A -o wide >"$ARTIFACTS/objects.txt" 2>&1 || true
  kind export logs "$ARTIFACTS" --name "$CLUSTER" >/dev/null 2>&1 || true
  [[ ${KEEP_CLUSTER:-0} == 1 ]] || kind delete cluster --name "$CLUSTER" || true
  echo "kind.sh: logs in $ARTIFACTS"
  exit $status
}
trap cleanup EXIT

kind create cluster --name "$CLUSTER" --wait 120s
docker build -t "$IMAGE" "$ROOT"
kind load docker-image "$IMAGE" --name "$CLUSTER"
helm upgrade --install squall "$ROOT/charts/squall" --namespace "$NAMESPACE" --create-namespace \
  --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" --set image.pullPolicy=Never \
  --wait --timeout 5m
kubectl wait --for=condition=Established --timeout=60s crd --all
# The Deployment is Ready once /readyz is: the served certificate verifies against the
# caBundle squall injected into both webhook configurations.
kubectl -n "$NAMESPACE" rollout status deployment/squall --timeout=120s

failed=0
while read -r test; do
  echo "==> $test"
  SQUALL_KUBECTL=$(command -v kubectl) SQUALL_HELM=$(command -v helm) \
    cargo test --manifest-path "$ROOT/Cargo.toml" -p e2e --locked --test suite -- \
    --include-ignored --exact "$test" || failed=1
done < <(kind_tests)
exit $failed
