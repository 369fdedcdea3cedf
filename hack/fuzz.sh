#!/usr/bin/env bash
# Fuzzes, with cargo fuzz (libFuzzer), each target in FUZZ_TARGETS (default: the admission
# review handler `review` and the analysis condition parser `condition`): `make fuzz` runs
# each for FUZZ_SECONDS (default 600); `make test` runs a 30 s smoke of each. A target's
# corpus grows in fuzz/corpus/<target> (not committed), seeded from fuzz/seeds/<target>; a
# crash leaves its input in fuzz/artifacts/<target> and fails the run.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT/fuzz"
SECONDS_TO_RUN=${FUZZ_SECONDS:-600}

if ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz from crates.io"
  cargo install cargo-fuzz --locked
fi
# FUZZ_PROFILE=dev builds without optimisation: a faster build for the short smoke.
profile=()
[[ ${FUZZ_PROFILE:-release} == dev ]] && profile=(--dev)
# libFuzzer and sanitizers need nightly flags: the nightly toolchain when rustup has it,
# otherwise stable with RUSTC_BOOTSTRAP (and no sanitizer).
if rustup run nightly rustc --version >/dev/null 2>&1; then
  fuzz=(cargo +nightly fuzz run)
else
  export RUSTC_BOOTSTRAP=1
  fuzz=(cargo fuzz run --sanitizer none)
fi
mkdir -p "$ROOT/target"
status=0
for target in ${FUZZ_TARGETS:-review condition}; do
  mkdir -p "corpus/$target"
  log=$ROOT/target/fuzz-$target.log
  target_status=0
  "${fuzz[@]}" "${profile[@]}" "$target" "corpus/$target" "seeds/$target" -- \
    -max_total_time="$SECONDS_TO_RUN" -rss_limit_mb=2048 -max_len=1048576 -print_final_stats=1 \
    >"$log" 2>&1 || target_status=$?
  grep -E '^(#[0-9]+ +(INITED|DONE)|Done |stat::|==[0-9]+==|SUMMARY|thread .* panicked)' "$log" || true
  # The fuzzer never started (a build error, a full disk): show why.
  if ((target_status != 0)) && ! grep -q 'INITED' "$log"; then
    tail -n 30 "$log"
    df -h "$ROOT/fuzz" || true
  fi
  echo "fuzz: $target target, ${SECONDS_TO_RUN}s, exit $target_status (full log: target/fuzz-$target.log)"
  ((target_status == 0)) || status=$target_status
done
exit "$status"
