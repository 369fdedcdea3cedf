#!/usr/bin/env bash
# podman as this project runs it on its development and CI machines (root, no systemd, no
# container networking, no cgroup delegation): the vfs storage driver (no overlay mounts
# here), runc (crun fails on this kernel's cgroups and rlimits), cgroupfs, events to a file,
# containers' open-file and process limits at this shell's hard limits, processes at most
# pid_max (podman's defaults are above both, which runc may not set here). Its image store
# and its temporary folder (where builds keep `RUN --mount=type=cache` folders) are its own,
# in the cache folder beside the cluster tools: nothing the project builds lands in the
# repository or in the machine's default store. `hack/image.sh` and the image e2e test call
# podman only through this script.
#
# Usage: hack/podman.sh PODMAN-ARGS...      (e.g. hack/podman.sh images)
set -euo pipefail

STORE=${SQUALL_PODMAN_STORE:-${XDG_CACHE_HOME:-$HOME/.cache}/squall/podman}
command -v podman >/dev/null || {
  echo "podman.sh: podman is not installed (hack/image.sh installs Debian's podman and runc)" >&2
  exit 127
}
mkdir -p "$STORE"
nofile=$(ulimit -Hn) nproc=$(ulimit -Hu) pid_max=$(cat /proc/sys/kernel/pid_max)
[[ $nproc != unlimited ]] && ((nproc < pid_max)) || nproc=$pid_max
[[ $nofile != unlimited ]] || nofile=1048576
cat >"$STORE/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
CONF
export CONTAINERS_CONF=$STORE/containers.conf
mkdir -p "$STORE/tmp"
export TMPDIR=$STORE/tmp
exec podman --storage-driver vfs --root "$STORE/storage" --runroot "$STORE/run" \
  --runtime runc --cgroup-manager cgroupfs --events-backend file "$@"
