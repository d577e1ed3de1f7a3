//! `eth_call` and `eth_estimateGas`: one transaction on a block's post-state, nothing kept.

use super::{StateReader, VmError, db, env, evm_error};
use alloy_primitives::{Address, Bytes, TxKind, U256};
use moat_common::block::Header;
use moat_common::config::{ChainConfig, Fork};
use moat_common::transaction::MAX_TX_GAS_OSAKA;
use revm::ExecuteEvm;
use revm::context::TxEnv;
use revm::context::result::ExecutionResult;
use revm::database::State;

/// An EIP-2930 access list: addresses with their storage keys.
pub(super) type AccessListEntries = Vec<(Address, Vec<alloy_primitives::B256>)>;

/// A call as JSON-RPC clients describe it; absent fields take geth's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallRequest {
    /// The caller (`from`); the zero address when absent.
    pub from: Option<Address>,
    /// The callee (`to`); `None` creates a contract with `input` as init code.
    pub to: Option<Address>,
    /// The gas limit (`gas`); the RPC gas cap when absent, and never above it.
    pub gas: Option<u64>,
    /// Legacy gas price in wei (`gasPrice`).
    pub gas_price: Option<u128>,
    /// EIP-1559 fee cap in wei per gas (`maxFeePerGas`).
    pub max_fee_per_gas: Option<u128>,
    /// EIP-1559 tip cap in wei per gas (`maxPriorityFeePerGas`).
    pub max_priority_fee_per_gas: Option<u128>,
    /// Wei sent with the call (`value`); zero when absent.
    pub value: Option<U256>,
    /// Call data, or init code when `to` is absent (`input`, or `data`).
    pub input: Bytes,
    /// EIP-2930 access list: its addresses and slots start warm (and are paid for).
    pub access_list: AccessListEntries,
    /// The nonce the call says it has (calls do not check it).
    pub nonce: Option<u64>,
    /// EIP-4844 versioned hashes: the call is a blob transaction (BLOBHASH sees them).
    pub blob_hashes: Vec<alloy_primitives::B256>,
    /// The blob fee cap; without one (or zero) the call sees a zero blob base fee, as in
    /// geth.
    pub max_fee_per_blob_gas: Option<u128>,
    /// EIP-7702 authorizations: the call is a set-code transaction.
    pub authorization_list: Vec<moat_common::Authorization>,
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallOutcome {
    /// The call returned normally.
    Success {
        /// The data it returned.
        output: Bytes,
        /// Gas used, after refunds.
        gas_used: u64,
    },
    /// The call reverted (REVERT), all its changes undone.
    Revert {
        /// The revert data (often an ABI-encoded `Error(string)`).
        output: Bytes,
        /// Gas used, after refunds.
        gas_used: u64,
    },
    /// The call halted exceptionally (out of gas, invalid opcode, ...), all its gas spent.
    Halt {
        /// Why, in geth's words.
        reason: String,
        /// Gas used.
        gas_used: u64,
    },
}

impl CallOutcome {
    /// Gas the call used, however it ended.
    pub fn gas_used(&self) -> u64 {
        match self {
            CallOutcome::Success { gas_used, .. }
            | CallOutcome::Revert { gas_used, .. }
            | CallOutcome::Halt { gas_used, .. } => *gas_used,
        }
    }
}

/// The most gas a call may use on top of `header`: the block's limit, and from Osaka the
/// per-transaction cap.
pub fn call_gas_cap(config: &ChainConfig, header: &Header) -> u64 {
    let fork = config.fork_at(header.number, header.timestamp);
    if fork >= Fork::Osaka {
        header.gas_limit.min(MAX_TX_GAS_OSAKA)
    } else {
        header.gas_limit
    }
}

/// revm's transaction for a call with `gas`.
pub(super) fn call_tx(config: &ChainConfig, req: &CallRequest, gas: u64) -> TxEnv {
    let dynamic = req.max_fee_per_gas.is_some() || req.max_priority_fee_per_gas.is_some();
    let access_list = revm::context_interface::transaction::AccessList(
        req.access_list
            .iter()
            .map(
                |(address, keys)| revm::context_interface::transaction::AccessListItem {
                    address: *address,
                    storage_keys: keys.clone(),
                },
            )
            .collect(),
    );
    let ty = match (dynamic, req.access_list.is_empty()) {
        _ if !req.authorization_list.is_empty() => 4,
        _ if !req.blob_hashes.is_empty() => 3,
        (true, _) => 2,
        (false, false) => 1,
        (false, true) => 0,
    };
    // Types 3 and 4 are fee-market transactions: a tip, zero if not given.
    let dynamic = dynamic || ty >= 3;
    TxEnv {
        tx_type: ty,
        nonce: req.nonce.unwrap_or_default(),
        access_list,
        caller: req.from.unwrap_or_default(),
        gas_limit: gas,
        gas_price: req.max_fee_per_gas.or(req.gas_price).unwrap_or_default(),
        gas_priority_fee: if dynamic {
            Some(req.max_priority_fee_per_gas.unwrap_or_default())
        } else {
            None
        },
        kind: req.to.map_or(TxKind::Create, TxKind::Call),
        value: req.value.unwrap_or_default(),
        data: req.input.clone(),
        chain_id: Some(config.chain_id),
        blob_hashes: req.blob_hashes.clone(),
        max_fee_per_blob_gas: req.max_fee_per_blob_gas.unwrap_or_default(),
        authorization_list: req
            .authorization_list
            .iter()
            .map(super::env::recovered_authorization)
            .collect(),
    }
}

pub(super) fn setup_for(
    config: &ChainConfig,
    header: &Header,
    req: &CallRequest,
) -> Result<env::BlockSetup, VmError> {
    let fork = crate::premerge::block_fork(config, header);
    let priced = req.gas_price.is_some() || req.max_fee_per_gas.is_some();
    let mut setup = env::BlockSetup::new(config, header, fork)?.for_call(!priced);
    // As geth: a blob call with no blob fee cap sees a zero blob base fee.
    if req.max_fee_per_blob_gas.unwrap_or_default() == 0
        && let Some(blob) = &mut setup.block_env_mut().blob_excess_gas_and_price
    {
        blob.blob_gasprice = 0;
    }
    Ok(setup)
}

fn outcome(result: ExecutionResult) -> CallOutcome {
    let gas_used = result.tx_gas_used();
    match result {
        ExecutionResult::Success { output, .. } => CallOutcome::Success {
            output: output.into_data(),
            gas_used,
        },
        ExecutionResult::Revert { output, .. } => CallOutcome::Revert { output, gas_used },
        ExecutionResult::Halt { reason, .. } => CallOutcome::Halt {
            reason: super::geth_words::halt_message(&reason),
            gas_used,
        },
    }
}

pub(super) fn call_error<E: std::fmt::Display>(e: revm::context::result::EVMError<E>) -> VmError {
    match evm_error(e, Some(0)) {
        // Not an invalid block here: the request itself is wrong (funds, gas, fee).
        VmError::InvalidTransaction { reason, .. } => VmError::InvalidCall(reason),
        other => other,
    }
}

/// geth's `eth_createAccessList`: runs the call under an access-list tracer, with the
/// list found so far, until the list stops changing (the list changes gas, and so the
/// path taken). Returns the list (the sender, recipient and precompiles left out) and the
/// outcome of the last run.
pub fn create_access_list(
    config: &ChainConfig,
    header: &Header,
    req: &CallRequest,
    state: &dyn StateReader,
) -> Result<(AccessListEntries, CallOutcome), VmError> {
    let cap = call_gas_cap(config, header);
    let gas = req.gas.unwrap_or(cap).min(cap);
    let setup = setup_for(config, header, req)?;
    let mut req = req.clone();
    // Bounded: each round only adds entries, and a call touches finitely many.
    for _ in 0..16 {
        let inspector = revm_inspectors::access_list::AccessListInspector::new(alloy_eip2930_list(
            &req.access_list,
        ));
        let db = State::builder()
            .with_database(db::ReaderDb::new(state))
            .build();
        let mut evm = setup.build_inspecting_evm(db, inspector);
        let result = revm::InspectEvm::inspect_tx(&mut evm, call_tx(config, &req, gas))
            .map_err(call_error)?;
        let excluded = evm.inspector.excluded().clone();
        let mut list: Vec<(Address, Vec<alloy_primitives::B256>)> = evm
            .inspector
            .into_touched_slots()
            .into_iter()
            .filter(|(a, _)| !excluded.contains(a))
            .map(|(a, slots)| (a, slots.into_iter().collect()))
            .collect();
        list.sort();
        let done = list == req.access_list;
        req.access_list = list;
        if done {
            return Ok((req.access_list, outcome(result.result)));
        }
    }
    let outcome = run(config, header, &req, gas, state)?;
    Ok((req.access_list, outcome))
}

fn alloy_eip2930_list(
    list: &[(Address, Vec<alloy_primitives::B256>)],
) -> alloy_eip2930::AccessList {
    alloy_eip2930::AccessList(
        list.iter()
            .map(|(address, keys)| alloy_eip2930::AccessListItem {
                address: *address,
                storage_keys: keys.clone(),
            })
            .collect(),
    )
}

fn run(
    config: &ChainConfig,
    header: &Header,
    req: &CallRequest,
    gas: u64,
    state: &dyn StateReader,
) -> Result<CallOutcome, VmError> {
    let setup = setup_for(config, header, req)?;
    let db = State::builder()
        .with_database(db::ReaderDb::new(state))
        .build();
    let mut evm = setup.build_evm(db);
    let tx = call_tx(config, req, gas);
    let result = evm.transact(tx).map_err(call_error)?;
    let gas_used = result.result.tx_gas_used();
    Ok(match result.result {
        ExecutionResult::Success { output, .. } => CallOutcome::Success {
            output: output.into_data(),
            gas_used,
        },
        ExecutionResult::Revert { output, .. } => CallOutcome::Revert { output, gas_used },
        ExecutionResult::Halt { reason, .. } => CallOutcome::Halt {
            reason: super::geth_words::halt_message(&reason),
            gas_used,
        },
    })
}

/// Runs `req` on the post-state of `header` (the header's own block environment).
pub fn call(
    config: &ChainConfig,
    header: &Header,
    req: &CallRequest,
    state: &dyn StateReader,
) -> Result<CallOutcome, VmError> {
    let cap = call_gas_cap(config, header);
    run(config, header, req, req.gas.unwrap_or(cap).min(cap), state)
}

/// The least gas limit with which `req` succeeds, by binary search as geth does; the
/// outcome at the cap when it never succeeds.
pub fn estimate_gas(
    config: &ChainConfig,
    header: &Header,
    req: &CallRequest,
    state: &dyn StateReader,
) -> Result<Result<u64, CallOutcome>, VmError> {
    let cap = req
        .gas
        .unwrap_or(u64::MAX)
        .min(call_gas_cap(config, header));
    let at_cap = run(config, header, req, cap, state)?;
    if !matches!(at_cap, CallOutcome::Success { .. }) {
        return Ok(Err(at_cap));
    }
    // What it used is a lower bound; EIP-150's 63/64 rule can need more than that.
    let mut lo = at_cap.gas_used().saturating_sub(1);
    let mut hi = cap;
    let optimistic = (at_cap.gas_used() + 2_300) * 64 / 63;
    if optimistic < hi
        && matches!(
            run(config, header, req, optimistic, state),
            Ok(CallOutcome::Success { .. })
        )
    {
        hi = optimistic;
    }
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        match run(config, header, req, mid, state) {
            Ok(CallOutcome::Success { .. }) => hi = mid,
            // Too little gas shows as a halt, a revert, or (below intrinsic gas) a refusal.
            Ok(_) | Err(VmError::InvalidCall(_)) => lo = mid,
            Err(e) => return Err(e),
        }
    }
    Ok(Ok(hi))
}
