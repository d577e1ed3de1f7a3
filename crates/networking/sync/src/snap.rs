//! Snap sync: the state at a pivot block downloaded as proven ranges, the tries built
//! from it, and the pivot made the head, so that full sync only executes the last
//! stretch.
//!
//! ```text
//!  pivot      target − 64 (the target itself on a shorter chain): its header walked
//!             back from the target by hash, its body fetched
//!  accounts   the hash space in CHUNKS chunks (one per first nibble), one
//!             GetAccountRange in flight per peer; each answer checked against its
//!             boundary proof and the pivot's state root, then written (snap_accounts)
//!             with the chunk's new start and the nodes of the account trie below the
//!             root that it finishes (ChunkTrie): one commit
//!  storage    accounts with a storage root, in hash order, up to 128 per
//!             GetStorageRanges; every complete trie checked whole against its root,
//!             a partial last one against its proof and continued alone in chunks;
//!             written (snap_storage) with the cursor below which all is done
//!  codes      GetByteCodes for the code hashes not yet held, each checked by its hash
//!  heal       only after a pivot move: the tries of what is held built unchecked,
//!             then healed to the pivot's root with GetTrieNodes (see below), then the
//!             codes of healed accounts
//!  tries      per account, its storage trie over its slots (SortedBuilder), checked
//!             against its storage root; then the account trie's root branch over the
//!             16 chunks' nodes at [i] (the account trie built whole after a pivot
//!             move), checked against the pivot's state root; the flat by-address state
//!             of genesis is dropped
//!  head       the pivot's header, body, canonical entry and the head: one commit that
//!             also removes the progress record
//! ```
//!
//! The progress record ([`Progress`], in the store's meta table) is written in the same
//! commit as every range it covers, so a node killed at any point resumes at the stage
//! and boundaries it had reached, never before. A peer whose proof does not verify is
//! dropped (reported to the source as a fault); one that answers empty for the pivot's
//! root (it no longer serves that state) is rested, and when every peer does so for a
//! while the pivot is stale: the sync gives up on it with [`SnapError::Stale`] and the
//! caller picks a new pivot.
//!
//! Healing. After a pivot move the record keeps its stage, chunk starts and storage
//! cursor; the rest of the ranges come at the new root ([`Progress::heal`] set). In the
//! storage stage an account's recorded storage root may be an older root's (or the
//! account gone): an answer that fails its proof then keeps the whole tries leading it,
//! asks the first failing account alone and leaves it to healing if it fails again (no
//! fault: healing checks every node by hash). Then the tries are built from the flat
//! state without checks (the account trie's root node is not written: the store keeps
//! genesis' root until the end) and walked from the new root: a node is asked for
//! (`GetTrieNodes` by path, [`HEAL_BATCH`] a request) when the local trie has another
//! node, or none, at its path; a node is taken only if it hashes to what its parent
//! names. From each healed node the flat state is patched: a leaf's account or slot is
//! written, and flat entries under the node's path that it no longer holds (an empty
//! branch slot, off an extension's key, another key under a leaf; an account's slots
//! with it) are deleted. The account trie first, then every storage trie whose stored
//! root is not its account's. The patches are committed every [`HEAL_COMMIT_EVERY`]
//! answers, each commit with healing's record ([`HealRecord`]: the root, the phase, and
//! every node asked for, queued or found and not yet taken). A node killed while
//! healing resumes from that record: the tries built unchecked are still stored (the
//! record is written only after they are), so it neither builds them again nor asks
//! again a node whose patches were committed. Then the codes stage runs again and the
//! tries are built checked as without a move.

use crate::source::BlockSource;
use alloy_primitives::{B256, Bytes, KECCAK256_EMPTY, U256, keccak256};
use moat_blockchain::chain::Chain;
use moat_blockchain::state_root::account_leaf;
use moat_common::block::Block;
use moat_common::rlp;
use moat_p2p::rlpx::PeerId;
use moat_p2p::snap::{SnapMessage, full_account};
use moat_p2p::{HeadersRequest, RequestError, SealedHeader};
use moat_storage::{Account, StoreError, WriteBatch};
use moat_trie::range::verify_range_proof;
use moat_trie::{EMPTY_ROOT, NodeView, SortedBuilder, compact_path, view_node};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// How far behind the target the pivot sits.
pub const PIVOT_DISTANCE: u64 = 64;
/// Chunks the account hash space is split into: one per first nibble of the key, so
/// that the account trie below path `[i]` is chunk `i`'s alone ([`ChunkTrie`]).
const CHUNKS: usize = 16;
/// Accounts read from the store at a time while the tries are built.
const ACCOUNTS_PAGE: usize = 8192;
/// Code hashes per bytecode request.
const CODE_BATCH: usize = 256;
/// Trie nodes per commit while the tries are built.
const NODES_PER_COMMIT: usize = 50_000;
/// How long a peer that answered empty (or failed) is not asked again.
const REST: Duration = Duration::from_secs(2);
/// Empty answers since the last useful one after which the pivot counts as stale, once
/// every snap peer has failed since that answer too. Few enough that a node with one
/// peer finds the pivot stale (a peer is asked once a `REST`) before `give_up_after`.
const STALE_AFTER: u32 = 8;
/// Version byte of the progress record (1: without the healing flag, still read).
const RECORD_VERSION: u8 = 2;
/// Trie nodes asked per `GetTrieNodes` while healing.
pub const HEAL_BATCH: usize = 128;
/// Healed answers between two commits of the flat state's patches.
pub const HEAL_COMMIT_EVERY: usize = 16;

/// How the snap stage works.
#[derive(Debug, Clone)]
pub struct SnapConfig {
    /// The byte budget of each request (`responseBytes`).
    pub response_bytes: u64,
    /// Between two progress lines.
    pub progress_every: Duration,
    /// How long without a useful answer before the stage gives up ([`SnapError::NoPeers`]).
    pub give_up_after: Duration,
    /// How long to wait for a first peer that speaks snap/1.
    pub snap_peer_wait: Duration,
    /// Accounts per storage request.
    pub storage_batch: usize,
    /// Healed answers between two commits of the flat state's patches and healing's
    /// record ([`HEAL_COMMIT_EVERY`]).
    pub heal_commit_every: usize,
}

impl Default for SnapConfig {
    fn default() -> Self {
        Self {
            response_bytes: 512 * 1024,
            progress_every: Duration::from_secs(8),
            give_up_after: Duration::from_secs(60),
            snap_peer_wait: Duration::from_secs(10),
            storage_batch: 128,
            heal_commit_every: HEAL_COMMIT_EVERY,
        }
    }
}

/// Why the snap stage stopped short.
#[derive(Debug, thiserror::Error)]
pub enum SnapError {
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("no peer serves the pivot's state any more")]
    Stale,
    #[error("no snap peer")]
    NoPeers,
    #[error("pivot: {0}")]
    Pivot(String),
    #[error("built trie does not match: {0}")]
    Mismatch(String),
}

/// The stage a snap sync is at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Accounts,
    Storage,
    Codes,
    Tries,
}

impl Stage {
    fn byte(self) -> u8 {
        match self {
            Stage::Accounts => 0,
            Stage::Storage => 1,
            Stage::Codes => 2,
            Stage::Tries => 3,
        }
    }

    fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(Stage::Accounts),
            1 => Some(Stage::Storage),
            2 => Some(Stage::Codes),
            3 => Some(Stage::Tries),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Stage::Accounts => "accounts",
            Stage::Storage => "storage",
            Stage::Codes => "codes",
            Stage::Tries => "tries",
        }
    }
}

/// One chunk of the account hash space: `next` is where its download goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub next: B256,
    pub limit: B256,
    pub done: bool,
}

/// What the store keeps of a snap sync under way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub pivot_number: u64,
    pub pivot_hash: B256,
    pub state_root: B256,
    pub stage: Stage,
    pub chunks: Vec<Chunk>,
    /// Every account whose hash is below this has all its storage.
    pub storage_cursor: B256,
    pub accounts: u64,
    pub slots: u64,
    pub codes: u64,
    pub bytes: u64,
    /// The pivot moved during the download: the ranges held come from older roots, so
    /// the tries built from them are healed to the pivot's root.
    pub heal: bool,
}

fn b256_after(h: &B256) -> Option<B256> {
    let v = U256::from_be_bytes(h.0);
    v.checked_add(U256::from(1))
        .map(|n| B256::from(n.to_be_bytes()))
}

/// The first key of chunk `i`: the keys whose first nibble is `i`.
fn chunk_start(i: usize) -> B256 {
    let mut b = [0u8; 32];
    b[0] = (i as u8) << 4;
    B256::from(b)
}

/// The last key of chunk `i`.
fn chunk_limit(i: usize) -> B256 {
    let mut b = [0xffu8; 32];
    b[0] = ((i as u8) << 4) | 0x0f;
    B256::from(b)
}

impl Progress {
    fn new(pivot: &SealedHeader) -> Self {
        let chunks = (0..CHUNKS)
            .map(|i| Chunk {
                next: chunk_start(i),
                limit: chunk_limit(i),
                done: false,
            })
            .collect();
        Self {
            pivot_number: pivot.number(),
            pivot_hash: pivot.hash,
            state_root: pivot.header.state_root,
            stage: Stage::Accounts,
            chunks,
            storage_cursor: B256::ZERO,
            accounts: 0,
            slots: 0,
            codes: 0,
            bytes: 0,
            heal: false,
        }
    }

    /// Whether the store's tries below the root are no longer genesis': a record whose
    /// chunks are the 16 first nibbles clears them in the commit that starts it (an
    /// older record's chunks split the space otherwise, and its tries are replaced only
    /// when they are built after the download). Genesis' state can then no longer be
    /// executed on: the sync must finish by snap.
    pub fn tries_replaced(&self) -> bool {
        self.chunks.len() == CHUNKS
            && (self.chunks.iter().enumerate()).all(|(i, c)| c.limit == chunk_limit(i))
    }

    /// Whether the account trie is built while the ranges come (below the root: each
    /// chunk's subtrie with the accounts it writes): the tries are replaced and the
    /// pivot never moved (healing builds the tries of a moved download whole).
    pub fn trie_during_download(&self) -> bool {
        !self.heal && self.tries_replaced()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![RECORD_VERSION];
        out.extend_from_slice(&self.pivot_number.to_be_bytes());
        out.extend_from_slice(self.pivot_hash.as_slice());
        out.extend_from_slice(self.state_root.as_slice());
        out.push(self.stage.byte());
        out.push(self.chunks.len() as u8);
        for c in &self.chunks {
            out.extend_from_slice(c.next.as_slice());
            out.extend_from_slice(c.limit.as_slice());
            out.push(c.done as u8);
        }
        out.extend_from_slice(self.storage_cursor.as_slice());
        for n in [self.accounts, self.slots, self.codes, self.bytes] {
            out.extend_from_slice(&n.to_be_bytes());
        }
        out.push(self.heal as u8);
        out
    }

    /// `None` for a record this version does not read (the sync then starts over).
    pub fn decode(mut b: &[u8]) -> Option<Self> {
        fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
            let (head, rest) = b.split_at_checked(n)?;
            *b = rest;
            Some(head)
        }
        let u64_of = |s: &[u8]| u64::from_be_bytes(s.try_into().unwrap_or_default());
        let version = take(&mut b, 1)?[0];
        if version != 1 && version != RECORD_VERSION {
            return None;
        }
        let pivot_number = u64_of(take(&mut b, 8)?);
        let pivot_hash = B256::from_slice(take(&mut b, 32)?);
        let state_root = B256::from_slice(take(&mut b, 32)?);
        let stage = Stage::from_byte(take(&mut b, 1)?[0])?;
        let n = take(&mut b, 1)?[0] as usize;
        let mut chunks = Vec::with_capacity(n);
        for _ in 0..n {
            chunks.push(Chunk {
                next: B256::from_slice(take(&mut b, 32)?),
                limit: B256::from_slice(take(&mut b, 32)?),
                done: take(&mut b, 1)?[0] != 0,
            });
        }
        let storage_cursor = B256::from_slice(take(&mut b, 32)?);
        let mut n = [0u64; 4];
        for v in &mut n {
            *v = u64_of(take(&mut b, 8)?);
        }
        let heal = version == RECORD_VERSION && take(&mut b, 1)?[0] != 0;
        b.is_empty().then_some(Self {
            pivot_number,
            pivot_hash,
            state_root,
            stage,
            chunks,
            storage_cursor,
            accounts: n[0],
            slots: n[1],
            codes: n[2],
            bytes: n[3],
            heal,
        })
    }
}

/// What `eth_syncing` and the progress lines show of a snap sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapFigures {
    pub pivot: u64,
    /// The target's number (the pivot's after a resume, until the target is walked).
    pub highest: u64,
    pub stage: Stage,
    pub accounts: u64,
    pub slots: u64,
    pub codes: u64,
    pub bytes: u64,
    /// Whether this sync took up a record left by an earlier run.
    pub resumed: bool,
    /// Healing after a pivot move (zero without one).
    pub heal: HealFigures,
}

/// What healing did and has left to do (geth's `healedTrienodes`, `healedTrienodeBytes`,
/// `healedBytecodes`, `healingTrienodes`, `healingBytecode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HealFigures {
    /// Trie nodes taken, and their bytes.
    pub nodes: u64,
    pub node_bytes: u64,
    /// Codes of healed accounts taken.
    pub codes: u64,
    /// Trie nodes known to be needed and not yet taken: asked, queued, or found below
    /// the nodes taken (more are found as healing goes down the tries).
    pub pending_nodes: u64,
    /// Codes of healed accounts not yet taken.
    pub pending_codes: u64,
}

/// The figures of the snap sync running now, shared with the handle.
pub type SnapStatus = Arc<Mutex<Option<SnapFigures>>>;

/// One request and what it was for.
enum Work {
    Accounts {
        chunk: usize,
        origin: B256,
        limit: B256,
    },
    /// Accounts (hash, storage root) by index into the storage list; `origin` is where
    /// the first one's slots start (non-zero for a large trie continued).
    Storage {
        first: usize,
        accounts: Vec<(B256, B256)>,
        origin: B256,
    },
    Codes {
        hashes: Vec<B256>,
    },
    /// Trie nodes to heal.
    Nodes {
        tasks: Vec<HealTask>,
    },
}

/// A trie node healing asks for: its trie (owner), path (nibbles), and the hash its
/// parent names.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HealTask {
    owner: B256,
    path: Vec<u8>,
    hash: B256,
}

/// Where healing stands, committed with the flat state's patches it goes with: the
/// nodes of the walk under way still to take (asked, queued or found), so that a node
/// killed while healing asks only those again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealRecord {
    /// The pivot's state root being healed to: a record for another root is ignored.
    root: B256,
    phase: HealPhase,
    tasks: Vec<HealTask>,
}

/// The walks of healing, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HealPhase {
    /// The account trie's walk; then the storage tries are listed.
    Accounts,
    /// The walk of the storage tries whose stored root is not their account's.
    Storage,
    /// Both walks finished: the codes of healed accounts are next.
    Done,
}

/// Version byte of healing's record.
const HEAL_RECORD_VERSION: u8 = 1;

impl HealRecord {
    /// The nodes the record says are still to take.
    pub fn nodes_left(&self) -> usize {
        self.tasks.len()
    }

    /// Whether both walks are finished.
    pub fn done(&self) -> bool {
        self.phase == HealPhase::Done
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(38 + self.tasks.len() * 72);
        out.push(HEAL_RECORD_VERSION);
        out.extend_from_slice(self.root.as_slice());
        out.push(match self.phase {
            HealPhase::Accounts => 0,
            HealPhase::Storage => 1,
            HealPhase::Done => 2,
        });
        out.extend_from_slice(&(self.tasks.len() as u32).to_be_bytes());
        for t in &self.tasks {
            out.extend_from_slice(t.owner.as_slice());
            out.extend_from_slice(t.hash.as_slice());
            out.push(t.path.len() as u8);
            out.extend_from_slice(&t.path);
        }
        out
    }

    /// `None` for a record that does not decode (healing then starts over, as without
    /// one).
    pub fn decode(mut b: &[u8]) -> Option<Self> {
        fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
            let (head, rest) = b.split_at_checked(n)?;
            *b = rest;
            Some(head)
        }
        if take(&mut b, 1)?[0] != HEAL_RECORD_VERSION {
            return None;
        }
        let root = B256::from_slice(take(&mut b, 32)?);
        let phase = match take(&mut b, 1)?[0] {
            0 => HealPhase::Accounts,
            1 => HealPhase::Storage,
            2 => HealPhase::Done,
            _ => return None,
        };
        let n = u32::from_be_bytes(take(&mut b, 4)?.try_into().ok()?) as usize;
        // Each task takes at least 65 bytes: no allocation beyond what the record holds.
        let mut tasks = Vec::with_capacity(n.min(b.len() / 65));
        for _ in 0..n {
            let owner = B256::from_slice(take(&mut b, 32)?);
            let hash = B256::from_slice(take(&mut b, 32)?);
            let len = take(&mut b, 1)?[0] as usize;
            let path = take(&mut b, len)?.to_vec();
            if len >= 64 || path.iter().any(|n| *n > 0x0f) {
                return None;
            }
            tasks.push(HealTask { owner, path, hash });
        }
        b.is_empty().then_some(Self { root, phase, tasks })
    }
}

/// The requests in flight of a stage.
type Requests = JoinSet<Result<SnapMessage, RequestError>>;

struct Answer {
    peer: PeerId,
    work: Work,
    result: Result<SnapMessage, RequestError>,
}

/// Runs the snap stage towards `target` (a block hash the consensus client gave); on
/// success the pivot is the chain's head and its state is complete.
pub async fn run<S: BlockSource>(
    chain: &Chain,
    source: &Arc<S>,
    target: B256,
    cfg: &SnapConfig,
    status: &SnapStatus,
) -> Result<(), SnapError> {
    let store = chain.store().clone();
    // Peers offering snap/1 come with the first connections; without any the caller
    // falls back to full sync.
    let wait_until = Instant::now() + cfg.snap_peer_wait;
    while source.snap_peers().is_empty() {
        if Instant::now() > wait_until {
            return Err(SnapError::NoPeers);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut resumed = false;
    let highest;
    // A record whose pivot went stale (zero hash) keeps its download but needs a new pivot.
    let record = store.snap_progress()?.and_then(|r| Progress::decode(&r));
    let mut progress = match record {
        Some(p) if p.pivot_hash != B256::ZERO => {
            resumed = true;
            highest = p.pivot_number;
            tracing::info!(
                pivot = p.pivot_number,
                stage = p.stage.name(),
                accounts = p.accounts,
                slots = p.slots,
                "snap sync resumed"
            );
            p
        }
        // The pivot went stale: the download held so far stays (its ranges, stage and
        // boundaries), goes on against the new pivot's root, and the tries built from
        // it are healed to that root.
        Some(mut p) => {
            let (pivot, top) = pick_pivot(source, target).await?;
            highest = top;
            p.pivot_number = pivot.number();
            p.pivot_hash = pivot.hash;
            p.state_root = pivot.header.state_root;
            p.heal = true;
            let mut batch = WriteBatch::new();
            batch.set_snap_progress(Some(p.encode()));
            store.commit(batch)?;
            tracing::info!(
                pivot = p.pivot_number,
                root = %p.state_root,
                stage = p.stage.name(),
                "snap sync: new pivot, the download goes on and is healed"
            );
            p
        }
        None => {
            let (pivot, top) = pick_pivot(source, target).await?;
            highest = top;
            let p = Progress::new(&pivot);
            // Genesis' tries go (all but the account trie's root, which the store keeps
            // as its head's until the pivot is the head): the account trie is built
            // below it as the ranges come.
            let mut batch = WriteBatch::new();
            batch
                .clear_snap_state()
                .clear_tries_but_root()
                .set_snap_progress(Some(p.encode()));
            store.commit(batch)?;
            tracing::info!(pivot = p.pivot_number, root = %p.state_root, "snap sync started");
            p
        }
    };
    let mut run = Run {
        chain,
        source,
        cfg,
        status,
        peers: Peers::default(),
        asked: HashMap::new(),
        started: Instant::now(),
        last_line: Instant::now(),
        stage_start: None,
        resumed,
        highest,
        heal: HealFigures::default(),
        healing: false,
    };
    run.publish(&progress);
    if progress.stage == Stage::Accounts {
        run.accounts(&mut progress).await?;
        run.next_stage(&mut progress, Stage::Storage)?;
    }
    if progress.stage == Stage::Storage {
        run.storage(&mut progress).await?;
        run.next_stage(&mut progress, Stage::Codes)?;
    }
    if progress.stage == Stage::Codes {
        run.codes(&mut progress).await?;
        run.next_stage(&mut progress, Stage::Tries)?;
    }
    run.publish(&progress);
    let pivot = fetch_pivot_block(source, &progress).await?;
    // Building the tries replaces the state: only while the chain is still at genesis
    // (the engine API may have imported blocks on genesis' state meanwhile).
    if chain.head().map_err(|e| SnapError::Pivot(e.to_string()))?.0 != 0 {
        return Err(SnapError::Pivot("the chain moved past genesis".into()));
    }
    if progress.heal {
        // The tries of what is held (they do not build the pivot's root), then the
        // flat state patched from the pivot's trie until it builds that root; codes of
        // healed accounts after. A node killed here resumes from healing's record (the
        // tries built unchecked are stored before the first record is written).
        let record = store
            .snap_heal()?
            .and_then(|r| HealRecord::decode(&r))
            .filter(|r| r.root == progress.state_root);
        let start = match record {
            Some(r) => {
                tracing::info!(
                    phase = ?r.phase,
                    nodes = r.tasks.len(),
                    "snap sync: healing resumed from its record"
                );
                HealStart::Resume(r)
            }
            None => {
                let store2 = store.clone();
                let p2 = progress.clone();
                let local_root = tokio::task::spawn_blocking(move || build_unchecked(&store2, &p2))
                    .await
                    .map_err(|e| SnapError::Pivot(e.to_string()))??;
                HealStart::Fresh(local_root)
            }
        };
        run.heal(&progress, start).await?;
        run.healing = true;
        run.codes(&mut progress).await?;
        run.save(&progress, WriteBatch::new())?;
    }
    let store2 = store.clone();
    let p2 = progress.clone();
    tokio::task::spawn_blocking(move || build_tries(&store2, &p2, &pivot))
        .await
        .map_err(|e| SnapError::Pivot(e.to_string()))??;
    *status.lock() = None;
    tracing::info!(
        pivot = progress.pivot_number,
        accounts = progress.accounts,
        slots = progress.slots,
        codes = progress.codes,
        mib = progress.bytes >> 20,
        secs = format!("{:.1}", run.started.elapsed().as_secs_f64()),
        "snap sync complete: the pivot is the head"
    );
    Ok(())
}

/// The pivot's header: `PIVOT_DISTANCE` back from the target, walked by hash.
async fn pick_pivot<S: BlockSource>(
    source: &Arc<S>,
    target: B256,
) -> Result<(SealedHeader, u64), SnapError> {
    for _ in 0..30 {
        for peer in source.peers() {
            let req = HeadersRequest::back_from(target, PIVOT_DISTANCE + 1);
            match source.headers(peer.id, req).await {
                Ok(headers) if !headers.is_empty() => {
                    // Ancestors of the target chained by hash (checked by the source): the
                    // pivot is PIVOT_DISTANCE below the target, or the target itself on a
                    // chain no longer than that.
                    let top = headers[0].number();
                    if top == 0 {
                        return Err(SnapError::Pivot("the target is genesis".into()));
                    }
                    let want = if top > PIVOT_DISTANCE {
                        top - PIVOT_DISTANCE
                    } else {
                        top
                    };
                    if let Some(pivot) = headers.into_iter().find(|h| h.number() == want) {
                        return Ok((pivot, top));
                    }
                }
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(SnapError::NoPeers)
}

/// The pivot block: its header again by hash, and its body.
async fn fetch_pivot_block<S: BlockSource>(
    source: &Arc<S>,
    progress: &Progress,
) -> Result<Block, SnapError> {
    for _ in 0..30 {
        for peer in source.peers() {
            let Ok(headers) = source
                .headers(peer.id, HeadersRequest::back_from(progress.pivot_hash, 1))
                .await
            else {
                continue;
            };
            let Some(h) = headers.into_iter().next() else {
                continue;
            };
            if h.hash != progress.pivot_hash {
                continue;
            }
            if let Ok(mut blocks) = source.bodies(peer.id, vec![h]).await
                && let Some(b) = blocks.pop()
            {
                return Ok(b);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(SnapError::NoPeers)
}

/// Which peers may be asked, and which are resting.
#[derive(Default)]
struct Peers {
    busy: HashSet<PeerId>,
    resting: HashMap<PeerId, Instant>,
    /// Empty answers since the last useful one.
    empty_streak: u32,
    /// Peers that answered empty, failed or lied since the last useful answer: the
    /// pivot is stale only once every snap peer is among them.
    unhelpful: HashSet<PeerId>,
}

struct Run<'a, S> {
    chain: &'a Chain,
    source: &'a Arc<S>,
    cfg: &'a SnapConfig,
    status: &'a SnapStatus,
    peers: Peers,
    started: Instant,
    last_line: Instant,
    /// When this run first logged progress in the current stage, and the share of the
    /// stage then left: the ETA's rate is measured from there (neither the stages before
    /// nor what a run before a restart did count).
    stage_start: Option<(Stage, Instant, f64)>,
    resumed: bool,
    highest: u64,
    /// The peer and work of each request in flight, by task: a task that ends without
    /// its answer (a panic) still gives its work back.
    asked: HashMap<tokio::task::Id, (PeerId, Work)>,
    /// Healing's figures (and whether the codes stage runs for healed accounts).
    heal: HealFigures,
    healing: bool,
}

impl<S: BlockSource> Run<'_, S> {
    fn publish(&self, p: &Progress) {
        *self.status.lock() = Some(SnapFigures {
            pivot: p.pivot_number,
            highest: self.highest,
            stage: p.stage,
            accounts: p.accounts,
            slots: p.slots,
            codes: p.codes,
            bytes: p.bytes,
            resumed: self.resumed,
            heal: self.heal,
        });
    }

    /// Commits `batch` with the record, relaxed (durable with the next durable commit).
    fn save(&self, p: &Progress, batch: WriteBatch) -> Result<(), SnapError> {
        self.record(p, batch, false)
    }

    /// Writes the record with `batch`, durably or relaxed, and publishes it.
    fn record(&self, p: &Progress, mut batch: WriteBatch, durable: bool) -> Result<(), SnapError> {
        batch.set_snap_progress(Some(p.encode()));
        if durable {
            self.chain.store().commit(batch)?;
        } else {
            self.chain.store().commit_relaxed(batch)?;
        }
        self.publish(p);
        Ok(())
    }

    /// Moves the record to stage `next`, committed durably: a node killed in that stage
    /// resumes in it, not in the stage before (which the relaxed commits of the last
    /// second could otherwise leave on disk). Then logs the stage done, so that the log
    /// line means the next stage is where a restart resumes.
    fn next_stage(&self, p: &mut Progress, next: Stage) -> Result<(), SnapError> {
        let done = p.stage;
        p.stage = next;
        self.record(p, WriteBatch::new(), true)?;
        tracing::info!(
            stage = done.name(),
            accounts = p.accounts,
            slots = p.slots,
            codes = p.codes,
            secs = format!("{:.1}", self.started.elapsed().as_secs_f64()),
            "snap sync: stage done"
        );
        Ok(())
    }

    fn line(&mut self, p: &Progress, left: f64) {
        let (_, since, left_then) = match self.stage_start {
            Some(start) if start.0 == p.stage => start,
            _ => {
                let start = (p.stage, Instant::now(), left);
                self.stage_start = Some(start);
                start
            }
        };
        if self.last_line.elapsed() < self.cfg.progress_every {
            return;
        }
        self.last_line = Instant::now();
        let eta = eta(since.elapsed().as_secs_f64(), left_then, left);
        tracing::info!(
            stage = p.stage.name(),
            pivot = p.pivot_number,
            accounts = p.accounts,
            slots = p.slots,
            codes = p.codes,
            mib = p.bytes >> 20,
            eta,
            "snap sync"
        );
    }

    /// A peer free to ask now, if any.
    fn idle_peer(&mut self) -> Option<PeerId> {
        let now = Instant::now();
        self.peers.resting.retain(|_, until| *until > now);
        self.source
            .snap_peers()
            .into_iter()
            .find(|p| !self.peers.busy.contains(p) && !self.peers.resting.contains_key(p))
    }

    fn spawn(&mut self, set: &mut Requests, peer: PeerId, work: Work, root: B256) {
        let bytes = self.cfg.response_bytes;
        let msg = match &work {
            Work::Accounts { origin, limit, .. } => SnapMessage::GetAccountRange {
                request_id: 0,
                root,
                origin: *origin,
                limit: *limit,
                bytes,
            },
            Work::Storage {
                accounts, origin, ..
            } => SnapMessage::GetStorageRanges {
                request_id: 0,
                root,
                accounts: accounts.iter().map(|a| a.0).collect(),
                origin: *origin,
                limit: B256::repeat_byte(0xff),
                bytes,
            },
            Work::Codes { hashes } => SnapMessage::GetByteCodes {
                request_id: 0,
                hashes: hashes.clone(),
                bytes,
            },
            Work::Nodes { tasks } => SnapMessage::GetTrieNodes {
                request_id: 0,
                root,
                paths: tasks
                    .iter()
                    .map(|t| {
                        let path = Bytes::from(compact_path(&t.path));
                        if t.owner == B256::ZERO {
                            vec![path]
                        } else {
                            vec![Bytes::copy_from_slice(t.owner.as_slice()), path]
                        }
                    })
                    .collect(),
                bytes,
            },
        };
        self.peers.busy.insert(peer);
        let source = self.source.clone();
        let task = set.spawn(async move { source.snap_request(peer, msg).await });
        self.asked.insert(task.id(), (peer, work));
    }

    /// Waits for the next answer, or a moment when nothing is in flight (`None`); gives
    /// up when no useful answer came since `waited` for `give_up_after`.
    async fn next(
        &mut self,
        set: &mut Requests,
        waited: Instant,
    ) -> Result<Option<Answer>, SnapError> {
        let a = if set.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            None
        } else {
            // A request whose task panicked failed: its work is asked again.
            let (id, result) = match set.join_next_with_id().await {
                Some(Ok((id, result))) => (id, result),
                Some(Err(e)) => (e.id(), Err(RequestError::Disconnected)),
                None => return Ok(None),
            };
            self.asked.remove(&id).map(|(peer, work)| {
                self.peers.busy.remove(&peer);
                Answer { peer, work, result }
            })
        };
        if waited.elapsed() > self.cfg.give_up_after {
            return Err(SnapError::NoPeers);
        }
        Ok(a)
    }

    /// Hands queued work to the idle peers, then waits as [`Self::next`].
    async fn dispatch(
        &mut self,
        set: &mut Requests,
        queue: &mut VecDeque<Work>,
        root: B256,
        waited: Instant,
    ) -> Result<Option<Answer>, SnapError> {
        while !queue.is_empty() {
            let Some(peer) = self.idle_peer() else { break };
            let Some(w) = queue.pop_front() else { break };
            self.spawn(set, peer, w, root);
        }
        self.next(set, waited).await
    }

    /// The content of an answer of the kind asked (`pick`); otherwise the peer is dealt
    /// with (a fault for another kind, a rest for a failed request), the work goes back
    /// on `queue` to be asked again, and `None`.
    fn content<T>(
        &mut self,
        a: Answer,
        queue: &mut VecDeque<Work>,
        not_asked: &str,
        pick: impl FnOnce(SnapMessage) -> Option<T>,
    ) -> Option<(PeerId, Work, T)> {
        match a.result.map(pick) {
            Ok(Some(t)) => return Some((a.peer, a.work, t)),
            Ok(None) => self.fault(a.peer, not_asked),
            Err(_) => self.rest(a.peer),
        }
        queue.push_back(a.work);
        None
    }

    /// A peer that failed to answer (or answered nothing of use) is not asked for a while.
    fn rest(&mut self, peer: PeerId) {
        self.peers.resting.insert(peer, Instant::now() + REST);
        self.peers.unhelpful.insert(peer);
    }

    /// A useful answer: the pivot is still served.
    fn useful(&mut self) {
        self.peers.empty_streak = 0;
        self.peers.unhelpful.clear();
    }

    /// An empty answer for the pivot's root: the peer is rested; too many in a row, with
    /// every snap peer failing since the last useful answer, and the pivot is stale (so
    /// peers that answer empty cannot make a sync that a good peer serves start over).
    fn empty(&mut self, peer: PeerId) -> Result<(), SnapError> {
        self.rest(peer);
        self.peers.empty_streak = self.peers.empty_streak.saturating_add(1);
        if self.peers.empty_streak >= STALE_AFTER
            && self
                .source
                .snap_peers()
                .iter()
                .all(|p| self.peers.unhelpful.contains(p))
        {
            return Err(SnapError::Stale);
        }
        Ok(())
    }

    fn fault(&mut self, peer: PeerId, why: &str) {
        tracing::warn!(peer = %short(&peer), why, "snap: bad answer, peer dropped");
        self.source.report_snap_fault(&peer, why);
        self.rest(peer);
    }

    /// Asks the chunks not done and not in flight of the idle peers.
    fn ask_chunks(&mut self, set: &mut Requests, p: &Progress, in_flight: &mut HashSet<usize>) {
        while let Some(i) =
            (0..p.chunks.len()).find(|&i| !p.chunks[i].done && !in_flight.contains(&i))
        {
            let Some(peer) = self.idle_peer() else { break };
            let c = p.chunks[i];
            in_flight.insert(i);
            let work = Work::Accounts {
                chunk: i,
                origin: c.next,
                limit: c.limit,
            };
            self.spawn(set, peer, work, p.state_root);
        }
    }

    async fn accounts(&mut self, p: &mut Progress) -> Result<(), SnapError> {
        let mut set = Requests::new();
        let mut in_flight: HashSet<usize> = HashSet::new();
        let mut waited = Instant::now();
        // The account trie's nodes are built and every answer committed on threads of
        // their own, in order, while the next answers are checked.
        let mut writer = if p.trie_during_download() {
            Some(TrieWriter::start(self.chain.store().clone())?)
        } else {
            None
        };
        while p.chunks.iter().any(|c| !c.done) {
            self.ask_chunks(&mut set, p, &mut in_flight);
            let Some(a) = self.next(&mut set, waited).await? else {
                continue;
            };
            let Work::Accounts { chunk, .. } = a.work else {
                continue;
            };
            // Other chunks go to the idle peers (the one that answered among them)
            // before this answer is checked and written: a single peer serves the next
            // range meanwhile.
            self.ask_chunks(&mut set, p, &mut in_flight);
            in_flight.remove(&chunk);
            let (accounts, proof) = match a.result {
                Ok(SnapMessage::AccountRange {
                    accounts, proof, ..
                }) => (accounts, proof),
                Ok(_) => {
                    self.fault(a.peer, "not an account range");
                    continue;
                }
                Err(_) => {
                    self.rest(a.peer);
                    continue;
                }
            };
            if accounts.is_empty() && proof.is_empty() {
                self.empty(a.peer)?;
                continue;
            }
            let c = p.chunks[chunk];
            match check_accounts(p.state_root, &c.next, &accounts, &proof) {
                Err(why) => self.fault(a.peer, &why),
                Ok((decoded, more)) => {
                    self.useful();
                    waited = Instant::now();
                    let mut batch = WriteBatch::new();
                    let mut size = 0u64;
                    for (hash, account) in &decoded {
                        batch.put_snap_account(*hash, account);
                    }
                    for (_, slim) in &accounts {
                        size += 32 + slim.len() as u64;
                    }
                    let last = decoded.last().map(|d| d.0);
                    let chunk_ref = &mut p.chunks[chunk];
                    match last.and_then(|l| (more && l < c.limit).then(|| b256_after(&l))) {
                        Some(Some(next)) => chunk_ref.next = next,
                        _ => chunk_ref.done = true,
                    }
                    // Accounts outside the chunk's range (past its limit, or before its
                    // start in a whole trie sent without proof) are another's: counted once.
                    let ours: Vec<(B256, Account)> = decoded
                        .into_iter()
                        .filter(|d| c.next <= d.0 && d.0 <= c.limit)
                        .collect();
                    p.accounts += ours.len() as u64;
                    p.bytes += size;
                    match &mut writer {
                        Some(w) => {
                            batch.set_snap_progress(Some(p.encode()));
                            let done = p.chunks[chunk].done;
                            w.send(TrieJob {
                                chunk,
                                at: c,
                                accounts: ours,
                                done,
                                batch,
                            })?;
                            self.publish(p);
                        }
                        None => self.save(p, batch)?,
                    }
                    let left = chunks_left(p);
                    self.line(p, left);
                }
            }
        }
        if let Some(w) = writer {
            let (build, commit) = w.finish()?;
            tracing::info!(
                build_secs = format!("{:.1}", build.as_secs_f64()),
                commit_secs = format!("{:.1}", commit.as_secs_f64()),
                "snap sync: account trie built during the download"
            );
        }
        Ok(())
    }

    async fn storage(&mut self, p: &mut Progress) -> Result<(), SnapError> {
        // (hash, storage root) of every account from the cursor on with storage.
        let mut list: Vec<(B256, B256)> = Vec::new();
        let store = self.chain.store().clone();
        store.snap_accounts_from(&p.storage_cursor, |hash, a| {
            if a.storage_root != EMPTY_ROOT {
                list.push((hash, a.storage_root));
            }
            true
        })?;
        // Slots already held (a resumed stage, or a download kept over a new pivot) are
        // kept where they build the account's storage root; others are dropped and
        // downloaded again.
        let (mut kept, mut wipe) = (0usize, WriteBatch::new());
        let mut needed = Vec::with_capacity(list.len());
        for (hash, root) in list {
            let (local, slots) = local_storage_root(&store, &hash)?;
            if local == root {
                kept += 1;
            } else {
                if slots > 0 {
                    wipe.clear_snap_slots(hash);
                }
                needed.push((hash, root));
            }
        }
        store.commit(wipe)?;
        if kept > 0 {
            tracing::info!(kept, "snap sync: storage tries already held kept");
        }
        let list = needed;
        let total = list.len().max(1);
        let mut done = vec![false; list.len()];
        let mut lowest_open = 0usize;
        let mut queue: VecDeque<Work> = list
            .chunks(self.cfg.storage_batch.max(1))
            .enumerate()
            .map(|(i, c)| Work::Storage {
                first: i * self.cfg.storage_batch.max(1),
                accounts: c.to_vec(),
                origin: B256::ZERO,
            })
            .collect();
        let mut set = Requests::new();
        let mut waited = Instant::now();
        while !queue.is_empty() || !set.is_empty() {
            let next = self.dispatch(&mut set, &mut queue, p.state_root, waited);
            let Some(a) = next.await? else {
                continue;
            };
            // What fails is asked again (of another peer first: this one rests).
            let answer = self.content(a, &mut queue, "not a storage range", |m| match m {
                SnapMessage::StorageRanges { slots, proof, .. } => Some((slots, proof)),
                _ => None,
            });
            let Some((peer, work, (slots, proof))) = answer else {
                continue;
            };
            let Work::Storage {
                first,
                accounts,
                origin,
            } = &work
            else {
                continue;
            };
            let (first, origin) = (*first, *origin);
            // After a pivot move one account's empty answer may say it has no slots at the
            // new root (an account without slots adds no list): it is left to healing,
            // which finds out. Staleness shows in the answers for several accounts.
            if slots.is_empty() && p.heal && accounts.len() == 1 {
                self.skip_storage(p, &list, &mut done, &mut lowest_open, first)?;
                continue;
            }
            if slots.is_empty() {
                self.empty(peer)?;
                queue.push_back(work);
                continue;
            }
            let (decoded, more) = match check_storage(accounts, origin, &slots, &proof) {
                Ok(r) => r,
                // After a pivot move an account's storage root may be an older root's,
                // and an account may be gone at the new root (its list missing, the next
                // ones shifted): the whole tries leading the answer are taken, the first
                // that fails is asked alone and left to healing if it fails again, the
                // rest asked again (a peer that lies costs time, not correctness: healed
                // nodes are checked by hash).
                Err(_) if p.heal && accounts.len() > 1 => {
                    // Each leading trie checked whole, once; lists beyond the accounts
                    // asked (a peer's excess) are never read.
                    let mut whole = Vec::new();
                    for i in 0..slots.len().min(accounts.len()) {
                        let from = if i == 0 { origin } else { B256::ZERO };
                        match check_storage(&accounts[i..=i], from, &slots[i..=i], &[]) {
                            Ok((mut d, _)) => whole.append(&mut d),
                            Err(_) => break,
                        }
                    }
                    if whole.is_empty() {
                        queue.push_back(Work::Storage {
                            first,
                            accounts: vec![accounts[0]],
                            origin,
                        });
                        queue.push_back(Work::Storage {
                            first: first + 1,
                            accounts: accounts[1..].to_vec(),
                            origin: B256::ZERO,
                        });
                        continue;
                    }
                    (whole, false)
                }
                Err(_) if p.heal => {
                    self.skip_storage(p, &list, &mut done, &mut lowest_open, first)?;
                    continue;
                }
                Err(why) => {
                    self.fault(peer, &why);
                    queue.push_back(work);
                    continue;
                }
            };
            self.useful();
            waited = Instant::now();
            let mut batch = WriteBatch::new();
            let answered = decoded.len();
            // Where the last answered account's trie goes on (after its last slot), when
            // the proof shows more: a trie that holds more has a last slot below the top.
            let next = decoded
                .last()
                .and_then(|s| s.last())
                .and_then(|(s, _)| b256_after(s))
                .filter(|_| more);
            for (i, account_slots) in decoded.iter().enumerate() {
                let owner = accounts[i].0;
                for (slot, value) in account_slots {
                    batch.put_snap_slot(owner, *slot, *value);
                    p.bytes += 64;
                }
                p.slots += account_slots.len() as u64;
                let partial = i + 1 == answered && next.is_some();
                if !partial {
                    done[first + i] = true;
                }
            }
            if let Some(next) = next {
                let i = answered - 1;
                queue.push_front(Work::Storage {
                    first: first + i,
                    accounts: vec![accounts[i]],
                    origin: next,
                });
            }
            // Accounts the answer did not reach are asked again.
            if answered < accounts.len() {
                queue.push_back(Work::Storage {
                    first: first + answered,
                    accounts: accounts[answered..].to_vec(),
                    origin: B256::ZERO,
                });
            }
            while lowest_open < done.len() && done[lowest_open] {
                lowest_open += 1;
            }
            p.storage_cursor = list
                .get(lowest_open)
                .map_or(B256::repeat_byte(0xff), |a| a.0);
            self.save(p, batch)?;
            let left = (done.len() - lowest_open) as f64 / total as f64;
            self.line(p, left);
        }
        Ok(())
    }

    async fn codes(&mut self, p: &mut Progress) -> Result<(), SnapError> {
        let store = self.chain.store().clone();
        let mut wanted: Vec<B256> = Vec::new();
        let mut seen = HashSet::new();
        let mut err = None;
        store.snap_accounts_from(&B256::ZERO, |_, a| {
            if a.code_hash != KECCAK256_EMPTY && seen.insert(a.code_hash) {
                match store.code(&a.code_hash) {
                    Ok(Some(_)) => {}
                    Ok(None) => wanted.push(a.code_hash),
                    Err(e) => {
                        err = Some(e);
                        return false;
                    }
                }
            }
            true
        })?;
        if let Some(e) = err {
            return Err(e.into());
        }
        let total = wanted.len().max(1);
        let mut left = wanted.len();
        if self.healing {
            self.heal.pending_codes = left as u64;
        }
        let mut queue: VecDeque<Work> = wanted
            .chunks(CODE_BATCH)
            .map(|c| Work::Codes { hashes: c.to_vec() })
            .collect();
        let mut set = Requests::new();
        let mut waited = Instant::now();
        while !queue.is_empty() || !set.is_empty() {
            let next = self.dispatch(&mut set, &mut queue, p.state_root, waited);
            let Some(a) = next.await? else {
                continue;
            };
            let answer = self.content(a, &mut queue, "not bytecodes", |m| match m {
                SnapMessage::ByteCodes { codes, .. } => Some(codes),
                _ => None,
            });
            let Some((peer, work, codes)) = answer else {
                continue;
            };
            let Work::Codes { hashes } = &work else {
                continue;
            };
            if codes.is_empty() {
                // Codes are not served by root: an empty answer says nothing of the
                // pivot, so the peer is only rested (no answer at all ends in NoPeers,
                // the stage resumed by the next attempt).
                self.rest(peer);
                queue.push_back(work);
                continue;
            }
            // Every code must be one asked for and not yet given; nothing is counted or
            // written before the whole answer passes.
            let mut missing: HashSet<B256> = hashes.iter().copied().collect();
            let mut batch = WriteBatch::new();
            let (mut bytes, mut count) = (0u64, 0u64);
            let mut bad = false;
            for code in codes {
                let h = keccak256(&code);
                if !missing.remove(&h) {
                    bad = true;
                    break;
                }
                bytes += code.len() as u64;
                count += 1;
                batch.put_code(h, code);
            }
            if bad {
                self.fault(peer, "a code not asked for, or given twice");
                queue.push_back(work);
                continue;
            }
            p.bytes += bytes;
            p.codes += count;
            self.useful();
            waited = Instant::now();
            left -= hashes.len() - missing.len();
            if self.healing {
                self.heal.codes += count;
                self.heal.pending_codes = left as u64;
            }
            if !missing.is_empty() {
                queue.push_back(Work::Codes {
                    hashes: missing.into_iter().collect(),
                });
            }
            self.save(p, batch)?;
            self.line(p, left as f64 / total as f64);
        }
        Ok(())
    }
}

impl<S: BlockSource> Run<'_, S> {
    /// Leaves the storage of account `i` of the storage stage's `list` to healing.
    fn skip_storage(
        &mut self,
        p: &mut Progress,
        list: &[(B256, B256)],
        done: &mut [bool],
        lowest_open: &mut usize,
        i: usize,
    ) -> Result<(), SnapError> {
        done[i] = true;
        while *lowest_open < done.len() && done[*lowest_open] {
            *lowest_open += 1;
        }
        p.storage_cursor = list
            .get(*lowest_open)
            .map_or(B256::repeat_byte(0xff), |a| a.0);
        self.save(p, WriteBatch::new())
    }

    /// Heals the flat state to the pivot's root: the account trie walked from the root,
    /// then every storage trie whose stored root is not its account's. `start`: the
    /// root the held accounts build (its node is not stored), or healing's record.
    async fn heal(&mut self, p: &Progress, start: HealStart) -> Result<(), SnapError> {
        let started = Instant::now();
        let mut healed = 0u64;
        let storage_todo = match start {
            HealStart::Fresh(local_root) => {
                if local_root != p.state_root {
                    let root = HealTask {
                        owner: B256::ZERO,
                        path: Vec::new(),
                        hash: p.state_root,
                    };
                    healed += self.heal_walk(p, HealPhase::Accounts, vec![root]).await?;
                }
                None
            }
            HealStart::Resume(r) => match r.phase {
                HealPhase::Accounts => {
                    healed += self.heal_walk(p, HealPhase::Accounts, r.tasks).await?;
                    None
                }
                HealPhase::Storage => Some(r.tasks),
                HealPhase::Done => return Ok(()),
            },
        };
        let tasks = match storage_todo {
            Some(tasks) => tasks,
            None => self.storage_heal_tasks(p)?,
        };
        let storage_tries = tasks.len();
        healed += self.heal_walk(p, HealPhase::Storage, tasks).await?;
        tracing::info!(
            healed,
            storage_tries,
            secs = format!("{:.1}", started.elapsed().as_secs_f64()),
            "snap sync: healed to the pivot's root"
        );
        Ok(())
    }

    /// The roots of the storage tries to heal (every one whose stored root is not its
    /// account's), committed as healing's record with the slots of accounts whose
    /// storage is empty now dropped.
    fn storage_heal_tasks(&mut self, p: &Progress) -> Result<Vec<HealTask>, SnapError> {
        let store = self.chain.store().clone();
        let mut tasks = Vec::new();
        let mut wipe = WriteBatch::new();
        for_each_account_page(&store, |page| {
            for (hash, a) in page {
                if a.storage_root == EMPTY_ROOT {
                    // Slots held of an account whose storage is empty now.
                    let mut any = false;
                    store.snap_slots_of(hash, |_, _| any = true)?;
                    if any {
                        wipe.clear_snap_slots(*hash);
                    }
                    continue;
                }
                let local = store.trie_node(hash, &[])?.map(|n| keccak256(&n));
                if local != Some(a.storage_root) {
                    tasks.push(HealTask {
                        owner: *hash,
                        path: Vec::new(),
                        hash: a.storage_root,
                    });
                }
            }
            Ok(())
        })?;
        let record = HealRecord {
            root: p.state_root,
            phase: HealPhase::Storage,
            tasks: tasks.clone(),
        };
        wipe.set_snap_heal(Some(record.encode()));
        store.commit(wipe)?;
        Ok(tasks)
    }

    /// Asks for the nodes of `tasks` and every node below them that the local tries
    /// lack, patching the flat state from them; returns how many nodes came.
    /// Each commit carries healing's record: the nodes not yet taken, so that a node
    /// killed here asks only those again.
    async fn heal_walk(
        &mut self,
        p: &Progress,
        phase: HealPhase,
        mut todo: Vec<HealTask>,
    ) -> Result<u64, SnapError> {
        let store = self.chain.store().clone();
        let mut queue: VecDeque<Work> = VecDeque::new();
        let mut set = Requests::new();
        let mut waited = Instant::now();
        let mut batch = WriteBatch::new();
        let (mut answers, mut healed) = (0usize, 0u64);
        let walk_started = Instant::now();
        loop {
            while !todo.is_empty() {
                let n = todo.len().min(HEAL_BATCH);
                let tasks: Vec<HealTask> = todo.drain(..n).collect();
                queue.push_back(Work::Nodes { tasks });
            }
            if queue.is_empty() && set.is_empty() {
                break;
            }
            let next = self.dispatch(&mut set, &mut queue, p.state_root, waited);
            let Some(a) = next.await? else {
                continue;
            };
            let answer = self.content(a, &mut queue, "not trie nodes", |m| match m {
                SnapMessage::TrieNodes { nodes, .. } => Some(nodes),
                _ => None,
            });
            let Some((peer, work, nodes)) = answer else {
                continue;
            };
            let Work::Nodes { tasks } = work else {
                continue;
            };
            if nodes.is_empty() {
                self.empty(peer)?;
                queue.push_back(Work::Nodes { tasks });
                continue;
            }
            // A node is taken only if it hashes to what its parent names.
            if nodes.len() > tasks.len()
                || nodes
                    .iter()
                    .zip(&tasks)
                    .any(|(n, t)| keccak256(n) != t.hash)
            {
                self.fault(peer, "a trie node that is not the one asked for");
                queue.push_back(Work::Nodes { tasks });
                continue;
            }
            self.useful();
            waited = Instant::now();
            for (node, t) in nodes.iter().zip(&tasks) {
                heal_node(&store, t.owner, &t.path, node, &mut batch, &mut todo)?;
                self.heal.node_bytes += node.len() as u64;
            }
            healed += nodes.len() as u64;
            self.heal.nodes += nodes.len() as u64;
            if nodes.len() < tasks.len() {
                queue.push_back(Work::Nodes {
                    tasks: tasks[nodes.len()..].to_vec(),
                });
            }
            answers += 1;
            if answers % self.cfg.heal_commit_every.max(1) == 0 {
                // What is not taken yet: found, queued, or asked and in flight.
                let mut left = todo.clone();
                for w in queue.iter().chain(self.asked.values().map(|a| &a.1)) {
                    if let Work::Nodes { tasks } = w {
                        left.extend_from_slice(tasks);
                    }
                }
                let record = HealRecord {
                    root: p.state_root,
                    phase,
                    tasks: left,
                };
                batch.set_snap_heal(Some(record.encode()));
                // Durable at once (one sync per that many answers): a node killed
                // after this commit does not ask these answers' nodes again.
                store.commit(std::mem::take(&mut batch))?;
            }
            let queued: usize = (queue.iter().chain(self.asked.values().map(|a| &a.1)))
                .map(|w| match w {
                    Work::Nodes { tasks } => tasks.len(),
                    _ => 0,
                })
                .sum();
            self.heal.pending_nodes = (todo.len() + queued) as u64;
            self.publish(p);
            if self.last_line.elapsed() >= self.cfg.progress_every {
                self.last_line = Instant::now();
                // At the rate so far, for the nodes known to be needed (more are found
                // below them: a lower bound).
                let rate = healed as f64 / walk_started.elapsed().as_secs_f64().max(0.001);
                let eta = format!("{:.0}s", self.heal.pending_nodes as f64 / rate.max(1.0));
                tracing::info!(
                    pivot = p.pivot_number,
                    healed,
                    pending = self.heal.pending_nodes,
                    kib = self.heal.node_bytes >> 10,
                    eta,
                    "snap sync: healing"
                );
            }
        }
        // The walk is done. After the account trie's, a record with nothing left says
        // so (a node killed before the storage tries are listed lists them again);
        // after the storage tries', healing is over.
        let next = match phase {
            HealPhase::Accounts => HealPhase::Accounts,
            HealPhase::Storage | HealPhase::Done => HealPhase::Done,
        };
        let record = HealRecord {
            root: p.state_root,
            phase: next,
            tasks: Vec::new(),
        };
        batch.set_snap_heal(Some(record.encode()));
        store.commit(batch)?;
        Ok(healed)
    }
}

/// How healing starts: fresh, with the root the held accounts build, or from its record.
enum HealStart {
    Fresh(B256),
    Resume(HealRecord),
}

/// What of the flat state under a path a healed node keeps.
enum Keep<'a> {
    Nothing,
    /// The one key of a leaf.
    Key(B256),
    /// The subtree below an extension.
    Prefix(&'a [u8]),
}

/// The lowest and highest keys under a nibble path.
fn key_bounds(prefix: &[u8]) -> (B256, B256) {
    let mut lo = [0u8; 64];
    let mut hi = [0x0fu8; 64];
    lo[..prefix.len()].copy_from_slice(prefix);
    hi[..prefix.len()].copy_from_slice(prefix);
    (pack(&lo), pack(&hi))
}

fn pack(nibbles: &[u8]) -> B256 {
    let mut out = [0u8; 32];
    for (i, pair) in nibbles.chunks(2).enumerate().take(32) {
        out[i] = (pair[0] << 4) | pair.get(1).copied().unwrap_or(0);
    }
    B256::from(out)
}

/// Drops the flat entries of trie `owner` under `prefix` but those `keep` names (an
/// account's slots go with it).
fn delete_under(
    store: &moat_storage::Store,
    owner: B256,
    prefix: &[u8],
    keep: Keep<'_>,
    batch: &mut WriteBatch,
) -> Result<(), SnapError> {
    let (lo, hi) = key_bounds(prefix);
    // The ranges to drop: all of [lo, hi] but the kept key or subtree.
    let kept = match keep {
        Keep::Nothing => None,
        Keep::Key(k) => Some((k, k)),
        Keep::Prefix(p) => Some(key_bounds(p)),
    };
    let mut ranges = Vec::with_capacity(2);
    match kept {
        None => ranges.push((lo, hi)),
        Some((klo, khi)) => {
            let below = U256::from_be_bytes(klo.0).checked_sub(U256::from(1));
            if let Some(b) = below.map(|b| B256::from(b.to_be_bytes()))
                && klo > lo
            {
                ranges.push((lo, b));
            }
            if let Some(a) = b256_after(&khi)
                && khi < hi
            {
                ranges.push((a, hi));
            }
        }
    }
    for (from, to) in ranges {
        if owner == B256::ZERO {
            let mut doomed = Vec::new();
            store.snap_accounts_from(&from, |h, _| {
                if h > to {
                    return false;
                }
                doomed.push(h);
                true
            })?;
            for h in doomed {
                batch.delete_snap_account(h).clear_snap_slots(h);
            }
        } else {
            batch.delete_snap_slots_between(owner, from, to);
        }
    }
    Ok(())
}

/// One healed node of trie `owner` at `path`: its leaves written to the flat state,
/// what it no longer holds dropped from it, and its children the local trie lacks (a
/// stored node at their path with another hash, or none) added to `todo`.
fn heal_node(
    store: &moat_storage::Store,
    owner: B256,
    path: &[u8],
    rlp: &[u8],
    batch: &mut WriteBatch,
    todo: &mut Vec<HealTask>,
) -> Result<(), SnapError> {
    let bad = |why: &str| SnapError::Mismatch(format!("trie node of {owner} at {path:?}: {why}"));
    match view_node(rlp).ok_or_else(|| bad("not a trie node"))? {
        NodeView::Leaf(key, value) => {
            let full = [path, &key].concat();
            if full.len() != 64 {
                return Err(bad("a leaf whose key is not 32 bytes"));
            }
            let k = pack(&full);
            delete_under(store, owner, path, Keep::Key(k), batch)?;
            if owner == B256::ZERO {
                let a = decode_account(&value).map_err(|_| bad("not an account"))?;
                batch.put_snap_account(k, &a);
            } else {
                let mut buf = value.as_slice();
                let v = rlp::string(&mut buf, "slot value").map_err(|_| bad("not a slot"))?;
                if v.len() > 32 || !buf.is_empty() {
                    return Err(bad("not a 32-byte slot value"));
                }
                batch.put_snap_slot(owner, k, U256::from_be_slice(v));
            }
        }
        NodeView::Extension(key, child) => {
            let below = [path, &key].concat();
            if below.len() >= 64 {
                return Err(bad("an extension past the key's end"));
            }
            delete_under(store, owner, path, Keep::Prefix(&below), batch)?;
            heal_child(store, owner, &below, &child, batch, todo)?;
        }
        NodeView::Branch(children) => {
            if path.len() >= 64 {
                return Err(bad("a branch past the key's end"));
            }
            for (i, child) in children.iter().enumerate() {
                let below = [path, &[i as u8]].concat();
                if child.is_empty() {
                    delete_under(store, owner, &below, Keep::Nothing, batch)?;
                } else {
                    heal_child(store, owner, &below, child, batch, todo)?;
                }
            }
        }
    }
    Ok(())
}

/// A child reference of a healed node: an inline node is healed at once, a hashed one
/// asked for unless the local trie holds it.
fn heal_child(
    store: &moat_storage::Store,
    owner: B256,
    path: &[u8],
    child: &[u8],
    batch: &mut WriteBatch,
    todo: &mut Vec<HealTask>,
) -> Result<(), SnapError> {
    if child.len() == 33 && child[0] == 0xa0 {
        let hash = B256::from_slice(&child[1..]);
        let local = store.trie_node(&owner, path)?.map(|n| keccak256(&n));
        if local != Some(hash) {
            todo.push(HealTask {
                owner,
                path: path.to_vec(),
                hash,
            });
        }
        Ok(())
    } else {
        heal_node(store, owner, path, child, batch, todo)
    }
}

fn chunks_left(p: &Progress) -> f64 {
    let mut left = U256::ZERO;
    for c in p.chunks.iter().filter(|c| !c.done) {
        left += U256::from_be_bytes(c.limit.0) - U256::from_be_bytes(c.next.0);
    }
    let shift = |v: U256| (v >> 192usize).to::<u64>() as f64;
    shift(left) / shift(U256::MAX).max(1.0)
}

fn short(id: &PeerId) -> String {
    let s = id.to_string();
    s.chars().take(10).collect()
}

/// An account range checked against the state root: the accounts decoded, and whether
/// the trie holds more after the last.
#[allow(clippy::type_complexity)]
fn check_accounts(
    root: B256,
    origin: &B256,
    accounts: &[(B256, Bytes)],
    proof: &[Bytes],
) -> Result<(Vec<(B256, Account)>, bool), String> {
    let mut keys = Vec::with_capacity(accounts.len());
    let mut values = Vec::with_capacity(accounts.len());
    let mut decoded = Vec::with_capacity(accounts.len());
    for (hash, slim) in accounts {
        let full = full_account(slim).map_err(|e| format!("account {hash}: {e}"))?;
        decoded.push((
            *hash,
            decode_account(&full).map_err(|e| format!("account {hash}: {e}"))?,
        ));
        keys.push(*hash);
        values.push(full);
    }
    let more =
        verify_range_proof(root, origin, &keys, &values, proof).map_err(|e| e.to_string())?;
    Ok((decoded, more))
}

fn decode_account(full: &[u8]) -> Result<Account, rlp::RlpError> {
    let mut buf = full;
    let mut f = rlp::list(&mut buf, "account")?;
    let a = Account {
        nonce: f.u64("nonce")?,
        balance: f.u256("balance")?,
        storage_root: f.b256("storage root")?,
        code_hash: f.b256("code hash")?,
    };
    f.finish()?;
    Ok(a)
}

/// Slots per account checked against their storage roots: every account but a last
/// partial one whole (no proof), that one against the proof from `origin`.
#[allow(clippy::type_complexity)]
fn check_storage(
    accounts: &[(B256, B256)],
    origin: B256,
    slots: &[Vec<(B256, Bytes)>],
    proof: &[Bytes],
) -> Result<(Vec<Vec<(B256, U256)>>, bool), String> {
    if slots.len() > accounts.len() {
        return Err(format!(
            "slots of {} accounts for {} asked",
            slots.len(),
            accounts.len()
        ));
    }
    let mut out = Vec::with_capacity(slots.len());
    let mut more = false;
    for (i, account_slots) in slots.iter().enumerate() {
        let (hash, root) = accounts[i];
        let keys: Vec<B256> = account_slots.iter().map(|s| s.0).collect();
        let values: Vec<&[u8]> = account_slots.iter().map(|s| s.1.as_ref()).collect();
        let last = i + 1 == slots.len();
        let (from, p): (B256, &[Bytes]) = if last {
            (if i == 0 { origin } else { B256::ZERO }, proof)
        } else {
            (B256::ZERO, &[])
        };
        let m = verify_range_proof(root, &from, &keys, &values, p)
            .map_err(|e| format!("storage of {hash}: {e}"))?;
        if last {
            more = m;
        }
        let mut decoded = Vec::with_capacity(account_slots.len());
        for (slot, raw) in account_slots {
            let mut buf = raw.as_ref();
            let v = rlp::string(&mut buf, "slot value")
                .map_err(|e| format!("slot {slot} of {hash}: {e}"))?;
            if v.len() > 32 || !buf.is_empty() {
                return Err(format!("slot {slot} of {hash}: not a 32-byte value"));
            }
            decoded.push((*slot, U256::from_be_slice(v)));
        }
        out.push(decoded);
    }
    Ok((out, more))
}

/// Builds every storage trie and the account trie from the downloaded ranges (or only
/// the account trie's root, when the download built the rest), checks their roots, and
/// writes the pivot as the head; the last commit removes the record.
fn build_tries(store: &moat_storage::Store, p: &Progress, pivot: &Block) -> Result<(), SnapError> {
    let started = Instant::now();
    // The account trie below the root is held when the download built it and its root
    // is a branch (fewer than two chunks with accounts: built whole).
    let held = p.trie_during_download() && root_from_chunks(store)?.is_some();
    let (accounts, (storage_tries, _, mut batch)) = build_all(store, Some(p.state_root), held)?;
    let header = &pivot.header;
    let hash = p.pivot_hash;
    batch
        .put_header(hash, header.number, header.encoded())
        .put_body(hash, pivot.encode_body())
        .set_canonical(header.number, hash)
        .set_head(header.number, hash)
        .set_snap_progress(None)
        .set_snap_heal(None);
    store.commit(batch)?;
    tracing::info!(
        storage_tries,
        accounts,
        account_trie = if held {
            "built during the download"
        } else {
            "built now"
        },
        secs = format!("{:.1}", started.elapsed().as_secs_f64()),
        "snap sync: tries built, root matches the pivot's"
    );
    Ok(())
}

/// Builds the tries of the flat state held, whatever roots they come to (the account
/// trie's root node is not written: the store keeps genesis' root until the healed
/// tries are built checked); returns the account trie's root.
fn build_unchecked(store: &moat_storage::Store, p: &Progress) -> Result<B256, SnapError> {
    let (accounts, (storage_tries, root, batch)) = build_all(store, None, false)?;
    store.commit(batch)?;
    tracing::info!(
        storage_tries,
        accounts,
        pivot = p.pivot_number,
        "snap sync: tries of the download built, healing them to the pivot's root"
    );
    Ok(root)
}

type Built = (u64, B256, WriteBatch);

/// Visits the downloaded accounts in key order, [`ACCOUNTS_PAGE`] at a time (no read
/// held open while `visit` runs, and no more than a page in memory); returns how many.
fn for_each_account_page(
    store: &moat_storage::Store,
    mut visit: impl FnMut(&[(B256, Account)]) -> Result<(), SnapError>,
) -> Result<u64, SnapError> {
    let (mut from, mut count) = (B256::ZERO, 0u64);
    loop {
        let mut page = Vec::with_capacity(ACCOUNTS_PAGE);
        store.snap_accounts_from(&from, |h, a| {
            page.push((h, a));
            page.len() < ACCOUNTS_PAGE
        })?;
        count += page.len() as u64;
        visit(&page)?;
        match page.last().and_then(|l| b256_after(&l.0)) {
            Some(next) if page.len() == ACCOUNTS_PAGE => from = next,
            _ => return Ok(count),
        }
    }
}

/// The tries built from the flat state ([`build_nodes`]), their nodes committed on a
/// thread of their own while the next ones are built; also how many accounts there are.
fn build_all(
    store: &moat_storage::Store,
    expected: Option<B256>,
    held: bool,
) -> Result<(u64, Built), SnapError> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<WriteBatch>(2);
    let (built, written) = std::thread::scope(|scope| {
        let writer = scope.spawn(move || -> Result<(), StoreError> {
            for batch in rx {
                store.commit_relaxed(batch)?;
            }
            Ok(())
        });
        let built = build_nodes(store, expected, held, tx);
        let written = writer
            .join()
            .unwrap_or_else(|_| Err(StoreError::Db("the trie writer panicked".into())));
        (built, written)
    });
    written?;
    built
}

/// Builds the storage tries, then the account trie, of the downloaded accounts (read a
/// page at a time), sending their nodes to `tx` in batches; returns how many accounts
/// and storage tries there were, the account trie's root, and the last nodes (the
/// account trie's root among them) for the caller's final commit. With `held` the
/// account trie below its root was built during the download: only the root is made
/// (from the 16 nodes at `[i]`), and nothing is cleared (genesis' tries went when the
/// sync started); without, the first batch clears every trie but the account trie's
/// root node. With `expected` (the pivot's state root) every root is checked and the
/// last batch drops the by-address state; without, nothing is checked and the account
/// trie's root node is left out.
fn build_nodes(
    store: &moat_storage::Store,
    expected: Option<B256>,
    held: bool,
    tx: std::sync::mpsc::SyncSender<WriteBatch>,
) -> Result<(u64, Built), SnapError> {
    let gone = || SnapError::Store(StoreError::Db("the trie writer stopped".into()));
    // The store's trie must be exactly the pivot's: genesis' nodes go first, all but the
    // account trie's root, which stays until the last commit replaces it (a node killed
    // meanwhile opens at genesis' root and resumes this stage the same way). Genesis'
    // by-address state goes in that last commit.
    if !held {
        let mut clear = WriteBatch::new();
        clear.clear_tries_but_root();
        tx.send(clear).map_err(|_| gone())?;
    }
    let mut batch = WriteBatch::new();
    let mut in_batch = 0usize;
    let mut storage_tries = 0u64;
    let accounts = for_each_account_page(store, |page| {
        for (hash, account) in page {
            if account.storage_root == EMPTY_ROOT {
                continue;
            }
            let mut builder = SortedBuilder::new();
            let mut err = None;
            store.snap_slots_of(hash, |slot, value| {
                if err.is_none()
                    && let Err(e) = builder.push(&slot, alloy_rlp::encode(value))
                {
                    err = Some(e.to_string());
                }
            })?;
            if let Some(e) = err {
                return Err(SnapError::Mismatch(e));
            }
            let (root, nodes) = builder.finish();
            if expected.is_some() && root != account.storage_root {
                return Err(SnapError::Mismatch(format!(
                    "storage trie of {hash}: {root}, expected {}",
                    account.storage_root
                )));
            }
            storage_tries += 1;
            in_batch += nodes.len();
            for (path, rlp) in nodes {
                batch.set_trie_node(*hash, path, Some(rlp));
            }
            if in_batch >= NODES_PER_COMMIT {
                tx.send(std::mem::take(&mut batch)).map_err(|_| gone())?;
                in_batch = 0;
            }
        }
        Ok(())
    })?;
    let (root, nodes) = if held {
        let rlp = root_from_chunks(store)?
            .ok_or_else(|| SnapError::Mismatch("no root branch over the chunks".into()))?;
        (keccak256(&rlp), vec![(Vec::new(), rlp)])
    } else {
        let mut builder = SortedBuilder::new();
        for_each_account_page(store, |page| {
            for (hash, account) in page {
                builder
                    .push(hash, account_leaf(account))
                    .map_err(|e| SnapError::Mismatch(e.to_string()))?;
            }
            if builder.pending_nodes() >= NODES_PER_COMMIT {
                for (path, rlp) in builder.take_nodes() {
                    batch.set_trie_node(B256::ZERO, path, Some(rlp));
                }
                tx.send(std::mem::take(&mut batch)).map_err(|_| gone())?;
            }
            Ok(())
        })?;
        builder.finish()
    };
    let Some(expected) = expected else {
        for (path, rlp) in nodes {
            if !path.is_empty() {
                batch.set_trie_node(B256::ZERO, path, Some(rlp));
            }
        }
        return Ok((accounts, (storage_tries, root, batch)));
    };
    if root != expected {
        return Err(SnapError::Mismatch(format!(
            "account trie {root}, expected {expected}"
        )));
    }
    if !nodes.iter().any(|(path, _)| path.is_empty()) {
        // An empty state has no root node: genesis' must go.
        batch.set_trie_node(B256::ZERO, Vec::new(), None);
    }
    for (path, rlp) in nodes {
        batch.set_trie_node(B256::ZERO, path, Some(rlp));
    }
    batch.clear_flat_state();
    Ok((accounts, (storage_tries, root, batch)))
}

/// The root of the storage trie the downloaded slots of `owner` build, and how many
/// slots there are.
fn local_storage_root(
    store: &moat_storage::Store,
    owner: &B256,
) -> Result<(B256, usize), SnapError> {
    let mut builder = SortedBuilder::new();
    let (mut slots, mut bad) = (0usize, false);
    store.snap_slots_of(owner, |slot, value| {
        slots += 1;
        bad |= builder.push(&slot, alloy_rlp::encode(value)).is_err();
        // The nodes are not kept: only the root is wanted.
        builder.take_nodes();
    })?;
    if bad {
        return Ok((B256::ZERO, slots));
    }
    Ok((builder.finish().0, slots))
}

/// The account trie below path `[nibble]`, built from chunk `nibble`'s accounts as they
/// come in key order. A node the builder finishes at a path of one nibble or more is
/// the whole trie's node at that path: everything below `[nibble]` is this chunk's, and
/// where the builder placed it depends only on keys below it (a leaf one nibble below
/// its longest common prefix with a neighbour: a neighbour in another chunk shares no
/// nibble with it). Only the node at `[nibble]` itself may differ: over keys that share
/// more than their first nibble the builder's top is an extension (or a single leaf)
/// from the empty path, which in the whole trie starts one nibble lower, below the
/// root branch. [`ChunkTrie::finish`] writes it there; the root branch is made from the
/// 16 nodes at `[i]` when the tries are built ([`root_from_chunks`]).
struct ChunkTrie {
    nibble: u8,
    builder: SortedBuilder,
}

impl ChunkTrie {
    fn new(nibble: u8) -> Self {
        Self {
            nibble,
            builder: SortedBuilder::new(),
        }
    }

    /// Adds an account of the chunk (keys in strictly ascending order).
    fn push(&mut self, hash: &B256, account: &Account) -> Result<(), SnapError> {
        if hash.0[0] >> 4 != self.nibble {
            return Err(SnapError::Mismatch(format!(
                "account {hash} outside chunk {}",
                self.nibble
            )));
        }
        self.builder
            .push(hash, account_leaf(account))
            .map_err(|e| SnapError::Mismatch(e.to_string()))
    }

    /// The finished nodes below the root so far.
    fn take(&mut self) -> impl Iterator<Item = moat_trie::sorted::BuiltNode> {
        self.builder
            .take_nodes()
            .into_iter()
            .filter(|(path, _)| !path.is_empty())
    }

    /// The chunk's last nodes, its node at `[nibble]` among them (none for a chunk
    /// without accounts).
    fn finish(self) -> Result<Vec<moat_trie::sorted::BuiltNode>, SnapError> {
        let nibble = self.nibble;
        let (_, nodes) = self.builder.finish();
        let mut out = Vec::with_capacity(nodes.len() + 1);
        let mut top = None;
        for (path, rlp) in nodes {
            if path.is_empty() {
                top = Some(rlp);
            } else {
                out.push((path, rlp));
            }
        }
        let bad = |why: &str| SnapError::Mismatch(format!("chunk {nibble}'s trie: {why}"));
        let Some(top) = top else { return Ok(out) };
        match view_node(&top).ok_or_else(|| bad("not a trie node"))? {
            NodeView::Leaf(key, value) if key.first() == Some(&nibble) => {
                out.push((vec![nibble], leaf_rlp(&key[1..], &value)));
            }
            // Over one nibble the extension's child is the branch at `[nibble]`, which
            // the builder wrote at its own path.
            NodeView::Extension(key, child) if key.first() == Some(&nibble) => {
                if key.len() > 1 {
                    out.push((vec![nibble], extension_rlp(&key[1..], &child)));
                }
            }
            _ => return Err(bad("its top is not below its nibble")),
        }
        Ok(out)
    }
}

/// One checked account range for the [`TrieWriter`]: its chunk (`at`: where the chunk
/// stood before it), its accounts in the chunk, whether it ends the chunk, and the batch
/// of its writes and the record.
struct TrieJob {
    chunk: usize,
    at: Chunk,
    accounts: Vec<(B256, Account)>,
    done: bool,
    batch: WriteBatch,
}

/// The threads that build the account trie's chunks during the download and commit
/// each answer's batch with the nodes it finished: one builds, the other commits, in
/// the order sent (so the record never gets ahead of the writes it covers).
struct TrieWriter {
    tx: Option<std::sync::mpsc::SyncSender<TrieJob>>,
    handle: Option<std::thread::JoinHandle<Result<Busy, SnapError>>>,
}

/// How long the builder and the committer worked.
type Busy = (Duration, Duration);

fn trie_thread_stopped() -> SnapError {
    SnapError::Store(StoreError::Db("the trie thread stopped".into()))
}

impl TrieWriter {
    fn start(store: moat_storage::Store) -> Result<Self, SnapError> {
        let spawn = |name: &str| std::thread::Builder::new().name(name.into());
        let spawn_err = |e: std::io::Error| SnapError::Store(StoreError::Db(format!("{e}")));
        let (tx, rx) = std::sync::mpsc::sync_channel::<TrieJob>(4);
        let (ctx, crx) = std::sync::mpsc::sync_channel::<WriteBatch>(4);
        let store2 = store.clone();
        let committer = spawn("snap-commit")
            .spawn(move || -> Result<Duration, SnapError> {
                let mut busy = Duration::ZERO;
                for batch in crx {
                    let t = Instant::now();
                    store2.commit_relaxed(batch)?;
                    busy += t.elapsed();
                }
                Ok(busy)
            })
            .map_err(spawn_err)?;
        let handle = spawn("snap-trie")
            .spawn(move || -> Result<Busy, SnapError> {
                let mut busy = Duration::ZERO;
                let mut tries: Vec<Option<ChunkTrie>> = (0..CHUNKS).map(|_| None).collect();
                let mut built = Ok(());
                for mut job in rx {
                    let t = Instant::now();
                    let r = (|| {
                        let trie = chunk_trie(&store, &mut tries, job.chunk, &job.at)?;
                        for (hash, account) in &job.accounts {
                            trie.push(hash, account)?;
                        }
                        let mut nodes: Vec<_> = trie.take().collect();
                        if job.done
                            && let Some(trie) = tries[job.chunk].take()
                        {
                            nodes.extend(trie.finish()?);
                        }
                        for (path, rlp) in nodes {
                            job.batch.set_trie_node(B256::ZERO, path, Some(rlp));
                        }
                        ctx.send(job.batch).map_err(|_| trie_thread_stopped())
                    })();
                    busy += t.elapsed();
                    if r.is_err() {
                        built = r;
                        break;
                    }
                }
                // What was sent is committed before the thread ends.
                drop(ctx);
                let committed = committer
                    .join()
                    .unwrap_or_else(|_| Err(trie_thread_stopped()));
                built?;
                Ok((busy, committed?))
            })
            .map_err(spawn_err)?;
        Ok(Self {
            tx: Some(tx),
            handle: Some(handle),
        })
    }

    /// Hands over an answer (waiting while four are queued); threads that stopped give
    /// their error.
    fn send(&mut self, job: TrieJob) -> Result<(), SnapError> {
        let sent = self.tx.as_ref().is_some_and(|tx| tx.send(job).is_ok());
        if sent {
            return Ok(());
        }
        self.join()?;
        Err(trie_thread_stopped())
    }

    /// Waits until every answer sent is committed; how long building and committing took.
    fn finish(mut self) -> Result<Busy, SnapError> {
        self.join()
    }

    fn join(&mut self) -> Result<Busy, SnapError> {
        self.tx = None;
        match self.handle.take().map(|h| h.join()) {
            Some(Ok(result)) => result,
            Some(Err(_)) | None => Err(trie_thread_stopped()),
        }
    }
}

impl Drop for TrieWriter {
    /// A stage that ends early still waits for what it sent to be committed, so that no
    /// write lands after the stage has returned.
    fn drop(&mut self) {
        if self.handle.is_some() {
            let _ = self.join();
        }
    }
}

/// The trie builder of chunk `i` (at `c`, before the answer): made at its first
/// answer, and fed then with what the store holds of the chunk (from an earlier run)
/// up to `c.next`, the nodes it finishes meanwhile being stored already.
fn chunk_trie<'t>(
    store: &moat_storage::Store,
    tries: &'t mut [Option<ChunkTrie>],
    i: usize,
    c: &Chunk,
) -> Result<&'t mut ChunkTrie, SnapError> {
    if tries[i].is_none() {
        let mut trie = ChunkTrie::new(i as u8);
        let mut from = chunk_start(i);
        while from < c.next {
            let mut page = Vec::with_capacity(ACCOUNTS_PAGE);
            store.snap_accounts_from(&from, |h, a| {
                if h >= c.next {
                    return false;
                }
                page.push((h, a));
                page.len() < ACCOUNTS_PAGE
            })?;
            for (h, a) in &page {
                trie.push(h, a)?;
            }
            drop(trie.take());
            match page.last().and_then(|l| b256_after(&l.0)) {
                Some(next) if page.len() == ACCOUNTS_PAGE => from = next,
                _ => break,
            }
        }
        tries[i] = Some(trie);
    }
    tries[i]
        .as_mut()
        .ok_or_else(|| SnapError::Mismatch("no chunk trie".into()))
}

/// The account trie's root branch over the 16 chunks' nodes at `[i]`; `None` when fewer
/// than two chunks hold accounts (the root is then no branch: the caller builds the
/// trie whole).
fn root_from_chunks(store: &moat_storage::Store) -> Result<Option<Vec<u8>>, SnapError> {
    let mut children = Vec::with_capacity(16);
    for i in 0..16u8 {
        let child = store.trie_node(&B256::ZERO, &[i])?;
        children.push(
            child
                .map(|rlp| moat_trie::node_ref(&rlp))
                .unwrap_or_default(),
        );
    }
    if children.iter().filter(|c| !c.is_empty()).count() < 2 {
        return Ok(None);
    }
    let empty = [alloy_rlp::EMPTY_STRING_CODE];
    let mut items: Vec<&[u8]> = children
        .iter()
        .map(|c| {
            if c.is_empty() {
                &empty[..]
            } else {
                c.as_slice()
            }
        })
        .collect();
    items.push(&empty);
    Ok(Some(rlp_list(&items)))
}

/// An RLP list of items already encoded.
fn rlp_list(items: &[&[u8]]) -> Vec<u8> {
    let payload_length = items.iter().map(|i| i.len()).sum();
    let mut out = Vec::with_capacity(payload_length + 9);
    alloy_rlp::Header {
        list: true,
        payload_length,
    }
    .encode(&mut out);
    for i in items {
        out.extend_from_slice(i);
    }
    out
}

/// A key's nibbles in hex-prefix form, with the leaf flag or not.
fn hex_prefix(nibbles: &[u8], leaf: bool) -> Vec<u8> {
    let flag = if leaf { 2 } else { 0 };
    let mut out = Vec::with_capacity(nibbles.len() / 2 + 1);
    let rest = if nibbles.len() % 2 == 1 {
        out.push(((flag + 1) << 4) | nibbles[0]);
        &nibbles[1..]
    } else {
        out.push(flag << 4);
        nibbles
    };
    for pair in rest.chunks(2) {
        out.push((pair[0] << 4) | pair.get(1).copied().unwrap_or(0));
    }
    out
}

fn leaf_rlp(key: &[u8], value: &[u8]) -> Vec<u8> {
    let key = alloy_rlp::encode(hex_prefix(key, true).as_slice());
    rlp_list(&[&key, &alloy_rlp::encode(value)])
}

/// An extension over `key` to the child `child` (a reference as a parent holds it).
fn extension_rlp(key: &[u8], child: &[u8]) -> Vec<u8> {
    let key = alloy_rlp::encode(hex_prefix(key, false).as_slice());
    rlp_list(&[&key, child])
}

/// The progress line's ETA: in `secs` the share of the stage left went from `left_then`
/// to `left`; what is left at that rate. "unknown" while nothing was done in that time
/// or nothing is left.
fn eta(secs: f64, left_then: f64, left: f64) -> String {
    let done = left_then - left;
    if done > 0.0 && left > 0.0 && secs > 0.0 {
        format!("{:.0}s", secs * left / done)
    } else {
        "unknown".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use moat_trie::{MemoryNodes, Trie};

    /// A storage trie of `n` slots (value i + 1 at keccak(i)): its nodes, root and the
    /// slots in key order as a peer sends them.
    fn storage(owner: B256, n: u64) -> (MemoryNodes, B256, Vec<(B256, Bytes)>) {
        let mut nodes = MemoryNodes::default();
        let mut slots: Vec<(B256, Bytes)> = (0..n)
            .map(|i| {
                let v = alloy_rlp::encode(U256::from(i + 1));
                (keccak256(i.to_be_bytes()), Bytes::from(v))
            })
            .collect();
        slots.sort();
        let mut trie = Trie::new(&nodes, owner);
        for (k, v) in &slots {
            trie.insert(k, v.to_vec()).unwrap();
        }
        let commit = trie.commit().unwrap();
        nodes.apply(&owner, &commit);
        (nodes, commit.root, slots)
    }

    #[test]
    fn the_heal_record_comes_back_and_bad_ones_are_refused() {
        let record = HealRecord {
            root: B256::repeat_byte(7),
            phase: HealPhase::Storage,
            tasks: vec![
                HealTask {
                    owner: B256::ZERO,
                    path: vec![],
                    hash: B256::repeat_byte(1),
                },
                HealTask {
                    owner: B256::repeat_byte(2),
                    path: vec![0x0f, 0, 3],
                    hash: B256::repeat_byte(3),
                },
            ],
        };
        let bytes = record.encode();
        assert_eq!(HealRecord::decode(&bytes), Some(record.clone()));
        assert_eq!(record.nodes_left(), 2);
        assert!(!record.done());
        // Every truncation, a trailing byte, another version or phase, a nibble out of
        // range: refused (healing then starts over), never a panic.
        for n in 0..bytes.len() {
            assert_eq!(HealRecord::decode(&bytes[..n]), None, "cut at {n}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(HealRecord::decode(&longer), None);
        let mut spoiled = bytes.clone();
        spoiled[0] = 9;
        assert_eq!(HealRecord::decode(&spoiled), None);
        let mut spoiled = bytes.clone();
        spoiled[33] = 3;
        assert_eq!(HealRecord::decode(&spoiled), None);
        let mut spoiled = bytes.clone();
        *spoiled.last_mut().unwrap() = 0x10;
        assert_eq!(HealRecord::decode(&spoiled), None);
        // A count larger than the record holds.
        let mut spoiled = bytes;
        spoiled[34..38].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(HealRecord::decode(&spoiled), None);
    }

    fn proof(nodes: &MemoryNodes, owner: B256, origin: &B256, last: &B256) -> Vec<Bytes> {
        moat_trie::range::range_proof(nodes, &owner, origin, Some(last))
            .unwrap()
            .into_iter()
            .map(Bytes::from)
            .collect()
    }

    #[test]
    fn storage_answers_are_checked_against_the_accounts_asked() {
        let (a, b) = (B256::repeat_byte(0xaa), B256::repeat_byte(0xbb));
        let (_, root_a, slots_a) = storage(a, 5);
        let (nodes_b, root_b, slots_b) = storage(b, 40);
        let asked = [(a, root_a), (b, root_b)];
        // Whole tries: every account complete.
        let (got, more) =
            check_storage(&asked, B256::ZERO, &[slots_a.clone(), slots_b.clone()], &[]).unwrap();
        assert!(!more);
        assert_eq!(got[1].len(), 40);
        let mut values: Vec<U256> = got[0].iter().map(|s| s.1).collect();
        values.sort();
        assert_eq!(values, (1..=5u64).map(U256::from).collect::<Vec<_>>());
        // The last account cut short, with its proof: more to come.
        let part = &slots_b[..10];
        let p = proof(&nodes_b, b, &B256::ZERO, &part[9].0);
        let (got, more) =
            check_storage(&asked, B256::ZERO, &[slots_a.clone(), part.to_vec()], &p).unwrap();
        assert!(more);
        assert_eq!(got[1].len(), 10);
        // More slot lists than accounts asked, one account's slots for the other, a cut
        // without its proof, and a continued range with a slot before its origin.
        let extra = [slots_a.clone(), slots_b.clone(), slots_a.clone()];
        assert!(check_storage(&asked, B256::ZERO, &extra, &[]).is_err());
        let swapped = [slots_b.clone(), slots_a.clone()];
        assert!(check_storage(&asked, B256::ZERO, &swapped, &[]).is_err());
        assert!(check_storage(&asked, B256::ZERO, &[slots_a, part.to_vec()], &[]).is_err());
        let origin = slots_b[20].0;
        let p = proof(&nodes_b, b, &origin, &slots_b[30].0);
        let one = [(b, root_b)];
        assert!(
            check_storage(&one, origin, &[slots_b[20..=30].to_vec()], &p)
                .unwrap()
                .1
        );
        assert!(check_storage(&one, origin, &[slots_b[19..=30].to_vec()], &p).is_err());
        // No slots at all for a trie that has them, under a proof of its start.
        let p = proof(&nodes_b, b, &B256::ZERO, &slots_b[0].0);
        assert!(check_storage(&one, B256::ZERO, &[Vec::new()], &p).is_err());
    }

    #[test]
    fn the_progress_lines_eta_is_the_rate_so_far_over_what_is_left() {
        // A quarter done in 30 s: three quarters left take 90 s more.
        assert_eq!(eta(30.0, 1.0, 0.75), "90s");
        // Resumed at half done (the run before the restart did that half): the rate is
        // this run's, a tenth in 10 s, so the 40 % left take 40 s.
        assert_eq!(eta(10.0, 0.5, 0.4), "40s");
        // Nothing done since, nothing left, or no time yet: no rate to go by.
        assert_eq!(eta(5.0, 0.6, 0.6), "unknown");
        assert_eq!(eta(5.0, 0.6, 0.0), "unknown");
        assert_eq!(eta(0.0, 0.6, 0.5), "unknown");
        assert_eq!(eta(5.0, f64::NAN, 0.5), "unknown");
    }

    #[test]
    fn account_ranges_outside_their_proof_are_refused() {
        let mut nodes = MemoryNodes::default();
        let mut leaves: Vec<(B256, Vec<u8>)> = (0..30u64)
            .map(|i| {
                let a = Account {
                    nonce: i,
                    balance: U256::from(i * 7),
                    storage_root: EMPTY_ROOT,
                    code_hash: KECCAK256_EMPTY,
                };
                (keccak256(i.to_be_bytes()), account_leaf(&a))
            })
            .collect();
        leaves.sort();
        let mut trie = Trie::new(&nodes, B256::ZERO);
        for (k, v) in &leaves {
            trie.insert(k, v.clone()).unwrap();
        }
        let commit = trie.commit().unwrap();
        nodes.apply(&B256::ZERO, &commit);
        let root = commit.root;
        let slim: Vec<(B256, Bytes)> = leaves
            .iter()
            .map(|(k, v)| (*k, Bytes::from(moat_p2p::snap::slim_account(v).unwrap())))
            .collect();
        let origin = leaves[10].0;
        let p = proof(&nodes, B256::ZERO, &origin, &leaves[19].0);
        let (got, more) = check_accounts(root, &origin, &slim[10..20], &p).unwrap();
        assert!(more);
        assert_eq!(got.len(), 10);
        assert_eq!(got[0].1.nonce, decode_account(&leaves[10].1).unwrap().nonce);
        // One before the origin, one twice, the order turned, one left out, one altered.
        assert!(check_accounts(root, &origin, &slim[9..20], &p).is_err());
        let twice = [&slim[10..20], &slim[19..20]].concat();
        assert!(check_accounts(root, &origin, &twice, &p).is_err());
        let mut turned = slim[10..20].to_vec();
        turned.reverse();
        assert!(check_accounts(root, &origin, &turned, &p).is_err());
        let gap = [&slim[10..14], &slim[15..20]].concat();
        assert!(check_accounts(root, &origin, &gap, &p).is_err());
        let mut altered = slim[10..20].to_vec();
        altered[3].1 = Bytes::from(moat_p2p::snap::slim_account(&leaves[4].1).unwrap());
        assert!(check_accounts(root, &origin, &altered, &p).is_err());
        // Garbage in the proof, or a body that is no account.
        let mut bad = p.clone();
        bad.push(Bytes::from(vec![0xc0]));
        bad[0] = Bytes::from(vec![0xff; 64]);
        assert!(check_accounts(root, &origin, &slim[10..20], &bad).is_err());
        let mut shape = slim[10..20].to_vec();
        shape[0].1 = Bytes::from(vec![0xc3, 0x80, 0x80, 0x80]);
        assert!(check_accounts(root, &origin, &shape, &p).is_err());
    }

    #[test]
    fn a_healed_node_drops_the_flat_entries_it_no_longer_holds() {
        let store = moat_storage::Store::in_memory();
        let key = |first: u8| {
            let mut k = [0x11u8; 32];
            k[0] = first;
            B256::from(k)
        };
        let a = Account {
            nonce: 1,
            balance: U256::from(1),
            storage_root: EMPTY_ROOT,
            code_hash: KECCAK256_EMPTY,
        };
        let slot = B256::repeat_byte(1);
        let mut batch = WriteBatch::new();
        for k in [0x00, 0x12, 0x1f, 0x20, 0xff].map(key) {
            batch.put_snap_account(k, &a);
            batch.put_snap_slot(k, slot, U256::from(7));
        }
        store.commit(batch).unwrap();
        let held = || {
            let mut out = Vec::new();
            store
                .snap_accounts_from(&B256::ZERO, |h, _| {
                    out.push(h);
                    true
                })
                .unwrap();
            out
        };
        let drop = |prefix: &[u8], keep: Keep<'_>, owner: B256| {
            let mut b = WriteBatch::new();
            delete_under(&store, owner, prefix, keep, &mut b).unwrap();
            store.commit(b).unwrap();
        };
        // An extension at nibble 1 with key 2: what is under 1 but off 1,2 goes, with
        // its slots.
        drop(&[1], Keep::Prefix(&[1, 2]), B256::ZERO);
        assert_eq!(held(), [0x00, 0x12, 0x20, 0xff].map(key));
        assert!(store.snap_slot(&key(0x1f), &slot).unwrap().is_zero());
        assert_eq!(store.snap_slot(&key(0x12), &slot).unwrap(), U256::from(7));
        // An empty branch slot at nibble 0; a leaf at the root keeps its key only (the
        // lowest and the highest key of the space are reached).
        drop(&[0], Keep::Nothing, B256::ZERO);
        assert_eq!(held(), [0x12, 0x20, 0xff].map(key));
        drop(&[], Keep::Key(key(0x20)), B256::ZERO);
        assert_eq!(held(), [key(0x20)]);
        // A storage trie's slots under a path.
        let owner = key(0x20);
        let mut batch = WriteBatch::new();
        for s in [0x00u8, 0x5a, 0xff] {
            batch.put_snap_slot(owner, B256::repeat_byte(s), U256::from(s as u64 + 1));
        }
        store.commit(batch).unwrap();
        drop(&[5], Keep::Key(B256::repeat_byte(0x5a)), owner);
        drop(&[0xf], Keep::Nothing, owner);
        let mut slots = Vec::new();
        store.snap_slots_of(&owner, |s, _| slots.push(s)).unwrap();
        assert_eq!(slots, [0x00, 0x01, 0x5a].map(B256::repeat_byte));
    }

    /// The account trie built chunk by chunk (as the download does, nodes taken a few
    /// accounts at a time), with its root made from the 16 nodes at `[i]`, is node for
    /// node the trie built whole: chunks with no account, one account, keys sharing
    /// more than their first nibble (an extension below the root) or only it.
    #[test]
    fn the_account_trie_built_by_chunks_is_the_whole_trie() {
        let account = |i: u64| Account {
            nonce: i,
            balance: U256::from(i * 3 + 1),
            storage_root: EMPTY_ROOT,
            code_hash: KECCAK256_EMPTY,
        };
        let spread = |n: u64| {
            (0..n)
                .map(|i| keccak256(i.to_be_bytes()))
                .collect::<Vec<_>>()
        };
        // Keys of one chunk sharing `prefix` (two nibbles or more).
        let under = |prefix: &[u8], n: u64| {
            (0..n)
                .map(|i| {
                    let mut k = keccak256((i + 1000).to_be_bytes()).0;
                    k[..prefix.len()].copy_from_slice(prefix);
                    B256::from(k)
                })
                .collect::<Vec<_>>()
        };
        let cases: Vec<Vec<B256>> = vec![
            spread(3000),
            spread(40),
            // Chunk 3 one account, chunk 5 under 0x5a 0x7, chunk 9 under 0x9c, the rest empty.
            [
                under(&[0x30], 1),
                under(&[0x5a, 0x70], 30),
                under(&[0x9c], 7),
            ]
            .concat(),
            // Two chunks of one account each.
            [under(&[0x10], 1), under(&[0xe0], 1)].concat(),
        ];
        for mut keys in cases {
            keys.sort();
            keys.dedup();
            let leaves: Vec<(B256, Account)> = keys
                .iter()
                .enumerate()
                .map(|(i, k)| (*k, account(i as u64)))
                .collect();
            let mut whole = SortedBuilder::new();
            for (k, a) in &leaves {
                whole.push(k, account_leaf(a)).unwrap();
            }
            let (root, nodes) = whole.finish();
            let want: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = nodes.into_iter().collect();

            let store = moat_storage::Store::in_memory();
            let mut got = std::collections::BTreeMap::new();
            for nibble in 0..16u8 {
                let mut trie = ChunkTrie::new(nibble);
                let mine: Vec<_> = leaves.iter().filter(|l| l.0.0[0] >> 4 == nibble).collect();
                for part in mine.chunks(7) {
                    for (k, a) in part {
                        trie.push(k, a).unwrap();
                    }
                    got.extend(trie.take());
                }
                got.extend(trie.finish().unwrap());
            }
            let mut batch = WriteBatch::new();
            for (path, rlp) in &got {
                batch.set_trie_node(B256::ZERO, path.clone(), Some(rlp.clone()));
            }
            store.commit(batch).unwrap();
            let top = root_from_chunks(&store).unwrap().unwrap();
            assert_eq!(keccak256(&top), root);
            got.insert(Vec::new(), top);
            assert_eq!(got, want, "{} accounts", leaves.len());
        }
        // An account of another chunk is refused.
        let mut trie = ChunkTrie::new(2);
        assert!(trie.push(&B256::repeat_byte(0x31), &account(1)).is_err());
        // One chunk alone makes no root branch (the trie is then built whole).
        let store = moat_storage::Store::in_memory();
        let mut trie = ChunkTrie::new(4);
        trie.push(&B256::repeat_byte(0x44), &account(1)).unwrap();
        let mut batch = WriteBatch::new();
        for (path, rlp) in trie.finish().unwrap() {
            batch.set_trie_node(B256::ZERO, path, Some(rlp));
        }
        store.commit(batch).unwrap();
        assert!(root_from_chunks(&store).unwrap().is_none());
    }

    #[test]
    fn the_last_chunk_ends_at_the_top_of_the_hash_space() {
        let p = Progress::new(
            &SealedHeader::decode(moat_common::block::Header::default().encoded().into()).unwrap(),
        );
        assert_eq!(p.chunks.len(), CHUNKS);
        assert_eq!(p.chunks[0].next, B256::ZERO);
        assert_eq!(p.chunks[CHUNKS - 1].limit, B256::repeat_byte(0xff));
        for w in p.chunks.windows(2) {
            assert_eq!(
                b256_after(&w[0].limit),
                Some(w[1].next),
                "no gap, no overlap"
            );
        }
        assert_eq!(b256_after(&B256::repeat_byte(0xff)), None);
        assert_eq!(Progress::decode(&p.encode()), Some(p));
    }
}
