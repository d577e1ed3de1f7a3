//! The dev node's test-chain methods, under anvil's and hardhat's names: `evm_mine`,
//! `anvil_mine`, `evm_snapshot` / `evm_revert`, `evm_increaseTime`,
//! `evm_setNextBlockTimestamp`, `anvil_setBalance`, `anvil_setCode`, `anvil_setStorageAt`
//! and `anvil_setNonce` (the last four and `mine` also as `hardhat_…`).
//!
//! Each is a [`DevRequest`] to the dev block producer, which owns the chain's head on a
//! dev node: a request waits its turn behind the block being sealed, so a state edit or
//! a revert never races a block. Off the dev node there is no producer and every one of
//! these methods is "method not found" (the `evm` and `anvil` namespaces are not served
//! there either).

use crate::RpcContext;
use crate::eth::positional;
use crate::params::{RpcResult, invalid_params, parse_u64_lenient, server_error};
use alloy_primitives::{Address, B256, Bytes, U256};
use jsonrpsee::types::{ErrorObjectOwned, Params};
use moat_blockchain::chain::StateEdit;
use serde_json::{Value, json};

/// The producer's answer to one request.
pub type Reply<T> = tokio::sync::oneshot::Sender<Result<T, String>>;

/// What the dev methods ask of the dev block producer.
#[derive(Debug)]
pub enum DevRequest {
    /// Seal a block now, at the time given; answered with its number (`None`: nothing
    /// was imported). The time is read by the producer, so no other block can take it.
    Mine(MineTime, Reply<Option<u64>>),
    /// Seal a block whose post-state has these edits.
    Edit(Vec<StateEdit>, Reply<()>),
    /// Remember the head (and the pool); answered with the snapshot's id.
    Snapshot(Reply<u64>),
    /// Go back to a snapshot, dropping it and every later one; `false` for an unknown id.
    Revert(u64, Reply<bool>),
    /// Move the dev clock forward by this many seconds; answered with the total shift.
    IncreaseTime(u64, Reply<u64>),
    /// The next block's timestamp (it must be later than the head's).
    SetNextTimestamp(u64, Reply<()>),
    /// A transaction was just submitted over RPC: with `--dev.period 0` the producer seals
    /// it now and answers once it is in a block (anvil's automine: the receipt exists
    /// when the hash is returned); otherwise it answers at once.
    Automine(Reply<()>),
}

/// The timestamp of a block `evm_mine` / `anvil_mine` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MineTime {
    /// The dev clock's (and `evm_setNextBlockTimestamp`'s).
    Clock,
    /// This timestamp (it must be later than the head's).
    At(u64),
    /// This many seconds after the head's.
    AfterHead(u64),
}

/// anvil's error for a method the node does not serve.
pub(crate) fn not_found(method: &str) -> ErrorObjectOwned {
    ErrorObjectOwned::owned(
        jsonrpsee::types::error::METHOD_NOT_FOUND_CODE,
        format!("the method {method} does not exist/is not available"),
        None::<()>,
    )
}

/// "method not found" off the dev node: checked before the arguments, so a node without
/// the method answers the same to any call of it.
pub(crate) fn require_dev(ctx: &RpcContext, method: &str) -> RpcResult<()> {
    match ctx.mine {
        Some(_) => Ok(()),
        None => Err(not_found(method)),
    }
}

/// Sends a request made by `make` to the producer and waits for its answer.
async fn ask<T>(
    ctx: &RpcContext,
    method: &str,
    make: impl FnOnce(Reply<T>) -> DevRequest,
) -> RpcResult<T> {
    let Some(producer) = &ctx.mine else {
        return Err(not_found(method));
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let stopped = || server_error("the block producer has stopped");
    producer.send(make(tx)).await.map_err(|_| stopped())?;
    rx.await.map_err(|_| stopped())?.map_err(server_error)
}

/// Argument `i` parsed as `T`.
pub(crate) fn arg<T: serde::de::DeserializeOwned>(v: Option<Value>, i: usize) -> RpcResult<T> {
    let v = v.ok_or_else(|| invalid_params(format!("missing value for required argument {i}")))?;
    serde_json::from_value(v).map_err(|e| invalid_params(format!("invalid argument {i}: {e}")))
}

/// A U256 given as a hex quantity, a decimal string or a JSON number.
fn u256_arg(v: Option<Value>, i: usize) -> RpcResult<U256> {
    let bad = || invalid_params(format!("invalid argument {i}: expected a quantity"));
    match v {
        Some(Value::Number(n)) => n.as_u64().map(U256::from).ok_or_else(bad),
        Some(Value::String(s)) => match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            Some(hex) => U256::from_str_radix(hex, 16).map_err(|_| bad()),
            None => U256::from_str_radix(&s, 10).map_err(|_| bad()),
        },
        Some(_) => Err(bad()),
        None => Err(invalid_params(format!(
            "missing value for required argument {i}"
        ))),
    }
}

/// A storage slot: a 32-byte word or a quantity (anvil takes both).
fn slot_arg(v: Option<Value>, i: usize) -> RpcResult<B256> {
    match &v {
        Some(Value::String(s)) if s.len() == 66 => arg(v, i),
        _ => u256_arg(v, i).map(B256::from),
    }
}

/// On the dev node with automine on (`--dev.period 0`), waits for
/// [`DevRequest::Automine`] after a submission; elsewhere returns at once (a dev node
/// with a period seals on its own clock, and a submission does not queue behind the
/// producer). A failed block is the producer's to log: the hash stands.
pub(crate) async fn automine(ctx: &RpcContext) {
    if ctx.automine && ctx.mine.is_some() {
        let _ = ask(ctx, "eth_sendTransaction", DevRequest::Automine).await;
    }
}

/// Most blocks one `evm_mine` / `anvil_mine` call seals.
pub(crate) const MAX_MINE: u64 = 10_000;

/// Seals `blocks` blocks, the first at `first` if given, each `interval` seconds after
/// its parent if given.
async fn mine(
    ctx: &RpcContext,
    method: &str,
    blocks: u64,
    first: Option<u64>,
    interval: Option<u64>,
) -> RpcResult<()> {
    if blocks > MAX_MINE {
        return Err(invalid_params(format!(
            "at most {MAX_MINE} blocks in one call"
        )));
    }
    for i in 0..blocks {
        let at = match (i, first, interval) {
            (0, Some(t), _) => MineTime::At(t),
            (_, _, Some(secs)) => MineTime::AfterHead(secs),
            _ => MineTime::Clock,
        };
        ask(ctx, method, |r| DevRequest::Mine(at, r)).await?;
    }
    Ok(())
}

/// `evm_mine([timestamp | {timestamp, blocks}])`: seals a block now (or `blocks`, the
/// first at `timestamp`) and answers "0x0".
pub(crate) async fn evm_mine(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    require_dev(ctx, "evm_mine")?;
    let [opts] = positional::<1>(&params)?;
    let (timestamp, blocks) = match opts {
        None | Some(Value::Null) => (None, 1),
        Some(Value::Object(o)) => {
            let get = |name: &str| {
                o.get(name)
                    .filter(|v| !v.is_null())
                    .map(parse_u64_lenient)
                    .transpose()
            };
            (get("timestamp")?, get("blocks")?.unwrap_or(1))
        }
        Some(v) => (Some(parse_u64_lenient(&v)?), 1),
    };
    mine(ctx, "evm_mine", blocks, timestamp, None).await?;
    Ok(json!("0x0"))
}

/// `anvil_mine([blocks], [interval])` (and `hardhat_mine`): seals `blocks` blocks (one
/// by default), `interval` seconds apart if given.
pub(crate) async fn anvil_mine(
    ctx: &RpcContext,
    method: &str,
    params: Params<'_>,
) -> RpcResult<Value> {
    require_dev(ctx, method)?;
    let [blocks, interval] = positional::<2>(&params)?;
    let blocks = match blocks.filter(|v| !v.is_null()) {
        None => 1,
        b => u64::try_from(u256_arg(b, 0)?).map_err(|_| invalid_params("too many blocks"))?,
    };
    let interval = match interval.filter(|v| !v.is_null()) {
        None => None,
        i => {
            Some(u64::try_from(u256_arg(i, 1)?).map_err(|_| invalid_params("interval too large"))?)
        }
    };
    mine(ctx, method, blocks, None, interval).await?;
    Ok(Value::Null)
}

/// `evm_snapshot`: the id of a snapshot of the head, its state and the pool.
pub(crate) async fn evm_snapshot(ctx: &RpcContext) -> RpcResult<Value> {
    let id = ask(ctx, "evm_snapshot", DevRequest::Snapshot).await?;
    Ok(crate::json::q(id))
}

/// `evm_revert(id)`: back to the snapshot (chain, state, pool); `false` for an unknown
/// or already used id.
pub(crate) async fn evm_revert(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    require_dev(ctx, "evm_revert")?;
    let [id] = positional::<1>(&params)?;
    let id = u256_arg(id, 0)?;
    let Ok(id) = u64::try_from(id) else {
        return Ok(json!(false));
    };
    let reverted = ask(ctx, "evm_revert", |r| DevRequest::Revert(id, r)).await?;
    Ok(json!(reverted))
}

/// `evm_increaseTime(seconds)`: the next blocks' timestamps move forward; answers the
/// total shift in seconds.
pub(crate) async fn evm_increase_time(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    require_dev(ctx, "evm_increaseTime")?;
    let [secs] = positional::<1>(&params)?;
    let secs = parse_u64_lenient(
        &secs.ok_or_else(|| invalid_params("missing value for required argument 0"))?,
    )?;
    let total = ask(ctx, "evm_increaseTime", |r| {
        DevRequest::IncreaseTime(secs, r)
    })
    .await?;
    Ok(json!(total))
}

/// `evm_setNextBlockTimestamp(timestamp)`: the next block's timestamp.
pub(crate) async fn evm_set_next_block_timestamp(
    ctx: &RpcContext,
    params: Params<'_>,
) -> RpcResult<Value> {
    require_dev(ctx, "evm_setNextBlockTimestamp")?;
    let [ts] = positional::<1>(&params)?;
    let ts = parse_u64_lenient(
        &ts.ok_or_else(|| invalid_params("missing value for required argument 0"))?,
    )?;
    ask(ctx, "evm_setNextBlockTimestamp", |r| {
        DevRequest::SetNextTimestamp(ts, r)
    })
    .await?;
    Ok(Value::Null)
}

/// The anvil state setters (and their `hardhat_` names): each seals one block carrying
/// the edit.
pub(crate) async fn anvil_set(
    ctx: &RpcContext,
    method: &str,
    params: Params<'_>,
) -> RpcResult<Value> {
    require_dev(ctx, method)?;
    let name = method.replacen("hardhat_", "anvil_", 1);
    let edit = match name.as_str() {
        "anvil_setBalance" => {
            let [a, v] = positional::<2>(&params)?;
            StateEdit::Balance(arg::<Address>(a, 0)?, u256_arg(v, 1)?)
        }
        "anvil_setNonce" => {
            let [a, v] = positional::<2>(&params)?;
            let nonce = u64::try_from(u256_arg(v, 1)?)
                .map_err(|_| invalid_params("invalid argument 1: nonce too large"))?;
            StateEdit::Nonce(arg::<Address>(a, 0)?, nonce)
        }
        "anvil_setCode" => {
            let [a, c] = positional::<2>(&params)?;
            StateEdit::Code(arg::<Address>(a, 0)?, arg::<Bytes>(c, 1)?)
        }
        "anvil_setStorageAt" => {
            let [a, slot, value] = positional::<3>(&params)?;
            let value = slot_arg(value, 2)?;
            StateEdit::Storage(
                arg::<Address>(a, 0)?,
                slot_arg(slot, 1)?,
                U256::from_be_bytes(value.0),
            )
        }
        other => return Err(not_found(other)),
    };
    ask(ctx, method, |r| DevRequest::Edit(vec![edit], r)).await?;
    // anvil answers true for setStorageAt and null for the others; hardhat true for all.
    Ok(
        if name == "anvil_setStorageAt" || method.starts_with("hardhat_") {
            json!(true)
        } else {
            Value::Null
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_taken_in_every_form_anvil_takes() {
        assert_eq!(u256_arg(Some(json!("0x10")), 0).unwrap(), U256::from(16));
        assert_eq!(u256_arg(Some(json!("16")), 0).unwrap(), U256::from(16));
        assert_eq!(u256_arg(Some(json!(16)), 0).unwrap(), U256::from(16));
        assert!(u256_arg(Some(json!(-1)), 0).is_err());
        assert!(u256_arg(Some(json!("0xzz")), 0).is_err());
        assert!(u256_arg(None, 0).is_err());
        let word = format!("0x{}01", "00".repeat(31));
        assert_eq!(
            slot_arg(Some(json!(word)), 0).unwrap(),
            B256::with_last_byte(1)
        );
        assert_eq!(
            slot_arg(Some(json!("0x1")), 0).unwrap(),
            B256::with_last_byte(1)
        );
    }
}
