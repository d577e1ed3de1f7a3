//! moat-attack-table: attack scenarios against a running node while honest traffic flows,
//! and what the honest traffic got (`make attack-table`).
//!
//! Honest traffic, all the time:
//! - one peer gossiping valid transfers (`Transactions`, every 20 ms) of a funded key, or
//!   in turn of `--peer-senders` fresh keys that key funds first (dev mode: a network's
//!   gossip comes from many senders, and one sender at 200 tx/s runs into the pool's
//!   per-sender limits once pending is half full); a second, silent peer (the observer) times each one from its send until the node
//!   gossips it on, i.e. until it is pending;
//! - one RPC client sending valid transfers of another funded key with
//!   `eth_sendRawTransaction`, one at a time; its latency is the call's (the node answers
//!   once the tx is pooled).
//!
//! The honest clients run on a runtime (one thread) of their own, apart from the
//! attackers', so that what they time is the node and not the tool's own queue; the
//! attackers' threads run at `SCHED_IDLE` (nice 19 where that is refused, or with
//! `ATTACKERS_NICE19=1`) and yield the core before each message or call, and between the
//! 64 KB steps in which a large frame is encrypted and MACed, since their CPU stands for
//! remote machines'. For the same reason a blob reply is framed from its list of txs
//! compressed once (`Framing::pooled_transactions`), not compressed again per delivery.
//!
//! Phases: honest traffic alone (the reference), then for each scenario the attack beside
//! it, then the attack stopped until honest throughput is back to ≥ 90 % of the reference.
//! Attacking peers have fresh keys and connect again with a new key when dropped. Attacker
//! `i` binds 127.0.0.(10+i) and keeps that address across its identities, so a new
//! identity inherits its address's history, and all share the honest peers' /24
//! (`--same-ip`: everyone from 127.0.0.1).
//!
//! Scenarios (numbers of the issue's list):
//! - `fresh-keys` (1): many new EOAs, unfunded, 128 txs a message;
//! - `cache-churn` (2): distinct txs, half from fresh unfunded keys (each a new sender
//!   cache entry), half for another chain id (each a new recent-failure entry);
//! - `repeat` (3): one unfunded tx again and again, one copy a message;
//! - `rpc-flood` (7): four RPC connections sending invalid (bad signature) and
//!   underpriced txs as fast as answers come;
//! - `announce` (6): 4,096 hashes a message announced and never delivered;
//! - `blob-v0`, `blob-v1` (4): blob txs of funded senders (`--blob-keys`), 6 blobs each,
//!   with well-formed sidecars whose proofs do not verify (each blob carries another's),
//!   announced one at a time and delivered when the node asks; each attacker cycles
//!   through 16 such txs, reconnecting with a new identity from a new /24 whenever it is
//!   dropped (127.(1+i).k.1: a botnet, which per-/24 history cannot stop). With
//!   `--metrics` the node's KZG checks are counted against the unique txs delivered;
//! - `invalidation` (5): 2,000 fresh senders (`--storm-senders`) are funded by RPC from
//!   `--storm-key`, each for exactly two transfers, and mined; then the attackers gossip
//!   four transfers of each sender (8,000 txs, 1 gwei tip). The node's blocks (dev mode,
//!   every 2 s) include the first ones and leave the rest unable to pay: each head change
//!   revalidates the senders in bulk. With `--metrics` the head changes' revalidation
//!   time and accounts read are printed beside the reference phase's. No reorg: the dev
//!   node's only way back, `evm_revert`, restores a snapshot's chain, state and pool
//!   whole (the blocks' txs are dropped, not returned to the pool as a reorg returns
//!   them, and the honest senders' later nonces are left behind a gap), so it measures
//!   a reset, not a reorg.
//!
//! Without `--target` only the RPC forms run (honest RPC, `rpc-flood`): go-ethereum's dev
//! mode has no p2p.
//!
//! The attackers' CPU share is the node's extra CPU during the attack (`/proc/<pid>/stat`,
//! over the reference phase) as a share of the machine's cores, against `--budget-share`
//! (what the node's budgets allow all attackers: moat's peers budget is half the machine).

use alloy_primitives::{Address, B256, Bytes, TxKind, U256, hex};
use clap::{Parser, ValueEnum};
use moat_common::transaction::{
    BlobsBundle, Eip1559Tx, Eip4844Tx, PooledTransaction, SidecarVersion, SignedTransaction,
    Transaction,
};
use moat_crypto::secp::Signer;
use moat_p2p::Enode;
use moat_p2p::client::Client;
use moat_p2p::eth::{Announcement, EthMessage, Status};
use moat_p2p::p2p::CompressedTail;
use moat_p2p::session::{Framing, Incoming};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Scenario {
    FreshKeys,
    CacheChurn,
    Repeat,
    RpcFlood,
    Announce,
    BlobV0,
    BlobV1,
    Invalidation,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::FreshKeys => "1 fresh-key flood",
            Scenario::CacheChurn => "2 cache exhaustion",
            Scenario::Repeat => "3 repeated failures",
            Scenario::RpcFlood => "7 RPC flood",
            Scenario::Announce => "6 announcement flood",
            Scenario::BlobV0 => "4 blob spam (v0 proofs)",
            Scenario::BlobV1 => "4 blob spam (v1 cell proofs)",
            Scenario::Invalidation => "5 invalidation storm",
        }
    }

    /// The sidecar version of a blob scenario.
    fn blob_version(self) -> Option<SidecarVersion> {
        match self {
            Scenario::BlobV0 => Some(SidecarVersion::V0),
            Scenario::BlobV1 => Some(SidecarVersion::V1),
            Scenario::FreshKeys
            | Scenario::CacheChurn
            | Scenario::Repeat
            | Scenario::RpcFlood
            | Scenario::Announce
            | Scenario::Invalidation => None,
        }
    }

    fn gossip(self) -> bool {
        match self {
            Scenario::FreshKeys
            | Scenario::CacheChurn
            | Scenario::Repeat
            | Scenario::Announce
            | Scenario::BlobV0
            | Scenario::BlobV1
            | Scenario::Invalidation => true,
            Scenario::RpcFlood => false,
        }
    }
}

#[derive(Parser, Debug)]
#[command(about = "Attack scenarios beside honest traffic: what the honest traffic got")]
struct Args {
    /// The node's HTTP JSON-RPC address.
    #[arg(long)]
    rpc: SocketAddr,
    /// The node's devp2p enode; without it only the RPC forms run.
    #[arg(long)]
    target: Option<Enode>,
    /// The node's process id (its CPU from /proc).
    #[arg(long)]
    pid: u32,
    /// Hex key of a funded account for the honest peer.
    #[arg(long)]
    peer_key: String,
    /// Hex key of another funded account for the honest RPC client.
    #[arg(long)]
    rpc_key: String,
    /// Senders of the honest peer's transfers. With more than one, `--peer-key` funds
    /// that many fresh keys by RPC first and waits until a block has the funding (a node
    /// that mines: dev mode), and the peer sends from each in turn, as gossip from a
    /// network's many senders comes; with one, from `--peer-key` itself.
    #[arg(long, default_value_t = 1)]
    peer_senders: usize,
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "fresh-keys,cache-churn,repeat,rpc-flood,announce"
    )]
    scenarios: Vec<Scenario>,
    /// Attacking peers (or RPC connections for `rpc-flood`).
    #[arg(long, default_value_t = 4)]
    attackers: usize,
    /// Seconds of each phase (reference, attack).
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Honest peer's transactions per second.
    #[arg(long, default_value_t = 200)]
    peer_rate: u64,
    /// Honest RPC client's transactions per second.
    #[arg(long, default_value_t = 100)]
    rpc_rate: u64,
    /// Share of the node's CPU the budgets allow all attackers together.
    #[arg(long, default_value_t = 0.5)]
    budget_share: f64,
    /// Name of the node in the table's title.
    #[arg(long, default_value = "node")]
    label: String,
    /// Hex keys of funded accounts for the blob spammers (comma-separated; attacker `i`
    /// signs with key `i % n`). Without them the blob scenarios are skipped.
    #[arg(long, value_delimiter = ',')]
    blob_keys: Vec<String>,
    /// The node's Prometheus address (moat: KZG checks per blob scenario).
    #[arg(long)]
    metrics: Option<SocketAddr>,
    /// Attackers all connect from 127.0.0.1 (by default attacker `i` binds 127.0.0.(10+i)
    /// and keeps that address across its identities).
    #[arg(long)]
    same_ip: bool,
    /// Hex key of a funded account that funds the invalidation storm's senders.
    #[arg(long)]
    storm_key: Option<String>,
    /// Senders of the invalidation storm (each sends four transfers).
    #[arg(long, default_value_t = 2_000)]
    storm_senders: usize,
    /// A JSON-RPC request to send to the engine API first (a node that imported a chain
    /// takes transactions once a forkchoice update names its head): the file's content.
    #[arg(long, requires_all = ["engine", "jwt_secret"])]
    fcu: Option<std::path::PathBuf>,
    /// The genesis file the node runs: peers then send a Status at its genesis (which
    /// go-ethereum accepts) instead of mirroring the node's (found with a probe that
    /// go-ethereum refuses).
    #[arg(long)]
    network: Option<std::path::PathBuf>,
    /// The node's engine API address (for `--fcu`).
    #[arg(long)]
    engine: Option<SocketAddr>,
    /// The engine API's JWT secret file (hex).
    #[arg(long)]
    jwt_secret: Option<std::path::PathBuf>,
}

/// An HS256 JWT with the current `iat`, as the engine API wants.
fn engine_jwt(secret_hex: &str) -> Result<String, String> {
    use base64::Engine;
    use hmac::{Hmac, Mac};
    let secret = hex::decode(secret_hex.trim().trim_start_matches("0x"))
        .map_err(|e| format!("jwt secret: {e}"))?;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let iat = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let head = b64.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let claims = b64.encode(format!(r#"{{"iat":{iat}}}"#));
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&secret).map_err(|e| e.to_string())?;
    mac.update(format!("{head}.{claims}").as_bytes());
    let sig = b64.encode(mac.finalize().into_bytes());
    Ok(format!("{head}.{claims}.{sig}"))
}

/// Posts `body` to the engine API with a fresh JWT; the answer must hold a result.
async fn engine_call(addr: SocketAddr, secret_hex: &str, body: &str) -> Result<String, String> {
    let token = engine_jwt(secret_hex)?;
    let mut s = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("engine {addr}: {e}"))?;
    let req = format!(
        "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAuthorization: Bearer {token}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_string(&mut answer))
        .await
        .map_err(|_| "engine API did not answer in 30 s".to_string())?
        .map_err(|e| e.to_string())?;
    if answer.contains("\"result\"") {
        Ok(answer)
    } else {
        Err(format!(
            "engine API: {}",
            answer.lines().last().unwrap_or_default()
        ))
    }
}

/// User + system CPU seconds of process `pid`.
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (t(11) + t(12)) / 100.0
}

/// A kept-alive HTTP/1.1 JSON-RPC connection (answers with Content-Length).
struct Rpc {
    io: BufReader<TcpStream>,
}

impl Rpc {
    async fn connect(addr: SocketAddr) -> std::io::Result<Self> {
        let s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        Ok(Self {
            io: BufReader::new(s),
        })
    }

    async fn call(&mut self, method: &str, params: &str) -> std::io::Result<serde_json::Value> {
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#);
        let req = format!(
            "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        self.io.get_mut().write_all(req.as_bytes()).await?;
        let mut len = 0usize;
        loop {
            let mut line = String::new();
            if self.io.read_line(&mut line).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut buf = vec![0; len.min(1 << 20)];
        self.io.read_exact(&mut buf).await?;
        serde_json::from_slice(&buf).map_err(std::io::Error::other)
    }
}

/// A JSON-RPC answer's `result` as a hex quantity.
fn result_u64(v: &serde_json::Value) -> Option<u64> {
    v["result"]
        .as_str()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
}

fn transfer(chain_id: u64, signer: &Signer, nonce: u64, fee_cap: u128, tip: u128) -> Bytes {
    let tx = Transaction::Eip1559(Eip1559Tx {
        chain_id,
        nonce,
        max_priority_fee_per_gas: tip,
        max_fee_per_gas: fee_cap,
        gas_limit: 21_000,
        to: TxKind::Call(Address::repeat_byte(0x66)),
        value: U256::from(1),
        input: Bytes::new(),
        access_list: vec![],
    });
    SignedTransaction::sign(tx, signer).encoded_2718().into()
}

fn signer(hex_key: &str) -> Result<Signer, String> {
    let key: B256 = hex_key.parse().map_err(|e| format!("key: {e}"))?;
    Signer::from_bytes(&key).ok_or_else(|| "key: not a valid secret".to_string())
}

const FEE_CAP: u128 = 100_000_000_000;
const TIP: u128 = 2_000_000_000;

/// What the honest traffic got: completions with their latency.
#[derive(Default)]
struct Honest {
    /// Gossiped tx hash → when it was sent.
    sent: Mutex<HashMap<B256, Instant>>,
    peer_done: Mutex<Vec<(Instant, Duration)>>,
    rpc_done: Mutex<Vec<(Instant, Duration)>>,
}

/// With `ATTACK_TABLE_SLOWEST` set: the slowest honest gossip and RPC calls of a phase,
/// each with when it was sent, as seconds into the phase and as the `CLOCK_MONOTONIC`
/// time (`Instant` on Linux, the clock of `perf record -k mono`), so that a profile of
/// the node can be read at the moment a slow one was in flight.
fn slowest(honest: &Honest, from: Instant, to: Instant) {
    if std::env::var_os("ATTACK_TABLE_SLOWEST").is_none() {
        return;
    }
    for (what, done) in [("peer", &honest.peer_done), ("rpc", &honest.rpc_done)] {
        let mut slow: Vec<(Instant, Duration)> = done
            .lock()
            .iter()
            .filter(|(at, _)| *at >= from && *at < to)
            .copied()
            .collect();
        slow.sort_by_key(|(_, l)| std::cmp::Reverse(*l));
        for (at, l) in slow.iter().take(6) {
            let sent = *at - *l;
            eprintln!(
                "  slow {what}: {:.2} ms, sent at +{:.3} s ({sent:?})",
                l.as_secs_f64() * 1e3,
                sent.saturating_duration_since(from).as_secs_f64(),
            );
        }
    }
}

/// Completions and latencies within [from, to).
fn window(done: &Mutex<Vec<(Instant, Duration)>>, from: Instant, to: Instant) -> Vec<Duration> {
    done.lock()
        .iter()
        .filter(|(at, _)| *at >= from && *at < to)
        .map(|(_, l)| *l)
        .collect()
}

fn percentile(lat: &mut [Duration], p: f64) -> Duration {
    if lat.is_empty() {
        return Duration::ZERO;
    }
    lat.sort_unstable();
    lat[((lat.len() - 1) as f64 * p).round() as usize]
}

/// Status mirroring the node's own (same genesis, fork id and head): always accepted.
async fn node_status(target: &Enode) -> Result<Status, String> {
    let key = secp256k1::SecretKey::from_byte_array([0x77; 32]).map_err(|e| e.to_string())?;
    let probe = Status {
        version: 70,
        network_id: 0,
        total_difficulty: U256::ZERO,
        head: B256::ZERO,
        genesis: B256::ZERO,
        fork_id: moat_common::config::ForkId {
            hash: [0; 4],
            next: 0,
        },
        earliest: 0,
        latest: 0,
    };
    let mut c = Client::connect(target, key, &[70, 69, 68], probe)
        .await
        .map_err(|e| format!("probe handshake: {e}"))?;
    let s = c.remote_status().clone();
    c.disconnect(moat_p2p::p2p::DisconnectReason::ClientQuitting)
        .await;
    Ok(s)
}

/// Connects with the key made from `seed`, from the local address `local` when given
/// (any 127.0.0.x is loopback on Linux), else from whatever the OS picks (127.0.0.1).
async fn connect_from(
    target: &Enode,
    seed: u64,
    status: &Status,
    local: Option<Ipv4Addr>,
) -> Option<Client> {
    let mut k = [0u8; 32];
    k[..8].copy_from_slice(&seed.to_be_bytes());
    k[31] = 7;
    let key = secp256k1::SecretKey::from_byte_array(k).ok()?;
    let connect = async {
        let Some(ip) = local else {
            return Client::connect(target, key, &[status.version], status.clone())
                .await
                .ok();
        };
        let sock = tokio::net::TcpSocket::new_v4().ok()?;
        sock.bind(SocketAddr::from((ip, 0))).ok()?;
        let stream = sock.connect(target.addr).await.ok()?;
        Client::connect_stream(stream, target.id, key, &[status.version], status.clone())
            .await
            .ok()
    };
    tokio::time::timeout(Duration::from_secs(5), connect)
        .await
        .ok()?
}

/// One blob spammer's transactions: distinct txs (same blobs, other values) of one funded
/// sender, each with a well-formed sidecar whose proofs do not verify.
struct BlobSet {
    envs: Vec<Bytes>,
    /// Per tx, the `PooledTransactions` reply's list of that one tx, compressed once:
    /// every delivery of it is framed without compressing 786 KB again.
    replies: Vec<CompressedTail>,
    hashes: Vec<B256>,
    sizes: Vec<u32>,
    index: HashMap<B256, usize>,
}

/// Distinct blob txs per attacker; the attackers cycle through them, so most deliveries
/// repeat a (tx, sidecar) the node has seen fail.
const BLOB_TXS_PER_ATTACKER: usize = 16;
/// Blobs per tx: the most a tx may carry from Osaka on.
const BLOBS_PER_TX: usize = 6;

fn blob_sets(
    version: SidecarVersion,
    chain_id: u64,
    attackers: usize,
    keys: &[(Signer, u64)],
) -> Result<Vec<BlobSet>, String> {
    let blobs: Vec<_> = (0..BLOBS_PER_TX as u64)
        .map(|i| *moat_crypto::kzg::sample_blob(0xb10b + i))
        .collect();
    let mut bundle = BlobsBundle::build(version, blobs).map_err(|e| format!("blobs: {e}"))?;
    // Well-formed, but each blob gets another blob's proof(s): KZG fails.
    let per = version.proofs_per_blob();
    bundle.proofs.rotate_left(per);
    let hashes = bundle.versioned_hashes();
    let mut sets = Vec::with_capacity(attackers);
    for a in 0..attackers {
        let (signer, nonce) = &keys[a % keys.len()];
        let mut set = BlobSet {
            envs: Vec::new(),
            replies: Vec::new(),
            hashes: Vec::new(),
            sizes: Vec::new(),
            index: HashMap::new(),
        };
        for j in 0..BLOB_TXS_PER_ATTACKER {
            let tx = Transaction::Eip4844(Eip4844Tx {
                chain_id,
                nonce: *nonce,
                max_priority_fee_per_gas: TIP,
                max_fee_per_gas: FEE_CAP,
                gas_limit: 21_000,
                to: Address::repeat_byte(0x66),
                value: U256::from(1 + a * BLOB_TXS_PER_ATTACKER + j),
                input: Bytes::new(),
                access_list: vec![],
                max_fee_per_blob_gas: 1_000_000_000,
                blob_versioned_hashes: hashes.clone(),
            });
            let pooled =
                PooledTransaction::new(SignedTransaction::sign(tx, signer), Some(bundle.clone()));
            let env: Bytes = pooled.encoded_2718().into();
            set.index.insert(pooled.hash(), set.envs.len());
            set.hashes.push(pooled.hash());
            set.sizes.push(env.len() as u32);
            set.replies
                .push(Framing::pooled_transactions_tail(std::slice::from_ref(
                    &env,
                )));
            set.envs.push(env);
        }
        sets.push(set);
    }
    Ok(sets)
}

/// The node's head changes so far: (count, seconds of revalidation in all, accounts
/// read), from moat's metrics.
async fn head_changes(metrics: Option<SocketAddr>) -> Option<(f64, f64, f64)> {
    let m = metrics?;
    Some((
        scrape(m, "moat_pool_head_change_seconds_count").await?,
        scrape(m, "moat_pool_head_change_seconds_sum").await?,
        scrape(m, "moat_pool_head_change_accounts_total")
            .await
            .unwrap_or(0.0),
    ))
}

fn describe_head_changes(a: Option<(f64, f64, f64)>, b: Option<(f64, f64, f64)>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b.0 > a.0 => {
            let n = b.0 - a.0;
            format!(
                "; {n:.0} head changes, revalidation {:.2} ms each on average, {:.0} accounts read each",
                (b.1 - a.1) / n * 1e3,
                (b.2 - a.2) / n
            )
        }
        _ => String::new(),
    }
}

/// What the blob spammers got delivered.
#[derive(Default)]
struct BlobStats {
    deliveries: AtomicU64,
    unique: Mutex<HashSet<B256>>,
}

/// The value of a Prometheus counter (summed over its labels), `None` when unreachable.
async fn scrape(addr: SocketAddr, name: &str) -> Option<f64> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await
        .ok()?;
    let mut body = String::new();
    tokio::time::timeout(Duration::from_secs(2), s.read_to_string(&mut body))
        .await
        .ok()?
        .ok()?;
    let mut total = None;
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix(name)
            && (rest.starts_with(' ') || rest.starts_with('{'))
            && let Some(v) = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok())
        {
            *total.get_or_insert(0.0) += v;
        }
    }
    total
}

/// Pre-signed attack material, so signing costs nothing during the attack.
struct Material {
    fresh: Vec<Vec<Bytes>>,
    churn: Vec<Vec<Bytes>>,
    repeat: Bytes,
    rpc_bad: Vec<Bytes>,
    /// Per blob scenario, one set per attacker.
    blobs: HashMap<SidecarVersion, Vec<BlobSet>>,
    /// The invalidation storm: the funder's transfers (sent by RPC before the attack),
    /// and per attacker its senders' transactions.
    storm_funding: Vec<Bytes>,
    storm: Vec<Vec<Bytes>>,
}

/// The storm's transfers pay at most this per gas and 1 gwei of tip (below the honest
/// traffic's 2 gwei).
const STORM_FEE_CAP: u128 = 10_000_000_000;
const STORM_TIP: u128 = 1_000_000_000;
/// Transfers per storm sender; each sender is funded for two of them.
const STORM_TXS_PER_SENDER: u64 = 4;

/// The invalidation storm's material: `senders` fresh keys, each funded (by `funder` from
/// `nonce`) for exactly two of its four transfers, so that once a block includes the
/// first two the other two can never pay.
fn storm_material(
    chain_id: u64,
    funder: &Signer,
    nonce: u64,
    senders: usize,
    attackers: usize,
) -> (Vec<Bytes>, Vec<Vec<Bytes>>) {
    let keys: Vec<Signer> = (0..senders as u64)
        .map(|i| Signer::from_seed(0x5707_0000_0000 + i))
        .collect();
    let per_tx = 21_000 * STORM_FEE_CAP + 1;
    let funding = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let tx = Transaction::Eip1559(Eip1559Tx {
                chain_id,
                nonce: nonce + i as u64,
                max_priority_fee_per_gas: TIP,
                max_fee_per_gas: FEE_CAP,
                gas_limit: 21_000,
                to: TxKind::Call(k.address()),
                value: U256::from(2 * per_tx),
                input: Bytes::new(),
                access_list: vec![],
            });
            SignedTransaction::sign(tx, funder).encoded_2718().into()
        })
        .collect();
    let storm = std::thread::scope(|s| {
        let handles: Vec<_> = (0..attackers)
            .map(|a| {
                let keys = &keys;
                s.spawn(move || {
                    let mut out = Vec::new();
                    for k in keys.iter().skip(a).step_by(attackers) {
                        for n in 0..STORM_TXS_PER_SENDER {
                            out.push(transfer(chain_id, k, n, STORM_FEE_CAP, STORM_TIP));
                        }
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    (funding, storm)
}

/// Sends funding transfers (the storm's, the honest peer's senders') by RPC and waits
/// (up to 60 s) until a block has them all.
async fn fund_storm(addr: SocketAddr, funder: Address, funding: &[Bytes]) -> Result<(), String> {
    let mut rpc = Rpc::connect(addr).await.map_err(|e| e.to_string())?;
    let q = format!(r#"["{funder}","latest"]"#);
    let start = result_u64(
        &rpc.call("eth_getTransactionCount", &q)
            .await
            .map_err(|e| e.to_string())?,
    )
    .ok_or("eth_getTransactionCount failed")?;
    for raw in funding {
        let params = format!(r#"["0x{}"]"#, hex::encode(raw));
        rpc.call("eth_sendRawTransaction", &params)
            .await
            .map_err(|e| e.to_string())?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let v = rpc
            .call("eth_getTransactionCount", &q)
            .await
            .map_err(|e| e.to_string())?;
        if result_u64(&v).is_some_and(|n| n >= start + funding.len() as u64) {
            return Ok(());
        }
    }
    Err("the storm's funding was not mined within 60 s".into())
}

fn material(chain_id: u64, attackers: usize, per_attacker: usize) -> Material {
    let fresh: Vec<Vec<Bytes>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..attackers)
            .map(|a| {
                s.spawn(move || {
                    (0..per_attacker as u64)
                        .map(|i| {
                            let seed = 0xa77a_c000_0000 + ((a as u64) << 24) + i;
                            transfer(chain_id, &Signer::from_seed(seed), 0, FEE_CAP, TIP)
                        })
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let churn: Vec<Vec<Bytes>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..attackers)
            .map(|a| {
                s.spawn(move || {
                    (0..per_attacker as u64 / 2)
                        .map(|i| {
                            let seed = 0xc4c4_e000_0000 + ((a as u64) << 24) + i;
                            // Even: a new sender; odd: a stateless failure (other chain).
                            let chain = if i % 2 == 0 { chain_id } else { chain_id + 1 };
                            transfer(chain, &Signer::from_seed(seed), 0, FEE_CAP, TIP)
                        })
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let repeat = transfer(chain_id, &Signer::from_seed(0xbad), 0, FEE_CAP, TIP);
    // Underpriced (fee cap 1 wei) from fresh keys, and the same with a broken signature.
    let mut rpc_bad = Vec::new();
    for i in 0..4_000u64 {
        let mut tx = transfer(chain_id, &Signer::from_seed(0xcafe_0000 + i), 0, 1, 1).to_vec();
        if i % 2 == 1 {
            let n = tx.len();
            tx[n - 40] ^= 0xff; // inside s: the signature no longer recovers this sender
        }
        rpc_bad.push(tx.into());
    }
    Material {
        fresh,
        churn,
        repeat,
        rpc_bad,
        blobs: HashMap::new(),
        storm_funding: Vec::new(),
        storm: Vec::new(),
    }
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    // Two runtimes: the honest clients' (one thread, normal priority) and everyone
    // else's, whose workers (the attackers) run at `SCHED_IDLE`. The attackers stand for
    // remote machines: at normal priority their own CPU (RLPx encryption, handshakes,
    // the send loops) took the node's trusted threads' cores for up to 4 ms at a time on
    // this 2-core machine (perf sched timehist), and the table measured the tool. At
    // nice 19 they still did in row 4: each 786 KB blob reply (compression, encryption,
    // MAC) is 1-4 ms of CPU in one piece, and a waking node thread waited behind it for
    // the scheduler tick (~520 waits >= 1 ms per 10 s attack, 2026-11-23 18:56 UTC).
    // At `SCHED_IDLE` they share what is left with the node's own `SCHED_IDLE` lane.
    let honest = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("honest")
        .enable_all()
        .build();
    let attackers = tokio::runtime::Builder::new_multi_thread()
        .thread_name("attackers")
        .on_thread_start(lower_attacker)
        .enable_all()
        .build();
    let result = match (honest, attackers) {
        (Ok(honest), Ok(attackers)) => {
            let r = attackers.block_on(run(args, honest.handle().clone()));
            honest.shutdown_background();
            attackers.shutdown_background();
            r
        }
        (Err(e), _) | (_, Err(e)) => Err(format!("runtime: {e}")),
    };
    match result {
        Ok(ok) => {
            if ok {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::from(2)
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Gives the core to any thread waiting for it (`sched_yield`): an attacker calls it
/// before each message or call. At nice 19 a busy attacker thread that the kernel does
/// not preempt when a node thread wakes on its core (the wakee waits for the next
/// scheduler tick, up to 4 ms at `HZ=250`) held the node's runtime workers off their
/// core for 2.7-3.9 ms at the start of row 2's attack (perf sched traces, 17:50 UTC
/// 2026-11-23): that was the tool's CPU, standing for remote machines, counted as the
/// node's latency. With nothing else runnable it returns at once.
fn yield_core() {
    // SAFETY: a plain syscall with no arguments about the calling thread.
    unsafe {
        libc::sched_yield();
    }
}

/// Lowers the calling thread (the attackers' runtime workers) to nice 19 and then to
/// `SCHED_IDLE`, unless `ATTACKERS_NICE19=1` (the policy before 2026-11-23 19:05 UTC).
/// A waking thread preempts a `SCHED_IDLE` one more readily than a nice-19 one: row 4's
/// 786 KB replies keep an attacker on its core for 1-4 ms at a time, which no yield
/// between messages splits.
fn lower_attacker() {
    // SAFETY: gettid takes no arguments; setpriority on a tid sets that thread's nice
    // value; sched_setscheduler(0, ..) sets the calling thread's policy from a valid
    // param. Failure leaves the thread as it was.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 19);
        if std::env::var_os("ATTACKERS_NICE19").is_none_or(|v| v != "1") {
            let param = libc::sched_param { sched_priority: 0 };
            libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
        }
    }
}

async fn run(args: Args, hrt: tokio::runtime::Handle) -> Result<bool, String> {
    if let (Some(fcu), Some(engine), Some(secret)) = (&args.fcu, args.engine, &args.jwt_secret) {
        let body = std::fs::read_to_string(fcu).map_err(|e| format!("{}: {e}", fcu.display()))?;
        let secret =
            std::fs::read_to_string(secret).map_err(|e| format!("{}: {e}", secret.display()))?;
        engine_call(engine, &secret, &body).await?;
        eprintln!("forkchoice updated from {}", fcu.display());
    }
    let mut rpc = Rpc::connect(args.rpc)
        .await
        .map_err(|e| format!("rpc {}: {e}", args.rpc))?;
    let chain_id = rpc
        .call("eth_chainId", "[]")
        .await
        .ok()
        .and_then(|v| result_u64(&v))
        .ok_or("eth_chainId failed")?;
    let peer_signer = signer(&args.peer_key)?;
    let rpc_signer = signer(&args.rpc_key)?;
    let mut nonces = [0u64; 2];
    for (i, a) in [peer_signer.address(), rpc_signer.address()]
        .iter()
        .enumerate()
    {
        let v = rpc
            .call("eth_getTransactionCount", &format!(r#"["{a}","pending"]"#))
            .await
            .map_err(|e| e.to_string())?;
        nonces[i] = result_u64(&v).ok_or("eth_getTransactionCount failed")?;
    }
    let scenarios: Vec<Scenario> = args
        .scenarios
        .iter()
        .copied()
        .filter(|s| args.target.is_some() || !s.gossip())
        .collect();
    eprintln!("signing attack transactions…");
    let mut mat = material(chain_id, args.attackers, 20_000);
    let blob_versions: Vec<SidecarVersion> =
        scenarios.iter().filter_map(|s| s.blob_version()).collect();
    if !blob_versions.is_empty() && !args.blob_keys.is_empty() {
        let mut keys = Vec::new();
        for k in &args.blob_keys {
            let signer = signer(k)?;
            let v = rpc
                .call(
                    "eth_getTransactionCount",
                    &format!(r#"["{}","pending"]"#, signer.address()),
                )
                .await
                .map_err(|e| e.to_string())?;
            let nonce = result_u64(&v).ok_or("eth_getTransactionCount failed")?;
            keys.push((signer, nonce));
        }
        for v in blob_versions {
            eprintln!("building blob txs ({v:?} sidecars)…");
            mat.blobs
                .insert(v, blob_sets(v, chain_id, args.attackers, &keys)?);
        }
    }
    let mut storm_funder = None;
    if let Some(k) = &args.storm_key
        && scenarios.contains(&Scenario::Invalidation)
    {
        let funder = signer(k)?;
        let v = rpc
            .call(
                "eth_getTransactionCount",
                &format!(r#"["{}","pending"]"#, funder.address()),
            )
            .await
            .map_err(|e| e.to_string())?;
        let nonce = result_u64(&v).ok_or("eth_getTransactionCount failed")?;
        eprintln!(
            "signing the invalidation storm ({} senders)…",
            args.storm_senders
        );
        let (funding, storm) =
            storm_material(chain_id, &funder, nonce, args.storm_senders, args.attackers);
        mat.storm_funding = funding;
        mat.storm = storm;
        storm_funder = Some(funder.address());
    }
    let scenarios: Vec<Scenario> = scenarios
        .into_iter()
        .filter(|s| s.blob_version().is_none_or(|v| mat.blobs.contains_key(&v)))
        .filter(|s| *s != Scenario::Invalidation || storm_funder.is_some())
        .collect();
    let mat = Arc::new(mat);

    // The honest peer's senders: its own key, or fresh keys it funds first.
    let mut peer_senders = vec![(peer_signer.clone(), nonces[0])];
    if args.peer_senders > 1 && args.target.is_some() {
        let keys: Vec<Signer> = (0..args.peer_senders as u64)
            .map(|i| Signer::from_seed(0x4011_e570_0000 + i))
            .collect();
        // Each for 2,000 transfers at the most they may pay.
        let value = U256::from(2_000 * (21_000 * FEE_CAP + 1));
        let funding: Vec<Bytes> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let tx = Transaction::Eip1559(Eip1559Tx {
                    chain_id,
                    nonce: nonces[0] + i as u64,
                    max_priority_fee_per_gas: TIP,
                    max_fee_per_gas: FEE_CAP,
                    gas_limit: 21_000,
                    to: TxKind::Call(k.address()),
                    value,
                    input: Bytes::new(),
                    access_list: vec![],
                });
                SignedTransaction::sign(tx, &peer_signer)
                    .encoded_2718()
                    .into()
            })
            .collect();
        eprintln!("funding {} honest peer senders…", keys.len());
        fund_storm(args.rpc, peer_signer.address(), &funding).await?;
        peer_senders = keys.into_iter().map(|k| (k, 0)).collect();
    }

    let stop = Arc::new(AtomicBool::new(false));
    let honest = Arc::new(Honest::default());
    let mut tasks = Vec::new();
    // The honest clients (RPC client, peer, observer) run on their own runtime (`hrt`),
    // their sockets registered with its driver: on the attackers' runtime an honest send
    // or receipt waited behind attacker tasks for milliseconds, and that wait was counted
    // as the node's latency.

    // Honest RPC client.
    {
        let (stop, honest, addr) = (stop.clone(), honest.clone(), args.rpc);
        let (rate, mut nonce) = (args.rpc_rate.max(1), nonces[1]);
        tasks.push(hrt.spawn(async move {
            let Ok(mut rpc) = Rpc::connect(addr).await else {
                return;
            };
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let raw = transfer(chain_id, &rpc_signer, nonce, FEE_CAP, TIP);
                let params = format!(r#"["0x{}"]"#, hex::encode(&raw));
                let t0 = Instant::now();
                match rpc.call("eth_sendRawTransaction", &params).await {
                    Ok(v) if v.get("result").is_some() => {
                        honest.rpc_done.lock().push((Instant::now(), t0.elapsed()));
                        nonce += 1;
                    }
                    Ok(_) => {}
                    Err(_) => match Rpc::connect(addr).await {
                        Ok(r) => rpc = r,
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    },
                }
            }
        }));
    }
    // Honest peer and observer.
    let status = match (&args.target, &args.network) {
        (Some(_), Some(path)) => {
            let g = moat_common::config::Genesis::from_file(path).map_err(|e| e.to_string())?;
            let hash = g.header().hash();
            Some(Status {
                version: 69,
                network_id: g.config.chain_id,
                genesis: hash,
                fork_id: g.config.fork_id(hash, g.timestamp, 0, g.timestamp),
                total_difficulty: g.difficulty,
                head: hash,
                earliest: 0,
                latest: 0,
            })
        }
        (Some(t), None) => Some(node_status(t).await?),
        (None, _) => None,
    };
    if let (Some(target), Some(status)) = (&args.target, &status) {
        let connect = |seed: u64| {
            let (target, status) = (target.clone(), status.clone());
            hrt.spawn(async move { connect_from(&target, seed, &status, None).await })
        };
        let mut observer = connect(0x0b5e)
            .await
            .ok()
            .flatten()
            .ok_or("observer could not connect")?;
        let mut peer = connect(0x0401_1e57)
            .await
            .ok()
            .flatten()
            .ok_or("honest peer could not connect")?;
        let (stop2, honest2) = (stop.clone(), honest.clone());
        tasks.push(hrt.spawn(async move {
            while !stop2.load(Ordering::Relaxed) {
                let hashes: Vec<B256> = match observer.recv(Duration::from_millis(200)).await {
                    Ok(Some(Incoming::Eth(EthMessage::NewPooledTransactionHashes(a)))) => a.hashes,
                    Ok(Some(Incoming::Eth(EthMessage::Transactions(txs)))) => txs
                        .iter()
                        .filter_map(|t| PooledTransaction::hash_of_envelope(t))
                        .collect(),
                    Ok(_) => continue,
                    Err(_) => break,
                };
                let now = Instant::now();
                let mut sent = honest2.sent.lock();
                let mut done = honest2.peer_done.lock();
                for h in hashes {
                    if let Some(t) = sent.remove(&h) {
                        done.push((now, now - t));
                    }
                }
            }
        }));
        let (stop3, honest3) = (stop.clone(), honest.clone());
        let per_tick = (args.peer_rate / 50).max(1);
        let mut senders = peer_senders;
        let mut turn = 0;
        tasks.push(hrt.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(20));
            while !stop3.load(Ordering::Relaxed) {
                tick.tick().await;
                let txs: Vec<Bytes> = (0..per_tick)
                    .map(|_| {
                        let n = senders.len();
                        let (key, nonce) = &mut senders[turn % n];
                        turn += 1;
                        *nonce += 1;
                        transfer(chain_id, key, *nonce - 1, FEE_CAP, TIP)
                    })
                    .collect();
                let now = Instant::now();
                {
                    let mut sent = honest3.sent.lock();
                    for t in &txs {
                        if let Some(h) = PooledTransaction::hash_of_envelope(t) {
                            sent.insert(h, now);
                        }
                    }
                }
                if peer.send(&EthMessage::Transactions(txs)).await.is_err() {
                    eprintln!("honest peer dropped");
                    break;
                }
            }
        }));
    }

    let phase = Duration::from_secs(args.seconds);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let pid = args.pid;
    // Reference: honest traffic alone (after a second of warm-up).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let hc0 = head_changes(args.metrics).await;
    let (r0, c0) = (Instant::now(), cpu_seconds(pid));
    tokio::time::sleep(phase).await;
    let (r1, c1) = (Instant::now(), cpu_seconds(pid));
    let hc1 = head_changes(args.metrics).await;
    let secs = |a: Instant, b: Instant| (b - a).as_secs_f64();
    let base_peer = window(&honest.peer_done, r0, r1).len() as f64 / secs(r0, r1);
    let base_rpc = window(&honest.rpc_done, r0, r1).len() as f64 / secs(r0, r1);
    let base_cpu = (c1 - c0) / secs(r0, r1);
    slowest(&honest, r0, r1);
    // The reference latencies: what the machine gives honest traffic with no attack.
    let (mut bpl, mut brl) = (
        window(&honest.peer_done, r0, r1),
        window(&honest.rpc_done, r0, r1),
    );
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "\n{}: honest alone: peer {base_peer:.0} tx/s (p50 / p99 {:.2} / {:.2} ms), RPC {base_rpc:.0} tx/s ({:.2} / {:.2} ms), node CPU {:.0} %{}\n",
        args.label,
        ms(percentile(&mut bpl, 0.5)),
        ms(percentile(&mut bpl, 0.99)),
        ms(percentile(&mut brl, 0.5)),
        ms(percentile(&mut brl, 0.99)),
        base_cpu * 100.0,
        describe_head_changes(hc0, hc1),
    );
    println!(
        "| scenario | honest peer tx/s (vs alone) | honest RPC tx/s (vs alone) | peer p50 / p99 | RPC p50 / p99 | attackers' CPU (of machine) | recovery | ok |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|");
    let mut all_ok = true;
    for s in scenarios {
        let attack_stop = Arc::new(AtomicBool::new(false));
        let reconnects = Arc::new(AtomicU64::new(0));
        let blob_stats = Arc::new(BlobStats::default());
        if s == Scenario::Invalidation
            && let Some(funder) = storm_funder
        {
            eprintln!("funding {} storm senders…", mat.storm_funding.len());
            fund_storm(args.rpc, funder, &mat.storm_funding).await?;
            // Let the blocks that carried the funding pass.
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        let storm_hc0 = head_changes(args.metrics).await;
        let kzg_name = "moat_pool_kzg_verifications_total";
        let repeat_name = "moat_pool_kzg_repeats_refused_total";
        let kzg_before = match args.metrics {
            Some(m) if s.blob_version().is_some() => {
                (scrape(m, kzg_name).await, scrape(m, repeat_name).await)
            }
            _ => (None, None),
        };
        let mut attackers = Vec::new();
        for a in 0..args.attackers {
            let ctx = AttackCtx {
                s,
                index: a,
                target: args.target.clone(),
                status: status.clone(),
                rpc_addr: args.rpc,
                local: (!args.same_ip).then(|| Ipv4Addr::new(127, 0, 0, 10 + a as u8)),
                mat: mat.clone(),
                stop: attack_stop.clone(),
                reconnects: reconnects.clone(),
                blob_stats: blob_stats.clone(),
            };
            attackers.push(tokio::spawn(attack(ctx)));
        }
        let (a0, ca0) = (Instant::now(), cpu_seconds(pid));
        tokio::time::sleep(phase).await;
        let (a1, ca1) = (Instant::now(), cpu_seconds(pid));
        attack_stop.store(true, Ordering::Relaxed);
        // An attacker blocked on a node that stopped reading it is cut off.
        tokio::time::sleep(Duration::from_millis(200)).await;
        for t in &attackers {
            t.abort();
        }
        for t in attackers {
            let _ = t.await;
        }
        let stopped = Instant::now();
        // Recovery: the first half second whose honest throughput is ≥ 90 % of alone.
        let mut recovered = None;
        let mut from = stopped;
        while from - stopped < Duration::from_secs(15) {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let to = Instant::now();
            let rate = |d: &Mutex<Vec<(Instant, Duration)>>| {
                window(d, from, to).len() as f64 / secs(from, to)
            };
            let peer_ok = base_peer == 0.0 || rate(&honest.peer_done) >= 0.9 * base_peer;
            let rpc_ok = base_rpc == 0.0 || rate(&honest.rpc_done) >= 0.9 * base_rpc;
            if peer_ok && rpc_ok {
                recovered = Some(to - stopped);
                break;
            }
            from = to;
        }
        slowest(&honest, a0, a1);
        let mut pl = window(&honest.peer_done, a0, a1);
        let mut rl = window(&honest.rpc_done, a0, a1);
        let peer_rate = pl.len() as f64 / secs(a0, a1);
        let rpc_rate = rl.len() as f64 / secs(a0, a1);
        let cpu = (ca1 - ca0) / secs(a0, a1);
        // The attack's extra node CPU, as a share of the machine (what budgets divide).
        let share = ((cpu - base_cpu) / cores).max(0.0);
        let (pp50, pp99) = (percentile(&mut pl, 0.5), percentile(&mut pl, 0.99));
        let (rp50, rp99) = (percentile(&mut rl, 0.5), percentile(&mut rl, 0.99));
        let frac = |r: f64, b: f64| if b > 0.0 { r / b } else { 1.0 };
        let thr_ok = (base_peer == 0.0 || frac(peer_rate, base_peer) >= 0.5)
            && frac(rpc_rate, base_rpc) >= 0.5;
        let p99_ok = (base_peer == 0.0 || pp99 <= Duration::from_millis(2))
            && rp99 <= Duration::from_millis(2);
        let rec_ok = recovered.is_some_and(|r| r <= Duration::from_secs(5));
        let share_ok = share <= args.budget_share + 0.05;
        let ok = thr_ok && p99_ok && rec_ok && share_ok;
        all_ok &= ok;
        let peer_cols = if base_peer > 0.0 {
            (
                format!(
                    "{peer_rate:.0} ({:.0} %)",
                    100.0 * frac(peer_rate, base_peer)
                ),
                format!("{:.2} / {:.2} ms", ms(pp50), ms(pp99)),
            )
        } else {
            ("–".to_string(), "–".to_string())
        };
        let mut why = Vec::new();
        if !thr_ok {
            why.push("throughput");
        }
        if !p99_ok {
            why.push("p99");
        }
        if !rec_ok {
            why.push("recovery");
        }
        if !share_ok {
            why.push("CPU share");
        }
        println!(
            "| {} | {} | {rpc_rate:.0} ({:.0} %) | {} | {:.2} / {:.2} ms | {:.0} % | {} | {} |",
            s.name(),
            peer_cols.0,
            100.0 * frac(rpc_rate, base_rpc),
            peer_cols.1,
            ms(rp50),
            ms(rp99),
            share * 100.0,
            recovered.map_or("> 15 s".to_string(), |r| format!(
                "{:.1} s",
                r.as_secs_f64()
            )),
            if ok {
                "ok".to_string()
            } else {
                format!("NO ({})", why.join(", "))
            },
        );
        eprintln!(
            "  ({}: attackers reconnected {} times)",
            s.name(),
            reconnects.load(Ordering::Relaxed)
        );
        if s == Scenario::Invalidation {
            eprintln!(
                "  ({}: {} txs gossiped from {} senders{})",
                s.name(),
                mat.storm.iter().map(Vec::len).sum::<usize>(),
                args.storm_senders,
                describe_head_changes(storm_hc0, head_changes(args.metrics).await),
            );
        }
        if s.blob_version().is_some() {
            let after = match args.metrics {
                Some(m) => (scrape(m, kzg_name).await, scrape(m, repeat_name).await),
                None => (None, None),
            };
            let diff = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) => format!("{:.0}", b - a),
                _ => "?".to_string(),
            };
            eprintln!(
                "  ({}: {} deliveries of {} unique blob txs; node KZG checks {}, repeats refused without KZG {})",
                s.name(),
                blob_stats.deliveries.load(Ordering::Relaxed),
                blob_stats.unique.lock().len(),
                diff(kzg_before.0, after.0),
                diff(kzg_before.1, after.1),
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
    }
    Ok(all_ok)
}

/// What one attacker needs.
struct AttackCtx {
    s: Scenario,
    index: usize,
    target: Option<Enode>,
    status: Option<Status>,
    rpc_addr: SocketAddr,
    /// The local address every identity of this attacker connects from.
    local: Option<Ipv4Addr>,
    mat: Arc<Material>,
    stop: Arc<AtomicBool>,
    reconnects: Arc<AtomicU64>,
    blob_stats: Arc<BlobStats>,
}

/// Announces one blob tx and answers the node's requests for it until the node goes
/// quiet (`true`) or drops the connection (`false`).
async fn blob_round(c: &mut Client, set: &BlobSet, i: usize, stats: &BlobStats) -> bool {
    let ann = Announcement {
        types: vec![3],
        sizes: vec![set.sizes[i]],
        hashes: vec![set.hashes[i]],
    };
    if c.send(&EthMessage::NewPooledTransactionHashes(ann))
        .await
        .is_err()
    {
        return false;
    }
    loop {
        match c.recv(Duration::from_millis(500)).await {
            Ok(Some(Incoming::Eth(EthMessage::GetPooledTransactions { request_id, hashes }))) => {
                let txs: Vec<Bytes> = hashes
                    .iter()
                    .filter_map(|h| set.index.get(h))
                    .map(|&k| set.envs[k].clone())
                    .collect();
                stats
                    .deliveries
                    .fetch_add(txs.len() as u64, Ordering::Relaxed);
                {
                    let mut u = stats.unique.lock();
                    for h in &hashes {
                        if set.index.contains_key(h) {
                            u.insert(*h);
                        }
                    }
                }
                // The usual ask (one hash, the one announced) gets its reply framed
                // from the compressed tail; anything else is encoded afresh.
                let sent = match hashes.as_slice() {
                    [h] if let Some(&k) = set.index.get(h) => {
                        let frame = c.framing().pooled_transactions(request_id, &set.replies[k]);
                        c.send_framed(&frame).await
                    }
                    _ => {
                        c.send(&EthMessage::PooledTransactions { request_id, txs })
                            .await
                    }
                };
                if sent.is_err() {
                    return false;
                }
            }
            Ok(Some(Incoming::Disconnect(_))) | Err(_) => return false,
            Ok(None) => return true,
            Ok(Some(_)) => {}
        }
    }
}

/// One attacker's loop until `stop`: connect (again, with a new key, when dropped) and
/// send the scenario's messages as fast as the node takes them.
async fn attack(ctx: AttackCtx) {
    let AttackCtx {
        s,
        index,
        target,
        status,
        rpc_addr,
        local,
        mat,
        stop,
        reconnects,
        blob_stats,
    } = ctx;
    if s == Scenario::RpcFlood {
        let Ok(mut rpc) = Rpc::connect(rpc_addr).await else {
            return;
        };
        let mut i = index;
        while !stop.load(Ordering::Relaxed) {
            yield_core();
            let raw = &mat.rpc_bad[i % mat.rpc_bad.len()];
            i += 4;
            let params = format!(r#"["0x{}"]"#, hex::encode(raw));
            if rpc.call("eth_sendRawTransaction", &params).await.is_err() {
                match Rpc::connect(rpc_addr).await {
                    Ok(r) => rpc = r,
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        }
        return;
    }
    let (Some(target), Some(status)) = (target, status) else {
        return;
    };
    let mut seed = 0x5eed_0000_0000 + ((index as u64) << 20);
    let mut client = None;
    let mut next_fresh = 0usize;
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        yield_core();
        let c = match client.as_mut() {
            Some(c) => c,
            None => {
                seed += 1;
                // Blob spammers come back from a new subnet each time, as a botnet would
                // (a node shuts out a /24 whose peer wasted its CPU): identity k of
                // attacker i binds 127.(1+i).(1 + k mod 250).1.
                let local = match (local, s.blob_version()) {
                    (Some(_), Some(_)) => {
                        let k = (seed & 0xf_ffff) as usize;
                        Some(Ipv4Addr::new(
                            127,
                            (1 + index % 250) as u8,
                            (1 + k % 250) as u8,
                            1,
                        ))
                    }
                    _ => local,
                };
                match connect_from(&target, seed, &status, local).await {
                    Some(mut c) => {
                        // A large frame is encrypted and MACed in 64 KB steps, with the
                        // core given away between them.
                        c.set_pause(yield_core);
                        client.insert(c)
                    }
                    None => {
                        reconnects.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
            }
        };
        if s == Scenario::Invalidation {
            // Each sender's transfers once, 128 a message, then nothing.
            let all = mat.storm.get(index).map_or(&[][..], Vec::as_slice);
            if next_fresh >= all.len() {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            let to = (next_fresh + 128).min(all.len());
            let msg = EthMessage::Transactions(all[next_fresh..to].to_vec());
            if c.send(&msg).await.is_err() {
                client = None;
                reconnects.fetch_add(1, Ordering::Relaxed);
            } else {
                next_fresh = to;
            }
            continue;
        }
        if let Some(v) = s.blob_version() {
            let Some(set) = mat.blobs.get(&v).and_then(|sets| sets.get(index)) else {
                return;
            };
            let i = next_fresh % set.envs.len().max(1);
            next_fresh += 1;
            if !blob_round(c, set, i, &blob_stats).await {
                client = None;
                reconnects.fetch_add(1, Ordering::Relaxed);
            }
            continue;
        }
        let msg = match s {
            Scenario::FreshKeys | Scenario::CacheChurn => {
                let all = if s == Scenario::FreshKeys {
                    &mat.fresh[index]
                } else {
                    &mat.churn[index]
                };
                let from = next_fresh % all.len().max(1);
                next_fresh += 128;
                EthMessage::Transactions(all[from..(from + 128).min(all.len())].to_vec())
            }
            Scenario::Repeat => EthMessage::Transactions(vec![mat.repeat.clone()]),
            Scenario::Announce => {
                round += 1;
                let hashes: Vec<B256> = (0..4096u64)
                    .map(|i| {
                        alloy_primitives::keccak256(
                            [seed.to_be_bytes(), round.to_be_bytes(), i.to_be_bytes()].concat(),
                        )
                    })
                    .collect();
                EthMessage::NewPooledTransactionHashes(Announcement {
                    types: vec![2; hashes.len()],
                    sizes: vec![110; hashes.len()],
                    hashes,
                })
            }
            Scenario::RpcFlood | Scenario::BlobV0 | Scenario::BlobV1 | Scenario::Invalidation => {
                return;
            }
        };
        // No timeout: a node that stops reading this peer makes it wait, as it should
        // (a send cut half-way would break the stream). Nothing is read: a dropped
        // connection shows as a failed send.
        if c.send(&msg).await.is_err() {
            client = None;
            reconnects.fetch_add(1, Ordering::Relaxed);
        }
    }
}
