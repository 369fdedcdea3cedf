#!/usr/bin/env bash
# The operator the ordinary e2e tests share, installed the way cluster admins install it:
# `helm install --wait` of charts/squall (its pods are kwok pods) with `webhook.url`
# pointing the webhook configurations at 127.0.0.1, then one squall process on loopback
# that runs with exactly the container args and env of the installed Deployment, under the
# chart ServiceAccount's token (a TokenRequest bound to one of the chart's pods), as the
# image's non-root user with an unwritable working directory and HOME. Every ordinary e2e
# test passing against it proves the chart's RBAC is enough (docs/architecture.md#the-process, docs/architecture.md#loopback-only).
#
# Usage: e2e/operator.sh start|stop
#   start  install the chart, start the process (PID in $SQUALL_CLUSTER_DIR/squall.pid, log
#          in logs/squall.log, admin address in operator.env), wait for /readyz, print
#          `export SQUALL_ADMIN_ADDR=...`
#   stop   SIGTERM the process by PID, uninstall the release
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/tools/versions.sh
source "$ROOT/hack/tools/versions.sh"
export PATH="$SQUALL_TOOLS_BIN:$PATH"
W=${SQUALL_CLUSTER_DIR:-$ROOT/target/e2e-cluster}
BIN=${SQUALL_BIN:-$ROOT/target/debug/squall}
export KUBECONFIG=$W/kubeconfig
RELEASE=squall
NAMESPACE=squall-system
# The image's user (Dockerfile, chart securityContext) when the harness runs as root;
# otherwise the current user (who cannot switch users).
RUN_AS=65532
[[ $(id -u) == 0 ]] || RUN_AS=$(id -u)
SA_DIR=$W/operator-sa

# The PID file's process, if it is still a squall operator (whichever binary started it: a
# `stop` without the `SQUALL_BIN` of its `start` stops it too).
running_pid() {
  [[ -f $W/squall.pid ]] || return 1
  local pid
  pid=$(<"$W/squall.pid")
  [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -E "squall run( |$)" >/dev/null || return 1
  echo "$pid"
}

# The process's command line and environment from the installed Deployment, one NUL-ended
# item each: args first, then a `--` line, then NAME=VALUE pairs with fieldRefs resolved
# from the given pod.
rendered_command() { # pod
  local pod_json
  pod_json=$(kubectl get pod -n "$NAMESPACE" "$1" -o json)
  # kubectl turns the release's YAML into JSON (no YAML module needed in Python).
  helm get manifest "$RELEASE" -n "$NAMESPACE" | kubectl create --dry-run=client -o json -f - \
    | POD_JSON=$pod_json python3 -c '
import json, os, sys
pod = json.loads(os.environ["POD_JSON"])
text, objects, at = sys.stdin.read(), [], 0
decoder = json.JSONDecoder()
while text[at:].strip():
    obj, end = decoder.raw_decode(text, at + len(text[at:]) - len(text[at:].lstrip()))
    objects.append(obj)
    at = end
deployments = [d for d in objects if d.get("kind") == "Deployment"]
assert len(deployments) == 1, f"expected one Deployment in the release, found {len(deployments)}"
container = deployments[0]["spec"]["template"]["spec"]["containers"][0]
out = list(container["args"]) + ["--"]
for env in container.get("env", []):
    if "value" in env:
        value = env["value"]
    else:
        path = env["valueFrom"]["fieldRef"]["fieldPath"]
        value = {"metadata.name": pod["metadata"]["name"],
                 "metadata.namespace": pod["metadata"]["namespace"]}[path]
    out.append(env["name"] + "=" + value)
sys.stdout.write("".join(item + "\0" for item in out))
'
}

# A kubeconfig with the ServiceAccount's token, bound to the pod, readable by RUN_AS only.
service_account_kubeconfig() { # pod
  local token server ca
  token=$(kubectl create token "$RELEASE" -n "$NAMESPACE" --duration=24h \
    --bound-object-kind=Pod --bound-object-name="$1")
  server=$(kubectl config view --raw -o jsonpath='{.clusters[0].cluster.server}')
  ca=$(kubectl config view --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  rm -rf "$SA_DIR" && mkdir -p "$SA_DIR/home"
  cat >"$SA_DIR/kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "$server", certificate-authority-data: "$ca"}
users:
- name: $RELEASE
  user: {token: "$token"}
contexts:
- name: local
  context: {cluster: local, user: $RELEASE, namespace: $NAMESPACE}
current-context: local
KUBECONFIG
  [[ $(id -u) != 0 ]] || chown "$RUN_AS:$RUN_AS" "$SA_DIR/kubeconfig"
  chmod 0400 "$SA_DIR/kubeconfig"
  # HOME and the working directory: without write permission for anyone.
  chmod 0555 "$SA_DIR/home"
}

start() {
  [[ -x $BIN ]] || { echo "operator: $BIN missing; run cargo build --bin squall" >&2; exit 1; }
  running_pid >/dev/null && { echo "operator: already running" >&2; exit 1; }
  read -r WEBHOOK_PORT ADMIN_PORT < <(python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
  mkdir -p "$W/logs"
  # CRDs come from manifests/crds (the tests apply them); the chart's CRD templates are
  # exercised by e2e/tests/suite/serial/chart.rs.
  helm upgrade --install "$RELEASE" "$ROOT/charts/squall" --namespace "$NAMESPACE" --create-namespace \
    --set crds.install=false --set bindAddress=127.0.0.1 \
    --set webhook.port="$WEBHOOK_PORT" --set admin.port="$ADMIN_PORT" \
    --set webhook.url="https://127.0.0.1:$WEBHOOK_PORT" --set logging.format=plain \
    --wait --timeout 120s >"$W/logs/helm-install.log" 2>&1 \
    || { echo "operator: helm install failed:" >&2; cat "$W/logs/helm-install.log" >&2; exit 1; }
  local pod
  pod=$(kubectl get pods -n "$NAMESPACE" -l "app.kubernetes.io/instance=$RELEASE" \
    --field-selector=status.phase=Running -o jsonpath='{.items[0].metadata.name}')
  service_account_kubeconfig "$pod"
  rendered_command "$pod" >"$SA_DIR/command"
  local -a args=() env=()
  local item seen_separator=0
  while IFS= read -r -d '' item; do
    if [[ $item == -- ]]; then seen_separator=1
    elif ((seen_separator)); then env+=("$item")
    else args+=("$item"); fi
  done <"$SA_DIR/command"
  echo "operator: as pod $pod: squall ${args[*]} (env: ${env[*]})" >"$W/logs/squall.log"
  local -a as_user=()
  [[ $(id -u) != 0 ]] || as_user=(setpriv --reuid="$RUN_AS" --regid="$RUN_AS" --clear-groups)
  (cd "$SA_DIR/home" && exec "${as_user[@]}" \
    env -i PATH=/usr/bin:/bin HOME="$SA_DIR/home" KUBECONFIG="$SA_DIR/kubeconfig" "${env[@]}" \
    "$BIN" "${args[@]}") >>"$W/logs/squall.log" 2>&1 &
  echo $! >"$W/squall.pid"
  local deadline=$((SECONDS + 60))
  until curl -fsS "http://127.0.0.1:$ADMIN_PORT/readyz" >/dev/null 2>&1; do
    # kill -0, not running_pid: until the subshell has exec'd, its command line is bash's.
    if ((SECONDS >= deadline)) || ! kill -0 "$(<"$W/squall.pid")" 2>/dev/null; then
      echo "operator: exited, or not ready within 60s; last log lines:" >&2
      tail -n 30 "$W/logs/squall.log" >&2
      exit 1
    fi
    sleep 0.2
  done
  printf 'SQUALL_ADMIN_ADDR=127.0.0.1:%s\nSQUALL_OPERATOR_UID=%s\n' "$ADMIN_PORT" "$RUN_AS" >"$W/operator.env"
  echo "operator: ready (chart release $NAMESPACE/$RELEASE, webhooks https://127.0.0.1:$WEBHOOK_PORT, admin http://127.0.0.1:$ADMIN_PORT)" >&2
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
  rm -rf "$SA_DIR"
  # The webhook configurations go with the release: a stopped operator must not block applies.
  helm uninstall "$RELEASE" -n "$NAMESPACE" --wait --timeout 60s >/dev/null 2>&1 || true
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
