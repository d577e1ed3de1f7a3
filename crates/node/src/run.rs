//! `moat` with no subcommand: run the node (JSON-RPC over the chain and the pool), and in
//! dev mode produce blocks from the pool.

use crate::dev;
use moat_blockchain::chain::Chain;
use moat_blockchain::mempool::{Journal, Pool, PoolConfig};
use moat_blockchain::payload::PayloadService;
use moat_common::config::Genesis;
use moat_rpc::engine::{EngineConfig, EngineContext, read_jwt_secret, start_engine};
use moat_rpc::{RpcConfig, RpcContext, StoreStateView};
use moat_storage::Store;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// Flags keep geth's names where geth has one, so scripts written for geth need few changes.
#[derive(clap::Args, Debug)]
pub struct NodeArgs {
    /// Run a development chain: built-in genesis, prefunded well-known keys, blocks sealed
    /// from the pool.
    #[arg(long)]
    pub dev: bool,
    /// Seconds between dev blocks; 0 seals a block on each transaction.
    #[arg(long = "dev.period", default_value_t = 2)]
    pub dev_period: u64,
    /// Activate Osaka in the dev chain.
    #[arg(long = "dev.osaka")]
    pub dev_osaka: bool,
    /// Database directory (dev mode: a temporary one when not given).
    #[arg(long)]
    pub datadir: Option<PathBuf>,
    /// A built-in network (mainnet, sepolia, hoodi) or a geth-style genesis.json.
    #[arg(long)]
    pub network: Option<String>,
    /// HTTP JSON-RPC listening interface.
    #[arg(long = "http.addr", default_value = "127.0.0.1")]
    pub http_addr: IpAddr,
    /// HTTP JSON-RPC port.
    #[arg(long = "http.port", default_value_t = 8545)]
    pub http_port: u16,
    /// Also serve JSON-RPC (with subscriptions) over WebSocket.
    #[arg(long)]
    pub ws: bool,
    /// WebSocket listening interface.
    #[arg(long = "ws.addr", default_value = "127.0.0.1")]
    pub ws_addr: IpAddr,
    /// WebSocket port.
    #[arg(long = "ws.port", default_value_t = 8546)]
    pub ws_port: u16,
    /// Engine API listening interface.
    #[arg(long = "authrpc.addr", default_value = "127.0.0.1")]
    pub authrpc_addr: IpAddr,
    /// Engine API port.
    #[arg(long = "authrpc.port", default_value_t = 8551)]
    pub authrpc_port: u16,
    /// File with the engine API's JWT secret (hex); one is created in the datadir when
    /// not given.
    #[arg(long = "authrpc.jwtsecret")]
    pub authrpc_jwtsecret: Option<PathBuf>,
    /// Serve Prometheus metrics (pool, pipeline, caches, RPC, import).
    #[arg(long)]
    pub metrics: bool,
    /// Metrics listening interface.
    #[arg(long = "metrics.addr", default_value = "127.0.0.1")]
    pub metrics_addr: IpAddr,
    /// Metrics port.
    #[arg(long = "metrics.port", default_value_t = 9001)]
    pub metrics_port: u16,
    /// Most gas an eth_call or eth_estimateGas may use (0: the block gas limit).
    #[arg(long = "rpc.gascap", default_value_t = moat_rpc::DEFAULT_GAS_CAP)]
    pub rpc_gascap: u64,
    /// devp2p listening port (TCP).
    #[arg(long, default_value_t = 30303)]
    pub port: u16,
    /// devp2p listening interface.
    #[arg(long = "p2p.addr", default_value = "0.0.0.0")]
    pub p2p_addr: IpAddr,
    /// Comma-separated enode URLs to connect to and keep connected.
    #[arg(long, value_delimiter = ',')]
    pub bootnodes: Vec<String>,
    /// Most peers, inbound and outbound together; 0 disables p2p networking.
    /// [default: 50, or 0 with --dev]
    #[arg(long)]
    pub maxpeers: Option<usize>,
    /// File with the node key (hex); default `nodekey` in the datadir, created if absent.
    #[arg(long)]
    pub nodekey: Option<PathBuf>,
    /// The node key as hex (tests and tools); overrides --nodekey.
    #[arg(long)]
    pub nodekeyhex: Option<String>,
    /// Network id announced in the eth handshake (default: the chain id).
    #[arg(long)]
    pub networkid: Option<u64>,
    /// Accepted for geth compatibility: there is no peer discovery, only static peers.
    #[arg(long)]
    pub nodiscover: bool,
    /// Log level: error, warn, info, debug or trace.
    #[arg(long = "log.level", default_value = "info")]
    pub log_level: String,
    /// geth's numeric verbosity (0 silent … 5 trace); overrides --log.level when given.
    #[arg(long)]
    pub verbosity: Option<u8>,
}

fn init_logging(args: &NodeArgs) {
    let level = match args.verbosity {
        Some(0) => tracing::Level::ERROR,
        Some(1) => tracing::Level::ERROR,
        Some(2) => tracing::Level::WARN,
        Some(3) => tracing::Level::INFO,
        Some(4) => tracing::Level::DEBUG,
        Some(_) => tracing::Level::TRACE,
        None => args.log_level.parse().unwrap_or(tracing::Level::INFO),
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_target(false)
        .try_init();
}

fn load_genesis(args: &NodeArgs) -> Result<Genesis, String> {
    if args.dev {
        return Ok(dev::dev_genesis(args.dev_osaka));
    }
    let Some(network) = &args.network else {
        return Err("give --network <mainnet | sepolia | hoodi | genesis.json> (or --dev for a development chain)".into());
    };
    crate::chain_cmd::load_genesis(network)
}

pub fn run(args: NodeArgs) -> ExitCode {
    init_logging(&args);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run_async(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

async fn run_async(args: NodeArgs) -> Result<(), String> {
    if args.metrics {
        // Installed before anything registers a metric: handles taken earlier would be
        // bound to no recorder.
        let addr = SocketAddr::new(args.metrics_addr, args.metrics_port);
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install()
            .map_err(|e| format!("cannot serve metrics on {addr}: {e}"))?;
        tracing::info!(%addr, "Prometheus metrics listening");
    }
    let genesis = load_genesis(&args)?;
    let datadir = match (&args.datadir, args.dev) {
        (Some(d), _) => d.clone(),
        (None, true) => std::env::temp_dir().join(format!("moat-dev-{}", std::process::id())),
        (None, false) => return Err("give --datadir".into()),
    };
    let store = Store::open(&datadir, None).map_err(|e| e.to_string())?;
    let chain = Chain::init(store.clone(), &genesis).map_err(|e| e.to_string())?;
    let config = chain.config().clone();
    let pool = Pool::new(
        PoolConfig::new(config.clone()),
        Arc::new(StoreStateView::new(store.clone(), config.clone())),
    );
    let chain = chain.with_sender_cache(pool.sender_cache().clone());
    // Local transactions from before a restart come back through the pipeline.
    pool.attach_journal(Journal::new(store.clone()));
    let reload = pool.reload_journal().await;
    if reload.readmitted + reload.dropped > 0 {
        tracing::info!(
            readmitted = reload.readmitted,
            dropped = reload.dropped,
            "pool journal reloaded"
        );
    }
    let (head, head_hash) = chain.head().map_err(|e| e.to_string())?;
    tracing::info!(chain_id = config.chain_id, genesis = %chain.genesis_hash(), head, %head_hash, datadir = %datadir.display(), "chain open");

    // Peers' transactions are taken once a consensus client has set a known head (or at
    // once in dev mode, where this node makes the chain).
    let synced = Arc::new(AtomicBool::new(args.dev));
    let network = start_network(&args, &datadir, &chain, &pool, synced.clone()).await?;
    let mut ctx = RpcContext::new(chain.clone(), pool.clone());
    ctx.gas_cap = args.rpc_gascap;
    if let Some(net) = &network {
        ctx = ctx.with_admin(Arc::new(crate::p2p_admin::Admin(net.clone())));
    }
    let http = SocketAddr::new(args.http_addr, args.http_port);
    let ws = args.ws.then(|| SocketAddr::new(args.ws_addr, args.ws_port));
    let rpc = moat_rpc::start(
        RpcConfig {
            http_addr: http,
            ws_addr: ws,
            ..RpcConfig::default()
        },
        ctx.clone(),
    )
    .await
    .map_err(|e| e.to_string())?;
    tracing::info!(addr = %rpc.http_addr(), "HTTP JSON-RPC listening");
    if let Some(ws) = rpc.ws_addr() {
        tracing::info!(addr = %ws, "WebSocket JSON-RPC listening");
    }

    let secret = jwt_secret(&args, &datadir)?;
    let payloads = PayloadService::new(chain.clone(), pool.clone());
    let engine_ctx =
        EngineContext::new(chain.clone(), pool.clone(), payloads).with_synced_flag(synced);
    let mut heads = engine_ctx.subscribe_heads();
    let engine_config = EngineConfig {
        addr: SocketAddr::new(args.authrpc_addr, args.authrpc_port),
        ..EngineConfig::new(secret)
    };
    let engine = start_engine(engine_config, engine_ctx)
        .await
        .map_err(|e| e.to_string())?;
    tracing::info!(addr = %engine.local_addr(), "engine API listening");
    // Heads the consensus client sets reach newHeads subscribers.
    let (heads_chain, heads_rpc, heads_net) = (chain.clone(), ctx.clone(), network.clone());
    tokio::spawn(async move {
        while heads.changed().await.is_ok() {
            let hash = *heads.borrow_and_update();
            if let Ok(Some(header)) = heads_chain.header(&hash) {
                heads_rpc.notify_new_head(&header);
            }
            if let Some(net) = &heads_net {
                net.on_new_head();
            }
        }
    });

    if args.dev {
        println!(
            "\nDevelopment chain (chain id {}). Prefunded accounts (10000 ETH each):",
            config.chain_id
        );
        for (i, s) in dev::dev_signers().iter().enumerate() {
            println!("({i}) {}  private key {}", s.address(), s.secret_bytes());
        }
        println!();
        let period = Duration::from_secs(args.dev_period);
        tokio::spawn(dev::run_producer(
            chain.clone(),
            pool.clone(),
            ctx.clone(),
            period,
        ));
    }

    // Queued transactions expire; the pool is told to look once a minute.
    let expiring = pool.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(60)).await;
            expiring.remove_expired(std::time::Instant::now());
        }
    });

    tokio::signal::ctrl_c().await.map_err(|e| e.to_string())?;
    tracing::info!("shutting down");
    rpc.stop();
    engine.stop();
    Ok(())
}

/// Starts devp2p unless `--maxpeers 0`; prints the enode.
async fn start_network(
    args: &NodeArgs,
    datadir: &Path,
    chain: &Chain,
    pool: &Pool,
    synced: Arc<AtomicBool>,
) -> Result<Option<moat_p2p::Network>, String> {
    // A dev chain is private: no p2p unless asked for.
    let max_peers = args.maxpeers.unwrap_or(if args.dev { 0 } else { 50 });
    if max_peers == 0 {
        return Ok(None);
    }
    let key = match (&args.nodekeyhex, &args.nodekey) {
        (Some(hex), _) => moat_p2p::parse_node_key(hex)?,
        (None, Some(path)) => moat_p2p::load_or_create_node_key(path)?,
        (None, None) => moat_p2p::load_or_create_node_key(&datadir.join("nodekey"))?,
    };
    let mut cfg =
        moat_p2p::NetworkConfig::new(key, args.networkid.unwrap_or(chain.config().chain_id));
    cfg.listen = Some(SocketAddr::new(args.p2p_addr, args.port));
    cfg.max_peers = max_peers;
    for url in args.bootnodes.iter().filter(|u| !u.is_empty()) {
        let enode = url
            .parse()
            .map_err(|e| format!("--bootnodes: {url}: {e}"))?;
        cfg.static_peers.push(enode);
    }
    let net = moat_p2p::Network::start(cfg, chain.clone(), pool.clone(), synced)
        .await
        .map_err(|e| e.to_string())?;
    tracing::info!(enode = %net.enode(), "devp2p listening");
    println!("enode: {}", net.enode());
    Ok(Some(net))
}

/// The engine API secret: from `--authrpc.jwtsecret`, else `jwt.hex` in the datadir,
/// created with a random secret the first time (as geth does).
fn jwt_secret(args: &NodeArgs, datadir: &Path) -> Result<[u8; 32], String> {
    if let Some(path) = &args.authrpc_jwtsecret {
        return read_jwt_secret(path).map_err(|e| format!("cannot read {}: {e}", path.display()));
    }
    let path = datadir.join("jwt.hex");
    if path.exists() {
        return read_jwt_secret(&path).map_err(|e| format!("cannot read {}: {e}", path.display()));
    }
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|e| format!("no randomness for a JWT secret: {e}"))?;
    std::fs::write(&path, alloy_primitives::hex::encode_prefixed(secret))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    tracing::info!(path = %path.display(), "wrote a new engine API JWT secret");
    Ok(secret)
}
