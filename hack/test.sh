#!/usr/bin/env bash
# `make test`: format and lint checks, unit tests, the container image, then the e2e suite
# against the local control plane (built and started here, stopped afterwards even on
# failure), then the loopback guard. Prints a per-phase timing table and a closing
# "N passed, M failed" line.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export SQUALL_CLUSTER_DIR=${SQUALL_CLUSTER_DIR:-$ROOT/target/e2e-cluster}
RESULTS=$(mktemp -t squall-test-results.XXXXXX)
declare -a PHASES=()
STARTED_CLUSTER=0
STARTED_OPERATOR=0
TOTAL_START=$SECONDS

phase() { # name, command...
  local name=$1 start=$SECONDS status=0; shift
  echo "==> $name"
  "$@" 2>&1 | tee -a "$RESULTS" || status=$?
  PHASES+=("$(printf '%-34s %6ss  %s' "$name" $((SECONDS - start)) "$([[ $status == 0 ]] && echo ok || echo FAILED)")")
  return $status
}

finish() {
  local status=$?
  if ((STARTED_OPERATOR)); then
    e2e/operator.sh stop || true
  fi
  if ((STARTED_CLUSTER)); then
    if ((status != 0)); then
      echo "==> component logs (last 40 lines each) from $SQUALL_CLUSTER_DIR/logs"
      for log in "$SQUALL_CLUSTER_DIR"/logs/*.log; do
        [[ -f $log ]] || continue
        echo "--- $(basename "$log")"
        tail -n 40 "$log"
      done
    fi
    e2e/cluster.sh down || true
  fi
  echo "==> timing"
  printf '  %s\n' "${PHASES[@]}"
  printf '  %-34s %6ss\n' "total" $((SECONDS - TOTAL_START))
  local counts
  counts=$(awk '/^test result: / { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
                END { printf "%d passed, %d failed", p, f }' "$RESULTS")
  rm -f "$RESULTS"
  echo "squall: $counts"
  exit $status
}
trap finish EXIT

phase "format check" cargo fmt --all --check
phase "clippy" cargo clippy --workspace --all-targets --locked -- -D warnings
phase "dependency policy (cargo deny)" hack/deny.sh
phase "rust build (tests)" cargo test --workspace --locked --no-run
phase "unit and conformance tests" cargo test --workspace --locked
phase "fuzz smoke (review handler and condition parser, 30 s each)" env FUZZ_SECONDS=30 FUZZ_PROFILE=dev hack/fuzz.sh
phase "tools build (hack/build-tools.sh)" hack/build-tools.sh
# The container image (Dockerfile on local stand-ins of its bases), for serial::image.
phase "image build (hack/image.sh)" hack/image.sh
STARTED_CLUSTER=1
phase "cluster up" e2e/cluster.sh up
export KUBECONFIG=$SQUALL_CLUSTER_DIR/kubeconfig
# One e2e binary (e2e/tests/suite), its tests scheduled by module path, one topic (a file of
# its group) per phase so the timing table names them.
topics() { # group: the topics of e2e/tests/suite/<group>/
  local file
  for file in e2e/tests/suite/"$1"/*.rs; do
    [[ $(basename "$file") == mod.rs ]] || basename "$file" .rs
  done
}
# Disruptive tests first, one at a time, each with its own operator (suite/serial).
for topic in $(topics serial); do
  phase "e2e: serial::$topic" cargo test -p e2e --locked --test suite -- --include-ignored --test-threads=1 "serial::$topic::"
done
# Then the ordinary tests, sharing one long-lived operator (suite/shared).
STARTED_OPERATOR=1
phase "operator up" e2e/operator.sh start
for topic in $(topics shared); do
  phase "e2e: shared::$topic" cargo test -p e2e --locked --test suite -- --include-ignored "shared::$topic::"
done
# Last: nothing the suite configured or started may reach beyond loopback.
phase "e2e: guard" cargo test -p e2e --locked --test suite -- --include-ignored "guard::"
