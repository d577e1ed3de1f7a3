//! The accept loop and connection handling of moat's RPC servers (the public HTTP and
//! WebSocket ports and the engine port), in place of jsonrpsee's own, which sets no read
//! timeouts, caps nothing per client address and retries a failed accept at once.
//!
//! ```text
//!  accept ─▶ error? back off (EMFILE: 10 ms doubling to 1 s), log at a bounded rate
//!         ─▶ connection table: over the total cap or the per-IP cap? close at once
//!         ─▶ connection task: hyper (HTTP/1.1, h2c, WebSocket upgrades) over a socket
//!            that reports its reads and writes to the connection's clock
//!              └─ watchdog: headers not in within the read-header timeout, idle past
//!                 the idle timeout, a write stalled past the write timeout ─▶ closed
//! ```
//!
//! The watchdog is one timer per connection, never woken by the requests themselves: a
//! request only moves the connection's clock (a mutex, no wakeup, no timer change). The
//! timer is armed no later than the shortest timeout from now, and every deadline a later
//! event sets lies at least that far past the event, so none can fall before the timer
//! fires; when it fires, it re-reads the clock and closes the connection or re-arms.
//!
//! Timeouts follow go-ethereum's `rpc.HTTPTimeouts` (net/http's meanings): a request's
//! headers must arrive within `read_header` of its first byte (of the connection's start
//! for the first request), the whole request, body included, within `read` (the body
//! part is enforced by [`crate::limits::ReadBodyLayer`]); a connection waiting for its
//! next request is closed after `idle`; a response the client does not read is dropped
//! after `write` without progress, and a call still running after `write` is answered
//! with geth's -32002 "request timed out" ([`crate::limits::CallTimeoutLayer`]).
//! An upgraded WebSocket leaves the watchdog (its liveness is jsonrpsee's ping/pong) but
//! keeps its place in the connection table until it closes.

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use jsonrpsee::core::BoxError;
use jsonrpsee::server::{HttpBody, HttpRequest, HttpResponse, StopHandle};
use moat_common::net::host_key;
use moat_mempool::Record;
use moat_sched::{self as lanes, Lane};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tower::Service;

/// go-ethereum's `rpc.DefaultHTTPTimeouts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpTimeouts {
    /// Most time to read a whole request, headers and body (`--http.readtimeout`, 30 s).
    pub read: Duration,
    /// Most time to read a request's headers (30 s; geth's `ReadHeaderTimeout`).
    pub read_header: Duration,
    /// Most time a call may run, and a response write may make no progress
    /// (`--http.writetimeout`, 30 s).
    pub write: Duration,
    /// Most time a connection may wait for its next request (`--http.idletimeout`, 120 s).
    pub idle: Duration,
}

impl Default for HttpTimeouts {
    fn default() -> Self {
        Self {
            read: Duration::from_secs(30),
            read_header: Duration::from_secs(30),
            write: Duration::from_secs(30),
            idle: Duration::from_secs(120),
        }
    }
}

/// How many connections a table admits: in all, and from one client address (an IPv4
/// address, or an IPv6 /64).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Most connections open at once.
    pub total: usize,
    /// Most connections open at once from one client address.
    pub per_ip: usize,
}

/// Open connections, in all and per client address, against [`ConnLimits`]. Shared by
/// the servers it covers; a slot is held by a [`ConnSlot`] and given back on drop.
#[derive(Debug)]
pub struct ConnTable {
    limits: ConnLimits,
    open: Mutex<(usize, HashMap<IpAddr, usize>)>,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The table already holds its `total` connections.
    Total,
    /// The client's address already holds its `per_ip` connections.
    PerIp,
}

impl ConnTable {
    /// Limits below 1 are taken as 1.
    pub fn new(limits: ConnLimits) -> Arc<Self> {
        Arc::new(Self {
            limits: ConnLimits {
                total: limits.total.max(1),
                per_ip: limits.per_ip.max(1),
            },
            open: Mutex::default(),
        })
    }

    /// The caps, with limits below 1 raised to 1.
    pub fn limits(&self) -> ConnLimits {
        self.limits
    }

    /// Connections open now: in all, and from `ip`'s address.
    pub fn open(&self, ip: IpAddr) -> (usize, usize) {
        let open = self.open.lock();
        (open.0, open.1.get(&host_key(ip)).copied().unwrap_or(0))
    }

    /// Admits a connection from `ip`: its slot, held until dropped, or why it is refused.
    pub fn try_open(self: &Arc<Self>, ip: IpAddr) -> Result<ConnSlot, Refusal> {
        let key = host_key(ip);
        let mut open = self.open.lock();
        if open.0 >= self.limits.total {
            return Err(Refusal::Total);
        }
        let n = open.1.entry(key).or_insert(0);
        if *n >= self.limits.per_ip {
            return Err(Refusal::PerIp);
        }
        *n += 1;
        open.0 += 1;
        Ok(ConnSlot {
            table: Arc::clone(self),
            key,
        })
    }
}

/// One connection's place in a [`ConnTable`].
#[derive(Debug)]
pub struct ConnSlot {
    table: Arc<ConnTable>,
    key: IpAddr,
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        let mut open = self.table.open.lock();
        open.0 -= 1;
        if let Some(n) = open.1.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                open.1.remove(&self.key);
                // A flood from many addresses leaves a big table behind: shrink it.
                if open.1.capacity() > 64 && open.1.len() < open.1.capacity() / 4 {
                    open.1.shrink_to_fit();
                }
            }
        }
    }
}

pub use moat_common::throttle::Throttle;

/// Where a connection is between requests, for its watchdog.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Reading a request's headers, whose first byte came at `since`.
    Headers { since: Instant },
    /// `n` requests being read, run or answered.
    Busy { n: usize, started: Instant },
    /// Waiting for the next request since `since`.
    Idle { since: Instant },
}

#[derive(Debug)]
struct Clock {
    phase: Phase,
    /// Since when a write has been waiting for the client to read.
    write_blocked: Option<Instant>,
}

/// One accepted connection: its peer, its place in the tables and its clock. Request
/// handlers find it in the request's extensions.
#[derive(Debug)]
pub struct Conn {
    /// The client's address and port.
    pub remote: SocketAddr,
    clock: Mutex<Clock>,
    _slot: ConnSlot,
    /// The WebSocket slot, once the connection is upgraded.
    ws_slot: Mutex<Option<ConnSlot>>,
    /// What its `eth_sendRawTransaction` calls bought: a connection whose submissions are
    /// mostly refused has its next requests served in the untrusted lane
    /// (`moat_mempool::Standing`, run by `moat_sched`).
    pub record: Record,
}

/// What the request layers learn of the connection a request came on.
#[derive(Debug, Clone)]
pub struct RequestMeta {
    /// The connection the request came on.
    pub conn: Arc<Conn>,
    /// When the request's first byte arrived: its read deadline counts from here.
    pub started: Instant,
}

impl Conn {
    fn new(remote: SocketAddr, slot: ConnSlot) -> Self {
        Self {
            remote,
            clock: Mutex::new(Clock {
                phase: Phase::Headers {
                    since: Instant::now(),
                },
                write_blocked: None,
            }),
            _slot: slot,
            ws_slot: Mutex::new(None),
            record: Record::default(),
        }
    }

    /// Keeps `slot` for as long as the connection lives (its WebSocket slot).
    pub fn hold_ws_slot(&self, slot: ConnSlot) {
        *self.ws_slot.lock() = Some(slot);
    }

    fn on_read(&self) {
        let mut c = self.clock.lock();
        if let Phase::Idle { .. } = c.phase {
            c.phase = Phase::Headers {
                since: Instant::now(),
            };
        }
    }

    fn on_write(&self, blocked: bool) {
        let mut c = self.clock.lock();
        match (blocked, c.write_blocked) {
            (true, None) => c.write_blocked = Some(Instant::now()),
            (false, Some(_)) => c.write_blocked = None,
            _ => {}
        }
    }

    /// A request's headers are in; returns when its first byte came.
    fn begin_request(&self) -> Instant {
        let mut c = self.clock.lock();
        let now = Instant::now();
        let (n, started) = match c.phase {
            Phase::Headers { since } => (1, since),
            Phase::Busy { n, started } => (n + 1, started),
            // Bytes already read ahead while the last request was answered.
            Phase::Idle { .. } => (1, now),
        };
        c.phase = Phase::Busy { n, started: now };
        started.min(now)
    }

    fn end_request(&self) {
        let mut c = self.clock.lock();
        if let Phase::Busy { n, started } = c.phase {
            c.phase = if n > 1 {
                Phase::Busy { n: n - 1, started }
            } else {
                Phase::Idle {
                    since: Instant::now(),
                }
            };
        }
    }

    /// When the connection is due to be closed as things stand, and why.
    fn deadline(&self, t: &HttpTimeouts) -> Option<(Instant, &'static str)> {
        let c = self.clock.lock();
        let phase = match c.phase {
            Phase::Headers { since } => Some((since + t.read_header, "read_header")),
            Phase::Idle { since } => Some((since + t.idle, "idle")),
            Phase::Busy { .. } => None,
        };
        let write = c.write_blocked.map(|since| (since + t.write, "write"));
        match (phase, write) {
            (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
            (a, b) => a.or(b),
        }
    }

    /// When the watchdog should look next: the deadline as things stand, but no later
    /// than the shortest timeout from `now`. A deadline set by a later event (a request's
    /// first byte, its end, a stalled write) lies at least that shortest timeout past the
    /// event, so it cannot fall before this.
    fn next_look(&self, t: &HttpTimeouts, now: Instant) -> Instant {
        let horizon = t
            .read_header
            .min(t.idle)
            .min(t.write)
            .max(MIN_WATCHDOG_PERIOD);
        let latest = now + horizon;
        self.deadline(t)
            .map_or(latest, |(at, _)| at.min(latest))
            .max(now)
    }
}

/// The watchdog wakes at most this often (timeouts shorter than this are enforced up to
/// this late).
const MIN_WATCHDOG_PERIOD: Duration = Duration::from_millis(100);

/// Ends a request's busy phase when dropped (also when the client goes away).
struct RequestGuard(Arc<Conn>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.end_request();
    }
}

/// The socket as hyper sees it: reads and writes are reported to the connection's clock.
/// It holds the connection's [`Conn`], so its slots live as long as the socket, through a
/// WebSocket upgrade.
struct TrackedIo {
    io: TcpStream,
    conn: Arc<Conn>,
}

impl AsyncRead for TrackedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.conn.on_read();
        }
        r
    }
}

impl AsyncWrite for TrackedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.conn.on_write(r.is_pending());
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.conn.on_write(r.is_pending());
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_flush(cx);
        self.conn.on_write(r.is_pending());
        r
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

type ResponseFuture =
    Pin<Box<dyn std::future::Future<Output = Result<HttpResponse, BoxError>> + Send>>;

/// The hyper service of one connection: marks each request on the connection's clock,
/// hands it the [`RequestMeta`] and calls a clone of the jsonrpsee service (always ready,
/// as its own accept loop uses it).
struct PerRequest<S> {
    service: S,
    conn: Arc<Conn>,
    /// Requests of a connection with a poor record run in the untrusted lane.
    lanes: bool,
}

impl<S> hyper::service::Service<hyper::Request<hyper::body::Incoming>> for PerRequest<S>
where
    S: Service<HttpRequest, Response = HttpResponse, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = HttpResponse;
    type Error = BoxError;
    type Future = ResponseFuture;

    fn call(&self, req: hyper::Request<hyper::body::Incoming>) -> Self::Future {
        let started = self.conn.begin_request();
        let guard = RequestGuard(Arc::clone(&self.conn));
        let mut req = req.map(HttpBody::new);
        req.extensions_mut().insert(RequestMeta {
            conn: Arc::clone(&self.conn),
            started,
        });
        let fut = self.service.clone().call(req);
        let lane = match self.lanes {
            true => self.conn.record.rpc_lane(),
            false => Lane::Trusted,
        };
        Box::pin(async move {
            let response = match lane {
                Lane::Trusted => fut.await,
                Lane::Untrusted => lanes::run_rpc_untrusted(fut)
                    .await
                    .unwrap_or_else(|| Err("request cancelled".into())),
            };
            drop(guard);
            response
        })
    }
}

/// How one listener serves.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// A name for logs and metrics: "http", "ws", "engine".
    pub name: &'static str,
    /// The connections' header, idle and write-stall timeouts.
    pub timeouts: HttpTimeouts,
    /// The connection caps this listener counts against (the HTTP and WebSocket ports
    /// share one).
    pub table: Arc<ConnTable>,
    /// Serve a connection whose transaction submissions are mostly refused in the
    /// untrusted admission lane.
    pub lanes: bool,
}

static REFUSED_LOG: Throttle = Throttle::new(Duration::from_secs(10));
static ACCEPT_LOG: Throttle = Throttle::new(Duration::from_secs(10));
static TIMEOUT_LOG: Throttle = Throttle::new(Duration::from_secs(10));

/// Accept errors that mean the process or system is out of something (descriptors,
/// buffers, memory): retrying at once would only spin.
fn is_resource_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Least and most pause after an accept error of [`is_resource_error`]'s kind.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Accepts connections on `listener` until `stop`, serving each with a service from
/// `make_service` (one per connection).
pub async fn run<F, S>(listener: TcpListener, opts: ServeOptions, stop: StopHandle, make_service: F)
where
    F: Fn() -> S + Send + Sync + 'static,
    S: Service<HttpRequest, Response = HttpResponse, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    let make_service = Arc::new(make_service);
    let stopped = stop.clone().shutdown();
    tokio::pin!(stopped);
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = &mut stopped => break,
        };
        let (stream, remote) = match accepted {
            Ok(c) => {
                backoff = ACCEPT_BACKOFF_MIN;
                c
            }
            Err(e) => {
                metrics::counter!("moat_rpc_accept_errors_total", "server" => opts.name)
                    .increment(1);
                let resource = is_resource_error(&e);
                if let Some(held) = ACCEPT_LOG.allow() {
                    tracing::warn!(server = opts.name, error = %e, held_back = held, "cannot accept an RPC connection");
                }
                if resource {
                    // Out of descriptors: the pending connection stays queued; wait for
                    // some to be freed instead of spinning on the same error.
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {},
                        _ = &mut stopped => break,
                    }
                    backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                }
                continue;
            }
        };
        let slot = match opts.table.try_open(remote.ip()) {
            Ok(slot) => slot,
            Err(why) => {
                let reason = match why {
                    Refusal::Total => "total",
                    Refusal::PerIp => "per_ip",
                };
                metrics::counter!("moat_rpc_connections_refused_total", "server" => opts.name, "reason" => reason)
                    .increment(1);
                if let Some(held) = REFUSED_LOG.allow() {
                    tracing::warn!(server = opts.name, %remote, reason, held_back = held, limits = ?opts.table.limits(), "RPC connection refused: too many open");
                }
                // Closed at once: the client sees the connection end.
                drop(stream);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let conn = Arc::new(Conn::new(remote, slot));
        let service = make_service();
        tokio::spawn(serve_connection(
            stream,
            conn,
            service,
            opts.timeouts,
            opts.name,
            opts.lanes,
            stop.clone(),
        ));
    }
}

async fn serve_connection<S>(
    stream: TcpStream,
    conn: Arc<Conn>,
    service: S,
    timeouts: HttpTimeouts,
    name: &'static str,
    lanes: bool,
    stop: StopHandle,
) where
    S: Service<HttpRequest, Response = HttpResponse, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    let per_request = PerRequest {
        service,
        conn: Arc::clone(&conn),
        lanes,
    };
    let io = TokioIo::new(TrackedIo {
        io: stream,
        conn: Arc::clone(&conn),
    });
    let builder = auto::Builder::new(TokioExecutor::new());
    let connection = builder.serve_connection_with_upgrades(io, per_request);
    tokio::pin!(connection);
    let stopped = stop.shutdown();
    tokio::pin!(stopped);
    let first = conn.next_look(&timeouts, Instant::now());
    let watchdog = tokio::time::sleep_until(tokio::time::Instant::from_std(first));
    tokio::pin!(watchdog);
    loop {
        tokio::select! {
            r = &mut connection => {
                if let Err(e) = r {
                    tracing::trace!(remote = %conn.remote, error = %e, "RPC connection ended");
                }
                break;
            }
            _ = &mut stopped => {
                connection.as_mut().graceful_shutdown();
                // In-flight calls get the write timeout to finish.
                let _ = tokio::time::timeout(timeouts.write, connection.as_mut()).await;
                break;
            }
            _ = &mut watchdog => {
                let now = Instant::now();
                if let Some((at, why)) = conn.deadline(&timeouts)
                    && at <= now
                {
                    metrics::counter!("moat_rpc_connections_timed_out_total", "server" => name, "phase" => why)
                        .increment(1);
                    if let Some(held) = TIMEOUT_LOG.allow() {
                        tracing::debug!(server = name, remote = %conn.remote, phase = why, held_back = held, "closing a slow or idle RPC connection");
                    }
                    break;
                }
                let next = conn.next_look(&timeouts, now);
                watchdog.as_mut().reset(tokio::time::Instant::from_std(next));
            }
        }
    }
}

/// Binds `addr` and returns the listener with its real address.
pub async fn bind(addr: SocketAddr) -> io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    Ok((listener, bound))
}

/// The connection a request came on, when it came through [`run`].
pub fn meta<B>(req: &hyper::Request<B>) -> Option<&RequestMeta> {
    req.extensions().get::<RequestMeta>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_cap_in_all_and_per_address() {
        let t = ConnTable::new(ConnLimits {
            total: 3,
            per_ip: 2,
        });
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = t.try_open(a).unwrap();
        let _a2 = t.try_open(a).unwrap();
        assert_eq!(t.try_open(a).unwrap_err(), Refusal::PerIp);
        let _b1 = t.try_open(b).unwrap();
        assert_eq!(t.try_open(b).unwrap_err(), Refusal::Total);
        drop(a1);
        assert_eq!(t.open(a), (2, 1));
        let _b2 = t.try_open(b).unwrap();
    }

    #[test]
    fn ipv6_clients_count_by_their_64() {
        let t = ConnTable::new(ConnLimits {
            total: 10,
            per_ip: 2,
        });
        let x: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let y: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let z: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        let _x1 = t.try_open(x).unwrap();
        let _y1 = t.try_open(y).unwrap();
        assert_eq!(t.open(x), (2, 2), "one /64, one count");
        assert_eq!(t.try_open(y).unwrap_err(), Refusal::PerIp);
        let _z1 = t.try_open(z).unwrap();
        let mapped: IpAddr = "::ffff:10.1.2.3".parse().unwrap();
        let _m1 = t.try_open(mapped).unwrap();
        assert_eq!(t.open("10.1.2.3".parse().unwrap()), (4, 1));
    }

    /// A connection from 127.0.0.1 in a table of one.
    fn one_conn() -> Conn {
        let t = ConnTable::new(ConnLimits {
            total: 1,
            per_ip: 1,
        });
        let remote: SocketAddr = "127.0.0.1:1".parse().unwrap();
        Conn::new(remote, t.try_open(remote.ip()).unwrap())
    }

    #[test]
    fn a_connection_is_due_by_its_phase() {
        let conn = one_conn();
        let timeouts = HttpTimeouts::default();
        assert_eq!(conn.deadline(&timeouts).unwrap().1, "read_header");
        conn.begin_request();
        assert!(conn.deadline(&timeouts).is_none(), "no deadline while busy");
        conn.on_write(true);
        assert_eq!(conn.deadline(&timeouts).unwrap().1, "write");
        conn.on_write(false);
        conn.end_request();
        assert_eq!(conn.deadline(&timeouts).unwrap().1, "idle");
        conn.on_read();
        assert_eq!(conn.deadline(&timeouts).unwrap().1, "read_header");
    }

    #[test]
    fn the_watchdog_looks_before_any_deadline_a_later_event_can_set() {
        let conn = one_conn();
        let timeouts = HttpTimeouts {
            read: Duration::from_secs(30),
            read_header: Duration::from_secs(20),
            write: Duration::from_secs(30),
            idle: Duration::from_secs(120),
        };
        // Reading headers: exactly their deadline.
        let now = Instant::now();
        let (due, _) = conn.deadline(&timeouts).unwrap();
        assert_eq!(conn.next_look(&timeouts, now), due.max(now));
        // Busy: no deadline, but a look within the shortest timeout.
        conn.begin_request();
        let now = Instant::now();
        assert_eq!(conn.next_look(&timeouts, now), now + timeouts.read_header);
        // Idle for 120 s, but the next request's headers may start at once and are due
        // 20 s later: the look comes before that, not at the idle deadline.
        conn.end_request();
        let now = Instant::now();
        let look = conn.next_look(&timeouts, now);
        assert_eq!(look, now + timeouts.read_header);
        conn.on_read();
        assert!(conn.deadline(&timeouts).unwrap().0 >= look);
        // A deadline already past is looked at now.
        let later = Instant::now() + Duration::from_secs(3600);
        assert_eq!(conn.next_look(&timeouts, later), later);
    }
}
