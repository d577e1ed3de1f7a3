//! State as it was after a recent block, read through the undo records.
//!
//! The store holds the head state only. The state after canonical block `n` (at most
//! [`UNDO_DEPTH`] below the head) is the head state with the undo records of blocks
//! `n + 1 ..= head` laid over it: walking from the head down, each record says what an
//! account or slot held before its block, and the oldest record for a key wins.

use crate::chain::{Chain, ChainError};
use crate::undo::{UNDO_DEPTH, Undo};
use crate::vm::{AccountInfo, StateReader, VmError};
use alloy_primitives::{Address, B256, Bytes, U256};
use moat_storage::{Account, Store, StoreError};
use std::collections::{HashMap, HashSet};

/// The state after one block: the store, plus what changed since. With no overlay it
/// is the head state itself: the one adapter execution reads state through, for block
/// import, payload building and calls alike.
#[derive(Debug, Clone)]
pub struct StateAtBlock {
    store: Store,
    overlay: Option<Box<Overlay>>,
}

/// What the blocks above a recent one changed, as it was before them.
#[derive(Debug, Clone, Default)]
struct Overlay {
    /// Accounts as they were (`None`: absent).
    accounts: HashMap<Address, Option<Account>>,
    /// Slots as they were.
    slots: HashMap<(Address, B256), U256>,
    /// Accounts whose whole storage was, back then, exactly this list.
    storage: HashMap<Address, HashMap<B256, U256>>,
    /// Accounts that did not exist back then: no storage at all.
    absent: HashSet<Address>,
    /// Trie nodes as they were (`None`: absent), by owner and path.
    nodes: HashMap<(B256, Vec<u8>), Option<Vec<u8>>>,
    /// Tries that were, back then, exactly these nodes.
    tries: HashMap<B256, HashMap<Vec<u8>, Vec<u8>>>,
}

impl StateAtBlock {
    /// The head state itself.
    pub fn head(store: Store) -> Self {
        Self {
            store,
            overlay: None,
        }
    }

    /// Lays one undo record over what is there (records must come newest first).
    fn apply(&mut self, undo: Undo) {
        let o = self.overlay.get_or_insert_with(Box::default);
        for (address, old) in undo.accounts {
            if old.is_none() {
                o.absent.insert(address);
            } else {
                o.absent.remove(&address);
            }
            o.accounts.insert(address, old);
        }
        for (address, list) in undo.wiped {
            o.slots.retain(|(a, _), _| *a != address);
            o.storage.insert(address, list.into_iter().collect());
        }
        for (address, slot, old) in undo.slots {
            o.slots.insert((address, slot), old);
        }
        for (owner, list) in &undo.wiped_tries {
            o.nodes.retain(|(w, _), _| w != owner);
            o.tries.insert(*owner, list.iter().cloned().collect());
        }
        for (owner, path, old) in undo.trie {
            // A wiped trie's nodes come whole from its list.
            if !undo.wiped_tries.iter().any(|(w, _)| *w == owner) {
                o.nodes.insert((owner, path), old);
            }
        }
    }

    /// The trie node at `path` of trie `owner` as it was.
    pub fn trie_node(&self, owner: &B256, path: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some(o) = &self.overlay {
            if let Some(old) = o.nodes.get(&(*owner, path.to_vec())) {
                return Ok(old.clone());
            }
            if let Some(trie) = o.tries.get(owner) {
                return Ok(trie.get(path).cloned());
            }
        }
        self.store.trie_node(owner, path)
    }

    pub fn account(&self, address: &Address) -> Result<Option<Account>, StoreError> {
        if let Some(old) = self.overlay.as_ref().and_then(|o| o.accounts.get(address)) {
            return Ok(*old);
        }
        self.store.account(address)
    }

    pub fn storage(&self, address: &Address, slot: &B256) -> Result<U256, StoreError> {
        let Some(o) = &self.overlay else {
            return self.store.storage(address, slot);
        };
        if let Some(v) = o.slots.get(&(*address, *slot)) {
            return Ok(*v);
        }
        if o.absent.contains(address) {
            return Ok(U256::ZERO);
        }
        if let Some(list) = o.storage.get(address) {
            return Ok(list.get(slot).copied().unwrap_or_default());
        }
        self.store.storage(address, slot)
    }

    pub fn code(&self, code_hash: &B256) -> Result<Option<Bytes>, StoreError> {
        self.store.code(code_hash)
    }
}

impl StateAtBlock {
    /// The state root of this (past) state with `changes` applied, read through the
    /// overlay; nothing is written. Changes of one address apply in order.
    fn root_over_overlay(&self, changes: &[crate::vm::AccountChange]) -> Result<B256, StoreError> {
        use crate::state_root::{
            ACCOUNT_TRIE, account_leaf, hashed_address, hashed_slot, slot_leaf,
        };
        use alloy_trie::EMPTY_ROOT_HASH;
        use moat_trie::Trie;
        let err = |e: moat_trie::TrieError| StoreError::Corrupt(e.to_string());
        let grouped = crate::vm::group_by_address(changes);
        let mut accounts = Trie::new(self, ACCOUNT_TRIE);
        for (address, list) in grouped {
            let owner = hashed_address(&address);
            let Some(last) = list.last() else { continue };
            let Some(info) = last.info else {
                accounts.remove(&owner).map_err(err)?;
                continue;
            };
            let previous = StateAtBlock::account(self, &address)?;
            // Storage starts over from the last wipe or deletion.
            let start = list
                .iter()
                .rposition(|c| c.storage_wiped || c.info.is_none());
            let mut storage = match start {
                Some(_) => Trie::wiped(self, owner),
                None => Trie::new(self, owner),
            };
            let mut changed = start.is_some();
            for change in &list[start.unwrap_or(0)..] {
                if change.info.is_none() {
                    continue;
                }
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
            let storage_root = if changed {
                storage.commit().map_err(err)?.root
            } else {
                previous.map_or(EMPTY_ROOT_HASH, |p| p.storage_root)
            };
            let account = Account {
                nonce: info.nonce,
                balance: info.balance,
                code_hash: info.code_hash,
                storage_root,
            };
            accounts
                .insert(&owner, account_leaf(&account))
                .map_err(err)?;
        }
        Ok(accounts.commit().map_err(err)?.root)
    }
}

fn state_err(e: StoreError) -> VmError {
    VmError::State(e.to_string())
}

impl StateReader for StateAtBlock {
    fn state_root_with(
        &self,
        changes: &[crate::vm::AccountChange],
    ) -> Result<Option<B256>, VmError> {
        // The head state has its tries in the store as they are; an older state reads
        // its trie nodes and accounts through the overlay.
        if self.overlay.is_none() {
            return crate::state_root::state_root_after(&self.store, changes)
                .map(|(root, _)| Some(root))
                .map_err(state_err);
        }
        self.root_over_overlay(changes).map(Some).map_err(state_err)
    }

    fn account(&self, address: &Address) -> Result<Option<AccountInfo>, VmError> {
        Ok(StateAtBlock::account(self, address)
            .map_err(state_err)?
            .map(|a| AccountInfo {
                nonce: a.nonce,
                balance: a.balance,
                code_hash: a.code_hash,
            }))
    }

    fn storage(&self, address: &Address, slot: &B256) -> Result<U256, VmError> {
        StateAtBlock::storage(self, address, slot).map_err(state_err)
    }

    fn code(&self, code_hash: &B256) -> Result<Option<Bytes>, VmError> {
        StateAtBlock::code(self, code_hash).map_err(state_err)
    }

    fn block_hash(&self, number: u64) -> Result<B256, VmError> {
        Ok(self
            .store
            .canonical_hash(number)
            .map_err(state_err)?
            .unwrap_or_default())
    }
}

impl Chain {
    /// The state after canonical block `number`: the head's, or one up to
    /// [`UNDO_DEPTH`] blocks back. Older state is gone ([`ChainError::HistoryUnavailable`]).
    pub fn state_at(&self, number: u64) -> Result<StateAtBlock, ChainError> {
        let (head, _) = self.head()?;
        let mut state = StateAtBlock::head(self.store().clone());
        if number >= head {
            return Ok(state);
        }
        if head - number > UNDO_DEPTH {
            return Err(ChainError::HistoryUnavailable { number, head });
        }
        for n in (number + 1..=head).rev() {
            let hash = self
                .store()
                .canonical_hash(n)?
                .ok_or_else(|| ChainError::Corrupt(format!("no canonical block {n}")))?;
            let record = self
                .store()
                .undo(&hash)?
                .ok_or(ChainError::HistoryUnavailable { number, head })?;
            let undo = Undo::decode(&record)
                .map_err(|e| ChainError::Corrupt(format!("undo record of {hash}: {e}")))?;
            state.apply(undo);
        }
        Ok(state)
    }
}

impl moat_trie::NodeSource for StateAtBlock {
    fn node(&self, owner: &B256, path: &[u8]) -> Result<Option<Vec<u8>>, moat_trie::TrieError> {
        self.trie_node(owner, path)
            .map_err(|e| moat_trie::TrieError::Source(e.to_string()))
    }
}
