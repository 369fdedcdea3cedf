# Versions of the Go-built tools; sourced by hack/build-tools.sh and e2e/cluster.sh.
# Each must match the `require` line of its tools module in hack/tools/<name>/go.mod.
K8S_VERSION=1.34.4
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.7.0
HELM_VERSION=v3.21.4
# Prometheus for the canary analysis e2e tests: Debian bookworm's package (installed into the
# same bin folder by hack/build-tools.sh, not built: its Go module tree is far larger than
# the rest of the tools together).
PROMETHEUS_DEB_VERSION=2.42.0+ds-5+deb12u1

SQUALL_TOOLS_BIN=${SQUALL_TOOLS_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/squall/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION-helm-$HELM_VERSION/bin}
