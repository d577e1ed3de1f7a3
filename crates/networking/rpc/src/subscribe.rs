//! `eth_subscribe` over WebSocket: "newHeads" (fed by the node through
//! [`HeadNotifier`]) and "newPendingTransactions" (fed by the pool).
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
pub struct HexIdProvider {
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
        Some("logs" | "syncing") => Err(invalid_params("subscription not supported by this node")),
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

pub async fn eth_subscribe(
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
    }
}
