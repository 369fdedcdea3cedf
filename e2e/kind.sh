#!/usr/bin/env bash
# squall's e2e suite on kind, for users' CI (needs Docker, kind, kubectl and helm on PATH).
# Creates a cluster, builds and loads the image, installs the chart, runs the
# kind-compatible tests and exports logs. The install issue completes the chart's part.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CLUSTER=${KIND_CLUSTER:-squall-e2e}
IMAGE=${SQUALL_IMAGE:-squall:e2e}
ARTIFACTS=${ARTIFACTS:-$ROOT/target/kind-artifacts}

cleanup() {
  mkdir -p "$ARTIFACTS"
  kind export logs "$ARTIFACTS" --name "$CLUSTER" || true
  kind delete cluster --name "$CLUSTER" || true
}
trap cleanup EXIT

kind create cluster --name "$CLUSTER" --wait 120s
docker build -t "$IMAGE" "$ROOT"
kind load docker-image "$IMAGE" --name "$CLUSTER"
helm upgrade --install squall "$ROOT/charts/squall" --namespace squall-system --create-namespace \
  --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE#*:}" --wait --timeout 5m
kubectl wait --for=condition=Established --timeout=60s crd --all
# The kind-compatible part of the suite: everything except tests that manage local processes.
cargo test --manifest-path "$ROOT/Cargo.toml" -p e2e --test control_plane -- --include-ignored crds_and_every_sample
