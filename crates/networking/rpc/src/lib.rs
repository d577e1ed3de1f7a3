//! moat-rpc: the JSON-RPC server (`eth_`, `net_`, `web3_`, `txpool_`) over HTTP and
//! WebSocket, in geth's formats and with geth's error codes and messages.
//!
//! ```text
//!  HTTP request ─▶ in-flight cap (429 when busy, before the body is read)
//!        ─▶ batch-count check (geth's "batch too large", before the calls are parsed)
//!  HTTP / WS ─▶ jsonrpsee (body-size cap 413, JSON parsing, unknown method)
//!        ─▶ batch response cap ("response too large" past it) ─▶ method table
//!           (one counter per method) ─▶ handler
//!               │ reads                     │ submits / reads
//!               ▼                           ▼
//!        Chain + Store (head state,      Pool (eth_sendRawTransaction, txpool_*,
//!        blocks, receipts, tx index)     pending nonces, newPendingTransactions)
//!
//!  node, after each import ─▶ HeadNotifier::notify_new_head ─▶ newHeads subscribers
//! ```
//!
//! State methods answer for "latest", "safe", "finalized", "pending" and any of the
//! last 128 canonical blocks (the head state with the undo records laid over it); an
//! older block gets -32000 "historical state is not available". Handlers that read the
//! store run on the blocking pool so a slow disk never stalls the runtime's I/O.
//!
//! Everything a client sends is untrusted: parameters are parsed into typed values with
//! errors, never unwrapped; request bodies and batches are capped before parsing, a batch's
//! responses are capped as they are made, and HTTP requests beyond a number in progress
//! are refused with 429 before their bodies are read ([`limits`]).
//!
//! The engine API ([`engine`]) is a second server on its own port (8551), every request
//! authenticated by a JWT; it shares this crate's JSON helpers and block/tx encoders.

mod admin;
mod blocks;
mod debug;
mod eth_config;
mod filters;
mod testing;
mod call;
pub mod engine;
mod eth;
mod fees;
mod json;
pub mod limits;
mod logs;
mod params;
mod state;
mod subscribe;
mod sync;
mod txpool;

pub use admin::PeerAdmin;
pub use engine::{
    EngineConfig, EngineContext, EngineHandle, JwtError, read_jwt_secret, start_engine,
};
pub use eth::StateAt;
pub use limits::{
    DEFAULT_BATCH_REQUEST_LIMIT, DEFAULT_BATCH_RESPONSE_MAX_SIZE, DEFAULT_MAX_CONCURRENT_REQUESTS,
};
pub use params::SERVER_ERROR_CODE;
pub use state::{StoreStateView, head_info, next_block_fees};
pub use subscribe::{HeadMessage, HeadNotifier};
pub use sync::{SyncService, SyncStatus};

use jsonrpsee::RpcModule;
use jsonrpsee::core::middleware::RpcServiceBuilder;
use jsonrpsee::server::{
    BatchRequestConfig, RegisterMethodError, Server, ServerConfig, ServerHandle,
};
use jsonrpsee::types::Params;
use limits::{BatchCountLayer, BatchResponseCapLayer, InFlightLimitLayer};
use moat_blockchain::chain::Chain;
use moat_blockchain::mempool::Pool;
use moat_common::block::Header;
use params::RpcResult;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;

/// Server settings, with geth's defaults where geth has one.
#[derive(Debug, Clone)]
pub struct RpcConfig {
    pub http_addr: SocketAddr,
    /// WebSocket endpoint; `None` serves no WebSocket. Equal to `http_addr`: one port
    /// serves both.
    pub ws_addr: Option<SocketAddr>,
    /// Largest request body (and WebSocket message) in bytes, geth's `--rpc.http-body-limit`:
    /// a bigger HTTP body gets 413, a bigger WebSocket message -32007. Must fit a blob
    /// transaction in hex (~1 MiB raw).
    pub max_request_body_size: u32,
    /// Largest response to one call in bytes: a bigger one is replaced by jsonrpsee's
    /// -32008 "Response is too big". A batch's total is `batch_response_max_size`.
    pub max_response_body_size: u32,
    /// Most calls in one batch, geth's `--rpc.batch-request-limit` (0: no limit). More get
    /// -32600 "batch too large" (over WebSocket, jsonrpsee's -32010).
    pub batch_request_limit: u32,
    /// Most bytes of a batch's responses, geth's `--rpc.batch-response-max-size` (0: no
    /// limit); the calls after the response that passes it get -32003 "response too large".
    pub batch_response_max_size: usize,
    /// Most HTTP requests in progress at once across the HTTP and WebSocket ports (at
    /// least 1); more are refused with HTTP 429 before their bodies are read.
    pub max_concurrent_requests: u32,
    pub client_version: String,
}

impl Default for RpcConfig {
    fn default() -> Self {
        Self {
            http_addr: SocketAddr::from(([127, 0, 0, 1], 8545)),
            ws_addr: None,
            max_request_body_size: 5 << 20,
            max_response_body_size: 10 << 20,
            batch_request_limit: DEFAULT_BATCH_REQUEST_LIMIT,
            batch_response_max_size: DEFAULT_BATCH_RESPONSE_MAX_SIZE,
            max_concurrent_requests: DEFAULT_MAX_CONCURRENT_REQUESTS,
            client_version: format!("moat/v{}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// Open WebSockets jsonrpsee allows beyond `max_concurrent_requests`. Its own connection
/// cap counts HTTP requests in progress and open WebSockets together and is set to the
/// sum: while no more than this many WebSockets are open, a busy server's HTTP requests
/// are refused by [`InFlightLimitLayer`] (JSON body); past it, jsonrpsee's own plain-text
/// 429 "Too many connections" can answer first, and refuses further WebSockets too.
const WS_CONNECTIONS: u32 = 100;

/// geth's default `--rpc.gascap`.
pub const DEFAULT_GAS_CAP: u64 = 50_000_000;

/// What the handlers read: the chain, the pool, and the newHeads hook.
#[derive(Debug, Clone)]
pub struct RpcContext {
    pub chain: Chain,
    pub pool: Pool,
    heads: HeadNotifier,
    tips: Arc<fees::TipCache>,
    /// The p2p layer, when the node runs one.
    pub admin: Option<Arc<dyn PeerAdmin>>,
    /// The syncer, when the node runs one (`eth_syncing`).
    pub sync: Option<Arc<dyn SyncService>>,
    /// Most gas an eth_call or eth_estimateGas may use; 0 for no cap beyond the block's.
    pub gas_cap: u64,
    /// Installed polled filters (`eth_newFilter` and kin).
    filters: Arc<filters::FilterTable>,
}

impl RpcContext {
    pub fn new(chain: Chain, pool: Pool) -> Self {
        Self {
            chain,
            pool,
            heads: HeadNotifier::default(),
            tips: Arc::default(),
            admin: None,
            sync: None,
            gas_cap: DEFAULT_GAS_CAP,
            filters: Arc::default(),
        }
    }

    /// Serves `eth_syncing` from `sync`.
    pub fn with_sync(mut self, sync: Arc<dyn SyncService>) -> Self {
        self.sync = Some(sync);
        self
    }

    /// Serves `admin_*` and `net_peerCount` from `admin`.
    pub fn with_admin(mut self, admin: Arc<dyn PeerAdmin>) -> Self {
        self.admin = Some(admin);
        self
    }

    /// The hook the node calls after each import; clones share subscribers.
    pub fn head_notifier(&self) -> HeadNotifier {
        self.heads.clone()
    }

    pub fn notify_new_head(&self, header: &Header) {
        self.heads.notify_new_head(header);
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("method table: {0}")]
    Register(#[from] RegisterMethodError),
}

/// A running server: its bound addresses and the way to stop it.
#[derive(Debug)]
pub struct RpcHandle {
    http_addr: SocketAddr,
    ws_addr: Option<SocketAddr>,
    servers: Vec<ServerHandle>,
    heads: HeadNotifier,
}

impl RpcHandle {
    /// The bound HTTP address (the real port when the config asked for port 0).
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    pub fn ws_addr(&self) -> Option<SocketAddr> {
        self.ws_addr
    }

    /// Announces a new head to newHeads subscribers.
    pub fn notify_new_head(&self, header: &Header) {
        self.heads.notify_new_head(header);
    }

    pub fn new_heads_sender(&self) -> tokio::sync::broadcast::Sender<HeadMessage> {
        self.heads.sender()
    }

    /// Stops accepting connections; calling it twice is harmless.
    pub fn stop(&self) {
        for s in &self.servers {
            let _ = s.stop();
        }
    }

    /// Resolves once every server has shut down.
    pub async fn stopped(self) {
        for s in self.servers {
            s.stopped().await;
        }
    }
}

fn count(method: &'static str) {
    metrics::counter!("moat_rpc_calls_total", "method" => method).increment(1);
}

/// Registers a handler that reads the store: it runs on the blocking pool.
fn blocking(
    m: &mut RpcModule<RpcContext>,
    name: &'static str,
    f: fn(&RpcContext, Params<'_>) -> RpcResult<Value>,
) -> Result<(), RegisterMethodError> {
    m.register_blocking_method(name, move |params, ctx, _| {
        count(name);
        f(&ctx, params)
    })?;
    Ok(())
}

/// Registers a handler that only touches memory.
fn cheap(
    m: &mut RpcModule<RpcContext>,
    name: &'static str,
    f: fn(&RpcContext, Params<'_>) -> RpcResult<Value>,
) -> Result<(), RegisterMethodError> {
    m.register_method(name, move |params, ctx, _| {
        count(name);
        f(ctx, params)
    })?;
    Ok(())
}

/// The method table.
pub fn module(
    ctx: RpcContext,
    client_version: String,
) -> Result<RpcModule<RpcContext>, RegisterMethodError> {
    let mut m = RpcModule::new(ctx);
    cheap(&mut m, "eth_chainId", |c, _| {
        Ok(json::q(c.chain.config().chain_id))
    })?;
    cheap(&mut m, "net_version", |c, _| {
        Ok(Value::String(c.chain.config().chain_id.to_string()))
    })?;
    cheap(&mut m, "net_listening", |_, _| Ok(Value::Bool(true)))?;
    blocking(&mut m, "eth_syncing", sync::syncing)?;
    cheap(&mut m, "net_peerCount", admin::peer_count)?;
    cheap(&mut m, "admin_addPeer", admin::add_peer)?;
    cheap(&mut m, "admin_removePeer", admin::remove_peer)?;
    cheap(&mut m, "admin_peers", admin::peers)?;
    cheap(&mut m, "admin_nodeInfo", admin::node_info)?;
    m.register_method("web3_clientVersion", move |_, _, _| {
        count("web3_clientVersion");
        RpcResult::Ok(Value::String(client_version.clone()))
    })?;
    blocking(&mut m, "eth_blockNumber", |c, _| Ok(json::q(c.head()?.0)))?;
    blocking(&mut m, "eth_getBalance", eth::get_balance)?;
    blocking(
        &mut m,
        "eth_getTransactionCount",
        eth::get_transaction_count,
    )?;
    blocking(&mut m, "eth_getCode", eth::get_code)?;
    blocking(&mut m, "eth_call", call::call)?;
    blocking(&mut m, "eth_estimateGas", call::estimate_gas)?;
    blocking(&mut m, "eth_getStorageAt", eth::get_storage_at)?;
    blocking(&mut m, "eth_getProof", eth::get_proof)?;
    blocking(&mut m, "eth_getBlockByNumber", eth::get_block_by_number)?;
    blocking(&mut m, "eth_getBlockByHash", eth::get_block_by_hash)?;
    blocking(
        &mut m,
        "eth_getTransactionByHash",
        eth::get_transaction_by_hash,
    )?;
    blocking(
        &mut m,
        "eth_getTransactionReceipt",
        eth::get_transaction_receipt,
    )?;
    blocking(&mut m, "eth_gasPrice", |c, _| fees::gas_price(c))?;
    blocking(&mut m, "eth_maxPriorityFeePerGas", |c, _| {
        fees::max_priority_fee(c)
    })?;
    blocking(&mut m, "eth_blobBaseFee", |c, _| fees::blob_base_fee(c))?;
    blocking(&mut m, "eth_feeHistory", fees::fee_history)?;
    blocking(&mut m, "eth_getLogs", logs::get_logs)?;
    blocks::register(&mut m)?;
    debug::register(&mut m)?;
    testing::register(&mut m)?;
    filters::register(&mut m)?;
    cheap(&mut m, "txpool_status", |c, _| Ok(txpool::status(c)))?;
    cheap(&mut m, "txpool_content", |c, _| Ok(txpool::content(c)))?;
    cheap(&mut m, "txpool_contentFrom", txpool::content_from)?;
    cheap(&mut m, "txpool_inspect", |c, _| Ok(txpool::inspect(c)))?;
    m.register_async_method("eth_sendRawTransaction", |params, ctx, _| async move {
        count("eth_sendRawTransaction");
        eth::send_raw_transaction(&ctx, params).await
    })?;
    m.register_subscription(
        "eth_subscribe",
        "eth_subscription",
        "eth_unsubscribe",
        |params, pending, ctx, _| {
            count("eth_subscribe");
            subscribe::eth_subscribe(params, pending, ctx)
        },
    )?;
    Ok(m)
}

fn server_config(config: &RpcConfig, http: bool, ws: bool) -> ServerConfig {
    let batches = match config.batch_request_limit {
        0 => BatchRequestConfig::Unlimited,
        n => BatchRequestConfig::Limit(n),
    };
    let mut b = ServerConfig::builder()
        .max_request_body_size(config.max_request_body_size)
        .max_response_body_size(config.max_response_body_size)
        .max_connections(
            config
                .max_concurrent_requests
                .max(1)
                .saturating_add(WS_CONNECTIONS),
        )
        .set_batch_request_config(batches)
        .set_id_provider(subscribe::HexIdProvider::default());
    if !ws {
        b = b.http_only();
    }
    if !http {
        b = b.ws_only();
    }
    b.build()
}

/// Binds `addr` behind the request limits and starts serving `methods`; returns the bound
/// address.
async fn serve(
    addr: SocketAddr,
    config: &RpcConfig,
    (http, ws): (bool, bool),
    in_flight: &InFlightLimitLayer,
    methods: RpcModule<RpcContext>,
) -> Result<(SocketAddr, ServerHandle), RpcError> {
    let http_layers = tower::ServiceBuilder::new()
        .layer(in_flight.clone())
        // A WebSocket-only port serves no HTTP calls: nothing to count there.
        .layer(BatchCountLayer::new(
            if http { config.batch_request_limit } else { 0 },
            config.max_request_body_size,
        ));
    let rpc_layers =
        RpcServiceBuilder::new().layer(BatchResponseCapLayer::new(config.batch_response_max_size));
    let server = Server::builder()
        .set_config(server_config(config, http, ws))
        .set_http_middleware(http_layers)
        .set_rpc_middleware(rpc_layers)
        .build(addr)
        .await
        .map_err(|source| RpcError::Bind { addr, source })?;
    let bound = server
        .local_addr()
        .map_err(|source| RpcError::Bind { addr, source })?;
    Ok((bound, server.start(methods)))
}

/// Binds the configured endpoints and starts serving `ctx`.
pub async fn start(config: RpcConfig, ctx: RpcContext) -> Result<RpcHandle, RpcError> {
    let heads = ctx.heads.clone();
    let methods = module(ctx, config.client_version.clone())?;
    let shared_port = config.ws_addr == Some(config.http_addr);
    // One count of requests in progress for both ports.
    let in_flight = InFlightLimitLayer::new(config.max_concurrent_requests);
    let (http_addr, http) = serve(
        config.http_addr,
        &config,
        (true, shared_port),
        &in_flight,
        methods.clone(),
    )
    .await?;
    let mut servers = vec![http];
    let ws_addr = match config.ws_addr {
        Some(_) if shared_port => Some(http_addr),
        Some(addr) => {
            let (bound, ws) = serve(addr, &config, (false, true), &in_flight, methods).await?;
            servers.push(ws);
            Some(bound)
        }
        None => None,
    };
    Ok(RpcHandle {
        http_addr,
        ws_addr,
        servers,
        heads,
    })
}
