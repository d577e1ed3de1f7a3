//! The block executor: runs a block's transactions on revm and reports what changed.
//!
//! The executor owns no state. The caller hands it a [`StateReader`] over the parent's
//! post-state and gets back receipts, gas totals, EIP-7685 requests and one
//! [`AccountChange`] per account the block altered; roots are the caller's business.
//!
//! ```text
//!  StateReader ─▶ ReaderDb (revm Database) ─▶ revm State (cache + bundle of transitions)
//!
//!  block env + spec (ChainConfig::fork_at)
//!   ─▶ system calls: EIP-4788 beacon root (Cancun+), EIP-2935 parent hash (Prague+)
//!   ─▶ each tx: block gas check ─▶ revm validate + execute ─▶ commit ─▶ receipt
//!   ─▶ withdrawals credited (Shanghai+)
//!   ─▶ requests (Prague+): deposit logs, EIP-7002 and EIP-7251 system calls
//!   ─▶ merge transitions ─▶ bundle ─▶ Vec<AccountChange>
//! ```
//!
//! The steps before and after the transactions are [`before_transactions`] and
//! [`finish_block`] (withdrawals, rewards, requests, the changes); eth_simulateV1
//! ([`simulate`]) runs the same two around its calls.
//!
//! revm's `State` with bundle updates does the per-account bookkeeping: EIP-161 clearing
//! of touched empty accounts, SELFDESTRUCT and re-creation (reported as `storage_wiped`),
//! and original-versus-present storage values, so unchanged slots never reach the caller.
//!
//! Blocks of every fork from Frontier on are executed with revm's spec of their fork
//! ([`crate::premerge::block_fork`]). Before the merge the DAO fork's drain runs before
//! the transactions and the miner's and ommers' rewards are credited after them; before
//! Byzantium each receipt carries the state root after its transaction, which the
//! [`StateReader`] computes (`state_root_with`). Constantinople's EIP-1283 (dropped by
//! Petersburg) has no revm spec: Constantinople blocks run with Petersburg's rules, which
//! differ only on chains that schedule the two forks apart.
//!
//! Block import runs [`execute_block_prewarmed`]: the same execution with a second thread
//! reading the block's pre-state ahead of it ([`prewarm`]).

mod call;
mod changes;
mod db;
mod env;
pub mod geth_words;
mod overrides;
mod prewarm;
pub mod simulate;
mod system;
#[cfg(test)]
mod tests;
mod trace;

use alloy_primitives::{Address, B256, Bytes, U256};
use moat_common::block::{Block, Header, Withdrawal};
use moat_common::config::{ChainConfig, Fork};
use moat_common::receipt::Receipt;
use revm::ExecuteCommitEvm;
use revm::context::result::{EVMError, ExecutionResult};
use revm::database::State;
use revm::database::states::bundle_state::BundleRetention;
use revm::database_interface::DatabaseCommitExt;
use std::collections::BTreeMap;

pub use call::{CallOutcome, CallRequest, call, call_gas_cap, create_access_list, estimate_gas};
pub use overrides::{AccountOverride, OverriddenState, OverrideError};
pub(crate) use prewarm::worth_prewarming;
pub use prewarm::{PREWARM_GAS, PREWARM_MIN_TXS, PrewarmStats, execute_block_prewarmed};
pub use system::{
    BEACON_ROOTS_ADDRESS, CONSOLIDATION_REQUEST_ADDRESS, DEPOSIT_EVENT_TOPIC,
    HISTORY_STORAGE_ADDRESS, WITHDRAWAL_REQUEST_ADDRESS,
};
pub use trace::{TraceError, TraceOptions, trace_block, trace_call};

/// Pre-state the executor reads (the node implements it over its store).
pub trait StateReader {
    /// The account at `address`; `None` if it does not exist.
    fn account(&self, address: &Address) -> Result<Option<AccountInfo>, VmError>;
    /// The value of `slot` (a 32-byte big-endian key); zero for an unset slot.
    fn storage(&self, address: &Address, slot: &B256) -> Result<U256, VmError>;
    /// The code whose keccak256 is `code_hash`; `None` if not held.
    fn code(&self, code_hash: &B256) -> Result<Option<Bytes>, VmError>;
    /// Hash of canonical block `number` (for BLOCKHASH; ancestors of the block being executed).
    fn block_hash(&self, number: u64) -> Result<B256, VmError>;
    /// The state root of this state with `changes` applied, if the reader can tell
    /// (pre-Byzantium receipts carry the root after each transaction). `None`: it cannot,
    /// and a pre-Byzantium block with transactions is not executed over it.
    fn state_root_with(&self, _changes: &[AccountChange]) -> Result<Option<B256>, VmError> {
        Ok(None)
    }
    /// Reads the trie nodes on the path to `address`'s account, and with `slot` those on
    /// the path to that slot in its storage trie, so that the state root after the block
    /// finds them in memory; what it finds is thrown away and a failure is ignored (the
    /// state root meets it). A reader without tries does nothing.
    fn warm_trie_path(&self, _address: &Address, _slot: Option<&B256>) {}
}

/// An account as the state trie holds it, minus the storage root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AccountInfo {
    /// The account's nonce: transactions sent (or contracts created, for a contract).
    pub nonce: u64,
    /// The account's balance in wei.
    pub balance: U256,
    /// keccak256 of the account's code (`KECCAK_EMPTY` without code).
    pub code_hash: B256,
}

/// Everything execution of one block produced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecutedBlock {
    /// One receipt per transaction, in order.
    pub receipts: Vec<Receipt>,
    /// Gas used by the block's transactions (the header's `gasUsed`).
    pub gas_used: u64,
    /// Blob gas used by the block's transactions (EIP-4844; the header's `blobGasUsed`).
    pub blob_gas_used: u64,
    /// EIP-7685 requests, each `type byte || data`, in type order, empty ones left out
    /// (Prague+; empty before).
    pub requests: Vec<Bytes>,
    /// Post-state changes to apply on top of the pre-state, one entry per changed account,
    /// sorted by address.
    pub changes: Vec<AccountChange>,
}

/// How one account differs after the block from before it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AccountChange {
    /// The account changed.
    pub address: Address,
    /// None: the account no longer exists (destroyed, or touched-empty and cleared per EIP-161).
    pub info: Option<AccountInfo>,
    /// Code for a new code hash (deployments, EIP-7702 delegations), if any.
    pub new_code: Option<Bytes>,
    /// The old storage must be dropped before `storage` is applied (SELFDESTRUCT in the
    /// same tx as creation / account re-created).
    pub storage_wiped: bool,
    /// Changed slots: (slot key, new value); zero means delete. Sorted by key.
    pub storage: Vec<(B256, U256)>,
}

/// `changes` grouped by address: one entry per address in the order of its first change,
/// with that address's changes in order (a block or a run of blocks may change one
/// account several times; the last change holds its final state).
pub(crate) fn group_by_address(changes: &[AccountChange]) -> Vec<(Address, Vec<&AccountChange>)> {
    let mut index: std::collections::HashMap<Address, usize> = std::collections::HashMap::new();
    let mut grouped: Vec<(Address, Vec<&AccountChange>)> = Vec::new();
    for change in changes {
        let i = *index.entry(change.address).or_insert_with(|| {
            grouped.push((change.address, Vec::new()));
            grouped.len() - 1
        });
        grouped[i].1.push(change);
    }
    grouped
}

/// Why a block could not be executed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VmError {
    /// A transaction the block includes is invalid (nonce, balance, gas, intrinsic gas,
    /// blob fee, …): the block is invalid.
    #[error("transaction {index} is invalid: {reason}")]
    InvalidTransaction {
        /// The transaction's index in the block.
        index: usize,
        /// Why it is invalid (geth's wording where geth has one).
        reason: String,
    },
    /// Block-level failure: gas above the limit, a failed system call, a malformed
    /// deposit log, a header field the fork needs but the block lacks, …
    #[error("invalid block: {0}")]
    InvalidBlock(String),
    /// The state reader failed, or revm failed internally: the block's validity is unknown.
    #[error("state read failed: {0}")]
    State(String),
    /// A call (eth_call, eth_estimateGas) that cannot run: funds, gas, fees.
    #[error("{0}")]
    InvalidCall(String),
}

/// revm's error for one transaction or system call, as our error. Database failures and
/// revm's own internal failures (a fatal precompile error) stay state errors: they say
/// nothing about the block's validity, so the caller must not mark the block bad.
fn evm_error(err: EVMError<impl std::fmt::Display>, tx_index: Option<usize>) -> VmError {
    match err {
        EVMError::Transaction(e) => match tx_index {
            Some(index) => VmError::InvalidTransaction {
                index,
                reason: geth_words::invalid_tx_message(&e),
            },
            None => VmError::InvalidBlock(format!(
                "system call rejected: {}",
                geth_words::invalid_tx_message(&e)
            )),
        },
        EVMError::Header(e) => VmError::InvalidBlock(e.to_string()),
        EVMError::Database(e) => VmError::State(e.to_string()),
        EVMError::Custom(e) => VmError::State(format!("evm failure: {e}")),
        EVMError::CustomAny(e) => VmError::State(format!("evm failure: {e}")),
    }
}

/// Where execution finds each transaction's sender: a slice of them recovered before,
/// or a source that recovers them while the block executes (block import's, which asks
/// for tx `i`'s sender only when tx `i` runs, so that recovery overlaps execution).
pub trait Senders: Sync {
    /// How many senders there are (one per transaction).
    fn count(&self) -> usize;
    /// The sender of transaction `index`, or why it has none (a signature that does not
    /// recover: the block is invalid).
    fn sender(&self, index: usize) -> Result<Address, VmError>;
}

impl Senders for &[Address] {
    fn count(&self) -> usize {
        self.len()
    }

    fn sender(&self, index: usize) -> Result<Address, VmError> {
        self.get(index).copied().ok_or(VmError::InvalidTransaction {
            index,
            reason: "no sender".into(),
        })
    }
}

impl Senders for Vec<Address> {
    fn count(&self) -> usize {
        self.len()
    }

    fn sender(&self, index: usize) -> Result<Address, VmError> {
        self.as_slice().sender(index)
    }
}

/// Executes `block` on the pre-state. `senders[i]` is the recovered sender of tx i (the
/// caller has them, usually from the pool's sender cache).
///
/// EIP-7702 authorities are recovered here with moat-crypto and handed to revm already
/// recovered, so signature rules (low s, parity) are the same ones the pool applies.
pub fn execute_block(
    config: &ChainConfig,
    block: &Block,
    senders: &[Address],
    state: &dyn StateReader,
) -> Result<ExecutedBlock, VmError> {
    execute(config, block, &senders, state, None)
}

/// [`execute_block`] with the senders from any [`Senders`]: tx `i`'s is asked for as
/// tx `i` starts, so the first one that does not recover ends the block there.
pub fn execute_block_with(
    config: &ChainConfig,
    block: &Block,
    senders: &dyn Senders,
    state: &dyn StateReader,
) -> Result<ExecutedBlock, VmError> {
    execute(config, block, senders, state, None)
}

/// [`execute_block`], telling `progress` the index of each transaction as it starts
/// (the prewarm thread runs ahead of it).
fn execute(
    config: &ChainConfig,
    block: &Block,
    senders: &dyn Senders,
    state: &dyn StateReader,
    progress: Option<&std::sync::atomic::AtomicUsize>,
) -> Result<ExecutedBlock, VmError> {
    let header = &block.header;
    if senders.count() != block.transactions.len() {
        return Err(VmError::InvalidBlock(format!(
            "{} senders given for {} transactions",
            senders.count(),
            block.transactions.len()
        )));
    }
    let fork = crate::premerge::block_fork(config, header);
    let env = env::BlockSetup::new(config, header, fork)?;

    let db = State::builder()
        .with_database(db::ReaderDb::new(state))
        .with_bundle_update()
        .build();
    let mut evm = env.build_evm(db);
    before_transactions(&mut evm, config, header, fork)?;
    let per_tx_roots = fork < Fork::Byzantium;

    let mut receipts = Vec::with_capacity(block.transactions.len());
    let mut cumulative_gas: u64 = 0;
    let mut blob_gas_used: u64 = 0;
    for (index, tx) in block.transactions.iter().enumerate() {
        if let Some(progress) = progress {
            progress.store(index, std::sync::atomic::Ordering::Release);
        }
        let sender = senders.sender(index)?;
        // revm checks a tx against the block gas limit alone; what earlier txs used is
        // ours to subtract (geth's "gas limit reached").
        let available = header.gas_limit.saturating_sub(cumulative_gas);
        if tx.tx().gas_limit() > available {
            return Err(VmError::InvalidTransaction {
                index,
                reason: format!(
                    "gas limit {} above the {} gas left in the block",
                    tx.tx().gas_limit(),
                    available
                ),
            });
        }
        let result = evm
            .transact_commit(env::tx_env(tx, sender))
            .map_err(|e| evm_error(e, Some(index)))?;
        cumulative_gas = cumulative_gas
            .checked_add(result.tx_gas_used())
            .filter(|&g| g <= header.gas_limit)
            .ok_or_else(|| VmError::InvalidBlock("gas used above the block gas limit".into()))?;
        blob_gas_used = blob_gas_used.saturating_add(tx.tx().blob_gas());
        let (success, logs) = match result {
            ExecutionResult::Success { logs, .. } => (true, logs),
            // A failed tx's logs were reverted with it; its receipt carries none.
            ExecutionResult::Revert { .. } | ExecutionResult::Halt { .. } => (false, Vec::new()),
        };
        let post_state = if per_tx_roots {
            let db = &mut evm.ctx.journaled_state.database;
            db.merge_transitions(BundleRetention::PlainState);
            let so_far = changes::from_bundle(db.bundle_state.clone())?;
            Some(state.state_root_with(&so_far)?.ok_or_else(|| {
                VmError::State("no intermediate state roots over this state".into())
            })?)
        } else {
            None
        };
        receipts.push(Receipt {
            tx_type: tx.tx_type(),
            success,
            post_state,
            cumulative_gas_used: cumulative_gas,
            logs,
        });
    }
    if let Some(params) = config.blob_params_at(header.timestamp) {
        let max = params
            .max
            .saturating_mul(moat_common::constants::GAS_PER_BLOB);
        if blob_gas_used > max {
            return Err(VmError::InvalidBlock(format!(
                "blob gas used {blob_gas_used} above the maximum {max}"
            )));
        }
    }

    let (requests, changes) = finish_block(
        &mut evm,
        config,
        header,
        fork,
        block.withdrawals.as_deref(),
        &block.ommers,
        &receipts,
    )?;
    Ok(ExecutedBlock {
        receipts,
        gas_used: cumulative_gas,
        blob_gas_used,
        requests,
        changes,
    })
}

/// What a block does before its transactions: the EIP-4788 and EIP-2935 system calls
/// and, at the DAO fork block, the drain.
fn before_transactions(
    evm: &mut env::BlockEvm<'_>,
    config: &ChainConfig,
    header: &Header,
    fork: Fork,
) -> Result<(), VmError> {
    if fork >= Fork::Cancun {
        let root = header.parent_beacon_block_root.ok_or_else(|| {
            VmError::InvalidBlock("Cancun block without parent beacon block root".into())
        })?;
        system::beacon_root_call(evm, root)?;
    }
    if fork >= Fork::Prague {
        system::parent_hash_call(evm, header.parent_hash)?;
    }
    if config.dao_fork_support && config.dao_fork_block == Some(header.number) {
        let db = &mut evm.ctx.journaled_state.database;
        let drained = db
            .drain_balances(crate::premerge::dao::DRAIN_LIST)
            .map_err(|e| VmError::State(e.to_string()))?;
        let total = drained.iter().fold(0u128, |a, b| a.saturating_add(*b));
        db.increment_balances([(crate::premerge::dao::REFUND_CONTRACT, total)])
            .map_err(|e| VmError::State(e.to_string()))?;
    }
    Ok(())
}

/// What a block does after its transactions: withdrawals credited (Shanghai+), the
/// miner's and ommers' rewards (before the merge), and the EIP-7685 requests (Prague+:
/// deposit logs of `receipts`, then the EIP-7002 and EIP-7251 system calls). Returns the
/// requests (empty before Prague) and every change the block made, sorted by address.
fn finish_block(
    evm: &mut env::BlockEvm<'_>,
    config: &ChainConfig,
    header: &Header,
    fork: Fork,
    withdrawals: Option<&[Withdrawal]>,
    ommers: &[Header],
    receipts: &[Receipt],
) -> Result<(Vec<Bytes>, Vec<AccountChange>), VmError> {
    if fork >= Fork::Shanghai
        && let Some(withdrawals) = withdrawals
    {
        // Summed per address first: revm reads each address once per batch, so two
        // withdrawals to one address in the same batch would otherwise overwrite.
        let mut credits: BTreeMap<Address, u128> = BTreeMap::new();
        for w in withdrawals {
            let wei = u128::from(w.amount) * 1_000_000_000;
            let entry = credits.entry(w.address).or_default();
            *entry = entry.saturating_add(wei);
        }
        // Zero amounts stay in: like geth, a zero credit touches the account, so an
        // empty one is cleared (EIP-161).
        evm.ctx
            .journaled_state
            .database
            .increment_balances(credits)
            .map_err(|e| VmError::State(e.to_string()))?;
    }

    if crate::premerge::is_pow(fork) {
        let mut credits: BTreeMap<Address, u128> = BTreeMap::new();
        for (address, wei) in crate::premerge::rewards(fork, header, ommers) {
            let wei = u128::try_from(wei).unwrap_or(u128::MAX);
            let entry = credits.entry(address).or_default();
            *entry = entry.saturating_add(wei);
        }
        evm.ctx
            .journaled_state
            .database
            .increment_balances(credits)
            .map_err(|e| VmError::State(e.to_string()))?;
    }

    let requests = if fork >= Fork::Prague {
        let mut requests = Vec::with_capacity(3);
        let deposit_contract = config.deposit_contract_address.unwrap_or(Address::ZERO);
        let deposits = system::deposit_requests(deposit_contract, receipts)?;
        push_request(&mut requests, 0x00, deposits);
        let withdrawals = system::withdrawal_requests_call(evm)?;
        push_request(&mut requests, 0x01, withdrawals);
        let consolidations = system::consolidation_requests_call(evm)?;
        push_request(&mut requests, 0x02, consolidations);
        requests
    } else {
        Vec::new()
    };

    let db = &mut evm.ctx.journaled_state.database;
    db.merge_transitions(BundleRetention::PlainState);
    let bundle = db.take_bundle();
    Ok((requests, changes::from_bundle(bundle)?))
}

/// EIP-7685: a request type with no data is left out of the list entirely.
fn push_request(out: &mut Vec<Bytes>, ty: u8, data: Vec<u8>) {
    if data.is_empty() {
        return;
    }
    let mut request = Vec::with_capacity(1 + data.len());
    request.push(ty);
    request.extend_from_slice(&data);
    out.push(request.into());
}
