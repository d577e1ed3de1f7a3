//! `eth_call` and `eth_estimateGas` on the head state, with geth's error shapes: a revert
//! is code 3 "execution reverted" (with the decoded `Error(string)` reason when there is
//! one) and the revert data in `data`.

use crate::RpcContext;
use crate::eth::{StateAt, block_param, positional};
use crate::params::{RpcResult, internal, invalid_params, server_error};
use alloy_primitives::{Address, B256, Bytes, U64, U256, hex};
use jsonrpsee::types::{ErrorObjectOwned, Params};
use moat_blockchain::chain::ChainError;
use moat_blockchain::vm::simulate::SimOverride;
use moat_blockchain::vm::{AccountOverride, CallOutcome, CallRequest, OverriddenState, VmError};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap};

/// geth's code for a reverted call.
pub(crate) const EXECUTION_REVERTED: i32 = 3;

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

/// The field `name` of `o` as a `T`, null as absent.
pub(crate) fn field<T: DeserializeOwned>(
    o: &Map<String, Value>,
    name: &str,
) -> RpcResult<Option<T>> {
    match o.get(name).filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(v) => serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|e| invalid_params(format!("{name}: {e}"))),
    }
}

/// geth's state override object (eth_call's and eth_estimateGas's third parameter,
/// eth_simulateV1's `stateOverrides`): per address `balance`, `nonce`, `code`, `state` or
/// `stateDiff` (32-byte keys to 32-byte values), and `movePrecompileToAddress`. `None`
/// when absent or null; `arg` names the argument in the errors.
pub(crate) fn parse_state_overrides(
    v: Option<&Value>,
    arg: &str,
) -> RpcResult<Option<BTreeMap<Address, SimOverride>>> {
    let o = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(o)) => o,
        Some(_) => return Err(invalid_params(format!("{arg}: expected an object"))),
    };
    let in_arg = |e: ErrorObjectOwned| invalid_params(format!("{arg}: {}", e.message()));
    let mut out = BTreeMap::new();
    for (key, entry) in o {
        let address: Address = key
            .parse()
            .map_err(|e| invalid_params(format!("{arg}: {key}: {e}")))?;
        let Value::Object(e) = entry else {
            return Err(invalid_params(format!("{arg}: {key}")));
        };
        let slots = |name: &str| -> RpcResult<Option<BTreeMap<B256, U256>>> {
            Ok(field::<BTreeMap<B256, B256>>(e, name)
                .map_err(in_arg)?
                .map(|m| m.into_iter().map(|(k, v)| (k, v.into())).collect()))
        };
        out.insert(
            address,
            SimOverride {
                balance: field(e, "balance").map_err(in_arg)?,
                nonce: field::<U64>(e, "nonce").map_err(in_arg)?.map(|n| n.to()),
                code: field(e, "code").map_err(in_arg)?,
                state: slots("state")?,
                state_diff: slots("stateDiff")?,
                move_precompile_to: field(e, "movePrecompileToAddress").map_err(in_arg)?,
            },
        );
    }
    Ok(Some(out))
}

/// eth_call's and eth_estimateGas's state overrides, as the VM's overridden state takes
/// them.
fn account_overrides(v: Option<&Value>) -> RpcResult<Option<HashMap<Address, AccountOverride>>> {
    let Some(o) = parse_state_overrides(v, "invalid argument 2")? else {
        return Ok(None);
    };
    Ok(Some(
        o.into_iter()
            .map(|(address, o)| {
                let o = AccountOverride {
                    balance: o.balance,
                    nonce: o.nonce,
                    code: o.code,
                    state: o.state.map(|s| s.into_iter().collect()),
                    state_diff: o.state_diff.unwrap_or_default().into_iter().collect(),
                };
                (address, o)
            })
            .collect(),
    ))
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

pub(crate) fn call(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let (req, at) = parse_call(ctx, &params)?;
    let [_, _, o, b] = positional::<4>(&params)?;
    let outcome = match (
        account_overrides(o.as_ref())?,
        parse_block_overrides(b)?,
        at,
    ) {
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

pub(crate) fn estimate_gas(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let (req, at) = parse_call(ctx, &params)?;
    let [_, _, o, b] = positional::<4>(&params)?;
    let outcome = match (
        account_overrides(o.as_ref())?,
        parse_block_overrides(b)?,
        at,
    ) {
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
pub(crate) fn create_access_list(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
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
    fn call_overrides_are_the_shared_parse_named_as_argument_2() {
        let a: Address = "0xc000000000000000000000000000000000000000"
            .parse()
            .unwrap();
        let v = json!({ a.to_string(): {
            "balance": "0x10", "nonce": "0x2", "code": "0x6000",
            "state": {
                "0x0000000000000000000000000000000000000000000000000000000000000001":
                "0x0000000000000000000000000000000000000000000000000000000000000005"
            }
        }});
        let o = account_overrides(Some(&v)).unwrap().unwrap();
        let o = &o[&a];
        assert_eq!((o.balance, o.nonce), (Some(U256::from(16)), Some(2)));
        assert_eq!(o.code.as_ref().map(|c| c.to_vec()), Some(vec![0x60, 0x00]));
        assert_eq!(
            o.state.as_ref().unwrap().values().next(),
            Some(&U256::from(5))
        );
        assert!(o.state_diff.is_empty());
        assert!(account_overrides(None).unwrap().is_none());
        assert!(account_overrides(Some(&Value::Null)).unwrap().is_none());
        let bad = account_overrides(Some(&json!({ a.to_string(): {"nonce": "x"} }))).unwrap_err();
        assert!(
            bad.message().starts_with("invalid argument 2: nonce: "),
            "{bad:?}"
        );
    }

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
