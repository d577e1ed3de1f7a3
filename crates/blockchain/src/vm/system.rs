//! System contracts the protocol calls around a block's transactions, and the EIP-7685
//! requests that come out of them.
//!
//! All four calls are made from the system address with 30M gas, no fee and no nonce,
//! and only the called contract's account is kept from their state: revm also loads the
//! caller and the coinbase, and those must not be touched (an empty coinbase would be
//! cleared by EIP-161 where geth leaves it alone).

use super::VmError;
use super::env::BlockEvm;
use super::evm_error;
use alloy_primitives::{Address, B256, Bytes, TxKind, address, b256};
use moat_common::receipt::Receipt;
use revm::context::TxEnv;
use revm::context::result::{EVMError, ExecutionResult};
use revm::handler::{EthFrame, Handler, MainnetHandler, SYSTEM_ADDRESS};
use revm::interpreter::interpreter::EthInterpreter;
use revm::primitives::KECCAK_EMPTY;
use revm::{Database, ExecuteCommitEvm, ExecuteEvm};

/// EIP-4788 beacon roots contract.
pub const BEACON_ROOTS_ADDRESS: Address = address!("0x000F3df6D732807Ef1319fB7B8bB8522d0Beac02");
/// EIP-2935 block hash history contract.
pub const HISTORY_STORAGE_ADDRESS: Address = address!("0x0000F90827F1C53a10cb7A02335B175320002935");
/// EIP-7002 withdrawal request contract.
pub const WITHDRAWAL_REQUEST_ADDRESS: Address =
    address!("0x00000961Ef480Eb55e80D19ad83579A64c007002");
/// EIP-7251 consolidation request contract.
pub const CONSOLIDATION_REQUEST_ADDRESS: Address =
    address!("0x0000BBdDc7CE488642fb579F8B00f3a590007251");
/// keccak("DepositEvent(bytes,bytes,bytes,bytes,bytes)"), topic 0 of a deposit log.
pub const DEPOSIT_EVENT_TOPIC: B256 =
    b256!("0x649bbc62d0e31342afea4e5cd82d4049e7e1ee912fc0889aa790803be39038c5");

/// The gas every system call gets (EIP-4788 and the ones that copied it).
const SYSTEM_CALL_GAS: u64 = 30_000_000;

/// Whether `contract` holds code in the current (in-block) state.
fn has_code(evm: &mut BlockEvm<'_>, contract: Address) -> Result<bool, VmError> {
    let info = evm
        .ctx
        .journaled_state
        .database
        .basic(contract)
        .map_err(|e| VmError::State(e.to_string()))?;
    Ok(info.is_some_and(|i| i.code_hash != KECCAK_EMPTY))
}

/// Runs one system call and commits the contract's own changes.
fn system_call(
    evm: &mut BlockEvm<'_>,
    contract: Address,
    data: Bytes,
) -> Result<ExecutionResult, VmError> {
    // Set by hand rather than through revm's `system_call`, whose gas limit carries an
    // Amsterdam state-gas reservoir on top of the 30M these forks specify.
    evm.ctx.tx = TxEnv {
        caller: SYSTEM_ADDRESS,
        kind: TxKind::Call(contract),
        data,
        gas_limit: SYSTEM_CALL_GAS,
        ..Default::default()
    };
    let result =
        MainnetHandler::<_, EVMError<_>, EthFrame<EthInterpreter>>::default().run_system_call(evm);
    let mut state = evm.finalize();
    state.retain(|address, _| *address == contract);
    evm.commit(state);
    result.map_err(|e| evm_error(e, None))
}

/// A call whose failure the block tolerates (EIP-4788, EIP-2935): a missing contract or
/// a revert leaves the state as it was.
fn unchecked_call(evm: &mut BlockEvm<'_>, contract: Address, data: Bytes) -> Result<(), VmError> {
    if !has_code(evm, contract)? {
        return Ok(());
    }
    system_call(evm, contract, data).map(drop)
}

/// A call the block depends on (EIP-7002, EIP-7251): the contract must exist and
/// succeed, else the block is invalid. Returns the call's output.
fn checked_call(evm: &mut BlockEvm<'_>, contract: Address, what: &str) -> Result<Vec<u8>, VmError> {
    if !has_code(evm, contract)? {
        return Err(VmError::InvalidBlock(format!(
            "{what} contract {contract} has no code"
        )));
    }
    match system_call(evm, contract, Bytes::new())? {
        ExecutionResult::Success { output, .. } => Ok(output.into_data().to_vec()),
        ExecutionResult::Revert { output, .. } => Err(VmError::InvalidBlock(format!(
            "{what} system call reverted: {output}"
        ))),
        ExecutionResult::Halt { reason, .. } => Err(VmError::InvalidBlock(format!(
            "{what} system call halted: {reason:?}"
        ))),
    }
}

/// EIP-4788: stores the parent beacon block root before any transaction runs.
pub(super) fn beacon_root_call(evm: &mut BlockEvm<'_>, root: B256) -> Result<(), VmError> {
    unchecked_call(
        evm,
        BEACON_ROOTS_ADDRESS,
        Bytes::copy_from_slice(root.as_slice()),
    )
}

/// EIP-2935: stores the parent hash in the history contract before any transaction runs.
pub(super) fn parent_hash_call(evm: &mut BlockEvm<'_>, parent: B256) -> Result<(), VmError> {
    unchecked_call(
        evm,
        HISTORY_STORAGE_ADDRESS,
        Bytes::copy_from_slice(parent.as_slice()),
    )
}

/// EIP-7002: dequeues this block's withdrawal requests (76 bytes each, concatenated).
pub(super) fn withdrawal_requests_call(evm: &mut BlockEvm<'_>) -> Result<Vec<u8>, VmError> {
    checked_call(evm, WITHDRAWAL_REQUEST_ADDRESS, "withdrawal request")
}

/// EIP-7251: dequeues this block's consolidation requests (116 bytes each, concatenated).
pub(super) fn consolidation_requests_call(evm: &mut BlockEvm<'_>) -> Result<Vec<u8>, VmError> {
    checked_call(evm, CONSOLIDATION_REQUEST_ADDRESS, "consolidation request")
}

/// EIP-6110: the deposit requests of a block, from the `DepositEvent` logs the deposit
/// contract emitted, in log order.
///
/// The contract address is taken as configured, zero included (the hive test chains
/// set the zero address), as geth does.
pub(super) fn deposit_requests(
    deposit_contract: Address,
    receipts: &[Receipt],
) -> Result<Vec<u8>, VmError> {
    let mut out = Vec::new();
    for log in receipts.iter().flat_map(|r| &r.logs) {
        if log.address == deposit_contract
            && log.data.topics().first() == Some(&DEPOSIT_EVENT_TOPIC)
        {
            parse_deposit(&log.data.data, &mut out)?;
        }
    }
    Ok(out)
}

/// Size of one deposit request: pubkey 48, withdrawal credentials 32, amount 8,
/// signature 96, index 8.
pub(super) const DEPOSIT_REQUEST_SIZE: usize = 192;

/// ABI data of a `DepositEvent`: five dynamic `bytes`, each as (offset, length, padded
/// content). The deposit contract always emits exactly this layout, so anything else
/// is refused instead of being read at guessed positions.
const DEPOSIT_LOG_SIZE: usize = 576;
const DEPOSIT_FIELDS: [(usize, usize); 5] = [(160, 48), (256, 32), (320, 8), (384, 96), (512, 8)];

/// Appends the request encoded in one deposit log's data to `out`.
pub(super) fn parse_deposit(data: &[u8], out: &mut Vec<u8>) -> Result<(), VmError> {
    let malformed = |why: String| VmError::InvalidBlock(format!("malformed deposit log: {why}"));
    if data.len() != DEPOSIT_LOG_SIZE {
        return Err(malformed(format!(
            "{} bytes of data, expected {DEPOSIT_LOG_SIZE}",
            data.len()
        )));
    }
    // Every word read below lies inside the 576 bytes checked above.
    let word = |at: usize| alloy_primitives::U256::from_be_slice(&data[at..at + 32]);
    let start = out.len();
    for (i, (offset, size)) in DEPOSIT_FIELDS.into_iter().enumerate() {
        if word(i * 32) != alloy_primitives::U256::from(offset) {
            return Err(malformed(format!("field {i} at offset {}", word(i * 32))));
        }
        if word(offset) != alloy_primitives::U256::from(size) {
            return Err(malformed(format!("field {i} has size {}", word(offset))));
        }
        out.extend_from_slice(&data[offset + 32..offset + 32 + size]);
    }
    debug_assert_eq!(out.len() - start, DEPOSIT_REQUEST_SIZE);
    Ok(())
}
