//! The state root of a block, from what the block changed: the stored account trie and
//! storage tries (moat-trie, nodes in the store's `trie_nodes` table) are updated along
//! the paths of the changed keys only.
//!
//! ```text
//!  AccountChange per address ─▶ storage trie of keccak(address): set / remove slots
//!                               (a wipe starts it empty) ─▶ storage root
//!                          ─▶ account trie: set / remove keccak(address) ─▶ state root
//! ```
//!
//! Reads are point reads: the account before the block, each changed slot before the
//! block (for the undo record), and the trie nodes on the changed paths. Only a storage
//! wipe (SELFDESTRUCT of an account with storage, or its deletion) reads the whole of
//! that account's storage and storage trie, to keep them in the undo record.
//!
//! [`StateUpdate::write`] puts everything in the block's own batch: flat accounts and
//! slots (written by the caller), trie nodes, wipes; a crash leaves all or nothing.

use crate::undo::Undo;
use crate::vm::AccountChange;
use alloy_primitives::{Address, B256, Bytes, U256, keccak256};
use alloy_trie::{EMPTY_ROOT_HASH, TrieAccount};
use moat_storage::{Account, Store, StoreError, WriteBatch};
use moat_trie::{NodeSource, Trie, TrieError, TrieWrite};

/// The account trie's owner.
pub const ACCOUNT_TRIE: B256 = B256::ZERO;

/// keccak256 of trie keys (addresses, storage slots), remembered: the same hot keys are
/// hashed block after block. Bounded; a key that fell out is simply hashed again.
fn remembered_keccak<K>(cache: &quick_cache::sync::Cache<K, B256>, key: &K) -> B256
where
    K: AsRef<[u8]> + Eq + std::hash::Hash + Clone,
{
    if let Some(h) = cache.get(key) {
        return h;
    }
    let h = keccak256(key.as_ref());
    cache.insert(key.clone(), h);
    h
}

pub fn hashed_slot(slot: &B256) -> B256 {
    static CACHE: std::sync::LazyLock<quick_cache::sync::Cache<B256, B256>> =
        std::sync::LazyLock::new(|| quick_cache::sync::Cache::new(1 << 18));
    remembered_keccak(&CACHE, slot)
}

pub fn hashed_address(address: &Address) -> B256 {
    static CACHE: std::sync::LazyLock<quick_cache::sync::Cache<Address, B256>> =
        std::sync::LazyLock::new(|| quick_cache::sync::Cache::new(1 << 16));
    remembered_keccak(&CACHE, address)
}

/// The store as the trie's node source.
pub struct StoreNodes<'a>(pub &'a Store);

impl NodeSource for StoreNodes<'_> {
    fn node(&self, owner: &B256, path: &[u8]) -> Result<Option<Vec<u8>>, TrieError> {
        self.0
            .trie_node(owner, path)
            .map_err(|e| TrieError::Source(e.to_string()))
    }
}

pub(crate) fn trie_err(e: TrieError) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

/// The root of the stored account trie: the state root of the head when the store is
/// consistent.
pub fn stored_state_root(store: &Store) -> Result<B256, StoreError> {
    moat_trie::root(&StoreNodes(store), &ACCOUNT_TRIE).map_err(trie_err)
}

/// The leaf of an account in the account trie.
pub fn account_leaf(account: &Account) -> Vec<u8> {
    alloy_rlp::encode(TrieAccount {
        nonce: account.nonce,
        balance: account.balance,
        storage_root: account.storage_root,
        code_hash: account.code_hash,
    })
}

/// The account an account-trie leaf holds.
fn decode_account_leaf(owner: &B256, mut raw: &[u8]) -> Result<Account, TrieError> {
    let a = <TrieAccount as alloy_rlp::Decodable>::decode(&mut raw).map_err(|_| {
        TrieError::Corrupt {
            owner: ACCOUNT_TRIE,
            path: owner.to_string(),
            reason: "undecodable account leaf",
        }
    })?;
    Ok(Account {
        nonce: a.nonce,
        balance: a.balance,
        code_hash: a.code_hash,
        storage_root: a.storage_root,
    })
}

/// The value a storage-trie leaf holds.
fn decode_slot_leaf(owner: &B256, mut raw: &[u8]) -> Result<U256, StoreError> {
    <U256 as alloy_rlp::Decodable>::decode(&mut raw).map_err(|_| {
        StoreError::Corrupt(format!(
            "undecodable storage leaf in the storage trie of {owner}"
        ))
    })
}

/// The leaf of a (non-zero) storage value.
pub fn slot_leaf(value: &U256) -> Vec<u8> {
    alloy_rlp::encode(value)
}

/// One account of a whole state: its address, record, slots and code.
pub type StateEntry = (Address, Account, Vec<(B256, U256)>, Bytes);

/// Accounts to write after a block: `None` deletes.
pub type AccountUpdates = Vec<(Address, Option<Account>)>;

/// What a block's changes do to the state: the root, the account records, the trie
/// writes and wipes, and the undo record of all of it.
#[derive(Debug, Default)]
pub struct StateUpdate {
    pub root: B256,
    pub accounts: AccountUpdates,
    pub undo: Undo,
    /// Tries dropped before the writes (storage of wiped or deleted accounts).
    pub wiped_tries: Vec<B256>,
    /// The trie nodes to write (`old` is left empty: the undo record holds it).
    pub trie_writes: Vec<(B256, TrieWrite)>,
}

impl StateUpdate {
    /// Adds the trie wipes and node writes to `batch` (accounts and slots are the
    /// caller's: it holds the block's changes).
    pub fn write_trie(&self, batch: &mut WriteBatch) {
        for owner in &self.wiped_tries {
            batch.wipe_trie(*owner);
        }
        for (owner, w) in &self.trie_writes {
            batch.set_trie_node(*owner, w.path.clone(), w.node.clone());
        }
    }
}

/// The state root after applying `changes` to the state in `store`, with the account
/// records (new storage roots included) to write.
pub fn state_root_after(
    store: &Store,
    changes: &[AccountChange],
) -> Result<(B256, AccountUpdates), StoreError> {
    state_update(store, changes).map(|u| (u.root, u.accounts))
}

/// Everything applying `changes` (one block's) to the state in `store` writes.
pub fn state_update(store: &Store, changes: &[AccountChange]) -> Result<StateUpdate, StoreError> {
    let source = StoreNodes(store);
    let mut update = StateUpdate::default();
    let grouped = crate::vm::group_by_address(changes);
    let mut accounts = Trie::new(&source, ACCOUNT_TRIE);
    for (address, list) in grouped {
        let owner = hashed_address(&address);
        let last = list.last().expect("grouped changes are not empty");
        let deleted = last.info.is_none();
        let wiped = deleted || list.iter().any(|c| c.storage_wiped);
        // What the block overwrites (for the undo record) comes from the trie leaves on
        // the paths the update walks anyway; the flat state is read only for a wiped
        // storage (all of it goes into the undo record) and for a slot changed twice in
        // the list (its second old value would be the first new one).
        let mut previous = None;
        if wiped {
            previous = store.account(&address)?;
            let had_storage = previous.is_some_and(|p| p.storage_root != EMPTY_ROOT_HASH);
            // The whole old storage and storage trie go into the undo record (taking the
            // block back wipes what it wrote, then restores them).
            let (slots, nodes) = if had_storage {
                (store.storage_slots(&address)?, store.trie_nodes_of(&owner)?)
            } else {
                (Vec::new(), Vec::new())
            };
            update.undo.wiped.push((address, slots));
            update.undo.wiped_tries.push((owner, nodes));
            if had_storage {
                update.wiped_tries.push(owner);
            }
        }
        let Some(info) = last.info else {
            accounts.remove(&owner).map_err(trie_err)?;
            update.undo.accounts.push((address, previous));
            update.accounts.push((address, None));
            continue;
        };
        let mut storage = if wiped {
            Trie::wiped(&source, owner)
        } else {
            Trie::new(&source, owner)
        };
        let mut storage_changed = wiped;
        let single = list.len() == 1;
        for change in list {
            if change.storage_wiped {
                storage = Trie::wiped(&source, owner);
            }
            for (slot, value) in &change.storage {
                let key = hashed_slot(slot);
                let old = if value.is_zero() {
                    storage.remove(&key).map_err(trie_err)?
                } else {
                    storage.insert(&key, slot_leaf(value)).map_err(trie_err)?
                };
                if !wiped {
                    let before = if single {
                        old.map_or(Ok(U256::ZERO), |raw| decode_slot_leaf(&owner, &raw))?
                    } else {
                        store.storage(&address, slot)?
                    };
                    update.undo.slots.push((address, *slot, before));
                }
                storage_changed = true;
            }
        }
        let new_storage_root = if storage_changed {
            let commit = storage.commit().map_err(trie_err)?;
            for mut w in commit.writes {
                // The old node goes to the undo record (moved, not copied).
                let old = w.old.take();
                if !wiped {
                    update.undo.trie.push((owner, w.path.clone(), old));
                }
                update.trie_writes.push((owner, w));
            }
            Some(commit.root)
        } else {
            None
        };
        let mut written = None;
        let mut from_leaf = None;
        accounts
            .insert_with(&owner, |old| {
                let before = old
                    .map(|raw| decode_account_leaf(&owner, raw))
                    .transpose()?;
                let storage_root = new_storage_root
                    .unwrap_or_else(|| before.map_or(EMPTY_ROOT_HASH, |p| p.storage_root));
                let account = Account {
                    nonce: info.nonce,
                    balance: info.balance,
                    code_hash: info.code_hash,
                    storage_root,
                };
                from_leaf = before;
                written = Some(account);
                Ok(account_leaf(&account))
            })
            .map_err(trie_err)?;
        let account = written.expect("insert_with calls its closure once it returns Ok");
        update
            .undo
            .accounts
            .push((address, if wiped { previous } else { from_leaf }));
        update.accounts.push((address, Some(account)));
    }
    let commit = accounts.commit().map_err(trie_err)?;
    for mut w in commit.writes {
        let old = w.old.take();
        update.undo.trie.push((ACCOUNT_TRIE, w.path.clone(), old));
        update.trie_writes.push((ACCOUNT_TRIE, w));
    }
    update.root = commit.root;
    Ok(update)
}

/// The nodes of `address`'s storage trie built from nothing over `slots`, checked against
/// the storage root its account record claims.
fn fresh_storage_trie(
    source: &StoreNodes<'_>,
    address: &Address,
    account: &Account,
    slots: &[(B256, U256)],
) -> Result<Vec<TrieWrite>, StoreError> {
    let mut storage = Trie::wiped(source, hashed_address(address));
    for (slot, value) in slots {
        if !value.is_zero() {
            storage
                .insert(&hashed_slot(slot), slot_leaf(value))
                .map_err(trie_err)?;
        }
    }
    let commit = storage.commit().map_err(trie_err)?;
    if commit.root != account.storage_root {
        return Err(StoreError::Corrupt(format!(
            "storage of {address}: its slots hash to {}, its account says {}",
            commit.root, account.storage_root
        )));
    }
    Ok(commit.writes)
}

/// Writes a whole state (a genesis allocation) into an empty chain: accounts, code, slots
/// and their tries, in commits of `chunk` accounts each
/// ([`crate::genesis_state::GenesisStateWriter`], leaves kept in memory). Each record's
/// storage root and code hash are checked against its slots and code. Returns the state
/// root. The caller commits the block that makes this state a chain's only after it
/// returns.
pub fn write_state_in_chunks(
    store: &Store,
    accounts: impl IntoIterator<Item = StateEntry>,
    chunk: usize,
) -> Result<B256, StoreError> {
    let mut writer = crate::genesis_state::GenesisStateWriter::new(store, chunk, None)?;
    for (address, account, slots, code) in accounts {
        let written = writer.add(address, account.nonce, account.balance, code, &slots)?;
        if written != account {
            return Err(StoreError::Corrupt(format!(
                "account {address}: its slots and code give {written:?}, its record says {account:?}"
            )));
        }
    }
    writer.finish()
}

/// Builds the tries of a whole state from scratch (a genesis, or a datadir whose flat
/// state has no trie yet) into `batch`; returns the state root. Each account's storage
/// root is checked against the one its record claims.
pub fn build_tries(
    store: &Store,
    accounts: impl IntoIterator<Item = (Address, Account, Vec<(B256, U256)>)>,
    batch: &mut WriteBatch,
) -> Result<B256, StoreError> {
    let source = StoreNodes(store);
    let mut trie = Trie::new(&source, ACCOUNT_TRIE);
    for (address, account, slots) in accounts {
        let owner = hashed_address(&address);
        if !slots.is_empty() {
            batch.wipe_trie(owner);
            for w in fresh_storage_trie(&source, &address, &account, &slots)? {
                batch.set_trie_node(owner, w.path, w.node);
            }
        }
        trie.insert(&owner, account_leaf(&account))
            .map_err(trie_err)?;
    }
    let commit = trie.commit().map_err(trie_err)?;
    for w in commit.writes {
        batch.set_trie_node(ACCOUNT_TRIE, w.path, w.node);
    }
    Ok(commit.root)
}

/// An EIP-1186 proof of one account and some of its slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountProof {
    pub address: Address,
    /// `None`: the account does not exist (the proof shows its absence).
    pub account: Option<Account>,
    /// Account trie nodes from the root towards keccak(address).
    pub proof: Vec<Vec<u8>>,
    pub storage: Vec<SlotProof>,
}

/// A slot's value (zero when absent) and the storage trie nodes towards keccak(slot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotProof {
    pub slot: B256,
    pub value: U256,
    pub proof: Vec<Vec<u8>>,
}

/// Proves `address` and its `slots` in `state` (the head's, or a recent block's).
pub fn prove(
    state: &crate::history::StateAtBlock,
    address: &Address,
    slots: &[B256],
) -> Result<AccountProof, StoreError> {
    let owner = hashed_address(address);
    let account = state.account(address)?;
    let proof = moat_trie::proof(state, &ACCOUNT_TRIE, &owner).map_err(trie_err)?;
    let has_storage = account.is_some_and(|a| a.storage_root != EMPTY_ROOT_HASH);
    let mut storage = Vec::with_capacity(slots.len());
    for slot in slots {
        let (value, proof) = if has_storage {
            let proof = moat_trie::proof(state, &owner, &hashed_slot(slot)).map_err(trie_err)?;
            (state.storage(address, slot)?, proof)
        } else {
            (U256::ZERO, Vec::new())
        };
        storage.push(SlotProof {
            slot: *slot,
            value,
            proof,
        });
    }
    Ok(AccountProof {
        address: *address,
        account,
        proof,
        storage,
    })
}
