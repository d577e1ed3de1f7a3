//! `txpool_` methods in geth's formats.
//!
//! geth has two lists, pending and queued. Our pending subpool is geth's pending; the
//! basefee, queued and blob subpools hold what cannot go into the next block, which is
//! what geth calls queued. Accounts are map keys in checksummed form and nonces decimal
//! strings, as geth writes them.

use crate::RpcContext;
use crate::eth::positional;
use crate::json::{q, tx_json};
use crate::params::{RpcResult, invalid_params};
use alloy_primitives::{Address, TxKind};
use jsonrpsee::types::Params;
use moat_mempool::{PoolTx, SubPool};
use serde_json::{Map, Value, json};

fn is_pending(sub: SubPool) -> bool {
    sub == SubPool::Pending
}

pub(crate) fn status(ctx: &RpcContext) -> Value {
    let s = ctx.pool.status();
    let queued = s.basefee.txs + s.queued.txs + s.blob.txs;
    json!({ "pending": q(s.pending.txs as u64), "queued": q(queued as u64) })
}

/// geth's `txpool_inspect` line: "to: value wei + gas gas × price wei".
fn summary(tx: &PoolTx) -> Value {
    let t = tx.tx.tx().tx();
    let price = t.max_fee_per_gas();
    let line = match t.to() {
        TxKind::Call(to) => format!(
            "{}: {} wei + {} gas × {} wei",
            to.to_checksum(None),
            t.value(),
            t.gas_limit(),
            price
        ),
        TxKind::Create => format!(
            "contract creation: {} wei + {} gas × {} wei",
            t.value(),
            t.gas_limit(),
            price
        ),
    };
    Value::String(line)
}

/// Pending and queued maps of `sender → nonce → render(tx)`.
fn by_sender(
    ctx: &RpcContext,
    only: Option<Address>,
    render: impl Fn(&PoolTx) -> Value,
) -> (Map<String, Value>, Map<String, Value>) {
    let (mut pending, mut queued) = (Map::new(), Map::new());
    let content = match only {
        Some(a) => {
            let txs = ctx.pool.sender_txs(&a);
            let subpools: Vec<_> = txs
                .into_iter()
                .filter_map(|tx| ctx.pool.subpool_of(&tx.hash()).map(|s| (tx, s)))
                .collect();
            vec![(a, subpools)]
        }
        None => ctx.pool.content(),
    };
    for (sender, txs) in content {
        let key = sender.to_checksum(None);
        for (tx, sub) in txs {
            let target = if is_pending(sub) {
                &mut pending
            } else {
                &mut queued
            };
            let entry = target
                .entry(key.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(m) = entry {
                m.insert(tx.nonce().to_string(), render(&tx));
            }
        }
    }
    (pending, queued)
}

fn render_full(tx: &PoolTx) -> Value {
    tx_json(tx.tx.tx(), tx.sender, None)
}

pub(crate) fn content(ctx: &RpcContext) -> Value {
    let (pending, queued) = by_sender(ctx, None, render_full);
    json!({ "pending": pending, "queued": queued })
}

pub(crate) fn inspect(ctx: &RpcContext) -> Value {
    let (pending, queued) = by_sender(ctx, None, summary);
    json!({ "pending": pending, "queued": queued })
}

/// `txpool_contentFrom(address)`: that sender's `nonce → tx` maps, without the address level.
pub(crate) fn content_from(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [a] = positional::<1>(&params)?;
    let a = a.ok_or_else(|| invalid_params("missing value for required argument 0"))?;
    let address: Address =
        serde_json::from_value(a).map_err(|e| invalid_params(format!("invalid address: {e}")))?;
    let (mut pending, mut queued) = by_sender(ctx, Some(address), render_full);
    let key = address.to_checksum(None);
    let empty = || Value::Object(Map::new());
    Ok(json!({
        "pending": pending.remove(&key).unwrap_or_else(empty),
        "queued": queued.remove(&key).unwrap_or_else(empty),
    }))
}
