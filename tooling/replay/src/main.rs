//! `moat-replay`: sends a file of engine API requests (a JSON array of JSON-RPC calls, such
//! as `../shared/testdata/ethtest/newpayload.json`: 601 `engine_newPayload` calls that
//! rebuild the chain from genesis) one after another to an engine endpoint — moat's, geth's,
//! any — with a fresh JWT each, and prints latency percentiles, gas throughput and the
//! count of each payload status.
//!
//! Exit status 0 when every payload of a block after genesis is VALID. A genesis payload
//! (block 0, as the ethtest file's first call) is a proof-of-work block no payload can
//! express: it does not hash to its `blockHash`, and nodes answer it INVALID.

use clap::Parser;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    name = "moat-replay",
    about = "Replay engine_newPayload calls and measure them"
)]
struct Args {
    /// Engine API endpoint, host:port (plain HTTP).
    #[arg(long, default_value = "127.0.0.1:8551")]
    engine: String,
    /// The JWT secret: hex, or a file holding it.
    #[arg(long)]
    jwtsecret: String,
    /// The requests to replay.
    #[arg(long, default_value = "../shared/testdata/ethtest/newpayload.json")]
    file: PathBuf,
    /// After each VALID newPayload, make its block the head with forkchoiceUpdated, as a
    /// consensus client does (clients that keep recent state only near the head, geth
    /// among them, answer SYNCING to long runs of payloads without it). Its time is not
    /// counted in the latencies.
    #[arg(long)]
    fcu: bool,
}

/// A kept-alive HTTP/1.1 connection that posts JSON and reads `Content-Length` bodies.
struct Client {
    stream: BufReader<TcpStream>,
    host: String,
}

impl Client {
    fn connect(host: &str) -> std::io::Result<Self> {
        let stream = TcpStream::connect(host)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        Ok(Self {
            stream: BufReader::new(stream),
            host: host.to_string(),
        })
    }

    fn post(&mut self, token: &str, body: &str) -> Result<(u16, String), String> {
        let request = format!(
            "POST / HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\n\r\n{body}",
            self.host,
            body.len()
        );
        let io = |e: std::io::Error| e.to_string();
        self.stream
            .get_mut()
            .write_all(request.as_bytes())
            .map_err(io)?;
        let mut status_line = String::new();
        self.stream.read_line(&mut status_line).map_err(io)?;
        let status: u16 = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or("bad status line")?;
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            self.stream.read_line(&mut line).map_err(io)?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().map_err(|_| "bad content-length")?;
            }
        }
        let mut body = vec![0u8; length];
        self.stream.read_exact(&mut body).map_err(io)?;
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn gas_used(request: &Value) -> u64 {
    request["params"][0]["gasUsed"]
        .as_str()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0)
}

fn block_number(request: &Value) -> Option<u64> {
    request["params"][0]["blockNumber"]
        .as_str()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
}

/// forkchoiceUpdated to the block a newPayload request carried (V3 for V3+ payloads).
fn forkchoice(client: &mut Client, secret: &[u8; 32], request: &Value) -> Result<(), String> {
    let hash = &request["params"][0]["blockHash"];
    let method = request["method"].as_str().unwrap_or_default();
    let version = if method.ends_with("V1") || method.ends_with("V2") {
        "V2"
    } else {
        "V3"
    };
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": format!("engine_forkchoiceUpdated{version}"),
        "params": [{ "headBlockHash": hash, "safeBlockHash": hash, "finalizedBlockHash": hash }, null],
    });
    let token = moat_rpc::engine::make_token(secret, moat_rpc::engine::unix_now());
    let (code, response) = client.post(&token, &body.to_string())?;
    let parsed: Value = serde_json::from_str(&response).unwrap_or(Value::Null);
    match parsed["result"]["payloadStatus"]["status"].as_str() {
        Some("VALID") if code == 200 => Ok(()),
        _ => Err(format!("http {code}: {response}")),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let secret = match std::fs::read_to_string(&args.jwtsecret) {
        Ok(text) => moat_rpc::engine::parse_jwt_secret(&text),
        Err(_) => moat_rpc::engine::parse_jwt_secret(&args.jwtsecret),
    };
    let Ok(secret) = secret else {
        eprintln!("error: --jwtsecret is neither 32 bytes of hex nor a file holding them");
        return ExitCode::from(1);
    };
    let requests: Vec<Value> = match std::fs::read_to_string(&args.file)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", args.file.display());
            return ExitCode::from(1);
        }
    };
    let mut client = match Client::connect(&args.engine) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: cannot connect to {}: {e}", args.engine);
            return ExitCode::from(1);
        }
    };

    let mut latencies = Vec::with_capacity(requests.len());
    let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
    let mut gas = 0u64;
    let mut failed_after_genesis = 0usize;
    let started = Instant::now();
    for request in &requests {
        let token = moat_rpc::engine::make_token(&secret, moat_rpc::engine::unix_now());
        let body = request.to_string();
        let t = Instant::now();
        let (code, response) = match client.post(&token, &body) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: request {} failed: {e}", request["id"]);
                return ExitCode::from(1);
            }
        };
        latencies.push(t.elapsed());
        let parsed: Value = serde_json::from_str(&response).unwrap_or(Value::Null);
        let status = match (
            code,
            parsed["result"]["status"].as_str(),
            parsed["error"]["message"].as_str(),
        ) {
            (200, Some(s), _) => s.to_string(),
            (200, None, Some(e)) => format!("error: {e}"),
            (code, _, _) => format!("http {code}"),
        };
        if status == "VALID" {
            gas += gas_used(request);
            if args.fcu
                && let Err(e) = forkchoice(&mut client, &secret, request)
            {
                eprintln!(
                    "error: forkchoiceUpdated after {} failed: {e}",
                    request["id"]
                );
                return ExitCode::from(1);
            }
        }
        if status != "VALID" && block_number(request) != Some(0) {
            failed_after_genesis += 1;
        }
        *statuses.entry(status).or_default() += 1;
    }
    let wall = started.elapsed();
    latencies.sort();
    let busy: Duration = latencies.iter().sum();
    println!("requests      {}", requests.len());
    for (status, n) in &statuses {
        println!("status        {status}: {n}");
    }
    println!(
        "latency       p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        percentile(&latencies, 0.50).as_secs_f64() * 1e3,
        percentile(&latencies, 0.95).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        latencies.last().map_or(0.0, |d| d.as_secs_f64() * 1e3)
    );
    println!(
        "throughput    {:.1} Mgas/s ({:.1} Mgas in {:.2} s of requests; {:.2} s wall)",
        gas as f64 / 1e6 / busy.as_secs_f64().max(1e-9),
        gas as f64 / 1e6,
        busy.as_secs_f64(),
        wall.as_secs_f64()
    );
    if failed_after_genesis == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    }
}
