#!/usr/bin/env bash
# `make soak`: the fault tests (e2e/tests/suite/serial/faults.rs and the kill / restart tests
# of serial/stormservice.rs and serial/leader_election.rs) three times in a row on the local
# control plane, each run with fresh seeds. Not part of CI. SOAK_RUNS overrides the count.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export SQUALL_CLUSTER_DIR=${SQUALL_CLUSTER_DIR:-$ROOT/target/e2e-cluster}
STARTED_CLUSTER=0
finish() {
  ((STARTED_CLUSTER)) && e2e/cluster.sh down || true
}
trap finish EXIT

hack/build-tools.sh >/dev/null
if ! e2e/cluster.sh status >/dev/null 2>&1; then
  STARTED_CLUSTER=1
  e2e/cluster.sh up >/dev/null
fi
export KUBECONFIG=$SQUALL_CLUSTER_DIR/kubeconfig
cargo build --locked --bin squall
for run in $(seq 1 "${SOAK_RUNS:-3}"); do
  for topic in faults stormservice leader_election; do
    echo "==> soak run $run: serial::$topic"
    cargo test --locked -p e2e --test suite -- --include-ignored --test-threads=1 --nocapture "serial::$topic::"
  done
done
echo "soak: ${SOAK_RUNS:-3} runs passed"
