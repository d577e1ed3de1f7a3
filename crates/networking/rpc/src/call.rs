//! `eth_call` and `eth_estimateGas` on the head state, with geth's error shapes: a revert
//! is code 3 "execution reverted" (with the decoded `Error(string)` reason when there is
//! one) and the revert data in `data`.

use crate::RpcContext;
use crate::eth::{StateAt, block_param, positional};
use crate::params::{RpcResult, internal, invalid_params, server_error};
use alloy_primitives::{Address, B256, Bytes, U256, hex};
use jsonrpsee::types::{ErrorObjectOwned, Params};
use moat_blockchain::chain::ChainError;
use moat_blockchain::vm::{AccountOverride, CallOutcome, CallRequest, OverriddenState, VmError};
use serde_json::{Map, Value, json};
use std::collections::HashMap;

/// geth's code for a reverted call.
pub const EXECUTION_REVERTED: i32 = 3;

fn quantity<T: TryFrom<u128>>(o: &Map<String, Value>, name: &str) -> RpcResult<Option<T>> {
    let Some(v) = o.get(name).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let s = v
        .as_str()
        .ok_or_else(|| invalid_params(format!("{name}: expected a hex quantity")))?;
    let n = u128::from_str_radix(s.trim_start_matches("0x"), 16)
        .map_err(|_| invalid_params(format!("{name}: invalid hex quantity")))?;
    T::try_from(n)
        .map(Some)
        .map_err(|_| invalid_params(format!("{name}: out of range")))
}

pub(crate) fn parse_request(v: Option<Value>) -> RpcResult<CallRequest> {
    let Some(Value::Object(o)) = v else {
        return Err(invalid_params("missing value for required argument 0"));
    };
    let address = |name: &str| -> RpcResult<Option<Address>> {
        match o.get(name).filter(|v| !v.is_null()) {
            None => Ok(None),
            Some(v) => serde_json::from_value(v.clone())
                .map(Some)
                .map_err(|e| invalid_params(format!("{name}: {e}"))),
        }
    };
    let input = match o
        .get("input")
        .filter(|v| !v.is_null())
        .or_else(|| o.get("data").filter(|v| !v.is_null()))
    {
        None => Bytes::new(),
        Some(v) => {
            serde_json::from_value(v.clone()).map_err(|e| invalid_params(format!("input: {e}")))?
        }
    };
    let value = match o.get("value").filter(|v| !v.is_null()) {
        None => None,
        Some(v) => Some(
            serde_json::from_value::<U256>(v.clone())
                .map_err(|e| invalid_params(format!("value: {e}")))?,
        ),
    };
    let access_list = match o.get("accessList").filter(|v| !v.is_null()) {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                let address = item
                    .get("address")
                    .and_then(|a| serde_json::from_value::<Address>(a.clone()).ok())
                    .ok_or_else(|| invalid_params("accessList: invalid address"))?;
                let keys = match item.get("storageKeys") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(k) => serde_json::from_value::<Vec<B256>>(k.clone())
                        .map_err(|e| invalid_params(format!("accessList: {e}")))?,
                };
                Ok((address, keys))
            })
            .collect::<RpcResult<Vec<_>>>()?,
        Some(_) => return Err(invalid_params("accessList: expected an array")),
    };
    let blob_hashes = match o.get("blobVersionedHashes").filter(|v| !v.is_null()) {
        None => Vec::new(),
        Some(v) => serde_json::from_value::<Vec<B256>>(v.clone())
            .map_err(|e| invalid_params(format!("blobVersionedHashes: {e}")))?,
    };
    let authorization_list = match o.get("authorizationList").filter(|v| !v.is_null()) {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(crate::simulate::parse_authorization)
            .collect::<RpcResult<_>>()?,
        Some(_) => return Err(invalid_params("authorizationList: expected an array")),
    };
    let to = address("to")?;
    // As geth's state transition: these transaction types cannot create.
    if to.is_none() {
        if !blob_hashes.is_empty() {
            return Err(server_error("blob transaction of type create"));
        }
        if !authorization_list.is_empty() {
            return Err(server_error("set code transaction of type create"));
        }
    }
    Ok(CallRequest {
        access_list,
        blob_hashes,
        max_fee_per_blob_gas: quantity(&o, "maxFeePerBlobGas")?,
        authorization_list,
        nonce: quantity(&o, "nonce")?,
        from: address("from")?,
        to,
        gas: quantity(&o, "gas")?,
        gas_price: quantity(&o, "gasPrice")?,
        max_fee_per_gas: quantity(&o, "maxFeePerGas")?,
        max_priority_fee_per_gas: quantity(&o, "maxPriorityFeePerGas")?,
        value,
        input,
    })
}

/// The reason string of an `Error(string)` revert, if the data is one.
pub(crate) fn revert_reason(data: &[u8]) -> Option<String> {
    let body = data.strip_prefix(&[0x08, 0xc3, 0x79, 0xa0][..])?;
    let word = |i: usize| body.get(i * 32..i * 32 + 32).map(U256::from_be_slice);
    let offset: usize = word(0)?.try_into().ok()?;
    let len: usize = U256::from_be_slice(body.get(offset..offset.checked_add(32)?)?)
        .try_into()
        .ok()?;
    let bytes = body.get(offset + 32..offset.checked_add(32)?.checked_add(len)?)?;
    String::from_utf8(bytes.to_vec()).ok()
}

fn reverted(output: &Bytes) -> ErrorObjectOwned {
    let message = match revert_reason(output) {
        Some(reason) => format!("execution reverted: {reason}"),
        None => "execution reverted".to_string(),
    };
    ErrorObjectOwned::owned(
        EXECUTION_REVERTED,
        message,
        Some(hex::encode_prefixed(output)),
    )
}

fn vm_error(e: VmError) -> ErrorObjectOwned {
    match e {
        VmError::InvalidCall(reason) => server_error(reason),
        other => internal(other),
    }
}

/// Both take `[call, block?]`; only the head state is kept.
/// The request and the block whose state it runs on (`None`: the head), with its gas
/// held to the node's RPC gas cap (`--rpc.gascap`, geth's 50M by default): one call
/// cannot make the node run a whole block's worth of EVM.
fn parse_call(ctx: &RpcContext, params: &Params<'_>) -> RpcResult<(CallRequest, Option<u64>)> {
    let [call, block, _, _] = positional::<4>(params)?;
    let at = match ctx.state_at(block_param(block)?)? {
        StateAt::Past(n) => Some(n),
        StateAt::Head | StateAt::Pending => None,
    };
    let mut req = parse_request(call)?;
    if ctx.gas_cap > 0 {
        req.gas = Some(req.gas.map_or(ctx.gas_cap, |g| g.min(ctx.gas_cap)));
    }
    Ok((req, at))
}

fn history_error(e: ChainError) -> ErrorObjectOwned {
    match e {
        ChainError::HistoryUnavailable { .. } => crate::params::historical_state(),
        other => internal(other),
    }
}

/// geth's state override object: per address `balance`, `nonce`, `code`, and `state`
/// or `stateDiff`.
fn parse_overrides(v: Option<Value>) -> RpcResult<Option<HashMap<Address, AccountOverride>>> {
    let Some(Value::Object(o)) = v else {
        return match v {
            None | Some(Value::Null) => Ok(None),
            Some(_) => Err(invalid_params("invalid argument 2: expected an object")),
        };
    };
    let mut out = HashMap::new();
    for (key, entry) in o {
        let address: Address = key
            .parse()
            .map_err(|e| invalid_params(format!("invalid argument 2: {key}: {e}")))?;
        let Value::Object(e) = entry else {
            return Err(invalid_params(format!("invalid argument 2: {key}")));
        };
        let slots = |name: &str| -> RpcResult<Option<HashMap<B256, U256>>> {
            match e.get(name).filter(|v| !v.is_null()) {
                None => Ok(None),
                Some(v) => serde_json::from_value::<HashMap<B256, B256>>(v.clone())
                    .map(|m| {
                        Some(
                            m.into_iter()
                                .map(|(k, v)| (k, U256::from_be_bytes(v.0)))
                                .collect(),
                        )
                    })
                    .map_err(|err| invalid_params(format!("invalid argument 2: {name}: {err}"))),
            }
        };
        let balance = match e.get("balance").filter(|v| !v.is_null()) {
            None => None,
            Some(v) => Some(
                serde_json::from_value::<U256>(v.clone())
                    .map_err(|err| invalid_params(format!("invalid argument 2: balance: {err}")))?,
            ),
        };
        let code = match e.get("code").filter(|v| !v.is_null()) {
            None => None,
            Some(v) => Some(
                serde_json::from_value::<Bytes>(v.clone())
                    .map_err(|err| invalid_params(format!("invalid argument 2: code: {err}")))?,
            ),
        };
        out.insert(
            address,
            AccountOverride {
                balance,
                nonce: quantity(&e, "nonce")?,
                code,
                state: slots("state")?,
                state_diff: slots("stateDiff")?.unwrap_or_default(),
            },
        );
    }
    Ok(Some(out))
}

/// geth's block override object (the fourth parameter), as edits of the header the call
/// runs in. `blobBaseFee`, `difficulty`, `beaconRoot` and `withdrawals` are refused.
type BlockOverrides = Box<dyn FnOnce(&mut moat_common::block::Header)>;

fn parse_block_overrides(v: Option<Value>) -> RpcResult<Option<BlockOverrides>> {
    let o = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(o)) => o,
        Some(_) => return Err(invalid_params("invalid argument 3: expected an object")),
    };
    for key in o.keys() {
        if !matches!(
            key.as_str(),
            "number"
                | "time"
                | "gasLimit"
                | "feeRecipient"
                | "coinbase"
                | "prevRandao"
                | "random"
                | "baseFeePerGas"
                | "baseFee"
        ) {
            return Err(invalid_params(format!(
                "invalid argument 3: block override {key:?} is not supported"
            )));
        }
    }
    let number: Option<u64> = quantity(&o, "number")?;
    let time: Option<u64> = quantity(&o, "time")?;
    let gas_limit: Option<u64> = quantity(&o, "gasLimit")?;
    let base_fee: Option<u64> = match quantity(&o, "baseFeePerGas")? {
        Some(f) => Some(f),
        None => quantity(&o, "baseFee")?,
    };
    let field = |a: &str, b: &str| {
        o.get(a)
            .or_else(|| o.get(b))
            .filter(|v| !v.is_null())
            .cloned()
    };
    let fee_recipient: Option<Address> = match field("feeRecipient", "coinbase") {
        None => None,
        Some(v) => Some(
            serde_json::from_value(v)
                .map_err(|e| invalid_params(format!("invalid argument 3: feeRecipient: {e}")))?,
        ),
    };
    let prev_randao: Option<B256> = match field("prevRandao", "random") {
        None => None,
        Some(v) => Some(
            serde_json::from_value(v)
                .map_err(|e| invalid_params(format!("invalid argument 3: prevRandao: {e}")))?,
        ),
    };
    Ok(Some(Box::new(move |h: &mut moat_common::block::Header| {
        if let Some(n) = number {
            h.number = n;
        }
        if let Some(t) = time {
            h.timestamp = t;
        }
        if let Some(g) = gas_limit {
            h.gas_limit = g;
        }
        if let Some(f) = base_fee {
            h.base_fee_per_gas = Some(f);
        }
        if let Some(a) = fee_recipient {
            h.beneficiary = a;
        }
        if let Some(r) = prev_randao {
            h.mix_hash = r;
        }
    })))
}

/// Runs `f` over the state `at` names with `overrides` laid over it, with the header of
/// that block (edited by `block`, if given).
fn with_overrides<T>(
    ctx: &RpcContext,
    at: Option<u64>,
    overrides: HashMap<Address, AccountOverride>,
    block: Option<BlockOverrides>,
    f: impl FnOnce(&moat_common::block::Header, &dyn moat_blockchain::vm::StateReader) -> T,
) -> RpcResult<T> {
    let (state_at, header) = match at {
        Some(n) => (
            StateAt::Past(n),
            ctx.chain
                .header_by_number(n)
                .map_err(internal)?
                .ok_or_else(crate::params::header_not_found)?,
        ),
        None => (StateAt::Head, ctx.head_header()?),
    };
    let mut header = header;
    if let Some(edit) = block {
        edit(&mut header);
    }
    let base = ctx.reader(state_at)?;
    let state =
        OverriddenState::new(&base, overrides).map_err(|e| invalid_params(e.to_string()))?;
    Ok(f(&header, &state))
}

pub fn call(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let (req, at) = parse_call(ctx, &params)?;
    let [_, _, o, b] = positional::<4>(&params)?;
    let outcome = match (parse_overrides(o)?, parse_block_overrides(b)?, at) {
        (None, None, None) => ctx.chain.call(&req),
        (None, None, Some(n)) => ctx.chain.call_at(n, &req).map_err(history_error)?,
        (overrides, block, at) => with_overrides(
            ctx,
            at,
            overrides.unwrap_or_default(),
            block,
            |header, state| moat_blockchain::vm::call(ctx.chain.config(), header, &req, state),
        )?,
    };
    match outcome.map_err(vm_error)? {
        CallOutcome::Success { output, .. } => Ok(json!(output)),
        CallOutcome::Revert { output, .. } => Err(reverted(&output)),
        // geth answers the EVM's error as it is ("out of gas", "invalid opcode", ...).
        CallOutcome::Halt { reason, .. } => Err(server_error(reason)),
    }
}

pub fn estimate_gas(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let (req, at) = parse_call(ctx, &params)?;
    let [_, _, o, b] = positional::<4>(&params)?;
    let outcome = match (parse_overrides(o)?, parse_block_overrides(b)?, at) {
        (None, None, None) => ctx.chain.estimate_gas(&req),
        (None, None, Some(n)) => ctx.chain.estimate_gas_at(n, &req).map_err(history_error)?,
        (overrides, block, at) => with_overrides(
            ctx,
            at,
            overrides.unwrap_or_default(),
            block,
            |header, state| {
                moat_blockchain::vm::estimate_gas(ctx.chain.config(), header, &req, state)
            },
        )?,
    };
    match outcome.map_err(vm_error)? {
        Ok(gas) => Ok(json!(format!("0x{gas:x}"))),
        Err(CallOutcome::Revert { output, .. }) => Err(reverted(&output)),
        Err(other) => Err(server_error(format!(
            "gas required exceeds allowance ({})",
            other.gas_used()
        ))),
    }
}

/// `eth_createAccessList(call, block)`: the storage the call touches, as an EIP-2930
/// list, and the gas it uses with that list; a failed call still gets its list, with
/// the failure in `error`.
pub fn create_access_list(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [call, block] = positional::<2>(&params)?;
    let at = ctx.state_at(block_param(block)?)?;
    let mut req = parse_request(call)?;
    if ctx.gas_cap > 0 {
        req.gas = Some(req.gas.map_or(ctx.gas_cap, |g| g.min(ctx.gas_cap)));
    }
    let header = match at {
        StateAt::Past(n) => ctx
            .chain
            .header_by_number(n)
            .map_err(internal)?
            .ok_or_else(crate::params::header_not_found)?,
        StateAt::Head | StateAt::Pending => ctx.head_header()?,
    };
    let state = ctx.reader(at)?;
    let (list, outcome) =
        moat_blockchain::vm::create_access_list(ctx.chain.config(), &header, &req, &state)
            .map_err(vm_error)?;
    let list: Vec<Value> = list
        .into_iter()
        .map(|(address, keys)| json!({ "address": address, "storageKeys": keys }))
        .collect();
    let mut out = Map::new();
    out.insert("accessList".into(), Value::Array(list));
    match &outcome {
        CallOutcome::Success { .. } => {}
        CallOutcome::Revert { output, .. } => {
            out.insert("error".into(), json!(reverted(output).message()));
        }
        CallOutcome::Halt { reason, .. } => {
            out.insert("error".into(), json!(reason));
        }
    }
    out.insert(
        "gasUsed".into(),
        json!(format!("0x{:x}", outcome.gas_used())),
    );
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_string_reverts_are_decoded() {
        // Error("nope")
        let data = hex::decode(concat!(
            "08c379a0",
            "0000000000000000000000000000000000000000000000000000000000000020",
            "0000000000000000000000000000000000000000000000000000000000000004",
            "6e6f706500000000000000000000000000000000000000000000000000000000"
        ))
        .unwrap();
        assert_eq!(revert_reason(&data).as_deref(), Some("nope"));
        assert_eq!(revert_reason(&data[..10]), None);
        assert_eq!(revert_reason(b"\x08\xc3\x79\xa0"), None);
        // Offsets and lengths a contract (or a state override's code) makes up: at the
        // end of the address space, nothing rather than an overflow.
        for (offset, len) in [
            (usize::MAX - 16, 4),
            (0x20, usize::MAX - 16),
            (usize::MAX, 0),
        ] {
            let mut data = data.clone();
            data[4..36].copy_from_slice(&U256::from(offset).to_be_bytes::<32>());
            if offset == 0x20 {
                data[36..68].copy_from_slice(&U256::from(len).to_be_bytes::<32>());
            }
            assert_eq!(revert_reason(&data), None, "{offset} {len}");
        }
    }
}
