//! moat-storage: the node's durable memory.
//!
//! A [`Store`] holds everything moat keeps across restarts:
//!
//! - **chain data**, as the raw RLP the caller hands in (headers, bodies, receipts; the
//!   codecs live in moat-common), indexed by block hash, with the canonical chain
//!   (number → hash), the head, and a tx hash → [`TxLocation`] index;
//! - **state**, typed: [`Account`]s, storage slots and contract code, and the **trie
//!   nodes** of the account and storage tries, each under its owner and path;
//! - **mined blob txs** with their sidecars (for at most the last 128 blocks, so a reorg
//!   can give them back to the pool), **undo records** of recent blocks (the chain says
//!   which), and the **journal**
//!   table of local txs of earlier versions (the pool now keeps its own journal file;
//!   the node reads the table once into it);
//! - the [`ChainMeta`] (chain id, genesis hash) that ties a datadir to one network.
//!
//! ```text
//!  block import / pool / genesis            JSON-RPC, EVM, pool, p2p
//!        │ builds                                  │ reads
//!        ▼                                         ▼
//!   WriteBatch ──commit──▶ Store ──────────▶ header_rlp, account, storage, ...
//!                            │
//!                 ops, applied atomically
//!                            ▼
//!                 backend: redb file (datadir/moat.redb) | BTreeMaps in memory
//! ```
//!
//! Every change goes through [`Store::commit`], which applies a whole [`WriteBatch`] in
//! one transaction: a block's header, body, receipts, index entries, state diff and new
//! head land together or not at all, so a crash never leaves a head without its state.
//! The batch is lowered to plain key-value ops above the backends, so the in-memory
//! backend used by tests runs exactly the same rules as redb on disk.
//!
//! A write the disk refuses (full, an I/O error) leaves redb unwritable until reopened:
//! the store latches it ([`Store::write_failure`]) and tries no write after it, and a
//! panic inside redb (some damaged pages) is a [`StoreError::Corrupt`], not a dead
//! thread.
//!
//! A read that meets damage (a page redb cannot make sense of, a value that does not
//! decode) fails with [`StoreError::Corrupt`] and is latched as [`Store::damage`], with
//! damage found above the store ([`Store::note_damage`]: a trie node whose hash is not
//! the one its parent names); the node stops on it.
//!
//! Block import commits relaxed ([`Store::commit_relaxed`]): once the node's flusher
//! thread runs, such a commit is written behind (`backend/pending.rs`): a layer over
//! the read view at once, written into the redb file and synced by the flusher in order,
//! so that a block's commit does not pay for redb's page writes. When blocks come faster
//! than the flusher writes them, commits past three quarters of the queue are held to
//! its pace ([`Store::slowed_commits`]) rather than stopping when the queue is full.
//!
//! Trie-node reads go through a bounded read-through cache (`node_cache`) that every
//! commit brings up to date once the backend has applied it, so it never holds what the
//! database does not. It holds only nodes that passed their caller's hash check
//! ([`Store::trie_node_checked`]) or that a commit wrote: a cached node is trusted.

mod backend;
mod batch;
mod codec;
mod error;
mod node_cache;
mod snap;
mod warm;

#[cfg(test)]
mod tests;

pub use backend::{TablePages, in_guarded_read};
pub use batch::WriteBatch;
/// The trie-node table's key layout: what [`Store::trie_node_entries_from`] scans in order.
pub use codec::{trie_node_key, trie_node_path, trie_owner_bounds};
pub use error::StoreError;
pub use warm::{WarmEnd, Warmed};

use alloy_primitives::{Address, B256, Bytes, KECCAK256_EMPTY, U256};
use backend::{Backend, MemoryBackend, Op, RedbBackend, Table};
use codec::{
    META_CHAIN, META_FINALIZED, META_HEAD, META_SAFE, decode_account, decode_address, decode_b256,
    decode_meta, decode_number, decode_number_hash, decode_slot_value, decode_tx_location,
    number_key, storage_bounds, storage_key,
};
use node_cache::{NodeCache, NodeChanges};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// Name of the database file inside the datadir.
pub const DB_FILE: &str = "moat.redb";

/// What makes a datadir belong to one chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainMeta {
    /// The EIP-155 chain id of the chain's config.
    pub chain_id: u64,
    /// Hash of the chain's genesis block header.
    pub genesis_hash: B256,
}

/// An account as the state keeps it. Note that `Default` gives zero hashes, not the
/// empty code hash and empty trie root that an empty account has on chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Account {
    /// The account's next transaction nonce (for a contract, its next CREATE nonce).
    pub nonce: u64,
    /// Balance in wei.
    pub balance: U256,
    /// keccak256 of the account's bytecode (the key of its code in the code table).
    pub code_hash: B256,
    /// Root of the account's storage trie.
    pub storage_root: B256,
}

/// Where a mined transaction sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxLocation {
    /// Hash of the canonical block that includes the transaction.
    pub block_hash: B256,
    /// That block's number.
    pub block_number: u64,
    /// The transaction's position in the block's transaction list, from 0.
    pub index: u64,
}

/// The memory for the database's caches when none is given (the node's `--cache`
/// default): 4 GiB, as geth's default `--cache`. Both caches fill only as the state is
/// read, so a small state never reaches it.
pub const DEFAULT_CACHE_BYTES: usize = 4 << 30;

/// The trie-node cache of an in-memory store (tests, tools).
const IN_MEMORY_NODE_CACHE_BYTES: u64 = 64 << 20;

/// A trie node at its path: (nibbles, RLP).
pub type TrieNode = (Vec<u8>, Vec<u8>);
/// A trie node with its trie: (owner, nibbles, RLP).
pub type OwnedTrieNode = (B256, Vec<u8>, Vec<u8>);

/// Handle to the database; cheap to clone, and every clone sees every commit.
#[derive(Clone)]
pub struct Store {
    backend: Arc<Backend>,
    nodes: Arc<NodeCache>,
    /// Whether the state holds accounts a snap sync downloaded under hashed keys (see
    /// [`snap`]): reads by address then look there too, and writes by address retire
    /// them.
    snap_state: Arc<std::sync::atomic::AtomicBool>,
    /// The first write that failed for a reason of the disk: no write is tried after it.
    write_failure: Arc<std::sync::OnceLock<String>>,
    /// Damage found above the store ([`Store::note_damage`]).
    damage: Arc<std::sync::OnceLock<String>>,
}

/// When a commit is made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Durable {
    /// Synced before the commit returns.
    Now,
    /// Within about a second; wakes the flusher.
    Relaxed,
    /// Within about a second; does not wake the flusher (a bulk writer's stream).
    Bulk,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.backend.kind())
            .finish()
    }
}

impl Store {
    /// Opens (creating if needed) the redb database `datadir/moat.redb`.
    ///
    /// With `meta` given, a datadir that already holds another chain is refused with
    /// [`StoreError::ChainMismatch`]. A datadir without a chain yet is left without one:
    /// the genesis commit writes the meta, so a node that fails before genesis leaves
    /// nothing that claims the datadir for a chain.
    pub fn open(datadir: &Path, meta: Option<ChainMeta>) -> Result<Store, StoreError> {
        Self::open_with_cache(datadir, meta, DEFAULT_CACHE_BYTES)
    }

    /// [`Store::open`] with `cache_bytes` of memory for the database (the rest of the
    /// file is read from disk as needed): a quarter for the trie-node cache, the rest for
    /// the database's page cache.
    pub fn open_with_cache(
        datadir: &Path,
        meta: Option<ChainMeta>,
        cache_bytes: usize,
    ) -> Result<Store, StoreError> {
        let node_cache_bytes = cache_bytes / 4;
        Self::open_with_caches(
            datadir,
            meta,
            cache_bytes - node_cache_bytes,
            node_cache_bytes,
        )
    }

    /// [`Store::open`] with the two caches sized apart: the database's page cache and the
    /// trie-node cache (0 turns the latter off; benchmarks compare the two).
    pub fn open_with_caches(
        datadir: &Path,
        meta: Option<ChainMeta>,
        page_cache_bytes: usize,
        node_cache_bytes: usize,
    ) -> Result<Store, StoreError> {
        std::fs::create_dir_all(datadir).map_err(|source| StoreError::Io {
            path: datadir.to_path_buf(),
            source,
        })?;
        let backend = RedbBackend::open(&datadir.join(DB_FILE), datadir, page_cache_bytes)?;
        let store = Store {
            backend: Arc::new(Backend::Redb(backend)),
            nodes: Arc::new(NodeCache::new(node_cache_bytes as u64)),
            snap_state: Default::default(),
            write_failure: Default::default(),
            damage: Default::default(),
        };
        store.detect_snap_state()?;
        if let (Some(expected), Some(found)) = (meta, store.chain_meta()?)
            && expected != found
        {
            return Err(StoreError::ChainMismatch {
                datadir: datadir.to_path_buf(),
                expected,
                found,
            });
        }
        Ok(store)
    }

    /// An empty store that lives as long as its last clone.
    pub fn in_memory() -> Store {
        Store {
            backend: Arc::new(Backend::Memory(MemoryBackend::new())),
            nodes: Arc::new(NodeCache::new(IN_MEMORY_NODE_CACHE_BYTES)),
            snap_state: Default::default(),
            write_failure: Default::default(),
            damage: Default::default(),
        }
    }

    /// The first damage met in the database file, if any: a page the engine could not
    /// make sense of, or a value that does not decode (a [`StoreError::Corrupt`] of a
    /// read or write), or a trie node that does not hash to what its parent names
    /// ([`Store::note_damage`]). The work that met it failed with an error; the node
    /// stops on it rather than run on a rotted file (see the node's run loop).
    pub fn damage(&self) -> Option<&str> {
        self.backend
            .damage()
            .or_else(|| self.damage.get().map(String::as_str))
    }

    /// Records damage found above the store (a trie node whose hash is not the one its
    /// parent names): [`Store::damage`] reports it.
    pub fn note_damage(&self, why: String) {
        let _ = self.damage.set(why);
    }

    /// Why the store takes no more writes, once a write failed for a reason of the disk
    /// (full, or an I/O error): the database engine then needs closing and reopening,
    /// which the node does by stopping (see the node's run loop). Reads from caches may
    /// go on; every later commit returns [`StoreError::WriteFailed`] without trying.
    pub fn write_failure(&self) -> Option<&str> {
        self.write_failure.get().map(String::as_str)
    }

    /// The chain this datadir belongs to, once the genesis commit set it.
    pub fn chain_meta(&self) -> Result<Option<ChainMeta>, StoreError> {
        self.backend.get_with(Table::Meta, META_CHAIN, decode_meta)
    }

    /// (number, hash) of the canonical head, if any block was written.
    pub fn head(&self) -> Result<Option<(u64, B256)>, StoreError> {
        self.backend
            .get_with(Table::Meta, META_HEAD, |v| decode_number_hash(v, "head"))
    }

    /// (number, hash) of the block the consensus layer last named safe, if it named one.
    /// Written by [`WriteBatch::set_forkchoice_marks`]; not checked against the canonical
    /// chain here (the chain does that).
    pub fn safe(&self) -> Result<Option<(u64, B256)>, StoreError> {
        self.backend
            .get_with(Table::Meta, META_SAFE, |v| decode_number_hash(v, "safe"))
    }

    /// (number, hash) of the block the consensus layer last named finalized, if any.
    pub fn finalized(&self) -> Result<Option<(u64, B256)>, StoreError> {
        self.backend.get_with(Table::Meta, META_FINALIZED, |v| {
            decode_number_hash(v, "finalized")
        })
    }

    /// The RLP-encoded header of block `hash`, if stored.
    pub fn header_rlp(&self, hash: &B256) -> Result<Option<Vec<u8>>, StoreError> {
        self.raw(Table::Headers, hash.as_slice())
    }

    /// The RLP-encoded body (transactions, ommers, withdrawals) of block `hash`, if stored.
    pub fn body_rlp(&self, hash: &B256) -> Result<Option<Vec<u8>>, StoreError> {
        self.raw(Table::Bodies, hash.as_slice())
    }

    /// The RLP-encoded receipts of block `hash`, if stored.
    pub fn receipts_rlp(&self, hash: &B256) -> Result<Option<Vec<u8>>, StoreError> {
        self.raw(Table::Receipts, hash.as_slice())
    }

    /// Number of a stored header, without reading the header.
    pub fn block_number(&self, hash: &B256) -> Result<Option<u64>, StoreError> {
        self.backend
            .get_with(Table::HeaderNumbers, hash.as_slice(), |v| {
                decode_number(v, "block number")
            })
    }

    /// The lowest canonical block number at or above `number`, if any (a snap-synced
    /// datadir holds genesis and the blocks from its pivot on, nothing between).
    pub fn first_canonical_from(&self, number: u64) -> Result<Option<u64>, StoreError> {
        let mut found = None;
        self.backend
            .scan_while(Table::Canonical, &number_key(number), None, |key, _| {
                found = Some(decode_number(key, "canonical number")?);
                Ok(false)
            })?;
        Ok(found)
    }

    /// Hash of the canonical block at height `number`, if the canonical index has one.
    pub fn canonical_hash(&self, number: u64) -> Result<Option<B256>, StoreError> {
        self.backend
            .get_with(Table::Canonical, &number_key(number), |v| {
                decode_b256(v, "canonical hash")
            })
    }

    /// Where the canonical chain includes the transaction `tx_hash`, if it does (and the
    /// tx index still holds it).
    pub fn tx_location(&self, tx_hash: &B256) -> Result<Option<TxLocation>, StoreError> {
        self.backend
            .get_with(Table::TxIndex, tx_hash.as_slice(), decode_tx_location)
    }

    /// The account at `address` in the head state (from the downloaded snap state when
    /// the flat table lacks it); `None` for an account that does not exist.
    pub fn account(&self, address: &Address) -> Result<Option<Account>, StoreError> {
        let flat = self
            .backend
            .get_with(Table::Accounts, address.as_slice(), decode_account)?;
        if flat.is_none() && self.has_snap_state() {
            return self.snap_account(&alloy_primitives::keccak256(address));
        }
        Ok(flat)
    }

    /// Value of a storage slot; zero when it was never written or was cleared.
    pub fn storage(&self, address: &Address, slot: &B256) -> Result<U256, StoreError> {
        let flat = self.backend.get_with(
            Table::Storage,
            &storage_key(address, slot),
            decode_slot_value,
        )?;
        match flat {
            None if self.has_snap_state() => self.snap_slot(
                &alloy_primitives::keccak256(address),
                &alloy_primitives::keccak256(slot),
            ),
            flat => Ok(flat.unwrap_or_default()),
        }
    }

    /// Every non-zero slot of an account, sorted by slot: what rebuilding its storage
    /// root needs.
    pub fn storage_slots(&self, address: &Address) -> Result<Vec<(B256, U256)>, StoreError> {
        let (start, end) = storage_bounds(address);
        let mut slots = Vec::new();
        self.backend
            .scan(Table::Storage, &start, Some(&end), |key, value| {
                // Keys are address ‖ slot; a shorter one can only come from a damaged file.
                let slot = decode_b256(key.get(20..).unwrap_or_default(), "storage key")?;
                slots.push((slot, decode_slot_value(value)?));
                Ok(())
            })?;
        Ok(slots)
    }

    /// Every stored slot of every account in (address, slot) order, until `visit`
    /// answers `false` (a whole-datadir check walks them once).
    pub fn storage_entries(
        &self,
        mut visit: impl FnMut(Address, B256, U256) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        self.backend
            .scan_while(Table::Storage, &[], None, |key, value| {
                let address = decode_address(key.get(..20).unwrap_or_default(), "storage key")?;
                let slot = decode_b256(key.get(20..).unwrap_or_default(), "storage key")?;
                visit(address, slot, decode_slot_value(value)?)
            })
    }

    /// Every account, sorted by address (the state root is recomputed from it for now).
    pub fn accounts(&self) -> Result<Vec<(Address, Account)>, StoreError> {
        let mut accounts = Vec::new();
        self.backend
            .scan(Table::Accounts, &[], None, |key, value| {
                accounts.push((decode_address(key, "account key")?, decode_account(value)?));
                Ok(())
            })?;
        Ok(accounts)
    }

    /// Contract code by hash. The empty code is answered without a lookup: every
    /// code-less account points at it, and nobody stores it.
    pub fn code(&self, code_hash: &B256) -> Result<Option<Bytes>, StoreError> {
        if *code_hash == KECCAK256_EMPTY {
            return Ok(Some(Bytes::new()));
        }
        self.backend
            .get_with(Table::Code, code_hash.as_slice(), |v| {
                Ok(Bytes::copy_from_slice(v))
            })
    }

    /// A mined blob tx in network form, sidecar included, kept while a reorg may need it.
    pub fn sidecar(&self, tx_hash: &B256) -> Result<Option<Vec<u8>>, StoreError> {
        self.raw(Table::Sidecars, tx_hash.as_slice())
    }

    /// What `block_hash` overwrote when it was imported, if still kept.
    pub fn undo(&self, block_hash: &B256) -> Result<Option<Vec<u8>>, StoreError> {
        self.raw(Table::Undo, block_hash.as_slice())
    }

    /// Whether the undo record of `block_hash` is kept (without copying it out).
    pub fn has_undo(&self, block_hash: &B256) -> Result<bool, StoreError> {
        Ok(self
            .backend
            .get_with(Table::Undo, block_hash.as_slice(), |_| Ok(()))?
            .is_some())
    }

    /// The RLP of the trie node at `path` (nibbles) of trie `owner` (zero: the account
    /// trie; keccak(address): that account's storage trie), unchecked.
    /// Served from the trie-node cache when it holds the node; what this reads from the
    /// database is not cached (the cache holds only checked nodes, see
    /// [`Store::trie_node_checked`]).
    pub fn trie_node(&self, owner: &B256, path: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let key = codec::trie_node_key(owner, path);
        if let Some(node) = self.nodes.get(&key) {
            return Ok(Some(node));
        }
        self.raw(Table::TrieNodes, &key)
    }

    /// The trie node at `path` of trie `owner` when `check` accepts it (the caller
    /// hashes it against the reference its parent holds); what the database holds there
    /// otherwise gives `Ok(Err(found))` (`None` when it holds nothing). A node read from
    /// the database is checked and then cached; the cache holds only nodes checked so or
    /// written by this store's commits, so a cached node is returned unchecked.
    pub fn trie_node_checked(
        &self,
        owner: &B256,
        path: &[u8],
        check: impl FnOnce(&[u8]) -> bool,
    ) -> Result<Result<Vec<u8>, Option<Vec<u8>>>, StoreError> {
        let key = codec::trie_node_key(owner, path);
        if let Some(node) = self.nodes.get(&key) {
            return Ok(Ok(node));
        }
        let generation = self.nodes.generation();
        match self.raw(Table::TrieNodes, &key)? {
            Some(node) if check(&node) => {
                self.nodes.fill(generation, &key, &node);
                Ok(Ok(node))
            }
            found => Ok(Err(found)),
        }
    }

    /// Every stored trie node: (owner, path, RLP), in key order (for checks and tools).
    pub fn trie_nodes(&self) -> Result<Vec<OwnedTrieNode>, StoreError> {
        let mut nodes = Vec::new();
        self.backend
            .scan(Table::TrieNodes, &[], None, |key, value| {
                let owner = decode_b256(key.get(..32).unwrap_or_default(), "trie node key")?;
                nodes.push((owner, codec::trie_node_path(key)?, value.to_vec()));
                Ok(())
            })?;
        Ok(nodes)
    }

    /// The nodes of trie `owner` whose key is at or after that of `path`, in key order
    /// (the path packed two nibbles a byte, then its length: a node sorts after every
    /// node left of it, so leaves come in the order of their keys), each with its table
    /// key ([`trie_node_key`]) as stored, read from one snapshot of the database, until
    /// `visit` returns `false`. What serving a range of the head state reads instead of
    /// one lookup per node, and what a merge in key order reads.
    pub fn trie_node_entries_from(
        &self,
        owner: &B256,
        path: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        let start = codec::trie_node_key(owner, path);
        let (_, end) = codec::trie_owner_bounds(owner);
        self.backend
            .scan_while(Table::TrieNodes, &start, Some(&end), |key, value| {
                Ok(visit(key, value))
            })
    }

    /// Every node of trie `owner` with its path (what taking back a wiped storage trie
    /// needs).
    pub fn trie_nodes_of(&self, owner: &B256) -> Result<Vec<TrieNode>, StoreError> {
        let (start, end) = codec::trie_owner_bounds(owner);
        let mut nodes = Vec::new();
        self.backend
            .scan(Table::TrieNodes, &start, Some(&end), |key, value| {
                nodes.push((codec::trie_node_path(key)?, value.to_vec()));
                Ok(())
            })?;
        Ok(nodes)
    }

    /// The local-tx journal table of earlier versions, sorted by tx hash: read once at start
    /// into the pool's journal file, then emptied.
    pub fn journal(&self) -> Result<Vec<(B256, Vec<u8>)>, StoreError> {
        let mut entries = Vec::new();
        self.backend.scan(Table::Journal, &[], None, |key, value| {
            entries.push((decode_b256(key, "journal key")?, value.to_vec()));
            Ok(())
        })?;
        Ok(entries)
    }

    /// Applies the whole batch in one atomic, durable transaction: once this returns
    /// `Ok`, every clone of the store reads the batch and a crash cannot lose it; if it
    /// fails, nothing of the batch was written.
    pub fn commit(&self, batch: WriteBatch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let forget = batch.nodes_from_records;
        self.apply(batch.into_ops(), Durable::Now, forget)
    }

    /// Applies the batch atomically, durable within a second (or 256 such commits):
    /// readers see it at once; a crash may lose the last second of them, never part of
    /// one, and reopens at the last durable commit. What block import uses. With a
    /// flusher thread ([`Store::wait_for_flush`]) the commit is written behind: it
    /// returns once the batch is a layer over what readers see, and the flusher writes
    /// it into the file and syncs it beside the caller's next work; while commits come
    /// faster than the disk takes them (blocks back to back, as in a sync), what a crash
    /// may lose is the commits still waiting for the flusher: at most 128 of them (or
    /// 1 GiB). Dropping the last clone of the store, or [`Store::flush`], makes them
    /// durable.
    pub fn commit_relaxed(&self, batch: WriteBatch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let forget = batch.nodes_from_records;
        self.apply(batch.into_ops(), Durable::Relaxed, forget)
    }

    /// [`Store::commit_relaxed`] for a bulk writer (snap sync, building a genesis state):
    /// the commit does not wake the flusher; the stream is made durable by the
    /// flusher's second (or every 256th commit), so the syncs do not take the writer
    /// between every two of its commits.
    pub fn commit_bulk(&self, batch: WriteBatch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let forget = batch.nodes_from_records;
        self.apply(batch.into_ops(), Durable::Bulk, forget)
    }

    /// Applies `ops` in the backend, then brings the trie-node cache up to date
    /// (`forget`: the nodes written leave it rather than enter it).
    fn apply(&self, mut ops: Vec<Op>, durable: Durable, forget: bool) -> Result<(), StoreError> {
        if let Some(why) = self.write_failure() {
            return Err(StoreError::WriteFailed(why.to_string()));
        }
        self.retire_snap_entries(&mut ops);
        let changes = NodeChanges::of(&ops);
        let changes = if forget {
            changes.forgetting()
        } else {
            changes
        };
        let applied = match durable {
            Durable::Now => self.backend.apply(ops),
            Durable::Relaxed => self.backend.apply_with(ops, true),
            Durable::Bulk => self.backend.apply_bulk(ops),
        };
        match &applied {
            Ok(()) => self.nodes.apply(changes),
            Err(_) => self.nodes.clear(),
        }
        self.latch(applied)
    }

    /// Remembers a write the disk refused, or one that met a damaged page (the engine's
    /// state is then unknown): [`Store::write_failure`].
    fn latch(&self, result: Result<(), StoreError>) -> Result<(), StoreError> {
        if let Err(StoreError::WriteFailed(why) | StoreError::Corrupt(why)) = &result {
            let _ = self.write_failure.set(why.clone());
        }
        result
    }

    /// Makes every relaxed commit durable.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.flush_with(Backend::flush)
    }

    /// For a flusher thread: [`Store::flush`] of the oldest few block commits waiting to
    /// be written (and every relaxed commit before them), so that a commit waiting for
    /// room waits for a short round; when more wait, the next [`Store::wait_for_flush`]
    /// answers at once.
    pub fn flush_round(&self) -> Result<(), StoreError> {
        self.flush_with(Backend::flush_round)
    }

    /// `flush` on the backend, unless a write failed before; its failure is latched.
    fn flush_with(&self, flush: fn(&Backend) -> Result<(), StoreError>) -> Result<(), StoreError> {
        if let Some(why) = self.write_failure() {
            return Err(StoreError::WriteFailed(why.to_string()));
        }
        self.latch(flush(&self.backend))
    }

    /// For a flusher thread: blocks until a relaxed commit has been made since the last
    /// durable one, or `timeout` passes; `true` when the caller should [`Store::flush`]
    /// now. The sync then runs beside the next block's execution, which needs the
    /// writer only at its end; commits made while it runs go with the next sync. Once a
    /// flusher waits here, a relaxed commit never syncs inline because a second has
    /// passed (only every 256th does), so no block's commit carries the sync of the
    /// blocks before it.
    pub fn wait_for_flush(&self, timeout: std::time::Duration) -> bool {
        if self.write_failure().is_some() {
            // Nothing will be written any more: no hurry.
            std::thread::sleep(timeout);
            return false;
        }
        self.backend.wait_for_flush(timeout)
    }

    /// How each table lies in the database file, by its name (commits still written
    /// behind are not counted); none in memory.
    pub fn table_pages(&self) -> Result<Vec<(&'static str, TablePages)>, StoreError> {
        self.backend.table_pages()
    }

    /// How many block commits wait to be written into the database file by the flusher
    /// (written behind: read already), and their size in bytes; (0, 0) without a
    /// flusher and in memory.
    pub fn pending_commits(&self) -> (usize, usize) {
        self.backend.pending()
    }

    /// Block commits held back to the flusher's pace so far, and the time they were held
    /// in all: past three quarters of the commits that may wait, a commit written behind
    /// returns no sooner than the flusher's time per commit after the one before, so
    /// that blocks faster than the disk go at its pace evenly rather than filling the
    /// queue and waiting a whole round for room.
    pub fn slowed_commits(&self) -> (u64, std::time::Duration) {
        self.backend.slowed()
    }

    fn raw(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.backend.get_with(table, key, |v| Ok(v.to_vec()))
    }
}
