//! `moat-replay`: sends engine API requests one after another to an engine endpoint —
//! moat's, geth's, any — with a fresh JWT each, and prints what they cost.
//!
//! Two input forms:
//! - EXPB's (NethermindEth's execution-payloads-benchmarks): `--file payloads.jsonl
//!   --fcus fcus.jsonl`, one JSON-RPC request a line, line i of each file for the same
//!   block. Both files are read line by line as the replay goes (nothing is held but the
//!   current pair), and each block's own forkchoiceUpdated is sent after its newPayload,
//!   as EXPB's K6 script does. `moat-chaingen` writes these files too.
//! - A JSON array of newPayload requests (`--file`, e.g.
//!   `../shared/testdata/ethtest/newpayload.json`); with `--fcu` each VALID payload is
//!   followed by a forkchoiceUpdated made from it.
//!
//! `--skip N` leaves out the first N blocks (the node already holds them), `--warmup N`
//! sends the next N without measuring them, `--amount N` measures at most N after that;
//! `--interval-ms N` paces the blocks N ms apart (start to start) instead of back to back.
//!
//! Prints, over the measured blocks: the status counts, p50/p90/p99/max of newPayload
//! and of forkchoiceUpdated, gas per second (the blocks' gas over the newPayload time,
//! and over the wall time), and the slowest blocks with their gas.
//!
//! Exit status 0 when every newPayload after genesis and every forkchoiceUpdated is
//! VALID; 2 when any is not (EXPB itself counts only HTTP 200); 1 on an error (file,
//! connection). A genesis payload (block 0, as the ethtest file's first call) is a
//! proof-of-work block no payload can express: nodes answer it INVALID, and it is not
//! counted as a failure.

use clap::Parser;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    name = "moat-replay",
    about = "Replay engine_newPayload (and forkchoiceUpdated) calls and measure them"
)]
struct Args {
    /// Engine API endpoint, host:port (plain HTTP).
    #[arg(long, default_value = "127.0.0.1:8551")]
    engine: String,
    /// The JWT secret: hex, or a file holding it.
    #[arg(long)]
    jwtsecret: String,
    /// The newPayload requests: EXPB's payloads.jsonl (one a line), or a JSON array.
    #[arg(long, default_value = "../shared/testdata/ethtest/newpayload.json")]
    file: PathBuf,
    /// EXPB's fcus.jsonl: line i is sent after line i of --file.
    #[arg(long)]
    fcus: Option<PathBuf>,
    /// Without --fcus: after each VALID newPayload, make its block the head with a
    /// forkchoiceUpdated built from it, as a consensus client does (clients that keep
    /// recent state only near the head, geth among them, answer SYNCING to long runs of
    /// payloads without it).
    #[arg(long)]
    fcu: bool,
    /// Blocks at the start of the files not sent at all.
    #[arg(long, default_value_t = 0)]
    skip: u64,
    /// Blocks sent after the skipped ones but not measured.
    #[arg(long, default_value_t = 0)]
    warmup: u64,
    /// Most blocks measured after the warm-up (default: all).
    #[arg(long)]
    amount: Option<u64>,
    /// How many of the slowest blocks to list.
    #[arg(long, default_value_t = 10)]
    slowest: usize,
    /// Sends each newPayload at least this many milliseconds after the previous one
    /// (0: back to back). A node following a chain gets one block a slot (12 s on
    /// mainnet) and does its background work (writing the state out, syncing) between
    /// them; back to back, that work competes with the next block's.
    #[arg(long, default_value_t = 0)]
    interval_ms: u64,
}

/// A kept-alive HTTP/1.1 connection that posts JSON and reads `Content-Length` or
/// chunked bodies.
struct Client {
    stream: BufReader<TcpStream>,
    host: String,
}

impl Client {
    fn connect(host: &str) -> std::io::Result<Self> {
        let stream = TcpStream::connect(host)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(120)))?;
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
            .ok_or("bad status line (connection closed?)")?;
        let (mut length, mut chunked) = (0usize, false);
        loop {
            let mut line = String::new();
            self.stream.read_line(&mut line).map_err(io)?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().map_err(|_| "bad content-length")?;
                } else if name.eq_ignore_ascii_case("transfer-encoding")
                    && value.trim().eq_ignore_ascii_case("chunked")
                {
                    chunked = true;
                }
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                let mut size = String::new();
                self.stream.read_line(&mut size).map_err(io)?;
                let size = usize::from_str_radix(size.trim(), 16).map_err(|_| "bad chunk")?;
                let mut chunk = vec![0u8; size + 2];
                self.stream.read_exact(&mut chunk).map_err(io)?;
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..size]);
            }
        } else {
            body.resize(length, 0);
            self.stream.read_exact(&mut body).map_err(io)?;
        }
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }
}

/// The requests of `--file`, one at a time.
enum Requests {
    /// JSON lines, read as the replay goes.
    Lines(std::io::Lines<BufReader<File>>),
    /// A JSON array, read whole.
    Array(std::vec::IntoIter<Value>),
}

impl Requests {
    fn open(path: &PathBuf) -> Result<Self, String> {
        let bad = |e: &dyn std::fmt::Display| format!("cannot read {}: {e}", path.display());
        let mut file = File::open(path).map_err(|e| bad(&e))?;
        let mut first = [0u8; 1];
        let mut is_array = false;
        // The first non-blank byte tells the form.
        while file.read(&mut first).map_err(|e| bad(&e))? == 1 {
            if !first[0].is_ascii_whitespace() {
                is_array = first[0] == b'[';
                break;
            }
        }
        let file = File::open(path).map_err(|e| bad(&e))?;
        if is_array {
            let all: Vec<Value> =
                serde_json::from_reader(BufReader::new(file)).map_err(|e| bad(&e))?;
            Ok(Requests::Array(all.into_iter()))
        } else {
            Ok(Requests::Lines(
                BufReader::with_capacity(1 << 20, file).lines(),
            ))
        }
    }

    /// The next request as JSON text and parsed; `None` at the end. Blank lines are
    /// passed over.
    fn next_request(&mut self) -> Option<Result<(String, Value), String>> {
        match self {
            Requests::Array(items) => items.next().map(|v| Ok((v.to_string(), v))),
            Requests::Lines(lines) => loop {
                let line = match lines.next()? {
                    Ok(l) => l,
                    Err(e) => return Some(Err(e.to_string())),
                };
                let line = line.trim().trim_start_matches('\u{feff}');
                if line.is_empty() {
                    continue;
                }
                return Some(
                    serde_json::from_str(line)
                        .map(|v| (line.to_string(), v))
                        .map_err(|e| format!("not a JSON request: {e}")),
                );
            },
        }
    }
}

fn hex_u64(v: &Value) -> Option<u64> {
    v.as_str()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
}

/// The block's gas: the payload's `gasUsed` (EXPB's lines also carry it at the top).
fn gas_used(request: &Value) -> u64 {
    hex_u64(&request["params"][0]["gasUsed"])
        .or_else(|| request["gasUsed"].as_u64())
        .unwrap_or(0)
}

fn block_number(request: &Value) -> Option<u64> {
    hex_u64(&request["params"][0]["blockNumber"])
}

/// A forkchoiceUpdated to the block a newPayload request carried (V3 for V3+ payloads).
fn forkchoice_for(request: &Value) -> String {
    let hash = &request["params"][0]["blockHash"];
    let method = request["method"].as_str().unwrap_or_default();
    let version = if method.ends_with("V1") || method.ends_with("V2") {
        "V2"
    } else {
        "V3"
    };
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": request["id"],
        "method": format!("engine_forkchoiceUpdated{version}"),
        "params": [{ "headBlockHash": hash, "safeBlockHash": hash, "finalizedBlockHash": hash }, null],
    })
    .to_string()
}

/// One call: its status as the replay counts it, and its time.
fn send(
    client: &mut Client,
    secret: &[u8; 32],
    body: &str,
    fcu: bool,
) -> Result<(String, Duration), String> {
    let token = moat_rpc::engine::make_token(secret, moat_rpc::engine::unix_now());
    let t = Instant::now();
    let (code, response) = client.post(&token, body)?;
    let took = t.elapsed();
    let parsed: Value = serde_json::from_str(&response).unwrap_or(Value::Null);
    let result = if fcu {
        &parsed["result"]["payloadStatus"]["status"]
    } else {
        &parsed["result"]["status"]
    };
    let status = match (code, result.as_str(), parsed["error"]["message"].as_str()) {
        (200, Some(s), _) => s.to_string(),
        (200, None, Some(e)) => format!("error: {e}"),
        (code, _, _) => format!("http {code}"),
    };
    Ok((status, took))
}

/// What one measured block cost.
struct Measured {
    number: u64,
    gas: u64,
    new_payload: Duration,
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn latency_line(name: &str, mut times: Vec<Duration>) -> String {
    times.sort();
    format!(
        "{name:<14}p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} calls)",
        ms(percentile(&times, 0.50)),
        ms(percentile(&times, 0.90)),
        ms(percentile(&times, 0.99)),
        ms(times.last().copied().unwrap_or_default()),
        times.len()
    )
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// The replay; `Ok(false)` when a call was not VALID.
fn run(args: &Args) -> Result<bool, String> {
    let secret = match std::fs::read_to_string(&args.jwtsecret) {
        Ok(text) => moat_rpc::engine::parse_jwt_secret(&text),
        Err(_) => moat_rpc::engine::parse_jwt_secret(&args.jwtsecret),
    }
    .map_err(|_| "--jwtsecret is neither 32 bytes of hex nor a file holding them")?;
    let mut payloads = Requests::open(&args.file)?;
    let mut fcus = args.fcus.as_ref().map(Requests::open).transpose()?;
    let mut client = Client::connect(&args.engine)
        .map_err(|e| format!("cannot connect to {}: {e}", args.engine))?;

    let mut measured: Vec<Measured> = Vec::new();
    let mut fcu_times: Vec<Duration> = Vec::new();
    let mut np_statuses: BTreeMap<String, usize> = BTreeMap::new();
    let mut fcu_statuses: BTreeMap<String, usize> = BTreeMap::new();
    let mut failures = 0usize;
    let mut warm = 0u64;
    let mut index = 0u64;
    let mut wall = Duration::ZERO;
    let mut last_sent: Option<Instant> = None;
    loop {
        let limit_reached = args.amount.is_some_and(|a| measured.len() as u64 >= a);
        if limit_reached {
            break;
        }
        let Some(payload) = payloads.next_request() else {
            break;
        };
        let fcu_line = match fcus.as_mut().map(|f| f.next_request()) {
            None => None,
            Some(Some(line)) => Some(line),
            Some(None) => return Err(format!("fcus file ends before line {}", index + 1)),
        };
        index += 1;
        if index <= args.skip {
            continue;
        }
        let line = index;
        let (body, request) = payload.map_err(|e| format!("payload line {line}: {e}"))?;
        let fcu_body = match fcu_line {
            Some(f) => Some(f.map_err(|e| format!("fcu line {line}: {e}"))?.0),
            None => None,
        };
        let counted = warm >= args.warmup;
        if let Some(last) = last_sent {
            let due = last + Duration::from_millis(args.interval_ms);
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
        }
        let started = Instant::now();
        last_sent = Some(started);
        let (status, took) = send(&mut client, &secret, &body, false)
            .map_err(|e| format!("newPayload of line {line}: {e}"))?;
        let valid = status == "VALID";
        if !valid && block_number(&request) != Some(0) {
            failures += 1;
            eprintln!("line {line}: newPayload {status}");
        }
        let fcu_body = fcu_body.or_else(|| (args.fcu && valid).then(|| forkchoice_for(&request)));
        let mut fcu_took = None;
        let mut fcu_status = None;
        if let Some(fcu_body) = fcu_body {
            let (s, t) = send(&mut client, &secret, &fcu_body, true)
                .map_err(|e| format!("forkchoiceUpdated of line {line}: {e}"))?;
            if s != "VALID" {
                failures += 1;
                eprintln!("line {line}: forkchoiceUpdated {s}");
            }
            fcu_took = Some(t);
            fcu_status = Some(s);
        }
        if !counted {
            warm += 1;
            continue;
        }
        wall += started.elapsed();
        *np_statuses.entry(status).or_default() += 1;
        if let (Some(s), Some(t)) = (fcu_status, fcu_took) {
            *fcu_statuses.entry(s).or_default() += 1;
            fcu_times.push(t);
        }
        measured.push(Measured {
            number: block_number(&request).unwrap_or(line),
            gas: if valid { gas_used(&request) } else { 0 },
            new_payload: took,
        });
    }

    println!(
        "blocks        {} measured ({} skipped, {} warm-up)",
        measured.len(),
        args.skip.min(index),
        warm
    );
    for (status, n) in &np_statuses {
        println!("newPayload    {status}: {n}");
    }
    for (status, n) in &fcu_statuses {
        println!("fcu           {status}: {n}");
    }
    println!(
        "{}",
        latency_line(
            "newPayload",
            measured.iter().map(|m| m.new_payload).collect()
        )
    );
    if !fcu_times.is_empty() {
        println!("{}", latency_line("fcu", fcu_times));
    }
    let gas: u64 = measured.iter().map(|m| m.gas).sum();
    let busy: Duration = measured.iter().map(|m| m.new_payload).sum();
    println!(
        "throughput    {:.1} Mgas/s over newPayload time ({:.1} Mgas in {:.2} s); {:.1} Mgas/s over wall time ({:.2} s)",
        gas as f64 / 1e6 / busy.as_secs_f64().max(1e-9),
        gas as f64 / 1e6,
        busy.as_secs_f64(),
        gas as f64 / 1e6 / wall.as_secs_f64().max(1e-9),
        wall.as_secs_f64()
    );
    measured.sort_by_key(|m| std::cmp::Reverse(m.new_payload));
    if args.slowest > 0 && !measured.is_empty() {
        println!("slowest       block      gas (Mgas)   newPayload (ms)   Mgas/s");
        for m in measured.iter().take(args.slowest) {
            println!(
                "              #{:<9} {:>10.2}   {:>15.2}   {:>6.1}",
                m.number,
                m.gas as f64 / 1e6,
                ms(m.new_payload),
                m.gas as f64 / 1e6 / m.new_payload.as_secs_f64().max(1e-9)
            );
        }
    }
    if failures > 0 {
        println!("failures      {failures} calls not VALID");
    }
    Ok(failures == 0)
}
