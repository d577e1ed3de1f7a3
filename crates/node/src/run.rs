//! `moat` with no subcommand: run the node (JSON-RPC over the chain and the pool), and in
//! dev mode produce blocks from the pool.

use crate::dev;
use crate::disk::Trouble;
use moat_blockchain::chain::Chain;
use moat_blockchain::payload::PayloadService;
use moat_common::config::Genesis;
use moat_mempool::{Journal, Pool, ReloadFate};
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
pub(crate) struct NodeArgs {
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
    /// Free disk space (MB) the datadir must keep: below it the node stops cleanly
    /// before a write can fail (0: no check), as geth's flag.
    #[arg(long = "datadir.minfreedisk", default_value_t = 0)]
    pub datadir_minfreedisk: u64,
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
    /// File of local transactions kept across restarts (relative paths are in the
    /// datadir).
    #[arg(long = "txpool.journal", default_value = "txpool.journal")]
    pub txpool_journal: PathBuf,
    /// How often the journal is rewritten from the pool's local transactions (Go-style
    /// duration, as geth: 1h, 30m, 90s, 1h30m0s).
    #[arg(long = "txpool.rejournal", default_value = "1h", value_parser = parse_duration)]
    pub txpool_rejournal: Duration,
    #[command(flatten)]
    pub pool: crate::pool_flags::PoolArgs,
    #[command(flatten)]
    pub rpc: crate::rpc_flags::RpcArgs,
    #[command(flatten)]
    pub ops: crate::ops_flags::OpsArgs,
    /// Megabytes of memory for the database (geth's flag, and geth's default): a quarter
    /// caches trie nodes, the rest is the database's page cache; both fill as the state
    /// is read, so a small state never reaches the bound. The node's other caches are
    /// bounded by count: sender recoveries (131,072), hashed trie keys (327,680), recent
    /// failures (65,536).
    #[arg(long, default_value_t = moat_storage::DEFAULT_CACHE_BYTES >> 20)]
    pub cache: usize,
    /// Threads that compute a block's state root (the account trie's 16 top-level
    /// subtries and their accounts' storage tries split among them); 0: one per core.
    #[arg(long = "state-root-workers", default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=16))]
    pub state_root_workers: u16,
    /// Executes each block without the thread that reads its state ahead of the
    /// transactions (prewarming, on by default where there are two cores or more).
    #[arg(long = "engine.disable-prewarming")]
    pub disable_prewarming: bool,
    /// Most gas an eth_call or eth_estimateGas may use (0: the block gas limit).
    #[arg(long = "rpc.gascap", default_value_t = moat_rpc::DEFAULT_GAS_CAP)]
    pub rpc_gascap: u64,
    /// How long eth_sendRawTransactionSync waits for the receipt when the call names no
    /// timeout (Go-style duration).
    #[arg(long = "rpc.txsync.defaulttimeout", default_value = "20s", value_parser = parse_duration)]
    pub rpc_txsync_default: Duration,
    /// The longest wait an eth_sendRawTransactionSync call may ask for (Go-style).
    #[arg(long = "rpc.txsync.maxtimeout", default_value = "1m", value_parser = parse_duration)]
    pub rpc_txsync_max: Duration,
    /// Most calls in one JSON-RPC batch; more get -32600 "batch too large" (0: no limit).
    #[arg(long = "rpc.batch-request-limit", default_value_t = moat_rpc::limits::DEFAULT_BATCH_REQUEST_LIMIT)]
    pub rpc_batch_request_limit: u32,
    /// Most bytes of a batch's responses; the calls after the response that passes it get
    /// -32003 "response too large" (0: no limit).
    #[arg(long = "rpc.batch-response-max-size", default_value_t = moat_rpc::limits::DEFAULT_BATCH_RESPONSE_MAX_SIZE)]
    pub rpc_batch_response_max_size: usize,
    /// Largest JSON-RPC request body (and WebSocket message), in MiB; bigger gets HTTP 413.
    #[arg(long = "rpc.http-body-limit", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..4096))]
    pub rpc_http_body_limit: u32,
    /// Most JSON-RPC HTTP requests in progress at once; more are answered at once with
    /// HTTP 429 and -32005 "server busy: too many requests in progress".
    #[arg(long = "rpc.max-concurrent-requests", default_value_t = moat_rpc::limits::DEFAULT_MAX_CONCURRENT_REQUESTS, value_parser = clap::value_parser!(u32).range(1..))]
    pub rpc_max_concurrent_requests: u32,
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
    /// Turn peer discovery off: only --bootnodes and admin_addPeer peers are dialled.
    #[arg(long)]
    pub nodiscover: bool,
    /// UDP port of peer discovery [default: the --port value].
    #[arg(long = "discovery.port")]
    pub discovery_port: Option<u16>,
    /// Run discv4 discovery (off with --discovery.v4=false or --nodiscover).
    #[arg(long = "discovery.v4", default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub discovery_v4: bool,
    /// The address other nodes reach this one at: none, or extip:<IP> (announced in
    /// the node record and discovery pings).
    #[arg(long, default_value = "none")]
    pub nat: String,
    #[command(flatten)]
    pub v5: crate::discovery::DiscoveryV5Args,
    /// Log level: error, warn, info, debug or trace.
    #[arg(long = "log.level", default_value = "info")]
    pub log_level: String,
    /// geth's numeric verbosity (0 silent … 5 trace); overrides --log.level when given.
    #[arg(long)]
    pub verbosity: Option<u8>,
}

fn init_logging(args: &NodeArgs) {
    let level = match args.verbosity {
        Some(v) => crate::ops_flags::verbosity_level(v),
        None => args
            .log_level
            .parse::<tracing::Level>()
            .unwrap_or(tracing::Level::INFO)
            .into(),
    };
    crate::ops_flags::init_logging(level, args.ops.log_format);
}

/// Where the chain's genesis comes from.
enum GenesisSource {
    Dev(Box<Genesis>),
    /// A built-in network's name or a genesis file (streamed: at 10M accounts it is
    /// gigabytes).
    Network(String),
}

/// A fresh chain each time: a directory of its own, never one a killed dev node with the
/// same process id left behind.
fn temporary_dev_datadir() -> std::path::PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!("moat-dev-{}-{nanos:09}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn load_genesis(args: &NodeArgs) -> Result<GenesisSource, String> {
    if args.dev {
        return Ok(GenesisSource::Dev(Box::new(dev::dev_genesis(
            args.dev_osaka,
        ))));
    }
    let Some(network) = &args.network else {
        return Err("give --network <mainnet | sepolia | hoodi | genesis.json> (or --dev for a development chain)".into());
    };
    crate::chain_cmd::check_network(network)?;
    Ok(GenesisSource::Network(network.clone()))
}

pub(crate) fn run(mut args: NodeArgs) -> ExitCode {
    init_logging(&args);
    if let Err(e) = args.ops.apply(&mut args.network) {
        eprintln!("error: {e}");
        return ExitCode::from(1);
    }
    // Caught from here on: a SIGTERM while the datadir opens is not lost.
    let shutdown = match crate::shutdown::Shutdown::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    // A dev node without --datadir runs on a fresh directory of its own, removed when
    // the node stops (a killed one leaves it behind).
    let temporary = match (&args.datadir, args.dev) {
        (None, true) => {
            let dir = temporary_dev_datadir();
            args.datadir = Some(dir.clone());
            Some(dir)
        }
        _ => None,
    };
    // The KZG trusted setup (seconds of point decoding and precomputation) is loaded
    // beside the datadir's opening, as go-ethereum initialises its KZG library at start,
    // rather than by the first blob tx a peer sends (which would wait for it).
    let _ = std::thread::Builder::new()
        .name("moat-kzg-setup".into())
        .spawn(|| {
            let started = std::time::Instant::now();
            moat_crypto::kzg::warm_up();
            tracing::debug!(took = ?started.elapsed(), "KZG trusted setup loaded");
        });
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
    let outcome = runtime.block_on(run_async(args, shutdown));
    // Tasks still running (p2p, sync, a blocking import of a peer's block) get a moment
    // to end; a commit is atomic, so one cut off leaves nothing half-written.
    runtime.shutdown_timeout(Duration::from_secs(5));
    match outcome {
        Ok(store) => {
            // Blocks committed after the first flush (while the tasks above ended) are
            // made durable too.
            if let Err(e) = store.flush() {
                eprintln!("error: cannot make the last blocks durable: {e}");
                return ExitCode::from(1);
            }
            drop(store);
            if let Some(dir) = temporary
                && let Err(e) = std::fs::remove_dir_all(&dir)
            {
                tracing::warn!(dir = %dir.display(), error = %e, "the dev datadir was not removed");
            }
            tracing::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            if let Some(dir) = temporary {
                let _ = std::fs::remove_dir_all(&dir);
            }
            ExitCode::from(1)
        }
    }
}

/// The scheduling settings (`moat_sched`): the untrusted lane's RPC budget from the flags,
/// and how often work in one piece on that lane gives way from `MOAT_LANE_GIVE_WAY_US`
/// (microseconds, 50 to 100,000; for measuring), 0.5 ms otherwise.
fn sched_config(args: &NodeArgs) -> moat_sched::SchedConfig {
    let give_way = std::env::var("MOAT_LANE_GIVE_WAY_US")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|us| (50..=100_000).contains(us))
        .map_or(moat_sched::SchedConfig::GIVE_WAY, Duration::from_micros);
    moat_sched::SchedConfig {
        give_way,
        rpc_lane_budget: args.pool.rpc_lane_budget(),
    }
}

/// Installs the Prometheus recorder, and runs its exporter (the HTTP listener and the
/// periodic upkeep that drains histograms into summaries) on a thread of its own at
/// nice 19, not on the node runtime. Upkeep and a scrape's render run for milliseconds at
/// a stretch (tens of them while they fault in fresh memory); on a runtime worker that
/// held every task queued behind it, the honest transactions' among them.
fn install_metrics(builder: metrics_exporter_prometheus::PrometheusBuilder) -> Result<(), String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            // Failure leaves the thread at normal priority.
            moat_sched::nice_this_thread();
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                    return;
                }
            };
            // `build` spawns the upkeep task on the runtime it is called in: this one.
            let built = {
                let _guard = rt.enter();
                builder.build()
            };
            match built {
                Ok((recorder, exporter)) => {
                    let _ = tx.send(Ok(recorder));
                    if let Err(e) = rt.block_on(exporter) {
                        tracing::warn!(error = ?e, "metrics exporter stopped");
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                }
            }
        })
        .map_err(|e| e.to_string())?;
    let recorder = rx
        .recv()
        .map_err(|_| "the metrics thread ended".to_string())??;
    metrics::set_global_recorder(recorder).map_err(|e| e.to_string())
}

async fn run_async(args: NodeArgs, shutdown: crate::shutdown::Shutdown) -> Result<Store, String> {
    // Before anything is scheduled: the lanes read it when first needed.
    if let Err(in_force) = moat_sched::install(sched_config(&args)) {
        tracing::warn!(?in_force, "scheduling settings were in force already");
    }
    if args.metrics {
        // Installed before anything registers a metric: handles taken earlier would be
        // bound to no recorder.
        let addr = SocketAddr::new(args.metrics_addr, args.metrics_port);
        // Answers on every path, geth's /debug/metrics/prometheus included.
        let builder = metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .set_buckets_for_metric(
                metrics_exporter_prometheus::Matcher::Full(
                    "moat_engine_new_payload_seconds".into(),
                ),
                crate::ops_flags::NEW_PAYLOAD_BUCKETS,
            )
            .and_then(|b| {
                b.set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Full("moat_block_import_seconds".into()),
                    crate::ops_flags::NEW_PAYLOAD_BUCKETS,
                )
            })
            .map_err(|e| format!("metrics buckets: {e}"))?;
        install_metrics(builder).map_err(|e| format!("cannot serve metrics on {addr}: {e}"))?;
        tracing::info!(%addr, "Prometheus metrics listening");
    }
    let genesis = load_genesis(&args)?;
    // `run` has given a dev node without one its temporary datadir.
    let datadir = args.datadir.clone().ok_or("give --datadir")?;
    moat_blockchain::state_root::set_state_root_workers(args.state_root_workers.into());
    let store =
        Store::open_with_cache(&datadir, None, args.cache << 20).map_err(|e| e.to_string())?;
    let chain = match genesis {
        GenesisSource::Dev(genesis) => {
            Chain::init(store.clone(), &genesis).map_err(|e| e.to_string())
        }
        GenesisSource::Network(network) => {
            crate::chain_cmd::open_chain_in(store.clone(), &network, &datadir)
        }
    }
    .map(|chain| {
        chain
            .with_undo_window(args.ops.undo_window())
            .with_prewarm(!args.disable_prewarming)
    })
    .map_err(|e| {
        if store.damage().is_some() || e.contains("corrupt") {
            format!(
                "{e}: the database is damaged; `moat db verify --datadir {}` lists what is wrong",
                datadir.display()
            )
        } else {
            e
        }
    })?;
    let config = chain.config().clone();
    let pool = Pool::new(
        args.pool.pool_config(config.clone()),
        Arc::new(StoreStateView::new(store.clone(), config.clone())),
    );
    let chain = chain.with_sender_cache(pool.sender_cache().clone());
    // The pool follows every head the chain moves to, whoever moved it.
    let maintainer = moat_blockchain::maintain::spawn(&chain, &pool);
    // The blob pool's store is read first: its sidecars were verified before, so neither
    // the journal's blob txs nor its own pay KZG again.
    let blob_path = datadir.join(&args.pool.blob_datadir).join("blobs.redb");
    let (blob_store, blob_contents) = moat_mempool::BlobStore::open(&blob_path)
        .map_err(|e| format!("{e} (remove it to start with an empty blob pool)"))?;
    pool.preverify_stored(&blob_contents);
    // Local transactions from before a restart come back through the pipeline.
    let journal = reload_journal(&args, &datadir, &store, &pool).await?;
    let blobs = pool.reload_blob_store(blob_contents).await;
    if blobs.readmitted + blobs.refused + blobs.damaged > 0 {
        tracing::info!(
            readmitted = blobs.readmitted,
            kzg_skipped = blobs.kzg_skipped,
            refused = blobs.refused,
            damaged = blobs.damaged,
            path = %blob_path.display(),
            "blob pool reloaded"
        );
    }
    pool.attach_blob_store(blob_store)
        .map_err(|e| format!("cannot start the blob pool's writer: {e}"))?;
    let (head, head_hash) = chain.head().map_err(|e| e.to_string())?;
    if args.metrics {
        crate::metrics_catalog::register(head);
        crate::metrics_catalog::spawn_pool_gauges(pool.clone());
    }
    tracing::info!(chain_id = config.chain_id, genesis = %chain.genesis_hash(), head, %head_hash, datadir = %datadir.display(), "chain open");

    // Peers' transactions are taken once a consensus client has set a known head (or at
    // once in dev mode, where this node makes the chain).
    let synced = Arc::new(AtomicBool::new(args.dev));
    let network = start_network(&args, &datadir, &chain, &pool, synced.clone()).await?;
    let _discovery =
        crate::discovery::start_discovery(&args, &datadir, &chain, network.as_ref()).await?;
    let mut ctx = RpcContext::new(chain.clone(), pool.clone());
    ctx.gas_cap = args.rpc_gascap;
    ctx.tx_sync = moat_rpc::TxSyncTimeouts {
        default: args.rpc_txsync_default,
        max: args.rpc_txsync_max,
    };
    // The dev block producer's queue: `Some` exactly in dev mode.
    let mut mine_requests = None;
    if args.dev {
        let keys = dev::dev_signers();
        // geth's dev mode makes the dev account the etherbase.
        ctx.coinbase = keys.first().map(|s| s.address());
        ctx.dev_keys = Arc::new(keys);
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        ctx.mine = Some(tx);
        ctx.automine = args.dev_period == 0;
        mine_requests = Some(rx);
    }
    if let Some(net) = &network {
        ctx = ctx.with_admin(Arc::new(crate::p2p_admin::Admin(net.clone())));
    }
    // With peers, heads the consensus client names and the node lacks are fetched from
    // them (full sync; with --syncmode snap, the default, a datadir at genesis downloads
    // the state at a pivot first).
    let sync = network.as_ref().map(|net| {
        let snap = args.ops.snap_sync();
        let bytes = args.ops.snap_response_bytes;
        crate::sync::start(&chain, net, synced.clone(), ctx.clone(), snap, bytes)
    });
    if let Some(sync) = &sync {
        ctx = ctx.with_sync(sync.clone());
    }
    let http = SocketAddr::new(args.http_addr, args.http_port);
    let ws = args.ws.then(|| SocketAddr::new(args.ws_addr, args.ws_port));
    let budget = crate::fdlimit::Budget::at_start(max_peers(&args));
    let rpc_config = args.rpc.rpc_config(
        args.dev,
        &budget,
        RpcConfig {
            http_addr: http,
            ws_addr: ws,
            max_request_body_size: args.rpc_http_body_limit << 20,
            batch_request_limit: args.rpc_batch_request_limit,
            batch_response_max_size: args.rpc_batch_response_max_size,
            max_concurrent_requests: args.rpc_max_concurrent_requests,
            ..RpcConfig::default()
        },
    );
    let secret = jwt_secret(&args, &datadir)?;
    let miner = args.pool.miner_config(args.dev)?;
    let payloads = PayloadService::new(chain.clone(), pool.clone()).with_miner(miner.clone());
    let mut engine_ctx =
        EngineContext::new(chain.clone(), pool.clone(), payloads, maintainer.clone())
            .with_synced_flag(synced);
    if let Some(sync) = sync {
        engine_ctx = engine_ctx.with_sync(sync);
    }
    let engine_config = args.rpc.engine_config(
        &budget,
        EngineConfig {
            addr: SocketAddr::new(args.authrpc_addr, args.authrpc_port),
            // geth's auth port serves `eth` beside `engine`; consensus clients check the
            // connection with eth_chainId there before anything else.
            eth: Some(
                moat_rpc::eth_methods(ctx.clone(), format!("moat/v{}", env!("CARGO_PKG_VERSION")))
                    .map_err(|e| e.to_string())?,
            ),
            ..EngineConfig::new(secret)
        },
    );
    let engine = start_engine(engine_config, engine_ctx.clone())
        .await
        .map_err(|e| e.to_string())?;
    tracing::info!(addr = %engine.local_addr(), "engine API listening");
    // The public RPC opens after the engine API: a script (or a test) that waits for the
    // RPC to answer finds the engine port bound too.
    let rpc = moat_rpc::start(rpc_config, ctx.clone())
        .await
        .map_err(|e| e.to_string())?;
    match rpc.http_addr() {
        Some(addr) => tracing::info!(%addr, "HTTP JSON-RPC listening"),
        None => tracing::info!("HTTP JSON-RPC off (give --http to serve it)"),
    }
    if let Some(ws) = rpc.ws_addr() {
        tracing::info!(addr = %ws, "WebSocket JSON-RPC listening");
    }

    // Each head the pool has followed (from the consensus client, the syncer or dev
    // mode) reaches newHeads subscribers and the peers.
    let mut heads = maintainer.subscribe();
    let (heads_chain, heads_rpc, heads_net) = (chain.clone(), ctx.clone(), network.clone());
    tokio::spawn(async move {
        while heads.changed().await.is_ok() {
            let hash = heads.borrow_and_update().hash;
            if let Ok(Some(header)) = heads_chain.header(&hash) {
                heads_rpc.notify_new_head(&header);
            }
            if let Some(net) = &heads_net {
                net.on_new_head();
            }
        }
    });

    if let Some(requests) = mine_requests {
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
            maintainer.clone(),
            ctx.clone(),
            period,
            miner,
            requests,
        ));
    }

    // Queued transactions expire, and gapped blob txs; the pool is told to look once a
    // minute, or twice in a gapped tx's lifetime if that is shorter.
    let expiring = pool.clone();
    let every =
        (args.pool.blob_gapped_lifetime / 2).clamp(Duration::from_secs(1), Duration::from_secs(60));
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            expiring.remove_expired(std::time::Instant::now());
        }
    });

    // The journal is rewritten from the pool now and then, and early if it grows fast.
    let rejournal = pool.clone();
    let every = args.txpool_rejournal;
    tokio::spawn(async move {
        let mut last = tokio::time::Instant::now();
        loop {
            // Looked at every 5 s: after a failed sync the journal takes nothing until it
            // is rewritten (`wants_rotation` then says so).
            tokio::time::sleep(every.min(Duration::from_secs(5))).await;
            let grown = rejournal.journal().is_some_and(|j| j.wants_rotation());
            if grown || last.elapsed() >= every {
                match rejournal.rotate_journal().await {
                    Ok(n) => tracing::debug!(records = n, "pool journal rewritten"),
                    Err(e) => tracing::warn!(error = %e, "pool journal could not be rewritten"),
                }
                last = tokio::time::Instant::now();
            }
        }
    });

    // Until a signal, or the disk says no: a write that failed for a reason of the disk
    // leaves the database unwritable until it is reopened, so the node stops rather
    // than run on with it (a supervisor, or the operator, starts it again once there is
    // space; the datadir reopens at its last durable commit).
    let flusher = crate::disk::Flusher::start(store.clone())
        .map_err(|e| format!("cannot start the store's flusher: {e}"))?;
    let disk = tokio::select! {
        () = shutdown.wait() => None,
        why = crate::disk::trouble(&store, &datadir, args.datadir_minfreedisk) => Some(why),
    };
    match &disk {
        Some(Trouble::Unwritable(why)) => {
            metrics::gauge!("moat_store_write_failed").set(1.0);
            tracing::error!(error = %why, "stopping: the datadir cannot be written");
        }
        Some(Trouble::Damaged(why)) => {
            metrics::gauge!("moat_store_damaged").set(1.0);
            tracing::error!(error = %why, "stopping: the database is damaged");
        }
        None => {}
    }
    // Intake stops: no new RPC or engine calls.
    rpc.stop();
    engine.stop();
    // The engine call in progress, if any, ends: its block is wholly stored or was never
    // acknowledged. None starts after it.
    let _quiet = engine_ctx.quiesce().await;
    // No more blocks: the final flush below is the store's last sync.
    let _ = tokio::task::spawn_blocking(move || flusher.stop()).await;
    // Every acknowledged tx is already durable; this writes what is queued and stops.
    journal.close();
    if !pool.close_blob_store(Duration::from_secs(10)) {
        tracing::warn!("the blob pool's store did not finish its last write in 10 s");
    }
    match disk {
        Some(Trouble::Unwritable(why)) => {
            return Err(format!(
                "stopped: the datadir {} cannot be written ({why}); free disk space and start \
                 moat again (it reopens at its last durable block)",
                datadir.display()
            ));
        }
        Some(Trouble::Damaged(why)) => {
            // What is committed is kept: the damage is elsewhere in the file.
            let _ = store.flush();
            return Err(format!(
                "stopped: the database in {} is damaged ({why}); `moat db verify --datadir {}` \
                 lists what is wrong; restore the datadir from a copy or sync a new one",
                datadir.display(),
                datadir.display()
            ));
        }
        None => {}
    }
    store
        .flush()
        .map_err(|e| format!("cannot make the last blocks durable: {e}"))?;
    tracing::info!("intake stopped, journal and store flushed");
    Ok(store)
}

/// Opens the journal, gives its entries back to the pool, and logs what became of them.
/// Entries of the journal table of earlier versions (in the store) are taken too, then
/// removed once the journal file holds them.
async fn reload_journal(
    args: &NodeArgs,
    datadir: &Path,
    store: &Store,
    pool: &Pool,
) -> Result<Journal, String> {
    let path = datadir.join(&args.txpool_journal);
    let (journal, mut contents) = Journal::open_with(&path, args.pool.journal_options())
        .map_err(|e| format!("cannot open the pool journal {}: {e}", path.display()))?;
    let legacy = store.journal().unwrap_or_default();
    if !legacy.is_empty() {
        let mut all: Vec<Vec<u8>> = legacy.iter().map(|(_, raw)| raw.clone()).collect();
        all.append(&mut contents.entries);
        contents.entries = all;
    }
    pool.attach_journal(journal.clone());
    let reload = pool.reload_journal(contents).await;
    if !legacy.is_empty() {
        let mut batch = moat_storage::WriteBatch::new();
        for (hash, _) in &legacy {
            batch.delete_journal(*hash);
        }
        if let Err(e) = store.commit(batch) {
            tracing::warn!(error = %e, "could not clear the old journal table");
        }
    }
    if reload.total() > 0 || reload.damaged_tail > 0 {
        let count = |f: ReloadFate| reload.count(f);
        tracing::info!(
            readmitted = count(ReloadFate::Readmitted),
            held = count(ReloadFate::Held),
            mined = count(ReloadFate::Mined),
            replaced = count(ReloadFate::Replaced),
            unaffordable = count(ReloadFate::Unaffordable),
            invalid = count(ReloadFate::Invalid),
            damaged_tail_bytes = reload.damaged_tail,
            path = %path.display(),
            "pool journal reloaded"
        );
    }
    Ok(journal)
}

/// A Go-style duration (`1h`, `30m`, `90s`, `1h30m0s`, `500ms`), as geth's flags take.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("not a duration: {text:?} (use e.g. 1h, 30m, 90s)");
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let one = match &rest[..unit] {
            "ms" => Duration::from_millis(1),
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            _ => return Err(bad()),
        };
        total += one * u32::try_from(n).map_err(|_| bad())?;
        rest = &rest[unit..];
    }
    if total.is_zero() {
        return Err(bad());
    }
    Ok(total)
}

/// The peers asked for: `--maxpeers`, else 50 (0 in dev mode).
fn max_peers(args: &NodeArgs) -> usize {
    args.maxpeers.unwrap_or(if args.dev { 0 } else { 50 })
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
    let max_peers = max_peers(args);
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
    // Peers and handshake slots cut to fit the open-file limit.
    let budget = crate::fdlimit::Budget::at_start(max_peers);
    cfg.max_peers = budget.max_peers.max(1);
    cfg.handshakes = budget.handshakes;
    if let Some(custody) = args.pool.blob_custody {
        cfg.blob_custody = custody;
    }
    cfg.blob_fetch_percent = args.pool.blob_fetch_probability;
    for url in args.bootnodes.iter().filter(|u| !u.is_empty()) {
        if let Some(enode) = crate::discovery::bootnode_peer(url)? {
            cfg.static_peers.push(enode);
        }
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

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn state_root_workers_default_to_the_cores_and_stop_at_16() {
        use clap::Parser;
        #[derive(Parser, Debug)]
        struct Cli {
            #[command(flatten)]
            node: super::NodeArgs,
        }
        assert_eq!(Cli::parse_from(["moat"]).node.state_root_workers, 0);
        let one = Cli::parse_from(["moat", "--state-root-workers", "1"]);
        assert_eq!(one.node.state_root_workers, 1);
        assert!(Cli::try_parse_from(["moat", "--state-root-workers", "17"]).is_err());
        assert!(Cli::try_parse_from(["moat", "--state-root-workers", "-1"]).is_err());
    }

    #[test]
    fn durations_parse_as_geth_writes_them() {
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("1h0m0s").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        for bad in ["", "1", "h", "0s", "1d", "-1h", "1.5h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
