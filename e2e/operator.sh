#!/usr/bin/env bash
# The operator the ordinary e2e tests share: `squall run --local` against the local control
# plane, on free loopback ports, registering its webhooks as `squall`.
#
# Usage: e2e/operator.sh start|stop
#   start  start it (PID in $SQUALL_CLUSTER_DIR/squall.pid, log in logs/squall.log, admin
#          address in operator.env), wait for /readyz, print `export SQUALL_ADMIN_ADDR=...`
#   stop   SIGTERM it by PID and remove its webhook configurations
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/tools/versions.sh
source "$ROOT/hack/tools/versions.sh"
export PATH="$SQUALL_TOOLS_BIN:$PATH"
W=${SQUALL_CLUSTER_DIR:-$ROOT/target/e2e-cluster}
BIN=${SQUALL_BIN:-$ROOT/target/debug/squall}
export KUBECONFIG=$W/kubeconfig

running_pid() {
  [[ -f $W/squall.pid ]] || return 1
  local pid
  pid=$(<"$W/squall.pid")
  [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -F "$BIN run" >/dev/null || return 1
  echo "$pid"
}

start() {
  [[ -x $BIN ]] || { echo "operator: $BIN missing; run cargo build --bin squall" >&2; exit 1; }
  running_pid >/dev/null && { echo "operator: already running" >&2; exit 1; }
  read -r WEBHOOK_PORT ADMIN_PORT < <(python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
  mkdir -p "$W/logs"
  RUST_LOG=${RUST_LOG:-info} "$BIN" run --local --log-format plain --release squall \
    --webhook-bind "127.0.0.1:$WEBHOOK_PORT" --admin-bind "127.0.0.1:$ADMIN_PORT" \
    --cert-dir "$W/operator-certs" >"$W/logs/squall.log" 2>&1 &
  echo $! >"$W/squall.pid"
  local deadline=$((SECONDS + 60))
  until curl -fsS "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)) || ! running_pid >/dev/null; then
      echo "operator: not ready after 60s; last log lines:" >&2
      tail -n 30 "$W/logs/squall.log" >&2
      exit 1
    fi
    sleep 0.2
  done
  echo "SQUALL_ADMIN_ADDR=127.0.0.1:$ADMIN_PORT" >"$W/operator.env"
  echo "operator: ready (webhooks https://127.0.0.1:$WEBHOOK_PORT, admin http://127.0.0.1:$ADMIN_PORT)" >&2
  echo "export SQUALL_ADMIN_ADDR=127.0.0.1:$ADMIN_PORT"
}

stop() {
  local pid
  if pid=$(running_pid); then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    echo "operator: stopped" >&2
  fi
  rm -f "$W/squall.pid" "$W/operator.env"
  kubectl delete mutatingwebhookconfiguration,validatingwebhookconfiguration squall --ignore-not-found >/dev/null 2>&1 || true
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
