//! `moat-soak`: runs one execution client — moat, or go-ethereum given by path — for N
//! minutes under mixed load and reports how its memory, open files, threads and pool
//! size move over the run: they must level off.
//!
//! The tool starts the node itself, in a fresh temporary directory it removes at the end:
//! a genesis it writes (2,000 funded senders, the system contracts, every fork through
//! Osaka at block 0, post-merge), a JWT secret and a node key it writes, every port on
//! 127.0.0.1, `--nodiscover` and an empty `--bootnodes` (geth also `--netrestrict
//! 127.0.0.0/8`), so nothing leaves the machine. geth's datadir is made with `geth init`
//! and it runs with the flags hive gives it (authrpc, HTTP with eth, net, txpool and web3,
//! `--nat none`, `--syncmode full`, `--maxpeers`). Then, the same for both clients, each
//! part paced, bounded in count and ending with the run:
//!
//! - signed transfers over `eth_sendRawTransaction` at `--rpc-rate` (from
//!   `--rpc-senders` senders, over `--rpc-connections` kept-alive connections);
//! - one devp2p peer (moat-p2p's client: RLPx, Hello, an eth/70 Status at our genesis
//!   with its fork id) sending `Transactions` messages at `--gossip-rate`, from senders
//!   of its own, reading and dropping what the node sends back;
//! - blocks through the engine API as a consensus client makes them, one every
//!   `--slot` seconds (forkchoiceUpdatedV3 with attributes, getPayloadV5, newPayloadV4,
//!   forkchoiceUpdatedV3), and every `--reorg-every` minutes a one-block reorg: two
//!   sibling blocks on the head, the head set to the first, then moved to the second
//!   (src/engine.rs);
//! - every `--nonce-check` seconds each sender's pending nonce is asked of the node, and a
//!   sender the node has fallen behind (a tx refused or lost) sends again from there.
//!
//! Every `--sample` seconds it reads `/proc/<pid>` (VmRSS, entries of `fd/`, `Threads`,
//! CPU time), the node's `txpool_status` and `eth_blockNumber`, and the size of its
//! datadir, prints one line and appends it to `--csv FILE`. At the end it stops the node
//! (SIGTERM; SIGKILL after 60 s) and prints the load it carried and, per metric, the mean
//! of the first, middle and last third of the run and whether it levels off (the rule:
//! src/summary.rs). A failed or interrupted run (Ctrl-C, SIGTERM) stops the node the same
//! way; a panic kills it, and so does the tool's own death (`PR_SET_PDEATHSIG`).
//!
//! ```text
//! cargo build --release -p moat -p moat-soak
//! target/release/moat-soak --minutes 30 --csv /tmp/soak/moat.csv
//! target/release/moat-soak --geth ~/geth-bin/geth --minutes 30 --csv /tmp/soak/geth.csv
//! make soak MINUTES=30 GETH=~/geth-bin/geth     # both side by side, into /tmp/soak
//! ```
//!
//! moat uses ports 38500–38502 by default and geth 38600–38602 (`--ports BASE`: p2p,
//! HTTP and engine API at BASE, BASE+1, BASE+2), so the two run side by side.
//! `--node-args "--cache 128"` passes more flags to the node. Exit status
//! 0 when every metric levels off, 2 when one does not, 1 when the run failed.

mod engine;
mod load;
mod node;
mod sample;
mod summary;

use clap::Parser;
use moat_harness::el::{self, Kind, Node, Ports, Setup};
use moat_harness::http::{self, RpcClient};
use sample::Sample;
use serde_json::json;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    name = "moat-soak",
    about = "Run moat or go-ethereum for N minutes under mixed load and report RSS, fds, threads and pool size over time"
)]
struct Args {
    /// The moat binary.
    #[arg(long, default_value = "target/release/moat")]
    moat: PathBuf,
    /// Run this go-ethereum binary instead of moat.
    #[arg(long)]
    geth: Option<PathBuf>,
    /// Length of the run (from the first block on), minutes.
    #[arg(long, default_value_t = 30.0)]
    minutes: f64,
    /// Transactions a second over eth_sendRawTransaction.
    #[arg(long, default_value_t = 200.0)]
    rpc_rate: f64,
    /// Senders of the RPC transactions.
    #[arg(long, default_value_t = 1_000)]
    rpc_senders: usize,
    /// Kept-alive HTTP connections the RPC transactions share (each its own senders).
    #[arg(long, default_value_t = 8)]
    rpc_connections: usize,
    /// Transactions a second in the peer's `Transactions` messages (0: no peer).
    #[arg(long, default_value_t = 100.0)]
    gossip_rate: f64,
    /// Senders of the gossiped transactions (others than the RPC ones).
    #[arg(long, default_value_t = 1_000)]
    gossip_senders: usize,
    /// Transactions per `Transactions` message.
    #[arg(long, default_value_t = 10)]
    gossip_batch: usize,
    /// Seconds between blocks.
    #[arg(long, default_value_t = 2.0)]
    slot: f64,
    /// Minutes between reorgs (0: none).
    #[arg(long, default_value_t = 3.0)]
    reorg_every: f64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 10.0)]
    sample: f64,
    /// Seconds between checks of the senders' nonces against the node's.
    #[arg(long, default_value_t = 60.0)]
    nonce_check: f64,
    /// Write the samples to this CSV file.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// First of the node's three loopback ports: p2p, HTTP, engine API [default: 38500
    /// for moat, 38600 for geth].
    #[arg(long)]
    ports: Option<u16>,
    /// Growth from the middle third to the last allowed, percent of the middle third
    /// (each metric also has a floor; see the summary).
    #[arg(long, default_value_t = 5.0)]
    tolerance: f64,
    /// More flags for the node, space-separated (e.g. "--cache 256").
    #[arg(long, allow_hyphen_values = true, default_value = "")]
    node_args: String,
    /// Keep the temporary directory (datadir, genesis, node log) and print where it is.
    #[arg(long)]
    keep: bool,
}

/// Set by SIGINT or SIGTERM: the run ends early, and the node is stopped as at its end.
static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALLED.store(true, Ordering::Relaxed);
}

/// Counters of the load, shared by its threads.
#[derive(Default)]
pub struct Stats {
    /// Transfers sent by `eth_sendRawTransaction`.
    pub rpc_sent: AtomicU64,
    /// RPC sends the node accepted.
    pub rpc_accepted: AtomicU64,
    /// RPC sends that failed (by message in the summary).
    pub rpc_errors: AtomicU64,
    /// RPC sends skipped: their turn came over 1 s late.
    pub rpc_skipped: AtomicU64,
    /// Transactions sent by gossip (devp2p `Transactions` messages).
    pub gossip_sent: AtomicU64,
    /// Gossip `Transactions` messages sent.
    pub gossip_messages: AtomicU64,
    /// Gossip transactions skipped: late, or no connection.
    pub gossip_skipped: AtomicU64,
    /// Gossip connections made again after one was lost.
    pub reconnects: AtomicU64,
    /// Times a sender's nonce was reset to the node's pending nonce.
    pub rewinds: AtomicU64,
    /// Canonical blocks built through the engine API.
    pub blocks: AtomicU64,
    /// Transactions those blocks included.
    pub txs_included: AtomicU64,
    /// Transactions in the side blocks reorgs switched to.
    pub side_txs: AtomicU64,
    /// Reorgs made: the head moved to a sibling block.
    pub reorgs: AtomicU64,
    /// Engine API slots that failed (the engine then recovers).
    pub engine_errors: AtomicU64,
    new_payload_count: AtomicU64,
    new_payload_ns: AtomicU64,
    new_payload_max_ns: AtomicU64,
    errors: Mutex<BTreeMap<String, u64>>,
}

impl Stats {
    /// An RPC error, counted by message (the first 40 distinct messages).
    pub fn rpc_error(&self, message: &str) {
        self.rpc_errors.fetch_add(1, Ordering::Relaxed);
        let message: String = message.chars().take(100).collect();
        let mut errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        let len = errors.len();
        if let Some(n) = errors.get_mut(&message) {
            *n += 1;
        } else if len < 40 {
            errors.insert(message, 1);
        }
    }

    /// Counts a canonical block built, with its `txs` transactions.
    pub fn block(&self, txs: u64) {
        self.blocks.fetch_add(1, Ordering::Relaxed);
        self.txs_included.fetch_add(txs, Ordering::Relaxed);
    }

    /// Times one `engine_newPayload` call (mean and max in the summary).
    pub fn new_payload(&self, took: Duration) {
        let ns = took.as_nanos() as u64;
        self.new_payload_count.fetch_add(1, Ordering::Relaxed);
        self.new_payload_ns.fetch_add(ns, Ordering::Relaxed);
        self.new_payload_max_ns.fetch_max(ns, Ordering::Relaxed);
    }
}

/// What the threads of a run share: the stop flag, the first failure, the counters and
/// each sender's next nonce.
pub struct Shared {
    stop: AtomicBool,
    failure: Mutex<Option<String>>,
    /// Counters of the load.
    pub stats: Stats,
    /// Each sender's next nonce, by sender index.
    pub nonces: Vec<AtomicU64>,
    start: Instant,
}

impl Shared {
    /// Whether the run is over: stopped, or SIGINT or SIGTERM came.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || SIGNALLED.load(Ordering::Relaxed)
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Ends the run with `why` (the first failure is the one reported).
    pub fn fail(&self, why: String) {
        let mut f = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            *f = Some(why);
        }
        self.stop();
    }

    fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// An event of the run, on standard error with the time into the run.
    pub fn note(&self, what: String) {
        eprintln!("[{:>6.0} s] {what}", self.start.elapsed().as_secs_f64());
    }
}

/// Sleeps until `due` (in steps of at most 100 ms, watching the stop flag); false when
/// the run was stopped first.
pub fn sleep_until(due: Instant, shared: &Shared) -> bool {
    loop {
        if shared.stopped() {
            return false;
        }
        let now = Instant::now();
        if now >= due {
            return true;
        }
        std::thread::sleep((due - now).min(Duration::from_millis(100)));
    }
}

fn random_bytes() -> Result<[u8; 32], String> {
    let mut b = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| format!("/dev/urandom: {e}"))?;
    Ok(b)
}

fn main() -> ExitCode {
    let args = Args::parse();
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn check(args: &Args) -> Result<(), String> {
    let positive = [
        ("--minutes", args.minutes),
        ("--rpc-rate", args.rpc_rate),
        ("--slot", args.slot),
        ("--sample", args.sample),
        ("--nonce-check", args.nonce_check),
    ];
    for (flag, v) in positive {
        if !(v.is_finite() && v > 0.0) {
            return Err(format!("{flag} must be a positive number"));
        }
    }
    let non_negative = [
        ("--gossip-rate", args.gossip_rate),
        ("--reorg-every", args.reorg_every),
        ("--tolerance", args.tolerance),
    ];
    for (flag, v) in non_negative {
        if !(v.is_finite() && v >= 0.0) {
            return Err(format!("{flag} must be 0 or more"));
        }
    }
    if args.minutes > 24.0 * 60.0 {
        return Err("--minutes: at most a day".into());
    }
    if args.rpc_senders == 0 || args.rpc_connections == 0 || args.gossip_batch == 0 {
        return Err(
            "--rpc-senders, --rpc-connections and --gossip-batch must be at least 1".into(),
        );
    }
    if args.gossip_rate > 0.0 && args.gossip_senders == 0 {
        return Err("--gossip-senders must be at least 1 with a gossip rate".into());
    }
    Ok(())
}

fn run(args: &Args) -> Result<ExitCode, String> {
    check(args)?;
    let (kind, bin) = match &args.geth {
        Some(g) => (Kind::Geth, g.clone()),
        None => (Kind::Moat, args.moat.clone()),
    };
    if !bin.is_file() {
        return Err(format!("{}: no such file", bin.display()));
    }
    let ports = Ports::from_base(args.ports.unwrap_or(match kind {
        Kind::Moat => 38_500,
        Kind::Geth => 38_600,
    }));
    let dir = tempfile::Builder::new()
        .prefix("moat-soak-")
        .tempdir()
        .map_err(|e| format!("temporary directory: {e}"))?;

    let senders = args.rpc_senders + args.gossip_senders;
    eprintln!("making {senders} senders…");
    let wallet = load::Wallet::new(senders);
    let unix_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let genesis = node::genesis(&wallet.addresses, unix_now);
    let genesis_path = dir.path().join("genesis.json");
    std::fs::write(
        &genesis_path,
        serde_json::to_string_pretty(&genesis).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("{}: {e}", genesis_path.display()))?;
    let secret = random_bytes()?;
    let jwt_path = dir.path().join("jwt.hex");
    std::fs::write(&jwt_path, alloy_primitives::hex::encode(secret))
        .map_err(|e| format!("{}: {e}", jwt_path.display()))?;
    let node_key = secp256k1::SecretKey::from_byte_array(random_bytes()?)
        .map_err(|e| format!("node key: {e}"))?;
    let node_key_hex = alloy_primitives::hex::encode(node_key.secret_bytes());

    // The builder's gas limit pinned, so neither client moves it during the run.
    let gas_limit = node::GAS_LIMIT.to_string();
    let setup = Setup {
        kind,
        bin: &bin,
        ports,
        genesis: &genesis_path,
        jwt: &jwt_path,
        network_id: node::CHAIN_ID,
        node_key_hex: &node_key_hex,
        dir: dir.path(),
        http_api: "eth,net,txpool,web3",
        max_peers: 5,
        extra: ["--miner.gaslimit", &gas_limit]
            .into_iter()
            .chain(args.node_args.split_whitespace())
            .collect(),
    };
    println!(
        "node:   {} ({}), {}",
        kind.name(),
        el::version(&bin, kind),
        bin.display()
    );
    println!(
        "ports:  p2p {}, http {}, engine {} on 127.0.0.1; datadir {}",
        ports.p2p,
        ports.http,
        ports.auth,
        dir.path().display()
    );
    if !setup.extra.is_empty() {
        println!("flags:  {}", setup.extra.join(" "));
    }
    println!(
        "load:   {} min; rpc {} tx/s ({} senders, {} connections); gossip {} tx/s ({} senders, {} a message); a block every {} s; a reorg every {} min",
        args.minutes,
        args.rpc_rate,
        args.rpc_senders,
        args.rpc_connections,
        args.gossip_rate,
        args.gossip_senders,
        args.gossip_batch,
        args.slot,
        args.reorg_every
    );
    let mut node = Node::start(&setup)?;
    println!("pid:    {}", node.pid);
    let outcome = soak(args, &mut node, &setup, &genesis, &wallet, node_key, secret);
    let (status, took, killed) = node.stop(Duration::from_secs(60));
    let stop_line = format!(
        "node stopped: {} after {:.1} s{}",
        status.map_or("exit status unknown".into(), |s| s.to_string()),
        took.as_secs_f64(),
        if killed {
            " (did not stop on SIGTERM within 60 s: killed)"
        } else {
            ""
        }
    );
    let result = match outcome {
        Ok((samples, shared)) => {
            println!("{stop_line}");
            report(args, kind, &samples, &shared)
        }
        Err(e) => {
            eprintln!("{stop_line}");
            eprintln!(
                "node log ({}), last lines:\n{}",
                node.log.display(),
                node.log_tail(30)
            );
            Err(e)
        }
    };
    if args.keep {
        println!("kept:   {}", dir.keep().display());
    }
    result
}

/// Waits for the node's JSON-RPC (60 s at most) and checks it runs our genesis.
fn wait_ready(
    node: &mut Node,
    rpc: &mut RpcClient,
    genesis: &moat_common::config::Genesis,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = node.exited() {
            return Err(format!("the node exited at start: {status}"));
        }
        if SIGNALLED.load(Ordering::Relaxed) {
            return Err("interrupted".into());
        }
        match rpc.call("eth_chainId", json!([])) {
            Ok(v) if http::quantity(&v) == Some(node::CHAIN_ID) => break,
            Ok(v) => {
                return Err(format!(
                    "the node's chain id is {v}, not {}",
                    node::CHAIN_ID
                ));
            }
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => return Err(format!("the node's JSON-RPC did not come up in 60 s: {e}")),
        }
    }
    let block0 = rpc
        .call("eth_getBlockByNumber", json!(["0x0", false]))
        .map_err(|e| format!("eth_getBlockByNumber(0): {e}"))?;
    let ours = genesis.header().hash();
    if block0["hash"].as_str().and_then(|h| h.parse().ok()) != Some(ours) {
        return Err(format!(
            "the node's block 0 is {}, ours {ours}: it reads the genesis otherwise",
            block0["hash"]
        ));
    }
    Ok(())
}

fn soak(
    args: &Args,
    node: &mut Node,
    setup: &Setup<'_>,
    genesis: &moat_common::config::Genesis,
    wallet: &load::Wallet,
    node_key: secp256k1::SecretKey,
    secret: [u8; 32],
) -> Result<(Vec<Sample>, Shared), String> {
    let http_addr = std::net::SocketAddr::from(([127, 0, 0, 1], setup.ports.http));
    let auth_addr = std::net::SocketAddr::from(([127, 0, 0, 1], setup.ports.auth));
    let mut rpc = RpcClient::new(http_addr, None, Duration::from_secs(10));
    wait_ready(node, &mut rpc, genesis)?;
    let engine = engine::Engine::new(
        RpcClient::new(auth_addr, Some(secret), Duration::from_secs(30)),
        RpcClient::new(http_addr, None, Duration::from_secs(10)),
    )?;
    let target = moat_p2p::Enode {
        id: moat_p2p::rlpx::peer_id(&secp256k1::PublicKey::from_secret_key_global(&node_key)),
        addr: ([127, 0, 0, 1], setup.ports.p2p).into(),
    };
    let status = moat_p2p::eth::Status::at_genesis(genesis, 70);
    let mut csv = match &args.csv {
        Some(path) => {
            let mut f =
                std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
            writeln!(f, "{}", Sample::CSV_HEADER).map_err(|e| e.to_string())?;
            Some(f)
        }
        None => None,
    };

    let start = Instant::now();
    let duration = Duration::from_secs_f64(args.minutes * 60.0);
    let end = start + duration;
    // The load goes on a little past the last sample, so that it sees the node loaded.
    let load_end = end + Duration::from_secs(2);
    let shared = Shared {
        stop: AtomicBool::new(false),
        failure: Mutex::new(None),
        stats: Stats::default(),
        nonces: (0..wallet.addresses.len())
            .map(|_| AtomicU64::new(0))
            .collect(),
        start,
    };
    let rpc_senders = 0..args.rpc_senders;
    let gossip_senders = args.rpc_senders..args.rpc_senders + args.gossip_senders;
    let mut samples = Vec::new();
    std::thread::scope(|s| {
        let shared = &shared;
        s.spawn(move || {
            engine.run(
                shared,
                start,
                load_end,
                Duration::from_secs_f64(args.slot),
                Duration::from_secs_f64(args.reorg_every * 60.0),
            )
        });
        for lane in 0..args.rpc_connections {
            let senders = rpc_senders.clone();
            s.spawn(move || {
                load::rpc_lane(
                    lane,
                    args.rpc_connections,
                    senders,
                    args.rpc_rate,
                    http_addr,
                    wallet,
                    shared,
                    start,
                    load_end,
                )
            });
        }
        if args.gossip_rate > 0.0 {
            let (target, status, senders) =
                (target.clone(), status.clone(), gossip_senders.clone());
            s.spawn(move || {
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt.block_on(load::gossip(
                        target,
                        status,
                        senders,
                        args.gossip_rate,
                        args.gossip_batch,
                        wallet,
                        shared,
                        start,
                        load_end,
                    )),
                    Err(e) => shared.fail(format!("gossip runtime: {e}")),
                }
            });
        }
        s.spawn(move || {
            load::resync(
                http_addr,
                wallet,
                shared,
                start,
                load_end,
                Duration::from_secs_f64(args.nonce_check),
            )
        });

        // The samples, on this thread: at 0, every --sample seconds, and at the end.
        let every = Duration::from_secs_f64(args.sample);
        let mut k = 0u32;
        loop {
            let at = (start + every * k).min(end);
            if !sleep_until(at, shared) {
                break;
            }
            if let Some(status) = node.exited() {
                shared.fail(format!("the node exited during the run: {status}"));
                break;
            }
            let db = setup.dir.join("db");
            match sample::take(node.pid, &mut rpc, &db, start.elapsed().as_secs_f64()) {
                Ok(sample) => {
                    println!("{}", sample.line());
                    if let Some(f) = csv.as_mut()
                        && let Err(e) = writeln!(f, "{}", sample.csv_line()).and_then(|_| f.flush())
                    {
                        shared.fail(format!("csv: {e}"));
                    }
                    samples.push(sample);
                }
                Err(e) => {
                    shared.fail(format!("cannot read the node's /proc: {e}"));
                    break;
                }
            }
            if at >= end {
                break;
            }
            k += 1;
        }
        shared.stop();
    });
    if let Some(why) = shared.failure() {
        return Err(why);
    }
    if SIGNALLED.load(Ordering::Relaxed) {
        shared.note("interrupted: the run ends early".into());
    }
    Ok((samples, shared))
}

fn report(
    args: &Args,
    kind: Kind,
    samples: &[Sample],
    shared: &Shared,
) -> Result<ExitCode, String> {
    let st = &shared.stats;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let secs = samples.last().map_or(0.0, |s| s.t).max(1e-9);
    println!();
    println!("load carried over {:.1} min:", secs / 60.0);
    println!(
        "  rpc:     {} sent, {} accepted ({:.0}/s), {} errors, {} skipped (over 1 s late)",
        get(&st.rpc_sent),
        get(&st.rpc_accepted),
        get(&st.rpc_accepted) as f64 / secs,
        get(&st.rpc_errors),
        get(&st.rpc_skipped)
    );
    for (message, n) in st.errors.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        println!("           ×{n:<7} {message}");
    }
    println!(
        "  gossip:  {} txs in {} messages ({:.0}/s), {} skipped, {} reconnections",
        get(&st.gossip_sent),
        get(&st.gossip_messages),
        get(&st.gossip_sent) as f64 / secs,
        get(&st.gossip_skipped),
        get(&st.reconnects)
    );
    println!(
        "  nonces:  {} rewinds (a sender sent again from the node's pending nonce)",
        get(&st.rewinds)
    );
    let count = get(&st.new_payload_count).max(1);
    println!(
        "  blocks:  {} built ({} txs, {:.0}/s), {} reorgs (side blocks held {} txs), {} engine errors; newPayload mean {:.1} ms, max {:.1} ms",
        get(&st.blocks),
        get(&st.txs_included),
        get(&st.txs_included) as f64 / secs,
        get(&st.reorgs),
        get(&st.side_txs),
        get(&st.engine_errors),
        get(&st.new_payload_ns) as f64 / count as f64 / 1e6,
        get(&st.new_payload_max_ns) as f64 / 1e6
    );
    if let (Some(first), Some(last)) = (samples.first(), samples.last()) {
        let mib = |kb: u64| kb as f64 / 1024.0;
        println!(
            "  datadir: {:.1} MiB at the start, {:.1} MiB at the end ({:.1} MiB a minute)",
            mib(first.disk_kb),
            mib(last.disk_kb),
            (mib(last.disk_kb) - mib(first.disk_kb)) / (secs / 60.0)
        );
    }

    let pool_floor = (args.rpc_rate + args.gossip_rate) * args.slot;
    let series = |name, unit, floor, f: &dyn Fn(&Sample) -> Option<f64>| summary::Series {
        name,
        unit,
        floor,
        points: samples.iter().filter_map(|s| Some((s.t, f(s)?))).collect(),
    };
    let all = [
        series("RSS", "MiB", 8.0, &|s| Some(s.rss_kb as f64 / 1024.0)),
        series("fds", "count", 8.0, &|s| Some(s.fds as f64)),
        series("threads", "count", 4.0, &|s| Some(s.threads as f64)),
        series("pool", "txs", pool_floor, &|s| s.pool().map(|p| p as f64)),
    ];
    let tolerance = args.tolerance / 100.0;
    let (table, levels) = summary::table(&all, tolerance);
    println!();
    println!(
        "{} over {:.1} min, {} samples. A metric levels off when its last-third mean is at most its\n\
         middle-third mean + A, and the least-squares slope of its last half is at most 2·A an hour;\n\
         A = max({}% of the middle-third mean, a floor: 8 MiB, 8 fds, 4 threads, {pool_floor:.0} txs).",
        kind.name(),
        secs / 60.0,
        samples.len(),
        args.tolerance
    );
    print!("{table}");
    println!(
        "verdict: {}",
        if levels {
            "every metric levels off"
        } else {
            "NOT every metric levels off"
        }
    );
    Ok(if levels {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}
