//! `eth_sendRawTransaction`'s own path through the HTTP server: the one call a node
//! takes at rates of tens of thousands a second.
//!
//! A POST whose body is one call of the usual form,
//! `{"jsonrpc":"2.0","id":<number|string|null>,"method":"eth_sendRawTransaction","params":["0x…"]}`
//! (those four keys, once each, the hex without escapes), is answered here, after the
//! access checks, the body's read, size and time limits and the in-flight cap, and
//! before jsonrpsee: it parses into borrowed fields (no JSON value, no copy of the
//! request's extensions, no method-table lookup) and goes straight to the handler's
//! admission ([`crate::eth::submit_raw`]). What the general path does for the call is
//! done here the same way: the namespace filter (`--http.api`), the call's deadline
//! (geth's -32002 past the write timeout), the per-method counter, the connection's
//! record for the admission lanes, and jsonrpsee's own answer bytes (built by its
//! `MethodResponse`). Anything else (a batch, another method, another shape, a
//! parameter that is not 0x-prefixed hex, a namespace not served) goes on to jsonrpsee
//! unchanged, which words every error as before.

use crate::RpcContext;
use crate::access::Allowed;
use crate::limits::{CallDeadline, TIMEOUT_CODE, TIMEOUT_MSG, read_request, rebuild_request};
use crate::middleware::{BoxFuture, HttpMiddleware, HttpService, Middleware, pass, take_ready};
use crate::server::RequestMeta;
use alloy_primitives::Bytes;
use jsonrpsee::core::server::{MethodResponse, ResponsePayload};
use jsonrpsee::server::http::{content_type_is_json, response};
use jsonrpsee::server::{HttpBody, HttpRequest, HttpResponse};
use jsonrpsee::types::{ErrorObject, Id};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::sync::Arc;

const METHOD: &str = "eth_sendRawTransaction";

/// Puts [`RawTx`] in front of the service it wraps; with no context it passes every
/// request on (a WebSocket-only port).
pub type RawTxLayer = Middleware<RawTx>;

impl RawTxLayer {
    /// Answers plain `eth_sendRawTransaction` calls from `ctx` (`None`: passes every
    /// request on), reading bodies of at most `max_body_size` bytes.
    pub fn new(ctx: Option<Arc<RpcContext>>, max_body_size: u32) -> Self {
        Middleware(RawTx { ctx, max_body_size })
    }
}

/// [`RawTxLayer`]'s logic.
#[derive(Debug, Clone)]
pub struct RawTx {
    ctx: Option<Arc<RpcContext>>,
    max_body_size: u32,
}

impl HttpMiddleware<HttpBody> for RawTx {
    fn call<S: HttpService<HttpBody>>(&self, inner: &mut S, req: HttpRequest) -> BoxFuture {
        let ctx = match &self.ctx {
            Some(ctx) if req.method().as_str() == "POST" && content_type_is_json(&req) => {
                Arc::clone(ctx)
            }
            _ => return pass(inner, req),
        };
        let mut inner = take_ready(inner);
        let max = self.max_body_size;
        Box::pin(async move {
            // The same read, cap and answers as jsonrpsee's own.
            let (parts, body, is_single) = match read_request(req, max).await {
                Ok(read) => read,
                Err(answer) => return Ok(answer),
            };
            if is_single
                && let Some((id, tx)) = parse(&body)
                && served(&parts.extensions)
            {
                return Ok(answer(&ctx, id, tx, &parts.extensions).await);
            }
            inner
                .call(rebuild_request(parts, body))
                .await
                .map_err(Into::into)
        })
    }
}

/// The call's fields, borrowed from the body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Call<'a> {
    #[serde(borrow)]
    jsonrpc: &'a str,
    #[serde(borrow)]
    id: &'a RawValue,
    #[serde(borrow)]
    method: &'a str,
    #[serde(borrow)]
    params: (&'a str,),
}

/// The id and the transaction's bytes of a body that is one `eth_sendRawTransaction`
/// call of the usual form; `None` for anything else.
pub(crate) fn parse(body: &[u8]) -> Option<(Id<'_>, Bytes)> {
    let call: Call<'_> = serde_json::from_slice(body).ok()?;
    if call.jsonrpc != "2.0" || call.method != METHOD {
        return None;
    }
    let id = parse_id(call.id.get())?;
    let digits = call.params.0.strip_prefix("0x")?;
    let bytes = alloy_primitives::hex::decode(digits).ok()?;
    Some((id, Bytes::from(bytes)))
}

/// The id as jsonrpsee reads it (null, a u64, a string), for the forms that need no
/// unescaping; `None` sends the request on to jsonrpsee.
fn parse_id(raw: &str) -> Option<Id<'_>> {
    if raw == "null" {
        return Some(Id::Null);
    }
    if let Some(inner) = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        return (!inner.contains('\\')).then_some(Id::Str(Cow::Borrowed(inner)));
    }
    if raw.bytes().all(|b| b.is_ascii_digit()) {
        return raw.parse().ok().map(Id::Number);
    }
    None
}

/// Whether the transport serves the `eth` namespace to this request (`--http.api`).
fn served(ext: &hyper::http::Extensions) -> bool {
    ext.get::<Allowed>().is_none_or(|a| a.0.allows(METHOD))
}

/// Runs the call as the method table's handler does, within the request's deadline.
async fn answer(
    ctx: &RpcContext,
    id: Id<'_>,
    tx: Bytes,
    ext: &hyper::http::Extensions,
) -> HttpResponse {
    crate::count(METHOD);
    let call = crate::eth::submit_raw(ctx, tx);
    let result = match ext.get::<CallDeadline>() {
        Some(CallDeadline(deadline)) => {
            tokio::time::timeout_at((*deadline).into(), call).await.ok()
        }
        None => Some(call.await),
    };
    let rp = match result {
        Some(result) => {
            // The connection's record decides the lane of its next requests.
            if let Some(meta) = ext.get::<RequestMeta>() {
                meta.conn.record.note(result.is_ok());
            }
            match result {
                Ok(hash) => {
                    MethodResponse::response(id, ResponsePayload::success(hash), usize::MAX)
                }
                Err(e) => MethodResponse::error(id, e),
            }
        }
        None => {
            metrics::counter!("moat_rpc_call_timeouts_total").increment(1);
            MethodResponse::error(id, ErrorObject::borrowed(TIMEOUT_CODE, TIMEOUT_MSG, None))
        }
    };
    response::from_method_response(rp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_usual_form_of_the_call_is_taken() {
        let ok =
            br#"{"jsonrpc":"2.0","id":7,"method":"eth_sendRawTransaction","params":["0x02ab"]}"#;
        let (id, tx) = parse(ok).expect("the usual form");
        assert_eq!(id, Id::Number(7));
        assert_eq!(&tx[..], &[0x02, 0xab]);
        let s =
            br#"{"id":"a-1","params":["0x00"],"method":"eth_sendRawTransaction","jsonrpc":"2.0"}"#;
        assert_eq!(parse(s).map(|c| c.0), Some(Id::Str("a-1".into())));
        let null =
            br#"{"jsonrpc":"2.0","id":null,"method":"eth_sendRawTransaction","params":["0x00"]}"#;
        assert_eq!(parse(null).map(|c| c.0), Some(Id::Null));
        for other in [
            // Another method, version, or shape: jsonrpsee's.
            &br#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":["0x00"]}"#[..],
            br#"{"jsonrpc":"1.0","id":1,"method":"eth_sendRawTransaction","params":["0x00"]}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":["0x00"],"x":1}"#,
            br#"{"jsonrpc":"2.0","method":"eth_sendRawTransaction","params":["0x00"]}"#,
            br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"eth_sendRawTransaction","params":["0x00"]}"#,
            br#"[{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":["0x00"]}]"#,
            // Parameters the handler words errors for.
            br#"{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":["00"]}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":["0xzz"]}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":[]}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":["0x00",1]}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":{"a":"0x00"}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":["\u0030x00"]}"#,
            // Ids jsonrpsee reads differently or refuses.
            br#"{"jsonrpc":"2.0","id":"a\"b","method":"eth_sendRawTransaction","params":["0x00"]}"#,
            br#"{"jsonrpc":"2.0","id":1.5,"method":"eth_sendRawTransaction","params":["0x00"]}"#,
            br#"{"jsonrpc":"2.0","id":-1,"method":"eth_sendRawTransaction","params":["0x00"]}"#,
            br#"{"jsonrpc":"2.0","id":99999999999999999999,"method":"eth_sendRawTransaction","params":["0x00"]}"#,
            br#"{"jsonrpc":"2.0","id":[1],"method":"eth_sendRawTransaction","params":["0x00"]}"#,
            b"not json",
        ] {
            assert!(
                parse(other).is_none(),
                "{} should go to jsonrpsee",
                String::from_utf8_lossy(other)
            );
        }
    }
}
