//! Request limits of the public JSON-RPC server, in go-ethereum's terms where geth has them:
//!
//! - [`ReadBodyLayer`] (HTTP): reads a request's whole body before anything else looks at
//!   it, within the read timeout (`--http.readtimeout`, counted from the request's first
//!   byte: 408 and the connection closed past it) and the body cap (413). A slow upload
//!   holds nothing but its own connection.
//! - [`InFlightLimitLayer`] (HTTP, decided once the body is in): once
//!   `max_concurrent_requests` HTTP requests are executing, a new one is answered at once
//!   with HTTP 429, a `Retry-After` header and a JSON-RPC error body ([`BUSY_CODE`]).
//! - [`WsCapLayer`] (WebSocket upgrades): open WebSockets are capped in all and per client
//!   address; past a cap the upgrade gets HTTP 429.
//! - [`BatchCountLayer`] (HTTP): a batch with more calls than `--rpc.batch-request-limit`
//!   gets geth's answer, `[{"jsonrpc":"2.0","id":<first call's id>,"error":{"code":-32600,
//!   "message":"batch too large"}}]` (HTTP 200), after a scan that counts elements without
//!   building them; none of its calls runs.
//! - [`BatchResponseCapLayer`] (RPC, HTTP and WebSocket): once a batch's responses pass
//!   `--rpc.batch-response-max-size` bytes, the calls still to run are not run and each
//!   gets geth's -32003 "response too large".
//! - [`CallTimeoutLayer`] (RPC, HTTP): a call still running when its HTTP request has
//!   been in for `--http.writetimeout` is answered with geth's -32002 "request timed out"
//!   (a blocking handler already running finishes on its own).
//!
//! Over WebSocket, a batch over the limit is refused by jsonrpsee's own check, which also
//! runs before the calls are parsed, with its -32010 "The batch request was too large".

use crate::middleware::{
    BoxFuture, HttpMiddleware, HttpService, Middleware, RpcMiddleware, RpcService, answer, pass,
    take_ready,
};
use jsonrpsee::core::BoxError;
use jsonrpsee::core::http_helpers::{HttpError, read_body};
use jsonrpsee::core::middleware::{Batch, BatchEntry, Request};
use jsonrpsee::core::server::{BatchResponseBuilder, MethodResponse};
use jsonrpsee::server::http::{content_type_is_json, response};
use jsonrpsee::server::{HttpBody, HttpRequest, HttpResponse};
use jsonrpsee::types::{ErrorObject, Id};
use serde::de::{Deserialize, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde_json::value::RawValue;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::server::{self, ConnTable, Refusal};

/// geth's default `--rpc.batch-request-limit`.
pub const DEFAULT_BATCH_REQUEST_LIMIT: u32 = 1000;
/// geth's default `--rpc.batch-response-max-size`, in bytes.
pub const DEFAULT_BATCH_RESPONSE_MAX_SIZE: usize = 25_000_000;
/// Default most HTTP requests in progress at once.
pub const DEFAULT_MAX_CONCURRENT_REQUESTS: u32 = 256;

/// geth's code and message for a batch with too many calls (an invalid request).
pub const BATCH_TOO_LARGE_CODE: i32 = -32600;
/// The message that goes with [`BATCH_TOO_LARGE_CODE`].
pub const BATCH_TOO_LARGE_MSG: &str = "batch too large";
/// geth's code and message for the calls of a batch past its response size cap.
pub const RESPONSE_TOO_LARGE_CODE: i32 = -32003;
/// The message that goes with [`RESPONSE_TOO_LARGE_CODE`].
pub const RESPONSE_TOO_LARGE_MSG: &str = "response too large";
/// EIP-1474's "limit exceeded", for a request refused because the server is busy.
pub const BUSY_CODE: i32 = -32005;
/// The message that goes with [`BUSY_CODE`] (in an HTTP 429 answer).
pub const BUSY_MSG: &str = "server busy: too many requests in progress";
/// geth's code and message for a call cut off by the HTTP write timeout.
pub const TIMEOUT_CODE: i32 = -32002;
/// The message that goes with [`TIMEOUT_CODE`].
pub const TIMEOUT_MSG: &str = "request timed out";
/// The answer to a request whose body did not arrive within the read timeout.
pub const READ_TIMEOUT_MSG: &str = "request body not received within the read timeout";
/// The answer to a WebSocket upgrade past the WebSocket caps.
pub const WS_BUSY_MSG: &str = "too many WebSocket connections";
/// Seconds a refused client is asked to wait (`Retry-After`).
const RETRY_AFTER_SECS: &str = "1";

const JSON: &str = "application/json; charset=utf-8";

/// Counts the HTTP requests executing across the servers that share it, and refuses new
/// ones past `max` with HTTP 429.
///
/// It sits after [`ReadBodyLayer`]: a request is counted from the moment its body is in
/// (a client still uploading holds no slot) until its response is ready, or until its
/// response future is dropped because the client went away; a blocking handler already
/// running then finishes on its own. A WebSocket upgrade is counted once, for its
/// handshake: calls on an open WebSocket are not counted ([`WsCapLayer`] bounds open
/// sockets).
pub type InFlightLimitLayer = Middleware<InFlightLimit>;

impl InFlightLimitLayer {
    /// `max` below 1 is taken as 1.
    pub fn new(max: u32) -> Self {
        Middleware(InFlightLimit {
            in_flight: Arc::default(),
            max: (max as usize).max(1),
        })
    }

    /// Requests in progress now.
    pub fn in_flight(&self) -> usize {
        self.0.in_flight.load(Ordering::Acquire)
    }
}

/// [`InFlightLimitLayer`]'s logic: the count it shares.
#[derive(Debug, Clone)]
pub struct InFlightLimit {
    in_flight: Arc<AtomicUsize>,
    max: usize,
}

impl InFlightLimit {
    fn try_acquire(&self) -> Option<InFlightGuard> {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| InFlightGuard(Arc::clone(&self.in_flight)))
    }
}

/// One request's slot; given back on drop.
struct InFlightGuard(Arc<AtomicUsize>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The answer to a request refused because too many are in progress.
fn busy() -> HttpResponse {
    metrics::counter!("moat_rpc_refused_busy_total").increment(1);
    let body = error_json(Id::Null, ErrorObject::borrowed(BUSY_CODE, BUSY_MSG, None));
    HttpResponse::builder()
        .status(429)
        .header("content-type", JSON)
        .header("retry-after", RETRY_AFTER_SECS)
        .body(HttpBody::from(body))
        .expect("a static status and headers make a valid response")
}

impl<B> HttpMiddleware<B> for InFlightLimit {
    fn call<S: HttpService<B>>(&self, inner: &mut S, req: HttpRequest<B>) -> BoxFuture {
        let Some(guard) = self.try_acquire() else {
            return answer(busy());
        };
        let fut = inner.call(req);
        Box::pin(async move {
            let resp = fut.await.map_err(Into::into);
            drop(guard);
            resp
        })
    }
}

/// Refuses an HTTP batch with more than `limit` calls (0: no limit) with geth's error,
/// before jsonrpsee parses its calls. It reads the body itself (with the same size cap and
/// the same 413 as jsonrpsee) and hands it on to jsonrpsee.
pub type BatchCountLayer = Middleware<BatchCount>;

impl BatchCountLayer {
    /// Refuses batches of more than `limit` calls (0: no limit), reading bodies of at most
    /// `max_body_size` bytes.
    pub fn new(limit: u32, max_body_size: u32) -> Self {
        Middleware(BatchCount {
            limit,
            max_body_size,
        })
    }
}

/// [`BatchCountLayer`]'s logic.
#[derive(Debug, Clone, Copy)]
pub struct BatchCount {
    limit: u32,
    max_body_size: u32,
}

impl HttpMiddleware<HttpBody> for BatchCount {
    fn call<S: HttpService<HttpBody>>(&self, inner: &mut S, req: HttpRequest) -> BoxFuture {
        let checked =
            self.limit != 0 && req.method().as_str() == "POST" && content_type_is_json(&req);
        if !checked {
            return pass(inner, req);
        }
        let mut inner = take_ready(inner);
        let cfg = *self;
        Box::pin(async move {
            let (parts, body, is_single) = match read_request(req, cfg.max_body_size).await {
                Ok(read) => read,
                Err(answer) => return Ok(answer),
            };
            if !is_single && let Some(id) = batch_over_limit(&body, cfg.limit as usize) {
                metrics::counter!("moat_rpc_batch_limited_total", "reason" => "calls").increment(1);
                let err = ErrorObject::borrowed(BATCH_TOO_LARGE_CODE, BATCH_TOO_LARGE_MSG, None);
                let json = format!("[{}]", error_json(id, err));
                return Ok(HttpResponse::builder()
                    .header("content-type", JSON)
                    .body(HttpBody::from(json))
                    .expect("a static header makes a valid response"));
            }
            inner
                .call(rebuild_request(parts, body))
                .await
                .map_err(Into::into)
        })
    }
}

/// Reads a request's body as jsonrpsee does (its cap, leading whitespace trimmed): the
/// request's parts, the body and whether it is a single call (not a batch), or the
/// answer jsonrpsee would give instead (too large, malformed, a failed read).
pub(crate) async fn read_request(
    req: HttpRequest,
    max_body_size: u32,
) -> Result<(hyper::http::request::Parts, Vec<u8>, bool), HttpResponse> {
    let (parts, body) = req.into_parts();
    match read_body(&parts.headers, body, max_body_size).await {
        Ok((body, is_single)) => Ok((parts, body, is_single)),
        Err(HttpError::TooLarge) => Err(response::too_large(max_body_size)),
        Err(HttpError::Malformed) => Err(response::malformed()),
        Err(HttpError::Stream(e)) => {
            tracing::debug!(error = %e, "reading an RPC request body failed");
            Err(response::internal_error())
        }
    }
}

/// The request [`read_request`] took apart, whole again for the next service.
pub(crate) fn rebuild_request(
    mut parts: hyper::http::request::Parts,
    body: Vec<u8>,
) -> HttpRequest {
    // Leading whitespace was trimmed: the length changed.
    parts.headers.insert("content-length", body.len().into());
    HttpRequest::from_parts(parts, HttpBody::from(body))
}

/// A JSON-RPC error response as text.
fn error_json(id: Id<'_>, err: ErrorObject<'_>) -> String {
    MethodResponse::error(id, err).as_json().get().to_string()
}

/// When the batch `body` (a JSON array) has more than `limit` elements: the id of its
/// first call (geth puts it on the error), or null. Counts at most `limit + 1` elements
/// and builds none of them; a malformed batch within the limit is left to jsonrpsee.
pub(crate) fn batch_over_limit(body: &[u8], limit: usize) -> Option<Id<'static>> {
    let mut count = 0;
    // Stopping early leaves the array unfinished, which serde reports as an error: the
    // count is what matters.
    let _ = serde_json::Deserializer::from_slice(body).deserialize_seq(CountUpTo {
        stop: limit.saturating_add(1),
        count: &mut count,
    });
    if count <= limit {
        return None;
    }
    let mut first = Id::Null;
    let _ = serde_json::Deserializer::from_slice(body).deserialize_seq(FirstCallId(&mut first));
    Some(first)
}

/// Counts array elements, skipping each without building it, up to `stop`.
struct CountUpTo<'c> {
    stop: usize,
    count: &'c mut usize,
}

impl<'de> Visitor<'de> for CountUpTo<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON-RPC batch")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while *self.count < self.stop && seq.next_element::<IgnoredAny>()?.is_some() {
            *self.count += 1;
        }
        Ok(())
    }
}

/// The id of the first element that is a call (an object with a `method` and an id).
struct FirstCallId<'c>(&'c mut Id<'static>);

#[derive(serde::Deserialize)]
struct CallProbe<'a> {
    #[serde(borrow)]
    id: Option<Id<'a>>,
    method: Option<IgnoredAny>,
}

impl<'de> Visitor<'de> for FirstCallId<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON-RPC batch")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(raw) = seq.next_element::<&RawValue>()? {
            if let Ok(CallProbe {
                id: Some(id),
                method: Some(_),
            }) = CallProbe::deserialize(&mut serde_json::Deserializer::from_str(raw.get()))
            {
                *self.0 = id.into_owned();
                break;
            }
        }
        Ok(())
    }
}

/// Caps the bytes of a batch's responses at `max` (0: no cap), as geth does: calls run in
/// order, and once the responses so far pass `max`, each call still to come is not run and
/// gets -32003 "response too large" (notifications past the cap are dropped). The response
/// that crossed the cap is kept, so a batch answer may exceed `max` by one response.
/// Bytes are those of the serialized responses.
pub type BatchResponseCapLayer = Middleware<BatchResponseCap>;

impl BatchResponseCapLayer {
    /// Caps each batch's responses at `max` bytes (0: no cap).
    pub fn new(max: usize) -> Self {
        Middleware(BatchResponseCap { max })
    }
}

/// [`BatchResponseCapLayer`]'s logic.
#[derive(Debug, Clone, Copy)]
pub struct BatchResponseCap {
    max: usize,
}

fn response_too_large() -> ErrorObject<'static> {
    ErrorObject::borrowed(RESPONSE_TOO_LARGE_CODE, RESPONSE_TOO_LARGE_MSG, None)
}

impl RpcMiddleware for BatchResponseCap {
    fn batch<'a, S: RpcService>(
        &self,
        inner: &S,
        batch: Batch<'a>,
    ) -> impl Future<Output = MethodResponse> + Send + 'a {
        let inner = inner.clone();
        let max = if self.max == 0 { usize::MAX } else { self.max };
        async move {
            // Our own accounting decides; the builder itself never refuses.
            let mut out = BatchResponseBuilder::new_with_limit(usize::MAX);
            let mut bytes = 0usize;
            let mut over = false;
            let mut got_notification = false;
            for entry in batch {
                let rp = match entry {
                    Ok(BatchEntry::Call(req)) if over => {
                        MethodResponse::error(req.id, response_too_large())
                            .with_extensions(req.extensions)
                    }
                    Ok(BatchEntry::Call(req)) => inner.call(req).await,
                    Ok(BatchEntry::Notification(n)) => {
                        got_notification = true;
                        if !over {
                            inner.notification(n).await;
                        }
                        continue;
                    }
                    Err(err) => {
                        let (err, id) = err.into_parts();
                        let err = if over { response_too_large() } else { err };
                        MethodResponse::error(id, err)
                    }
                };
                if !over {
                    // The `,` or `]` after each response.
                    bytes = bytes.saturating_add(rp.as_json().get().len() + 1);
                    if bytes > max {
                        over = true;
                        metrics::counter!("moat_rpc_batch_limited_total", "reason" => "response_size")
                            .increment(1);
                    }
                }
                if let Err(rp) = out.append(rp) {
                    return rp;
                }
            }
            if out.is_empty() && got_notification {
                MethodResponse::notification()
            } else {
                // An empty batch becomes jsonrpsee's "invalid request".
                MethodResponse::from_batch(out.finish())
            }
        }
    }
}

/// Reads the body of every HTTP request that has one (not WebSocket upgrades) before the
/// layers after it run: within `max_body_size` bytes (HTTP 413 past it) and by the read
/// deadline, `read_timeout` after the request's first byte (HTTP 408 and
/// `Connection: close` past it). The layers after it see the whole body in memory.
pub type ReadBodyLayer = Middleware<ReadBody>;

impl ReadBodyLayer {
    /// Reads bodies of at most `max_body_size` bytes, within `read_timeout` of the
    /// request's first byte.
    pub fn new(max_body_size: u32, read_timeout: Duration) -> Self {
        Middleware(ReadBody {
            max_body_size,
            read_timeout,
        })
    }
}

/// [`ReadBodyLayer`]'s logic.
#[derive(Debug, Clone, Copy)]
pub struct ReadBody {
    max_body_size: u32,
    read_timeout: Duration,
}

static READ_TIMEOUT_LOG: server::Throttle = server::Throttle::new(Duration::from_secs(10));

fn read_timed_out() -> HttpResponse {
    let body = error_json(
        Id::Null,
        ErrorObject::borrowed(-32600, READ_TIMEOUT_MSG, None),
    );
    HttpResponse::builder()
        .status(408)
        .header("content-type", JSON)
        .header("connection", "close")
        .body(HttpBody::from(body))
        .expect("a static status and headers make a valid response")
}

/// Why a body could not be read.
enum BodyError {
    TooLarge,
    Stream(BoxError),
}

/// All of `body`, at most `max` bytes.
async fn collect_body(
    headers: &hyper::HeaderMap,
    mut body: HttpBody,
    max: usize,
) -> Result<Vec<u8>, BodyError> {
    use hyper::body::Body;
    let declared = headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(BodyError::TooLarge);
    }
    let mut out = Vec::with_capacity(declared.map_or(0, |n| n as usize).min(16 * 1024));
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let frame = frame.map_err(BodyError::Stream)?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > max {
                return Err(BodyError::TooLarge);
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out)
}

impl HttpMiddleware<HttpBody> for ReadBody {
    fn call<S: HttpService<HttpBody>>(&self, inner: &mut S, req: HttpRequest) -> BoxFuture {
        if jsonrpsee::server::ws::is_upgrade_request(&req) || req.method() != "POST" {
            return pass(inner, req);
        }
        let mut inner = take_ready(inner);
        let cfg = *self;
        let (started, remote) =
            server::meta(&req).map_or((Instant::now(), None), |m| (m.started, Some(m.conn.remote)));
        let deadline = tokio::time::Instant::from_std(started + cfg.read_timeout);
        Box::pin(async move {
            let (mut parts, body) = req.into_parts();
            let read = collect_body(&parts.headers, body, cfg.max_body_size as usize);
            let body = match tokio::time::timeout_at(deadline, read).await {
                Ok(Ok(body)) => body,
                Ok(Err(BodyError::TooLarge)) => return Ok(response::too_large(cfg.max_body_size)),
                Ok(Err(BodyError::Stream(e))) => {
                    tracing::debug!(error = %e, "reading an RPC request body failed");
                    return Ok(response::malformed());
                }
                Err(_) => {
                    metrics::counter!("moat_rpc_read_timeouts_total").increment(1);
                    if let Some(held) = READ_TIMEOUT_LOG.allow() {
                        tracing::info!(remote = ?remote, held_back = held, timeout = ?cfg.read_timeout, "dropping an RPC request whose body did not arrive in time");
                    }
                    return Ok(read_timed_out());
                }
            };
            parts.headers.insert("content-length", body.len().into());
            let req = HttpRequest::from_parts(parts, HttpBody::from(body));
            inner.call(req).await.map_err(Into::into)
        })
    }
}

/// Caps open WebSockets in all and per client address with a [`ConnTable`] of their own:
/// an upgrade past a cap gets HTTP 429; an admitted one holds its slot until its
/// connection closes.
pub type WsCapLayer = Middleware<WsCap>;

impl WsCapLayer {
    /// Admits WebSocket upgrades against `table`'s caps.
    pub fn new(table: Arc<ConnTable>) -> Self {
        Middleware(WsCap { table })
    }
}

/// [`WsCapLayer`]'s logic.
#[derive(Debug, Clone)]
pub struct WsCap {
    table: Arc<ConnTable>,
}

static WS_REFUSED_LOG: server::Throttle = server::Throttle::new(Duration::from_secs(10));

impl HttpMiddleware<HttpBody> for WsCap {
    fn call<S: HttpService<HttpBody>>(&self, inner: &mut S, req: HttpRequest) -> BoxFuture {
        if jsonrpsee::server::ws::is_upgrade_request(&req)
            && let Some(meta) = server::meta(&req)
        {
            match self.table.try_open(meta.conn.remote.ip()) {
                Ok(slot) => meta.conn.hold_ws_slot(slot),
                Err(why) => {
                    let reason = match why {
                        Refusal::Total => "total",
                        Refusal::PerIp => "per_ip",
                    };
                    metrics::counter!("moat_rpc_ws_refused_total", "reason" => reason).increment(1);
                    if let Some(held) = WS_REFUSED_LOG.allow() {
                        tracing::warn!(remote = %meta.conn.remote, reason, held_back = held, limits = ?self.table.limits(), "WebSocket refused: too many open");
                    }
                    let body = error_json(
                        Id::Null,
                        ErrorObject::borrowed(BUSY_CODE, WS_BUSY_MSG, None),
                    );
                    let resp = HttpResponse::builder()
                        .status(429)
                        .header("content-type", JSON)
                        .header("retry-after", RETRY_AFTER_SECS)
                        .body(HttpBody::from(body))
                        .expect("a static status and headers make a valid response");
                    return answer(resp);
                }
            }
        }
        pass(inner, req)
    }
}

/// When the calls of an HTTP request must be answered by (its headers' arrival plus the
/// write timeout). Set by [`crate::access::AccessLayer`] on HTTP requests only.
#[derive(Debug, Clone, Copy)]
pub struct CallDeadline(pub Instant);

/// Answers a call still running at its request's [`CallDeadline`] with geth's -32002
/// "request timed out". Calls without a deadline (WebSocket) run to the end.
pub type CallTimeoutLayer = Middleware<CallTimeout>;

/// [`CallTimeoutLayer`]'s logic.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallTimeout;

impl RpcMiddleware for CallTimeout {
    fn call<'a, S: RpcService>(
        &self,
        inner: &S,
        req: Request<'a>,
    ) -> impl Future<Output = MethodResponse> + Send + 'a {
        let inner = inner.clone();
        async move {
            let Some(CallDeadline(deadline)) = req.extensions().get::<CallDeadline>().copied()
            else {
                return inner.call(req).await;
            };
            let (id, ext) = (req.id.clone().into_owned(), req.extensions.clone());
            match tokio::time::timeout_at(deadline.into(), inner.call(req)).await {
                Ok(rp) => rp,
                Err(_) => {
                    metrics::counter!("moat_rpc_call_timeouts_total").increment(1);
                    MethodResponse::error(
                        id,
                        ErrorObject::borrowed(TIMEOUT_CODE, TIMEOUT_MSG, None),
                    )
                    .with_extensions(ext)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::{Context, Poll};
    use tower::{Layer, Service};

    #[test]
    fn batch_count_stops_past_the_limit_and_finds_the_first_call() {
        let batch =
            br#"[{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":"x","method":"m"},1,2]"#;
        assert_eq!(batch_over_limit(batch, 4), None);
        assert_eq!(batch_over_limit(batch, 3), Some(Id::Str("x".into())));
        assert_eq!(batch_over_limit(b"[1,2,3]", 2), Some(Id::Null));
        assert_eq!(
            batch_over_limit(br#"[{"id":7,"method":"m"},{"id":8,"method":"m"}]"#, 1),
            Some(Id::Number(7))
        );
        // Malformed after the limit is passed: still too large. Malformed before: jsonrpsee's.
        assert_eq!(batch_over_limit(b"[1,2,3,", 2), Some(Id::Null));
        assert_eq!(batch_over_limit(b"[1,2,", 2), None);
    }

    /// A service that answers once `release` is notified.
    #[derive(Clone)]
    struct Held(Arc<tokio::sync::Semaphore>);

    impl Service<HttpRequest> for Held {
        type Response = HttpResponse;
        type Error = BoxError;
        type Future = BoxFuture;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: HttpRequest) -> BoxFuture {
            let release = Arc::clone(&self.0);
            Box::pin(async move {
                release.acquire().await.expect("open").forget();
                Ok(HttpResponse::new(HttpBody::from("done")))
            })
        }
    }

    fn post() -> HttpRequest {
        HttpRequest::builder()
            .method("POST")
            .body(HttpBody::from("{}"))
            .unwrap()
    }

    #[tokio::test]
    async fn requests_past_the_executing_cap_get_429_at_once() {
        let release = Arc::new(tokio::sync::Semaphore::new(0));
        let limit = InFlightLimitLayer::new(2);
        let mut svc = limit.layer(Held(Arc::clone(&release)));
        // Two executing requests take both slots (a slot is taken on call).
        let a = tokio::spawn(svc.call(post()));
        let b = tokio::spawn(svc.call(post()));
        assert_eq!(limit.in_flight(), 2);
        let refused = svc.call(post()).await.unwrap();
        assert_eq!(refused.status(), 429);
        assert_eq!(refused.headers()["retry-after"], "1");
        assert!(
            refused.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json")
        );
        // Once they are answered, their slots are free again.
        release.add_permits(2);
        assert_eq!(a.await.unwrap().unwrap().status(), 200);
        assert_eq!(b.await.unwrap().unwrap().status(), 200);
        assert_eq!(limit.in_flight(), 0);
        // A request whose client went away gives its slot back too.
        let c = svc.call(post());
        assert_eq!(limit.in_flight(), 1);
        drop(c);
        assert_eq!(limit.in_flight(), 0);
    }

    #[tokio::test]
    async fn bodies_are_read_before_the_cap_and_within_the_read_timeout() {
        let release = Arc::new(tokio::sync::Semaphore::new(8));
        let limit = InFlightLimitLayer::new(1);
        let mut svc =
            ReadBodyLayer::new(16, Duration::from_millis(200)).layer(limit.layer(Held(release)));
        // A body that never ends: 408, and no slot was held meanwhile.
        let (_tx, never) = tokio::sync::mpsc::channel::<()>(1);
        struct Stalled(tokio::sync::mpsc::Receiver<()>);
        impl hyper::body::Body for Stalled {
            type Data = hyper::body::Bytes;
            type Error = BoxError;
            fn poll_frame(
                mut self: Pin<&mut Self>,
                cx: &mut Context<'_>,
            ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
                match self.0.poll_recv(cx) {
                    Poll::Ready(_) => Poll::Ready(None),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
        let slow = HttpRequest::builder()
            .method("POST")
            .body(HttpBody::new(Stalled(never)))
            .unwrap();
        let pending = tokio::spawn(svc.call(slow));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(limit.in_flight(), 0, "an upload in progress holds no slot");
        let answer = pending.await.unwrap().unwrap();
        assert_eq!(answer.status(), 408);
        assert_eq!(answer.headers()["connection"], "close");
        // Too big: 413 before the rest is read.
        let big = HttpRequest::builder()
            .method("POST")
            .body(HttpBody::from(vec![b'x'; 17]))
            .unwrap();
        assert_eq!(svc.call(big).await.unwrap().status(), 413);
        assert_eq!(svc.call(post()).await.unwrap().status(), 200);
    }

    #[test]
    fn in_flight_slots_are_given_back_on_drop() {
        let limit = InFlightLimitLayer::new(2);
        let a = limit.0.try_acquire().expect("first slot");
        let b = limit.0.try_acquire().expect("second slot");
        assert!(limit.0.try_acquire().is_none());
        drop(a);
        assert_eq!(limit.in_flight(), 1);
        let _c = limit.0.try_acquire().expect("a freed slot");
        drop(b);
        assert_eq!(limit.in_flight(), 1);
        assert_eq!(InFlightLimitLayer::new(0).0.max, 1);
    }
}
