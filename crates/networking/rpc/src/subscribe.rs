//! `eth_subscribe` over WebSocket: "newHeads" (fed by the node through
//! [`HeadNotifier`]), "newPendingTransactions" (fed by the pool), "logs" (the matching
//! logs of each new canonical block, read through `eth_getLogs`; when a reorg undoes
//! blocks whose logs were sent, those logs are sent again with `removed: true` first, see
//! [`crate::reorg`]) and "syncing" (the `eth_syncing` answer, checked every second and
//! sent when it changes).
//!
//! Each subscription forwards from a tokio broadcast channel. A subscriber that falls
//! behind skips what it missed instead of holding the channel back: a slow client must
//! not cost the node memory.

use crate::RpcContext;
use crate::json::{header_json, tx_json};
use crate::params::invalid_params;
use jsonrpsee::server::IdProvider;
use jsonrpsee::types::{Params, SubscriptionId};
use jsonrpsee::{PendingSubscriptionSink, SubscriptionMessage, SubscriptionSink};
use moat_common::block::Header;
use serde_json::Value;
use serde_json::value::RawValue;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::broadcast;

/// Headers announced to newHeads subscribers, already serialised once for all of them.
pub type HeadMessage = Box<RawValue>;

/// The hook block import calls after each new head.
#[derive(Debug, Clone)]
pub struct HeadNotifier {
    tx: broadcast::Sender<HeadMessage>,
}

impl Default for HeadNotifier {
    fn default() -> Self {
        Self {
            tx: broadcast::channel(64).0,
        }
    }
}

impl HeadNotifier {
    /// Announces `header` to every newHeads subscriber; nobody listening is fine.
    pub fn notify_new_head(&self, header: &Header) {
        let json = Value::Object(header_json(header, header.hash()));
        if let Ok(raw) = serde_json::value::to_raw_value(&json) {
            let _ = self.tx.send(raw);
        }
    }

    /// The underlying channel, for callers that serialise headers themselves.
    pub fn sender(&self) -> broadcast::Sender<HeadMessage> {
        self.tx.clone()
    }
}

/// Subscription ids in geth's form: 16 random bytes as `0x`-hex.
#[derive(Debug)]
pub(crate) struct HexIdProvider {
    seed: std::collections::hash_map::RandomState,
    counter: AtomicU64,
}

impl Default for HexIdProvider {
    fn default() -> Self {
        Self {
            seed: std::collections::hash_map::RandomState::new(),
            counter: AtomicU64::new(0),
        }
    }
}

impl IdProvider for HexIdProvider {
    fn next_id(&self) -> SubscriptionId<'static> {
        // SipHash under a per-process random key: unpredictable ids without a rand dependency.
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut words = [0u64; 2];
        for (i, w) in words.iter_mut().enumerate() {
            let mut h = self.seed.build_hasher();
            h.write_u64(n);
            h.write_u8(i as u8);
            *w = h.finish();
        }
        SubscriptionId::Str(format!("0x{:016x}{:016x}", words[0], words[1]).into())
    }
}

enum Kind {
    NewHeads,
    PendingTxs { full: bool },
    Logs(serde_json::Map<String, Value>),
    Syncing,
}

fn parse_kind(params: &Params<'_>) -> Result<Kind, jsonrpsee::types::ErrorObjectOwned> {
    let values: Vec<Value> = if params.as_str().is_none() {
        Vec::new()
    } else {
        params.parse()?
    };
    match values.first().and_then(Value::as_str) {
        Some("newHeads") => Ok(Kind::NewHeads),
        Some("newPendingTransactions") => {
            let full = matches!(values.get(1), Some(Value::Bool(true)));
            Ok(Kind::PendingTxs { full })
        }
        Some("logs") => match values.get(1) {
            None | Some(Value::Null) => Ok(Kind::Logs(Default::default())),
            Some(Value::Object(o)) => {
                if o.contains_key("fromBlock")
                    || o.contains_key("toBlock")
                    || o.contains_key("blockHash")
                {
                    return Err(invalid_params(
                        "a logs subscription takes only address and topics",
                    ));
                }
                Ok(Kind::Logs(o.clone()))
            }
            Some(_) => Err(invalid_params("invalid logs filter")),
        },
        Some("syncing") => Ok(Kind::Syncing),
        Some(other) => Err(invalid_params(format!(
            "no \"{other}\" subscription in eth namespace"
        ))),
        None => Err(invalid_params("missing subscription name")),
    }
}

/// Forwards `rx` to `sink`, mapping each item; skips what a lagging subscriber missed.
async fn forward<T: Clone>(
    sink: SubscriptionSink,
    mut rx: broadcast::Receiver<T>,
    map: impl Fn(T) -> Option<Box<RawValue>>,
) {
    loop {
        tokio::select! {
            _ = sink.closed() => return,
            item = rx.recv() => match item {
                Ok(item) => {
                    let Some(raw) = map(item) else { continue };
                    if sink.send(SubscriptionMessage::from(raw)).await.is_err() {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return,
            },
        }
    }
}

pub(crate) async fn eth_subscribe(
    params: Params<'static>,
    pending: PendingSubscriptionSink,
    ctx: Arc<RpcContext>,
) {
    let kind = match parse_kind(&params) {
        Ok(k) => k,
        Err(e) => {
            pending.reject(e).await;
            return;
        }
    };
    // Subscribe before accepting, so nothing announced in between is lost.
    match kind {
        Kind::NewHeads => {
            let rx = ctx.heads.tx.subscribe();
            let Ok(sink) = pending.accept().await else {
                return;
            };
            forward(sink, rx, Some).await;
        }
        Kind::PendingTxs { full } => {
            let rx = ctx.pool.subscribe_pending();
            let Ok(sink) = pending.accept().await else {
                return;
            };
            let pool = ctx.pool.clone();
            forward(sink, rx, move |hash| {
                let value = if full {
                    // Already mined or evicted: nothing left to show.
                    let tx = pool.get(&hash)?;
                    tx_json(tx.tx.tx(), tx.sender, None)
                } else {
                    serde_json::json!(hash)
                };
                serde_json::value::to_raw_value(&value).ok()
            })
            .await;
        }
        Kind::Logs(criteria) => {
            // The criteria must parse before the subscription is accepted.
            let check = ctx
                .head()
                .and_then(|(_, head)| logs_of(&ctx, &criteria, head));
            if let Err(e) = check {
                pending.reject(e).await;
                return;
            }
            let rx = ctx.heads.tx.subscribe();
            let Ok((number, hash)) = ctx.head() else {
                return;
            };
            let Ok(sink) = pending.accept().await else {
                return;
            };
            let reported = crate::reorg::ReportedBlocks::starting_after(number, hash);
            forward_logs(sink, rx, ctx, criteria, reported).await;
        }
        Kind::Syncing => {
            let Ok(sink) = pending.accept().await else {
                return;
            };
            let mut last: Option<Value> = None;
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = sink.closed() => return,
                    _ = tick.tick() => {}
                }
                let Ok(now) = crate::sync::syncing(&ctx, Params::new(None)) else {
                    continue;
                };
                if last.as_ref() == Some(&now) {
                    continue;
                }
                // geth's shape: the progress while syncing, `false` once done.
                let message = match &now {
                    Value::Bool(false) => Value::Bool(false),
                    status => serde_json::json!({ "syncing": true, "status": status }),
                };
                let first = last.is_none();
                last = Some(now);
                if first && message == Value::Bool(false) {
                    continue;
                }
                let Ok(raw) = serde_json::value::to_raw_value(&message) else {
                    continue;
                };
                if sink.send(SubscriptionMessage::from(raw)).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// The logs of block `hash` that match `criteria` (address, topics).
fn logs_of(
    ctx: &RpcContext,
    criteria: &serde_json::Map<String, Value>,
    hash: alloy_primitives::B256,
) -> Result<Value, jsonrpsee::types::ErrorObjectOwned> {
    let mut c = criteria.clone();
    c.insert("blockHash".into(), serde_json::json!(hash));
    let text = Value::Array(vec![Value::Object(c)]).to_string();
    crate::logs::get_logs(ctx, Params::new(Some(&text)))
}

/// The messages a move of the head to `number` makes: the matching logs of the blocks it
/// undid, marked removed (newest block first), then those of the new canonical blocks.
fn head_moved(
    ctx: &RpcContext,
    criteria: &serde_json::Map<String, Value>,
    reported: &mut crate::reorg::ReportedBlocks,
    number: u64,
) -> Vec<Value> {
    let store = ctx.chain.store();
    let Ok(advance) = reported.advance(number, |n| store.canonical_hash(n)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (_, hash) in advance.undone {
        if let Ok(Value::Array(logs)) = logs_of(ctx, criteria, hash) {
            out.extend(logs.into_iter().map(|mut log| {
                log["removed"] = Value::Bool(true);
                log
            }));
        }
    }
    // A jump of more than a reorg's depth (after a sync) sends the last blocks' logs only.
    let (first, last) = advance.new.into_inner();
    let first = first.max(last.saturating_sub(crate::reorg::TRACKED_BLOCKS as u64 - 1));
    for n in first..=last {
        let Ok(Some(hash)) = store.canonical_hash(n) else {
            continue;
        };
        if let Ok(Value::Array(logs)) = logs_of(ctx, criteria, hash) {
            out.extend(logs);
        }
    }
    out
}

/// For each new head, the logs it brings (and takes back), one message each.
async fn forward_logs(
    sink: SubscriptionSink,
    mut rx: broadcast::Receiver<HeadMessage>,
    ctx: Arc<RpcContext>,
    criteria: serde_json::Map<String, Value>,
    mut reported: crate::reorg::ReportedBlocks,
) {
    loop {
        let head = tokio::select! {
            _ = sink.closed() => return,
            item = rx.recv() => match item {
                Ok(head) => head,
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return,
            },
        };
        let Some(number) = serde_json::from_str::<Value>(head.get())
            .ok()
            .and_then(|v| v.get("number").and_then(Value::as_str).map(String::from))
            .and_then(|n| crate::params::parse_quantity(&n).ok())
        else {
            continue;
        };
        let (c, criteria2) = (ctx.clone(), criteria.clone());
        let Ok((back, logs)) = tokio::task::spawn_blocking(move || {
            let logs = head_moved(&c, &criteria2, &mut reported, number);
            (reported, logs)
        })
        .await
        else {
            return;
        };
        reported = back;
        for log in logs {
            let Ok(raw) = serde_json::value::to_raw_value(&log) else {
                continue;
            };
            if sink.send(SubscriptionMessage::from(raw)).await.is_err() {
                return;
            }
        }
    }
}
