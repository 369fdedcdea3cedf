# syntax=docker/dockerfile:1
# Multi-stage build of the squall operator. The runtime image is distroless (glibc, no shell)
# and runs as a non-root user.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin squall \
 && install -D -m 0755 target/release/squall /out/squall

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/squall /usr/local/bin/squall
USER 65532:65532
# The webhook (HTTPS) and admin (/healthz, /readyz, /metrics) ports, as `squall run` binds them.
EXPOSE 9443 8080
ENTRYPOINT ["/usr/local/bin/squall"]
