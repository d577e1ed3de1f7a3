//! `eth_simulateV1`: blocks of calls simulated on top of a block, with block and state
//! overrides, as the execution-apis spec and geth define it.
//!
//! ```text
//!  params ─▶ base block (latest, a number, a hash) ─▶ sanitize: numbers and times
//!   increasing, gaps filled with empty blocks, at most 256 blocks past the base
//!   ─▶ per block: header from the parent + overrides ─▶ Simulator::simulate_block
//!   ─▶ geth's block JSON + "calls" (returnData, logs, gasUsed, maxUsedGas, status, error)
//! ```
//!
//! A call that fails (revert, halt) is a result with its `error`; a call that could not
//! be part of a block (nonce, fees, funds, intrinsic gas, block gas) fails the whole
//! request with geth's -380xx code.

use crate::RpcContext;
use crate::call::{field, parse_request, parse_state_overrides};
use crate::eth::{StateAt, block_param};
use crate::json::{block_json, q};
use crate::params::{RpcResult, internal, invalid_params, server_error};
use alloy_primitives::{Address, B256, Bytes, U256, hex};
use jsonrpsee::types::{ErrorObjectOwned, Params};
use moat_blockchain::header::{next_block_base_fee, next_block_excess_blob_gas};
use moat_blockchain::vm::simulate::{
    SimBlock, SimCall, SimCallResult, SimError, SimOverride, SimStatus, SimTxErrorKind,
    SimulatedBlock, Simulator,
};
use moat_common::block::{Header, Withdrawal};
use moat_common::config::{ChainConfig, Fork};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// Most blocks one request may simulate, counted from the base block (geth's).
pub(crate) const MAX_SIMULATE_BLOCKS: u64 = 256;
/// Most calls in one simulated block, and in one request (geth's).
pub(crate) const MAX_CALLS_PER_BLOCK: usize = 5000;
pub(crate) const MAX_TOTAL_CALLS: usize = 10_000;
/// Seconds between simulated blocks whose time is not given.
pub(crate) const TIMESTAMP_INCREMENT: u64 = 12;

/// The chain id geth shows for an unsigned legacy transaction: `(0 - 35) / 2` in 64-bit
/// arithmetic.
const LEGACY_UNSIGNED_CHAIN_ID: &str = "0x7fffffffffffffee";

/// geth's codes for simulation errors (`internal/ethapi/errors.go`).
pub(crate) const NONCE_TOO_HIGH: i32 = -38011;
pub(crate) const NONCE_TOO_LOW: i32 = -38010;
pub(crate) const BASE_FEE_TOO_LOW: i32 = -38012;
pub(crate) const INTRINSIC_GAS: i32 = -38013;
pub(crate) const INSUFFICIENT_FUNDS: i32 = -38014;
pub(crate) const BLOCK_GAS_LIMIT_REACHED: i32 = -38015;
pub(crate) const BLOCK_NUMBER_INVALID: i32 = -38020;
pub(crate) const BLOCK_TIMESTAMP_INVALID: i32 = -38021;
pub(crate) const SENDER_NOT_EOA: i32 = -38024;
pub(crate) const MAX_INIT_CODE_SIZE_EXCEEDED: i32 = -38025;
pub(crate) const CLIENT_LIMIT_EXCEEDED: i32 = -38026;
pub(crate) const INTERNAL_ERROR: i32 = -32603;
pub(crate) const INVALID_PARAMS: i32 = -32602;
pub(crate) const VM_ERROR: i32 = -32015;
pub(crate) const REVERTED: i32 = 3;

fn error(code: i32, message: impl Into<String>) -> ErrorObjectOwned {
    ErrorObjectOwned::owned(code, message.into(), None::<()>)
}

/// The code geth gives a call it could not include.
pub(crate) fn tx_error_code(kind: SimTxErrorKind) -> i32 {
    match kind {
        SimTxErrorKind::NonceTooLow => NONCE_TOO_LOW,
        SimTxErrorKind::NonceTooHigh => NONCE_TOO_HIGH,
        SimTxErrorKind::FeeCapBelowBaseFee => BASE_FEE_TOO_LOW,
        SimTxErrorKind::IntrinsicGas => INTRINSIC_GAS,
        SimTxErrorKind::InsufficientFunds => INSUFFICIENT_FUNDS,
        SimTxErrorKind::SenderNotEoa => SENDER_NOT_EOA,
        SimTxErrorKind::InitCodeTooLarge => MAX_INIT_CODE_SIZE_EXCEEDED,
        SimTxErrorKind::InvalidFees => INVALID_PARAMS,
        SimTxErrorKind::Other => INTERNAL_ERROR,
    }
}

fn sim_error(e: SimError) -> ErrorObjectOwned {
    let message = e.to_string();
    match e {
        SimError::InvalidTransaction { kind, .. } => error(tx_error_code(kind), message),
        SimError::BlockGasLimitReached { .. } => error(BLOCK_GAS_LIMIT_REACHED, message),
        SimError::Override(_) | SimError::GasCapExhausted { .. } => server_error(message),
        // geth answers inconsistent call fields with a plain error.
        SimError::InvalidParams(_) => server_error(message),
        SimError::Vm(e) => internal(e),
    }
}

/// One `blockStateCalls` entry's block overrides, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct BlockOverrides {
    pub number: Option<u64>,
    pub time: Option<u64>,
    pub gas_limit: Option<u64>,
    pub fee_recipient: Option<Address>,
    pub prev_randao: Option<B256>,
    pub base_fee: Option<u64>,
    pub blob_base_fee: Option<u128>,
    pub difficulty: Option<U256>,
    pub beacon_root: Option<B256>,
    pub withdrawals: Option<Vec<Withdrawal>>,
}

/// One block to simulate, as the request gives it.
#[derive(Debug, Clone, Default)]
pub(crate) struct BlockStateCall {
    pub overrides: BlockOverrides,
    pub state: BTreeMap<Address, SimOverride>,
    pub calls: Vec<SimCall>,
}

fn quantity(o: &Map<String, Value>, name: &str) -> RpcResult<Option<u128>> {
    match field::<U256>(o, name)? {
        None => Ok(None),
        Some(v) => u128::try_from(v)
            .map(Some)
            .map_err(|_| invalid_params(format!("{name}: out of range"))),
    }
}

fn quantity_u64(o: &Map<String, Value>, name: &str) -> RpcResult<Option<u64>> {
    match quantity(o, name)? {
        None => Ok(None),
        Some(v) => u64::try_from(v)
            .map(Some)
            .map_err(|_| invalid_params(format!("{name}: out of range"))),
    }
}

fn parse_block_overrides(v: Option<&Value>) -> RpcResult<BlockOverrides> {
    let o = match v {
        None | Some(Value::Null) => return Ok(BlockOverrides::default()),
        Some(Value::Object(o)) => o,
        Some(_) => return Err(invalid_params("blockOverrides: expected an object")),
    };
    let withdrawals = match o.get("withdrawals").filter(|v| !v.is_null()) {
        None => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .map(|w| {
                    let Value::Object(w) = w else {
                        return Err(invalid_params("withdrawals: expected objects"));
                    };
                    Ok(Withdrawal {
                        index: quantity_u64(w, "index")?.unwrap_or_default(),
                        validator_index: quantity_u64(w, "validatorIndex")?.unwrap_or_default(),
                        address: field(w, "address")?.unwrap_or_default(),
                        amount: quantity_u64(w, "amount")?.unwrap_or_default(),
                    })
                })
                .collect::<RpcResult<Vec<_>>>()?,
        ),
        Some(_) => return Err(invalid_params("withdrawals: expected an array")),
    };
    Ok(BlockOverrides {
        number: quantity_u64(o, "number")?,
        time: quantity_u64(o, "time")?,
        gas_limit: quantity_u64(o, "gasLimit")?,
        fee_recipient: field(o, "feeRecipient")?,
        prev_randao: field(o, "prevRandao")?,
        base_fee: quantity_u64(o, "baseFeePerGas")?,
        blob_base_fee: quantity(o, "blobBaseFee")?,
        difficulty: field(o, "difficulty")?,
        beacon_root: field(o, "beaconRoot")?,
        withdrawals,
    })
}

/// One EIP-7702 tuple: `chainId`, `address`, `nonce`, `yParity`, `r`, `s`.
pub(crate) fn parse_authorization(v: &Value) -> RpcResult<moat_common::Authorization> {
    let Value::Object(o) = v else {
        return Err(invalid_params("authorizationList: expected objects"));
    };
    let need = |name: &str| invalid_params(format!("authorizationList: missing {name}"));
    let parity = quantity_u64(o, "yParity")?.ok_or_else(|| need("yParity"))?;
    Ok(moat_common::Authorization {
        chain_id: field(o, "chainId")?.ok_or_else(|| need("chainId"))?,
        address: field(o, "address")?.ok_or_else(|| need("address"))?,
        nonce: quantity_u64(o, "nonce")?.ok_or_else(|| need("nonce"))?,
        // An out-of-range parity voids only its tuple, as on the wire.
        y_parity: u8::try_from(parity).unwrap_or(u8::MAX),
        r: field(o, "r")?.ok_or_else(|| need("r"))?,
        s: field(o, "s")?.ok_or_else(|| need("s"))?,
    })
}

fn parse_call(v: &Value) -> RpcResult<SimCall> {
    let Value::Object(o) = v else {
        return Err(invalid_params("calls: expected objects"));
    };
    Ok(SimCall {
        req: parse_request(Some(v.clone()))?,
        blob_hashes: field(o, "blobVersionedHashes")?,
        max_fee_per_blob_gas: quantity(o, "maxFeePerBlobGas")?,
        chain_id: quantity_u64(o, "chainId")?,
        authorization_list: match o.get("authorizationList").filter(|v| !v.is_null()) {
            None => None,
            Some(Value::Array(items)) => Some(
                items
                    .iter()
                    .map(parse_authorization)
                    .collect::<RpcResult<_>>()?,
            ),
            Some(_) => return Err(invalid_params("authorizationList: expected an array")),
        },
    })
}

/// The request's options.
#[derive(Debug, Clone, Default)]
pub(crate) struct SimOpts {
    pub blocks: Vec<BlockStateCall>,
    pub validation: bool,
    pub trace_transfers: bool,
    pub full_transactions: bool,
}

fn flag(o: &Map<String, Value>, name: &str) -> RpcResult<bool> {
    Ok(field::<bool>(o, name)?.unwrap_or(false))
}

pub(crate) fn parse_opts(v: Option<Value>) -> RpcResult<SimOpts> {
    let Some(Value::Object(o)) = v else {
        return Err(invalid_params("missing value for required argument 0"));
    };
    let blocks = match o.get("blockStateCalls") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|b| {
                let Value::Object(b) = b else {
                    return Err(invalid_params("blockStateCalls: expected objects"));
                };
                let calls = match b.get("calls") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(calls)) => {
                        if calls.len() > MAX_CALLS_PER_BLOCK {
                            return Err(error(
                                CLIENT_LIMIT_EXCEEDED,
                                format!(
                                    "too many calls in block: {} > {MAX_CALLS_PER_BLOCK}",
                                    calls.len()
                                ),
                            ));
                        }
                        calls.iter().map(parse_call).collect::<RpcResult<_>>()?
                    }
                    Some(_) => return Err(invalid_params("calls: expected an array")),
                };
                Ok(BlockStateCall {
                    overrides: parse_block_overrides(b.get("blockOverrides"))?,
                    state: parse_state_overrides(b.get("stateOverrides"), "stateOverrides")?
                        .unwrap_or_default(),
                    calls,
                })
            })
            .collect::<RpcResult<Vec<_>>>()?,
        Some(_) => return Err(invalid_params("blockStateCalls: expected an array")),
    };
    Ok(SimOpts {
        blocks,
        validation: flag(&o, "validation")?,
        trace_transfers: flag(&o, "traceTransfers")?,
        full_transactions: flag(&o, "returnFullTransactions")?,
    })
}

/// geth's `sanitizeChain`: block numbers and timestamps strictly increasing, missing
/// ones filled in (number + 1, time + 12), gaps in numbers filled with empty blocks, and
/// no block more than [`MAX_SIMULATE_BLOCKS`] past the base.
pub(crate) fn sanitize_chain(
    base_number: u64,
    base_time: u64,
    blocks: Vec<BlockStateCall>,
) -> RpcResult<Vec<BlockStateCall>> {
    let mut out = Vec::with_capacity(blocks.len());
    let (mut prev_number, mut prev_time) = (base_number, base_time);
    for mut block in blocks {
        let number = match block.overrides.number {
            Some(n) => n,
            None => prev_number.saturating_add(1),
        };
        if number <= prev_number {
            return Err(error(
                BLOCK_NUMBER_INVALID,
                format!("block numbers must be in order: {number} <= {prev_number}"),
            ));
        }
        if number - base_number > MAX_SIMULATE_BLOCKS {
            return Err(error(CLIENT_LIMIT_EXCEEDED, "too many blocks"));
        }
        for n in prev_number + 1..number {
            prev_time = prev_time.saturating_add(TIMESTAMP_INCREMENT);
            out.push(BlockStateCall {
                overrides: BlockOverrides {
                    number: Some(n),
                    time: Some(prev_time),
                    ..Default::default()
                },
                ..Default::default()
            });
        }
        let time = match block.overrides.time {
            Some(t) if t <= prev_time => {
                return Err(error(
                    BLOCK_TIMESTAMP_INVALID,
                    format!("block timestamps must be in order: {t} <= {prev_time}"),
                ));
            }
            Some(t) => t,
            None => prev_time.saturating_add(TIMESTAMP_INCREMENT),
        };
        block.overrides.number = Some(number);
        block.overrides.time = Some(time);
        prev_number = number;
        prev_time = time;
        out.push(block);
    }
    Ok(out)
}

/// The header a simulated block starts from: the parent's fee recipient, gas limit and
/// difficulty (zero once merged) carried over (`carry` is the previous preliminary
/// header, as in geth's `makeHeaders`), the overrides laid on top, and the fields that
/// follow from the parent (base fee, excess blob gas, beacon root).
fn make_header(
    config: &ChainConfig,
    carry: &Header,
    parent: &Header,
    o: &BlockOverrides,
    validation: bool,
) -> Header {
    let number = o.number.unwrap_or(parent.number + 1);
    let timestamp = o.time.unwrap_or(parent.timestamp + TIMESTAMP_INCREMENT);
    let fork = config.fork_at(number, timestamp);
    let merged = fork >= Fork::Paris || carry.difficulty.is_zero();
    let mut h = Header {
        parent_hash: parent.hash(),
        number,
        timestamp,
        beneficiary: o.fee_recipient.unwrap_or(carry.beneficiary),
        gas_limit: o.gas_limit.unwrap_or(carry.gas_limit),
        difficulty: o
            .difficulty
            .unwrap_or(if merged { U256::ZERO } else { carry.difficulty }),
        mix_hash: o.prev_randao.unwrap_or_default(),
        ommers_hash: moat_common::constants::EMPTY_OMMERS_HASH,
        ..Default::default()
    };
    if fork >= Fork::London {
        h.base_fee_per_gas = Some(match o.base_fee {
            Some(f) => f,
            None if validation => next_block_base_fee(config, parent, timestamp).unwrap_or(0),
            None => 0,
        });
    }
    if fork >= Fork::Shanghai {
        h.withdrawals_root = Some(alloy_primitives::B256::ZERO);
    }
    if fork >= Fork::Cancun {
        h.excess_blob_gas =
            Some(next_block_excess_blob_gas(config, parent, timestamp).unwrap_or(0));
        h.blob_gas_used = Some(0);
        h.parent_beacon_block_root = Some(o.beacon_root.unwrap_or_default());
    }
    h
}

fn call_json(c: &SimCallResult, block_hash: B256, number: u64, timestamp: u64) -> Value {
    let logs: Vec<Value> = c
        .logs
        .iter()
        .map(|l| {
            json!({
                "address": l.log.address,
                "topics": l.log.data.topics(),
                "data": l.log.data.data,
                "blockNumber": q(number),
                "transactionHash": l.tx_hash,
                "transactionIndex": q(l.tx_index),
                "blockHash": block_hash,
                "blockTimestamp": q(timestamp),
                "logIndex": q(l.log_index),
                "removed": false,
            })
        })
        .collect();
    let mut m = Map::new();
    // geth returns no data for a failed call: a revert's data is the error's.
    let data = match c.status {
        SimStatus::Success => c.return_data.clone(),
        SimStatus::Revert | SimStatus::Halt(_) => Bytes::new(),
    };
    m.insert("returnData".into(), json!(data));
    m.insert("logs".into(), Value::Array(logs));
    m.insert("gasUsed".into(), q(c.gas_used));
    m.insert("maxUsedGas".into(), q(c.max_used_gas));
    let status = u8::from(c.status == SimStatus::Success);
    m.insert("status".into(), q(status));
    match &c.status {
        SimStatus::Success => {}
        SimStatus::Revert => {
            let message = match crate::call::revert_reason(&c.return_data) {
                Some(reason) => format!("execution reverted: {reason}"),
                None => "execution reverted".into(),
            };
            m.insert(
                "error".into(),
                json!({
                    "message": message,
                    "code": REVERTED,
                    "data": hex::encode_prefixed(&c.return_data),
                }),
            );
        }
        SimStatus::Halt(reason) => {
            let mut message = reason.clone();
            if c.gas_capped {
                message.push_str(" (gas limit was capped by the RPC server's global gas cap)");
            }
            m.insert(
                "error".into(),
                json!({ "message": message, "code": VM_ERROR }),
            );
        }
    }
    Value::Object(m)
}

fn block_result(b: &SimulatedBlock, full: bool) -> Value {
    let mut v = block_json(&b.block, full.then_some(b.senders.as_slice()));
    let h = &b.block.header;
    let calls: Vec<Value> = b
        .calls
        .iter()
        .map(|c| call_json(c, b.block.hash, h.number, h.timestamp))
        .collect();
    if let Value::Object(m) = &mut v {
        m.insert("calls".into(), Value::Array(calls));
        // geth's hashes; a legacy call shows geth's unsigned form (v 0, and the chain id
        // geth derives from that v).
        if let Some(Value::Array(txs)) = m.get_mut("transactions") {
            for (i, tx) in txs.iter_mut().enumerate() {
                let hash = json!(b.tx_hashes[i]);
                match tx {
                    Value::Object(t) => {
                        if t.get("type") == Some(&json!("0x0")) {
                            t.insert("v".into(), json!("0x0"));
                            t.insert("chainId".into(), json!(LEGACY_UNSIGNED_CHAIN_ID));
                        }
                        t.insert("hash".into(), hash);
                    }
                    other => *other = hash,
                }
            }
        }
    }
    v
}

/// `eth_simulateV1(opts, block?)`.
pub(crate) fn simulate_v1(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [opts, block] = crate::eth::positional::<2>(&params)?;
    let opts = parse_opts(opts)?;
    if opts.blocks.is_empty() {
        return Err(invalid_params("empty input"));
    }
    if opts.blocks.len() as u64 > MAX_SIMULATE_BLOCKS {
        return Err(error(CLIENT_LIMIT_EXCEEDED, "too many blocks"));
    }
    let total: usize = opts.blocks.iter().map(|b| b.calls.len()).sum();
    if total > MAX_TOTAL_CALLS {
        return Err(error(
            CLIENT_LIMIT_EXCEEDED,
            format!("too many calls: {total} > {MAX_TOTAL_CALLS}"),
        ));
    }
    let at = ctx.state_at(block_param(block)?)?;
    let base = match at {
        StateAt::Past(n) => ctx
            .chain
            .header_by_number(n)
            .map_err(internal)?
            .ok_or_else(crate::params::header_not_found)?,
        StateAt::Head | StateAt::Pending => ctx.head_header()?,
    };
    let blocks = sanitize_chain(base.number, base.timestamp, opts.blocks)?;
    let reader = ctx.reader(at)?;
    let config = ctx.chain.config();
    let mut sim = Simulator::new(
        config,
        &reader,
        opts.validation,
        opts.trace_transfers,
        ctx.gas_cap,
    )
    .with_tries(&reader);
    let mut parent = base.clone();
    let mut carry = base;
    let mut out = Vec::with_capacity(blocks.len());
    for b in blocks {
        let header = make_header(config, &carry, &parent, &b.overrides, opts.validation);
        carry = header.clone();
        let simulated = sim
            .simulate_block(SimBlock {
                header,
                blob_base_fee: b.overrides.blob_base_fee,
                withdrawals: b.overrides.withdrawals.unwrap_or_default(),
                overrides: b.state,
                calls: b.calls,
            })
            .map_err(sim_error)?;
        out.push(block_result(&simulated, opts.full_transactions));
        parent = simulated.block.header;
    }
    Ok(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(n: Option<u64>, t: Option<u64>) -> BlockStateCall {
        BlockStateCall {
            overrides: BlockOverrides {
                number: n,
                time: t,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn gaps_in_block_numbers_are_filled_with_empty_blocks_twelve_seconds_apart() {
        let out = sanitize_chain(
            10,
            100,
            vec![numbered(None, None), numbered(Some(14), None)],
        )
        .unwrap();
        let got: Vec<(Option<u64>, Option<u64>)> = out
            .iter()
            .map(|b| (b.overrides.number, b.overrides.time))
            .collect();
        assert_eq!(
            got,
            vec![
                (Some(11), Some(112)),
                (Some(12), Some(124)),
                (Some(13), Some(136)),
                (Some(14), Some(148)),
            ]
        );
    }

    #[test]
    fn numbers_and_times_must_increase_with_geths_codes() {
        let e = sanitize_chain(
            10,
            100,
            vec![numbered(Some(12), None), numbered(Some(12), None)],
        )
        .unwrap_err();
        assert_eq!(e.code(), BLOCK_NUMBER_INVALID);
        let e = sanitize_chain(10, 100, vec![numbered(Some(9), None)]).unwrap_err();
        assert_eq!(e.code(), BLOCK_NUMBER_INVALID);
        let e = sanitize_chain(10, 100, vec![numbered(None, Some(100))]).unwrap_err();
        assert_eq!(e.code(), BLOCK_TIMESTAMP_INVALID);
        // A gap's filler blocks take times too: 11 at 112, so 12 cannot be at 105.
        let e = sanitize_chain(10, 100, vec![numbered(Some(12), Some(105))]).unwrap_err();
        assert_eq!(e.code(), BLOCK_TIMESTAMP_INVALID);
    }

    #[test]
    fn no_block_may_lie_more_than_256_past_the_base() {
        assert!(sanitize_chain(10, 100, vec![numbered(Some(266), None)]).is_ok());
        let e = sanitize_chain(10, 100, vec![numbered(Some(267), None)]).unwrap_err();
        assert_eq!(e.code(), CLIENT_LIMIT_EXCEEDED);
    }

    #[test]
    fn state_overrides_parse_every_field() {
        let v = json!({
            "0xc000000000000000000000000000000000000000": {
                "balance": "0x10", "nonce": "0x2", "code": "0x6000",
                "stateDiff": {
                    "0x0000000000000000000000000000000000000000000000000000000000000001":
                    "0x0000000000000000000000000000000000000000000000000000000000000005"
                },
                "movePrecompileToAddress": "0x0000000000000000000000000000000000123456"
            }
        });
        let o = parse_state_overrides(Some(&v), "stateOverrides")
            .unwrap()
            .unwrap();
        let a = &o[&"0xc000000000000000000000000000000000000000"
            .parse::<Address>()
            .unwrap()];
        assert_eq!(a.balance, Some(U256::from(16)));
        assert_eq!(a.nonce, Some(2));
        assert_eq!(a.code.as_ref().map(|c| c.to_vec()), Some(vec![0x60, 0x00]));
        assert_eq!(
            a.state_diff.as_ref().unwrap().values().next(),
            Some(&U256::from(5))
        );
        assert!(a.state.is_none());
        assert!(a.move_precompile_to.is_some());
        assert!(parse_state_overrides(Some(&json!({"nope": {}})), "stateOverrides").is_err());
        assert!(
            parse_state_overrides(
                Some(&json!({"0xc000000000000000000000000000000000000000": {"balance": "x"}})),
                "stateOverrides"
            )
            .is_err()
        );
    }

    #[test]
    fn call_errors_map_to_geths_codes() {
        assert_eq!(tx_error_code(SimTxErrorKind::NonceTooLow), -38010);
        assert_eq!(tx_error_code(SimTxErrorKind::NonceTooHigh), -38011);
        assert_eq!(tx_error_code(SimTxErrorKind::FeeCapBelowBaseFee), -38012);
        assert_eq!(tx_error_code(SimTxErrorKind::IntrinsicGas), -38013);
        assert_eq!(tx_error_code(SimTxErrorKind::InsufficientFunds), -38014);
        let e = sim_error(SimError::BlockGasLimitReached {
            remaining: 1,
            required: 2,
        });
        assert_eq!(e.code(), -38015);
        assert_eq!(
            sim_error(SimError::Override("x".into())).code(),
            crate::params::SERVER_ERROR_CODE
        );
        assert_eq!(
            sim_error(SimError::InvalidParams("x".into())).code(),
            crate::params::SERVER_ERROR_CODE
        );
    }

    #[test]
    fn empty_or_missing_block_state_calls_are_invalid_params() {
        assert!(parse_opts(None).is_err());
        let o = parse_opts(Some(json!({"blockStateCalls": []}))).unwrap();
        assert!(o.blocks.is_empty());
        assert!(parse_opts(Some(json!({"blockStateCalls": 5}))).is_err());
        assert!(parse_opts(Some(json!({"blockStateCalls": [], "validation": "yes"}))).is_err());
    }
}
