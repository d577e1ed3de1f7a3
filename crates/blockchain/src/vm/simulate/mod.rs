//! `eth_simulateV1`'s execution: blocks of calls on top of a block's post-state, each
//! block on the one before, nothing stored.
//!
//! A [`Simulator`] keeps what the simulated blocks (and the state overrides given with
//! them) changed as a list of [`AccountChange`]s over the base state, and reads through
//! it ([`SimState`]); each block's state root is the base state's root with the whole
//! list applied. Calls run as geth runs them: the sender's nonce and the block's gas
//! left fill in what the call leaves out, the checks of a real transaction apply only
//! with `validation` (the sender may hold code either way), a failed call is a result
//! and not an error, and a call the block could not include is an error for the whole
//! request. Precompiles can be moved to other addresses for one block
//! ([`SimPrecompiles`]), and transfers of ether can be reported as ERC-7528 logs
//! ([`SimInspector`]).
//!
//! The pieces, one file a job:
//!
//! ```text
//!  mod.rs    the request and result types, Simulator: overrides, then each block
//!            (pre-block system calls and finish_block shared with block execution)
//!  state.rs  SimState (the changes laid over the base state), TrieOverlay (roots block by block)
//!  evm.rs    SimPrecompiles (moved and removed precompiles), SimInspector (logs, transfers)
//!  tx.rs     a call as a transaction (build_tx), nonce checks, geth's error words
//! ```

mod evm;
mod state;
#[cfg(test)]
mod tests;
mod tx;

pub use evm::{SimInspector, SimPrecompiles};
pub use state::{BaseTries, SimState};

use evm::SimEvm;
use state::TrieOverlay;
use tx::{build_tx, envelope, nonce_check, tx_error, wrap_nonce};

use super::call::CallRequest;
use super::db::ReaderDb;
use super::env::{self, BlockSetup};
use super::{AccountChange, AccountInfo, StateReader, VmError};
use crate::premerge;
use alloy_primitives::{Address, B256, Bytes, Log, U256, address, b256};
use moat_common::SignedTransaction;
use moat_common::block::{Header, Withdrawal};
use moat_common::config::{ChainConfig, Fork};
use moat_common::receipt::Receipt;
use moat_common::transaction::Signature;
use revm::context::Evm;
use revm::context::result::ExecutionResult;
use revm::database::State;
use revm::handler::instructions::EthInstructions;
use revm::primitives::KECCAK_EMPTY;
use revm::{Database, InspectCommitEvm};
use std::collections::{BTreeMap, HashMap, HashSet};

/// ERC-7528's address for ether, the address of the transfer logs.
pub const TRANSFER_LOG_ADDRESS: Address = address!("0xeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee");
/// keccak256("Transfer(address,address,uint256)").
pub const TRANSFER_TOPIC: B256 =
    b256!("0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef");

/// What one address is made to hold before a simulated block, geth's override object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimOverride {
    /// The balance in wei the account is given.
    pub balance: Option<U256>,
    /// The nonce the account is given.
    pub nonce: Option<u64>,
    /// The code the account is given.
    pub code: Option<Bytes>,
    /// The whole storage: slots not listed are cleared.
    pub state: Option<BTreeMap<B256, U256>>,
    /// Some slots; the others keep their values.
    pub state_diff: Option<BTreeMap<B256, U256>>,
    /// The precompile at this address moves there (for this block).
    pub move_precompile_to: Option<Address>,
}

/// One call: a request plus the blob fields `CallRequest` has no room for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimCall {
    /// The call as `eth_call` takes it.
    pub req: CallRequest,
    /// EIP-4844 versioned hashes (`blobVersionedHashes`): the call is a blob transaction.
    pub blob_hashes: Option<Vec<B256>>,
    /// The blob fee cap in wei per blob gas (`maxFeePerBlobGas`).
    pub max_fee_per_blob_gas: Option<u128>,
    /// The chain the call says it is for; another chain's is refused.
    pub chain_id: Option<u64>,
    /// EIP-7702 authorizations: the call becomes a set-code transaction.
    pub authorization_list: Option<Vec<moat_common::Authorization>>,
}

/// One block to simulate. `header` carries number, timestamp, gas limit, fee recipient,
/// prevRandao, difficulty, base fee (`None`: the rules decide), parent beacon root and
/// parent hash; the rest is filled in.
#[derive(Debug, Clone, Default)]
pub struct SimBlock {
    /// The header fields the caller sets (listed above); the rest are filled in.
    pub header: Header,
    /// The blob base fee the calls see, if overridden.
    pub blob_base_fee: Option<u128>,
    /// Withdrawals the block pays out (EIP-4895).
    pub withdrawals: Vec<Withdrawal>,
    /// Applied in address order before the block's calls.
    pub overrides: BTreeMap<Address, SimOverride>,
    /// The calls, executed in order as the block's transactions.
    pub calls: Vec<SimCall>,
}

/// Why a call could not be included, as geth's `txValidationError` sorts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimTxErrorKind {
    /// The nonce is below the sender's (geth's code -38010).
    NonceTooLow,
    /// The nonce is above the sender's (-38011).
    NonceTooHigh,
    /// The fee cap is below the block's base fee (-38012).
    FeeCapBelowBaseFee,
    /// The gas limit is below the intrinsic gas (-38013).
    IntrinsicGas,
    /// The sender cannot pay gas times price plus value (-38014).
    InsufficientFunds,
    /// The sender has code that is not an EIP-7702 delegation (EIP-3607).
    SenderNotEoa,
    /// Init code above the EIP-3860 limit (49 152 bytes).
    InitCodeTooLarge,
    /// The fee fields contradict one another.
    InvalidFees,
    /// Any other reason a call is refused (an internal error).
    Other,
}

/// Why a simulation stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// Call `index` of the block could not be included.
    #[error("err: {message} (supplied gas {gas})")]
    InvalidTransaction {
        /// Which of geth's validation errors it is.
        kind: SimTxErrorKind,
        /// The error in geth's words.
        message: String,
        /// The gas the call supplied.
        gas: u64,
    },
    /// A call asks for more gas than the block has left (geth's code -38015).
    #[error("block gas limit reached: remaining: {remaining}, required: {required}")]
    BlockGasLimitReached {
        /// Gas left in the block.
        remaining: u64,
        /// Gas the call asks for.
        required: u64,
    },
    /// A state override that cannot be applied (not a precompile, moved twice, ...).
    #[error("{0}")]
    Override(String),
    /// The request's fields are inconsistent.
    #[error("{0}")]
    InvalidParams(String),
    /// The calls together used more gas than the RPC gas cap allows.
    #[error("RPC gas cap exhausted: need {need}, remaining {remaining}")]
    GasCapExhausted {
        /// Gas the call used.
        need: u64,
        /// Gas left of the cap before it.
        remaining: u64,
    },
    /// Executing a block failed (a state read, or revm itself).
    #[error(transparent)]
    Vm(#[from] VmError),
}

/// How a call ended inside a simulated block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimStatus {
    /// The call succeeded.
    Success,
    /// Reverted, with the revert data in `return_data`.
    Revert,
    /// Halted with geth's wording of the reason.
    Halt(String),
}

/// One call's result. `logs` are what geth's simulation tracer saw (transfer logs
/// included when asked for); their block hash is the caller's to fill in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimCallResult {
    /// How the call ended.
    pub status: SimStatus,
    /// The call's output, or the revert data (`returnData`).
    pub return_data: Bytes,
    /// Gas the call used, after refunds (`gasUsed`).
    pub gas_used: u64,
    /// Gas spent before refunds, at least `gas_used` (`maxUsedGas`).
    pub max_used_gas: u64,
    /// The logs the call emitted, with their place in the block.
    pub logs: Vec<SimLog>,
    /// The call's gas was cut to what is left of the RPC gas cap.
    pub gas_capped: bool,
}

/// A log with its place in the block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimLog {
    /// The log: address, topics, data.
    pub log: Log,
    /// Index of the call in the block (`transactionIndex`).
    pub tx_index: u64,
    /// Index of the log in the block (`logIndex`).
    pub log_index: u64,
    /// Hash of the call's transaction (`transactionHash`).
    pub tx_hash: B256,
}

/// A simulated block: its header (roots and hash included), transactions (unsigned,
/// signature zero), their senders, the calls' results and the withdrawals.
#[derive(Debug, Clone)]
pub struct SimulatedBlock {
    /// The block, as sealed from the calls.
    pub block: moat_common::block::Block,
    /// The sender of each transaction, in order.
    pub senders: Vec<Address>,
    /// The result of each call, in order.
    pub calls: Vec<SimCallResult>,
    /// The transactions' hashes as geth gives them. They differ from
    /// `block.transactions[i].hash()` for legacy ones only: geth's unsigned legacy
    /// transaction has `v` 0, which a signed one cannot have.
    pub tx_hashes: Vec<B256>,
}

/// Runs simulated blocks one after the other over one base state.
pub struct Simulator<'a> {
    config: &'a ChainConfig,
    state: SimState<'a>,
    validation: bool,
    trace_transfers: bool,
    /// What is left of the RPC gas cap across all blocks.
    gas_budget: u64,
    /// The simulated state's tries, when the base's can be read.
    tries: Option<TrieOverlay<'a>>,
}

impl<'a> Simulator<'a> {
    /// `gas_cap` 0 means no cap.
    pub fn new(
        config: &'a ChainConfig,
        base: &'a dyn StateReader,
        validation: bool,
        trace_transfers: bool,
        gas_cap: u64,
    ) -> Self {
        Self {
            config,
            state: SimState::new(base),
            validation,
            trace_transfers,
            gas_budget: if gas_cap == 0 { u64::MAX } else { gas_cap },
            tries: None,
        }
    }

    /// Computes each block's state root from the last one's tries (`base` must be the
    /// state the simulation starts from).
    pub fn with_tries(mut self, base: &'a dyn BaseTries) -> Self {
        self.tries = Some(TrieOverlay {
            base,
            nodes: HashMap::new(),
            wiped: HashSet::new(),
            accounts: HashMap::new(),
        });
        self
    }

    /// The state root of the simulated state.
    fn state_root(&mut self) -> Result<B256, VmError> {
        match &mut self.tries {
            Some(tries) => {
                let root = tries.apply(&self.state.changes[self.state.rooted..])?;
                self.state.rooted = self.state.changes.len();
                Ok(root)
            }
            None => self.state.state_root(),
        }
    }

    /// The state the simulation has reached.
    pub fn state(&self) -> &SimState<'a> {
        &self.state
    }

    /// Turns the overrides into changes of the simulated state, and the precompile moves
    /// into `precompiles`. Refusals are geth's.
    fn apply_overrides(
        &mut self,
        overrides: &BTreeMap<Address, SimOverride>,
        precompiles: &mut SimPrecompiles,
    ) -> Result<(), SimError> {
        let mut targets: HashSet<Address> = HashSet::new();
        let mut out = Vec::with_capacity(overrides.len());
        for (address, o) in overrides {
            if targets.contains(address) {
                return Err(SimError::Override(format!(
                    "account {} has already been overridden by a precompile",
                    address.to_checksum(None)
                )));
            }
            let is_precompile = precompiles.is_precompile(address);
            if let Some(to) = o.move_precompile_to {
                if !is_precompile {
                    return Err(SimError::Override(format!(
                        "account {} is not a precompile",
                        address.to_checksum(None)
                    )));
                }
                if overrides.contains_key(&to) {
                    return Err(SimError::Override(format!(
                        "account {} is already overridden",
                        to.to_checksum(None)
                    )));
                }
                let original = precompiles.moved.get(address).copied().unwrap_or(*address);
                precompiles.moved.insert(to, original);
                targets.insert(to);
            }
            if is_precompile {
                precompiles.moved.remove(address);
                precompiles.removed.insert(*address);
            }
            if o.state.is_some() && o.state_diff.is_some() {
                return Err(SimError::Override(format!(
                    "account {} has both 'state' and 'stateDiff'",
                    address.to_checksum(None)
                )));
            }
            let mut info = self.state.account(address)?.unwrap_or(AccountInfo {
                nonce: 0,
                balance: U256::ZERO,
                code_hash: KECCAK_EMPTY,
            });
            let mut new_code = None;
            if let Some(n) = o.nonce {
                info.nonce = n;
            }
            if let Some(b) = o.balance {
                info.balance = b;
            }
            if let Some(code) = &o.code {
                if code.is_empty() {
                    info.code_hash = KECCAK_EMPTY;
                } else {
                    info.code_hash = alloy_primitives::keccak256(code);
                    new_code = Some(code.clone());
                }
            }
            let touched = o.nonce.is_some()
                || o.balance.is_some()
                || o.code.is_some()
                || o.state.is_some()
                || o.state_diff.is_some();
            if !touched {
                continue;
            }
            let storage_wiped = o.state.is_some();
            let storage: Vec<(B256, U256)> = o
                .state
                .iter()
                .chain(o.state_diff.iter())
                .flat_map(|m| m.iter().map(|(k, v)| (*k, *v)))
                .collect();
            out.push(AccountChange {
                address: *address,
                info: Some(info),
                new_code,
                storage_wiped,
                storage,
            });
        }
        self.state.apply(out);
        Ok(())
    }

    /// Runs one block on the state the blocks before it left. `block.header` must have
    /// its parent hash, number, timestamp, gas limit, base fee, excess blob gas and
    /// beacon root set (the caller derives them from the parent).
    pub fn simulate_block(&mut self, block: SimBlock) -> Result<SimulatedBlock, SimError> {
        let mut header = block.header;
        let fork = premerge::block_fork(self.config, &header);
        let spec = env::spec_id(fork)?;
        let mut precompiles = SimPrecompiles::new(spec);
        self.apply_overrides(&block.overrides, &mut precompiles)?;

        let mut setup = BlockSetup::new(self.config, &header, fork)?;
        {
            let cfg = setup.cfg_mut();
            cfg.disable_nonce_check = !self.validation;
            cfg.disable_base_fee = !self.validation;
            // geth never refuses a sender for holding code in a simulation.
            cfg.disable_eip3607 = true;
            // Nor holds a call to the EIP-7825 cap (its transaction checks are skipped).
            cfg.tx_gas_limit_cap = Some(u64::MAX);
        }
        if let Some(fee) = block.blob_base_fee
            && let Some(blob) = setup.block_env_mut().blob_excess_gas_and_price.as_mut()
        {
            blob.blob_gasprice = fee;
        }
        let db = State::builder()
            .with_database(ReaderDb::new(&self.state))
            .with_bundle_update()
            .build();
        let mut system = setup.build_evm(db);
        super::before_transactions(&mut system, self.config, &header, fork)?;
        let db = system.ctx.journaled_state.database;

        let inspector = SimInspector {
            trace_transfers: self.trace_transfers,
            ..Default::default()
        };
        let mut evm: SimEvm<'_> = Evm::new_with_inspector(
            setup.context(db),
            inspector,
            EthInstructions::new_mainnet_with_spec(spec),
            precompiles,
        );

        let mut txs = Vec::with_capacity(block.calls.len());
        let mut senders = Vec::with_capacity(block.calls.len());
        let mut tx_hashes = Vec::with_capacity(block.calls.len());
        let mut results = Vec::with_capacity(block.calls.len());
        let mut receipts = Vec::with_capacity(block.calls.len());
        let mut cumulative: u64 = 0;
        let mut blob_gas_used: u64 = 0;
        for (index, call) in block.calls.into_iter().enumerate() {
            let from = call.req.from.unwrap_or_default();
            let nonce = match call.req.nonce {
                Some(n) => n,
                None => evm
                    .ctx
                    .journaled_state
                    .database
                    .basic(from)
                    .map_err(|e| VmError::State(e.to_string()))?
                    .map_or(0, |a| a.nonce),
            };
            if self.validation {
                // geth checks the nonce before the fees; revm the other way round.
                let state_nonce = evm
                    .ctx
                    .journaled_state
                    .database
                    .basic(from)
                    .map_err(|e| VmError::State(e.to_string()))?
                    .map_or(0, |a| a.nonce);
                nonce_check(nonce, state_nonce, from, call.req.gas.unwrap_or_default())?;
            }
            let remaining = header.gas_limit.saturating_sub(cumulative);
            let requested = call.req.gas.unwrap_or(remaining);
            if remaining < requested {
                return Err(SimError::BlockGasLimitReached {
                    remaining,
                    required: requested,
                });
            }
            let gas = requested.min(self.gas_budget);
            let gas_capped = gas < requested;
            let (tx, mut tx_env) = build_tx(self.config, &header, &call, from, nonce, gas)?;
            if !self.validation && nonce == u64::MAX {
                // Unchecked, a sender at the last nonce may still send (as in geth);
                // revm refuses that nonce statelessly, and does not read it otherwise.
                tx_env.nonce = u64::MAX - 1;
            }
            let signed = SignedTransaction::new(tx, Signature::default());
            let tx_hash = alloy_primitives::keccak256(envelope(&signed));
            let result = evm
                .inspect_tx_commit(tx_env)
                .map_err(|e| tx_error(e, gas))?;
            if !self.validation && nonce == u64::MAX {
                wrap_nonce(&mut evm.ctx.journaled_state.database, from)?;
            }
            let used = result.tx_gas_used();
            cumulative = cumulative.saturating_add(used);
            if used > self.gas_budget {
                return Err(SimError::GasCapExhausted {
                    need: used,
                    remaining: self.gas_budget,
                });
            }
            self.gas_budget -= used;
            blob_gas_used = blob_gas_used.saturating_add(signed.tx().blob_gas());
            let max_used_gas = result.gas().total_gas_spent().max(used);
            let logs = evm
                .inspector
                .take()
                .into_iter()
                .map(|(log, log_index)| SimLog {
                    log,
                    tx_index: index as u64,
                    log_index,
                    tx_hash,
                })
                .collect();
            let (status, return_data, receipt_logs) = match result {
                ExecutionResult::Success { output, logs, .. } => {
                    (SimStatus::Success, output.into_data(), logs)
                }
                ExecutionResult::Revert { output, .. } => (SimStatus::Revert, output, Vec::new()),
                ExecutionResult::Halt { reason, .. } => (
                    SimStatus::Halt(super::geth_words::halt_message(&reason)),
                    Bytes::new(),
                    Vec::new(),
                ),
            };
            receipts.push(Receipt {
                tx_type: signed.tx_type(),
                success: status == SimStatus::Success,
                post_state: None,
                cumulative_gas_used: cumulative,
                logs: receipt_logs,
            });
            results.push(SimCallResult {
                status,
                return_data,
                gas_used: used,
                max_used_gas,
                logs,
                gas_capped,
            });
            tx_hashes.push(tx_hash);
            txs.push(signed);
            senders.push(from);
        }

        // Withdrawals, rewards and requests on a plain EVM over the same state.
        let db = evm.ctx.journaled_state.database;
        let mut post = setup.build_evm(db);
        let (requests, changes) = super::finish_block(
            &mut post,
            self.config,
            &header,
            fork,
            Some(&block.withdrawals),
            &[],
            &receipts,
        )?;
        let requests = (fork >= Fork::Prague).then_some(requests);
        self.state.apply(changes);

        let withdrawals = (fork >= Fork::Shanghai).then_some(block.withdrawals);
        let mut sealed = moat_common::block::Block {
            header: Header::default(),
            hash: B256::ZERO,
            transactions: txs,
            ommers: Vec::new(),
            withdrawals,
        };
        header.state_root = self.state_root()?;
        header.transactions_root =
            alloy_trie::root::ordered_trie_root_with_encoder(&sealed.transactions, |tx, buf| {
                buf.extend_from_slice(&envelope(tx))
            });
        header.withdrawals_root = sealed.withdrawals_root();
        header.receipts_root = moat_common::receipt::receipts_root(&receipts);
        header.logs_bloom = receipts
            .iter()
            .fold(alloy_primitives::Bloom::ZERO, |acc, r| acc | r.bloom());
        header.gas_used = cumulative;
        if fork >= Fork::Cancun {
            header.blob_gas_used = Some(blob_gas_used);
        }
        if let Some(requests) = requests {
            header.requests_hash = Some(crate::chain::requests_hash(&requests));
        }
        sealed.hash = header.hash();
        sealed.header = header;
        self.state.set_block_hash(sealed.header.number, sealed.hash);
        Ok(SimulatedBlock {
            block: sealed,
            senders,
            calls: results,
            tx_hashes,
        })
    }
}
