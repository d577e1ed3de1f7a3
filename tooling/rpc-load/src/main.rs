//! `moat-rpc-load`: how fast a node takes valid transactions over JSON-RPC.
//!
//! Signs `--txs` EIP-1559 transfers ahead of time (not timed) from the funded accounts of
//! `--accounts` (the ethtest chain's `accounts.json`: address -> `{key}`), each sender's
//! nonces starting at its pending nonce as the node reports it (`eth_getTransactionCount`
//! with `"pending"`), so the tool can run twice against one node. Then sends them with
//! `eth_sendRawTransaction` over `--connections` kept-alive HTTP/1.1 connections.
//! Sender `i` belongs to connection `i % C`; a connection sends its senders'
//! transactions in nonce order, one request at a time, each after the answer to the one
//! before, so every sender's nonces arrive in order while the connections run side by
//! side. With the defaults (16 senders, 16 connections) each connection carries one
//! sender and the same number of transactions, so all 16 stay busy to the end. Any node
//! will do: moat, go-ethereum, others.
//!
//! That measures the most a node takes, and its latency there is mostly queueing: with
//! C calls always in flight, the mean latency is C / rate. `--rate R` offers a load
//! instead: the calls go out at fixed times, R a second in all (each connection's next
//! one at its time, or when the last is answered if that is later), and a call's latency
//! counts from when it was due, so a node that cannot keep up shows it in full rather
//! than slowing the client down (no coordinated omission).
//!
//! The client shares the machine with the node, so it is kept cheap and the same for
//! every node: one thread drives all the connections (non-blocking sockets, one `poll`
//! over them, then each ready socket is read or written), each request is encoded in full
//! before the clock starts (HTTP head and JSON body, sent with one `write`), and an answer
//! is looked at no further than its framing and whether it holds a `"result"` (an error
//! is parsed in full for its message). Its own CPU over the run (user + system) is
//! reported per transaction, and with `--node-pid` the node's beside it.
//!
//! Prints sent, accepted (answered with a hash), errors (counted by message, the first few
//! shown), wall time, txs/s (accepted / wall), the latency percentiles of the calls and
//! the CPU figures; `--json` prints the same as one JSON line. `--timeline FILE` writes
//! every answered call (connection, send time, latency) and the start on the monotonic
//! clock, to line a tail up with a `perf record -k mono` of the node. Loopback targets
//! only; everything stops at `--timeout-secs`, counted from the start, and what was done
//! by then is reported.
//!
//! ```text
//! cargo run --release -p moat-rpc-load -- --rpc 127.0.0.1:8545 --node-pid "$(pidof moat)"
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
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;
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
    #[arg(long, default_value_t = 16)]
    senders: usize,
    /// Concurrent keep-alive connections; sender i goes to connection i % connections.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Stop after this long (from the start) and report what was done.
    #[arg(long, default_value_t = 120)]
    timeout_secs: u64,
    /// The node's process id: its CPU over the run (user + system, from
    /// `/proc/<pid>/stat`) is reported beside the client's own.
    #[arg(long)]
    node_pid: Option<u32>,
    /// Write every answered call to this file, for finding what a tail is made of: a
    /// first line `start <CLOCK_MONOTONIC seconds>` (the first request, on the clock
    /// `perf record -k mono` uses), then `<connection> <sent, µs after the start>
    /// <latency µs>` per call, each connection's calls in order (with `--rate`, "sent"
    /// is when the call was due).
    #[arg(long)]
    timeline: Option<PathBuf>,
    /// Offered load in txs/s, all connections together: connection i's k-th call is due
    /// at start + (k·C + i) / rate (C connections) and goes out then, or when the answer
    /// to its last call comes if that is later. Its latency counts from when it was due,
    /// so a node that falls behind the rate shows it in full (no coordinated omission).
    /// Without it each connection sends its next call as soon as the last is answered.
    #[arg(long)]
    rate: Option<f64>,
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

/// Headers larger than this are refused.
const MAX_HEAD: usize = 64 << 10;

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

/// Time left until `deadline`, at least a millisecond (a zero timeout means none).
fn left(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// The full bytes of an HTTP/1.1 POST of `body` to `host`.
fn http_post(host: &str, body: &str) -> Vec<u8> {
    format!(
        "POST / HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// One whole HTTP answer found at the start of a buffer.
#[derive(Debug, PartialEq, Eq)]
struct Parsed {
    status: u16,
    body: Vec<u8>,
    /// Bytes of the buffer it spans.
    consumed: usize,
    /// The server closes the connection after it.
    close: bool,
}

/// Parses the answer at the start of `buf` when it is all there (`Ok(None)`: read more).
/// Its body is framed by `Content-Length`, chunked encoding, or, with neither, the end
/// of the stream (`eof`: the server has closed). Parsed no further than the status and
/// the framing headers.
fn parse_answer(buf: &[u8], eof: bool) -> io::Result<Option<Parsed>> {
    let Some(head_end) = find(buf, b"\r\n\r\n") else {
        if buf.len() > MAX_HEAD {
            return Err(invalid("answer headers too large"));
        }
        return Ok(None);
    };
    let head = std::str::from_utf8(&buf[..head_end])
        .map_err(|_| invalid("answer headers are not text"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid("bad status line"))?;
    let mut length = None;
    let mut chunked = false;
    let mut close = status_line.starts_with("HTTP/1.0");
    for line in lines {
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
    let mut at = head_end + 4;
    if chunked {
        let mut body = Vec::new();
        loop {
            let Some(eol) = find(&buf[at..], b"\r\n") else {
                return Ok(None);
            };
            let line = std::str::from_utf8(&buf[at..at + eol]).map_err(|_| invalid("bad chunk"))?;
            let size = line.trim().split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size, 16).map_err(|_| invalid("bad chunk size"))?;
            at += eol + 2;
            if size == 0 {
                // Trailers, up to the blank line.
                loop {
                    let Some(eol) = find(&buf[at..], b"\r\n") else {
                        return Ok(None);
                    };
                    at += eol + 2;
                    if eol == 0 {
                        return Ok(Some(Parsed {
                            status,
                            body,
                            consumed: at,
                            close,
                        }));
                    }
                }
            }
            if body.len() + size > MAX_BODY {
                return Err(invalid("answer too large"));
            }
            if buf.len() - at < size + 2 {
                return Ok(None);
            }
            body.extend_from_slice(&buf[at..at + size]);
            at += size + 2;
        }
    }
    if let Some(n) = length {
        if buf.len() - at < n {
            return Ok(None);
        }
        return Ok(Some(Parsed {
            status,
            body: buf[at..at + n].to_vec(),
            consumed: at + n,
            close,
        }));
    }
    // Neither: the body runs to the end of the stream.
    if buf.len() - at > MAX_BODY {
        return Err(invalid("answer too large"));
    }
    Ok(eof.then(|| Parsed {
        status,
        body: buf[at..].to_vec(),
        consumed: buf.len(),
        close: true,
    }))
}

/// A blocking kept-alive HTTP/1.1 connection, for the calls before the timed part.
struct Client {
    stream: TcpStream,
    host: String,
    buf: Vec<u8>,
    /// The server asked to close after its last answer.
    closed: bool,
}

impl Client {
    fn connect(addr: SocketAddr, deadline: Instant) -> io::Result<Self> {
        let stream =
            TcpStream::connect_timeout(&addr, left(deadline).min(Duration::from_secs(10)))?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            host: addr.to_string(),
            buf: Vec::new(),
            closed: false,
        })
    }

    /// Posts `body` (a JSON document), returns the status and the answer's body. Reads
    /// and writes give up at `deadline`.
    fn post(&mut self, body: &str, deadline: Instant) -> io::Result<(u16, Vec<u8>)> {
        let timed_out = |e: io::Error| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => io::Error::new(
                io::ErrorKind::TimedOut,
                "no answer before the deadline (--timeout-secs)",
            ),
            _ => e,
        };
        self.stream.set_read_timeout(Some(left(deadline)))?;
        self.stream.set_write_timeout(Some(left(deadline)))?;
        self.stream
            .write_all(&http_post(&self.host, body))
            .map_err(timed_out)?;
        let mut eof = false;
        loop {
            if let Some(p) = parse_answer(&self.buf, eof)? {
                self.buf.drain(..p.consumed);
                self.closed = p.close;
                return Ok((p.status, p.body));
            }
            if eof {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed by the server",
                ));
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).map_err(timed_out)?;
            eof = n == 0;
            self.buf.extend_from_slice(&chunk[..n]);
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

/// Whether an `eth_sendRawTransaction` answer is a success, looked at no further than
/// needed: a 200 whose body has a `"result"` member and no `"error"` one. Anything else
/// is parsed in full by [`answer`] for its message.
fn accepted(status: u16, body: &[u8]) -> bool {
    status == 200 && find(body, b"\"result\"").is_some() && find(body, b"\"error\"").is_none()
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

/// One pre-built `eth_sendRawTransaction` call: the whole HTTP request.
struct Job {
    sender: usize,
    nonce: u64,
    request: Vec<u8>,
}

/// What one connection did.
#[derive(Default)]
struct Report {
    /// Each answered call: when it was sent (since the start) and its latency.
    timeline: Vec<(Duration, Duration)>,
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

/// When a paced connection's calls are due (`--rate`).
#[derive(Debug, Clone, Copy)]
struct Pace {
    /// This connection's place among them.
    index: usize,
    connections: usize,
    /// Calls a second, all connections together.
    rate: f64,
}

impl Pace {
    /// When this connection's `k`-th call is due: the calls of all connections, in turn,
    /// one every 1/rate seconds.
    fn due(&self, start: Instant, k: usize) -> Instant {
        let slot = (k * self.connections + self.index) as f64;
        start + Duration::from_secs_f64(slot / self.rate)
    }
}

/// One connection of the timed part: its jobs, in order, and where it is with them.
struct Lane {
    jobs: Vec<Job>,
    /// The next job to send; the one in flight is `next - 1`.
    next: usize,
    stream: Option<TcpStream>,
    /// Bytes of the request in flight written so far.
    written: usize,
    /// When the request in flight was sent (with a pace, when it was due).
    in_flight: Option<Instant>,
    pace: Option<Pace>,
    buf: Vec<u8>,
    report: Report,
}

impl Lane {
    fn open(addr: SocketAddr, deadline: Instant) -> io::Result<TcpStream> {
        let stream =
            TcpStream::connect_timeout(&addr, left(deadline).min(Duration::from_secs(10)))?;
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        Ok(stream)
    }

    /// Writes what the socket takes of the request in flight.
    fn write_some(&mut self) -> io::Result<()> {
        let (Some(stream), Some(job)) = (&mut self.stream, self.jobs.get(self.next - 1)) else {
            return Ok(());
        };
        while self.written < job.request.len() {
            match stream.write(&job.request[self.written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// When the next job is due, if this connection is paced, idle and has one left.
    fn next_due(&self, start: Instant) -> Option<Instant> {
        let pace = self.pace?;
        (self.in_flight.is_none() && self.next < self.jobs.len())
            .then(|| pace.due(start, self.next))
    }

    /// Sends the next job, if any is left, it is due and there is time.
    fn send_next(&mut self, addr: SocketAddr, deadline: Instant, start: Instant) {
        while self.in_flight.is_none() && self.next < self.jobs.len() {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            let due = self.next_due(start);
            if due.is_some_and(|due| due > now) {
                return;
            }
            if self.stream.is_none() {
                match Lane::open(addr, deadline) {
                    Ok(s) => self.stream = Some(s),
                    Err(e) => {
                        self.report.transport.push(format!("connect: {e}"));
                        self.next = self.jobs.len();
                        return;
                    }
                }
            }
            self.next += 1;
            self.report.sent += 1;
            self.written = 0;
            self.buf.clear();
            self.in_flight = Some(due.unwrap_or(now));
            if let Err(e) = self.write_some() {
                self.fail(format!("request: {e}"));
            }
        }
    }

    /// The request in flight got no answer: counted, and the connection dropped (the
    /// next job opens a new one).
    fn fail(&mut self, message: String) {
        self.report.unanswered += 1;
        self.report.transport.push(message);
        self.in_flight = None;
        self.stream = None;
    }

    /// Reads what has arrived; a whole answer is recorded and ends the request in flight.
    fn read_some(&mut self, start: Instant) {
        let Some(stream) = &mut self.stream else {
            return;
        };
        let mut eof = false;
        loop {
            let len = self.buf.len();
            self.buf.resize(len + 4096, 0);
            match stream.read(&mut self.buf[len..]) {
                Ok(n) => {
                    self.buf.truncate(len + n);
                    if n == 0 {
                        eof = true;
                        break;
                    }
                }
                Err(e) => {
                    self.buf.truncate(len);
                    match e.kind() {
                        io::ErrorKind::WouldBlock => break,
                        io::ErrorKind::Interrupted => {}
                        _ => {
                            self.fail(format!("request: {e}"));
                            return;
                        }
                    }
                }
            }
        }
        let parsed = match parse_answer(&self.buf, eof) {
            Ok(Some(p)) => p,
            Ok(None) if eof => {
                self.fail("request: connection closed by the server".into());
                return;
            }
            Ok(None) => return,
            Err(e) => {
                self.fail(format!("request: {e}"));
                return;
            }
        };
        let now = Instant::now();
        let sent_at = self.in_flight.take().unwrap_or(now);
        self.report.timeline.push((sent_at - start, now - sent_at));
        self.report.finished = Some(now);
        if accepted(parsed.status, &parsed.body) {
            self.report.accepted += 1;
        } else {
            let job = &self.jobs[self.next - 1];
            let message = match answer(parsed.status, &parsed.body) {
                Answer::Error(e) => e,
                Answer::Result(r) => format!("http {}: result {r}", parsed.status),
            };
            self.report
                .errors
                .push((sent_at - start, job.sender, job.nonce, message));
        }
        self.buf.drain(..parsed.consumed);
        if parsed.close || eof {
            self.stream = None;
        }
    }
}

/// Runs every lane to its end (or the deadline) on this one thread: one `poll` over all
/// sockets, then each ready socket is written or read. Returns the lanes' reports and
/// when the first request went out.
fn run_lanes(
    addr: SocketAddr,
    queues: Vec<Vec<Job>>,
    deadline: Instant,
    rate: Option<f64>,
) -> (Vec<Report>, Instant) {
    let connections = queues.len();
    let mut lanes: Vec<Lane> = queues
        .into_iter()
        .enumerate()
        .map(|(index, jobs)| {
            let mut lane = Lane {
                jobs,
                next: 0,
                stream: None,
                written: 0,
                in_flight: None,
                pace: rate.map(|rate| Pace {
                    index,
                    connections,
                    rate,
                }),
                buf: Vec::with_capacity(4096),
                report: Report::default(),
            };
            // Connected before the clock starts.
            match Lane::open(addr, deadline) {
                Ok(s) => lane.stream = Some(s),
                Err(e) => {
                    lane.report.transport.push(format!("connect: {e}"));
                    lane.next = lane.jobs.len();
                }
            }
            lane
        })
        .collect();
    let start = Instant::now();
    for lane in &mut lanes {
        lane.send_next(addr, deadline, start);
    }
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(lanes.len());
    let mut which: Vec<usize> = Vec::with_capacity(lanes.len());
    loop {
        fds.clear();
        which.clear();
        for (i, lane) in lanes.iter().enumerate() {
            if let (Some(stream), Some(_)) = (&lane.stream, lane.in_flight) {
                let pending = lane.written < lane.jobs[lane.next - 1].request.len();
                fds.push(libc::pollfd {
                    fd: stream.as_raw_fd(),
                    events: libc::POLLIN | if pending { libc::POLLOUT } else { 0 },
                    revents: 0,
                });
                which.push(i);
            }
        }
        // Paced connections waiting for their next call's time.
        let due = lanes.iter().filter_map(|l| l.next_due(start)).min();
        if fds.is_empty() && due.is_none() {
            break;
        }
        let now = Instant::now();
        if now >= deadline {
            for &i in &which {
                lanes[i].report.unanswered += 1;
            }
            break;
        }
        let wait = due.map_or(left(deadline), |d| {
            d.saturating_duration_since(now).min(left(deadline))
        });
        let timeout = libc::timespec {
            tv_sec: wait.as_secs() as libc::time_t,
            tv_nsec: wait.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs (none at all is
        // allowed: then it only sleeps), `timeout` a valid timespec, no signal mask.
        let n = unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                &timeout,
                std::ptr::null(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            for &i in &which {
                lanes[i].fail(format!("poll: {e}"));
            }
            break;
        }
        for (fd, &i) in fds.iter().zip(&which) {
            let lane = &mut lanes[i];
            if fd.revents & libc::POLLOUT != 0
                && let Err(e) = lane.write_some()
            {
                lane.fail(format!("request: {e}"));
            } else if fd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                lane.read_some(start);
            }
            // Answered, or failed: on with the next job (a failed connection is reopened).
            if lane.in_flight.is_none() {
                lane.send_next(addr, deadline, start);
            }
        }
        // Paced: whatever has come due meanwhile.
        if due.is_some() {
            for lane in &mut lanes {
                lane.send_next(addr, deadline, start);
            }
        }
    }
    (lanes.into_iter().map(|l| l.report).collect(), start)
}

/// CPU time of this process so far, every thread's, user and system.
fn process_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; the clock id is a constant.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// User + system CPU of process `pid` so far (fields 14 and 15 of `/proc/<pid>/stat`,
/// in clock ticks: 10 ms resolution).
fn node_cpu(pid: u32) -> Result<Duration, String> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    // The command name (field 2) is in parentheses and may hold spaces: count from its end.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| format!("{path}: unexpected format"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 (state) is fields[0], so field n is fields[n - 3].
    let ticks = |n: usize| -> Result<u64, String> {
        fields
            .get(n - 3)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| format!("{path}: no field {n}"))
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as u64 } else { 100 };
    let total = ticks(14)? + ticks(15)?;
    Ok(Duration::from_nanos(total * 1_000_000_000 / hz))
}

/// The `--timeline` file's text (see [`Args::timeline`]).
fn timeline(reports: &[Report], start: Instant) -> String {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let now = Duration::new(now.tv_sec as u64, now.tv_nsec as u32);
    let at = now.saturating_sub(start.elapsed());
    let mut out = format!("start {}.{:09}\n", at.as_secs(), at.subsec_nanos());
    for (i, r) in reports.iter().enumerate() {
        for (sent, latency) in &r.timeline {
            out.push_str(&format!(
                "{i} {} {}\n",
                sent.as_micros(),
                latency.as_micros()
            ));
        }
    }
    out
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
    if let Some(rate) = args.rate
        && !(rate.is_finite() && rate >= 1.0)
    {
        eprintln!("error: --rate {rate}: txs/s must be a number of at least 1");
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
    let host = args.rpc.to_string();
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
                request: http_post(&host, &body.to_string()),
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
    let node_before = args.node_pid.map(node_cpu);
    let cpu_start = process_cpu();
    let (reports, start) = run_lanes(args.rpc, queues, deadline, args.rate);
    let end = reports
        .iter()
        .filter_map(|r| r.finished)
        .max()
        .unwrap_or(start);
    let wall = end.saturating_duration_since(start);
    // The timed part ran on this thread alone: the process's CPU since is its.
    let client_cpu = process_cpu().saturating_sub(cpu_start);
    let node_cpu_used = match (node_before, args.node_pid.map(node_cpu)) {
        (Some(Ok(a)), Some(Ok(b))) => Some(b.saturating_sub(a)),
        (Some(Err(e)), _) | (_, Some(Err(e))) => {
            eprintln!("warning: node CPU not read: {e}");
            None
        }
        _ => None,
    };
    let timed_out = Instant::now() >= deadline;

    let mut latencies: Vec<Duration> = Vec::with_capacity(args.txs);
    let mut errors = Vec::new();
    let mut transport = Vec::new();
    let (mut sent, mut accepted, mut unanswered) = (0, 0, 0);
    if let Some(path) = &args.timeline
        && let Err(e) = std::fs::write(path, timeline(&reports, start))
    {
        eprintln!("warning: timeline not written to {}: {e}", path.display());
    }
    for r in reports {
        latencies.extend(r.timeline.iter().map(|&(_, latency)| latency));
        errors.extend(r.errors);
        transport.extend(r.transport);
        sent += r.sent;
        accepted += r.accepted;
        unanswered += r.unanswered;
    }
    latencies.sort();
    errors.sort_by_key(|e| e.0);
    let per_tx_us = |d: Duration| d.as_secs_f64() * 1e6 / sent.max(1) as f64;
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
            "rate": args.rate,
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
            "client_cpu_s": client_cpu.as_secs_f64(),
            "client_cpu_us_per_tx": per_tx_us(client_cpu),
            "node_cpu_s": node_cpu_used.map(|d| d.as_secs_f64()),
            "node_cpu_us_per_tx": node_cpu_used.map(per_tx_us),
            "errors_by_message": by_message,
        });
        println!("{line}");
    } else {
        println!("target:            {}", args.rpc);
        println!(
            "transactions:      {} from {} senders over {connections} connections",
            args.txs, args.senders
        );
        if let Some(rate) = args.rate {
            println!("offered:           {rate:.0} tx/s (latency from when each call was due)");
        }
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
        println!(
            "client CPU:        {:.3} s ({:.1} µs/tx, user + system, the client process)",
            client_cpu.as_secs_f64(),
            per_tx_us(client_cpu)
        );
        if let Some(cpu) = node_cpu_used {
            println!(
                "node CPU:          {:.2} s ({:.0} µs/tx, user + system, from /proc/<pid>/stat)",
                cpu.as_secs_f64(),
                per_tx_us(cpu)
            );
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 42\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"0xab12\"}";

    #[test]
    fn a_content_length_answer_is_whole_only_with_all_its_bytes() {
        for cut in 0..OK.len() {
            assert_eq!(
                parse_answer(&OK[..cut], false).unwrap(),
                None,
                "cut at {cut}"
            );
        }
        // Two answers back to back: the first is taken, the second left.
        let two = [OK, OK].concat();
        let p = parse_answer(&two, false).unwrap().unwrap();
        assert_eq!(p.status, 200);
        assert_eq!(p.consumed, OK.len());
        assert!(!p.close);
        assert!(accepted(p.status, &p.body));
    }

    #[test]
    fn the_timeline_lists_each_call_by_connection_after_the_start_line() {
        let us = Duration::from_micros;
        let reports = [
            Report {
                timeline: vec![(us(0), us(900)), (us(950), us(1_200))],
                ..Default::default()
            },
            Report {
                timeline: vec![(us(3), us(14_000))],
                ..Default::default()
            },
        ];
        let text = timeline(&reports, Instant::now());
        let lines: Vec<&str> = text.lines().collect();
        let start: f64 = lines[0].strip_prefix("start ").unwrap().parse().unwrap();
        assert!(start > 0.0);
        assert_eq!(lines[1..], ["0 0 900", "0 950 1200", "1 3 14000"]);
    }

    #[test]
    fn paced_calls_are_due_in_turn_across_connections_at_the_rate() {
        let start = Instant::now();
        let pace = |index| Pace {
            index,
            connections: 4,
            rate: 1_000.0,
        };
        let ms = |k: usize, i: usize| (pace(i).due(start, k) - start).as_secs_f64() * 1e3;
        // One call a millisecond in all: connection 1's calls at 1, 5, 9 ms.
        assert!((ms(0, 1) - 1.0).abs() < 1e-6);
        assert!((ms(2, 1) - 9.0).abs() < 1e-6);
        // Every slot once: the 4 connections' first 3 calls fill 0..12 ms.
        let mut slots: Vec<u64> = (0..4)
            .flat_map(|i| (0..3).map(move |k| (k, i)))
            .map(|(k, i)| ms(k, i).round() as u64)
            .collect();
        slots.sort();
        assert_eq!(slots, (0..12).collect::<Vec<u64>>());
    }

    #[test]
    fn chunked_and_read_to_close_answers_are_framed() {
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n";
        assert_eq!(
            parse_answer(&chunked[..chunked.len() - 1], false).unwrap(),
            None
        );
        let p = parse_answer(chunked, false).unwrap().unwrap();
        assert_eq!(p.body, b"{\"a\":1}");
        assert_eq!(p.consumed, chunked.len());

        let to_close = b"HTTP/1.0 200 OK\r\n\r\n{\"result\":1}";
        assert_eq!(
            parse_answer(to_close, false).unwrap(),
            None,
            "waits for the end"
        );
        let p = parse_answer(to_close, true).unwrap().unwrap();
        assert!(p.close);
        assert_eq!(p.body, b"{\"result\":1}");

        let closing =
            b"HTTP/1.1 429 Too Many Requests\r\nConnection: close\r\nContent-Length: 2\r\n\r\nno";
        let p = parse_answer(closing, false).unwrap().unwrap();
        assert_eq!((p.status, p.close), (429, true));
        assert!(!accepted(p.status, &p.body));
    }

    #[test]
    fn errors_are_not_counted_as_accepted_and_keep_their_message() {
        let body = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"nonce too low"}}"#;
        assert!(!accepted(200, body));
        assert!(matches!(answer(200, body), Answer::Error(m) if m == "nonce too low"));
        assert!(parse_answer(b"HTTP/1.1 abc\r\n\r\n", false).is_err());
        assert!(parse_answer(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", false).is_err());
    }
}
