//! `engine`: newPayload of empty blocks (or, with `--txs`, of blocks of transfers),
//! through the engine API as a consensus client drives it, against any node.
//!
//! ```text
//!  [--txs N: N transfers from the base genesis' funded keys ─▶ eth_sendRawTransaction]
//!  head ─▶ forkchoiceUpdatedV3(head, attributes) ─▶ [--build-wait-ms] ─▶ getPayloadV4
//!       ─▶ newPayloadV4(payload)  ← timed: the figure
//!       ─▶ forkchoiceUpdatedV3(new block) ─▶ head
//! ```
//!
//! The head comes from `eth_getBlockByNumber("latest")` on `--rpc` (moat serves `eth_` on
//! its HTTP port only) or, without `--rpc`, on the engine endpoint itself (go-ethereum
//! serves `eth_` there too). Attribute timestamps are the head's + 12 and never below
//! `--min-timestamp` (120: Prague on the ethtest schedule), so the first block is already
//! a Prague block with `executionRequests`.

use crate::percentile;
use alloy_primitives::{B256, keccak256};
use serde_json::{Value, json};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub(crate) struct EngineArgs {
    /// Engine API endpoint, ip:port (plain HTTP); 127.0.0.0/8 only.
    #[arg(long, default_value = "127.0.0.1:8551")]
    engine: SocketAddr,
    /// The JWT secret: hex, or a file holding it.
    #[arg(long)]
    jwtsecret: String,
    /// JSON-RPC endpoint for the head block (default: the engine endpoint).
    #[arg(long)]
    rpc: Option<SocketAddr>,
    /// Blocks to build and import.
    #[arg(long, default_value_t = 20)]
    blocks: usize,
    /// Lowest payload timestamp (120: Prague on the ethtest schedule).
    #[arg(long, default_value_t = 120)]
    min_timestamp: u64,
    /// Give up on a call after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
    /// Print the figures as one JSON line.
    #[arg(long)]
    json: bool,
    /// Transfers sent to the node before each block is built (0: empty blocks), from
    /// the keys of `--keys`, 1 wei each to synthetic accounts (`--recipients`).
    #[arg(long, default_value_t = 0)]
    txs: u64,
    /// The transfers go to synthetic accounts 0..N (existing accounts of a
    /// `moat-state-bench genesis` state, chosen at random); 0: to new addresses.
    #[arg(long, default_value_t = 0)]
    recipients: u64,
    /// address → {"key": …} of funded accounts (the ethtest suite's accounts.json).
    #[arg(long, default_value = "../shared/testdata/ethtest/accounts.json")]
    keys: std::path::PathBuf,
    /// Milliseconds between forkchoiceUpdated with attributes and getPayload, for the
    /// node to fill the payload (not timed).
    #[arg(long, default_value_t = 0)]
    build_wait_ms: u64,
}

/// The funded keys of `path` (address → {"key": hex}), in address order.
fn funded_keys(path: &std::path::Path) -> Result<Vec<moat_crypto::secp::Signer>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let map: serde_json::Map<String, Value> = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a JSON object: {e}", path.display()))?;
    map.values()
        .map(|v| {
            v["key"]
                .as_str()
                .and_then(|k| k.parse::<B256>().ok())
                .and_then(|k| moat_crypto::secp::Signer::from_bytes(&k))
                .ok_or_else(|| format!("{}: a key that is not 32 bytes of hex", path.display()))
        })
        .collect()
}

/// One signed transfer, as eth_sendRawTransaction takes it.
fn transfer(
    signer: &moat_crypto::secp::Signer,
    chain_id: u64,
    nonce: u64,
    to: alloy_primitives::Address,
) -> String {
    use moat_common::transaction::{Eip1559Tx, SignedTransaction, Transaction};
    let tx = Transaction::Eip1559(Eip1559Tx {
        chain_id,
        nonce,
        max_priority_fee_per_gas: 1_000_000_000,
        max_fee_per_gas: 100_000_000_000,
        gas_limit: 21_000,
        to: alloy_primitives::TxKind::Call(to),
        value: alloy_primitives::U256::from(1),
        input: alloy_primitives::Bytes::new(),
        access_list: Vec::new(),
    });
    let pooled = moat_common::PooledTransaction::new(SignedTransaction::sign(tx, signer), None);
    alloy_primitives::hex::encode_prefixed(pooled.encoded_2718())
}

/// A kept-alive HTTP/1.1 connection that posts JSON and reads `Content-Length` bodies,
/// with a fresh JWT on each request when it has a secret.
struct Client {
    stream: BufReader<TcpStream>,
    addr: SocketAddr,
    secret: Option<[u8; 32]>,
    id: u64,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

impl Client {
    fn connect(addr: SocketAddr, secret: Option<[u8; 32]>, timeout: Duration) -> io::Result<Self> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Self {
            stream: BufReader::new(stream),
            addr,
            secret,
            id: 0,
        })
    }

    /// Calls `method`; the `result`, or the error as text.
    fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.id += 1;
        let body = json!({ "jsonrpc": "2.0", "id": self.id, "method": method, "params": params })
            .to_string();
        let (code, text) = self.post(&body).map_err(|e| format!("{method}: {e}"))?;
        let answer: Value = serde_json::from_slice(&text)
            .map_err(|e| format!("{method}: http {code}, not JSON ({e})"))?;
        if let Some(error) = answer.get("error") {
            return Err(format!("{method}: {error}"));
        }
        if code != 200 {
            return Err(format!("{method}: http {code}"));
        }
        answer
            .get("result")
            .cloned()
            .ok_or_else(|| format!("{method}: no result"))
    }

    fn post(&mut self, body: &str) -> io::Result<(u16, Vec<u8>)> {
        let auth = self.secret.map_or(String::new(), |s| {
            format!(
                "Authorization: Bearer {}\r\n",
                moat_rpc::engine::make_token(&s, moat_rpc::engine::unix_now())
            )
        });
        let request = format!(
            "POST / HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n{auth}Content-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        self.stream.get_mut().write_all(request.as_bytes())?;
        let mut status_line = String::new();
        if self.stream.read_line(&mut status_line)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed by the server",
            ));
        }
        let status: u16 = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| invalid(format!("bad status line {status_line:?}")))?;
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            self.stream.read_line(&mut line)?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value
                    .trim()
                    .parse()
                    .map_err(|_| invalid("bad content-length".into()))?;
            }
        }
        let mut body = vec![0u8; length];
        self.stream.read_exact(&mut body)?;
        Ok((status, body))
    }
}

fn quantity(v: &Value, what: &str) -> Result<u64, String> {
    v.as_str()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .ok_or_else(|| format!("{what}: not a quantity: {v}"))
}

fn hash(v: &Value, what: &str) -> Result<B256, String> {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{what}: not a hash: {v}"))
}

/// The payload status of a newPayload or forkchoiceUpdated answer must be VALID.
fn expect_valid(status: &Value, what: &str) -> Result<(), String> {
    match status["status"].as_str() {
        Some("VALID") => Ok(()),
        _ => Err(format!("{what}: {status}")),
    }
}

/// One phase's latencies, in the order measured.
#[derive(Default)]
struct Phase(Vec<Duration>);

impl Phase {
    fn summary(&self) -> (f64, f64, f64, f64) {
        let mut sorted = self.0.clone();
        sorted.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        (
            self.0.first().map_or(0.0, |d| ms(*d)),
            ms(percentile(&sorted, 0.5)),
            ms(percentile(&sorted, 0.9)),
            sorted.last().map_or(0.0, |d| ms(*d)),
        )
    }
}

fn timed<T>(phase: &mut Phase, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let out = f();
    phase.0.push(t.elapsed());
    out
}

pub(crate) fn run(args: &EngineArgs) -> Result<ExitCode, String> {
    for addr in std::iter::once(&args.engine).chain(&args.rpc) {
        if !addr.ip().is_loopback() {
            return Err(format!("{addr} is not a loopback address"));
        }
    }
    let secret = match std::fs::read_to_string(&args.jwtsecret) {
        Ok(text) => moat_rpc::engine::parse_jwt_secret(&text),
        Err(_) => moat_rpc::engine::parse_jwt_secret(&args.jwtsecret),
    }
    .map_err(|_| "--jwtsecret is neither 32 bytes of hex nor a file holding them".to_string())?;
    let timeout = Duration::from_secs(args.timeout_secs.max(1));
    let mut engine = Client::connect(args.engine, Some(secret), timeout)
        .map_err(|e| format!("cannot connect to {}: {e}", args.engine))?;

    let mut rpc = match args.rpc {
        Some(addr) => Some(
            Client::connect(addr, None, timeout)
                .map_err(|e| format!("cannot connect to {addr}: {e}"))?,
        ),
        None => None,
    };
    // eth_ calls: on --rpc, or on the engine endpoint (go-ethereum serves eth_ there).
    let mut eth = |engine: &mut Client, method: &str, params: Value| match rpc.as_mut() {
        Some(c) => c.call(method, params),
        None => engine
            .call(method, params)
            .map_err(|e| format!("{e} (the engine endpoint has no eth_ methods? give --rpc)")),
    };
    let latest = eth(
        &mut engine,
        "eth_getBlockByNumber",
        json!(["latest", false]),
    )?;
    let mut senders = Vec::new();
    let mut chain_id = 0;
    if args.txs > 0 {
        chain_id = quantity(&eth(&mut engine, "eth_chainId", json!([]))?, "chain id")?;
        for signer in funded_keys(&args.keys)? {
            let nonce = quantity(
                &eth(
                    &mut engine,
                    "eth_getTransactionCount",
                    json!([signer.address(), "pending"]),
                )?,
                "nonce",
            )?;
            senders.push((signer, nonce));
        }
        if senders.is_empty() {
            return Err(format!("{} holds no key", args.keys.display()));
        }
    }
    let mut rng = crate::Rng::new(7);
    let mut included = 0usize;
    let mut head = hash(&latest["hash"], "head hash")?;
    let mut number = quantity(&latest["number"], "head number")?;
    let mut timestamp = quantity(&latest["timestamp"], "head timestamp")?;
    let start_number = number;

    let (mut fcu_attrs, mut get, mut new, mut fcu) = (
        Phase::default(),
        Phase::default(),
        Phase::default(),
        Phase::default(),
    );
    let wall = Instant::now();
    for round in 0..args.blocks {
        for i in 0..args.txs {
            let to = if args.recipients > 0 {
                crate::synthetic_address(rng.below(args.recipients))
            } else {
                alloy_primitives::Address::from_slice(
                    &keccak256(format!("moat-state-bench recipient {round} {i}"))[12..],
                )
            };
            let k = (i as usize) % senders.len();
            let raw = transfer(&senders[k].0, chain_id, senders[k].1, to);
            eth(&mut engine, "eth_sendRawTransaction", json!([raw]))?;
            senders[k].1 += 1;
        }
        let ts = (timestamp + 12).max(args.min_timestamp);
        let beacon_root = keccak256(format!("moat-state-bench beacon root {number}"));
        let attributes = json!({
            "timestamp": format!("{ts:#x}"),
            "prevRandao": keccak256(format!("moat-state-bench randao {number}")),
            "suggestedFeeRecipient": "0x00000000000000000000000000000000000fee00",
            "withdrawals": [],
            "parentBeaconBlockRoot": beacon_root,
        });
        let state =
            json!({ "headBlockHash": head, "safeBlockHash": head, "finalizedBlockHash": head });
        let answer = timed(&mut fcu_attrs, || {
            engine.call("engine_forkchoiceUpdatedV3", json!([state, attributes]))
        })?;
        expect_valid(
            &answer["payloadStatus"],
            "forkchoiceUpdatedV3 with attributes",
        )?;
        let id = answer["payloadId"].clone();
        if id.is_null() {
            return Err(format!("forkchoiceUpdatedV3 gave no payloadId: {answer}"));
        }
        if args.build_wait_ms > 0 {
            std::thread::sleep(Duration::from_millis(args.build_wait_ms));
        }
        let built = timed(&mut get, || engine.call("engine_getPayloadV4", json!([id])))?;
        let payload = &built["executionPayload"];
        included += payload["transactions"].as_array().map_or(0, Vec::len);
        let block_hash = hash(&payload["blockHash"], "payload blockHash")?;
        let requests = built
            .get("executionRequests")
            .cloned()
            .unwrap_or_else(|| json!([]));
        let status = timed(&mut new, || {
            engine.call(
                "engine_newPayloadV4",
                json!([payload, [], beacon_root, requests]),
            )
        })?;
        if status["status"].as_str() != Some("VALID") {
            eprintln!(
                "error: block {} of the run: newPayloadV4 answered {status}",
                round + 1
            );
            return Ok(ExitCode::from(2));
        }
        let state = json!({ "headBlockHash": block_hash, "safeBlockHash": block_hash, "finalizedBlockHash": block_hash });
        let answer = timed(&mut fcu, || {
            engine.call("engine_forkchoiceUpdatedV3", json!([state, null]))
        })?;
        expect_valid(
            &answer["payloadStatus"],
            "forkchoiceUpdatedV3 to the new block",
        )?;
        head = block_hash;
        number = quantity(&payload["blockNumber"], "payload blockNumber")?;
        timestamp = ts;
    }
    let wall = wall.elapsed();

    let phases = [
        ("forkchoiceUpdatedV3 + attributes", &fcu_attrs),
        ("getPayloadV4", &get),
        ("newPayloadV4", &new),
        ("forkchoiceUpdatedV3 to it", &fcu),
    ];
    if args.json {
        let mut line = json!({
            "engine": args.engine.to_string(),
            "blocks": args.blocks,
            "first_block": start_number + 1,
            "head": number,
            "wall_s": wall.as_secs_f64(),
            "txs_sent": args.txs * args.blocks as u64,
            "txs_included": included,
        });
        for (key, phase) in [
            ("fcu_attrs", &fcu_attrs),
            ("get_payload", &get),
            ("new_payload", &new),
            ("fcu", &fcu),
        ] {
            let (first, p50, p90, max) = phase.summary();
            line[format!("{key}_first_ms")] = json!(first);
            line[format!("{key}_p50_ms")] = json!(p50);
            line[format!("{key}_p90_ms")] = json!(p90);
            line[format!("{key}_max_ms")] = json!(max);
        }
        println!("{line}");
    } else {
        println!(
            "engine:  {}; blocks #{}–#{number} ({} blocks, {included} transactions, {:.2} s)",
            args.engine,
            start_number + 1,
            args.blocks,
            wall.as_secs_f64()
        );
        println!(
            "{:<34} {:>10} {:>10} {:>10} {:>10}",
            "call", "first", "p50", "p90", "max"
        );
        for (name, phase) in phases {
            let (first, p50, p90, max) = phase.summary();
            println!("{name:<34} {first:>7.2} ms {p50:>7.2} ms {p90:>7.2} ms {max:>7.2} ms");
        }
    }
    Ok(ExitCode::SUCCESS)
}
