//! Block-level reads beyond the basics, as geth answers them: a block's receipts, its
//! transaction and ommer counts, a transaction or ommer by position, headers, the raw
//! (RLP) forms under `debug_getRaw*`, several storage slots at once, and the next
//! block's base fee.

use crate::RpcContext;
use crate::eth::{block_param, positional};
use crate::json::{self, ReceiptContext, TxPlace, q};
use crate::params::{RpcResult, internal, invalid_params, parse_block_number, parse_slot};
use alloy_primitives::{Address, B256, Bytes};
use jsonrpsee::types::Params;
use moat_common::block::{Block, Header};
use serde_json::{Map, Value, json};

/// Most slots `eth_getStorageValues` reads in one call (geth's limit).
const MAX_STORAGE_VALUES: usize = 1024;

/// A 32-byte hash as geth takes it: a string with the `0x` prefix.
pub(crate) fn hash_param(v: Option<Value>) -> RpcResult<B256> {
    let v = v.ok_or_else(|| invalid_params("missing value for required argument 0"))?;
    match v.as_str() {
        Some(s) if s.starts_with("0x") || s.starts_with("0X") => s
            .parse()
            .map_err(|e| invalid_params(format!("invalid argument 0: {e}"))),
        _ => Err(invalid_params(
            "invalid argument 0: hex string without 0x prefix",
        )),
    }
}

fn index_param(v: Option<Value>) -> RpcResult<usize> {
    let v = v.ok_or_else(|| invalid_params("missing value for required argument 1"))?;
    let s = v
        .as_str()
        .ok_or_else(|| invalid_params("invalid argument 1: expected a hex quantity"))?;
    let n = crate::params::parse_quantity(s)?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// The block a number or tag names (canonical), `None` if there is none.
fn block_by_number(ctx: &RpcContext, v: Option<Value>) -> RpcResult<Option<Block>> {
    let v = v.ok_or_else(|| invalid_params("missing value for required argument 0"))?;
    let Some(hash) = ctx.resolve(parse_block_number(&v)?)? else {
        return Ok(None);
    };
    ctx.block(&hash)
}

fn block_by_hash(ctx: &RpcContext, v: Option<Value>) -> RpcResult<Option<Block>> {
    let hash = hash_param(v)?;
    ctx.block(&hash)
}

/// A number, tag or hash (EIP-1898 objects included).
fn block_by_ref(ctx: &RpcContext, v: Option<Value>) -> RpcResult<Option<Block>> {
    if v.is_none() {
        return Err(invalid_params("missing value for required argument 0"));
    }
    let Some(hash) = ctx.resolve(block_param(v)?)? else {
        return Ok(None);
    };
    ctx.block(&hash)
}

fn header_by_ref(ctx: &RpcContext, v: Option<Value>) -> RpcResult<Option<Header>> {
    if v.is_none() {
        return Err(invalid_params("missing value for required argument 0"));
    }
    let Some(hash) = ctx.resolve(block_param(v)?)? else {
        return Ok(None);
    };
    ctx.chain.header(&hash).map_err(internal)
}

fn receipts_json(ctx: &RpcContext, block: &Block) -> RpcResult<Value> {
    let Some(receipts) = ctx.chain.receipts(&block.hash).map_err(internal)? else {
        return Ok(Value::Null);
    };
    let senders = ctx.senders(block);
    let blob_gas_price = crate::state::block_blob_base_fee(ctx.chain.config(), &block.header);
    let mut prior_gas = 0;
    let mut prior_logs = 0;
    let mut out = Vec::with_capacity(receipts.len());
    for (index, (r, from)) in receipts.iter().zip(senders).enumerate() {
        let c = ReceiptContext {
            block,
            index,
            from,
            prior_gas,
            prior_logs,
            blob_gas_price,
        };
        out.push(json::receipt_json(r, &c));
        prior_gas = r.cumulative_gas_used;
        prior_logs += r.logs.len();
    }
    Ok(Value::Array(out))
}

/// `eth_getBlockReceipts(block)`: every receipt of a block, `null` for an unknown block.
pub(crate) fn get_block_receipts(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [b] = positional::<1>(&params)?;
    match block_by_ref(ctx, b)? {
        Some(block) => receipts_json(ctx, &block),
        None => Ok(Value::Null),
    }
}

fn tx_count(block: Option<Block>) -> Value {
    block.map_or(Value::Null, |b| q(b.transactions.len() as u64))
}

pub(crate) fn tx_count_by_number(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [b] = positional::<1>(&params)?;
    Ok(tx_count(block_by_number(ctx, b)?))
}

pub(crate) fn tx_count_by_hash(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [b] = positional::<1>(&params)?;
    Ok(tx_count(block_by_hash(ctx, b)?))
}

fn tx_at(ctx: &RpcContext, block: Option<Block>, index: usize) -> Value {
    let Some(block) = block else {
        return Value::Null;
    };
    let Some(tx) = block.transactions.get(index) else {
        return Value::Null;
    };
    let from = ctx
        .pool
        .sender_cache()
        .get(&tx.hash())
        .unwrap_or_else(|| tx.recover_sender().unwrap_or_default());
    let place = TxPlace {
        block_hash: block.hash,
        block_number: block.header.number,
        index: index as u64,
        base_fee: block.header.base_fee_per_gas,
        block_timestamp: block.header.timestamp,
    };
    json::tx_json(tx, from, Some(place))
}

pub(crate) fn tx_by_number_and_index(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [b, i] = positional::<2>(&params)?;
    let block = block_by_number(ctx, b)?;
    Ok(tx_at(ctx, block, index_param(i)?))
}

pub(crate) fn tx_by_hash_and_index(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [b, i] = positional::<2>(&params)?;
    let block = block_by_hash(ctx, b)?;
    Ok(tx_at(ctx, block, index_param(i)?))
}

fn uncle_count(block: Option<Block>) -> Value {
    block.map_or(Value::Null, |b| q(b.ommers.len() as u64))
}

pub(crate) fn uncle_count_by_number(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [b] = positional::<1>(&params)?;
    Ok(uncle_count(block_by_number(ctx, b)?))
}

pub(crate) fn uncle_count_by_hash(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [b] = positional::<1>(&params)?;
    Ok(uncle_count(block_by_hash(ctx, b)?))
}

/// An ommer as geth shows it: a block of that header with no transactions.
fn uncle_at(block: Option<Block>, index: usize) -> Value {
    let Some(ommer) = block.and_then(|b| b.ommers.get(index).cloned()) else {
        return Value::Null;
    };
    let as_block = Block {
        hash: ommer.hash(),
        header: ommer,
        transactions: Vec::new(),
        ommers: Vec::new(),
        withdrawals: None,
    };
    json::block_json(&as_block, None)
}

pub(crate) fn uncle_by_number_and_index(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [b, i] = positional::<2>(&params)?;
    let block = block_by_number(ctx, b)?;
    Ok(uncle_at(block, index_param(i)?))
}

pub(crate) fn uncle_by_hash_and_index(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [b, i] = positional::<2>(&params)?;
    let block = block_by_hash(ctx, b)?;
    Ok(uncle_at(block, index_param(i)?))
}

pub(crate) fn header_by_number(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [b] = positional::<1>(&params)?;
    Ok(block_by_number(ctx, b)?.map_or(Value::Null, |b| {
        Value::Object(json::header_json(&b.header, b.hash))
    }))
}

pub(crate) fn header_by_hash(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [b] = positional::<1>(&params)?;
    Ok(block_by_hash(ctx, b)?.map_or(Value::Null, |b| {
        Value::Object(json::header_json(&b.header, b.hash))
    }))
}

/// `debug_getRawHeader(block)`: the header's RLP.
pub(crate) fn raw_header(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [b] = positional::<1>(&params)?;
    Ok(header_by_ref(ctx, b)?.map_or(Value::Null, |h| json!(Bytes::from(h.encoded()))))
}

/// `debug_getRawBlock(block)`: the block's RLP.
pub(crate) fn raw_block(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [b] = positional::<1>(&params)?;
    Ok(block_by_ref(ctx, b)?.map_or(Value::Null, |b| json!(Bytes::from(b.encode()))))
}

/// `debug_getRawReceipts(block)`: each receipt's consensus (EIP-2718) encoding.
pub(crate) fn raw_receipts(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [b] = positional::<1>(&params)?;
    let Some(block) = block_by_ref(ctx, b)? else {
        return Ok(Value::Null);
    };
    let Some(receipts) = ctx.chain.receipts(&block.hash).map_err(internal)? else {
        return Ok(Value::Null);
    };
    Ok(Value::Array(
        receipts
            .iter()
            .map(|r| json!(Bytes::from(r.encoded_2718())))
            .collect(),
    ))
}

/// `debug_getRawTransaction(hash)`: the transaction's EIP-2718 encoding, from the chain
/// or the pool.
pub(crate) fn raw_transaction(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [h] = positional::<1>(&params)?;
    let hash = hash_param(h)?;
    if let Some(loc) = ctx.chain.store().tx_location(&hash).map_err(internal)?
        && let Some(block) = ctx.block(&loc.block_hash)?
        && let Some(tx) = block.transactions.get(loc.index as usize)
    {
        return Ok(json!(Bytes::from(tx.encoded_2718())));
    }
    Ok(match ctx.pool.get(&hash) {
        Some(ptx) => json!(Bytes::from(ptx.tx.tx().encoded_2718())),
        None => Value::Null,
    })
}

/// `eth_getStorageValues({address: [slot, ...]}, block)`: many slots in one read of one
/// state, each value as 32 bytes.
pub(crate) fn get_storage_values(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [r, b] = positional::<2>(&params)?;
    let Some(Value::Object(request)) = r else {
        return Err(invalid_params(
            "invalid argument 0: expected an object of addresses to slot lists",
        ));
    };
    if request.is_empty() {
        return Err(invalid_params("empty request"));
    }
    let mut wanted: Vec<(String, Address, Vec<B256>)> = Vec::with_capacity(request.len());
    let mut total = 0usize;
    for (key, slots) in &request {
        let address: Address = key
            .parse()
            .map_err(|e| invalid_params(format!("invalid address {key:?}: {e}")))?;
        let Value::Array(list) = slots else {
            return Err(invalid_params(format!("slots of {key} must be an array")));
        };
        total += list.len();
        if total > MAX_STORAGE_VALUES {
            return Err(invalid_params(format!(
                "too many slots (max {MAX_STORAGE_VALUES})"
            )));
        }
        let slots = list
            .iter()
            .map(|s| match s {
                Value::String(s) => parse_slot(s),
                _ => Err(invalid_params("storage slots must be hex strings")),
            })
            .collect::<RpcResult<Vec<B256>>>()?;
        wanted.push((key.clone(), address, slots));
    }
    let state = ctx.reader(ctx.state_at(block_param(b)?)?)?;
    let mut out = Map::new();
    for (key, address, slots) in wanted {
        let values = slots
            .iter()
            .map(|slot| {
                state
                    .storage(&address, slot)
                    .map(|v| json!(B256::from(v.to_be_bytes::<32>())))
                    .map_err(internal)
            })
            .collect::<RpcResult<Vec<Value>>>()?;
        out.insert(key, Value::Array(values));
    }
    Ok(Value::Object(out))
}

/// `eth_baseFee`: the base fee of the block after the head.
pub(crate) fn base_fee(ctx: &RpcContext, _params: Params<'_>) -> RpcResult<Value> {
    let head = ctx.head_header()?;
    let (base_fee, _) = crate::state::next_block_fees(ctx.chain.config(), &head);
    Ok(q(base_fee))
}

/// Registers this module's methods.
pub(crate) fn register(
    m: &mut jsonrpsee::RpcModule<RpcContext>,
) -> Result<(), jsonrpsee::core::RegisterMethodError> {
    use crate::blocking;
    blocking(m, "eth_getBlockReceipts", get_block_receipts)?;
    blocking(
        m,
        "eth_getBlockTransactionCountByNumber",
        tx_count_by_number,
    )?;
    blocking(m, "eth_getBlockTransactionCountByHash", tx_count_by_hash)?;
    blocking(
        m,
        "eth_getTransactionByBlockNumberAndIndex",
        tx_by_number_and_index,
    )?;
    blocking(
        m,
        "eth_getTransactionByBlockHashAndIndex",
        tx_by_hash_and_index,
    )?;
    blocking(m, "eth_getUncleCountByBlockNumber", uncle_count_by_number)?;
    blocking(m, "eth_getUncleCountByBlockHash", uncle_count_by_hash)?;
    blocking(
        m,
        "eth_getUncleByBlockNumberAndIndex",
        uncle_by_number_and_index,
    )?;
    blocking(
        m,
        "eth_getUncleByBlockHashAndIndex",
        uncle_by_hash_and_index,
    )?;
    blocking(m, "eth_getHeaderByNumber", header_by_number)?;
    blocking(m, "eth_getHeaderByHash", header_by_hash)?;
    blocking(m, "debug_getRawHeader", raw_header)?;
    blocking(m, "debug_getRawBlock", raw_block)?;
    blocking(m, "debug_getRawReceipts", raw_receipts)?;
    blocking(m, "debug_getRawTransaction", raw_transaction)?;
    blocking(m, "eth_getStorageValues", get_storage_values)?;
    blocking(m, "eth_baseFee", base_fee)?;
    blocking(m, "eth_createAccessList", crate::call::create_access_list)?;
    blocking(m, "eth_config", crate::eth_config::eth_config)?;
    blocking(m, "eth_capabilities", crate::eth_config::capabilities)?;
    Ok(())
}
