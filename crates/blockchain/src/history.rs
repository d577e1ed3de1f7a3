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

/// The state after one block: the store, plus what changed since.
#[derive(Debug, Clone)]
pub struct StateAtBlock {
    store: Store,
    /// Accounts as they were (`None`: absent).
    accounts: HashMap<Address, Option<Account>>,
    /// Slots as they were.
    slots: HashMap<(Address, B256), U256>,
    /// Accounts whose whole storage was, back then, exactly this list.
    storage: HashMap<Address, HashMap<B256, U256>>,
    /// Accounts that did not exist back then: no storage at all.
    absent: HashSet<Address>,
}

impl StateAtBlock {
    /// The head state itself.
    pub fn head(store: Store) -> Self {
        Self {
            store,
            accounts: HashMap::new(),
            slots: HashMap::new(),
            storage: HashMap::new(),
            absent: HashSet::new(),
        }
    }

    /// Lays one undo record over what is there (records must come newest first).
    fn apply(&mut self, undo: Undo) {
        for (address, old) in undo.accounts {
            if old.is_none() {
                self.absent.insert(address);
            } else {
                self.absent.remove(&address);
            }
            self.accounts.insert(address, old);
        }
        for (address, list) in undo.wiped {
            self.slots.retain(|(a, _), _| *a != address);
            self.storage.insert(address, list.into_iter().collect());
        }
        for (address, slot, old) in undo.slots {
            self.slots.insert((address, slot), old);
        }
    }

    pub fn account(&self, address: &Address) -> Result<Option<Account>, StoreError> {
        match self.accounts.get(address) {
            Some(old) => Ok(*old),
            None => self.store.account(address),
        }
    }

    pub fn storage(&self, address: &Address, slot: &B256) -> Result<U256, StoreError> {
        if let Some(v) = self.slots.get(&(*address, *slot)) {
            return Ok(*v);
        }
        if self.absent.contains(address) {
            return Ok(U256::ZERO);
        }
        if let Some(list) = self.storage.get(address) {
            return Ok(list.get(slot).copied().unwrap_or_default());
        }
        self.store.storage(address, slot)
    }

    pub fn code(&self, code_hash: &B256) -> Result<Option<Bytes>, StoreError> {
        self.store.code(code_hash)
    }
}

fn state_err(e: StoreError) -> VmError {
    VmError::State(e.to_string())
}

impl StateReader for StateAtBlock {
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
