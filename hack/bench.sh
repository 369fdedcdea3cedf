#!/usr/bin/env bash
# `make bench`: every benchmark in one run, then the README's benchmark table regenerated
# between its `<!-- bench:begin -->` / `<!-- bench:end -->` markers.
#   - admission: mutate / validate vs a no-op handler through the same layers over TLS: CPU
#     per request, req/s, latency, on both CPUs and on one; allocations per review
#     (benches/admission.rs)
#   - planner: plans per second vs cloning the input (criterion, benches/planner.rs)
#   - cache scale: RSS per pod and CPU per event of the caches' real ingestion fed a
#     generated fleet of 1,600, 20,000 and 150,000 pods (benches/cache.rs)
#   - controller: scale, writes, CPU, memory, step latency on the local control plane, vs
#     the API server's own pod-create rate, at 1,600 pods and then 5,000 in the same run
#     (e2e/benches/controller.rs; BENCH_SERVICES, default 200 = 1,600 pods;
#     BENCH_LARGE_SERVICES, default 625 = 5,000 pods, 0 skips it; BENCH_CANARIES, default
#     25 = 100 steps). The larger fleet needs 4 fake nodes: they are added to the cluster.
#   - hostile: peak RSS and /healthz latency of a webhook server under hostile bodies, vs its
#     idle peak (e2e/benches/hostile.rs)
#   - hostile status: peak RSS, CPU and /healthz of the controllers while a tenant stores a
#     megabyte status under a query of placeholders, vs the same run untouched
#     (e2e/benches/hostile_status.rs)
# Starts the local control plane unless one is up, and stops what it started.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export SQUALL_CLUSTER_DIR=${SQUALL_CLUSTER_DIR:-$ROOT/target/e2e-cluster}
OUT=$ROOT/target/bench
mkdir -p "$OUT"
STARTED_CLUSTER=0
finish() {
  ((STARTED_CLUSTER)) && e2e/cluster.sh down || true
}
trap finish EXIT

echo "==> admission"
cargo bench --locked --bench admission
echo "==> planner"
cargo bench --locked --bench planner -- --warm-up-time 1 --measurement-time 3
python3 - "$OUT/planner.md" <<'PY'
import json, pathlib, sys
root = pathlib.Path("target/criterion/planner")
def mean_ns(name):
    for d in root.iterdir():
        bench = json.loads((d / "new" / "benchmark.json").read_text())
        if bench["function_id"] == name:
            return json.loads((d / "new" / "estimates.json").read_text())["mean"]["point_estimate"]
    raise SystemExit(f"no criterion result for {name!r}")
rows = ["| planner | time per plan | plans/s | vs cloning its input |", "|---|---|---|---|"]
for plan, baseline in [
    ("StormService plan, 100 RoleSets mid-rollout", "baseline: clone the StormService input"),
    ("RoleSet plan, 3 roles x 100 pods mid-rollout", "baseline: clone the RoleSet input"),
]:
    t, b = mean_ns(plan), mean_ns(baseline)
    rows.append(f"| {plan} | {t / 1000:.2f} µs | {1e9 / t:,.0f} | {t / b:.2f}× |")
pathlib.Path(sys.argv[1]).write_text("\n".join(rows) + "\n")
PY
echo "==> cache scale"
cargo bench --locked --bench cache
echo "==> controller (local control plane)"
hack/build-tools.sh >/dev/null
if ! e2e/cluster.sh status >/dev/null 2>&1; then
  STARTED_CLUSTER=1
  e2e/cluster.sh up >/dev/null
fi
e2e/cluster.sh nodes 4
export KUBECONFIG=$SQUALL_CLUSTER_DIR/kubeconfig
cargo build --locked --release --bin squall
SQUALL_BIN=$ROOT/target/release/squall cargo bench --locked -p e2e --bench controller
echo "==> hostile admission traffic (memory)"
SQUALL_BIN=$ROOT/target/release/squall cargo bench --locked -p e2e --bench hostile
echo "==> hostile status (memory)"
SQUALL_BIN=$ROOT/target/release/squall cargo bench --locked -p e2e --bench hostile_status

python3 - <<'PY'
import pathlib, datetime
out = pathlib.Path("target/bench")
table = "\n".join([
    f"Measured {datetime.date.today().isoformat()} by `make bench`.",
    "",
    "Admission (TLS + HTTP/1.1 keep-alive on loopback, a three-role canary StormService review; the no-op handler answers through the same layers — bounds, timeouts, decided where read — in the same run, each cell the median of five rounds taken in turn; CPU / req is the bench process's, client and server, user and kernel; a ratio is the no-op's cost over the webhook's, so 1.00× would cost nothing more). The cells run twice: on both CPUs, then with every thread of the bench on one CPU, where the figure is the work a request takes. On two CPUs client and server wake each other across CPUs for every request; on this virtual machine such a wake-up of an idle CPU goes through the hypervisor, is most of a request's CPU at concurrency 1, and grows with the handler's latency:",
    "",
    (out / "admission.md").read_text().strip(),
    "",
    "Planner (criterion; the baseline clones the planner's input in the same run):",
    "",
    (out / "planner.md").read_text().strip(),
    "",
    (out / "cache.md").read_text().strip(),
    "",
    (out / "controller.md").read_text().strip(),
    "",
    (out / "hostile.md").read_text().strip(),
    "",
    (out / "hostile_status.md").read_text().strip(),
])
readme = pathlib.Path("README.md")
text = readme.read_text()
begin, end = "<!-- bench:begin -->", "<!-- bench:end -->"
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
readme.write_text(f"{head}{begin}\n{table}\n{end}{tail}")
print(table)
PY
echo "bench: README.md updated"
