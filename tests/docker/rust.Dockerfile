# Stand-in for rust:<version>-bookworm (see standins.sh): the official image
# is buildpack-deps:bookworm (a C toolchain, git, ...) plus rustup's layout
# under /usr/local. Here the toolchain is this machine's own, copied in, and
# /usr/local/cargo/bin holds links to it where rustup would put its proxies.
ARG BASE
FROM ${BASE}
ARG RUST_VERSION
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates gcc libc6-dev make pkg-config git \
 && rm -rf /var/lib/apt/lists/*
# The host's local CA additions (see standins.sh); none on most machines.
COPY local-cas /usr/local/share/ca-certificates
RUN update-ca-certificates >/dev/null
ENV RUSTUP_HOME=/usr/local/rustup \
    CARGO_HOME=/usr/local/cargo \
    PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    RUST_VERSION=${RUST_VERSION}
COPY toolchain /usr/local/rustup/toolchains/${RUST_VERSION}-x86_64-unknown-linux-gnu
RUN mkdir -p /usr/local/cargo/bin \
 && for tool in cargo rustc rustdoc; do \
      ln -s /usr/local/rustup/toolchains/${RUST_VERSION}-x86_64-unknown-linux-gnu/bin/$tool /usr/local/cargo/bin/$tool; \
    done \
 && cargo --version && rustc --version
