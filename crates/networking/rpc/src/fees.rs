//! Fee methods: `eth_gasPrice`, `eth_maxPriorityFeePerGas`, `eth_blobBaseFee`,
//! `eth_feeHistory`.
//!
//! The suggested tip is the median effective tip of the transactions in the last
//! [`TIP_BLOCKS`] blocks (tips under [`IGNORE_TIP`] left out, as geth's oracle does),
//! or [`DEFAULT_TIP`] when those blocks hold none. It is computed once per head.

use crate::RpcContext;
use crate::eth::positional;
use crate::json::{q, q256};
use crate::params::{
    BlockRef, RpcResult, internal, invalid_params, parse_block_number, parse_u64_lenient,
};
use crate::state::{block_blob_base_fee, next_block_fees};
use alloy_primitives::{B256, U256};
use jsonrpsee::types::Params;
use moat_common::block::Header;
use moat_common::constants::GAS_PER_BLOB;
use parking_lot::Mutex;
use serde_json::{Value, json};

/// Blocks the tip suggestion looks back over.
pub(crate) const TIP_BLOCKS: u64 = 20;
/// Tip suggested when recent blocks have no transactions: 1 gwei.
pub(crate) const DEFAULT_TIP: u128 = 1_000_000_000;
/// Tips below this are noise (geth's `IgnorePrice`).
pub(crate) const IGNORE_TIP: u128 = 2;
/// Most blocks one `eth_feeHistory` call may ask for (geth's limit).
pub(crate) const MAX_FEE_HISTORY: u64 = 1024;
/// Most reward percentiles one call may ask for: each costs a pass per block.
pub(crate) const MAX_PERCENTILES: usize = 100;

/// The tip suggested for the head with this hash.
#[derive(Debug, Default)]
pub(crate) struct TipCache(Mutex<Option<(B256, u128)>>);

impl RpcContext {
    /// The suggested tip per gas at the current head.
    pub(crate) fn suggested_tip(&self) -> RpcResult<u128> {
        let (head_number, head_hash) = self.head()?;
        if let Some((hash, tip)) = *self.tips.0.lock()
            && hash == head_hash
        {
            return Ok(tip);
        }
        let mut tips = Vec::new();
        let first = head_number.saturating_sub(TIP_BLOCKS - 1);
        for number in first..=head_number {
            let Some(hash) = self
                .chain
                .store()
                .canonical_hash(number)
                .map_err(internal)?
            else {
                continue;
            };
            let Some(block) = self.block(&hash)? else {
                continue;
            };
            let base = block.header.base_fee_per_gas.unwrap_or(0);
            tips.extend(
                block
                    .transactions
                    .iter()
                    .filter_map(|tx| tx.tx().effective_tip_per_gas(base))
                    .filter(|t| *t >= IGNORE_TIP),
            );
        }
        let tip = if tips.is_empty() {
            DEFAULT_TIP
        } else {
            let mid = tips.len() / 2;
            *tips.select_nth_unstable(mid).1
        };
        *self.tips.0.lock() = Some((head_hash, tip));
        Ok(tip)
    }
}

pub(crate) fn gas_price(ctx: &RpcContext) -> RpcResult<Value> {
    let tip = ctx.suggested_tip()?;
    let (base_fee, _) = next_block_fees(ctx.chain.config(), &ctx.head_header()?);
    Ok(q(tip.saturating_add(u128::from(base_fee))))
}

pub(crate) fn max_priority_fee(ctx: &RpcContext) -> RpcResult<Value> {
    Ok(q(ctx.suggested_tip()?))
}

pub(crate) fn blob_base_fee(ctx: &RpcContext) -> RpcResult<Value> {
    let (_, blob_fee) = next_block_fees(ctx.chain.config(), &ctx.head_header()?);
    Ok(q(blob_fee))
}

fn percentiles_param(v: Option<Value>) -> RpcResult<Vec<f64>> {
    let ps: Vec<f64> = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(v) => serde_json::from_value(v)
            .map_err(|e| invalid_params(format!("invalid reward percentiles: {e}")))?,
    };
    if ps.len() > MAX_PERCENTILES {
        return Err(invalid_params(format!(
            "too many reward percentiles: {}, limit {MAX_PERCENTILES}",
            ps.len()
        )));
    }
    for (i, p) in ps.iter().enumerate() {
        if !(0.0..=100.0).contains(p) {
            return Err(invalid_params(format!("invalid reward percentile: {p}")));
        }
        if i > 0 && *p <= ps[i - 1] {
            return Err(invalid_params(format!(
                "invalid reward percentile: #{}:{} >= #{i}:{p}",
                i - 1,
                ps[i - 1]
            )));
        }
    }
    Ok(ps)
}

/// Rewards of one block at the given percentiles: transactions sorted by effective tip,
/// each weighted by the gas it used (the receipts' cumulative differences).
fn block_rewards(
    ctx: &RpcContext,
    header: &Header,
    hash: &B256,
    percentiles: &[f64],
) -> RpcResult<Vec<Value>> {
    let zeros = || percentiles.iter().map(|_| q(0u8)).collect();
    let (Some(block), Some(receipts)) = (
        ctx.block(hash)?,
        ctx.chain.receipts(hash).map_err(internal)?,
    ) else {
        return Ok(zeros());
    };
    if block.transactions.is_empty() || header.gas_used == 0 {
        return Ok(zeros());
    }
    let base = header.base_fee_per_gas.unwrap_or(0);
    let mut prior = 0u64;
    let mut txs: Vec<(u128, u64)> = block
        .transactions
        .iter()
        .zip(&receipts)
        .map(|(tx, r)| {
            let used = r.cumulative_gas_used.saturating_sub(prior);
            prior = r.cumulative_gas_used;
            (tx.tx().effective_tip_per_gas(base).unwrap_or(0), used)
        })
        .collect();
    if txs.is_empty() {
        return Ok(zeros());
    }
    txs.sort_unstable_by_key(|(tip, _)| *tip);
    let mut out = Vec::with_capacity(percentiles.len());
    let (mut i, mut sum) = (0usize, txs[0].1);
    for p in percentiles {
        let threshold = (header.gas_used as f64 * p / 100.0) as u64;
        while sum < threshold && i + 1 < txs.len() {
            i += 1;
            sum += txs[i].1;
        }
        out.push(q(txs[i].0));
    }
    Ok(out)
}

/// `eth_feeHistory(blockCount, newestBlock, rewardPercentiles?)` in geth's shape:
/// baseFeePerGas and baseFeePerBlobGas have one more entry than blocks (the next block's).
pub(crate) fn fee_history(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [count, newest, ps] = positional::<3>(&params)?;
    let count = parse_u64_lenient(
        &count.ok_or_else(|| invalid_params("missing value for required argument 0"))?,
    )?;
    let newest = newest.ok_or_else(|| invalid_params("missing value for required argument 1"))?;
    let newest = parse_block_number(&newest)?;
    let percentiles = percentiles_param(ps)?;
    let count = count.min(MAX_FEE_HISTORY);
    if count == 0 {
        return Ok(json!({ "oldestBlock": q(0u8), "gasUsedRatio": Value::Null }));
    }
    let (head_number, _) = ctx.head()?;
    let newest_number = match newest {
        BlockRef::Number(n) if n > head_number => {
            return Err(invalid_params(format!(
                "request beyond head block: requested {n}, head {head_number}"
            )));
        }
        BlockRef::Number(n) => n,
        BlockRef::Tag(tag) => ctx.tag_block(tag)?.0,
        BlockRef::Hash(_) => head_number,
    };
    let oldest = newest_number.saturating_sub(count - 1);
    let config = ctx.chain.config();

    let mut base_fees = Vec::new();
    let mut blob_fees = Vec::new();
    let mut gas_ratio = Vec::new();
    let mut blob_ratio = Vec::new();
    let mut rewards = Vec::new();
    let mut last: Option<Header> = None;
    for number in oldest..=newest_number {
        let Some(hash) = ctx.chain.store().canonical_hash(number).map_err(internal)? else {
            break;
        };
        let Some(header) = ctx.chain.header(&hash).map_err(internal)? else {
            break;
        };
        base_fees.push(q(header.base_fee_per_gas.unwrap_or(0)));
        blob_fees.push(q(block_blob_base_fee(config, &header).unwrap_or(0)));
        gas_ratio.push(json!(if header.gas_limit == 0 {
            0.0
        } else {
            header.gas_used as f64 / header.gas_limit as f64
        }));
        let max_blob_gas = config
            .blob_params_at(header.timestamp)
            .map_or(0, |p| p.max * GAS_PER_BLOB);
        let used = header.blob_gas_used.unwrap_or(0);
        blob_ratio.push(json!(if max_blob_gas == 0 {
            0.0
        } else {
            used as f64 / max_blob_gas as f64
        }));
        if !percentiles.is_empty() {
            rewards.push(Value::Array(block_rewards(
                ctx,
                &header,
                &hash,
                &percentiles,
            )?));
        }
        last = Some(header);
    }
    let Some(last) = last else {
        return Err(server_error_missing(oldest));
    };
    let (next_base, next_blob) = next_block_fees(config, &last);
    base_fees.push(q(next_base));
    blob_fees.push(q256(U256::from(next_blob)));

    let mut out = serde_json::Map::new();
    out.insert("oldestBlock".into(), q(oldest));
    if !percentiles.is_empty() {
        out.insert("reward".into(), Value::Array(rewards));
    }
    out.insert("baseFeePerGas".into(), Value::Array(base_fees));
    out.insert("gasUsedRatio".into(), Value::Array(gas_ratio));
    out.insert("baseFeePerBlobGas".into(), Value::Array(blob_fees));
    out.insert("blobGasUsedRatio".into(), Value::Array(blob_ratio));
    Ok(Value::Object(out))
}

fn server_error_missing(number: u64) -> jsonrpsee::types::ErrorObjectOwned {
    crate::params::server_error(format!("block {number} not found"))
}
