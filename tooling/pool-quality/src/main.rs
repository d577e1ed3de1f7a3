//! `moat-pool-quality`: feed a seeded stream of transactions to a pool, build a block from
//! it, and compare the block's value with the most valuable block the stream allowed.
//!
//! ```sh
//! moat-pool-quality --seeds 1,2,3,4,5                 # in process, moat's pool
//! moat-pool-quality --write-genesis g.json            # a genesis for an external node
//! moat-pool-quality --seeds 2 --rpc 127.0.0.1:8545 --engine 127.0.0.1:8551 --jwtsecret jwt.hex
//! ```
//!
//! Against an external node (moat or geth started on the written genesis, fresh datadir),
//! every tx of the stream goes over `eth_sendRawTransaction`, then one payload is built
//! through the engine API (forkchoiceUpdatedV3 with attributes, getPayloadV4). Talks only
//! to 127.0.0.0/8.

use alloy_primitives::U256;
use clap::Parser;
use moat_pool_quality::{
    Class, GAS_LIMIT, StreamParams, first_base_fee, genesis, ideal_value, run_in_process, senders,
    stream,
};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "moat-pool-quality",
    about = "Block value from a pool against the ideal"
)]
struct Args {
    /// Seeds of the streams, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,5")]
    seeds: Vec<u64>,
    /// Funded senders.
    #[arg(long, default_value_t = 2000)]
    senders: usize,
    /// Most nonces per sender.
    #[arg(long, default_value_t = 20)]
    max_nonces: u64,
    /// The ethtest genesis the tool's genesis is built on.
    #[arg(long, default_value = "../shared/testdata/ethtest/genesis.json")]
    base_genesis: PathBuf,
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
    let senders = senders(args.senders);
    let genesis = genesis(&base, &senders)?;
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
    let base_fee = first_base_fee(&genesis);
    println!(
        "{:>5} {:>6} {:>9} {:>9} {:>26} {:>8} {:>22} {:>22} {:>9}",
        "seed",
        "txs",
        "accepted",
        "refused",
        "pending/basefee/queued",
        "payload",
        "value (wei)",
        "ideal (wei)",
        "ratio"
    );
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    for seed in &args.seeds {
        let params = StreamParams {
            seed: *seed,
            senders: senders.len(),
            max_nonces: args.max_nonces,
        };
        let s = stream(&params, genesis.config.chain_id, base_fee, &senders);
        let ideal = ideal_value(&s, &senders, base_fee, GAS_LIMIT);
        let (accepted, refused, subpools, payload_txs, value) = match args.rpc {
            None => {
                let out = runtime.block_on(run_in_process(&genesis, &s, |_| {}))?;
                let accepted: usize = out.by_class.values().map(|v| v.0).sum();
                let refused: usize = out.by_class.values().map(|v| v.1).sum();
                for class in Class::ALL {
                    let (a, r) = out.by_class.get(&class).copied().unwrap_or_default();
                    eprintln!(
                        "  seed {seed} {:<13} accepted {a:>5} refused {r:>5}",
                        class.name()
                    );
                }
                for (reason, n) in &out.reasons {
                    eprintln!("  seed {seed} refused: {reason} × {n}");
                }
                let sp = format!(
                    "{}/{}/{}",
                    out.subpools[0], out.subpools[1], out.subpools[2]
                );
                (accepted, refused, sp, out.payload_txs, out.payload_value)
            }
            Some(rpc) => external(&args, rpc, &s)?,
        };
        let ratio = if ideal.is_zero() {
            1.0
        } else {
            f64::from(value) / f64::from(ideal)
        };
        println!(
            "{seed:>5} {:>6} {accepted:>9} {refused:>9} {subpools:>26} {payload_txs:>8} {value:>22} {ideal:>22} {ratio:>9.4}",
            s.len()
        );
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

/// The stream over RPC, then a payload through the engine API.
fn external(
    args: &Args,
    rpc: SocketAddr,
    s: &[moat_pool_quality::StreamTx],
) -> Result<(usize, usize, String, usize, U256), String> {
    loopback(&rpc)?;
    let engine = args.engine.ok_or("--engine is needed with --rpc")?;
    loopback(&engine)?;
    let secret_file = args
        .jwtsecret
        .as_ref()
        .ok_or("--jwtsecret is needed with --rpc")?;
    let secret = moat_rpc::engine::read_jwt_secret(secret_file).map_err(|e| e.to_string())?;
    let (mut accepted, mut refused) = (0, 0);
    for tx in s {
        let r = post(
            rpc,
            None,
            &json!({"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":[tx.raw]}),
        )?;
        if r.get("result").is_some() {
            accepted += 1;
        } else {
            refused += 1;
        }
    }
    let status = post(
        rpc,
        None,
        &json!({"jsonrpc":"2.0","id":1,"method":"txpool_status","params":[]}),
    )?;
    let subpools = format!(
        "{}/-/{}",
        status["result"]["pending"].as_str().unwrap_or("?"),
        status["result"]["queued"].as_str().unwrap_or("?")
    );
    let head = post(
        rpc,
        None,
        &json!({"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["latest", false]}),
    )?;
    let head_hash = head["result"]["hash"].clone();
    let ts = u64::from_str_radix(
        head["result"]["timestamp"]
            .as_str()
            .unwrap_or("0x0")
            .trim_start_matches("0x"),
        16,
    )
    .unwrap_or(0);
    let token = || moat_rpc::engine::make_token(&secret, moat_rpc::engine::unix_now());
    let fcu = post(
        engine,
        Some(&token()),
        &json!({"jsonrpc":"2.0","id":1,"method":"engine_forkchoiceUpdatedV3","params":[
            {"headBlockHash": head_hash, "safeBlockHash": head_hash, "finalizedBlockHash": head_hash},
            {"timestamp": format!("{:#x}", ts.max(200) + 12), "prevRandao": format!("0x{}", "01".repeat(32)),
             "suggestedFeeRecipient": format!("0x{}", "fe".repeat(20)), "withdrawals": [],
             "parentBeaconBlockRoot": format!("0x{}", "02".repeat(32))}
        ]}),
    )?;
    let id = fcu["result"]["payloadId"].clone();
    if id.is_null() {
        return Err(format!("forkchoiceUpdated gave no payload id: {fcu}"));
    }
    std::thread::sleep(Duration::from_secs(2));
    let env = post(
        engine,
        Some(&token()),
        &json!({"jsonrpc":"2.0","id":1,"method":"engine_getPayloadV4","params":[id]}),
    )?;
    let value = env["result"]["blockValue"]
        .as_str()
        .ok_or(format!("no payload: {env}"))?;
    let value =
        U256::from_str_radix(value.trim_start_matches("0x"), 16).map_err(|e| e.to_string())?;
    let txs = env["result"]["executionPayload"]["transactions"]
        .as_array()
        .map_or(0, Vec::len);
    Ok((accepted, refused, subpools, txs, value))
}
