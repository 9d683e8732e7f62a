# Build:  docker build -t ratekeeper .
# Run:    docker run --rm -p 127.0.0.1:8080:8080 ratekeeper                  (embedded store)
#         docker run --rm -p 127.0.0.1:8080:8080 -e RATEKEEPER_REDIS__URL=redis://redis:6379 ratekeeper
# Or:     docker compose up --build   (Redis + ratekeeper, see docker-compose.yml)
#
# No `# syntax=` line and no BuildKit-only instructions: the file builds with
# BuildKit and with the legacy builder alike (Debian's docker.io has no
# buildx), and needs no frontend image pulled from a registry. The
# dependencies are compiled in a layer of their own, so a source change
# rebuilds only ratekeeper itself.

FROM rust:1.95-bookworm AS build
WORKDIR /src
# No symbol table in the image's binary (3 MB): a panic still says what and
# where; a symbolized backtrace needs a build outside the image anyway.
ENV CARGO_PROFILE_RELEASE_STRIP=symbols
COPY Cargo.toml Cargo.lock ./
RUN mkdir src \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && cargo build --release --locked --bin ratekeeper \
 && rm -rf src
COPY build.rs ./
COPY src ./src
COPY lua ./lua
COPY config ./config
# The commit for ratekeeper_build_info (this build has no .git):
#   docker build --build-arg RATEKEEPER_REVISION=$(git rev-parse --short=12 HEAD) -t ratekeeper .
ARG RATEKEEPER_REVISION=unknown
# COPY keeps the files' own mtimes, which can be older than the placeholder
# build above: touch the crate roots so cargo rebuilds ratekeeper for real.
RUN touch src/main.rs src/lib.rs \
 && cargo build --release --locked --bin ratekeeper \
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
