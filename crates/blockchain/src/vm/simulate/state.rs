//! The simulated state: the base state with the simulation's changes laid over it, and
//! its tries for state roots block by block.

use crate::vm::{AccountChange, AccountInfo, StateReader, VmError};
use alloy_primitives::{Address, B256, Bytes, U256};
use std::collections::{HashMap, HashSet};

/// The base state with what the simulation changed laid over it.
pub struct SimState<'a> {
    pub(super) base: &'a dyn StateReader,
    pub(super) accounts: HashMap<Address, Option<AccountInfo>>,
    pub(super) slots: HashMap<(Address, B256), U256>,
    pub(super) wiped: HashSet<Address>,
    pub(super) codes: HashMap<B256, Bytes>,
    pub(super) hashes: HashMap<u64, B256>,
    /// Every change so far, in order: what the state root is computed from.
    pub(super) changes: Vec<AccountChange>,
    /// How many of `changes` the incremental tries have taken in.
    pub(super) rooted: usize,
}

impl<'a> SimState<'a> {
    /// An empty overlay over `base`, the state before the first simulated block.
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
pub(super) struct TrieOverlay<'a> {
    pub(super) base: &'a dyn BaseTries,
    pub(super) nodes: HashMap<(B256, Vec<u8>), Option<Vec<u8>>>,
    /// Tries emptied since the base: their base nodes are gone.
    pub(super) wiped: HashSet<B256>,
    pub(super) accounts: HashMap<Address, Option<moat_storage::Account>>,
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
    pub(super) fn apply(&mut self, changes: &[AccountChange]) -> Result<B256, VmError> {
        let previous = |address: &Address| match self.accounts.get(address) {
            Some(record) => Ok(*record),
            None => self.base.account_record(address),
        };
        let err = |e: moat_trie::TrieError| VmError::State(e.to_string());
        let update = crate::state_root::update_over(&*self, changes, previous, err)?;
        for owner in update.wiped_tries {
            self.nodes.retain(|(o, _), _| *o != owner);
            self.wiped.insert(owner);
        }
        for (owner, w) in update.trie_writes {
            self.nodes.insert((owner, w.path), w.node);
        }
        self.accounts.extend(update.accounts);
        Ok(update.root)
    }
}
