//! Block import: validate the header, execute the body, check every root, and commit the
//! block with its state changes in one atomic store write.
//!
//! ```text
//!  Block ─▶ header rules (parent, number, time, gas limit, base fee, blob gas)
//!        ─▶ body roots (transactions, withdrawals)
//!        ─▶ vm::execute_block ─▶ gas, receipts root, bloom, requests hash, state root
//!             ▲ each tx's sender as it runs (cache, else ECDSA on helper threads
//!               ahead of it: `chain/senders.rs`)
//!        ─▶ one WriteBatch: header, body, receipts, indices, accounts, storage, code, head
//! ```
//!
//! The state root comes from the stored tries updated along the changed keys only
//! ([`crate::state_root`]): a block costs what it changes, not what the state holds.

use crate::genesis_state::GenesisStateWriter;
pub use crate::header::{
    HeaderError, next_block_base_fee, next_block_excess_blob_gas, validate_header,
};
use crate::history::StateAtBlock;
use crate::premerge;
pub use crate::state_root::{AccountUpdates, state_root_after};
use crate::state_root::{build_tries, state_update};
use crate::undo::{Undo, UndoWindow};
use crate::vm::{self, VmError};
use alloy_primitives::{B256, Bloom, Bytes, U256};
use moat_common::block::{Block, Header};
use moat_common::config::{AllocEntries, ChainConfig, Fork, Genesis, GenesisAccount};
use moat_common::receipt::{self, Receipt};
use moat_mempool::SenderCache;
use moat_mempool::maintain::CanonHead;
use moat_storage::{ChainMeta, Store, StoreError, TxLocation, WriteBatch};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::time::Instant;

mod dev;
mod finality;
mod senders;
mod undo_window;
pub use dev::StateEdit;
pub use finality::Mark;
pub use undo_window::SIDECAR_DEPTH;
pub(crate) use undo_window::UNKNOWN as UNKNOWN_CURSOR;

/// A block whose execution does not give what its header says: the field, the value
/// execution gives (`expected`) and the header's (`found`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecutionMismatch {
    /// The header's `gasUsed` is not the gas the transactions used.
    #[error("gasUsed: expected {expected}, found {found}")]
    GasUsed {
        /// Gas used by execution.
        expected: u64,
        /// The header's `gasUsed`.
        found: u64,
    },
    /// The header's `blobGasUsed` is not the blob gas of the executed transactions.
    #[error("blobGasUsed: expected {expected}, found {found}")]
    BlobGasUsed {
        /// Blob gas used by execution.
        expected: u64,
        /// The header's `blobGasUsed`.
        found: u64,
    },
    /// The header's `receiptsRoot` is not the root of the receipts execution gives.
    #[error("receiptsRoot: expected {expected}, found {found}")]
    ReceiptsRoot {
        /// Root of the trie of the receipts execution gives.
        expected: B256,
        /// The header's `receiptsRoot`.
        found: B256,
    },
    /// The header's `logsBloom` is not the bloom of the receipts' logs.
    #[error("logsBloom: expected {expected}, found {found}")]
    LogsBloom {
        /// Bloom of the logs execution gives.
        expected: Box<Bloom>,
        /// The header's `logsBloom`.
        found: Box<Bloom>,
    },
    /// The header's `requestsHash` is not the EIP-7685 hash of the requests execution gives.
    #[error("requestsHash: expected {expected}, found {found}")]
    RequestsHash {
        /// EIP-7685 hash of the requests execution gives.
        expected: B256,
        /// The header's `requestsHash`.
        found: B256,
    },
    /// The header's `stateRoot` is not the root of the state after execution.
    #[error("stateRoot: expected {expected}, found {found}")]
    StateRoot {
        /// Root of the state trie after the block's changes.
        expected: B256,
        /// The header's `stateRoot`.
        found: B256,
    },
}

/// Why a block was not imported. Validation failures name the field, the value the
/// rules expect and the value found.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    /// The store failed to read or commit.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// Executing the block does not give what its header says: the block is invalid.
    #[error("invalid block {number} ({hash}): {error}")]
    Mismatch {
        /// The block's number.
        number: u64,
        /// The block's hash.
        hash: B256,
        /// The header field execution contradicts.
        #[source]
        error: ExecutionMismatch,
    },
    /// The block's header breaks a header rule: the block is invalid.
    #[error("invalid block {number} ({hash}): {error}")]
    Header {
        /// The block's number.
        number: u64,
        /// The block's hash.
        hash: B256,
        /// The rule broken.
        #[source]
        error: HeaderError,
    },
    /// The block is invalid for another reason: an invalid transaction or signature, a
    /// failed system call, a proof-of-work rule (terminal total difficulty, ommers).
    #[error("invalid block {number} ({hash}): {reason}")]
    Invalid {
        /// The block's number.
        number: u64,
        /// The block's hash.
        hash: B256,
        /// What is wrong, in words.
        reason: String,
    },
    /// The block's parent is not in the store.
    #[error("block {number} ({hash}): unknown parent {parent}")]
    UnknownParent {
        /// The block's number.
        number: u64,
        /// The block's hash.
        hash: B256,
        /// The parent hash the block names.
        parent: B256,
    },
    /// The block's parent is stored but is not the head: [`Chain::import`] only extends
    /// the head (a side branch goes through [`Chain::set_head`]).
    #[error("block {number} ({hash}) does not extend the head {head}")]
    NotOnHead {
        /// The block's number.
        number: u64,
        /// The block's hash.
        hash: B256,
        /// The hash of the current head.
        head: B256,
    },
    /// A block named by hash is not in the store.
    #[error("unknown block {0}")]
    UnknownBlock(B256),
    /// The state at a block older than the undo records reach was asked for.
    #[error(
        "state of block {number} is not available (head {head}; the undo records reach back to block {oldest})"
    )]
    HistoryUnavailable {
        /// The block whose state was asked for.
        number: u64,
        /// The head's number.
        head: u64,
        /// The oldest block whose state can be read ([`Chain::undo_floor`]).
        oldest: u64,
    },
    /// A reorg would have to unwind blocks whose undo records are no longer kept.
    #[error(
        "reorg to a branch leaving the chain at block {fork_point} reaches below block {oldest}, the oldest the undo records can take the chain back to"
    )]
    ReorgTooDeep {
        /// The last block the old and new branches share.
        fork_point: u64,
        /// The oldest block the undo records can take the chain back to.
        oldest: u64,
    },
    /// A forkchoice mark (safe or finalized) names a block off the canonical chain.
    #[error("{what} block {hash} is not in the canonical chain")]
    NotCanonical {
        /// Which mark: `"safe"` or `"finalized"`.
        what: &'static str,
        /// The block hash the mark named.
        hash: B256,
    },
    /// A reorg would take a finalized block off the chain.
    #[error(
        "reorg to a branch leaving the chain at block {fork_point} would undo finalized block {finalized}"
    )]
    BelowFinalized {
        /// The last block the old and new branches share.
        fork_point: u64,
        /// The number of the finalized block.
        finalized: u64,
    },
    /// The datadir was initialised with another chain's genesis.
    #[error("the datadir holds genesis {found}, this chain's genesis is {expected}")]
    GenesisMismatch {
        /// The genesis hash of the configured chain.
        expected: B256,
        /// The genesis hash stored in the datadir.
        found: B256,
    },
    /// Stored data is missing or does not decode (a damaged datadir).
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// A genesis file could not be read or parsed.
    #[error("genesis file {path}: {source}")]
    GenesisFile {
        /// The genesis file's path.
        path: std::path::PathBuf,
        /// Why it was refused.
        #[source]
        source: moat_common::config::ConfigError,
    },
    /// The state reader failed during execution: the block's validity is unknown.
    #[error("state read failed: {0}")]
    State(String),
}

/// What `import` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportOutcome {
    /// The block was executed and is the new head.
    Imported {
        /// The block's number.
        number: u64,
        /// The block's hash.
        hash: B256,
        /// Gas the block's transactions used.
        gas_used: u64,
    },
    /// The block is already on the canonical chain: nothing was done.
    AlreadyKnown,
}

/// What [`Chain::set_head`] did: blocks taken off the canonical chain and blocks put
/// on it, each oldest first.
#[derive(Debug, Clone, Default)]
pub struct HeadChange {
    /// Blocks taken off the canonical chain, oldest first.
    pub removed: Vec<Block>,
    /// Blocks put on the canonical chain, oldest first.
    pub added: Vec<Block>,
}

/// From this many txs a block's senders are recovered on every core, beside its execution.
pub const PARALLEL_MIN_SENDERS: usize = 64;

/// The canonical chain over a store.
#[derive(Debug, Clone)]
pub struct Chain {
    store: Store,
    config: ChainConfig,
    genesis_hash: B256,
    senders: Option<SenderCache>,
    /// Whether block import reads a block's state on a second thread ahead of its
    /// execution ([`vm::execute_block_prewarmed`]), when no earlier block waits to be
    /// written into the database file.
    prewarm: bool,
    /// Serialises the writers of the chain (import, side blocks, head changes): the
    /// engine API and the syncer may import at the same moment, and each import reads
    /// the head it extends before it commits.
    writer: std::sync::Arc<parking_lot::Mutex<()>>,
    /// Total difficulties of recent proof-of-work blocks, by hash (bounded): import of a
    /// chain block by block finds its parent's here instead of summing from genesis.
    td_cache: std::sync::Arc<parking_lot::Mutex<std::collections::HashMap<B256, U256>>>,
    /// Which undo records are kept ([`crate::undo`]).
    undo_window: UndoWindow,
    /// The oldest block whose undo record is kept, as last seen (checked before use).
    undo_tail: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// The tail this chain's own pruning left: the block after the records it deleted
    /// from the bottom of the run, which so holds one itself (the run has no gaps).
    undo_tail_pruned: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// While `set_head` runs: its fork point, above which no record is pruned (the old
    /// branch may have to be put back); `u64::MAX` otherwise. Under the writer lock.
    undo_pin: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// The last block whose kept blob sidecars are deleted (`maintain::keep_blob_txs`).
    sidecar_cursor: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// The canonical head, published after each move ([`Chain::subscribe_heads`]).
    heads: std::sync::Arc<tokio::sync::watch::Sender<CanonHead>>,
    /// The block imported last, with the accounts it wrote, for the pool's upkeep that
    /// follows each import ([`Chain::just_imported`]): read back from the store it costs
    /// decoding a whole body and copying out the block's undo record.
    just_imported: std::sync::Arc<parking_lot::Mutex<Option<std::sync::Arc<JustImported>>>>,
}

/// A block as its import left it: immutable under its hash, so safe to hand out for as
/// long as it is the last one imported.
#[derive(Debug)]
pub struct JustImported {
    /// The block.
    pub block: Block,
    /// The accounts it wrote, as its undo record lists them.
    pub changed: Vec<alloy_primitives::Address>,
}

/// Publishes the store's head when dropped: the chain's entry points that move the head
/// hold one beside the writer lock, so a head is published once per move, after its
/// writes (a reorg's steps are not).
struct PublishHead<'a>(&'a Chain);

impl Drop for PublishHead<'_> {
    fn drop(&mut self) {
        self.0.publish_head();
    }
}

/// Entries the total-difficulty cache holds before it starts over.
const TD_CACHE: usize = 1024;

/// The EIP-7685 commitment to a block's requests.
pub fn requests_hash(requests: &[Bytes]) -> B256 {
    let mut outer = Sha256::new();
    for r in requests {
        outer.update(Sha256::digest(r));
    }
    B256::from_slice(&outer.finalize())
}

/// Entries (accounts, slots, trie nodes) per commit when a genesis state is written.
const GENESIS_CHUNK: usize = 100_000;

/// A datadir written before the state tries were stored has flat state only: its tries
/// are built once from it, checked against the head's state root, and committed.
fn build_missing_tries(store: &Store) -> Result<(), ChainError> {
    if store
        .trie_node(&crate::state_root::ACCOUNT_TRIE, &[])?
        .is_some()
    {
        return Ok(());
    }
    let Some((number, head)) = store.head()? else {
        return Ok(());
    };
    let header = store
        .header_rlp(&head)?
        .ok_or_else(|| ChainError::Corrupt(format!("head header {head} missing")))?;
    let header =
        Header::decode(&mut header.as_slice()).map_err(|e| ChainError::Corrupt(e.to_string()))?;
    let accounts = store.accounts()?;
    if accounts.is_empty() {
        return Ok(());
    }
    tracing::info!(
        accounts = accounts.len(),
        head = number,
        "building the state trie from the flat state (once)"
    );
    let mut state = Vec::with_capacity(accounts.len());
    for (address, account) in accounts {
        let slots = store.storage_slots(&address)?;
        state.push((address, account, slots));
    }
    let mut batch = WriteBatch::new();
    let root = build_tries(store, state, &mut batch)?;
    if root != header.state_root {
        return Err(ChainError::Corrupt(format!(
            "the flat state hashes to {root}, the head (#{number}) says {}",
            header.state_root
        )));
    }
    store.commit(batch)?;
    Ok(())
}

/// A genesis account's slots as the state takes them.
fn genesis_slots(account: &GenesisAccount) -> Vec<(B256, U256)> {
    account
        .storage
        .iter()
        .map(|(slot, value)| (*slot, U256::from_be_bytes(value.0)))
        .collect()
}

/// The stored state must be the head's: its trie root is the head header's state root.
/// Each block commits atomically, so anything else is damage, reported before use.
fn check_state_root(store: &Store) -> Result<(), ChainError> {
    let Some((number, head)) = store.head()? else {
        return Ok(());
    };
    let Some(rlp) = store.header_rlp(&head)? else {
        return Err(ChainError::Corrupt(format!("head header {head} missing")));
    };
    let header =
        Header::decode(&mut rlp.as_slice()).map_err(|e| ChainError::Corrupt(e.to_string()))?;
    let root = crate::state_root::stored_state_root(store)?;
    if root != header.state_root {
        return Err(ChainError::Corrupt(format!(
            "the stored state hashes to {root}, the head (#{number}) says {}",
            header.state_root
        )));
    }
    Ok(())
}

impl Chain {
    /// Opens the chain in `store`, writing genesis first if the store is empty.
    pub fn init(store: Store, genesis: &Genesis) -> Result<Self, ChainError> {
        let header = genesis.header();
        if store.chain_meta()?.is_none() {
            // The state first, in bounded commits; the block that makes it a chain
            // (meta, header, head) last: a crash before that leaves no chain, and the
            // next attempt starts over.
            let mut writer = GenesisStateWriter::new(&store, GENESIS_CHUNK, None)?;
            for (address, account) in &genesis.alloc {
                writer.add(
                    *address,
                    account.nonce,
                    account.balance,
                    account.code.clone(),
                    &genesis_slots(account),
                )?;
            }
            let root = writer.finish()?;
            if root != header.state_root {
                return Err(ChainError::Corrupt(format!(
                    "the genesis allocation hashes to {root}, its header says {}",
                    header.state_root
                )));
            }
        }
        Self::open_at_genesis(store, genesis, header)
    }

    /// [`Chain::init`] from a genesis file, streamed: neither the file nor the state is
    /// held whole, whatever its size. An empty store gets the allocation written as it is
    /// read (`scratch`: a directory for the account leaves on their way to the trie,
    /// removed after); a store that holds a chain has its stored genesis checked against
    /// the file's header fields and state root (the allocation is not read again, so a
    /// changed allocation whose root is the stored one cannot be told apart, as with any
    /// hash).
    pub fn init_from_file(store: Store, path: &Path, scratch: &Path) -> Result<Self, ChainError> {
        let config_err = |source| ChainError::GenesisFile {
            path: path.to_owned(),
            source,
        };
        if store.chain_meta()?.is_some() {
            let genesis = Genesis::stream_file(path, AllocEntries::Skip).map_err(config_err)?;
            let root = match store.canonical_hash(genesis.number)? {
                Some(hash) => {
                    let rlp = store.header_rlp(&hash)?.ok_or_else(|| {
                        ChainError::Corrupt(format!("genesis header {hash} missing"))
                    })?;
                    Header::decode(&mut rlp.as_slice())
                        .map_err(|e| ChainError::Corrupt(e.to_string()))?
                        .state_root
                }
                None => {
                    return Err(ChainError::Corrupt(format!(
                        "no genesis block (#{}) in the datadir",
                        genesis.number
                    )));
                }
            };
            let header = genesis.header_with_state_root(root);
            return Self::open_at_genesis(store, &genesis, header);
        }
        let mut writer = GenesisStateWriter::new(&store, GENESIS_CHUNK, Some(scratch))?;
        let mut add = |address, account: GenesisAccount| {
            let slots = genesis_slots(&account);
            writer
                .add(
                    address,
                    account.nonce,
                    account.balance,
                    account.code,
                    &slots,
                )
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let genesis =
            Genesis::stream_file(path, AllocEntries::Parse(&mut add)).map_err(config_err)?;
        let accounts = writer.accounts();
        let root = writer.finish()?;
        tracing::info!(accounts, %root, "genesis state written");
        let header = genesis.header_with_state_root(root);
        Self::open_at_genesis(store, &genesis, header)
    }

    /// Opens the chain whose genesis block is `header`: an empty store (its genesis
    /// state already written) gets the block that makes it a chain; a store that holds a
    /// chain must hold this genesis.
    fn open_at_genesis(
        store: Store,
        genesis: &Genesis,
        header: Header,
    ) -> Result<Self, ChainError> {
        let hash = header.hash();
        let meta = ChainMeta {
            chain_id: genesis.config.chain_id,
            genesis_hash: hash,
        };
        match store.chain_meta()? {
            Some(found) if found.genesis_hash != hash => {
                return Err(ChainError::GenesisMismatch {
                    expected: hash,
                    found: found.genesis_hash,
                });
            }
            Some(_) => {
                build_missing_tries(&store)?;
                check_state_root(&store)?;
            }
            None => {
                let mut batch = WriteBatch::new();
                batch.set_meta(meta);
                let block = Block {
                    hash,
                    withdrawals: header.withdrawals_root.map(|_| Vec::new()),
                    header: header.clone(),
                    transactions: Vec::new(),
                    ommers: Vec::new(),
                };
                batch
                    .put_header(hash, header.number, header.encoded())
                    .put_body(hash, block.encode_body())
                    .put_receipts(hash, receipt::encode_receipts(&[]))
                    .set_canonical(header.number, hash)
                    .set_head(header.number, hash);
                store.commit(batch)?;
            }
        }
        let head = store.head()?.unwrap_or((0, hash));
        Ok(Self {
            heads: std::sync::Arc::new(
                tokio::sync::watch::channel(CanonHead {
                    seq: 0,
                    number: head.0,
                    hash: head.1,
                })
                .0,
            ),
            store,
            config: genesis.config.clone(),
            genesis_hash: hash,
            senders: None,
            prewarm: true,
            writer: Default::default(),
            td_cache: Default::default(),
            undo_window: UndoWindow::default(),
            undo_tail: std::sync::Arc::new(undo_window::UNKNOWN.into()),
            undo_tail_pruned: std::sync::Arc::new(undo_window::UNKNOWN.into()),
            undo_pin: std::sync::Arc::new(u64::MAX.into()),
            sidecar_cursor: std::sync::Arc::new(undo_window::UNKNOWN.into()),
            just_imported: Default::default(),
        })
    }

    /// Block `hash` and the accounts it wrote, if it is the block imported last.
    pub fn just_imported(&self, hash: &B256) -> Option<std::sync::Arc<JustImported>> {
        self.just_imported
            .lock()
            .as_ref()
            .filter(|j| j.block.hash == *hash)
            .cloned()
    }

    /// The canonical head after each move: a block imported, a reorg, a rewind, a head a
    /// sync wrote. A `watch`: a slow reader sees the newest head, with `seq` counting the
    /// moves (the pool's upkeep task, `moat_mempool::maintain`, reads it).
    pub fn subscribe_heads(&self) -> tokio::sync::watch::Receiver<CanonHead> {
        self.heads.subscribe()
    }

    /// Publishes the store's head if it moved since the last publication. The chain's
    /// own entry points call it; a writer that sets the head in the store directly (snap
    /// sync's pivot) calls it after its commit.
    pub fn publish_head(&self) {
        let Ok(Some((number, hash))) = self.store.head() else {
            return;
        };
        self.heads.send_if_modified(|h| {
            if h.hash == hash {
                return false;
            }
            *h = CanonHead {
                seq: h.seq + 1,
                number,
                hash,
            };
            true
        });
    }

    /// Runs a call on the head's post-state, in the head's block environment (eth_call).
    pub fn call(&self, req: &vm::CallRequest) -> Result<vm::CallOutcome, VmError> {
        let head = self
            .head_header()
            .map_err(|e| VmError::State(e.to_string()))?;
        vm::call(
            &self.config,
            &head,
            req,
            &StateAtBlock::head(self.store.clone()),
        )
    }

    /// The least gas `req` needs on the head's post-state (eth_estimateGas), or how it
    /// fails at the gas cap.
    pub fn estimate_gas(
        &self,
        req: &vm::CallRequest,
    ) -> Result<Result<u64, vm::CallOutcome>, VmError> {
        let head = self
            .head_header()
            .map_err(|e| VmError::State(e.to_string()))?;
        vm::estimate_gas(
            &self.config,
            &head,
            req,
            &StateAtBlock::head(self.store.clone()),
        )
    }

    /// [`Chain::call`] on the state after canonical block `number` (back to
    /// [`Chain::undo_floor`]). The outer error is about the block's state, the inner one
    /// about the call.
    #[allow(clippy::type_complexity)]
    pub fn call_at(
        &self,
        number: u64,
        req: &vm::CallRequest,
    ) -> Result<Result<vm::CallOutcome, VmError>, ChainError> {
        let header = self
            .header_by_number(number)?
            .ok_or_else(|| ChainError::Corrupt(format!("no canonical block {number}")))?;
        let state = self.state_at(number)?;
        Ok(vm::call(&self.config, &header, req, &state))
    }

    /// [`Chain::estimate_gas`] on the state after canonical block `number`.
    #[allow(clippy::type_complexity)]
    pub fn estimate_gas_at(
        &self,
        number: u64,
        req: &vm::CallRequest,
    ) -> Result<Result<Result<u64, vm::CallOutcome>, VmError>, ChainError> {
        let header = self
            .header_by_number(number)?
            .ok_or_else(|| ChainError::Corrupt(format!("no canonical block {number}")))?;
        let state = self.state_at(number)?;
        Ok(vm::estimate_gas(&self.config, &header, req, &state))
    }

    /// Reads senders from (and records them in) the pool's sender cache.
    pub fn with_sender_cache(mut self, cache: SenderCache) -> Self {
        self.senders = Some(cache);
        self
    }

    /// Whether block import runs a prewarm thread beside each block's execution (on by
    /// default; it does nothing on one core).
    pub fn with_prewarm(mut self, on: bool) -> Self {
        self.prewarm = on;
        self
    }

    /// The store the chain reads and commits to.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The chain's configuration (fork schedule, chain id) from its genesis.
    pub fn config(&self) -> &ChainConfig {
        &self.config
    }

    /// Hash of block 0 of this chain.
    pub fn genesis_hash(&self) -> B256 {
        self.genesis_hash
    }

    /// (number, hash) of the head.
    pub fn head(&self) -> Result<(u64, B256), ChainError> {
        self.store
            .head()?
            .ok_or_else(|| ChainError::Corrupt("no head in an initialised store".into()))
    }

    /// The header of stored block `hash`, canonical or not; `None` if not stored.
    pub fn header(&self, hash: &B256) -> Result<Option<Header>, ChainError> {
        let Some(rlp) = self.store.header_rlp(hash)? else {
            return Ok(None);
        };
        Header::decode(&mut &rlp[..])
            .map(Some)
            .map_err(|e| ChainError::Corrupt(format!("header {hash}: {e}")))
    }

    /// The header of canonical block `number`; `None` above the head.
    pub fn header_by_number(&self, number: u64) -> Result<Option<Header>, ChainError> {
        match self.store.canonical_hash(number)? {
            Some(hash) => self.header(&hash),
            None => Ok(None),
        }
    }

    /// The head block's header.
    pub fn head_header(&self) -> Result<Header, ChainError> {
        let (_, hash) = self.head()?;
        self.header(&hash)?
            .ok_or_else(|| ChainError::Corrupt(format!("head header {hash} missing")))
    }

    /// Stored block `hash` (header and body), canonical or not; `None` if not stored.
    pub fn block(&self, hash: &B256) -> Result<Option<Block>, ChainError> {
        let (Some(h), Some(b)) = (self.store.header_rlp(hash)?, self.store.body_rlp(hash)?) else {
            return Ok(None);
        };
        Block::from_parts(&h, &b)
            .map(Some)
            .map_err(|e| ChainError::Corrupt(format!("block {hash}: {e}")))
    }

    /// The receipts of stored block `hash`, in transaction order; `None` if not stored.
    pub fn receipts(&self, hash: &B256) -> Result<Option<Vec<Receipt>>, ChainError> {
        let Some(rlp) = self.store.receipts_rlp(hash)? else {
            return Ok(None);
        };
        receipt::decode_receipts(&rlp)
            .map(Some)
            .map_err(|e| ChainError::Corrupt(format!("receipts {hash}: {e}")))
    }

    /// Whether `hash` is on the canonical chain.
    pub fn is_canonical(&self, hash: &B256) -> Result<bool, ChainError> {
        let Some(number) = self.store.block_number(hash)? else {
            return Ok(false);
        };
        Ok(self.store.canonical_hash(number)? == Some(*hash))
    }

    /// The stored parent of `block`, or [`ChainError::UnknownParent`].
    fn parent_of(&self, block: &Block) -> Result<Header, ChainError> {
        self.header(&block.header.parent_hash)?
            .ok_or(ChainError::UnknownParent {
                number: block.header.number,
                hash: block.hash,
                parent: block.header.parent_hash,
            })
    }

    /// The total difficulty of the chain up to and including `header` (summed from
    /// genesis the first time, then from the cache).
    pub fn total_difficulty(&self, header: &Header) -> Result<U256, ChainError> {
        let hash = header.hash();
        let mut cache = self.td_cache.lock();
        if let Some(td) = cache.get(&hash) {
            return Ok(*td);
        }
        let mut sum = U256::ZERO;
        let mut cursor = header.clone();
        loop {
            sum = sum.saturating_add(cursor.difficulty);
            if cursor.number == 0 {
                break;
            }
            if let Some(td) = cache.get(&cursor.parent_hash) {
                sum = sum.saturating_add(*td);
                break;
            }
            cursor = self.header(&cursor.parent_hash)?.ok_or_else(|| {
                ChainError::Corrupt(format!("ancestor {} missing", cursor.parent_hash))
            })?;
        }
        if cache.len() >= TD_CACHE {
            cache.clear();
        }
        cache.insert(hash, sum);
        Ok(sum)
    }

    /// The rules of the proof-of-work era that need the chain: the terminal total
    /// difficulty (a proof-of-work block only while the parent's total difficulty is
    /// below it, a proof-of-stake block only once it is reached) and the ommers.
    fn check_pow_rules(&self, block: &Block, parent: &Header) -> Result<(), ChainError> {
        let (number, hash) = (block.header.number, block.hash);
        let invalid = |reason: String| ChainError::Invalid {
            number,
            hash,
            reason,
        };
        let fork = premerge::block_fork(&self.config, &block.header);
        if let Some(ttd) = self.config.terminal_total_difficulty
            && !ttd.is_zero()
            && fork <= Fork::Paris
        {
            // A proof-of-stake parent was itself checked to be past the terminal
            // total difficulty: no need to sum the chain.
            let reached = if parent.difficulty.is_zero() && parent.number > 0 {
                true
            } else {
                self.total_difficulty(parent)? >= ttd
            };
            if premerge::is_pow(fork) && reached {
                return Err(invalid(format!(
                    "proof-of-work block past the terminal total difficulty {ttd}"
                )));
            }
            if !premerge::is_pow(fork) && !reached {
                return Err(invalid(format!(
                    "proof-of-stake block before the terminal total difficulty {ttd}"
                )));
            }
        }
        if premerge::is_pow(fork) && !block.ommers.is_empty() {
            let mut ancestry = premerge::Ancestry::default();
            let mut cursor = Some(parent.clone());
            while let Some(header) = cursor.take() {
                if ancestry.ancestors.len() as u64 >= premerge::MAX_OMMER_DEPTH {
                    break;
                }
                if header.ommers_hash != moat_common::constants::EMPTY_OMMERS_HASH {
                    let ancestor = self
                        .block(&header.hash())?
                        .ok_or_else(|| ChainError::Corrupt("ancestor body missing".into()))?;
                    ancestry
                        .ancestor_ommers
                        .extend(ancestor.ommers.iter().map(|o| o.hash()));
                }
                if header.number > 0 {
                    cursor = self.header(&header.parent_hash)?;
                }
                ancestry.ancestors.push(header);
            }
            premerge::validate_ommers(&self.config, &block.header, hash, &block.ommers, &ancestry)
                .map_err(|e| invalid(e.to_string()))?;
        }
        Ok(())
    }

    /// Stores a block off the canonical chain after the checks its parent allows
    /// (header rules, roots of the body); it is executed if a reorg makes it canonical.
    pub fn store_side_block(&self, block: &Block) -> Result<(), ChainError> {
        let _writer = self.writer.lock();
        let (number, hash) = (block.header.number, block.hash);
        if self.store.block_number(&hash)?.is_some() {
            return Ok(());
        }
        let parent = self.parent_of(block)?;
        validate_header(&self.config, &parent, block).map_err(|error| ChainError::Header {
            number,
            hash,
            error,
        })?;
        let mut batch = WriteBatch::new();
        batch
            .put_header(hash, number, block.header.encoded())
            .put_body(hash, block.encode_body());
        self.store.commit(batch)?;
        Ok(())
    }

    /// Makes the stored block `target` the head: the canonical blocks above the fork
    /// point are taken back (their undo records restore the state), then the blocks of
    /// `target`'s branch are executed in order. If one of those is invalid, the old
    /// branch is put back and the error returned. A `target` already on the canonical
    /// chain below the head changes nothing (the consensus client is catching up).
    ///
    /// The fork point may be any block from [`Chain::oldest_undoable`] up: one below the
    /// finalized block is refused ([`ChainError::BelowFinalized`]), one the undo records
    /// no longer reach too ([`ChainError::ReorgTooDeep`]).
    ///
    /// Each block taken back or added is its own atomic commit, so a crash leaves a
    /// consistent chain at some point on the way.
    pub fn set_head(&self, target: B256) -> Result<HeadChange, ChainError> {
        let _writer = self.writer.lock();
        let _publish = PublishHead(self);
        let (_, head_hash) = self.head()?;
        if target == head_hash || self.is_canonical(&target)? {
            return Ok(HeadChange::default());
        }
        let finalized = self.finalized_floor()?;
        let floor = self.undo_floor()?;
        let oldest = floor.max(finalized);
        // The new branch, from `target` down to the first canonical ancestor; past the
        // oldest fork point allowed only the headers are walked, for the error.
        let mut branch = Vec::new();
        let mut cursor = target;
        let fork_point = loop {
            let header = self
                .header(&cursor)?
                .ok_or(ChainError::UnknownBlock(cursor))?;
            if self.store.canonical_hash(header.number)? == Some(cursor) {
                break header.number;
            }
            if header.number > oldest {
                branch.push(cursor);
            }
            cursor = header.parent_hash;
        };
        if fork_point < finalized {
            return Err(ChainError::BelowFinalized {
                fork_point,
                finalized,
            });
        }
        if fork_point < floor {
            return Err(ChainError::ReorgTooDeep {
                fork_point,
                oldest: floor,
            });
        }
        let mut blocks = Vec::with_capacity(branch.len());
        for hash in branch.iter().rev() {
            blocks.push(self.block(hash)?.ok_or(ChainError::UnknownBlock(*hash))?);
        }
        // A long new branch moves the floor up as it is imported: its records above the
        // fork point stay until it is in, in case the old branch has to be put back.
        let _pin = undo_window::Pin::new(&self.undo_pin, fork_point);
        let removed = self.unwind_to(fork_point)?;
        let mut added = Vec::with_capacity(blocks.len());
        for block in blocks {
            if let Err(e) = self.import_locked(&block) {
                // Back to where we were; the old blocks were valid before.
                self.unwind_to(fork_point)?;
                for old in &removed {
                    self.import_locked(old)?;
                }
                return Err(e);
            }
            added.push(block);
        }
        Ok(HeadChange { removed, added })
    }

    /// Takes canonical blocks above `number` back, head first; returns them oldest first.
    fn unwind_to(&self, number: u64) -> Result<Vec<Block>, ChainError> {
        let (head, _) = self.head()?;
        let mut removed = Vec::new();
        for n in (number + 1..=head).rev() {
            let hash = self
                .store
                .canonical_hash(n)?
                .ok_or_else(|| ChainError::Corrupt(format!("no canonical block {n}")))?;
            let block = self
                .block(&hash)?
                .ok_or_else(|| ChainError::Corrupt(format!("canonical block {n} missing")))?;
            let Some(record) = self.store.undo(&hash)? else {
                return Err(ChainError::ReorgTooDeep {
                    fork_point: number,
                    oldest: n,
                });
            };
            let undo = Undo::decode(&record)
                .map_err(|e| ChainError::Corrupt(format!("undo record of {hash}: {e}")))?;
            let mut batch = WriteBatch::new();
            undo.apply(&mut batch);
            for tx in &block.transactions {
                batch.delete_tx_location(tx.hash());
            }
            batch
                .delete_undo(hash)
                .unset_canonical_above(n - 1)
                .set_head(n - 1, block.header.parent_hash);
            self.store.commit(batch)?;
            removed.push(block);
        }
        removed.reverse();
        Ok(removed)
    }

    /// Validates, executes and stores `block` as the new head.
    pub fn import(&self, block: &Block) -> Result<ImportOutcome, ChainError> {
        let _writer = self.writer.lock();
        let _publish = PublishHead(self);
        self.import_locked(block)
    }

    /// [`Chain::import`] for a caller that holds the writer lock.
    fn import_locked(&self, block: &Block) -> Result<ImportOutcome, ChainError> {
        if self.is_canonical(&block.hash)? {
            return Ok(ImportOutcome::AlreadyKnown);
        }
        let (number, hash) = (block.header.number, block.hash);
        let parent = self.parent_of(block)?;
        let (_, head) = self.head()?;
        if head != block.header.parent_hash {
            return Err(ChainError::NotOnHead { number, hash, head });
        }
        validate_header(&self.config, &parent, block).map_err(|error| ChainError::Header {
            number,
            hash,
            error,
        })?;
        self.check_pow_rules(block, &parent)?;

        // The second core is the flusher's while earlier blocks wait to be written
        // (blocks coming back to back): a prewarm thread running ahead would only slow
        // both down. (Without one, the senders' helpers have every core but the
        // executor's.) The trie thread, which mostly waits for the disk, runs either way.
        let warming = self.prewarm && vm::worth_prewarming(&self.config, block);
        let ahead = warming && self.store.pending_commits().0 == 0;
        self.with_senders(block, ahead, |senders| {
            let executed = self.execute_on_head(block, senders, warming.then_some(ahead));
            import_phase_took("senders", senders.waited());
            match executed {
                Ok((executed, update)) => {
                    let started = Instant::now();
                    self.commit_executed(block, &executed.receipts, executed.changes, update)?;
                    import_phase("commit", started);
                    Ok(ImportOutcome::Imported {
                        number,
                        hash,
                        gas_used: executed.gas_used,
                    })
                }
                Err(e @ (ChainError::Mismatch { .. } | ChainError::Invalid { .. })) => {
                    // Before a block is called invalid, the flat state it was executed on
                    // is checked against the state trie: a rotted value there is damage in
                    // the file, not a fault of the block.
                    crate::verify::confirm_flat_reads(&self.config, &self.store, block, senders)
                        .inspect_err(|e| {
                            if let ChainError::Store(StoreError::Corrupt(why)) = e {
                                self.note_damage(why);
                            }
                        })?;
                    Err(e)
                }
                Err(e) => Err(e),
            }
        })
    }

    /// Records damage met under the writer lock, unless a snap sync is under way: its
    /// download replaces the tries below genesis' root, so a block the engine API
    /// imports on genesis' state meets nodes that are not genesis' (the syncer drops the
    /// download when that happens), which is no damage of the file.
    fn note_damage(&self, why: &str) {
        let syncing = self.store.snap_progress().map_or(true, |p| p.is_some())
            || self.store.snap_heal().map_or(true, |h| h.is_some());
        if !syncing {
            self.store.note_damage(why.to_string());
        }
    }

    /// Executes `block` on the head's state and checks what it gives against its
    /// header: the receipts, state changes and the state update to commit. `prewarm`:
    /// with the trie thread beside it, and (`Some(true)`) the thread running ahead.
    fn execute_on_head(
        &self,
        block: &Block,
        senders: &senders::Recovering<'_>,
        prewarm: Option<bool>,
    ) -> Result<(vm::ExecutedBlock, crate::state_root::StateUpdate), ChainError> {
        let (number, hash) = (block.header.number, block.hash);
        let state = StateAtBlock::head(self.store.clone());
        let started = Instant::now();
        let executed = if let Some(ahead) = prewarm {
            vm::execute_block_prewarmed(&self.config, block, senders, &state, ahead).map(
                |(executed, stats)| {
                    metrics::counter!("moat_block_prewarm_reads_total", "from" => "warm")
                        .increment(stats.warm_reads);
                    metrics::counter!("moat_block_prewarm_reads_total", "from" => "store")
                        .increment(stats.cold_reads);
                    executed
                },
            )
        } else {
            vm::execute_block_with(&self.config, block, senders, &state)
        }
        .map_err(|e| match e {
            VmError::State(s) => ChainError::State(s),
            other => ChainError::Invalid {
                number,
                hash,
                reason: other.to_string(),
            },
        })?;

        let h = &block.header;
        let mismatch = |error: ExecutionMismatch| {
            Err(ChainError::Mismatch {
                number,
                hash,
                error,
            })
        };
        if executed.gas_used != h.gas_used {
            return mismatch(ExecutionMismatch::GasUsed {
                expected: executed.gas_used,
                found: h.gas_used,
            });
        }
        if let Some(used) = h.blob_gas_used
            && used != executed.blob_gas_used
        {
            return mismatch(ExecutionMismatch::BlobGasUsed {
                expected: executed.blob_gas_used,
                found: used,
            });
        }
        let receipts_root = receipt::receipts_root(&executed.receipts);
        if receipts_root != h.receipts_root {
            return mismatch(ExecutionMismatch::ReceiptsRoot {
                expected: receipts_root,
                found: h.receipts_root,
            });
        }
        let bloom = executed
            .receipts
            .iter()
            .fold(Bloom::ZERO, |acc, r| acc | r.bloom());
        if bloom != h.logs_bloom {
            return mismatch(ExecutionMismatch::LogsBloom {
                expected: Box::new(bloom),
                found: Box::new(h.logs_bloom),
            });
        }
        if let Some(found) = h.requests_hash {
            let expected = requests_hash(&executed.requests);
            if expected != found {
                return mismatch(ExecutionMismatch::RequestsHash { expected, found });
            }
        }
        // The txs' run, less the executor's wait for their senders (its own phase).
        import_phase_took(
            "execute",
            started.elapsed().saturating_sub(senders.waited()),
        );
        // Under the writer lock no commit moves the trie under this read: a node that
        // does not hash to what its parent names is damage in the file.
        let started = Instant::now();
        let update = state_update(&self.store, &executed.changes).inspect_err(|e| {
            if let StoreError::Corrupt(why) = e {
                self.note_damage(why);
            }
        })?;
        import_phase("root", started);
        if update.root != h.state_root {
            return mismatch(ExecutionMismatch::StateRoot {
                expected: update.root,
                found: h.state_root,
            });
        }
        Ok((executed, update))
    }

    /// Stores an executed `block` as the new head in one write: header, body, receipts,
    /// indices, its undo record, the trie nodes and the flat state of `changes`.
    fn commit_executed(
        &self,
        block: &Block,
        receipts: &[Receipt],
        changes: Vec<vm::AccountChange>,
        update: crate::state_root::StateUpdate,
    ) -> Result<(), ChainError> {
        let (number, hash, h) = (block.header.number, block.hash, &block.header);
        let mut batch = WriteBatch::new();
        let changed = update.undo.accounts.iter().map(|(a, _)| *a).collect();
        batch.put_undo(hash, update.undo.encode());
        update.write_trie(&mut batch);
        // The records that leave the window with this block (and, after a finality
        // jump, a bounded share of those left behind) go in the same commit.
        let pruned = self.prune_undo(&mut batch, number, self.finalized_number()?)?;
        batch
            .put_header(hash, number, h.encoded())
            .put_body(hash, block.encode_body())
            .put_receipts(hash, receipt::encode_receipts(receipts))
            .set_canonical(number, hash)
            .set_head(number, hash);
        for (index, tx) in block.transactions.iter().enumerate() {
            batch.put_tx_location(
                tx.hash(),
                TxLocation {
                    block_hash: hash,
                    block_number: number,
                    index: index as u64,
                },
            );
        }
        for (address, account) in update.accounts {
            batch.set_account(address, account);
        }
        for change in changes {
            if change.storage_wiped {
                batch.wipe_storage(change.address);
            }
            for (slot, value) in change.storage {
                batch.set_storage(change.address, slot, value);
            }
            if let (Some(code), Some(info)) = (change.new_code, change.info) {
                batch.put_code(info.code_hash, code);
            }
        }
        // Relaxed: written behind and synced by the store's flusher beside the next
        // block. A crash reopens at an earlier head whose state matches it, and the
        // blocks come again.
        self.store.commit_relaxed(batch)?;
        self.pruned_to(pruned);
        *self.just_imported.lock() = Some(std::sync::Arc::new(JustImported {
            block: block.clone(),
            changed,
        }));
        Ok(())
    }
}

/// Records how long one phase of a block's import took, in
/// `moat_block_import_seconds{phase}`: `senders` (the executor's wait for the senders,
/// recovered beside it or read from the cache), `execute` (the txs, with receipts and
/// bloom checked, less that wait), `root` (the state trie updated and
/// hashed) and `commit` (the block and its state handed to the store). An import that
/// fails records the phases it finished. (The engine API records a fifth, `pool`:
/// newPayload's wait for the pool's upkeep.)
fn import_phase(phase: &'static str, started: Instant) {
    import_phase_took(phase, started.elapsed());
}

/// [`import_phase`] for a phase that took `took`.
fn import_phase_took(phase: &'static str, took: std::time::Duration) {
    metrics::histogram!("moat_block_import_seconds", "phase" => phase).record(took);
}
