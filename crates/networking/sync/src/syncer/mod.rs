//! The full-sync state machine: one task that walks headers back from the target,
//! downloads bodies from several peers at once, and feeds an importer thread.
//!
//! [`spawn`] starts it and hands back the [`SyncHandle`] the node and the engine API hold.
//! The work is split by job:
//!
//! - `session`: the task's main loop: a target at a time, what ends a sync (done,
//!   replaced, retried, invalid, out of reach), the progress figures and lines;
//! - `snap_stage`: whether the state comes by snap first, and running that stage;
//! - `headers`: walking headers back from the target to the local chain;
//! - `skeleton`: the walked headers, ascending, from just above the local chain;
//! - `bodies`: body requests over the peers, and handing blocks to the importer in order;
//! - `import`: the importer thread (and the sender-recovery thread ahead of it).

mod bodies;
mod headers;
mod import;
mod session;
mod skeleton;
mod snap_stage;

use crate::snap::{SnapConfig, SnapFigures, SnapStatus};
use crate::source::BlockSource;
use alloy_primitives::B256;
use bodies::Fetched;
use import::{ImportBatch, ImportEvent, importer, recoverer};
use moat_blockchain::chain::Chain;
use moat_common::block::Block;
use moat_mempool::SenderCache;
use moat_p2p::rlpx::PeerId;
use parking_lot::Mutex;
use session::Stats;
use skeleton::Skeleton;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
type Set<K> = HashSet<K, foldhash::fast::RandomState>;

/// A chain the syncer refused: a block of it failed validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidChain {
    /// The bad block's parent, when this node holds it (the engine API's
    /// `latestValidHash`).
    pub latest_valid: Option<B256>,
    /// Why the block was refused.
    pub why: String,
}

/// Blocks per batch handed to the importer.
const IMPORT_BATCH: usize = 32;
/// Batches queued to the importer.
const IMPORT_QUEUE: usize = 8;
/// Body requests one peer may have from us at once.
const BODY_REQUESTS_PER_PEER: usize = 2;
/// How long a peer that failed us is not asked again.
const REST: Duration = Duration::from_secs(2);
/// Bad targets remembered (their chain holds an invalid block).
const BAD_TARGETS: usize = 256;

/// How the syncer works.
#[derive(Debug, Clone)]
pub struct SyncConfig {
    /// Headers asked per request while walking back.
    pub header_batch: u64,
    /// Bodies asked per request.
    pub body_batch: usize,
    /// Body requests in flight across all peers.
    pub max_body_requests: usize,
    /// Blocks downloaded ahead of the head at most (bounds memory).
    pub max_ahead: u64,
    /// Between two progress lines.
    pub progress_every: Duration,
    /// Before asking again when no peer had what was asked.
    pub retry_after: Duration,
    /// The chain's sender cache (the one given to [`Chain::with_sender_cache`]): when
    /// set, a thread of its own recovers the senders of each batch before the importer
    /// takes it, so the importer finds them there instead of running ECDSA itself.
    pub senders: Option<SenderCache>,
    /// Snap sync: a node at genesis (or with a snap sync under way) first downloads the
    /// state at a pivot 64 blocks below the target ([`crate::snap`]), then full-syncs
    /// from there. Off: every block is executed from the local head.
    pub snap: bool,
    /// How the snap stage works.
    pub snap_cfg: SnapConfig,
}

impl Default for SyncConfig {
    fn default() -> Self {
        Self {
            header_batch: 192,
            body_batch: 128,
            max_body_requests: 8,
            max_ahead: 4096,
            progress_every: Duration::from_secs(8),
            retry_after: Duration::from_secs(1),
            senders: None,
            snap: false,
            snap_cfg: SnapConfig::default(),
        }
    }
}

/// What `eth_syncing` reports while a sync runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncProgress {
    /// The head when this sync started.
    pub starting_block: u64,
    /// The head now.
    pub current_block: u64,
    /// The target's number (the head until the target's header is known).
    pub highest_block: u64,
    /// While the snap stage runs: its figures.
    pub snap: Option<SnapFigures>,
}

#[derive(Debug)]
struct Shared {
    chain: Chain,
    target: watch::Sender<Option<B256>>,
    /// (starting block, highest block) while a sync runs.
    progress: Mutex<Option<(u64, u64)>>,
    heads: watch::Sender<B256>,
    synced: Arc<AtomicBool>,
    /// Targets whose chain holds an invalid block, and the bad blocks themselves:
    /// asked again, they are ignored.
    bad: Mutex<Map<B256, InvalidChain>>,
    /// The snap stage's figures while it runs.
    snap: SnapStatus,
}

/// The running syncer, as the node and the engine API hold it. Cloning shares it.
#[derive(Debug, Clone)]
pub struct SyncHandle {
    shared: Arc<Shared>,
}

impl SyncHandle {
    /// Syncs to `hash` (the consensus client's head); replaces an earlier target.
    pub fn set_target(&self, hash: B256) {
        if self.shared.bad.lock().contains_key(&hash) {
            return;
        }
        self.shared.target.send_if_modified(|t| {
            if *t == Some(hash) {
                false
            } else {
                *t = Some(hash);
                true
            }
        });
    }

    /// Whether `hash` is a target (or block) the syncer found invalid: a block of its
    /// chain failed validation. The engine API answers INVALID for it.
    pub fn invalid(&self, hash: &B256) -> Option<InvalidChain> {
        self.shared.bad.lock().get(hash).cloned()
    }

    /// The latest target asked for.
    pub fn target(&self) -> Option<B256> {
        *self.shared.target.borrow()
    }

    /// `None` unless a sync is running.
    pub fn progress(&self) -> Option<SyncProgress> {
        let (start, highest) = (*self.shared.progress.lock())?;
        let current = self.shared.chain.head().map_or(start, |(n, _)| n);
        let snap = *self.shared.snap.lock();
        Some(SyncProgress {
            // A reorg onto the target's branch takes the head below where the sync
            // started for a moment; the start is reported no higher than the head.
            starting_block: start.min(current),
            current_block: current,
            highest_block: highest.max(current).max(snap.map_or(0, |s| s.highest)),
            snap,
        })
    }

    /// The head after each batch of blocks the syncer imported.
    pub fn subscribe_heads(&self) -> watch::Receiver<B256> {
        self.shared.heads.subscribe()
    }
}

/// Starts the syncer on the current runtime (and its importer on a thread of its own).
/// `synced` is the node's "at the head" flag: cleared while a sync runs, set when it
/// reaches its target.
pub fn spawn<S: BlockSource>(
    chain: Chain,
    source: Arc<S>,
    synced: Arc<AtomicBool>,
    cfg: SyncConfig,
) -> SyncHandle {
    let head = chain.head().map(|(_, h)| h).unwrap_or_default();
    let shared = Arc::new(Shared {
        chain: chain.clone(),
        target: watch::channel(None).0,
        progress: Mutex::new(None),
        heads: watch::channel(head).0,
        synced,
        bad: Mutex::new(Map::default()),
        snap: SnapStatus::default(),
    });
    let (import_tx, mut import_rx) = mpsc::channel(IMPORT_QUEUE);
    let (events_tx, events) = mpsc::unbounded_channel();
    let epoch = Arc::new(AtomicU64::new(0));
    if let Some(cache) = cfg.senders.clone() {
        // syncer ─▶ recoverer ─▶ importer: the importer's queue holds batches whose
        // senders are known; two of them are enough to keep it busy.
        let (recovered_tx, recovered_rx) = mpsc::channel(2);
        let batches = std::mem::replace(&mut import_rx, recovered_rx);
        std::thread::Builder::new()
            .name("moat-sync-senders".into())
            .spawn(move || recoverer(cache, batches, recovered_tx))
            .expect("the OS starts the sync sender-recovery thread");
    }
    {
        let (chain, epoch, shared) = (chain.clone(), epoch.clone(), shared.clone());
        std::thread::Builder::new()
            .name("moat-sync-import".into())
            .spawn(move || importer(chain, import_rx, events_tx, epoch, shared))
            .expect("the OS starts the sync importer thread");
    }
    let syncer = Syncer {
        chain,
        source,
        shared: shared.clone(),
        cfg,
        skeleton: Skeleton::default(),
        ready: Map::default(),
        in_flight: Set::default(),
        fetches: JoinSet::new(),
        outstanding: Map::default(),
        resting: Map::default(),
        import_tx,
        events,
        epoch,
        sent_upto: 0,
        stats: Stats::new(),
        snap_off: false,
    };
    tokio::spawn(syncer.run());
    SyncHandle { shared }
}

/// Why a sync stopped short of its target.
#[derive(Debug)]
enum Stop {
    /// A new target came.
    Replaced,
    /// Something on the way failed (peers, an unexpected chain state): start over.
    Retry(String),
    /// The target's chain holds an invalid block (`hash`, child of `parent`).
    Invalid {
        hash: B256,
        parent: B256,
        why: String,
    },
    /// The target cannot be reached from here (a reorg deeper than undo records reach).
    Unreachable(String),
}

struct Syncer<S> {
    chain: Chain,
    source: Arc<S>,
    shared: Arc<Shared>,
    cfg: SyncConfig,
    skeleton: Skeleton,
    /// Downloaded blocks not yet handed to the importer.
    ready: Map<B256, Block>,
    /// Hashes whose bodies are being fetched.
    in_flight: Set<B256>,
    fetches: JoinSet<Fetched>,
    /// Our body requests per peer.
    outstanding: Map<PeerId, usize>,
    /// Peers not to ask until then.
    resting: Map<PeerId, Instant>,
    import_tx: mpsc::Sender<ImportBatch>,
    events: mpsc::UnboundedReceiver<ImportEvent>,
    /// Batches of an older epoch are dropped by the importer: bumped when what was
    /// queued no longer leads to the target.
    epoch: Arc<AtomicU64>,
    /// The highest block number handed to the importer (in this epoch).
    sent_upto: u64,
    stats: Stats,
    /// Snap sync given up this run (no peer serves snap/1): full sync only.
    snap_off: bool,
}

fn retry(e: impl std::fmt::Display) -> Stop {
    Stop::Retry(e.to_string())
}

fn short(id: &PeerId) -> String {
    alloy_primitives::hex::encode(&id[..8])
}
