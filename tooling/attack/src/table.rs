//! moat-attack-table: attack scenarios against a running node while honest traffic flows,
//! and what the honest traffic got (`make attack-table`).
//!
//! Honest traffic, all the time:
//! - one peer gossiping valid transfers of a funded key (`Transactions`, every 20 ms);
//!   a second, silent peer (the observer) times each one from its send until the node
//!   gossips it on, i.e. until it is pending;
//! - one RPC client sending valid transfers of another funded key with
//!   `eth_sendRawTransaction`, one at a time; its latency is the call's (the node answers
//!   once the tx is pooled).
//!
//! Phases: honest traffic alone (the reference), then for each scenario the attack beside
//! it, then the attack stopped until honest throughput is back to ≥ 90 % of the reference.
//! Attacking peers have fresh keys and connect again with a new key when dropped; all
//! connect from 127.0.0.1 (one /24, so a new identity inherits the last one's history).
//!
//! Scenarios (numbers of the issue's list):
//! - `fresh-keys` (1): many new EOAs, unfunded, 128 txs a message;
//! - `cache-churn` (2): distinct txs, half from fresh unfunded keys (each a new sender
//!   cache entry), half for another chain id (each a new recent-failure entry);
//! - `repeat` (3): one unfunded tx again and again, one copy a message;
//! - `rpc-flood` (7): four RPC connections sending invalid (bad signature) and
//!   underpriced txs as fast as answers come;
//! - `announce` (6): 4,096 hashes a message announced and never delivered.
//!
//! Without `--target` only the RPC forms run (honest RPC, `rpc-flood`): go-ethereum's dev
//! mode has no p2p.
//!
//! The attackers' CPU share is the node's extra CPU during the attack (`/proc/<pid>/stat`,
//! over the reference phase) as a share of the machine's cores, against `--budget-share`
//! (what the node's budgets allow all attackers: moat's peers budget is half the machine).

use alloy_primitives::{Address, B256, Bytes, TxKind, U256, hex};
use clap::{Parser, ValueEnum};
use moat_common::transaction::{Eip1559Tx, PooledTransaction, SignedTransaction, Transaction};
use moat_crypto::secp::Signer;
use moat_p2p::Enode;
use moat_p2p::client::Client;
use moat_p2p::eth::{Announcement, EthMessage, Status};
use moat_p2p::session::Incoming;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::SocketAddr;
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
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::FreshKeys => "1 fresh-key flood",
            Scenario::CacheChurn => "2 cache exhaustion",
            Scenario::Repeat => "3 repeated failures",
            Scenario::RpcFlood => "7 RPC flood",
            Scenario::Announce => "6 announcement flood",
        }
    }

    fn gossip(self) -> bool {
        match self {
            Scenario::FreshKeys | Scenario::CacheChurn | Scenario::Repeat | Scenario::Announce => {
                true
            }
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

/// Connects with the key made from `seed`. Every connection comes from 127.0.0.1 (one
/// /24): the RLPx client does not choose its local address yet.
async fn connect_from(target: &Enode, seed: u64, status: &Status) -> Option<Client> {
    let mut k = [0u8; 32];
    k[..8].copy_from_slice(&seed.to_be_bytes());
    k[31] = 7;
    let key = secp256k1::SecretKey::from_byte_array(k).ok()?;
    tokio::time::timeout(
        Duration::from_secs(5),
        Client::connect(target, key, &[status.version], status.clone()),
    )
    .await
    .ok()?
    .ok()
}

/// Pre-signed attack material, so signing costs nothing during the attack.
struct Material {
    fresh: Vec<Vec<Bytes>>,
    churn: Vec<Vec<Bytes>>,
    repeat: Bytes,
    rpc_bad: Vec<Bytes>,
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
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run(Args::parse()).await {
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

async fn run(args: Args) -> Result<bool, String> {
    let mut rpc = Rpc::connect(args.rpc)
        .await
        .map_err(|e| format!("rpc {}: {e}", args.rpc))?;
    let chain_id = rpc
        .call("eth_chainId", "[]")
        .await
        .ok()
        .and_then(|v| v["result"].as_str().map(str::to_string))
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .ok_or("eth_chainId failed")?;
    let peer_signer = signer(&args.peer_key)?;
    let rpc_signer = signer(&args.rpc_key)?;
    let nonce_of = |v: serde_json::Value| {
        v["result"]
            .as_str()
            .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
    };
    let mut nonces = [0u64; 2];
    for (i, a) in [peer_signer.address(), rpc_signer.address()]
        .iter()
        .enumerate()
    {
        let v = rpc
            .call("eth_getTransactionCount", &format!(r#"["{a}","pending"]"#))
            .await
            .map_err(|e| e.to_string())?;
        nonces[i] = nonce_of(v).ok_or("eth_getTransactionCount failed")?;
    }
    let scenarios: Vec<Scenario> = args
        .scenarios
        .iter()
        .copied()
        .filter(|s| args.target.is_some() || !s.gossip())
        .collect();
    eprintln!("signing attack transactions…");
    let mat = Arc::new(material(chain_id, args.attackers, 20_000));

    let stop = Arc::new(AtomicBool::new(false));
    let honest = Arc::new(Honest::default());
    let mut tasks = Vec::new();

    // Honest RPC client.
    {
        let (stop, honest, addr) = (stop.clone(), honest.clone(), args.rpc);
        let (rate, mut nonce) = (args.rpc_rate.max(1), nonces[1]);
        tasks.push(tokio::spawn(async move {
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
    let status = match &args.target {
        Some(t) => Some(node_status(t).await?),
        None => None,
    };
    if let (Some(target), Some(status)) = (&args.target, &status) {
        let mut observer = connect_from(target, 0x0b5e, status)
            .await
            .ok_or("observer could not connect")?;
        let mut peer = connect_from(target, 0x0401_1e57, status)
            .await
            .ok_or("honest peer could not connect")?;
        let (stop2, honest2) = (stop.clone(), honest.clone());
        tasks.push(tokio::spawn(async move {
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
        let mut nonce = nonces[0];
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(20));
            while !stop3.load(Ordering::Relaxed) {
                tick.tick().await;
                let txs: Vec<Bytes> = (0..per_tick)
                    .map(|i| transfer(chain_id, &peer_signer, nonce + i, FEE_CAP, TIP))
                    .collect();
                nonce += per_tick;
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
    let (r0, c0) = (Instant::now(), cpu_seconds(pid));
    tokio::time::sleep(phase).await;
    let (r1, c1) = (Instant::now(), cpu_seconds(pid));
    let secs = |a: Instant, b: Instant| (b - a).as_secs_f64();
    let base_peer = window(&honest.peer_done, r0, r1).len() as f64 / secs(r0, r1);
    let base_rpc = window(&honest.rpc_done, r0, r1).len() as f64 / secs(r0, r1);
    let base_cpu = (c1 - c0) / secs(r0, r1);
    println!(
        "\n{}: honest alone: peer {base_peer:.0} tx/s, RPC {base_rpc:.0} tx/s, node CPU {:.0} %\n",
        args.label,
        base_cpu * 100.0
    );
    println!(
        "| scenario | honest peer tx/s (vs alone) | honest RPC tx/s (vs alone) | peer p50 / p99 | RPC p50 / p99 | attackers' CPU (of machine) | recovery | ok |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|");
    let mut all_ok = true;
    for s in scenarios {
        let attack_stop = Arc::new(AtomicBool::new(false));
        let reconnects = Arc::new(AtomicU64::new(0));
        let mut attackers = Vec::new();
        for a in 0..args.attackers {
            let (stop, mat, reconnects) = (attack_stop.clone(), mat.clone(), reconnects.clone());
            let (target, status, addr) = (args.target.clone(), status.clone(), args.rpc);
            attackers.push(tokio::spawn(async move {
                attack(s, a, target, status, addr, mat, stop, reconnects).await
            }));
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
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
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
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
    }
    Ok(all_ok)
}

/// One attacker's loop until `stop`: connect (again, with a new key, when dropped) and
/// send the scenario's messages as fast as the node takes them.
#[allow(clippy::too_many_arguments)]
async fn attack(
    s: Scenario,
    index: usize,
    target: Option<Enode>,
    status: Option<Status>,
    rpc_addr: SocketAddr,
    mat: Arc<Material>,
    stop: Arc<AtomicBool>,
    reconnects: Arc<AtomicU64>,
) {
    if s == Scenario::RpcFlood {
        let Ok(mut rpc) = Rpc::connect(rpc_addr).await else {
            return;
        };
        let mut i = index;
        while !stop.load(Ordering::Relaxed) {
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
        let c = match client.as_mut() {
            Some(c) => c,
            None => {
                seed += 1;
                match connect_from(&target, seed, &status).await {
                    Some(c) => client.insert(c),
                    None => {
                        reconnects.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
            }
        };
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
            Scenario::RpcFlood => return,
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
