#!/usr/bin/env bash
# Builds the local control plane (kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl, etcd, kwok) and helm from the committed Go tools modules in hack/tools/ into a
# cache directory outside the repository, and unpacks Debian's Prometheus (for the canary
# analysis tests) beside them. Idempotent: a binary whose version already
# matches is not rebuilt. Prints progress and a per-phase timing table.
#
# Usage: hack/build-tools.sh            build what is missing, print the bin dir last
#        hack/build-tools.sh --print-bin print the bin dir only (no build)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/tools/versions.sh
source "$ROOT/hack/tools/versions.sh"

if [[ "${1:-}" == "--print-bin" ]]; then
  echo "$SQUALL_TOOLS_BIN"
  exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-trimpath -mod=mod"
command -v go >/dev/null || { echo "build-tools: Go is required (go version: not found)" >&2; exit 1; }
mkdir -p "$SQUALL_TOOLS_BIN"

declare -a PHASES=()
phase() { # name, then the command
  local name=$1; shift
  local start=$SECONDS
  echo "==> $name"
  "$@"
  PHASES+=("$(printf '%-28s %5ss' "$name" $((SECONDS - start)))")
}

has_version() { # binary, expected substring, version args...
  local bin=$SQUALL_TOOLS_BIN/$1 want=$2; shift 2
  [[ -x "$bin" ]] && "$bin" "$@" 2>/dev/null | grep -F -- "$want" >/dev/null
}

build_kubernetes() {
  local ldf="-s -w" k
  for k in component-base/version client-go/pkg/version; do
    ldf+=" -X k8s.io/$k.gitVersion=v$K8S_VERSION -X k8s.io/$k.gitMajor=${K8S_VERSION%%.*}"
    ldf+=" -X k8s.io/$k.gitMinor=$(cut -d. -f2 <<<"$K8S_VERSION") -X k8s.io/$k.gitTreeState=clean"
    ldf+=" -X k8s.io/$k.buildDate=2000-01-01T00:00:00Z"
  done
  local missing=()
  for k in kube-apiserver kube-controller-manager kube-scheduler; do
    has_version "$k" "v$K8S_VERSION" --version || missing+=("k8s.io/kubernetes/cmd/$k")
  done
  has_version kubectl "v$K8S_VERSION" version --client || missing+=("k8s.io/kubernetes/cmd/kubectl")
  if ((${#missing[@]} == 0)); then echo "    up to date"; return; fi
  echo "    building ${missing[*]##*/} (cold: 15-25 min on 2 cores)"
  (cd "$ROOT/hack/tools/k8s" && go build -p 2 -ldflags "$ldf" -o "$SQUALL_TOOLS_BIN/" "${missing[@]}")
}

build_etcd() {
  if has_version etcd "etcd Version: ${ETCD_VERSION#v}" --version; then echo "    up to date"; return; fi
  (cd "$ROOT/hack/tools/etcd" && go build -ldflags "-s -w" -o "$SQUALL_TOOLS_BIN/etcd" go.etcd.io/etcd/server/v3)
}

build_kwok() {
  if has_version kwok "${KWOK_VERSION#v}" --version; then echo "    up to date"; return; fi
  (cd "$ROOT/hack/tools/kwok" && go build -ldflags "-s -w" -o "$SQUALL_TOOLS_BIN/kwok" sigs.k8s.io/kwok/cmd/kwok)
}

build_helm() {
  if has_version helm "$HELM_VERSION" version --short; then echo "    up to date"; return; fi
  local minor p ldf="-s -w"
  minor=$(cut -d. -f2 <<<"$K8S_VERSION")
  ldf+=" -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.metadata="
  for p in pkg/chartutil pkg/lint/rules; do
    ldf+=" -X helm.sh/helm/v3/$p.k8sVersionMajor=1 -X helm.sh/helm/v3/$p.k8sVersionMinor=$minor"
  done
  (cd "$ROOT/hack/tools/helm" && go build -ldflags "$ldf" -o "$SQUALL_TOOLS_BIN/helm" helm.sh/helm/v3/cmd/helm)
}

# Debian's package, unpacked (not installed: no service, no system change): `apt-get
# download` fetches the pinned version, `dpkg -x` extracts its binary.
install_prometheus() {
  local want=${PROMETHEUS_DEB_VERSION%%+*}
  if has_version prometheus "version $want" --version; then echo "    up to date"; return; fi
  command -v apt-get >/dev/null || { echo "build-tools: Prometheus needs apt-get (Debian)" >&2; return 1; }
  local work
  work=$(mktemp -d)
  if ! (cd "$work" && apt-get download -q -o APT::Sandbox::User=root "prometheus=$PROMETHEUS_DEB_VERSION"); then
    echo "    package lists are stale: apt-get update, then again"
    apt-get update -q >/dev/null
    (cd "$work" && apt-get download -q -o APT::Sandbox::User=root "prometheus=$PROMETHEUS_DEB_VERSION")
  fi
  dpkg -x "$work"/prometheus_*.deb "$work/root"
  install -m 0755 "$work/root/usr/bin/prometheus" "$SQUALL_TOOLS_BIN/prometheus"
  rm -rf "$work"
}

echo "build-tools: $(go version); binaries in $SQUALL_TOOLS_BIN"
total_start=$SECONDS
phase "kubernetes v$K8S_VERSION" build_kubernetes
phase "etcd $ETCD_VERSION" build_etcd
phase "kwok $KWOK_VERSION" build_kwok
phase "helm $HELM_VERSION" build_helm
phase "prometheus $PROMETHEUS_DEB_VERSION" install_prometheus

echo "==> versions"
"$SQUALL_TOOLS_BIN/kube-apiserver" --version
"$SQUALL_TOOLS_BIN/kubectl" version --client | sed -n 1p
"$SQUALL_TOOLS_BIN/etcd" --version | sed -n 1p
"$SQUALL_TOOLS_BIN/kwok" --version | sed -n 1p
"$SQUALL_TOOLS_BIN/helm" version --short
"$SQUALL_TOOLS_BIN/prometheus" --version 2>&1 | sed -n 1p

echo "==> tools build timing"
printf '  %s\n' "${PHASES[@]}"
printf '  %-28s %5ss\n' "total" $((SECONDS - total_start))
