#!/usr/bin/env bash
# `make run`: the local control plane (unless SQUALL_USE_EXISTING_CLUSTER=1, which uses the
# cluster in KUBECONFIG), squall's CRDs, the bundled samples checked, then the operator
# (`squall run --local`) in the foreground until Ctrl-C. The cluster stays up afterwards
# (`e2e/cluster.sh down` stops it).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
hack/build-tools.sh
PATH="$(hack/build-tools.sh --print-bin):$PATH"
export PATH

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
cargo run --quiet --locked --bin squall -- lint -f manifests/samples/stormservice-canary.yaml -f manifests/samples/stormservice-pooled.yaml -f manifests/samples/stormservice-gang.yaml
kubectl apply --server-side --dry-run=server --validate=strict -f manifests/samples/

read -r WEBHOOK_PORT ADMIN_PORT < <(python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')

echo "==> starting the operator (Ctrl-C stops it; the cluster stays up)"
echo "  export KUBECONFIG=$KUBECONFIG"
echo "  kubectl apply -f manifests/samples/stormservice-canary.yaml   # defaulted and validated by squall"
echo "  curl -s http://127.0.0.1:$ADMIN_PORT/readyz; curl -s http://127.0.0.1:$ADMIN_PORT/metrics"
echo "  e2e/cluster.sh down                                           # stop the cluster afterwards"
# The certificate store accepts only a private directory (0700); one left by an older squall
# may be 0755.
CERT_DIR=$ROOT/target/squall-local-certs
mkdir -p "$CERT_DIR" && chmod 700 "$CERT_DIR"
exec cargo run --quiet --locked --bin squall -- run --local --log-format plain \
  --webhook-bind "127.0.0.1:$WEBHOOK_PORT" --admin-bind "127.0.0.1:$ADMIN_PORT" \
  --cert-dir "$CERT_DIR"
