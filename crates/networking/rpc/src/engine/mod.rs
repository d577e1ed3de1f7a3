//! The engine API: how a consensus client drives this node (execution-apis
//! `src/engine/`), served on its own port behind JWT authentication.
//!
//! ```text
//!  CL ─HTTP+JWT─▶ auth layer (401 unless a fresh HS256 token) ─▶ jsonrpsee ─▶ handler
//!
//!  newPayloadV1..4 ─▶ payload JSON ─▶ Block (roots, hash check, blob hashes)
//!                  ─▶ Chain::import (blocking pool) ─▶ VALID / INVALID / SYNCING / ACCEPTED
//!                  ─▶ on import: wait for the pool's upkeep (Maintainer::caught_up)
//!  forkchoiceUpdatedV1..3 ─▶ head known and canonical? ─▶ synced flag, pool caught up
//!                  ─▶ with attributes: PayloadService::start ─▶ payloadId
//!  getPayloadV1..5 ─▶ PayloadService::get ─▶ payload + blobs bundle (+ requests)
//!  getBlobsV1/V2/V3, hasBlobs ─▶ Pool::blob_by_versioned_hash (V3: partial answers)
//! ```
//!
//! The chain imports only on top of its head and makes every imported block the head at
//! once, so `newPayload` both executes and advances the head, and `forkchoiceUpdated`
//! confirms it: a head that is the current head is VALID, a canonical ancestor is
//! acknowledged as VALID without moving back (as geth does), a stored block off the
//! canonical chain is made head (a reorg), and a block the chain does not hold is
//! SYNCING. SYNCING also hands the block to the node's syncer ([`SyncService::sync_to`]:
//! the head of a forkchoiceUpdated, the parent of a newPayload), which fetches the chain
//! up to it from peers; once it is there, the same calls answer VALID again.
//!
//! The engine does not update the pool: the chain publishes each head it moves to and the
//! pool's upkeep task (`moat_mempool::maintain`) follows, whoever moved it. newPayload
//! and forkchoiceUpdated wait for the pool to catch up ([`EngineContext::maintainer`])
//! before they answer, so a payload is built from a pool that has seen its parent.
//! `newPayload` and `forkchoiceUpdated` run one at a time.

pub(crate) mod api;
pub(crate) mod auth;
mod errors;
pub(crate) mod types;

pub use auth::{
    IAT_WINDOW_SECS, JwtAuthLayer, JwtError, make_token, parse_jwt_secret, read_jwt_secret,
    unix_now,
};
pub use errors::{
    INVALID_FORKCHOICE_STATE, INVALID_PAYLOAD_ATTRIBUTES, TOO_LARGE_REQUEST, UNKNOWN_PAYLOAD,
    UNSUPPORTED_FORK,
};

use crate::access::{
    AccessLayer, AccessPolicy, AllowedOrigins, CorsDomains, Namespaces, VirtualHosts,
};
use crate::server::{self, ConnLimits, ConnTable, HttpTimeouts, ServeOptions};
use crate::{RpcError, SyncService};
use alloy_primitives::B256;
use jsonrpsee::server::{Server, ServerConfig, ServerHandle, stop_channel};
use moat_blockchain::chain::Chain;
use moat_blockchain::payload::PayloadService;
use moat_mempool::Pool;
use moat_mempool::maintain::Maintainer;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Engine endpoint settings; geth's `--authrpc.*` defaults.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Where the engine API listens (`--authrpc.addr`, `--authrpc.port`; 127.0.0.1:8551).
    pub addr: SocketAddr,
    /// The secret shared with the consensus client (`--authrpc.jwtsecret`): every request
    /// carries an HS256 token signed with it.
    pub jwt_secret: [u8; 32],
    /// Largest request body; geth allows 128 MiB on the engine port, since a payload
    /// (and a getBlobs answer) can be tens of megabytes and only the CL can send one.
    pub max_body_size: u32,
    /// Host names requests may name (`--authrpc.vhosts`, default `localhost`), checked
    /// after the JWT as geth does.
    pub vhosts: VirtualHosts,
    /// Header, body, idle and write-stall timeouts of the port's connections (geth's
    /// HTTP timeouts; calls themselves are not cut off).
    pub timeouts: HttpTimeouts,
    /// Open connections, in all and per client address.
    pub connections: ConnLimits,
    /// The `eth` namespace served beside the engine methods, as geth serves it on its
    /// auth port (consensus clients call `eth_chainId` there to check the connection
    /// before anything else, then `eth_getBlockByNumber`, `eth_getLogs`, ...). `None`:
    /// engine methods only.
    pub eth: Option<EthMethods>,
}

/// The `eth_*` methods of the JSON-RPC table ([`crate::eth_methods`]), to serve on the
/// engine port.
#[derive(Clone)]
pub struct EthMethods(pub jsonrpsee::Methods);

impl std::fmt::Debug for EthMethods {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EthMethods({} methods)", self.0.method_names().count())
    }
}

impl EngineConfig {
    /// The default address (127.0.0.1:8551) with `jwt_secret`.
    pub fn new(jwt_secret: [u8; 32]) -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 8551)),
            jwt_secret,
            max_body_size: 128 << 20,
            vhosts: VirtualHosts::default(),
            timeouts: HttpTimeouts::default(),
            connections: ConnLimits {
                total: 512,
                per_ip: 512,
            },
            eth: None,
        }
    }
}

/// Blocks the engine refused, so their descendants are refused without execution; the
/// value is the latest valid ancestor to report.
#[derive(Debug, Default)]
struct InvalidBlocks(HashMap<B256, Option<B256>>);

impl InvalidBlocks {
    /// Enough for a few epochs of a misbehaving CL; forgetting is safe (the block is
    /// just executed again).
    const CAP: usize = 512;

    fn insert(&mut self, hash: B256, latest_valid: Option<B256>) {
        if self.0.len() >= Self::CAP {
            self.0.clear();
        }
        self.0.insert(hash, latest_valid);
    }

    fn get(&self, hash: &B256) -> Option<Option<B256>> {
        self.0.get(hash).copied()
    }
}

#[derive(Debug)]
struct Shared {
    /// Serialises newPayload and forkchoiceUpdated.
    order: tokio::sync::Mutex<()>,
    /// Held by the blocking work of those calls (import, reorg) while it runs, so a
    /// shutdown can wait for a block being written even if its caller has gone.
    writing: Arc<tokio::sync::Mutex<()>>,
    invalid: Mutex<InvalidBlocks>,
}

/// What the engine handlers work on. Cloning shares it.
#[derive(Debug, Clone)]
pub struct EngineContext {
    /// The chain newPayload imports into and forkchoiceUpdated moves the head of.
    pub chain: Chain,
    /// The transaction pool, following the chain through `maintainer`; `engine_getBlobs`
    /// reads its blobs.
    pub pool: Pool,
    /// Builds the payloads forkchoiceUpdated with attributes starts, for getPayload.
    pub payloads: PayloadService,
    /// Set by the first forkchoiceUpdated to a known head: the CL says we are at the
    /// tip, so peers' transactions are worth admitting. The node reads it.
    pub synced: Arc<AtomicBool>,
    /// Told of heads the chain does not hold, when the node runs a syncer.
    pub sync: Option<Arc<dyn SyncService>>,
    /// The pool's upkeep task: the engine only imports blocks and moves the head, then
    /// waits for the pool to follow before it answers or builds.
    pub maintainer: Maintainer,
    shared: Arc<Shared>,
}

impl EngineContext {
    /// The engine over `chain`, whose `pool` follows the chain through `maintainer`
    /// (`moat_blockchain::maintain::spawn`).
    pub fn new(chain: Chain, pool: Pool, payloads: PayloadService, maintainer: Maintainer) -> Self {
        Self {
            chain,
            pool,
            payloads,
            synced: Arc::new(AtomicBool::new(false)),
            sync: None,
            maintainer,
            shared: Arc::new(Shared {
                order: tokio::sync::Mutex::new(()),
                writing: Arc::new(tokio::sync::Mutex::new(())),
                invalid: Mutex::new(InvalidBlocks::default()),
            }),
        }
    }

    /// Shares the node's "synced" flag instead of a fresh one.
    pub fn with_synced_flag(mut self, synced: Arc<AtomicBool>) -> Self {
        self.synced = synced;
        self
    }

    /// Hands heads the chain does not hold to `sync`.
    pub fn with_sync(mut self, sync: Arc<dyn SyncService>) -> Self {
        self.sync = Some(sync);
        self
    }

    /// For shutdown, once the server has stopped taking calls: waits for the newPayload
    /// or forkchoiceUpdated in progress (its block is then wholly in the store, or was
    /// refused and never acknowledged), and holds back any later one while the returned
    /// guard lives.
    pub async fn quiesce(&self) -> Quiesced<'_> {
        let order = self.shared.order.lock().await;
        let writing = self.shared.writing.clone().lock_owned().await;
        Quiesced {
            _order: order,
            _writing: writing,
        }
    }

    /// Runs `f` on the blocking pool while holding the writing lock.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, tokio::task::JoinError> {
        let writing = self.shared.writing.clone().lock_owned().await;
        tokio::task::spawn_blocking(move || {
            let out = f();
            drop(writing);
            out
        })
        .await
    }
}

/// What [`EngineContext::quiesce`] returns: no newPayload or forkchoiceUpdated runs
/// while it lives.
#[derive(Debug)]
pub struct Quiesced<'a> {
    _order: tokio::sync::MutexGuard<'a, ()>,
    _writing: tokio::sync::OwnedMutexGuard<()>,
}

/// A running engine endpoint.
#[derive(Debug)]
pub struct EngineHandle {
    addr: SocketAddr,
    server: ServerHandle,
}

impl EngineHandle {
    /// The bound address (the real port when the config asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting connections; calling it twice is harmless.
    pub fn stop(&self) {
        let _ = self.server.stop();
    }

    /// Resolves once the server has shut down.
    pub async fn stopped(self) {
        self.server.stopped().await;
    }
}

/// The engine method table over `ctx`, for calls made in process (tests, tools).
pub fn methods(
    ctx: EngineContext,
) -> Result<jsonrpsee::RpcModule<EngineContext>, jsonrpsee::core::RegisterMethodError> {
    api::module(ctx)
}

/// Binds the engine endpoint (HTTP and WebSocket on one port, both behind JWT) and
/// starts serving `ctx`.
pub async fn start_engine(
    config: EngineConfig,
    ctx: EngineContext,
) -> Result<EngineHandle, RpcError> {
    let mut methods: jsonrpsee::Methods = api::module(ctx)?.into();
    if let Some(EthMethods(eth)) = &config.eth {
        methods.merge(eth.clone())?;
    }
    let server_config = ServerConfig::builder()
        .max_request_body_size(config.max_body_size)
        .max_response_body_size(config.max_body_size)
        .max_connections(u32::MAX)
        .build();
    let (listener, addr) = server::bind(config.addr)
        .await
        .map_err(|source| RpcError::Bind {
            addr: config.addr,
            source,
        })?;
    // geth's auth stack: JWT outermost, then the Host check; WebSocket origins are
    // geth's `DefaultAuthOrigins` (localhost).
    let api = Arc::new(Namespaces::new(&["engine", "eth"]));
    let access = AccessLayer::new(AccessPolicy {
        http: Some(api.clone()),
        ws: Some(api),
        vhosts: config.vhosts.clone(),
        origins: AllowedOrigins::new(&["localhost"]),
        cors: CorsDomains::default(),
        call_timeout: None,
    });
    let builder = Server::builder()
        .set_config(server_config)
        .set_http_middleware(
            tower::ServiceBuilder::new()
                .layer(JwtAuthLayer::new(config.jwt_secret))
                .layer(access)
                // A body must arrive within the read timeout here too.
                .layer(crate::limits::ReadBodyLayer::new(
                    config.max_body_size,
                    config.timeouts.read,
                )),
        )
        .to_service_builder();
    let (stop, handle) = stop_channel();
    let opts = ServeOptions {
        name: "engine",
        timeouts: config.timeouts,
        table: ConnTable::new(config.connections),
        // The consensus client's calls, behind a JWT: always trusted.
        lanes: false,
    };
    let stop2 = stop.clone();
    tokio::spawn(server::run(listener, opts, stop, move || {
        builder.clone().build(methods.clone(), stop2.clone())
    }));
    Ok(EngineHandle {
        addr,
        server: handle,
    })
}
