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
//! A block of many accounts is computed on several threads (the account trie's 16
//! top-level subtries, each with its accounts' storage tries, as tasks; see
//! [`state_update`]), with the single-threaded result.
//!
//! [`StateUpdate::write`] puts everything in the block's own batch: flat accounts and
//! slots (written by the caller), trie nodes, wipes; a crash leaves all or nothing.

use crate::undo::Undo;
use crate::vm::AccountChange;
use alloy_primitives::{Address, B256, Bytes, U256, keccak256};
use alloy_trie::{EMPTY_ROOT_HASH, TrieAccount};
use moat_storage::{Account, Store, StoreError, TrieNode, WriteBatch};
use moat_trie::subtrie::{RootBranch, Subtrie, SubtrieCommit};
use moat_trie::{Expected, NodeSource, Trie, TrieError, TrieWrite};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

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

/// keccak256 of a storage slot key: its path in the storage trie (cached).
pub fn hashed_slot(slot: &B256) -> B256 {
    static CACHE: std::sync::LazyLock<quick_cache::sync::Cache<B256, B256>> =
        std::sync::LazyLock::new(|| quick_cache::sync::Cache::new(1 << 18));
    remembered_keccak(&CACHE, slot)
}

/// keccak256 of an address: its path in the account trie (cached).
pub fn hashed_address(address: &Address) -> B256 {
    static CACHE: std::sync::LazyLock<quick_cache::sync::Cache<Address, B256>> =
        std::sync::LazyLock::new(|| quick_cache::sync::Cache::new(1 << 16));
    remembered_keccak(&CACHE, address)
}

/// Reads the nodes on the path to `address` in the account trie and, with `slot`, on
/// the path to it in the account's storage trie, checking each against its parent as the
/// state root does, so that the store's node cache holds them when the root is computed
/// (as go-ethereum's trie prefetcher does beside execution). Errors are left for the
/// state root to meet.
pub fn warm_path(store: &Store, address: &Address, slot: Option<&B256>) {
    let nodes = StoreNodes(store);
    let owner = hashed_address(address);
    match slot {
        None => drop(moat_trie::proof(&nodes, &ACCOUNT_TRIE, &owner)),
        Some(slot) => drop(moat_trie::proof(&nodes, &owner, &hashed_slot(slot))),
    }
}

/// The store as the trie's node source.
pub struct StoreNodes<'a>(pub &'a Store);

impl NodeSource for StoreNodes<'_> {
    fn node(&self, owner: &B256, path: &[u8]) -> Result<Option<Vec<u8>>, TrieError> {
        self.0
            .trie_node(owner, path)
            .map_err(|e| TrieError::Source(e.to_string()))
    }

    /// Nodes from the database are hashed against their parent's reference; the node
    /// cache holds only nodes that passed (or that a commit wrote), and answers unhashed.
    fn node_expected(
        &self,
        owner: &B256,
        path: &[u8],
        expected: Expected<'_>,
    ) -> Result<Vec<u8>, TrieError> {
        let found = self
            .0
            .trie_node_checked(owner, path, |rlp| expected.matches(rlp))
            .map_err(|e| TrieError::Source(e.to_string()))?;
        match found {
            Ok(rlp) => Ok(rlp),
            Err(Some(rlp)) => expected.check(owner, path, &rlp).map(|()| rlp),
            Err(None) => Err(TrieError::missing(owner, path)),
        }
    }
}

/// A trie node that is not what its parent names is damage; a source that could not be
/// read (the database failing) is not.
pub(crate) fn trie_err(e: TrieError) -> StoreError {
    match e {
        TrieError::Corrupt { .. } => StoreError::Corrupt(e.to_string()),
        TrieError::Source(why) => StoreError::Db(why),
    }
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
    /// The state root after the block.
    pub root: B256,
    /// The accounts to write to the flat state (`None` deletes).
    pub accounts: AccountUpdates,
    /// What the block overwrote, to take it back in a reorg.
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

/// What applying changes to tries read from a [`NodeSource`] gives; nothing is written.
#[derive(Debug, Default)]
pub(crate) struct OverlayUpdate {
    pub root: B256,
    /// Tries emptied (storage of wiped or deleted accounts), to drop before `writes`.
    pub wiped_tries: Vec<B256>,
    /// The trie nodes written, storage tries' and the account trie's.
    pub trie_writes: Vec<(B256, TrieWrite)>,
    /// The account records after the changes: `None` deletes.
    pub accounts: AccountUpdates,
}

/// Applies `changes` (in order, several per address allowed) to the account trie and
/// storage tries of `source`, nothing stored and no undo record: the state root of a
/// past state or of a simulated one. `previous` is an account's record before the
/// changes (its storage root is kept when its storage is not changed).
pub(crate) fn update_over<S: NodeSource + ?Sized, E>(
    source: &S,
    changes: &[AccountChange],
    previous: impl Fn(&Address) -> Result<Option<Account>, E>,
    err: impl Fn(TrieError) -> E,
) -> Result<OverlayUpdate, E> {
    let mut out = OverlayUpdate::default();
    let mut accounts = Trie::new(source, ACCOUNT_TRIE);
    for (address, list) in crate::vm::group_by_address(changes) {
        let owner = hashed_address(&address);
        let Some(last) = list.last() else { continue };
        let Some(info) = last.info else {
            accounts.remove(&owner).map_err(&err)?;
            out.wiped_tries.push(owner);
            out.accounts.push((address, None));
            continue;
        };
        let before = previous(&address)?;
        // Storage starts over from the last wipe or deletion.
        let start = list
            .iter()
            .rposition(|c| c.storage_wiped || c.info.is_none());
        let mut storage = match start {
            Some(_) => Trie::wiped(source, owner),
            None => Trie::new(source, owner),
        };
        let mut changed = start.is_some();
        for change in &list[start.unwrap_or(0)..] {
            if change.info.is_none() {
                continue;
            }
            for (slot, value) in &change.storage {
                let key = hashed_slot(slot);
                if value.is_zero() {
                    storage.remove(&key).map_err(&err)?;
                } else {
                    storage.insert(&key, slot_leaf(value)).map_err(&err)?;
                }
                changed = true;
            }
        }
        if start.is_some() {
            out.wiped_tries.push(owner);
        }
        let storage_root = if changed {
            let commit = storage.commit().map_err(&err)?;
            out.trie_writes
                .extend(commit.writes.into_iter().map(|w| (owner, w)));
            commit.root
        } else {
            before.map_or(EMPTY_ROOT_HASH, |p| p.storage_root)
        };
        let account = Account {
            nonce: info.nonce,
            balance: info.balance,
            code_hash: info.code_hash,
            storage_root,
        };
        accounts
            .insert(&owner, account_leaf(&account))
            .map_err(&err)?;
        out.accounts.push((address, Some(account)));
    }
    let commit = accounts.commit().map_err(&err)?;
    out.trie_writes
        .extend(commit.writes.into_iter().map(|w| (ACCOUNT_TRIE, w)));
    out.root = commit.root;
    Ok(out)
}

/// Worker threads of the state-root update (0: one per available core, at most 16).
static WORKERS: AtomicUsize = AtomicUsize::new(0);

/// Below this many changed accounts a block's state root is computed on the calling
/// thread alone: starting workers costs more than they save.
pub const PARALLEL_MIN_ACCOUNTS: usize = 64;

/// Sets how many threads compute a block's state root (the node's
/// `--state-root-workers`): 0 for one per available core; 1 for the calling thread only.
/// At most 16 are used (one per top-level subtrie).
pub fn set_state_root_workers(n: usize) {
    WORKERS.store(n, Ordering::Relaxed);
}

/// The threads a block's state root uses (the calling thread included).
pub fn state_root_workers() -> usize {
    match WORKERS.load(Ordering::Relaxed) {
        0 => crate::cores(),
        n => n,
    }
    .clamp(1, 16)
}

/// The account trie's side of one account's update: the whole trie, or the subtrie of
/// the account's first nibble.
trait AccountTrie {
    fn remove(&mut self, key: &B256) -> Result<Option<Vec<u8>>, TrieError>;
    fn insert_with(
        &mut self,
        key: &B256,
        value: impl FnOnce(Option<&[u8]>) -> Result<Vec<u8>, TrieError>,
    ) -> Result<Option<Vec<u8>>, TrieError>;
}

impl<S: NodeSource + ?Sized> AccountTrie for Trie<'_, S> {
    fn remove(&mut self, key: &B256) -> Result<Option<Vec<u8>>, TrieError> {
        Trie::remove(self, key)
    }
    fn insert_with(
        &mut self,
        key: &B256,
        value: impl FnOnce(Option<&[u8]>) -> Result<Vec<u8>, TrieError>,
    ) -> Result<Option<Vec<u8>>, TrieError> {
        Trie::insert_with(self, key, value)
    }
}

impl<S: NodeSource + ?Sized> AccountTrie for Subtrie<'_, S> {
    fn remove(&mut self, key: &B256) -> Result<Option<Vec<u8>>, TrieError> {
        Subtrie::remove(self, key)
    }
    fn insert_with(
        &mut self,
        key: &B256,
        value: impl FnOnce(Option<&[u8]>) -> Result<Vec<u8>, TrieError>,
    ) -> Result<Option<Vec<u8>>, TrieError> {
        Subtrie::insert_with(self, key, value)
    }
}

/// A dropped storage: the undo record's slots and trie nodes, and the trie to drop if it
/// held anything.
type Wiped = (
    (Address, Vec<(B256, U256)>),
    (B256, Vec<TrieNode>),
    Option<B256>,
);

/// What one account's changes add to a [`StateUpdate`], appended in the block's account
/// order whichever thread computed it.
#[derive(Default)]
struct AccountOutcome {
    /// Set when the account's storage was dropped: (undo.wiped, undo.wiped_tries, and
    /// the trie to drop if it held anything).
    wiped: Option<Wiped>,
    slots: Vec<(Address, B256, U256)>,
    /// The storage trie's writes, with their old nodes for the undo record (none when
    /// the trie was wiped: the wiped trie's nodes are in the record whole).
    storage_writes: Vec<TrieWrite>,
    keep_storage_undo: bool,
    undo_account: Option<(Address, Option<Account>)>,
    account: Option<(Address, Option<Account>)>,
}

impl AccountOutcome {
    fn append_to(self, owner: B256, update: &mut StateUpdate) {
        if let Some((wiped, wiped_trie, drop)) = self.wiped {
            update.undo.wiped.push(wiped);
            update.undo.wiped_tries.push(wiped_trie);
            update.wiped_tries.extend(drop);
        }
        update.undo.slots.extend(self.slots);
        for mut w in self.storage_writes {
            // The old node goes to the undo record (moved, not copied).
            let old = w.old.take();
            if self.keep_storage_undo {
                update.undo.trie.push((owner, w.path.clone(), old));
            }
            update.trie_writes.push((owner, w));
        }
        update.undo.accounts.extend(self.undo_account);
        update.accounts.extend(self.account);
    }
}

/// One account's changes: its storage trie updated and committed, its leaf set or
/// removed in `accounts`.
fn update_account(
    store: &Store,
    source: &StoreNodes<'_>,
    address: Address,
    owner: B256,
    list: &[&AccountChange],
    accounts: &mut impl AccountTrie,
) -> Result<AccountOutcome, StoreError> {
    let mut out = AccountOutcome::default();
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
        out.wiped = Some((
            (address, slots),
            (owner, nodes),
            had_storage.then_some(owner),
        ));
    }
    let Some(info) = last.info else {
        accounts.remove(&owner).map_err(trie_err)?;
        out.undo_account = Some((address, previous));
        out.account = Some((address, None));
        return Ok(out);
    };
    let mut storage = if wiped {
        Trie::wiped(source, owner)
    } else {
        Trie::new(source, owner)
    };
    let mut storage_changed = wiped;
    let single = list.len() == 1;
    for change in list {
        if change.storage_wiped {
            storage = Trie::wiped(source, owner);
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
                out.slots.push((address, *slot, before));
            }
            storage_changed = true;
        }
    }
    // The storage trie's root as read, checked below against the storage root the
    // account's leaf names (the account trie checks that leaf against its parents).
    let storage_root_read = if wiped { None } else { storage.original_root() };
    let new_storage_root = if storage_changed {
        let commit = storage.commit().map_err(trie_err)?;
        out.storage_writes = commit.writes;
        out.keep_storage_undo = !wiped;
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
            if let Some(read) = storage_root_read
                && read != before.map_or(EMPTY_ROOT_HASH, |p| p.storage_root)
            {
                return Err(TrieError::Corrupt {
                    owner,
                    path: String::new(),
                    reason: "the storage trie's root is not the one its account names",
                });
            }
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
    out.undo_account = Some((address, if wiped { previous } else { from_leaf }));
    out.account = Some((address, Some(account)));
    Ok(out)
}

/// Everything applying `changes` (one block's) to the state in `store` writes.
///
/// A block of at least [`PARALLEL_MIN_ACCOUNTS`] accounts over an account trie whose
/// root is a branch is computed on [`state_root_workers`] threads: the accounts are
/// split by the first nibble of their hashed address, each of the 16 top-level subtries
/// (its accounts' storage tries included) is updated and hashed by one worker, and the
/// root branch is put together from their references. The result (root, records, trie
/// writes, undo record, and their order) is the same as on one thread.
pub fn state_update(store: &Store, changes: &[AccountChange]) -> Result<StateUpdate, StoreError> {
    state_update_with_workers(store, changes, state_root_workers())
}

/// [`state_update`] on at most `workers` threads (1: the calling thread alone).
pub fn state_update_with_workers(
    store: &Store,
    changes: &[AccountChange],
    workers: usize,
) -> Result<StateUpdate, StoreError> {
    let grouped = crate::vm::group_by_address(changes);
    let owners: Vec<B256> = grouped.iter().map(|(a, _)| hashed_address(a)).collect();
    let workers = workers.clamp(1, 16);
    if workers > 1
        && grouped.len() >= PARALLEL_MIN_ACCOUNTS
        && let Some(update) = parallel_update(store, &grouped, &owners, workers)?
    {
        return Ok(update);
    }
    sequential_update(store, &grouped, &owners)
}

type Grouped<'c> = [(Address, Vec<&'c AccountChange>)];

/// The state root of the head block, which the stored account trie must hash to
/// (`None` for a store with no head yet).
pub fn head_state_root(store: &Store) -> Result<Option<B256>, StoreError> {
    let Some((_, head)) = store.head()? else {
        return Ok(None);
    };
    let Some(raw) = store.header_rlp(&head)? else {
        return Err(StoreError::Corrupt(format!("head header {head} missing")));
    };
    moat_common::block::Header::decode(&mut raw.as_slice())
        .map(|h| Some(h.state_root))
        .map_err(|e| StoreError::Corrupt(format!("head header {head}: {e}")))
}

fn sequential_update(
    store: &Store,
    grouped: &Grouped<'_>,
    owners: &[B256],
) -> Result<StateUpdate, StoreError> {
    let source = StoreNodes(store);
    let mut update = StateUpdate::default();
    let mut accounts = Trie::new(&source, ACCOUNT_TRIE);
    if let Some(root) = head_state_root(store)? {
        accounts = accounts.with_root(root);
    }
    for ((address, list), owner) in grouped.iter().zip(owners) {
        update_account(store, &source, *address, *owner, list, &mut accounts)?
            .append_to(*owner, &mut update);
    }
    let commit = accounts.commit().map_err(trie_err)?;
    finish(&mut update, commit);
    Ok(update)
}

/// The account trie's writes into the update and its undo record.
fn finish(update: &mut StateUpdate, commit: moat_trie::TrieCommit) {
    for mut w in commit.writes {
        let old = w.old.take();
        update.undo.trie.push((ACCOUNT_TRIE, w.path.clone(), old));
        update.trie_writes.push((ACCOUNT_TRIE, w));
    }
    update.root = commit.root;
}

/// One subtrie's share of a block: its commit and the outcome of each of its accounts.
type SubtrieWork = (SubtrieCommit, Vec<(usize, AccountOutcome)>);

/// A block's state root being computed by the calling thread and the helpers: what it
/// changes (owned, so that helpers hold nothing borrowed), the subtries to update, and
/// their results.
struct RootJob {
    /// Taken out once every task has finished, so that a helper that picks the job up
    /// late holds no handle on the database.
    store: Mutex<Option<Store>>,
    /// The account trie's root as read: each subtrie's first node is checked against it.
    root: RootBranch,
    changes: Vec<AccountChange>,
    /// Per account, in block order: its address, hashed address and changes (indices
    /// into `changes`).
    accounts: Vec<(Address, B256, Vec<usize>)>,
    /// The accounts (indices into `accounts`) of each nibble.
    buckets: Vec<Vec<usize>>,
    /// Nibbles to update, largest first.
    tasks: Vec<usize>,
    next: AtomicUsize,
    failed: AtomicBool,
    /// Results, and how many tasks have finished (taken and run, or skipped after a
    /// failure).
    done: Mutex<(Vec<Result<SubtrieWork, StoreError>>, usize)>,
    finished: Condvar,
}

impl RootJob {
    /// Takes tasks until none is left; every task taken is counted as finished.
    fn run_tasks(&self) {
        loop {
            let Some(&nibble) = self.tasks.get(self.next.fetch_add(1, Ordering::AcqRel)) else {
                return;
            };
            // The store handle is dropped before the task counts as finished.
            let store = self.store.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let result = match &store {
                Some(_) if self.failed.load(Ordering::Acquire) => None,
                None => None,
                Some(store) => {
                    let run = std::panic::AssertUnwindSafe(|| self.subtrie(store, nibble));
                    Some(std::panic::catch_unwind(run).unwrap_or_else(|_| {
                        Err(StoreError::Corrupt(format!(
                            "the state-root worker of subtrie {nibble:x} panicked"
                        )))
                    }))
                }
            };
            if matches!(result, Some(Err(_))) {
                self.failed.store(true, Ordering::Release);
            }
            drop(store);
            let mut done = self.done.lock().unwrap_or_else(|p| p.into_inner());
            done.0.extend(result);
            done.1 += 1;
            if done.1 == self.tasks.len() {
                self.finished.notify_all();
            }
        }
    }

    fn subtrie(&self, store: &Store, nibble: usize) -> Result<SubtrieWork, StoreError> {
        let source = StoreNodes(store);
        let mut sub = self.root.subtrie(&source, ACCOUNT_TRIE, nibble as u8);
        let mut outcomes = Vec::with_capacity(self.buckets[nibble].len());
        let mut list = Vec::new();
        for &i in &self.buckets[nibble] {
            let (address, owner, changes) = &self.accounts[i];
            list.clear();
            list.extend(changes.iter().map(|&j| &self.changes[j]));
            let outcome = update_account(store, &source, *address, *owner, &list, &mut sub)?;
            outcomes.push((i, outcome));
        }
        Ok((sub.commit().map_err(trie_err)?, outcomes))
    }

    /// Waits until every task has finished (the calling thread ran out of tasks to take:
    /// what is left is being run by helpers, so this waits only for work under way).
    fn wait(&self) -> Vec<Result<SubtrieWork, StoreError>> {
        let mut done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        while done.1 < self.tasks.len() {
            done = self.finished.wait(done).unwrap_or_else(|p| p.into_inner());
        }
        std::mem::take(&mut done.0)
    }
}

/// The helper threads of the state root: started on first use, at most 15 for the whole
/// process (with the calling thread, one per subtrie), each waiting for jobs on its own
/// channel. A helper that wakes after the calling thread took every task finds nothing
/// to do: a block never waits for a helper to be scheduled, only for the tasks helpers
/// have taken.
fn helpers(count: usize) -> Vec<std::sync::mpsc::Sender<Arc<RootJob>>> {
    static HELPERS: Mutex<Vec<std::sync::mpsc::Sender<Arc<RootJob>>>> = Mutex::new(Vec::new());
    let mut helpers = HELPERS.lock().unwrap_or_else(|p| p.into_inner());
    while helpers.len() < count.min(15) {
        let (tx, rx) = std::sync::mpsc::channel::<Arc<RootJob>>();
        let spawned = std::thread::Builder::new()
            .name(format!("state-root-{}", helpers.len() + 1))
            .spawn(move || {
                for job in rx {
                    job.run_tasks();
                }
            });
        match spawned {
            Ok(_) => helpers.push(tx),
            // No thread to be had: the calling thread does the work.
            Err(_) => break,
        }
    }
    helpers.iter().take(count).cloned().collect()
}

/// [`state_update`] on `workers` threads; `None` when the account trie's root is not a
/// branch or would not stay one (the caller computes the block on one thread).
fn parallel_update(
    store: &Store,
    grouped: &Grouped<'_>,
    owners: &[B256],
    workers: usize,
) -> Result<Option<StateUpdate>, StoreError> {
    let source = StoreNodes(store);
    let root = match head_state_root(store)? {
        Some(root) => RootBranch::read_expecting(&source, &ACCOUNT_TRIE, &root),
        None => RootBranch::read(&source, &ACCOUNT_TRIE),
    };
    let Some(root) = root.map_err(trie_err)? else {
        return Ok(None);
    };
    let mut changes = Vec::new();
    let mut accounts = Vec::with_capacity(grouped.len());
    let mut buckets: Vec<Vec<usize>> = vec![Vec::new(); 16];
    for (i, ((address, list), owner)) in grouped.iter().zip(owners).enumerate() {
        let first = changes.len();
        changes.extend(list.iter().map(|c| (*c).clone()));
        accounts.push((*address, *owner, (first..changes.len()).collect()));
        buckets[(owner[0] >> 4) as usize].push(i);
    }
    // Largest subtries first, so that the last one a thread takes is a small one.
    let mut tasks: Vec<usize> = (0..16).filter(|n| !buckets[*n].is_empty()).collect();
    tasks.sort_by_key(|n| std::cmp::Reverse(buckets[*n].len()));
    let helpers = helpers(workers.min(tasks.len()) - 1);
    let job = Arc::new(RootJob {
        store: Mutex::new(Some(store.clone())),
        root: root.clone(),
        changes,
        accounts,
        buckets,
        tasks,
        next: AtomicUsize::new(0),
        failed: AtomicBool::new(false),
        done: Mutex::new((Vec::with_capacity(16), 0)),
        finished: Condvar::new(),
    });
    for helper in &helpers {
        // A helper that is gone leaves its share to the others.
        let _ = helper.send(job.clone());
    }
    job.run_tasks();
    let results = job.wait();
    job.store.lock().unwrap_or_else(|p| p.into_inner()).take();
    let mut subtries = Vec::with_capacity(results.len());
    let mut outcomes: Vec<Option<AccountOutcome>> = Vec::new();
    outcomes.resize_with(grouped.len(), || None);
    for result in results {
        let (commit, list) = result?;
        subtries.push(commit);
        for (i, outcome) in list {
            outcomes[i] = Some(outcome);
        }
    }
    let Some(commit) = root.commit(subtries).map_err(trie_err)? else {
        return Ok(None);
    };
    let mut update = StateUpdate::default();
    for (outcome, owner) in outcomes.into_iter().zip(owners) {
        let Some(outcome) = outcome else {
            return Err(StoreError::Corrupt(
                "an account of the block was in no subtrie".to_string(),
            ));
        };
        outcome.append_to(*owner, &mut update);
    }
    finish(&mut update, commit);
    Ok(Some(update))
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
    /// The account proven.
    pub address: Address,
    /// `None`: the account does not exist (the proof shows its absence).
    pub account: Option<Account>,
    /// Account trie nodes from the root towards keccak(address).
    pub proof: Vec<Vec<u8>>,
    /// Proofs of the slots asked for, in the order asked (`storageProof`).
    pub storage: Vec<SlotProof>,
}

/// A slot's value (zero when absent) and the storage trie nodes towards keccak(slot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotProof {
    /// The storage key asked for (unhashed).
    pub slot: B256,
    /// The slot's value (zero when absent).
    pub value: U256,
    /// Storage trie nodes from the account's storage root towards keccak(slot).
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
