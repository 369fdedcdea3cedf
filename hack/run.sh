#!/usr/bin/env bash
# `make run`: the local control plane (unless SQUALL_USE_EXISTING_CLUSTER=1, which uses the
# cluster in KUBECONFIG), squall's CRDs, then the bundled samples checked with `squall lint`
# and applied server-side as a dry run.
#
# The operator itself (`squall run`) arrives with the webhook and controller work; until then
# this says so and leaves the cluster up for exploring (`e2e/cluster.sh down` stops it).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
hack/build-tools.sh
export PATH="$(hack/build-tools.sh --print-bin):$PATH"

if [[ ${SQUALL_USE_EXISTING_CLUSTER:-0} == 1 ]]; then
  : "${KUBECONFIG:?SQUALL_USE_EXISTING_CLUSTER=1 needs KUBECONFIG}"
  echo "==> using the existing cluster in $KUBECONFIG"
else
  eval "$(e2e/cluster.sh up)"
fi

echo "==> installing squall's CRDs"
kubectl apply --server-side --force-conflicts -f manifests/crds/crds.yaml
kubectl wait --for=condition=Established --timeout=60s -f manifests/crds/crds.yaml

echo "==> checking the bundled samples"
cargo run --quiet --locked --bin squall -- lint -f manifests/samples/stormservice-canary.yaml -f manifests/samples/stormservice-pooled.yaml
kubectl apply --server-side --dry-run=server --validate=strict -f manifests/samples/

cat <<EOF

squall's operator (\`squall run\`: webhooks and controllers) is not built yet; this run set up
the cluster and the CRDs and validated the samples. The cluster stays up:

  export KUBECONFIG=$KUBECONFIG
  kubectl get crds | grep aibrix
  e2e/cluster.sh down        # stop it
EOF
