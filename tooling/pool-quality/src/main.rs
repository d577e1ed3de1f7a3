//! `moat-pool-quality`: feed a seeded stream of transactions to a pool, build a block from
//! it, and compare the block's value with the most valuable block the stream allowed.
//!
//! ```sh
//! moat-pool-quality --seeds 1,2,3,4,5                 # in process, moat's pool
//! moat-pool-quality --blobs --seeds 1,2,3,4,5         # blob streams on an Osaka genesis
//! moat-pool-quality --write-genesis g.json [--blobs]  # a genesis for an external node
//! moat-pool-quality --seeds 2 --rpc 127.0.0.1:8545 --engine 127.0.0.1:8551 --jwtsecret jwt.hex \
//!     [--enode enode://…@127.0.0.1:30303]
//! ```
//!
//! Against an external node (moat, geth or reth started on the written genesis, fresh datadir),
//! the local part of the stream goes over `eth_sendRawTransaction`; with `--enode` the
//! remote part goes over RLPx/eth from [`PEERS`] peer identities (plain txs in
//! `Transactions` messages, blob txs announced and served on request, as the protocol
//! wants), else over RPC too. Then one payload is built through the engine API
//! (forkchoiceUpdatedV3 with attributes, getPayloadV4, or V5 on Osaka). Per class the
//! tool prints what was sent, the RPC answers, and what the pool holds at the end
//! (`eth_getTransactionByHash`). Talks only to 127.0.0.0/8.

use alloy_primitives::{B256, Bytes, U256};
use clap::Parser;
use moat_common::config::Genesis;
use moat_p2p::Enode;
use moat_p2p::client::Client;
use moat_p2p::eth::{Announcement, EthMessage, Status};
use moat_p2p::session::Incoming;
use moat_pool_quality::{
    BlobCache, BlockLimits, Class, Outcome, PEERS, StreamParams, StreamTx, blob_stream,
    blob_stream_estimate, genesis, ideal_block, ideal_value, osaka_genesis, peer_of,
    run_in_process, senders, stream,
};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    name = "moat-pool-quality",
    about = "Block value from a pool against the ideal"
)]
struct Args {
    /// Seeds of the streams, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,5")]
    seeds: Vec<u64>,
    /// Blob streams (version-1 sidecars) on a genesis with every fork up to Osaka at 0.
    #[arg(long)]
    blobs: bool,
    /// Funded senders. [default: 2000; with --blobs 16]
    #[arg(long)]
    senders: Option<usize>,
    /// Most nonces per sender. [default: 20; with --blobs 4]
    #[arg(long)]
    max_nonces: Option<u64>,
    /// The ethtest genesis the tool's genesis is built on.
    #[arg(long, default_value = "../shared/testdata/ethtest/genesis.json")]
    base_genesis: PathBuf,
    /// The genesis block's gas limit [default: 30,000,000; the nodes then raise it toward
    /// 60M by 1/1024 a block]. 60000000 makes the first block a mainnet-sized one.
    #[arg(long)]
    genesis_gas_limit: Option<u64>,
    /// Write the tool's genesis here and exit.
    #[arg(long)]
    write_genesis: Option<PathBuf>,
    /// An external node's JSON-RPC (ip:port, loopback only).
    #[arg(long)]
    rpc: Option<SocketAddr>,
    /// The external node's engine API (ip:port, loopback only).
    #[arg(long)]
    engine: Option<SocketAddr>,
    /// The engine API's JWT secret file (hex).
    #[arg(long)]
    jwtsecret: Option<PathBuf>,
    /// The external node's enode (loopback): remote txs go over RLPx from several peers.
    #[arg(long)]
    enode: Option<Enode>,
    /// In process: the pool as `--txpool.nolocals` makes it (RPC txs get no exemption).
    #[arg(long)]
    nolocals: bool,
    /// In process: the percent of each subpool local txs may hold exempt from eviction
    /// (`--txpool.localshare`). [default: the pool's, 50]
    #[arg(long)]
    localshare: Option<usize>,
    /// In process: the pending and base-fee subpools' limits (`--txpool.globalslots`).
    /// [default: the pool's, 10000; a node's flag defaults to 5120]
    #[arg(long)]
    globalslots: Option<usize>,
    /// In process: the queued subpool's limit (`--txpool.globalqueue`). [default: the
    /// pool's, 10000; a node's flag defaults to 1024]
    #[arg(long)]
    globalqueue: Option<usize>,
    /// In process: how many txs let go for room the pool remembers for packages to bring
    /// back (0: none). [default: the pool's, 16384]
    #[arg(long)]
    letgo: Option<usize>,
    /// In process: pending eviction takes the least single tail instead of the sender
    /// suffix with the least average tip (`PoolConfig::evict_by_package`, the default).
    #[arg(long)]
    evict_by_tail: bool,
    /// Over RPC: milliseconds between forkchoiceUpdated with attributes and getPayload
    /// (0: at once, so getPayload's answer time is the time to the first full payload).
    #[arg(long, default_value_t = 2000)]
    payload_wait_ms: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(args: Args) -> Result<(), String> {
    let base = std::fs::read_to_string(&args.base_genesis)
        .map_err(|e| format!("{}: {e}", args.base_genesis.display()))?;
    let n_senders = args.senders.unwrap_or(if args.blobs { 16 } else { 2000 });
    let max_nonces = args.max_nonces.unwrap_or(if args.blobs { 4 } else { 20 });
    let senders = senders(n_senders);
    let mut genesis = if args.blobs {
        osaka_genesis(&base, &senders)?
    } else {
        genesis(&base, &senders)?
    };
    if let Some(gas) = args.genesis_gas_limit {
        genesis.gas_limit = gas;
    }
    if let Some(path) = &args.write_genesis {
        let text = serde_json::to_string_pretty(&genesis).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| e.to_string())?;
        println!(
            "wrote {} ({} funded senders)",
            path.display(),
            senders.len()
        );
        return Ok(());
    }
    let limits = BlockLimits::first(&genesis);
    let mut cache = BlobCache::default();
    if args.blobs {
        let need = blob_stream_estimate(&StreamParams {
            seed: 0,
            senders: n_senders,
            max_nonces,
        });
        eprintln!("computing cell proofs of {need} blobs…");
        cache.fill(need)?;
    }
    println!(
        "{:>5} {:>6} {:>9} {:>9} {:>26} {:>8} {:>6} {:>22} {:>22} {:>9}",
        "seed",
        "txs",
        "accepted",
        "refused",
        "pending/basefee/queued/blob",
        "payload",
        "blobs",
        "value (wei)",
        "ideal (wei)",
        "ratio"
    );
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let mut classes = Vec::new();
    for seed in &args.seeds {
        let params = StreamParams {
            seed: *seed,
            senders: senders.len(),
            max_nonces,
        };
        let chain_id = genesis.config.chain_id;
        let s = if args.blobs {
            blob_stream(&params, chain_id, limits.base_fee, &senders, &mut cache)?
        } else {
            stream(&params, chain_id, limits.base_fee, &senders)
        };
        let (ideal, ideal_runs) = ideal_block(&s, &senders, &limits);
        let out = match args.rpc {
            None => runtime.block_on(run_in_process(&genesis, &s, |cfg| {
                cfg.no_locals = args.nolocals;
                if let Some(share) = args.localshare {
                    cfg.local_share = share;
                }
                if let Some(n) = args.globalslots {
                    cfg.pending.max_txs = n;
                    cfg.basefee.max_txs = n;
                }
                if let Some(n) = args.globalqueue {
                    cfg.queued.max_txs = n;
                }
                if let Some(n) = args.letgo {
                    cfg.let_go.max_txs = n;
                }
                if args.evict_by_tail {
                    cfg.evict_by_package = false;
                }
            }))?,
            Some(rpc) => runtime.block_on(external(&args, &genesis, rpc, &s))?,
        };
        for (reason, n) in &out.reasons {
            eprintln!("  seed {seed} refused: {reason} × {n}");
        }
        if !out.held_each.is_empty() {
            // The best block of what the pool held: below the payload's value only if
            // the builder lost something; below the ideal, what the pool let go.
            let held: Vec<StreamTx> = s
                .iter()
                .zip(&out.held_each)
                .filter(|(_, h)| **h)
                .map(|(t, _)| t.clone())
                .collect();
            eprintln!(
                "  seed {seed}: best block of the txs held at the end {} (payload {})",
                ideal_value(&held, &senders, &limits),
                out.payload_value
            );
            explain_losses(&s, &out, &ideal_runs);
            let (bar, under) = out.pending_under_bar;
            if args.rpc.is_none() {
                eprintln!(
                    "  seed {seed}: eviction bar at the end {} gwei; {under} pending txs tip less, kept under richer tails",
                    bar / 1_000_000_000
                );
            }
        }
        if let Some((fcu, get)) = out.build_times {
            eprintln!(
                "  seed {seed}: forkchoiceUpdated with attributes answered in {:.1} ms; getPayload, asked {} ms later, in {:.1} ms ({} txs)",
                fcu.as_secs_f64() * 1e3,
                args.payload_wait_ms,
                get.as_secs_f64() * 1e3,
                out.payload_txs
            );
        }
        let ratio = if ideal.is_zero() {
            1.0
        } else {
            f64::from(out.payload_value) / f64::from(ideal)
        };
        let sp = format!(
            "{}/{}/{}/{}",
            out.subpools[0], out.subpools[1], out.subpools[2], out.subpools[3]
        );
        println!(
            "{seed:>5} {:>6} {:>9} {:>9} {sp:>26} {:>8} {:>6} {:>22} {ideal:>22} {ratio:>9.4}",
            s.len(),
            out.accepted(),
            out.refused(),
            out.payload_txs,
            out.payload_blobs,
            out.payload_value,
        );
        classes.push((*seed, out));
    }
    println!();
    println!(
        "{:>5} {:<17} {:>6} {:>9} {:>9} {:>6}",
        "seed", "class", "sent", "accepted", "refused", "held"
    );
    for (seed, out) in &classes {
        for class in Class::ALL {
            let Some(c) = out.by_class.get(&class) else {
                continue;
            };
            let held = if class.own_hash() {
                c.held.to_string()
            } else {
                "-".into()
            };
            println!(
                "{seed:>5} {:<17} {:>6} {:>9} {:>9} {held:>6}",
                class.name(),
                c.sent,
                c.accepted,
                c.refused
            );
        }
    }
    Ok(())
}

fn loopback(addr: &SocketAddr) -> Result<(), String> {
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(format!("{addr}: only 127.0.0.0/8 is allowed"))
    }
}

/// One HTTP POST on a fresh connection; the parsed JSON answer.
fn post(addr: SocketAddr, auth: Option<&str>, body: &Value) -> Result<Value, String> {
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let body = body.to_string();
    let auth = auth
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(s);
    let mut line = String::new();
    let mut length = None;
    loop {
        line.clear();
        reader.read_line(&mut line).map_err(|e| e.to_string())?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some(v) = l.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse::<usize>().ok();
        }
    }
    let mut buf = Vec::new();
    match length {
        Some(n) => {
            buf.resize(n, 0);
            reader.read_exact(&mut buf).map_err(|e| e.to_string())?;
        }
        None => {
            reader.read_to_end(&mut buf).map_err(|e| e.to_string())?;
        }
    }
    serde_json::from_slice(&buf).map_err(|e| e.to_string())
}

fn rpc_call(rpc: SocketAddr, method: &str, params: Value) -> Result<Value, String> {
    post(
        rpc,
        None,
        &json!({"jsonrpc":"2.0","id":1,"method":method,"params":params}),
    )
}

fn hex_u64(v: &Value) -> u64 {
    v.as_str()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0)
}

/// One of the tool's peers of the node.
struct Peer {
    client: Client,
    /// Plain txs waiting to go in one `Transactions` message, and their hashes.
    batch: Vec<Bytes>,
    batch_hashes: HashSet<B256>,
    /// Announced blob txs the node has not fetched yet.
    serve: HashMap<B256, Bytes>,
}

impl Peer {
    async fn flush(&mut self) -> Result<(), String> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let txs = std::mem::take(&mut self.batch);
        self.batch_hashes.clear();
        self.client
            .send(&EthMessage::Transactions(txs))
            .await
            .map_err(|e| format!("send: {e}"))
    }

    /// Reads what the node sent for up to `wait`: answers its requests for announced
    /// txs (and pings), skips the rest. Errors when the node dropped the peer.
    async fn serve(&mut self, wait: Duration) -> Result<(), String> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.client.recv(left).await {
                Ok(None) => return Ok(()),
                Ok(Some(Incoming::Eth(EthMessage::GetPooledTransactions {
                    request_id,
                    hashes,
                }))) => {
                    let txs = hashes.iter().filter_map(|h| self.serve.remove(h)).collect();
                    self.client
                        .send(&EthMessage::PooledTransactions { request_id, txs })
                        .await
                        .map_err(|e| format!("send: {e}"))?;
                }
                Ok(Some(Incoming::Disconnect(r))) => {
                    return Err(format!("the node dropped a peer: {r:?}"));
                }
                Ok(Some(_)) => {}
                Err(e) => return Err(format!("peer: {e}")),
            }
            if left.is_zero() {
                return Ok(());
            }
        }
    }
}

async fn connect_peer(enode: &Enode, genesis: &Genesis, identity: u64) -> Result<Client, String> {
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&(0x9001_0000 + identity).to_be_bytes());
    seed[31] = 1;
    let key = secp256k1::SecretKey::from_byte_array(seed).map_err(|e| e.to_string())?;
    Client::connect(enode, key, &[70, 69, 68], Status::at_genesis(genesis, 0))
        .await
        .map_err(|e| format!("handshake with {enode}: {e}"))
}

async fn connect_peers(enode: &Enode, genesis: &Genesis) -> Result<Vec<Peer>, String> {
    loopback(&enode.addr)?;
    let mut peers = Vec::with_capacity(PEERS);
    for i in 0..PEERS {
        peers.push(Peer {
            client: connect_peer(enode, genesis, i as u64).await?,
            batch: Vec::new(),
            batch_hashes: HashSet::new(),
            serve: HashMap::new(),
        });
    }
    Ok(peers)
}

/// One remote tx to its peer: a plain one into the peer's next `Transactions` message, a
/// blob one announced (blob txs are fetched, never pushed) and served.
async fn deliver(peer: &mut Peer, tx: &StreamTx) -> Result<(), String> {
    if tx.blobs > 0 {
        peer.flush().await?;
        let ann = Announcement {
            types: vec![3],
            sizes: vec![tx.raw.len() as u32],
            hashes: vec![tx.hash],
            mask: None,
            origins: vec![],
        };
        if peer.serve.insert(tx.hash, tx.raw.clone()).is_none() {
            peer.client
                .send(&EthMessage::NewPooledTransactionHashes(ann))
                .await
                .map_err(|e| format!("send: {e}"))?;
        }
        // Give the node the time to fetch it before the sender's next tx.
        peer.serve(Duration::from_millis(700)).await
    } else {
        // Two copies in one message are a protocol fault.
        if peer.batch_hashes.contains(&tx.hash) || peer.batch.len() >= 16 {
            peer.flush().await?;
        }
        peer.batch_hashes.insert(tx.hash);
        peer.batch.push(tx.raw.clone());
        Ok(())
    }
}

/// The node dropped `peer`: it comes back as a new identity, as a relaying node would be
/// redialled; what its lost messages held is simply not pooled (at most 50 times a run).
async fn redial(
    args: &Args,
    genesis: &Genesis,
    peer: &mut Peer,
    redials: &mut usize,
    slot: usize,
    why: &str,
) -> Result<(), String> {
    *redials += 1;
    if *redials > 50 {
        return Err(format!("the node keeps dropping the tool's peers: {why}"));
    }
    let enode = args.enode.as_ref().ok_or("no enode")?;
    peer.client = connect_peer(enode, genesis, (*redials * PEERS + slot) as u64).await?;
    peer.batch.clear();
    peer.batch_hashes.clear();
    peer.serve.clear();
    Ok(())
}

/// The stream to a node (local txs over RPC, remote ones over RLPx with `--enode`), then a
/// payload through the engine API.
async fn external(
    args: &Args,
    genesis: &Genesis,
    rpc: SocketAddr,
    s: &[StreamTx],
) -> Result<Outcome, String> {
    loopback(&rpc)?;
    let engine = args.engine.ok_or("--engine is needed with --rpc")?;
    loopback(&engine)?;
    let secret_file = args
        .jwtsecret
        .as_ref()
        .ok_or("--jwtsecret is needed with --rpc")?;
    let secret = moat_rpc::engine::read_jwt_secret(secret_file).map_err(|e| e.to_string())?;
    let token = || moat_rpc::engine::make_token(&secret, moat_rpc::engine::unix_now());
    let head = rpc_call(rpc, "eth_getBlockByNumber", json!(["latest", false]))?;
    let head_hash = head["result"]["hash"].clone();
    let ts = hex_u64(&head["result"]["timestamp"]);
    let forkchoice = json!({"headBlockHash": head_hash, "safeBlockHash": head_hash, "finalizedBlockHash": head_hash});
    // A forkchoice update first: geth takes txs from peers only once a consensus client
    // has spoken (it counts as synced then).
    let fcu = post(
        engine,
        Some(&token()),
        &json!({"jsonrpc":"2.0","id":1,"method":"engine_forkchoiceUpdatedV3","params":[forkchoice, null]}),
    )?;
    if fcu.get("result").is_none() {
        return Err(format!("forkchoiceUpdated: {fcu}"));
    }
    let mut peers = match &args.enode {
        Some(enode) => connect_peers(enode, genesis).await?,
        None => Vec::new(),
    };
    let mut out = Outcome::default();
    let mut last_service = Instant::now();
    let mut redials = 0usize;
    for tx in s {
        let c = out.by_class.entry(tx.class).or_default();
        c.sent += 1;
        if tx.remote && !peers.is_empty() && !tx.class.peer_fault() {
            // No answer over RLPx: whether it was taken shows only in what is held.
            out.refusal_each
                .push(Some("over RLPx (refused, lost or evicted)".into()));
            let i = peer_of(tx.sender);
            if let Err(e) = deliver(&mut peers[i], tx).await {
                redial(args, genesis, &mut peers[i], &mut redials, i, &e).await?;
            }
        } else {
            let r = rpc_call(rpc, "eth_sendRawTransaction", json!([tx.raw]))?;
            let c = out.by_class.entry(tx.class).or_default();
            if r.get("result").is_some() {
                c.accepted += 1;
                out.refusal_each.push(None);
            } else {
                c.refused += 1;
                let reason = r["error"]["message"].as_str().unwrap_or("?").to_string();
                out.refusal_each.push(Some(reason.clone()));
                *out.reasons.entry(reason).or_default() += 1;
            }
        }
        if last_service.elapsed() > Duration::from_secs(1) {
            for (i, p) in peers.iter_mut().enumerate() {
                let r = match p.flush().await {
                    Ok(()) => p.serve(Duration::from_millis(1)).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = r {
                    redial(args, genesis, p, &mut redials, i, &e).await?;
                }
            }
            last_service = Instant::now();
        }
    }

    for (i, p) in peers.iter_mut().enumerate() {
        if let Err(e) = p.flush().await {
            redial(args, genesis, p, &mut redials, i, &e).await?;
        }
    }
    // Wait for the node to take in what the peers sent: the pool's size steady for 2 s
    // (at most 60 s), announced txs served meanwhile.
    if !peers.is_empty() {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last = (String::new(), Instant::now());
        while Instant::now() < deadline {
            for (i, p) in peers.iter_mut().enumerate() {
                if let Err(e) = p.serve(Duration::from_millis(100)).await {
                    redial(args, genesis, p, &mut redials, i, &e).await?;
                }
            }
            let st = rpc_call(rpc, "txpool_status", json!([]))?;
            let now = st["result"].to_string();
            if now != last.0 {
                last = (now, Instant::now());
            } else if last.1.elapsed() > Duration::from_secs(2)
                && peers.iter().all(|p| p.serve.is_empty())
            {
                break;
            }
        }
    }
    if redials > 0 {
        eprintln!("the node dropped the tool's peers {redials} times");
    }
    // What the pool holds, per class and per tx.
    let index: HashMap<B256, Vec<usize>> =
        s.iter().enumerate().fold(HashMap::new(), |mut m, (i, t)| {
            m.entry(t.hash).or_default().push(i);
            m
        });
    out.held_each = vec![false; s.len()];
    let own: Vec<&StreamTx> = s.iter().filter(|t| t.class.own_hash()).collect();
    for chunk in own.chunks(500) {
        let calls: Vec<Value> = chunk
            .iter()
            .enumerate()
            .map(|(i, t)| json!({"jsonrpc":"2.0","id":i,"method":"eth_getTransactionByHash","params":[t.hash]}))
            .collect();
        let answers = post(rpc, None, &Value::Array(calls))?;
        let answers = answers
            .as_array()
            .ok_or(format!("batch answer: {answers}"))?;
        for a in answers {
            let i = a["id"].as_u64().unwrap_or(u64::MAX) as usize;
            if let Some(t) = chunk.get(i)
                && !a["result"].is_null()
                && a.get("result").is_some()
            {
                out.by_class.entry(t.class).or_default().held += 1;
                for j in index.get(&t.hash).into_iter().flatten() {
                    out.held_each[*j] = true;
                }
            }
        }
    }
    let status = rpc_call(rpc, "txpool_status", json!([]))?;
    out.subpools = [
        hex_u64(&status["result"]["pending"]) as usize,
        0,
        hex_u64(&status["result"]["queued"]) as usize,
        0,
    ];
    let osaka = genesis
        .config
        .osaka_time
        .is_some_and(|t| t <= ts.max(200) + 12);
    let fcu_started = Instant::now();
    let fcu = post(
        engine,
        Some(&token()),
        &json!({"jsonrpc":"2.0","id":1,"method":"engine_forkchoiceUpdatedV3","params":[
            forkchoice,
            {"timestamp": format!("{:#x}", ts.max(200) + 12), "prevRandao": format!("0x{}", "01".repeat(32)),
             "suggestedFeeRecipient": format!("0x{}", "fe".repeat(20)), "withdrawals": [],
             "parentBeaconBlockRoot": format!("0x{}", "02".repeat(32))}
        ]}),
    )?;
    let id = fcu["result"]["payloadId"].clone();
    if id.is_null() {
        return Err(format!("forkchoiceUpdated gave no payload id: {fcu}"));
    }
    let fcu_took = fcu_started.elapsed();
    std::thread::sleep(Duration::from_millis(args.payload_wait_ms));
    let method = if osaka {
        "engine_getPayloadV5"
    } else {
        "engine_getPayloadV4"
    };
    let get_started = Instant::now();
    let env = post(
        engine,
        Some(&token()),
        &json!({"jsonrpc":"2.0","id":1,"method":method,"params":[id]}),
    )?;
    out.build_times = Some((fcu_took, get_started.elapsed()));
    let value = env["result"]["blockValue"]
        .as_str()
        .ok_or(format!("no payload: {env}"))?;
    out.payload_value =
        U256::from_str_radix(value.trim_start_matches("0x"), 16).map_err(|e| e.to_string())?;
    out.payload_txs = env["result"]["executionPayload"]["transactions"]
        .as_array()
        .map_or(0, Vec::len);
    out.payload_blobs = env["result"]["blobsBundle"]["commitments"]
        .as_array()
        .map_or(0, Vec::len);
    for p in &mut peers {
        p.client
            .disconnect(moat_p2p::p2p::DisconnectReason::ClientQuitting)
            .await;
    }
    Ok(out)
}

/// Where the pool's runs fall short of the stream's: per sender, the first nonce of the
/// stream's valid run (its first includable tx per nonce) that the pool does not hold,
/// why (refused and the reason, or taken then evicted), and the tips of the rich txs (in
/// the top tenth of tips) stranded above it. Then the ideal block's txs the pool did not
/// hold at the end, by why the sender's run was cut below or at them: how many, their
/// tips, and the tips of the txs at the cuts. Printed to stderr.
fn explain_losses(
    s: &[StreamTx],
    out: &Outcome,
    ideal_runs: &std::collections::BTreeMap<usize, usize>,
) {
    let mut tips: Vec<u128> = s.iter().filter(|t| t.includable).map(|t| t.tip).collect();
    tips.sort_unstable();
    let rich = tips.get(tips.len() * 9 / 10).copied().unwrap_or(0);
    // Per sender, per nonce: held at the end, why its first copy was refused, best tip.
    type Nonces = std::collections::BTreeMap<u64, (bool, Option<String>, u128)>;
    let mut by_sender: HashMap<usize, Nonces> = HashMap::new();
    for ((t, held), refusal) in s.iter().zip(&out.held_each).zip(&out.refusal_each) {
        if !t.includable {
            continue;
        }
        let e = by_sender
            .entry(t.sender)
            .or_default()
            .entry(t.nonce)
            .or_insert((false, None, t.tip));
        e.0 |= *held;
        if e.1.is_none() {
            e.1 = Some(refusal.clone().map_or("taken, then evicted".into(), |r| {
                r.split(':').next().unwrap_or("").to_string()
            }));
        }
        e.2 = e.2.max(t.tip);
    }
    let mut why: std::collections::BTreeMap<String, (usize, u128)> = Default::default();
    for nonces in by_sender.values() {
        let mut n = 0;
        while let Some((held, _, _)) = nonces.get(&n) {
            if !held {
                break;
            }
            n += 1;
        }
        let Some((_, reason, _)) = nonces.get(&n) else {
            continue;
        };
        let stranded: u128 = nonces
            .range(n..)
            .take_while({
                let mut expect = n;
                move |(k, _)| {
                    let ok = **k == expect;
                    expect += 1;
                    ok
                }
            })
            .filter(|(_, (_, _, tip))| *tip >= rich)
            .map(|(_, (_, _, tip))| *tip / 1_000_000_000)
            .sum();
        let e = why.entry(reason.clone().unwrap_or_default()).or_default();
        e.0 += 1;
        e.1 += stranded;
    }
    for (reason, (senders, gwei)) in why {
        eprintln!(
            "  runs cut short by {reason}: {senders} senders, rich tips stranded above the cut {gwei} gwei"
        );
    }
    // The ideal block's txs lost: (senders, txs, their tips, the cut txs' tips), gwei.
    let mut lost: std::collections::BTreeMap<String, (usize, usize, u128, u128)> =
        Default::default();
    let mut ideal_tips = 0u128;
    for (sender, len) in ideal_runs {
        let Some(nonces) = by_sender.get(sender) else {
            continue;
        };
        let tip = |n: u64| nonces.get(&n).map_or(0, |e| e.2 / 1_000_000_000);
        ideal_tips += (0..*len as u64).map(tip).sum::<u128>();
        let Some(cut) = (0..*len as u64).find(|n| !nonces.get(n).is_some_and(|e| e.0)) else {
            continue;
        };
        let reason = nonces
            .get(&cut)
            .and_then(|e| e.1.clone())
            .unwrap_or_default();
        if std::env::var_os("TRACE_LOST").is_some() {
            eprintln!("  lost sender {sender} (ideal run {len}, cut at {cut}, {reason}):");
            for (i, t) in s.iter().enumerate().filter(|(_, t)| t.sender == *sender) {
                eprintln!(
                    "    #{i} nonce {} tip {} gwei {:?} refused {:?} held {}",
                    t.nonce,
                    t.tip / 1_000_000_000,
                    t.class,
                    out.refusal_each[i],
                    out.held_each[i]
                );
            }
        }
        let e = lost.entry(reason).or_default();
        e.0 += 1;
        e.1 += *len - cut as usize;
        e.2 += (cut..*len as u64).map(tip).sum::<u128>();
        e.3 += tip(cut);
    }
    for (reason, (senders, txs, gwei, cut_gwei)) in lost {
        eprintln!(
            "  ideal block's txs not held, cut by {reason}: {senders} senders, {txs} txs, tips {gwei} gwei of {ideal_tips} ({:.4}), cut txs' tips {cut_gwei} gwei",
            gwei as f64 / ideal_tips.max(1) as f64
        );
    }
}
