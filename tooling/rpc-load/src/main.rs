//! `moat-rpc-load`: how fast a node takes valid transactions over JSON-RPC.
//!
//! Signs `--txs` EIP-1559 transfers ahead of time (not timed) from the funded accounts of
//! `--accounts` (the ethtest chain's `accounts.json`: address -> `{key}`), each sender's
//! nonces starting at its pending nonce as the node reports it (`eth_getTransactionCount`
//! with `"pending"`), so the tool can run twice against one node. Then sends them with
//! `eth_sendRawTransaction` over `--connections` kept-alive HTTP/1.1 connections, one
//! thread each. Sender `i` belongs to connection `i % C`; a connection sends its senders'
//! transactions in nonce order, one request at a time, each after the answer to the one
//! before, so every sender's nonces arrive in order while the connections run side by
//! side. Any node will do: moat, go-ethereum, others.
//!
//! Prints sent, accepted (answered with a hash), errors (counted by message, the first few
//! shown), wall time, txs/s (accepted / wall) and the latency percentiles of the calls;
//! `--json` prints the same figures as one JSON line. Loopback targets only; everything
//! stops at `--timeout-secs`, counted from the start, and what was done by then is
//! reported.
//!
//! ```text
//! cargo run --release -p moat-rpc-load -- --rpc 127.0.0.1:8545 --txs 4000 --connections 16
//! ```
//!
//! Exit status 0 when every transaction was accepted, 2 when some were not, 1 when the
//! run could not start.

use alloy_primitives::{Address, B256, Bytes, TxKind, U256, hex};
use clap::Parser;
use moat_common::PooledTransaction;
use moat_common::transaction::{Eip1559Tx, SignedTransaction, Transaction};
use moat_crypto::secp::Signer;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    name = "moat-rpc-load",
    about = "Send pre-signed transfers with eth_sendRawTransaction and measure ingestion"
)]
struct Args {
    /// JSON-RPC endpoint, ip:port (plain HTTP); 127.0.0.0/8 only.
    #[arg(long, default_value = "127.0.0.1:8545")]
    rpc: SocketAddr,
    /// Funded keys: a JSON object of address -> {"key": "0x…"}.
    #[arg(long, default_value = "../shared/testdata/ethtest/accounts.json")]
    accounts: PathBuf,
    /// Chain id the transactions are signed for.
    #[arg(long, default_value_t = 3_503_995_874_084_926)]
    chain_id: u64,
    /// Transactions to send.
    #[arg(long, default_value_t = 4_000)]
    txs: usize,
    /// Senders (the first accounts of the file); the txs are spread evenly over them.
    #[arg(long, default_value_t = 20)]
    senders: usize,
    /// Concurrent keep-alive connections; sender i goes to connection i % connections.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Stop after this long (from the start) and report what was done.
    #[arg(long, default_value_t = 120)]
    timeout_secs: u64,
    /// Print the figures as one JSON line instead of a table.
    #[arg(long)]
    json: bool,
}

const MAX_FEE: u128 = 10_000_000_000;
const TIP: u128 = 1_000_000_000;
const GAS: u64 = 21_000;
const RECIPIENT: Address = Address::repeat_byte(0x55);
/// Bodies above this are refused (the answers here are a few hundred bytes).
const MAX_BODY: usize = 16 << 20;

/// A kept-alive HTTP/1.1 connection that posts JSON; reads `Content-Length`, chunked and
/// read-to-close bodies.
struct Client {
    stream: BufReader<TcpStream>,
    addr: SocketAddr,
    /// The server asked to close after its last answer.
    closed: bool,
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

/// Time left until `deadline`, at least a millisecond (a zero timeout means none).
fn left(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

impl Client {
    fn connect(addr: SocketAddr, deadline: Instant) -> io::Result<Self> {
        let stream =
            TcpStream::connect_timeout(&addr, left(deadline).min(Duration::from_secs(10)))?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream: BufReader::new(stream),
            addr,
            closed: false,
        })
    }

    fn read_line(&mut self) -> io::Result<String> {
        let mut line = String::new();
        if self.stream.read_line(&mut line)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed by the server",
            ));
        }
        Ok(line)
    }

    /// Posts `body`, returns the status and the answer's body. Reads and writes give up
    /// at `deadline`.
    fn post(&mut self, body: &str, deadline: Instant) -> io::Result<(u16, Vec<u8>)> {
        self.exchange(body, deadline).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => io::Error::new(
                io::ErrorKind::TimedOut,
                "no answer before the deadline (--timeout-secs)",
            ),
            _ => e,
        })
    }

    fn exchange(&mut self, body: &str, deadline: Instant) -> io::Result<(u16, Vec<u8>)> {
        let tcp = self.stream.get_ref();
        tcp.set_read_timeout(Some(left(deadline)))?;
        tcp.set_write_timeout(Some(left(deadline)))?;
        let request = format!(
            "POST / HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        self.stream.get_mut().write_all(request.as_bytes())?;

        let status_line = self.read_line()?;
        let status: u16 = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| invalid("bad status line"))?;
        let mut length = None;
        let mut chunked = false;
        let mut close = status_line.starts_with("HTTP/1.0");
        loop {
            let line = self.read_line()?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                let n: usize = value.parse().map_err(|_| invalid("bad content-length"))?;
                if n > MAX_BODY {
                    return Err(invalid("answer too large"));
                }
                length = Some(n);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.to_ascii_lowercase().contains("chunked");
            } else if name.eq_ignore_ascii_case("connection") {
                close = value.eq_ignore_ascii_case("close");
            }
        }
        let body = if chunked {
            self.read_chunked()?
        } else if let Some(n) = length {
            let mut body = vec![0u8; n];
            self.stream.read_exact(&mut body)?;
            body
        } else {
            close = true;
            let mut body = Vec::new();
            (&mut self.stream)
                .take(MAX_BODY as u64)
                .read_to_end(&mut body)?;
            body
        };
        self.closed = close;
        Ok((status, body))
    }

    fn read_chunked(&mut self) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line = self.read_line()?;
            let size = line.trim().split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size, 16).map_err(|_| invalid("bad chunk size"))?;
            if size == 0 {
                while !self.read_line()?.trim_end().is_empty() {}
                return Ok(body);
            }
            if body.len() + size > MAX_BODY {
                return Err(invalid("answer too large"));
            }
            let start = body.len();
            body.resize(start + size, 0);
            self.stream.read_exact(&mut body[start..])?;
            let mut crlf = [0u8; 2];
            self.stream.read_exact(&mut crlf)?;
        }
    }
}

/// What one JSON-RPC call came to.
enum Answer {
    Result(Value),
    Error(String),
}

fn answer(status: u16, body: &[u8]) -> Answer {
    let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if let Some(result) = parsed.get("result") {
        return Answer::Result(result.clone());
    }
    if let Some(message) = parsed["error"]["message"].as_str() {
        return Answer::Error(message.to_string());
    }
    let text = String::from_utf8_lossy(body);
    let text: String = text.chars().take(120).collect();
    Answer::Error(format!("http {status}: {}", text.trim()))
}

fn load_signers(path: &PathBuf) -> Result<Vec<Signer>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let accounts: BTreeMap<String, Value> =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut signers = Vec::with_capacity(accounts.len());
    for (address, entry) in &accounts {
        let address =
            Address::from_str(address).map_err(|e| format!("bad address {address}: {e}"))?;
        let key = entry["key"]
            .as_str()
            .and_then(|k| B256::from_str(k).ok())
            .ok_or_else(|| format!("no 32-byte key for {address}"))?;
        let signer = Signer::from_bytes(&key).ok_or_else(|| format!("bad key for {address}"))?;
        if signer.address() != address {
            return Err(format!(
                "the key given for {address} belongs to {}",
                signer.address()
            ));
        }
        signers.push(signer);
    }
    Ok(signers)
}

fn pending_nonce(client: &mut Client, address: Address, deadline: Instant) -> Result<u64, String> {
    let body = json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "eth_getTransactionCount",
        "params": [address, "pending"],
    });
    let (status, response) = client
        .post(&body.to_string(), deadline)
        .map_err(|e| e.to_string())?;
    match answer(status, &response) {
        Answer::Result(Value::String(s)) => u64::from_str_radix(s.trim_start_matches("0x"), 16)
            .map_err(|_| format!("bad nonce {s}")),
        Answer::Result(other) => Err(format!("unexpected answer {other}")),
        Answer::Error(e) => Err(e),
    }
}

/// One pre-built `eth_sendRawTransaction` call.
struct Job {
    sender: usize,
    nonce: u64,
    body: String,
}

/// What one connection did.
#[derive(Default)]
struct Report {
    latencies: Vec<Duration>,
    sent: usize,
    accepted: usize,
    /// Error answers: when (since the start), sender, nonce, message.
    errors: Vec<(Duration, usize, u64, String)>,
    /// Sent without an answer (connection failed, or the deadline came).
    unanswered: usize,
    /// Transport failures: message.
    transport: Vec<String>,
    finished: Option<Instant>,
}

fn run_connection(
    addr: SocketAddr,
    jobs: Vec<Job>,
    barrier: Arc<Barrier>,
    deadline: Instant,
) -> Report {
    let mut report = Report::default();
    let mut client = Client::connect(addr, deadline);
    barrier.wait();
    let start = Instant::now();
    for job in &jobs {
        if Instant::now() >= deadline {
            break;
        }
        let c = match &mut client {
            Ok(c) => c,
            Err(e) => {
                report.transport.push(format!("connect: {e}"));
                break;
            }
        };
        report.sent += 1;
        let t = Instant::now();
        match c.post(&job.body, deadline) {
            Ok((status, body)) => {
                report.latencies.push(t.elapsed());
                match answer(status, &body) {
                    Answer::Result(_) => report.accepted += 1,
                    Answer::Error(e) => {
                        report.errors.push((t - start, job.sender, job.nonce, e));
                    }
                }
                if c.closed {
                    client = Client::connect(addr, deadline);
                }
            }
            Err(e) => {
                report.unanswered += 1;
                if Instant::now() < deadline {
                    report.transport.push(format!("request: {e}"));
                    client = Client::connect(addr, deadline);
                }
            }
        }
    }
    report.finished = Some(Instant::now());
    report
}

/// Nearest-rank percentile of sorted latencies, in milliseconds.
fn percentile_ms(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1e3
}

fn main() -> ExitCode {
    let args = Args::parse();
    let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    match args.rpc {
        SocketAddr::V4(a) if a.ip().is_loopback() => {}
        other => {
            eprintln!(
                "error: --rpc {other} is not a 127.0.0.0/8 address; this tool only loads loopback nodes"
            );
            return ExitCode::from(1);
        }
    }
    if args.txs == 0 || args.senders == 0 || args.connections == 0 {
        eprintln!("error: --txs, --senders and --connections must be at least 1");
        return ExitCode::from(1);
    }
    let signers = match load_signers(&args.accounts) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    if args.senders > signers.len() {
        eprintln!(
            "error: --senders {} but {} holds {} accounts",
            args.senders,
            args.accounts.display(),
            signers.len()
        );
        return ExitCode::from(1);
    }
    let signers = &signers[..args.senders];

    // Pending nonces, so a second run against the same node continues where the first left.
    let mut nonces = Vec::with_capacity(signers.len());
    {
        let mut client = match Client::connect(args.rpc, deadline) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: cannot connect to {}: {e}", args.rpc);
                return ExitCode::from(1);
            }
        };
        for s in signers {
            match pending_nonce(&mut client, s.address(), deadline) {
                Ok(n) => nonces.push(n),
                Err(e) => {
                    eprintln!("error: eth_getTransactionCount({}): {e}", s.address());
                    return ExitCode::from(1);
                }
            }
            if client.closed {
                match Client::connect(args.rpc, deadline) {
                    Ok(c) => client = c,
                    Err(e) => {
                        eprintln!("error: cannot connect to {}: {e}", args.rpc);
                        return ExitCode::from(1);
                    }
                }
            }
        }
    }

    // Sign everything up front: sender j gets txs / senders, the first txs % senders one more.
    eprintln!(
        "signing {} transfers from {} senders…",
        args.txs, args.senders
    );
    let mut per_sender: Vec<Vec<Job>> = Vec::with_capacity(signers.len());
    let mut id = 0u64;
    for (j, signer) in signers.iter().enumerate() {
        let count = args.txs / args.senders + usize::from(j < args.txs % args.senders);
        let mut jobs = Vec::with_capacity(count);
        for k in 0..count as u64 {
            let nonce = nonces[j] + k;
            let tx = Transaction::Eip1559(Eip1559Tx {
                chain_id: args.chain_id,
                nonce,
                max_priority_fee_per_gas: TIP,
                max_fee_per_gas: MAX_FEE,
                gas_limit: GAS,
                to: TxKind::Call(RECIPIENT),
                value: U256::from(1),
                input: Bytes::new(),
                access_list: Vec::new(),
            });
            let raw =
                PooledTransaction::new(SignedTransaction::sign(tx, signer), None).encoded_2718();
            id += 1;
            let body = json!({
                "jsonrpc": "2.0",
                "id": id,
                "method": "eth_sendRawTransaction",
                "params": [hex::encode_prefixed(raw)],
            });
            jobs.push(Job {
                sender: j,
                nonce,
                body: body.to_string(),
            });
        }
        per_sender.push(jobs);
    }

    // Whole senders per connection; a connection takes its senders' txs in turn, each
    // sender's in nonce order.
    let connections = args.connections.min(args.senders);
    let mut queues: Vec<Vec<Vec<Job>>> = (0..connections).map(|_| Vec::new()).collect();
    for (j, jobs) in per_sender.into_iter().enumerate() {
        queues[j % connections].push(jobs);
    }
    let queues: Vec<Vec<Job>> = queues
        .into_iter()
        .map(|senders| {
            let mut iters: Vec<_> = senders.into_iter().map(|v| v.into_iter()).collect();
            let mut out = Vec::new();
            loop {
                let before = out.len();
                for it in &mut iters {
                    out.extend(it.next());
                }
                if out.len() == before {
                    break out;
                }
            }
        })
        .collect();

    eprintln!("sending over {connections} connections to {}…", args.rpc);
    let barrier = Arc::new(Barrier::new(connections + 1));
    let handles: Vec<_> = queues
        .into_iter()
        .map(|jobs| {
            let barrier = barrier.clone();
            let addr = args.rpc;
            std::thread::spawn(move || run_connection(addr, jobs, barrier, deadline))
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let reports: Vec<Report> = handles
        .into_iter()
        .map(|h| h.join().expect("connection thread"))
        .collect();
    let end = reports
        .iter()
        .filter_map(|r| r.finished)
        .max()
        .unwrap_or(start);
    let wall = end.saturating_duration_since(start);
    let timed_out = Instant::now() >= deadline;

    let mut latencies: Vec<Duration> = Vec::with_capacity(args.txs);
    let mut errors = Vec::new();
    let mut transport = Vec::new();
    let (mut sent, mut accepted, mut unanswered) = (0, 0, 0);
    for r in reports {
        latencies.extend(r.latencies);
        errors.extend(r.errors);
        transport.extend(r.transport);
        sent += r.sent;
        accepted += r.accepted;
        unanswered += r.unanswered;
    }
    latencies.sort();
    errors.sort_by_key(|e| e.0);
    let mut by_message: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, _, _, message) in &errors {
        *by_message.entry(message).or_default() += 1;
    }
    let throughput = accepted as f64 / wall.as_secs_f64().max(1e-9);
    let (p50, p90, p99, max) = (
        percentile_ms(&latencies, 0.50),
        percentile_ms(&latencies, 0.90),
        percentile_ms(&latencies, 0.99),
        latencies.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
    );

    if args.json {
        let line = json!({
            "rpc": args.rpc.to_string(),
            "txs": args.txs,
            "senders": args.senders,
            "connections": connections,
            "sent": sent,
            "accepted": accepted,
            "errors": errors.len(),
            "unanswered": unanswered,
            "unsent": args.txs - sent,
            "timed_out": timed_out,
            "wall_s": wall.as_secs_f64(),
            "tx_per_s": throughput,
            "p50_ms": p50,
            "p90_ms": p90,
            "p99_ms": p99,
            "max_ms": max,
            "errors_by_message": by_message,
        });
        println!("{line}");
    } else {
        println!("target:            {}", args.rpc);
        println!(
            "transactions:      {} from {} senders over {connections} connections",
            args.txs, args.senders
        );
        println!("sent:              {sent}");
        println!("accepted:          {accepted}");
        println!("errors:            {}", errors.len());
        if unanswered > 0 || sent < args.txs {
            println!(
                "unanswered:        {unanswered} (not sent: {})",
                args.txs - sent
            );
        }
        println!(
            "wall time:         {:.3} s{}",
            wall.as_secs_f64(),
            if timed_out { " (timed out)" } else { "" }
        );
        println!("throughput:        {throughput:.0} tx/s (accepted / wall)");
        println!(
            "latency:           p50 {p50:.2} ms, p90 {p90:.2} ms, p99 {p99:.2} ms, max {max:.2} ms"
        );
        for (message, n) in &by_message {
            println!("error ×{n:<6}      {message}");
        }
    }
    for (i, (at, sender, nonce, message)) in errors.iter().take(5).enumerate() {
        eprintln!(
            "error {}: at {:.3} s, {} nonce {nonce}: {message}",
            i + 1,
            at.as_secs_f64(),
            signers[*sender].address()
        );
    }
    for message in transport.iter().take(5) {
        eprintln!("transport: {message}");
    }
    if accepted == args.txs {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    }
}
