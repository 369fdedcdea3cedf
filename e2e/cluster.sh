#!/usr/bin/env bash
# The local control plane for squall's e2e suite: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler and kwok (fake nodes and pods), all listening on
# and dialling loopback only (docs/architecture.md#loopback-only). Binaries come from hack/build-tools.sh.
#
# Usage: e2e/cluster.sh up|down|status|restart-apiserver|nodes N
#   up                 start everything (or reuse a healthy cluster), print `export KUBECONFIG=...`
#   nodes N            at least N fake nodes (kwok-node-0 …), each Ready and untainted; the
#                      controller bench's 5,000-pod fleet needs 4 (2,000 pods each)
#   down               stop exactly the processes `up` started, by PID
#   status             print each component's state; non-zero unless all are up
#   restart-apiserver  stop and start kube-apiserver with the same flags (disruption tests)
#
# State (PKI, pids, logs, kubeconfig) lives in $SQUALL_CLUSTER_DIR (default
# target/e2e-cluster); component logs are in its logs/ folder. SQUALL_E2E_NODES sets the
# number of fake nodes (2); SQUALL_APISERVER_PROFILING=true serves the API server's
# /debug/pprof (`kubectl get --raw '/debug/pprof/profile?seconds=30'`) for diagnosis.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/tools/versions.sh
source "$ROOT/hack/tools/versions.sh"
export PATH="$SQUALL_TOOLS_BIN:$PATH"
W=${SQUALL_CLUSTER_DIR:-$ROOT/target/e2e-cluster}
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
NODES=${SQUALL_E2E_NODES:-2}

log() { echo "cluster: $*" >&2; }

pid_of() { # component -> pid if it is running our binary
  local file=$W/$1.pid pid
  [[ -f $file ]] || return 1
  pid=$(<"$file")
  [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -F "$SQUALL_TOOLS_BIN/$1" >/dev/null || return 1
  echo "$pid"
}

wait_for() { # description, timeout seconds, log name, command...
  local what=$1 timeout=$2 logname=$3; shift 3
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      log "timed out after ${timeout}s waiting for $what"
      [[ -n $logname && -f $W/logs/$logname.log ]] && { log "last lines of $W/logs/$logname.log:"; tail -n 30 "$W/logs/$logname.log" >&2; }
      return 1
    fi
    sleep 0.5
  done
}

free_ports() { # count -> that many free loopback ports
  python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

start() { # component, args... (binary is $SQUALL_TOOLS_BIN/<component>)
  local name=$1; shift
  printf '%q ' "$SQUALL_TOOLS_BIN/$name" "$@" >"$W/$name.cmd"
  "$SQUALL_TOOLS_BIN/$name" "$@" >"$W/logs/$name.log" 2>&1 &
  echo $! >"$W/$name.pid"
}

stop() { # component
  local pid
  pid=$(pid_of "$1") || { rm -f "$W/$1.pid"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  rm -f "$W/$1.pid"
}

kubectl_() { kubectl --kubeconfig "$W/kubeconfig" "$@"; }

make_pki() {
  local P=$W/pki
  mkdir -p "$P"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=squall-e2e-ca" \
    -keyout "$P/ca.key" -out "$P/ca.crt" 2>/dev/null
  sign() { # name subject extensions
    openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$P/$1.key" -out "$P/$1.csr" 2>/dev/null
    printf '%b' "$3" >"$P/$1.ext"
    openssl x509 -req -in "$P/$1.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial \
      -days 3650 -extfile "$P/$1.ext" -out "$P/$1.crt" 2>/dev/null
  }
  sign apiserver "/CN=kube-apiserver" \
    "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\nextendedKeyUsage=serverAuth\n"
  sign admin "/O=system:masters/CN=squall-e2e-admin" "extendedKeyUsage=clientAuth\n"
  openssl genrsa -out "$P/sa.key" 2048 2>/dev/null
  openssl rsa -in "$P/sa.key" -pubout -out "$P/sa.pub" 2>/dev/null
}

write_kubeconfig() {
  local P=$W/pki
  cat >"$W/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: squall-e2e
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 "$P/ca.crt")
users:
- name: squall-e2e-admin
  user:
    client-certificate-data: $(base64 -w0 "$P/admin.crt")
    client-key-data: $(base64 -w0 "$P/admin.key")
contexts:
- name: squall-e2e
  context: {cluster: squall-e2e, user: squall-e2e-admin}
current-context: squall-e2e
EOF
}

apiserver_ready() { curl -fsS --cacert "$W/pki/ca.crt" "https://127.0.0.1:$API_PORT/readyz" | grep -x ok >/dev/null; }

start_apiserver() {
  local P=$W/pki
  start kube-apiserver \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --secure-port="$API_PORT" --advertise-address=127.0.0.1 \
    --endpoint-reconciler-type=none \
    --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
    --client-ca-file="$P/ca.crt" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
    --service-cluster-ip-range=10.96.0.0/16 \
    --authorization-mode=Node,RBAC --allow-privileged=true \
    --max-requests-inflight=1000 --max-mutating-requests-inflight=500 \
    --profiling=${SQUALL_APISERVER_PROFILING:-false} --v=1
  wait_for "kube-apiserver /readyz" 120 kube-apiserver apiserver_ready
}

up() {
  if status >/dev/null 2>&1; then
    log "already running"
    echo "export KUBECONFIG=$W/kubeconfig"
    return
  fi
  for bin in etcd kube-apiserver kube-controller-manager kube-scheduler kwok kubectl; do
    [[ -x $SQUALL_TOOLS_BIN/$bin ]] || { log "missing $SQUALL_TOOLS_BIN/$bin; run hack/build-tools.sh"; exit 1; }
  done
  down >/dev/null 2>&1 || true
  rm -rf "$W"
  mkdir -p "$W/logs" "$W/etcd"
  local start_time=$SECONDS
  make_pki
  read -r ETCD_PORT PEER_PORT API_PORT KCM_PORT SCHED_PORT < <(free_ports 5)
  printf 'ETCD_PORT=%s\nPEER_PORT=%s\nAPI_PORT=%s\nKCM_PORT=%s\nSCHED_PORT=%s\n' \
    "$ETCD_PORT" "$PEER_PORT" "$API_PORT" "$KCM_PORT" "$SCHED_PORT" >"$W/env"
  write_kubeconfig

  log "starting etcd on 127.0.0.1:$ETCD_PORT"
  start etcd --name e2e --data-dir "$W/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" \
    --initial-cluster "e2e=http://127.0.0.1:$PEER_PORT" \
    --unsafe-no-fsync=true --quota-backend-bytes=2147483648 --auto-compaction-retention=1 --log-level=warn
  wait_for "etcd /readyz" 30 etcd curl -fsS "http://127.0.0.1:$ETCD_PORT/readyz"

  log "starting kube-apiserver on 127.0.0.1:$API_PORT"
  start_apiserver

  log "starting kube-controller-manager and kube-scheduler"
  start kube-controller-manager --kubeconfig="$W/kubeconfig" --bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
    --leader-elect=false --root-ca-file="$W/pki/ca.crt" --service-account-private-key-file="$W/pki/sa.key" \
    --cluster-signing-cert-file="$W/pki/ca.crt" --cluster-signing-key-file="$W/pki/ca.key" \
    --use-service-account-credentials=false \
    --node-monitor-period=5s --node-monitor-grace-period=10m \
    --kube-api-qps=200 --kube-api-burst=400 --concurrent-gc-syncs=10
  start kube-scheduler --kubeconfig="$W/kubeconfig" --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" \
    --leader-elect=false --kube-api-qps=200 --kube-api-burst=400
  wait_for "kube-controller-manager /healthz" 60 kube-controller-manager curl -fsSk "https://127.0.0.1:$KCM_PORT/healthz"
  wait_for "kube-scheduler /healthz" 60 kube-scheduler curl -fsSk "https://127.0.0.1:$SCHED_PORT/healthz"

  log "starting kwok with e2e/kwok-stages.yaml"
  start kwok --kubeconfig="$W/kubeconfig" --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --cidr=10.244.0.0/16 --node-ip=127.0.0.1 --node-lease-duration-seconds=40 \
    --config="$ROOT/e2e/kwok-stages.yaml"

  nodes "$NODES"
  wait_for "default service account" 60 kube-controller-manager kubectl_ -n default get serviceaccount default
  log "up in $((SECONDS - start_time))s: $(kubectl_ version -o json | sed -n 's/.*"gitVersion": "\(v[^"]*\)".*/\1/p' | tail -1)"
  echo "export KUBECONFIG=$W/kubeconfig"
}

nodes() { # count: creates the missing ones of kwok-node-0 … kwok-node-(count-1)
  local count=$1 i
  [[ $count =~ ^[0-9]+$ ]] || { log "nodes: a count, not '$count'"; exit 2; }
  log "$count fake nodes"
  for i in $(seq 0 $((count - 1))); do
    kubectl_ apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations: {kwok.x-k8s.io/node: fake}
  labels: {kubernetes.io/os: linux, kubernetes.io/arch: amd64, kubernetes.io/hostname: kwok-node-$i, type: kwok, topology.kubernetes.io/zone: zone-$((i % 2))}
EOF
  done
  wait_for "nodes Ready" 90 kwok kubectl_ wait --for=condition=Ready node --all --timeout=2s
  wait_for "not-ready taints removed" 90 kube-controller-manager \
    bash -c "! kubectl --kubeconfig '$W/kubeconfig' get nodes -o jsonpath='{.items[*].spec.taints[*].key}' | grep -q ."
}

down() {
  local c
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    c=${COMPONENTS[i]}
    if pid_of "$c" >/dev/null; then log "stopping $c"; fi
    stop "$c"
  done
}

status() {
  [[ -f $W/env ]] || { echo "no cluster in $W"; return 1; }
  # shellcheck disable=SC1091
  source "$W/env"
  local ok=0 c pid
  for c in "${COMPONENTS[@]}"; do
    if pid=$(pid_of "$c"); then echo "$c: running (pid $pid)"; else echo "$c: stopped"; ok=1; fi
  done
  if apiserver_ready; then echo "kube-apiserver: ready at https://127.0.0.1:$API_PORT"; else echo "kube-apiserver: not ready"; ok=1; fi
  echo "KUBECONFIG=$W/kubeconfig"
  return $ok
}

restart_apiserver() {
  # shellcheck disable=SC1091
  source "$W/env"
  log "restarting kube-apiserver"
  stop kube-apiserver
  start_apiserver
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  restart-apiserver) restart_apiserver ;;
  nodes) status >/dev/null || { log "no cluster running: $0 up first"; exit 1; }; nodes "${2:?usage: $0 nodes N}" ;;
  *) echo "usage: $0 up|down|status|restart-apiserver|nodes N" >&2; exit 2 ;;
esac
