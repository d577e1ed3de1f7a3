//! Polled filters, as geth keeps them: `eth_newFilter` (logs), `eth_newBlockFilter`,
//! `eth_newPendingTransactionFilter`, `eth_getFilterChanges`, `eth_getFilterLogs` and
//! `eth_uninstallFilter`.
//!
//! A filter remembers the last block it reported; a poll answers what is new since then
//! (block hashes, or the logs of the new blocks matching the criteria, through
//! `eth_getLogs`). A log filter remembers the blocks it reported ([`crate::reorg`]): when a
//! reorg undid some, their matching logs come first, with `removed: true`, as geth sends
//! them. The table is bounded ([`MAX_FILTERS`]) and a filter not polled for
//! [`FILTER_TIMEOUT`] is dropped, as geth drops it after five minutes.

use crate::RpcContext;
use crate::eth::positional;
use crate::json::q;
use crate::params::{RpcResult, invalid_params, server_error};
use crate::reorg::ReportedBlocks;
use alloy_primitives::B256;
use jsonrpsee::types::Params;
use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Most filters installed at once; a new one past it is refused.
pub(crate) const MAX_FILTERS: usize = 4096;
/// A filter not polled for this long is dropped (geth's `filterTimeout`).
pub(crate) const FILTER_TIMEOUT: Duration = Duration::from_secs(300);
/// Most transaction hashes a pending-transaction filter holds between polls.
const MAX_PENDING_HASHES: usize = 4096;

#[derive(Debug)]
enum Kind {
    Blocks,
    Logs(Map<String, Value>, ReportedBlocks),
    /// The pool's feed of new pending transactions, read at each poll (at most
    /// [`MAX_PENDING_HASHES`]; what the feed dropped while nobody polled is lost).
    Pending(tokio::sync::broadcast::Receiver<B256>),
}

#[derive(Debug)]
struct Filter {
    kind: Kind,
    /// The last block reported (or the head when installed).
    last_block: u64,
    last_poll: Instant,
}

/// The installed filters.
#[derive(Debug, Default)]
pub(crate) struct FilterTable {
    inner: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    next_id: u64,
    filters: HashMap<u64, Filter>,
}

impl FilterTable {
    fn install(&self, kind: Kind, head: u64, now: Instant) -> RpcResult<Value> {
        let mut t = self.inner.lock();
        t.filters
            .retain(|_, f| now.duration_since(f.last_poll) < FILTER_TIMEOUT);
        if t.filters.len() >= MAX_FILTERS {
            return Err(server_error("too many filters installed"));
        }
        t.next_id += 1;
        let id = t.next_id;
        t.filters.insert(
            id,
            Filter {
                kind,
                last_block: head,
                last_poll: now,
            },
        );
        Ok(q(id))
    }
}

fn filter_id(v: Option<Value>) -> RpcResult<u64> {
    let s = v
        .as_ref()
        .and_then(Value::as_str)
        .ok_or_else(|| invalid_params("invalid argument 0: expected a filter id"))?;
    crate::params::parse_quantity(s)
}

fn not_found() -> jsonrpsee::types::ErrorObjectOwned {
    server_error("filter not found")
}

pub(crate) fn new_filter(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [c] = positional::<1>(&params)?;
    let Some(Value::Object(criteria)) = c else {
        return Err(invalid_params(
            "invalid argument 0: expected a filter object",
        ));
    };
    if criteria.contains_key("blockHash") {
        return Err(invalid_params(
            "a filter with blockHash cannot be installed; use eth_getLogs",
        ));
    }
    // The criteria must parse now, not at the first poll.
    get_logs(ctx, criteria.clone())?;
    let (head, hash) = ctx.head()?;
    let reported = ReportedBlocks::starting_after(head, hash);
    ctx.filters
        .install(Kind::Logs(criteria, reported), head, Instant::now())
}

pub(crate) fn new_block_filter(ctx: &RpcContext, _params: Params<'_>) -> RpcResult<Value> {
    let (head, _) = ctx.head()?;
    ctx.filters.install(Kind::Blocks, head, Instant::now())
}

pub(crate) fn new_pending_transaction_filter(
    ctx: &RpcContext,
    _params: Params<'_>,
) -> RpcResult<Value> {
    let (head, _) = ctx.head()?;
    ctx.filters.install(
        Kind::Pending(ctx.pool.subscribe_pending()),
        head,
        Instant::now(),
    )
}

pub(crate) fn uninstall_filter(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [id] = positional::<1>(&params)?;
    let id = filter_id(id)?;
    Ok(Value::Bool(
        ctx.filters.inner.lock().filters.remove(&id).is_some(),
    ))
}

/// `eth_getLogs` with `criteria`, its block range replaced by `from..=to` when given.
fn get_logs(ctx: &RpcContext, mut criteria: Map<String, Value>) -> RpcResult<Value> {
    let text = Value::Array(vec![Value::Object(std::mem::take(&mut criteria))]).to_string();
    crate::logs::get_logs(ctx, Params::new(Some(&text)))
}

pub(crate) fn get_filter_changes(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [id] = positional::<1>(&params)?;
    let id = filter_id(id)?;
    let (head, _) = ctx.head()?;
    // Taken out of the table while the store is read, so polls do not hold the lock.
    let (criteria, from) = {
        let mut t = ctx.filters.inner.lock();
        let f = t.filters.get_mut(&id).ok_or_else(not_found)?;
        f.last_poll = Instant::now();
        let from = f.last_block + 1;
        f.last_block = head.max(f.last_block);
        match &mut f.kind {
            Kind::Pending(rx) => {
                let mut hashes = Vec::new();
                while hashes.len() < MAX_PENDING_HASHES {
                    match rx.try_recv() {
                        Ok(h) => hashes.push(h),
                        Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => continue,
                        Err(_) => break,
                    }
                }
                return Ok(json!(hashes));
            }
            Kind::Blocks => (None, from),
            Kind::Logs(c, reported) => (Some((c.clone(), reported.clone())), from),
        }
    };
    match criteria {
        None if from > head => Ok(Value::Array(Vec::new())),
        None => {
            let mut hashes = Vec::new();
            for n in from..=head {
                if let Some(h) = ctx
                    .chain
                    .store()
                    .canonical_hash(n)
                    .map_err(crate::params::internal)?
                {
                    hashes.push(json!(h));
                }
            }
            Ok(Value::Array(hashes))
        }
        Some((c, mut reported)) => {
            let store = ctx.chain.store();
            let advance = reported
                .advance(head, |n| store.canonical_hash(n))
                .map_err(crate::params::internal)?;
            if let Some(f) = ctx.filters.inner.lock().filters.get_mut(&id)
                && let Kind::Logs(_, r) = &mut f.kind
            {
                *r = reported;
            }
            log_changes(ctx, c, &advance)
        }
    }
}

/// A log filter's answer to a poll: the logs of the undone blocks marked removed (newest
/// block first), then those of the new blocks, all within the range the filter asked for.
fn log_changes(
    ctx: &RpcContext,
    c: Map<String, Value>,
    advance: &crate::reorg::Advance,
) -> RpcResult<Value> {
    let bound = |key: &str, default: u64| {
        c.get(key)
            .and_then(Value::as_str)
            .and_then(|s| crate::params::parse_quantity(s).ok())
            .unwrap_or(default)
    };
    let (asked_from, asked_to) = (bound("fromBlock", 0), bound("toBlock", u64::MAX));
    let mut out = Vec::new();
    for &(number, hash) in &advance.undone {
        if number < asked_from || number > asked_to {
            continue;
        }
        let mut by_hash = c.clone();
        by_hash.remove("fromBlock");
        by_hash.remove("toBlock");
        by_hash.insert("blockHash".into(), json!(hash));
        if let Value::Array(logs) = get_logs(ctx, by_hash)? {
            out.extend(logs.into_iter().map(|mut log| {
                log["removed"] = Value::Bool(true);
                log
            }));
        }
    }
    if !advance.new.is_empty() {
        let (lo, hi) = (
            (*advance.new.start()).max(asked_from),
            (*advance.new.end()).min(asked_to),
        );
        if lo <= hi {
            let mut range = c;
            range.insert("fromBlock".into(), q(lo));
            range.insert("toBlock".into(), q(hi));
            if let Value::Array(logs) = get_logs(ctx, range)? {
                out.extend(logs);
            }
        }
    }
    Ok(Value::Array(out))
}

pub(crate) fn get_filter_logs(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [id] = positional::<1>(&params)?;
    let id = filter_id(id)?;
    let criteria = {
        let mut t = ctx.filters.inner.lock();
        let f = t.filters.get_mut(&id).ok_or_else(not_found)?;
        f.last_poll = Instant::now();
        match &f.kind {
            Kind::Logs(c, _) => c.clone(),
            Kind::Blocks | Kind::Pending(_) => return Err(not_found()),
        }
    };
    get_logs(ctx, criteria)
}

/// Registers this module's methods.
pub(crate) fn register(
    m: &mut jsonrpsee::RpcModule<RpcContext>,
) -> Result<(), jsonrpsee::core::RegisterMethodError> {
    use crate::blocking;
    blocking(m, "eth_newFilter", new_filter)?;
    blocking(m, "eth_newBlockFilter", new_block_filter)?;
    blocking(
        m,
        "eth_newPendingTransactionFilter",
        new_pending_transaction_filter,
    )?;
    blocking(m, "eth_uninstallFilter", uninstall_filter)?;
    blocking(m, "eth_getFilterChanges", get_filter_changes)?;
    blocking(m, "eth_getFilterLogs", get_filter_logs)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_bounded_and_idle_filters_expire() {
        let table = FilterTable::default();
        let t0 = Instant::now();
        for _ in 0..MAX_FILTERS {
            table.install(Kind::Blocks, 0, t0).unwrap();
        }
        assert!(table.install(Kind::Blocks, 0, t0).is_err());
        // Five minutes on, the idle ones are gone and there is room again.
        let later = t0 + FILTER_TIMEOUT;
        assert!(table.install(Kind::Blocks, 0, later).is_ok());
        assert_eq!(table.inner.lock().filters.len(), 1);
    }
}
