#!/usr/bin/env bash
# `make image`: the project's Dockerfile built with podman on this machine, where the public
# bases (rust:1.95-bookworm, gcr.io/distroless/cc-debian12:nonroot) cannot be pulled. Both
# bases get local stand-ins made from Debian's packages only, cached in podman's store
# (hack/podman.sh) outside the repository and made once per STANDIN_REVISION:
#   build    Debian bookworm (debootstrap minbase) with gcc, libc6-dev and make (jemalloc's
#            build), cargo offline; the build mounts the machine's Rust toolchain and cargo
#            registry read-only, so it downloads nothing the host could not (and runs
#            without a network);
#   runtime  what distroless cc-debian12 holds, unpacked from the same Debian packages:
#            glibc, libgcc, libstdc++, libgomp, libssl, CA certificates, tzdata, netbase,
#            base-files; users root and nonroot (65532), USER 65532, no shell.
# The Dockerfile is a user's: only its two base arguments differ, and the build gets the
# toolchain and crates by read-only mounts. Installs podman, runc and debootstrap from
# Debian's packages when missing.
#
# Usage: hack/image.sh    builds $SQUALL_IMAGE (default localhost/squall:dev); prints the
#                         image's size and a timing table
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
IMAGE=${SQUALL_IMAGE:-localhost/squall:dev}
# Bump when a stand-in's recipe below changes: its tag changes, so it is made again.
STANDIN_REVISION=2
BUILD_BASE=localhost/squall-standin/rust:bookworm-r$STANDIN_REVISION
RUNTIME_BASE=localhost/squall-standin/cc-debian12:nonroot-r$STANDIN_REVISION
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
RUNTIME_PACKAGES=(base-files netbase tzdata ca-certificates libc6 libgcc-s1 libstdc++6 libgomp1 libssl3)
PODMAN=("$ROOT/hack/podman.sh")

declare -a PHASES=()
phase() { # name, then the command
  local name=$1 start=$SECONDS; shift
  echo "==> $name"
  "$@"
  PHASES+=("$(printf '%-34s %5ss' "$name" $((SECONDS - start)))")
}

# Runs an apt-get command; when it fails, refreshes the package lists and runs it again (a
# new machine's lists may name versions the mirror no longer serves).
with_fresh_lists() {
  "$@" && return
  echo "    package lists are stale: apt-get update, then again" >&2
  apt-get update -q >/dev/null
  "$@"
}

install_packages() {
  local missing=() tool
  for tool in podman runc debootstrap; do command -v "$tool" >/dev/null || missing+=("$tool"); done
  if ((${#missing[@]} == 0)); then echo "    installed: $(podman --version), $(runc --version | sed -n 1p)"; return; fi
  [[ $(id -u) == 0 ]] || { echo "image: install ${missing[*]} (Debian: apt-get install ${missing[*]}), then again" >&2; return 1; }
  echo "    installing ${missing[*]} from Debian's packages"
  with_fresh_lists env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
}

has_image() { "${PODMAN[@]}" image exists "$1"; }

# Imports a root folder as an image with the given --change instructions.
import_root() { # folder, image, changes...
  local folder=$1 image=$2; shift 2
  local changes=() change
  for change in "$@"; do changes+=(--change "$change"); done
  tar --numeric-owner -C "$folder" -cf - . | "${PODMAN[@]}" import "${changes[@]}" - "$image" >/dev/null
}

build_base() {
  if has_image "$BUILD_BASE"; then echo "    $BUILD_BASE: cached"; return; fi
  local work
  work=$(mktemp -d)
  echo "    debootstrap bookworm (minbase, gcc, make, libc6-dev) from $DEBIAN_MIRROR"
  debootstrap --variant=minbase --include=gcc,make,libc6-dev,ca-certificates bookworm "$work/root" \
    "$DEBIAN_MIRROR" >"$work/debootstrap.log" 2>&1 \
    || { tail -n 20 "$work/debootstrap.log" >&2; return 1; }
  rm -rf "$work/root/var/cache/apt/archives"/*.deb "$work/root/var/lib/apt/lists"/*
  mkdir -p "$work/root/usr/local/rust" "$work/root/usr/local/cargo/registry"
  import_root "$work/root" "$BUILD_BASE" \
    "ENV PATH=/usr/local/rust/bin:/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    "ENV CARGO_HOME=/usr/local/cargo" "ENV CARGO_NET_OFFLINE=true" \
    "LABEL dev.squall.standin=rust:1.95-bookworm"
  rm -rf "$work"
}

runtime_base() {
  if has_image "$RUNTIME_BASE"; then echo "    $RUNTIME_BASE: cached"; return; fi
  local work root deb
  work=$(mktemp -d)
  root=$work/root
  echo "    unpacking ${RUNTIME_PACKAGES[*]}"
  (cd "$work" && with_fresh_lists apt-get download -q -o APT::Sandbox::User=root "${RUNTIME_PACKAGES[@]}" >/dev/null)
  for deb in "$work"/*.deb; do dpkg -x "$deb" "$root"; done
  # What distroless adds on top of the packages: the CA bundle update-ca-certificates would
  # write, the users and groups, a home for nonroot, a world-writable /tmp; no docs.
  mkdir -p "$root/etc/ssl/certs" "$root/home/nonroot" "$root/root" "$root/tmp"
  cat "$root"/usr/share/ca-certificates/mozilla/*.crt >"$root/etc/ssl/certs/ca-certificates.crt"
  printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' \
    'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
    'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$root/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'nonroot:x:65532:' >"$root/etc/group"
  chown 65532:65532 "$root/home/nonroot"
  chmod 0700 "$root/root" && chmod 1777 "$root/tmp"
  rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/lintian"
  import_root "$root" "$RUNTIME_BASE" "USER 65532:65532" "WORKDIR /home/nonroot" \
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" \
    "LABEL dev.squall.standin=gcr.io/distroless/cc-debian12:nonroot"
  rm -rf "$work"
}

build_image() {
  local sysroot registry
  sysroot=$(rustc --print sysroot)
  registry=${CARGO_HOME:-$HOME/.cargo}/registry
  echo "    $(rustc --version) from $sysroot; crates from $registry (offline, no network)"
  "${PODMAN[@]}" build --network none --layers \
    --build-arg "BUILD_BASE=$BUILD_BASE" --build-arg "RUNTIME_BASE=$RUNTIME_BASE" \
    --volume "$sysroot:/usr/local/rust:ro" --volume "$registry:/usr/local/cargo/registry:ro" \
    --tag "$IMAGE" --file Dockerfile .
}

total_start=$SECONDS
phase "podman, runc, debootstrap" install_packages
phase "stand-in build base" build_base
phase "stand-in runtime base" runtime_base
phase "image build ($IMAGE)" build_image
echo "==> $IMAGE: $("${PODMAN[@]}" image inspect --format '{{.Size}}' "$IMAGE" | awk '{ printf "%.1f MiB", $1 / 1048576 }')"
echo "==> image timing"
printf '  %s\n' "${PHASES[@]}"
printf '  %-34s %5ss\n' "total" $((SECONDS - total_start))
