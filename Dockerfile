# syntax=docker/dockerfile:1
# Multi-stage build of the squall operator. The runtime image is distroless (glibc, no shell)
# and runs as a non-root user.
#
# The bases are build arguments so that `make image` (hack/image.sh) can build this same file
# on a machine that cannot pull them, with local stand-ins of the same contents; a user's
# `docker build .` or `podman build .` takes the public images below.
ARG BUILD_BASE=rust:1.95-bookworm
ARG RUNTIME_BASE=gcr.io/distroless/cc-debian12:nonroot

FROM ${BUILD_BASE} AS build
WORKDIR /src
COPY . .
# The target folder is a cache mount: kept between builds, never part of a layer.
RUN --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin squall \
 && install -D -m 0755 target/release/squall /out/squall

FROM ${RUNTIME_BASE}
COPY --from=build /out/squall /usr/local/bin/squall
USER 65532:65532
# The webhook (HTTPS) and admin (/healthz, /readyz, /metrics) ports, as `squall run` binds them.
EXPOSE 9443 8080
ENTRYPOINT ["/usr/local/bin/squall"]
