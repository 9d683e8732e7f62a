# syntax=docker/dockerfile:1
#
# Build:  docker build -t ratekeeper .
# Run:    docker run --rm -p 8080:8080 ratekeeper                       (embedded store)
#         docker run --rm -p 8080:8080 -e RATEKEEPER_REDIS__URL=redis://redis:6379 ratekeeper
# Or:     docker compose up   (Redis + ratekeeper, see docker-compose.yml)

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY lua ./lua
COPY config ./config
# Cache the registry and target directory between builds; copy the binary out
# because cache mounts are not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin ratekeeper \
    && cp target/release/ratekeeper /ratekeeper

# distroless/cc: glibc and libgcc only, no shell, runs as uid 65532 (nonroot).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /ratekeeper /usr/local/bin/ratekeeper
ENV RATEKEEPER_SERVER__LISTEN=0.0.0.0:8080 \
    RATEKEEPER_LOG__FORMAT=json
USER nonroot:nonroot
EXPOSE 8080
# The Envoy rate limit service, when grpc.listen is set (e.g. 0.0.0.0:8081).
EXPOSE 8081
# The binary probes itself (the image has no curl or wget). It reads the same
# configuration as `serve`, so it follows a changed server.listen.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["/usr/local/bin/ratekeeper", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/ratekeeper"]
CMD ["serve"]
