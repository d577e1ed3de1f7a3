//! `debug_traceTransaction`, `debug_traceBlockByNumber` and `debug_traceBlockByHash`:
//! geth's tracers (struct logger, `callTracer`, `prestateTracer`, ...) over a block
//! replayed on its parent's state, which must be one the node still holds (one the undo
//! records reach: `Chain::undo_floor`).

use crate::RpcContext;
use crate::blocks::hash_param;
use crate::eth::positional;
use crate::params::{
    BlockRef, RpcResult, internal, invalid_params, parse_block_number, server_error,
};
use alloy_primitives::B256;
use jsonrpsee::types::Params;
use moat_blockchain::vm::{TraceError, TraceOptions, trace_block};
use moat_common::block::Block;
use serde_json::{Value, json};

fn options(v: Option<Value>) -> RpcResult<TraceOptions> {
    match v {
        None | Some(Value::Null) => Ok(TraceOptions::default()),
        Some(v) => serde_json::from_value(v)
            .map_err(|e| invalid_params(format!("invalid argument 1: {e}"))),
    }
}

/// Traces `block` (only transaction `only`, if given) on its parent's state.
fn trace(
    ctx: &RpcContext,
    block: &Block,
    opts: &TraceOptions,
    only: Option<usize>,
) -> RpcResult<Vec<(B256, Value)>> {
    if block.header.number == 0 {
        return Err(server_error("genesis is not traceable"));
    }
    let parent = BlockRef::Hash(block.header.parent_hash);
    let state = ctx.reader(ctx.state_at(parent)?)?;
    let senders = ctx.senders(block);
    trace_block(ctx.chain.config(), block, &senders, &state, opts, only).map_err(|e| match e {
        TraceError::Options(msg) => invalid_params(msg),
        TraceError::Vm(moat_blockchain::vm::VmError::State(msg)) => internal(msg),
        TraceError::Vm(other) => server_error(other.to_string()),
    })
}

fn block_traces(ctx: &RpcContext, block: &Block, opts: &TraceOptions) -> RpcResult<Value> {
    let traces = trace(ctx, block, opts, None)?;
    Ok(Value::Array(
        traces
            .into_iter()
            .map(|(hash, result)| json!({ "txHash": hash, "result": result }))
            .collect(),
    ))
}

pub(crate) fn trace_transaction(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [h, o] = positional::<2>(&params)?;
    let hash = hash_param(h)?;
    let opts = options(o)?;
    let Some(loc) = ctx.chain.store().tx_location(&hash).map_err(internal)? else {
        return Err(server_error("transaction not found"));
    };
    let Some(block) = ctx.block(&loc.block_hash)? else {
        return Err(server_error("transaction not found"));
    };
    let traces = trace(ctx, &block, &opts, Some(loc.index as usize))?;
    traces
        .into_iter()
        .next()
        .map(|(_, result)| result)
        .ok_or_else(|| server_error("transaction not found"))
}

pub(crate) fn trace_block_by_number(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [n, o] = positional::<2>(&params)?;
    let n = n.ok_or_else(|| invalid_params("missing value for required argument 0"))?;
    let r = parse_block_number(&n)?;
    let opts = options(o)?;
    let Some(hash) = ctx.resolve(r)? else {
        return Err(server_error(format!("block {n} not found")));
    };
    let block = ctx
        .block(&hash)?
        .ok_or_else(|| server_error(format!("block {n} not found")))?;
    block_traces(ctx, &block, &opts)
}

pub(crate) fn trace_block_by_hash(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [h, o] = positional::<2>(&params)?;
    let hash = hash_param(h)?;
    let opts = options(o)?;
    let block = ctx
        .block(&hash)?
        .ok_or_else(|| server_error(format!("block {hash} not found")))?;
    block_traces(ctx, &block, &opts)
}

/// `debug_traceCall(call, block, options)`: the call traced on the block's post-state, as
/// `eth_call` runs it (state and block overrides in the options are not taken).
pub(crate) fn trace_call(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [c, b, o] = positional::<3>(&params)?;
    let mut req = crate::call::parse_request(c)?;
    if ctx.gas_cap > 0 {
        req.gas = Some(req.gas.map_or(ctx.gas_cap, |g| g.min(ctx.gas_cap)));
    }
    let opts = options(o)?;
    let at = ctx.state_at(crate::eth::block_param(b)?)?;
    let header = match at {
        crate::eth::StateAt::Past(n) => ctx
            .chain
            .header_by_number(n)
            .map_err(internal)?
            .ok_or_else(crate::params::header_not_found)?,
        _ => ctx.head_header()?,
    };
    let state = ctx.reader(at)?;
    moat_blockchain::vm::trace_call(ctx.chain.config(), &header, &req, &state, &opts).map_err(|e| {
        match e {
            TraceError::Options(msg) => invalid_params(msg),
            TraceError::Vm(moat_blockchain::vm::VmError::InvalidCall(msg)) => server_error(msg),
            TraceError::Vm(moat_blockchain::vm::VmError::State(msg)) => internal(msg),
            TraceError::Vm(other) => server_error(other.to_string()),
        }
    })
}

/// Registers this module's methods.
pub(crate) fn register(
    m: &mut jsonrpsee::RpcModule<RpcContext>,
) -> Result<(), jsonrpsee::core::RegisterMethodError> {
    use crate::blocking;
    blocking(m, "debug_traceTransaction", trace_transaction)?;
    blocking(m, "debug_traceBlockByNumber", trace_block_by_number)?;
    blocking(m, "debug_traceBlockByHash", trace_block_by_hash)?;
    blocking(m, "debug_traceCall", trace_call)?;
    Ok(())
}
