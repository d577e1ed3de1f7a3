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

use super::call::CallRequest;
use super::db::ReaderDb;
use super::env::{self, BlockSetup};
use super::{AccountChange, AccountInfo, StateReader, VmError, changes, evm_error};
use crate::premerge;
use alloy_primitives::{Address, B256, Bytes, Log, LogData, TxKind, U256, address, b256};
use moat_common::SignedTransaction;
use moat_common::block::{Header, Withdrawal};
use moat_common::config::{ChainConfig, Fork};
use moat_common::receipt::Receipt;
use moat_common::transaction::{
    AccessListItem, Eip1559Tx, Eip4844Tx, Eip7702Tx, LegacyTx, Signature, Transaction,
};
use revm::context::result::{EVMError, ExecutionResult, InvalidTransaction};
use revm::context::{ContextTr, Evm, JournalTr, TxEnv};
use revm::context_interface::transaction::AccessList as RevmAccessList;
use revm::context_interface::transaction::AccessListItem as RevmAccessListItem;
use revm::database::State;
use revm::database::states::bundle_state::BundleRetention;
use revm::database_interface::DatabaseCommitExt;
use revm::handler::instructions::EthInstructions;
use revm::handler::{EthFrame, EthPrecompiles, PrecompileProvider};
use revm::interpreter::interpreter::EthInterpreter;
use revm::interpreter::{CallInputs, CallOutcome, CallScheme, CreateInputs, CreateOutcome};
use revm::interpreter::{InterpreterResult, interpreter_types::InterpreterTypes};
use revm::primitives::{AddressSet, KECCAK_EMPTY};
use revm::{Database, InspectCommitEvm, Inspector};
use std::collections::{BTreeMap, HashMap, HashSet};

/// ERC-7528's address for ether, the address of the transfer logs.
pub const TRANSFER_LOG_ADDRESS: Address = address!("0xeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee");
/// keccak256("Transfer(address,address,uint256)").
pub const TRANSFER_TOPIC: B256 =
    b256!("0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef");

/// What one address is made to hold before a simulated block, geth's override object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimOverride {
    pub balance: Option<U256>,
    pub nonce: Option<u64>,
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
    pub req: CallRequest,
    pub blob_hashes: Option<Vec<B256>>,
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
    pub header: Header,
    /// The blob base fee the calls see, if overridden.
    pub blob_base_fee: Option<u128>,
    pub withdrawals: Vec<Withdrawal>,
    /// Applied in address order before the block's calls.
    pub overrides: BTreeMap<Address, SimOverride>,
    pub calls: Vec<SimCall>,
}

/// Why a call could not be included, as geth's `txValidationError` sorts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimTxErrorKind {
    NonceTooLow,
    NonceTooHigh,
    FeeCapBelowBaseFee,
    IntrinsicGas,
    InsufficientFunds,
    SenderNotEoa,
    InitCodeTooLarge,
    /// The fee fields contradict one another.
    InvalidFees,
    Other,
}

/// Why a simulation stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// Call `index` of the block could not be included.
    #[error("err: {message} (supplied gas {gas})")]
    InvalidTransaction {
        kind: SimTxErrorKind,
        message: String,
        gas: u64,
    },
    #[error("block gas limit reached: remaining: {remaining}, required: {required}")]
    BlockGasLimitReached { remaining: u64, required: u64 },
    /// A state override that cannot be applied (not a precompile, moved twice, ...).
    #[error("{0}")]
    Override(String),
    /// The request's fields are inconsistent.
    #[error("{0}")]
    InvalidParams(String),
    #[error("RPC gas cap exhausted: need {need}, remaining {remaining}")]
    GasCapExhausted { need: u64, remaining: u64 },
    #[error(transparent)]
    Vm(#[from] VmError),
}

/// How a call ended inside a simulated block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimStatus {
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
    pub status: SimStatus,
    pub return_data: Bytes,
    pub gas_used: u64,
    pub max_used_gas: u64,
    pub logs: Vec<SimLog>,
    /// The call's gas was cut to what is left of the RPC gas cap.
    pub gas_capped: bool,
}

/// A log with its place in the block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimLog {
    pub log: Log,
    pub tx_index: u64,
    pub log_index: u64,
    pub tx_hash: B256,
}

/// A simulated block: its header (roots and hash included), transactions (unsigned,
/// signature zero), their senders, the calls' results and the withdrawals.
#[derive(Debug, Clone)]
pub struct SimulatedBlock {
    pub block: moat_common::block::Block,
    pub senders: Vec<Address>,
    pub calls: Vec<SimCallResult>,
    /// The transactions' hashes as geth gives them. They differ from
    /// `block.transactions[i].hash()` for legacy ones only: geth's unsigned legacy
    /// transaction has `v` 0, which a signed one cannot have.
    pub tx_hashes: Vec<B256>,
}

/// geth's encoding of an unsigned legacy transaction: `v`, `r` and `s` all zero.
fn unsigned_legacy(tx: &LegacyTx) -> Vec<u8> {
    use alloy_rlp::Encodable;
    let mut payload = Vec::new();
    tx.nonce.encode(&mut payload);
    tx.gas_price.encode(&mut payload);
    tx.gas_limit.encode(&mut payload);
    match tx.to {
        TxKind::Call(to) => to.encode(&mut payload),
        TxKind::Create => payload.push(alloy_rlp::EMPTY_STRING_CODE),
    }
    tx.value.encode(&mut payload);
    tx.input.encode(&mut payload);
    payload.extend([alloy_rlp::EMPTY_STRING_CODE; 3]);
    let mut out = Vec::with_capacity(payload.len() + 9);
    alloy_rlp::Header {
        list: true,
        payload_length: payload.len(),
    }
    .encode(&mut out);
    out.extend(payload);
    out
}

/// A simulated transaction's envelope as geth encodes it.
fn envelope(tx: &SignedTransaction) -> Vec<u8> {
    match tx.tx() {
        Transaction::Legacy(legacy) => unsigned_legacy(legacy),
        _ => tx.encoded_2718(),
    }
}

/// The base state with what the simulation changed laid over it.
pub struct SimState<'a> {
    base: &'a dyn StateReader,
    accounts: HashMap<Address, Option<AccountInfo>>,
    slots: HashMap<(Address, B256), U256>,
    wiped: HashSet<Address>,
    codes: HashMap<B256, Bytes>,
    hashes: HashMap<u64, B256>,
    /// Every change so far, in order: what the state root is computed from.
    changes: Vec<AccountChange>,
    /// How many of `changes` the incremental tries have taken in.
    rooted: usize,
}

impl<'a> SimState<'a> {
    pub fn new(base: &'a dyn StateReader) -> Self {
        Self {
            base,
            accounts: HashMap::new(),
            slots: HashMap::new(),
            wiped: HashSet::new(),
            codes: HashMap::new(),
            hashes: HashMap::new(),
            changes: Vec::new(),
            rooted: 0,
        }
    }

    /// Lays `changes` over what is there.
    pub fn apply(&mut self, changes: Vec<AccountChange>) {
        for c in &changes {
            self.accounts.insert(c.address, c.info);
            if let Some(code) = &c.new_code
                && let Some(info) = c.info
            {
                self.codes.insert(info.code_hash, code.clone());
            }
            if c.storage_wiped || c.info.is_none() {
                self.wiped.insert(c.address);
                self.slots.retain(|(a, _), _| *a != c.address);
            }
            for (slot, value) in &c.storage {
                self.slots.insert((c.address, *slot), *value);
            }
        }
        self.changes.extend(changes);
    }

    /// The state root of the base state with every change applied.
    pub fn state_root(&self) -> Result<B256, VmError> {
        self.base.state_root_with(&self.changes)?.ok_or_else(|| {
            VmError::State("the state root of this block's state cannot be computed".into())
        })
    }

    /// Makes BLOCKHASH of `number` answer `hash` (a simulated block).
    pub fn set_block_hash(&mut self, number: u64, hash: B256) {
        self.hashes.insert(number, hash);
    }
}

impl StateReader for SimState<'_> {
    fn account(&self, address: &Address) -> Result<Option<AccountInfo>, VmError> {
        match self.accounts.get(address) {
            Some(info) => Ok(*info),
            None => self.base.account(address),
        }
    }

    fn storage(&self, address: &Address, slot: &B256) -> Result<U256, VmError> {
        if let Some(v) = self.slots.get(&(*address, *slot)) {
            return Ok(*v);
        }
        if self.wiped.contains(address) {
            return Ok(U256::ZERO);
        }
        self.base.storage(address, slot)
    }

    fn code(&self, code_hash: &B256) -> Result<Option<Bytes>, VmError> {
        match self.codes.get(code_hash) {
            Some(code) => Ok(Some(code.clone())),
            None => self.base.code(code_hash),
        }
    }

    fn block_hash(&self, number: u64) -> Result<B256, VmError> {
        match self.hashes.get(&number) {
            Some(h) => Ok(*h),
            None => self.base.block_hash(number),
        }
    }
}

/// The base state's tries and account records, for state roots computed block by block
/// (without them each block's root is computed over all changes so far, which grows with
/// the square of the number of blocks).
pub trait BaseTries: moat_trie::NodeSource {
    /// The account as the state trie holds it (its storage root included).
    fn account_record(&self, address: &Address) -> Result<Option<moat_storage::Account>, VmError>;
}

impl BaseTries for crate::history::StateAtBlock {
    fn account_record(&self, address: &Address) -> Result<Option<moat_storage::Account>, VmError> {
        self.account(address)
            .map_err(|e| VmError::State(e.to_string()))
    }
}

/// The tries of the simulated state: the nodes and account records the blocks so far
/// wrote, over the base's.
struct TrieOverlay<'a> {
    base: &'a dyn BaseTries,
    nodes: HashMap<(B256, Vec<u8>), Option<Vec<u8>>>,
    /// Tries emptied since the base: their base nodes are gone.
    wiped: HashSet<B256>,
    accounts: HashMap<Address, Option<moat_storage::Account>>,
}

impl moat_trie::NodeSource for TrieOverlay<'_> {
    fn node(&self, owner: &B256, path: &[u8]) -> Result<Option<Vec<u8>>, moat_trie::TrieError> {
        if let Some(node) = self.nodes.get(&(*owner, path.to_vec())) {
            return Ok(node.clone());
        }
        if self.wiped.contains(owner) {
            return Ok(None);
        }
        self.base.node(owner, path)
    }
}

impl TrieOverlay<'_> {
    /// Takes `changes` (in order, several per address allowed) into the tries; the new
    /// state root.
    fn apply(&mut self, changes: &[AccountChange]) -> Result<B256, VmError> {
        use crate::state_root::{
            ACCOUNT_TRIE, account_leaf, hashed_address, hashed_slot, slot_leaf,
        };
        use moat_trie::Trie;
        let err = |e: moat_trie::TrieError| VmError::State(e.to_string());
        let grouped = super::group_by_address(changes);
        let mut writes: Vec<(B256, moat_trie::TrieWrite)> = Vec::new();
        let mut wiped_now: Vec<B256> = Vec::new();
        let mut records: Vec<(Address, Option<moat_storage::Account>)> = Vec::new();
        let root = {
            let mut accounts = Trie::new(&*self, ACCOUNT_TRIE);
            for (address, list) in grouped {
                let owner = hashed_address(&address);
                let Some(last) = list.last() else { continue };
                let Some(info) = last.info else {
                    accounts.remove(&owner).map_err(err)?;
                    wiped_now.push(owner);
                    records.push((address, None));
                    continue;
                };
                let previous = match self.accounts.get(&address) {
                    Some(record) => *record,
                    None => self.base.account_record(&address)?,
                };
                // Storage starts over from the last wipe or deletion.
                let start = list
                    .iter()
                    .rposition(|c| c.storage_wiped || c.info.is_none());
                let mut storage = match start {
                    Some(_) => Trie::wiped(&*self, owner),
                    None => Trie::new(&*self, owner),
                };
                let mut changed = false;
                for change in &list[start.unwrap_or(0)..] {
                    for (slot, value) in &change.storage {
                        let key = hashed_slot(slot);
                        if value.is_zero() {
                            storage.remove(&key).map_err(err)?;
                        } else {
                            storage.insert(&key, slot_leaf(value)).map_err(err)?;
                        }
                        changed = true;
                    }
                }
                if start.is_some() {
                    wiped_now.push(owner);
                }
                let storage_root = if changed || start.is_some() {
                    let commit = storage.commit().map_err(err)?;
                    writes.extend(commit.writes.into_iter().map(|w| (owner, w)));
                    commit.root
                } else {
                    previous.map_or(alloy_trie::EMPTY_ROOT_HASH, |p| p.storage_root)
                };
                let account = moat_storage::Account {
                    nonce: info.nonce,
                    balance: info.balance,
                    code_hash: info.code_hash,
                    storage_root,
                };
                accounts
                    .insert(&owner, account_leaf(&account))
                    .map_err(err)?;
                records.push((address, Some(account)));
            }
            let commit = accounts.commit().map_err(err)?;
            writes.extend(commit.writes.into_iter().map(|w| (ACCOUNT_TRIE, w)));
            commit.root
        };
        for owner in wiped_now {
            self.nodes.retain(|(o, _), _| *o != owner);
            self.wiped.insert(owner);
        }
        for (owner, w) in writes {
            self.nodes.insert((owner, w.path), w.node);
        }
        self.accounts.extend(records);
        Ok(root)
    }
}

/// The precompiles of one simulated block: the fork's, with some moved elsewhere and
/// some removed (an override of a precompile's address removes it, as in geth).
pub struct SimPrecompiles {
    inner: EthPrecompiles,
    /// New address → the precompile's own address.
    moved: HashMap<Address, Address>,
    removed: HashSet<Address>,
}

impl SimPrecompiles {
    fn new(spec: revm::primitives::hardfork::SpecId) -> Self {
        Self {
            inner: EthPrecompiles::new(spec),
            moved: HashMap::new(),
            removed: HashSet::new(),
        }
    }

    fn is_precompile(&self, address: &Address) -> bool {
        self.moved.contains_key(address)
            || (self.inner.contains(address) && !self.removed.contains(address))
    }
}

impl<CTX: ContextTr> PrecompileProvider<CTX> for SimPrecompiles
where
    EthPrecompiles: PrecompileProvider<CTX, Output = InterpreterResult>,
{
    type Output = InterpreterResult;

    fn set_spec(&mut self, spec: <CTX::Cfg as revm::context::Cfg>::Spec) -> bool {
        <EthPrecompiles as PrecompileProvider<CTX>>::set_spec(&mut self.inner, spec)
    }

    fn run(
        &mut self,
        context: &mut CTX,
        inputs: &CallInputs,
    ) -> Result<Option<InterpreterResult>, String> {
        if let Some(original) = self.moved.get(&inputs.bytecode_address) {
            let mut moved = inputs.clone();
            moved.bytecode_address = *original;
            return self.inner.run(context, &moved);
        }
        if self.removed.contains(&inputs.bytecode_address) {
            return Ok(None);
        }
        self.inner.run(context, inputs)
    }

    /// The fork's precompiles start warm, wherever they were moved (as in geth).
    fn warm_addresses(&self) -> &AddressSet {
        self.inner.warm_addresses()
    }

    fn contains(&self, address: &Address) -> bool {
        self.is_precompile(address)
    }
}

/// geth's simulation tracer: the logs of each open call frame (dropped when the frame
/// fails), and, when asked, a transfer log for every call or create that moves ether.
#[derive(Debug, Default)]
pub struct SimInspector {
    trace_transfers: bool,
    frames: Vec<Vec<(Log, u64)>>,
    done: Vec<(Log, u64)>,
    /// Logs captured in this block so far (geth's log index counts dropped ones too).
    count: u64,
}

impl SimInspector {
    fn capture(&mut self, log: Log) {
        let index = self.count;
        self.count += 1;
        if let Some(frame) = self.frames.last_mut() {
            frame.push((log, index));
        }
    }

    fn transfer(&mut self, from: Address, to: Address, value: U256) {
        if !self.trace_transfers || value.is_zero() {
            return;
        }
        let topics = vec![TRANSFER_TOPIC, from.into_word(), to.into_word()];
        let data = Bytes::copy_from_slice(&value.to_be_bytes::<32>());
        self.capture(Log {
            address: TRANSFER_LOG_ADDRESS,
            data: LogData::new_unchecked(topics, data),
        });
    }

    fn exit(&mut self, ok: bool) {
        let Some(frame) = self.frames.pop() else {
            return;
        };
        match self.frames.last_mut() {
            Some(parent) if ok => parent.extend(frame),
            Some(_) => {}
            None => self.done = if ok { frame } else { Vec::new() },
        }
    }

    fn take(&mut self) -> Vec<(Log, u64)> {
        self.frames.clear();
        std::mem::take(&mut self.done)
    }
}

impl<CTX: ContextTr, INTR: InterpreterTypes> Inspector<CTX, INTR> for SimInspector {
    fn log(&mut self, _context: &mut CTX, log: Log) {
        self.capture(log);
    }

    fn call(&mut self, _context: &mut CTX, inputs: &mut CallInputs) -> Option<CallOutcome> {
        self.frames.push(Vec::new());
        if !matches!(
            inputs.scheme,
            CallScheme::DelegateCall | CallScheme::CallCode
        ) && let Some(value) = inputs.transfer_value()
        {
            self.transfer(inputs.caller, inputs.target_address, value);
        }
        None
    }

    fn call_end(&mut self, _context: &mut CTX, _inputs: &CallInputs, outcome: &mut CallOutcome) {
        self.exit(outcome.result.result.is_ok());
    }

    fn create(&mut self, context: &mut CTX, inputs: &mut CreateInputs) -> Option<CreateOutcome> {
        self.frames.push(Vec::new());
        if !inputs.value().is_zero() {
            let caller = inputs.caller();
            // The address the frame will get: the caller's nonce is read before the
            // frame bumps it.
            let nonce = context
                .journal_mut()
                .load_account(caller)
                .map(|a| a.data.info.nonce)
                .unwrap_or_default();
            let created = inputs.created_address(nonce);
            self.transfer(caller, created, inputs.value());
        }
        None
    }

    fn create_end(
        &mut self,
        _context: &mut CTX,
        _inputs: &CreateInputs,
        outcome: &mut CreateOutcome,
    ) {
        self.exit(outcome.result.result.is_ok());
    }

    fn selfdestruct(&mut self, contract: Address, target: Address, value: U256) {
        self.transfer(contract, target, value);
    }
}

type SimContext<'a> = revm::handler::MainnetContext<State<ReaderDb<'a>>>;
type SimEvm<'a> = Evm<
    SimContext<'a>,
    SimInspector,
    EthInstructions<EthInterpreter, SimContext<'a>>,
    SimPrecompiles,
    EthFrame<EthInterpreter>,
>;

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
        if fork >= Fork::Shanghai {
            let mut credits: BTreeMap<Address, u128> = BTreeMap::new();
            for w in &block.withdrawals {
                let entry = credits.entry(w.address).or_default();
                *entry = entry.saturating_add(u128::from(w.amount) * 1_000_000_000);
            }
            post.ctx
                .journaled_state
                .database
                .increment_balances(credits)
                .map_err(|e| VmError::State(e.to_string()))?;
        }
        if premerge::is_pow(fork) {
            let mut credits: BTreeMap<Address, u128> = BTreeMap::new();
            for (address, wei) in premerge::rewards(fork, &header, &[]) {
                let entry = credits.entry(address).or_default();
                *entry = entry.saturating_add(u128::try_from(wei).unwrap_or(u128::MAX));
            }
            post.ctx
                .journaled_state
                .database
                .increment_balances(credits)
                .map_err(|e| VmError::State(e.to_string()))?;
        }
        let requests = if fork >= Fork::Prague {
            let mut requests = Vec::with_capacity(3);
            let deposit_contract = self
                .config
                .deposit_contract_address
                .unwrap_or(Address::ZERO);
            let deposits = super::system::deposit_requests(deposit_contract, &receipts)?;
            super::push_request(&mut requests, 0x00, deposits);
            let withdrawals = super::system::withdrawal_requests_call(&mut post)?;
            super::push_request(&mut requests, 0x01, withdrawals);
            let consolidations = super::system::consolidation_requests_call(&mut post)?;
            super::push_request(&mut requests, 0x02, consolidations);
            Some(requests)
        } else {
            None
        };
        let db = &mut post.ctx.journaled_state.database;
        db.merge_transitions(BundleRetention::PlainState);
        let bundle = db.take_bundle();
        self.state.apply(changes::from_bundle(bundle)?);

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

fn access_items(list: &[(Address, Vec<B256>)]) -> Vec<AccessListItem> {
    list.iter()
        .map(|(address, keys)| AccessListItem {
            address: *address,
            storage_keys: keys.clone(),
        })
        .collect()
}

/// The transaction a call becomes in the block (geth's `ToTransaction` with the
/// dynamic-fee type by default) and the message revm runs (geth's `ToMessage`).
fn build_tx(
    config: &ChainConfig,
    header: &Header,
    call: &SimCall,
    from: Address,
    nonce: u64,
    gas: u64,
) -> Result<(Transaction, TxEnv), SimError> {
    let req = &call.req;
    if req.gas_price.is_some()
        && (req.max_fee_per_gas.is_some() || req.max_priority_fee_per_gas.is_some())
    {
        return Err(SimError::InvalidParams(
            "both gasPrice and (maxFeePerGas or maxPriorityFeePerGas) specified".into(),
        ));
    }
    let chain_id = config.chain_id;
    if let Some(have) = call.chain_id
        && have != chain_id
    {
        return Err(SimError::InvalidParams(format!(
            "chainId does not match node's (have={have}, want={chain_id})"
        )));
    }
    let value = req.value.unwrap_or_default();
    let kind = req.to.map_or(TxKind::Create, TxKind::Call);
    let access_list = access_items(&req.access_list);
    // Before London a call always pays a gas price (zero unless given).
    let gas_price = match header.base_fee_per_gas {
        None => Some(req.gas_price.unwrap_or_default()),
        Some(_) => req.gas_price,
    };
    let max_fee = req.max_fee_per_gas.unwrap_or_default();
    let tip = req.max_priority_fee_per_gas.unwrap_or_default();
    let tx = match (&call.blob_hashes, gas_price) {
        // An authorization list makes a set-code transaction whatever else is given.
        _ if call.authorization_list.is_some() => {
            let Some(to) = req.to else {
                return Err(SimError::InvalidParams(
                    "a set-code transaction needs a recipient".into(),
                ));
            };
            Transaction::Eip7702(Eip7702Tx {
                chain_id,
                nonce,
                max_priority_fee_per_gas: tip,
                max_fee_per_gas: max_fee,
                gas_limit: gas,
                to,
                value,
                input: req.input.clone(),
                access_list,
                authorization_list: call.authorization_list.clone().unwrap_or_default(),
            })
        }
        // A given gas price makes a legacy transaction, as in geth.
        (_, Some(price)) => Transaction::Legacy(LegacyTx {
            chain_id: None,
            nonce,
            gas_price: price,
            gas_limit: gas,
            to: kind,
            value,
            input: req.input.clone(),
        }),
        (Some(hashes), None) => Transaction::Eip4844(Eip4844Tx {
            chain_id,
            nonce,
            max_priority_fee_per_gas: tip,
            max_fee_per_gas: max_fee,
            gas_limit: gas,
            to: req.to.unwrap_or_default(),
            value,
            input: req.input.clone(),
            access_list,
            max_fee_per_blob_gas: call.max_fee_per_blob_gas.unwrap_or_default(),
            blob_versioned_hashes: hashes.clone(),
        }),
        (None, None) => Transaction::Eip1559(Eip1559Tx {
            chain_id,
            nonce,
            max_priority_fee_per_gas: tip,
            max_fee_per_gas: max_fee,
            gas_limit: gas,
            to: kind,
            value,
            input: req.input.clone(),
            access_list,
        }),
    };
    let revm_list = RevmAccessList(
        req.access_list
            .iter()
            .map(|(address, keys)| RevmAccessListItem {
                address: *address,
                storage_keys: keys.clone(),
            })
            .collect(),
    );
    let (tx_type, price, priority) = match (&tx, gas_price) {
        (Transaction::Eip4844(_), _) => (3, max_fee, Some(tip)),
        (Transaction::Eip7702(_), _) => (4, max_fee, Some(tip)),
        // The access list of a priced call still applies: an EIP-2930 message.
        (_, Some(price)) => (if req.access_list.is_empty() { 0 } else { 1 }, price, None),
        _ => (2, max_fee, Some(tip)),
    };
    let env = TxEnv {
        tx_type,
        caller: from,
        gas_limit: gas,
        gas_price: price,
        kind,
        value,
        data: req.input.clone(),
        nonce,
        chain_id: Some(chain_id),
        access_list: revm_list,
        gas_priority_fee: priority,
        blob_hashes: call.blob_hashes.clone().unwrap_or_default(),
        max_fee_per_blob_gas: call.max_fee_per_blob_gas.unwrap_or_default(),
        authorization_list: tx
            .authorization_list()
            .iter()
            .map(env::recovered_authorization)
            .collect(),
    };
    Ok((tx, env))
}

/// geth's unchecked nonce bump past the last nonce wraps to zero; revm's stops at it.
fn wrap_nonce(db: &mut State<ReaderDb<'_>>, from: Address) -> Result<(), SimError> {
    use revm::DatabaseCommit;
    let Some(mut info) = db.basic(from).map_err(|e| VmError::State(e.to_string()))? else {
        return Ok(());
    };
    if info.nonce != u64::MAX {
        return Ok(());
    }
    info.nonce = 0;
    let mut account = revm::state::Account::from(info);
    account.mark_touch();
    db.commit(std::iter::once((from, account)).collect());
    Ok(())
}

/// geth's nonce checks, made before any other (revm makes them after the fee checks).
fn nonce_check(tx: u64, state: u64, from: Address, gas: u64) -> Result<(), SimError> {
    let (kind, message) = match tx.cmp(&state) {
        std::cmp::Ordering::Less => (
            SimTxErrorKind::NonceTooLow,
            format!("nonce too low: address {from}, tx: {tx} state: {state}"),
        ),
        std::cmp::Ordering::Greater => (
            SimTxErrorKind::NonceTooHigh,
            format!("nonce too high: address {from}, tx: {tx} state: {state}"),
        ),
        std::cmp::Ordering::Equal if state == u64::MAX => (
            SimTxErrorKind::Other,
            format!("nonce has max value: address {from}, nonce: {state}"),
        ),
        std::cmp::Ordering::Equal => return Ok(()),
    };
    Err(SimError::InvalidTransaction { kind, message, gas })
}

/// revm's refusal of a call as geth sorts it.
fn tx_error<E: std::fmt::Display>(e: EVMError<E>, gas: u64) -> SimError {
    match e {
        EVMError::Transaction(t) => {
            let kind = match &t {
                InvalidTransaction::NonceTooLow { .. } => SimTxErrorKind::NonceTooLow,
                InvalidTransaction::NonceTooHigh { .. } => SimTxErrorKind::NonceTooHigh,
                InvalidTransaction::GasPriceLessThanBasefee => SimTxErrorKind::FeeCapBelowBaseFee,
                InvalidTransaction::CallGasCostMoreThanGasLimit { .. }
                | InvalidTransaction::GasFloorMoreThanGasLimit { .. } => {
                    SimTxErrorKind::IntrinsicGas
                }
                InvalidTransaction::LackOfFundForMaxFee { .. }
                | InvalidTransaction::OverflowPaymentInTransaction => {
                    SimTxErrorKind::InsufficientFunds
                }
                InvalidTransaction::RejectCallerWithCode => SimTxErrorKind::SenderNotEoa,
                InvalidTransaction::CreateInitCodeSizeLimit => SimTxErrorKind::InitCodeTooLarge,
                InvalidTransaction::PriorityFeeGreaterThanMaxFee => SimTxErrorKind::InvalidFees,
                _ => SimTxErrorKind::Other,
            };
            SimError::InvalidTransaction {
                kind,
                message: super::geth_words::invalid_tx_message(&t),
                gas,
            }
        }
        other => SimError::Vm(evm_error(other, Some(0))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny state: accounts and code; its "root" is a digest of the changes given.
    #[derive(Default)]
    struct Mem {
        accounts: HashMap<Address, AccountInfo>,
        code: HashMap<B256, Bytes>,
    }

    impl StateReader for Mem {
        fn account(&self, a: &Address) -> Result<Option<AccountInfo>, VmError> {
            Ok(self.accounts.get(a).copied())
        }
        fn storage(&self, _: &Address, _: &B256) -> Result<U256, VmError> {
            Ok(U256::ZERO)
        }
        fn code(&self, h: &B256) -> Result<Option<Bytes>, VmError> {
            Ok(self.code.get(h).cloned())
        }
        fn block_hash(&self, n: u64) -> Result<B256, VmError> {
            Ok(B256::from(U256::from(n)))
        }
        fn state_root_with(&self, changes: &[AccountChange]) -> Result<Option<B256>, VmError> {
            Ok(Some(alloy_primitives::keccak256(format!("{changes:?}"))))
        }
    }

    const FROM: Address = Address::repeat_byte(0xc0);
    const TO: Address = Address::repeat_byte(0xc1);

    fn header() -> Header {
        Header {
            number: 1,
            timestamp: 12,
            gas_limit: 30_000_000,
            base_fee_per_gas: Some(0),
            excess_blob_gas: Some(0),
            blob_gas_used: Some(0),
            parent_beacon_block_root: Some(B256::ZERO),
            ..Default::default()
        }
    }

    fn transfer(value: u64) -> SimCall {
        SimCall {
            req: CallRequest {
                from: Some(FROM),
                to: Some(TO),
                value: Some(U256::from(value)),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn funded(wei: u64) -> BTreeMap<Address, SimOverride> {
        BTreeMap::from([(
            FROM,
            SimOverride {
                balance: Some(U256::from(wei)),
                ..Default::default()
            },
        )])
    }

    #[test]
    fn a_block_of_overridden_state_and_transfers_is_simulated_with_transfer_logs() {
        let config = ChainConfig::all_forks_at_genesis(1, Fork::Cancun);
        let mem = Mem::default();
        let mut sim = Simulator::new(&config, &mem, false, true, 0);
        let out = sim
            .simulate_block(SimBlock {
                header: header(),
                overrides: funded(1_000),
                calls: vec![transfer(300), transfer(200)],
                ..Default::default()
            })
            .unwrap();
        assert_eq!(out.calls.len(), 2);
        assert!(out.calls.iter().all(|c| c.status == SimStatus::Success));
        assert_eq!(out.calls[0].gas_used, 21_000);
        assert_eq!(out.block.header.gas_used, 42_000);
        // The nonce the call left out came from the state, and went up.
        assert_eq!(out.block.transactions[1].tx().nonce(), 1);
        let log = &out.calls[1].logs[0];
        assert_eq!(log.log.address, TRANSFER_LOG_ADDRESS);
        assert_eq!(log.log.topics()[2], TO.into_word());
        assert_eq!(log.log_index, 1);
        assert_eq!(
            sim.state().account(&TO).unwrap().unwrap().balance,
            U256::from(500)
        );
        assert_eq!(
            sim.state().account(&FROM).unwrap().unwrap().balance,
            U256::from(500)
        );
    }

    #[test]
    fn a_call_the_block_could_not_include_fails_the_simulation_with_its_kind() {
        let config = ChainConfig::all_forks_at_genesis(1, Fork::Cancun);
        let mem = Mem::default();
        let mut sim = Simulator::new(&config, &mem, false, false, 0);
        let e = sim
            .simulate_block(SimBlock {
                header: header(),
                calls: vec![transfer(1)],
                ..Default::default()
            })
            .unwrap_err();
        assert!(matches!(
            e,
            SimError::InvalidTransaction {
                kind: SimTxErrorKind::InsufficientFunds,
                ..
            }
        ));
        // With validation, a nonce ahead of the state's is refused before anything else.
        let mut sim = Simulator::new(&config, &mem, true, false, 0);
        let mut call = transfer(0);
        call.req.nonce = Some(5);
        let e = sim
            .simulate_block(SimBlock {
                header: header(),
                calls: vec![call],
                ..Default::default()
            })
            .unwrap_err();
        assert!(matches!(
            e,
            SimError::InvalidTransaction {
                kind: SimTxErrorKind::NonceTooHigh,
                ..
            }
        ));
        // Another chain's call, and contradicting fee fields.
        let mut call = transfer(0);
        call.chain_id = Some(999);
        let mut both = transfer(0);
        both.req.gas_price = Some(1);
        both.req.max_fee_per_gas = Some(1);
        for bad in [call, both] {
            let e = sim
                .simulate_block(SimBlock {
                    header: header(),
                    calls: vec![bad],
                    ..Default::default()
                })
                .unwrap_err();
            assert!(matches!(e, SimError::InvalidParams(_)), "{e}");
        }
        // More gas than the block has left.
        let mut call = transfer(0);
        call.req.gas = Some(40_000_000);
        let e = sim
            .simulate_block(SimBlock {
                header: header(),
                calls: vec![call],
                ..Default::default()
            })
            .unwrap_err();
        assert!(matches!(e, SimError::BlockGasLimitReached { .. }));
    }

    #[test]
    fn a_moved_precompile_answers_at_its_new_address_only() {
        let config = ChainConfig::all_forks_at_genesis(1, Fork::Cancun);
        let mem = Mem::default();
        let identity = Address::with_last_byte(4);
        let elsewhere = Address::repeat_byte(0x77);
        let mut overrides = funded(0);
        overrides.insert(
            identity,
            SimOverride {
                move_precompile_to: Some(elsewhere),
                ..Default::default()
            },
        );
        let call_to = |to: Address| SimCall {
            req: CallRequest {
                from: Some(FROM),
                to: Some(to),
                input: Bytes::from_static(b"echo"),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut sim = Simulator::new(&config, &mem, false, false, 0);
        let out = sim
            .simulate_block(SimBlock {
                header: header(),
                overrides,
                calls: vec![call_to(elsewhere), call_to(identity)],
                ..Default::default()
            })
            .unwrap();
        assert_eq!(out.calls[0].return_data, Bytes::from_static(b"echo"));
        assert!(out.calls[1].return_data.is_empty());
        // Only a precompile moves.
        let mut sim = Simulator::new(&config, &mem, false, false, 0);
        let e = sim
            .simulate_block(SimBlock {
                header: header(),
                overrides: BTreeMap::from([(
                    TO,
                    SimOverride {
                        move_precompile_to: Some(elsewhere),
                        ..Default::default()
                    },
                )]),
                ..Default::default()
            })
            .unwrap_err();
        assert!(matches!(e, SimError::Override(m) if m.contains("is not a precompile")));
    }

    #[test]
    fn an_authorization_list_delegates_the_signer_to_code_for_the_call() {
        let config = ChainConfig::all_forks_at_genesis(1, Fork::Prague);
        // The delegate returns 32 bytes of 0x2a.
        let delegate = Address::repeat_byte(0xde);
        let code =
            Bytes::from_static(&[0x60, 0x2a, 0x60, 0x00, 0x52, 0x60, 0x20, 0x60, 0x00, 0xf3]);
        let mut mem = Mem::default();
        let hash = alloy_primitives::keccak256(&code);
        mem.code.insert(hash, code);
        mem.accounts.insert(
            delegate,
            AccountInfo {
                nonce: 1,
                balance: U256::ZERO,
                code_hash: hash,
            },
        );
        // Prague blocks call the request contracts: the ones of the conformance genesis.
        let genesis: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../../shared/testdata/ethtest/genesis.json"
            ))
            .unwrap(),
        )
        .unwrap();
        for address in [
            super::super::WITHDRAWAL_REQUEST_ADDRESS,
            super::super::CONSOLIDATION_REQUEST_ADDRESS,
        ] {
            let code: Bytes = serde_json::from_value(
                genesis["alloc"][format!("{address:x}").trim_start_matches("0x")]["code"].clone(),
            )
            .unwrap();
            let hash = alloy_primitives::keccak256(&code);
            mem.code.insert(hash, code);
            mem.accounts.insert(
                address,
                AccountInfo {
                    nonce: 1,
                    balance: U256::ZERO,
                    code_hash: hash,
                },
            );
        }
        let signer = moat_crypto::secp::Signer::from_seed(7);
        let auth = moat_common::Authorization::sign(U256::from(1), delegate, 0, &signer);
        let call = SimCall {
            req: CallRequest {
                from: Some(FROM),
                to: Some(signer.address()),
                ..Default::default()
            },
            authorization_list: Some(vec![auth]),
            ..Default::default()
        };
        let mut sim = Simulator::new(&config, &mem, false, false, 0);
        let mut h = header();
        h.requests_hash = None;
        let out = sim
            .simulate_block(SimBlock {
                header: h,
                calls: vec![call],
                ..Default::default()
            })
            .unwrap();
        assert_eq!(out.calls[0].status, SimStatus::Success);
        assert_eq!(out.calls[0].return_data[31], 0x2a);
        assert_eq!(
            out.block.transactions[0].tx_type(),
            moat_common::TxType::Eip7702
        );
        // The signer now holds the delegation, its nonce bumped.
        let info = sim.state().account(&signer.address()).unwrap().unwrap();
        assert_eq!(info.nonce, 1);
    }

    #[test]
    fn block_by_block_roots_equal_roots_over_all_changes() {
        // A stored chain (genesis only) to simulate on: its head state can compute roots
        // both ways.
        let genesis = serde_json::json!({
            "config": {
                "chainId": 1, "homesteadBlock": 0, "eip150Block": 0, "eip155Block": 0,
                "eip158Block": 0, "byzantiumBlock": 0, "constantinopleBlock": 0,
                "petersburgBlock": 0, "istanbulBlock": 0, "berlinBlock": 0, "londonBlock": 0,
                "mergeNetsplitBlock": 0, "terminalTotalDifficulty": 0, "shanghaiTime": 0,
                "cancunTime": 0
            },
            "gasLimit": "0x1c9c380", "difficulty": "0x0", "timestamp": "0x0",
            "alloc": {
                format!("{TO:x}"): { "balance": "0x5", "storage": {
                    "0x0000000000000000000000000000000000000000000000000000000000000001": "0x09",
                    "0x0000000000000000000000000000000000000000000000000000000000000002": "0x0a"
                }, "code": "0x00" }
            }
        });
        let genesis = moat_common::config::Genesis::from_json(&genesis.to_string()).unwrap();
        let chain = crate::chain::Chain::init(moat_storage::Store::in_memory(), &genesis).unwrap();
        let base = crate::history::StateAtBlock::head(chain.store().clone());
        let slot = |n: u8| B256::with_last_byte(n);
        let blocks = || {
            (1..=4u64).map(|n| {
                let mut overrides = funded(1_000);
                // Slot edits, then the whole storage replaced, then a deletion by a zero.
                overrides.insert(
                    TO,
                    SimOverride {
                        state_diff: (n == 1).then(|| BTreeMap::from([(slot(3), U256::from(4))])),
                        state: (n == 2).then(|| BTreeMap::from([(slot(7), U256::from(8))])),
                        ..Default::default()
                    },
                );
                if n == 4 {
                    overrides.insert(
                        TO,
                        SimOverride {
                            state_diff: Some(BTreeMap::from([(slot(7), U256::ZERO)])),
                            ..Default::default()
                        },
                    );
                }
                let mut h = header();
                h.number = n;
                h.timestamp = 12 * n;
                SimBlock {
                    header: h,
                    overrides,
                    calls: vec![transfer(n)],
                    ..Default::default()
                }
            })
        };
        let config = chain.config().clone();
        let mut whole = Simulator::new(&config, &base, false, false, 0);
        let mut stepwise = Simulator::new(&config, &base, false, false, 0).with_tries(&base);
        let mut roots = HashSet::new();
        for (a, b) in blocks().zip(blocks()) {
            let a = whole.simulate_block(a).unwrap().block.header.state_root;
            let b = stepwise.simulate_block(b).unwrap().block.header.state_root;
            assert_eq!(a, b);
            roots.insert(a);
        }
        assert_eq!(roots.len(), 4, "every block changed the state");
    }

    #[test]
    fn the_rpc_gas_cap_is_shared_by_all_calls() {
        let config = ChainConfig::all_forks_at_genesis(1, Fork::Cancun);
        let mem = Mem::default();
        let mut sim = Simulator::new(&config, &mem, false, false, 30_000);
        let block = || SimBlock {
            header: header(),
            overrides: funded(10),
            calls: vec![transfer(1)],
            ..Default::default()
        };
        sim.simulate_block(block()).unwrap();
        // 9,000 gas left: below a transfer's intrinsic gas.
        let mut next = block();
        next.header.number = 2;
        next.header.timestamp = 24;
        assert!(sim.simulate_block(next).is_err());
    }

    #[test]
    fn a_failed_frame_drops_its_logs_and_its_transfer() {
        let mut t = SimInspector {
            trace_transfers: true,
            ..Default::default()
        };
        let a = Address::repeat_byte(0xaa);
        let b = Address::repeat_byte(0xbb);
        t.frames.push(Vec::new());
        t.transfer(a, b, U256::from(5));
        t.frames.push(Vec::new());
        t.transfer(b, a, U256::from(1));
        t.exit(false);
        t.exit(true);
        let logs = t.take();
        assert_eq!(logs.len(), 1);
        assert_eq!(logs[0].0.address, TRANSFER_LOG_ADDRESS);
        assert_eq!(logs[0].0.topics()[1], a.into_word());
        // The dropped log still took index 1, as geth counts.
        assert_eq!(logs[0].1, 0);
        t.frames.push(Vec::new());
        t.transfer(a, b, U256::from(2));
        t.exit(true);
        assert_eq!(t.take()[0].1, 2);
    }

    #[test]
    fn a_reverted_transaction_keeps_no_logs() {
        let mut t = SimInspector {
            trace_transfers: true,
            ..Default::default()
        };
        t.frames.push(Vec::new());
        t.transfer(Address::ZERO, Address::repeat_byte(1), U256::from(1));
        t.exit(false);
        assert!(t.take().is_empty());
    }

    #[test]
    fn transfers_are_not_logged_unless_asked() {
        let mut t = SimInspector::default();
        t.frames.push(Vec::new());
        t.transfer(Address::ZERO, Address::repeat_byte(1), U256::from(1));
        t.exit(true);
        assert!(t.take().is_empty());
    }
}
