//! moat-rpc: the JSON-RPC server (`eth_`, `net_`, `web3_`, `txpool_`) over HTTP and
//! WebSocket, in geth's formats and with geth's error codes and messages.
//!
//! ```text
//!  TCP ─▶ accept loop ([`server`]: connection caps in all and per IP, read-header,
//!         idle and write-stall timeouts, back-off on accept errors)
//!  HTTP request ─▶ Host / Origin / CORS checks ([`access`]: 403 past them)
//!        ─▶ WebSocket caps (429) ─▶ body read within the read timeout (408, 413)
//!        ─▶ in-flight cap (429 when too many requests are executing)
//!        ─▶ one plain `eth_sendRawTransaction` call? answered by [`raw_tx`], the
//!           same checks and answer as below without jsonrpsee's parse and dispatch
//!        ─▶ batch-count check (geth's "batch too large", before the calls are parsed)
//!  HTTP / WS ─▶ jsonrpsee (JSON parsing, unknown method)
//!        ─▶ batch response cap ("response too large" past it) ─▶ namespace filter
//!           (--http.api / --ws.api) ─▶ call timeout (HTTP) ─▶ method table
//!           (one counter per method) ─▶ handler
//!               │ reads                     │ submits / reads
//!               ▼                           ▼
//!        Chain + Store (head state,      Pool (eth_sendRawTransaction, txpool_*,
//!        blocks, receipts, tx index)     pending nonces, newPendingTransactions)
//!
//!  node, after each import ─▶ HeadNotifier::notify_new_head ─▶ newHeads subscribers
//! ```
//!
//! State methods answer for "latest", "safe", "finalized", "pending" and any canonical
//! block the undo records reach (`Chain::undo_floor`: the last 128 blocks, back to the
//! finalized block while it lags, under `--history.state`; the head state with the undo
//! records laid over it); an older block gets -32000 "historical state is not
//! available". Handlers that read the
//! store run on the blocking pool so a slow disk never stalls the runtime's I/O.
//!
//! Everything a client sends is untrusted: parameters are parsed into typed values with
//! errors, never unwrapped; request bodies and batches are capped before parsing, a batch's
//! responses are capped as they are made, HTTP requests beyond a number executing are
//! refused with 429 ([`limits`]), and no client can hold a connection, a request slot or
//! a WebSocket slot longer than the timeouts allow ([`server`]).
//!
//! On the dev node (`moat --dev`) the context also holds the dev keys (`eth_accounts`,
//! `eth_sign`, `personal_sign`, `eth_signTypedData_v4`, `eth_sendTransaction`) and the dev
//! block producer's queue: anvil's test-chain methods (`evm_*`, `anvil_*`, `hardhat_*`)
//! are [`DevRequest`]s the node's producer serves between blocks. Elsewhere the key set is
//! empty (`eth_sign` and `eth_sendTransaction` answer geth's "unknown account") and the
//! dev-only methods are "method not found".
//!
//! The engine API ([`engine`]) is a second server on its own port (8551), every request
//! authenticated by a JWT; it shares this crate's JSON helpers and block/tx encoders.

pub mod access;
mod accounts;
mod admin;
mod blocks;
mod call;
mod debug;
mod dev_methods;
pub mod engine;
mod eth;
mod eth_config;
mod fees;
mod filters;
#[doc(hidden)]
pub mod fuzzing;
mod json;
pub mod limits;
mod logs;
pub mod middleware;
mod params;
mod raw_tx;
mod reorg;
pub mod server;
mod simulate;
mod state;
mod subscribe;
mod sync;
mod testing;
mod txpool;
mod typed_data;

pub use access::{AllowedOrigins, CorsDomains, Namespaces, VirtualHosts};
pub use accounts::impersonated_signature;
pub use admin::{AddPeerError, PeerAdmin};
pub use dev_methods::{DevRequest, MineTime, Reply as DevReply};
pub use engine::{
    EngineConfig, EngineContext, EngineHandle, EthMethods, JwtError, read_jwt_secret, start_engine,
};
pub use eth::StateAt;
use limits::{
    DEFAULT_BATCH_REQUEST_LIMIT, DEFAULT_BATCH_RESPONSE_MAX_SIZE, DEFAULT_MAX_CONCURRENT_REQUESTS,
};
pub use params::SERVER_ERROR_CODE;
pub use raw_tx::RawTxLayer;
pub use server::{ConnLimits, HttpTimeouts};
pub use state::{StoreStateView, head_info, next_block_fees};
pub use subscribe::{HeadMessage, HeadNotifier};
pub use sync::{SyncService, SyncStatus};

use access::{AccessLayer, AccessPolicy, NamespaceFilterLayer};
use jsonrpsee::RpcModule;
use jsonrpsee::core::middleware::RpcServiceBuilder;
use jsonrpsee::server::{
    BatchRequestConfig, Methods, PingConfig, RegisterMethodError, Server, ServerConfig,
    ServerHandle, StopHandle, stop_channel,
};
use jsonrpsee::types::Params;
use limits::{
    BatchCountLayer, BatchResponseCapLayer, CallTimeoutLayer, InFlightLimitLayer, ReadBodyLayer,
    WsCapLayer,
};
use moat_blockchain::chain::Chain;
use moat_common::block::Header;
use moat_mempool::Pool;
use params::RpcResult;
use serde_json::Value;
use server::{ConnTable, ServeOptions};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Server settings, with geth's defaults where geth has one.
#[derive(Debug, Clone)]
pub struct RpcConfig {
    /// The HTTP endpoint (and the WebSocket one when `ws_addr` is the same address).
    pub http_addr: SocketAddr,
    /// Whether HTTP JSON-RPC is served (geth's `--http`). When it is not, only
    /// WebSocket is served (on `ws_addr`), or nothing.
    pub serve_http: bool,
    /// WebSocket endpoint; `None` serves no WebSocket. Equal to `http_addr`: one port
    /// serves both.
    pub ws_addr: Option<SocketAddr>,
    /// Namespaces served over HTTP (`--http.api`); geth's default is `eth,net,web3`.
    pub http_api: Namespaces,
    /// Namespaces served over WebSocket (`--ws.api`); the same default.
    pub ws_api: Namespaces,
    /// Host names HTTP requests may name (`--http.vhosts`, default `localhost`).
    pub vhosts: VirtualHosts,
    /// Origins WebSocket upgrades may come from (`--ws.origins`).
    pub ws_origins: AllowedOrigins,
    /// Origins browsers may read answers for (`--http.corsdomain`, default none).
    pub cors: CorsDomains,
    /// Read, header, write and idle timeouts (`--http.readtimeout` and the others).
    pub timeouts: HttpTimeouts,
    /// Open sockets of the HTTP and WebSocket ports together: in all, and per client
    /// address. Past a cap a new connection is closed at once.
    pub connections: ConnLimits,
    /// Open WebSockets: in all, and per client address. Past a cap an upgrade gets 429.
    pub ws_connections: ConnLimits,
    /// How often a WebSocket is pinged; one that has not answered for a third longer is
    /// closed.
    pub ws_ping_interval: Duration,
    /// Largest request body (and WebSocket message) in bytes, geth's `--rpc.http-body-limit`:
    /// a bigger HTTP body gets 413, a bigger WebSocket message -32007. Must fit a blob
    /// transaction in hex (~1 MiB raw).
    pub max_request_body_size: u32,
    /// Largest response to one call in bytes (`--rpc.max-response-size`): a bigger one is
    /// replaced by -32008 "Response is too big"; `eth_getLogs` stops building its answer
    /// as soon as it passes. A batch's total is `batch_response_max_size`.
    pub max_response_body_size: u32,
    /// Most calls in one batch, geth's `--rpc.batch-request-limit` (0: no limit). More get
    /// -32600 "batch too large" (over WebSocket, jsonrpsee's -32010).
    pub batch_request_limit: u32,
    /// Most bytes of a batch's responses, geth's `--rpc.batch-response-max-size` (0: no
    /// limit); the calls after the response that passes it get -32003 "response too large".
    pub batch_response_max_size: usize,
    /// Most HTTP requests executing at once across the HTTP and WebSocket ports (at
    /// least 1); more are refused with HTTP 429. A request counts once its body is in.
    pub max_concurrent_requests: u32,
    /// What `web3_clientVersion` answers; by default `moat/v<crate version>`.
    pub client_version: String,
}

/// Default largest response to one call: 160 MiB (reth's `--rpc.max-response-size`),
/// room for the logs of any block up to ~150 Mgas.
pub const DEFAULT_MAX_RESPONSE_SIZE: u32 = 160 << 20;

impl Default for RpcConfig {
    fn default() -> Self {
        Self {
            http_addr: SocketAddr::from(([127, 0, 0, 1], 8545)),
            serve_http: true,
            ws_addr: None,
            http_api: Namespaces::default(),
            ws_api: Namespaces::default(),
            vhosts: VirtualHosts::default(),
            ws_origins: AllowedOrigins::default(),
            cors: CorsDomains::default(),
            timeouts: HttpTimeouts::default(),
            connections: ConnLimits {
                total: 4096,
                per_ip: 1024,
            },
            ws_connections: ConnLimits {
                total: 1024,
                per_ip: 256,
            },
            ws_ping_interval: Duration::from_secs(30),
            max_request_body_size: 5 << 20,
            max_response_body_size: DEFAULT_MAX_RESPONSE_SIZE,
            batch_request_limit: DEFAULT_BATCH_REQUEST_LIMIT,
            batch_response_max_size: DEFAULT_BATCH_RESPONSE_MAX_SIZE,
            max_concurrent_requests: DEFAULT_MAX_CONCURRENT_REQUESTS,
            client_version: format!("moat/v{}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// geth's default `--rpc.gascap`.
pub const DEFAULT_GAS_CAP: u64 = 50_000_000;

/// How long `eth_sendRawTransactionSync` waits for a receipt (geth's
/// `--rpc.txsync.defaulttimeout` and `--rpc.txsync.maxtimeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxSyncTimeouts {
    /// When the call names none (geth: 20 s).
    pub default: std::time::Duration,
    /// The most a call may ask for (geth: 1 min).
    pub max: std::time::Duration,
}

impl Default for TxSyncTimeouts {
    fn default() -> Self {
        Self {
            default: std::time::Duration::from_secs(20),
            max: std::time::Duration::from_secs(60),
        }
    }
}

/// What the handlers read: the chain, the pool, and the newHeads hook.
#[derive(Debug, Clone)]
pub struct RpcContext {
    /// The chain the handlers read: head, blocks, receipts, the transaction index and
    /// state (past state through the undo records).
    pub chain: Chain,
    /// The transaction pool: `eth_sendRawTransaction` submits to it; `txpool_*`, pending
    /// nonces and newPendingTransactions read it.
    pub pool: Pool,
    heads: HeadNotifier,
    tips: Arc<fees::TipCache>,
    /// The p2p layer, when the node runs one.
    pub admin: Option<Arc<dyn PeerAdmin>>,
    /// The syncer, when the node runs one (`eth_syncing`).
    pub sync: Option<Arc<dyn SyncService>>,
    /// Most gas an eth_call or eth_estimateGas may use; 0 for no cap beyond the block's.
    pub gas_cap: u64,
    /// `eth_sendRawTransactionSync`'s waits.
    pub tx_sync: TxSyncTimeouts,
    /// Installed polled filters (`eth_newFilter` and kin).
    filters: Arc<filters::FilterTable>,
    /// Largest answer a handler that builds big ones (`eth_getLogs`) goes on building;
    /// set from the server's response cap.
    pub max_response_size: usize,
    /// The fee recipient of the blocks this node builds (`eth_coinbase`; geth's
    /// etherbase); on the dev node the first dev account.
    pub coinbase: Option<alloy_primitives::Address>,
    /// The keys `eth_accounts`, `eth_sign` and `eth_sendTransaction` use: the dev
    /// accounts on the dev node, none elsewhere.
    pub dev_keys: Arc<Vec<moat_crypto::secp::Signer>>,
    /// The dev block producer's queue (`evm_mine`, `evm_snapshot`, `anvil_setBalance`
    /// and the other dev methods); `None` off the dev node.
    pub mine: Option<tokio::sync::mpsc::Sender<DevRequest>>,
    /// Whether a transaction sent over RPC is answered only once it is in a block (the
    /// dev node with `--dev.period 0`, as anvil's automine); with a period, at once.
    pub automine: bool,
    /// Addresses `eth_sendTransaction` sends from without a key (`anvil_impersonateAccount`;
    /// only ever filled on the dev node).
    pub impersonated: Arc<parking_lot::Mutex<std::collections::HashSet<alloy_primitives::Address>>>,
}

impl RpcContext {
    /// A context with no p2p layer, syncer, dev keys or dev producer, and geth's gas cap
    /// ([`DEFAULT_GAS_CAP`]); the node sets the rest through the public fields.
    pub fn new(chain: Chain, pool: Pool) -> Self {
        Self {
            chain,
            pool,
            heads: HeadNotifier::default(),
            tips: Arc::default(),
            admin: None,
            sync: None,
            gas_cap: DEFAULT_GAS_CAP,
            tx_sync: TxSyncTimeouts::default(),
            filters: Arc::default(),
            max_response_size: DEFAULT_MAX_RESPONSE_SIZE as usize,
            coinbase: None,
            dev_keys: Arc::default(),
            mine: None,
            automine: false,
            impersonated: Arc::default(),
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

    /// Announces a new head to newHeads subscribers; the node calls it after each import.
    pub fn notify_new_head(&self, header: &Header) {
        self.heads.notify_new_head(header);
    }
}

/// Why a server (JSON-RPC or engine) could not start.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// The listening socket could not be bound (e.g. the port is taken).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A method could not be added to the method table (e.g. a name registered twice).
    #[error("method table: {0}")]
    Register(#[from] RegisterMethodError),
}

/// A running server: its bound addresses and the way to stop it.
#[derive(Debug)]
pub struct RpcHandle {
    http_addr: Option<SocketAddr>,
    ws_addr: Option<SocketAddr>,
    server: ServerHandle,
    heads: HeadNotifier,
}

impl RpcHandle {
    /// The bound HTTP address (the real port when the config asked for port 0); `None`
    /// with HTTP off.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    /// The bound WebSocket address (the HTTP one when both share a port); `None` with
    /// WebSocket off.
    pub fn ws_addr(&self) -> Option<SocketAddr> {
        self.ws_addr
    }

    /// Announces a new head to newHeads subscribers.
    pub fn notify_new_head(&self, header: &Header) {
        self.heads.notify_new_head(header);
    }

    /// The channel newHeads subscriptions listen on: a message sent on it reaches every
    /// subscriber.
    pub fn new_heads_sender(&self) -> tokio::sync::broadcast::Sender<HeadMessage> {
        self.heads.sender()
    }

    /// Stops accepting connections and ends the open ones once their calls are answered
    /// (at most the write timeout later); calling it twice is harmless.
    pub fn stop(&self) {
        let _ = self.server.stop();
    }

    /// Resolves once every server and connection has shut down.
    pub async fn stopped(self) {
        self.server.stopped().await;
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

/// The `eth_*` methods of the table over `ctx` (subscriptions included), for the engine
/// port, where geth serves the `eth` namespace beside `engine`.
pub fn eth_methods(
    ctx: RpcContext,
    client_version: String,
) -> Result<EthMethods, RegisterMethodError> {
    let mut methods = module(ctx, client_version)?;
    let others: Vec<&'static str> = methods
        .method_names()
        .filter(|name| !name.starts_with("eth_"))
        .collect();
    for name in others {
        methods.remove_method(name);
    }
    Ok(EthMethods(methods.into()))
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
    cheap(&mut m, "eth_accounts", accounts::accounts)?;
    cheap(&mut m, "eth_sign", accounts::sign)?;
    cheap(&mut m, "eth_signTypedData_v4", accounts::sign_typed_data_v4)?;
    cheap(&mut m, "personal_sign", accounts::personal_sign)?;
    cheap(&mut m, "net_listening", |_, _| Ok(Value::Bool(true)))?;
    cheap(&mut m, "eth_coinbase", |c, _| match c.coinbase {
        Some(a) => Ok(serde_json::json!(a)),
        None => Err(params::server_error(
            "etherbase must be explicitly specified",
        )),
    })?;
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
    blocking(&mut m, "eth_simulateV1", simulate::simulate_v1)?;
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
    m.register_async_method("eth_sendTransaction", |params, ctx, _| async move {
        count("eth_sendTransaction");
        accounts::send_transaction(&ctx, params).await
    })?;
    m.register_async_method("evm_mine", |params, ctx, _| async move {
        count("evm_mine");
        dev_methods::evm_mine(&ctx, params).await
    })?;
    for name in ["anvil_mine", "hardhat_mine"] {
        m.register_async_method(name, move |params, ctx, _| async move {
            count(name);
            dev_methods::anvil_mine(&ctx, name, params).await
        })?;
    }
    m.register_async_method("evm_snapshot", |_, ctx, _| async move {
        count("evm_snapshot");
        dev_methods::evm_snapshot(&ctx).await
    })?;
    m.register_async_method("evm_revert", |params, ctx, _| async move {
        count("evm_revert");
        dev_methods::evm_revert(&ctx, params).await
    })?;
    m.register_async_method("evm_increaseTime", |params, ctx, _| async move {
        count("evm_increaseTime");
        dev_methods::evm_increase_time(&ctx, params).await
    })?;
    m.register_async_method("evm_setNextBlockTimestamp", |params, ctx, _| async move {
        count("evm_setNextBlockTimestamp");
        dev_methods::evm_set_next_block_timestamp(&ctx, params).await
    })?;
    cheap(&mut m, "anvil_impersonateAccount", |c, p| {
        accounts::impersonate(c, p, "anvil_impersonateAccount")
    })?;
    cheap(&mut m, "anvil_stopImpersonatingAccount", |c, p| {
        accounts::impersonate(c, p, "anvil_stopImpersonatingAccount")
    })?;
    cheap(&mut m, "hardhat_impersonateAccount", |c, p| {
        accounts::impersonate(c, p, "hardhat_impersonateAccount")
    })?;
    cheap(&mut m, "hardhat_stopImpersonatingAccount", |c, p| {
        accounts::impersonate(c, p, "hardhat_stopImpersonatingAccount")
    })?;
    for name in [
        "anvil_setBalance",
        "anvil_setCode",
        "anvil_setStorageAt",
        "anvil_setNonce",
        "hardhat_setBalance",
        "hardhat_setCode",
        "hardhat_setStorageAt",
        "hardhat_setNonce",
    ] {
        m.register_async_method(name, move |params, ctx, _| async move {
            count(name);
            dev_methods::anvil_set(&ctx, name, params).await
        })?;
    }
    m.register_async_method("eth_sendRawTransaction", |params, ctx, ext| async move {
        count("eth_sendRawTransaction");
        let result = eth::send_raw_transaction(&ctx, params).await;
        // The connection's record decides the lane of its next requests.
        if let Some(meta) = ext.get::<server::RequestMeta>() {
            meta.conn.record.note(result.is_ok());
        }
        result
    })?;
    m.register_async_method(
        "eth_sendRawTransactionSync",
        |params, ctx, ext| async move {
            count("eth_sendRawTransactionSync");
            let result = eth::send_raw_transaction_sync(&ctx, params).await;
            if let Some(meta) = ext.get::<server::RequestMeta>() {
                meta.conn.record.note(result.is_ok());
            }
            result
        },
    )?;
    m.register_subscription(
        "eth_subscribe",
        "eth_subscription",
        "eth_unsubscribe",
        |params, pending, ctx, _| {
            count("eth_subscribe");
            subscribe::eth_subscribe(params, pending, ctx)
        },
    )?;
    // geth's `rpc_modules`: the namespaces the transport serves, each "1.0" (`rpc` itself
    // is always served).
    let mut spaces: std::collections::BTreeSet<&'static str> =
        m.method_names().map(access::namespace_of).collect();
    spaces.insert("rpc");
    m.register_method("rpc_modules", move |_, _, ext| {
        count("rpc_modules");
        let allowed = ext.get::<access::Allowed>();
        let served = spaces
            .iter()
            .filter(|ns| allowed.is_none_or(|a| a.0.allows(&format!("{ns}_"))))
            .map(|ns| (ns.to_string(), Value::String("1.0".into())));
        RpcResult::Ok(Value::Object(served.collect()))
    })?;
    Ok(m)
}

fn server_config(config: &RpcConfig, http: bool, ws: bool) -> ServerConfig {
    let batches = match config.batch_request_limit {
        0 => BatchRequestConfig::Unlimited,
        n => BatchRequestConfig::Limit(n),
    };
    let ping = config.ws_ping_interval.max(Duration::from_millis(100));
    let mut b = ServerConfig::builder()
        .max_request_body_size(config.max_request_body_size)
        .max_response_body_size(config.max_response_body_size)
        // Connections are capped by the accept loop and WebSockets by `WsCapLayer`.
        .max_connections(u32::MAX)
        .set_batch_request_config(batches)
        .enable_ws_ping(
            PingConfig::new()
                .ping_interval(ping)
                .inactive_limit(ping + ping / 3),
        )
        .set_id_provider(subscribe::HexIdProvider::default());
    if !ws {
        b = b.http_only();
    }
    if !http {
        b = b.ws_only();
    }
    b.build()
}

/// What a listener of the public server shares with the others.
struct Shared {
    in_flight: InFlightLimitLayer,
    connections: Arc<ConnTable>,
    ws_connections: Arc<ConnTable>,
    methods: Methods,
    stop: StopHandle,
    /// Admission lanes on (`BudgetConfig::lanes`).
    lanes: bool,
    /// The handlers' context, for `eth_sendRawTransaction`'s own HTTP path.
    ctx: Arc<RpcContext>,
}

/// Binds `addr` behind the access checks and request limits and starts serving; returns
/// the bound address.
async fn serve(
    addr: SocketAddr,
    config: &RpcConfig,
    (http, ws): (bool, bool),
    shared: &Shared,
) -> Result<SocketAddr, RpcError> {
    let (listener, bound) = server::bind(addr)
        .await
        .map_err(|source| RpcError::Bind { addr, source })?;
    let policy = AccessPolicy {
        http: http.then(|| Arc::new(config.http_api.clone())),
        ws: ws.then(|| Arc::new(config.ws_api.clone())),
        vhosts: config.vhosts.clone(),
        origins: config.ws_origins.clone(),
        cors: config.cors.clone(),
        call_timeout: Some(config.timeouts.write),
    };
    let http_layers = tower::ServiceBuilder::new()
        .layer(AccessLayer::new(policy))
        .layer(WsCapLayer::new(shared.ws_connections.clone()))
        .layer(ReadBodyLayer::new(
            config.max_request_body_size,
            config.timeouts.read,
        ))
        .layer(shared.in_flight.clone())
        .layer(RawTxLayer::new(
            http.then(|| Arc::clone(&shared.ctx)),
            config.max_request_body_size,
        ))
        // A WebSocket-only port serves no HTTP calls: nothing to count there.
        .layer(BatchCountLayer::new(
            if http { config.batch_request_limit } else { 0 },
            config.max_request_body_size,
        ));
    let rpc_layers = RpcServiceBuilder::new()
        .layer(BatchResponseCapLayer::new(config.batch_response_max_size))
        .layer(NamespaceFilterLayer::default())
        .layer(CallTimeoutLayer::default());
    let builder = Server::builder()
        .set_config(server_config(config, http, ws))
        .set_http_middleware(http_layers)
        .set_rpc_middleware(rpc_layers)
        .to_service_builder();
    let opts = ServeOptions {
        name: if http { "http" } else { "ws" },
        timeouts: config.timeouts,
        table: shared.connections.clone(),
        lanes: shared.lanes,
    };
    let (methods, stop) = (shared.methods.clone(), shared.stop.clone());
    tokio::spawn(server::run(
        listener,
        opts,
        shared.stop.clone(),
        move || builder.clone().build(methods.clone(), stop.clone()),
    ));
    Ok(bound)
}

/// Binds the configured endpoints and starts serving `ctx`.
pub async fn start(config: RpcConfig, mut ctx: RpcContext) -> Result<RpcHandle, RpcError> {
    ctx.max_response_size = config.max_response_body_size as usize;
    let heads = ctx.heads.clone();
    let lanes = ctx.pool.budgets().config().lanes;
    let raw_tx_ctx = Arc::new(ctx.clone());
    let methods = module(ctx, config.client_version.clone())?;
    for (flag, api) in [
        ("--http.api", &config.http_api),
        ("--ws.api", &config.ws_api),
    ] {
        let unknown = api.unknown(methods.method_names());
        if !unknown.is_empty() {
            // geth logs these and goes on; so does moat.
            tracing::warn!(
                flag,
                ?unknown,
                "namespaces this node does not have are ignored"
            );
        }
    }
    let (stop, handle) = stop_channel();
    let shared = Shared {
        // One count of requests executing for both ports.
        in_flight: InFlightLimitLayer::new(config.max_concurrent_requests),
        connections: ConnTable::new(config.connections),
        ws_connections: ConnTable::new(config.ws_connections),
        methods: methods.into(),
        stop,
        lanes,
        ctx: raw_tx_ctx,
    };
    let shared_port = config.ws_addr == Some(config.http_addr);
    let (http_addr, ws_addr) = match (config.serve_http, config.ws_addr) {
        (true, ws) => {
            let http_addr = serve(config.http_addr, &config, (true, shared_port), &shared).await?;
            let ws_addr = match ws {
                Some(_) if shared_port => Some(http_addr),
                Some(addr) => Some(serve(addr, &config, (false, true), &shared).await?),
                None => None,
            };
            (Some(http_addr), ws_addr)
        }
        (false, Some(addr)) => (
            None,
            Some(serve(addr, &config, (false, true), &shared).await?),
        ),
        // Nothing to serve: the handle only relays heads (to no one).
        (false, None) => (None, None),
    };
    Ok(RpcHandle {
        http_addr,
        ws_addr,
        server: handle,
        heads,
    })
}
