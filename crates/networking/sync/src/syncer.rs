//! The full-sync state machine: one task that walks headers back from the target,
//! downloads bodies from several peers at once, and feeds an importer thread.

use crate::snap::{self, SnapConfig, SnapError, SnapFigures, SnapStatus};
use crate::source::BlockSource;
use alloy_primitives::B256;
use moat_blockchain::chain::{Chain, ChainError, ImportOutcome};
use moat_blockchain::mempool::SenderCache;
use moat_common::block::Block;
use moat_p2p::requests::MAX_IN_FLIGHT;
use moat_p2p::rlpx::PeerId;
use moat_p2p::{HeadersRequest, RequestError, SealedHeader, SyncPeer};
use moat_storage::WriteBatch;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// The headers from just above the local chain up to the target, ascending, each the
/// parent of the next.
#[derive(Debug, Default)]
struct Skeleton {
    headers: VecDeque<SealedHeader>,
    numbers: Map<B256, u64>,
}

impl Skeleton {
    fn first_number(&self) -> Option<u64> {
        self.headers.front().map(|h| h.number())
    }

    fn last_number(&self) -> Option<u64> {
        self.headers.back().map(|h| h.number())
    }

    fn get(&self, number: u64) -> Option<&SealedHeader> {
        let first = self.first_number()?;
        self.headers
            .get(usize::try_from(number.checked_sub(first)?).ok()?)
    }

    fn number_of(&self, hash: &B256) -> Option<u64> {
        self.numbers.get(hash).copied()
    }

    fn contains(&self, hash: &B256) -> bool {
        self.numbers.contains_key(hash)
    }

    /// Keeps the headers up to `number`.
    fn truncate_above(&mut self, number: u64) {
        while self.last_number().is_some_and(|n| n > number) {
            if let Some(h) = self.headers.pop_back() {
                self.numbers.remove(&h.hash);
            }
        }
    }

    /// Appends `h`, which must be the child of the last header.
    fn push(&mut self, h: SealedHeader) {
        debug_assert!(
            self.headers
                .back()
                .is_none_or(|l| l.hash == h.header.parent_hash && l.number() + 1 == h.number())
        );
        self.numbers.insert(h.hash, h.number());
        self.headers.push_back(h);
    }

    fn pop_front(&mut self) {
        if let Some(h) = self.headers.pop_front() {
            self.numbers.remove(&h.hash);
        }
    }

    fn clear(&mut self) {
        self.headers.clear();
        self.numbers.clear();
    }
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

/// A batch of blocks, in order, for the importer.
struct ImportBatch {
    epoch: u64,
    blocks: Vec<Block>,
}

enum ImportEvent {
    Imported {
        blocks: u64,
        gas: u64,
        time: ImportTime,
    },
    Failed {
        /// The epoch of the batch that failed.
        epoch: u64,
        hash: B256,
        number: u64,
        parent: B256,
        error: ChainError,
    },
}

/// Where a batch's time went on the importer thread: waiting for it (the download
/// behind), executing and committing its blocks, making them durable.
#[derive(Debug, Clone, Copy, Default)]
struct ImportTime {
    idle: Duration,
    import: Duration,
    flush: Duration,
}

impl std::ops::AddAssign for ImportTime {
    fn add_assign(&mut self, o: Self) {
        self.idle += o.idle;
        self.import += o.import;
        self.flush += o.flush;
    }
}

/// One body request's outcome.
struct Fetched {
    peer: PeerId,
    asked: Vec<B256>,
    result: Result<Vec<Block>, RequestError>,
}

/// Import figures for the progress lines.
#[derive(Debug)]
struct Stats {
    started: Instant,
    blocks: u64,
    gas: u64,
    /// The importer's time over the session.
    time: ImportTime,
    window_start: Instant,
    window_blocks: u64,
    window_gas: u64,
}

impl Stats {
    fn new() -> Self {
        let now = Instant::now();
        Self {
            started: now,
            blocks: 0,
            gas: 0,
            time: ImportTime::default(),
            window_start: now,
            window_blocks: 0,
            window_gas: 0,
        }
    }
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

impl<S: BlockSource> Syncer<S> {
    async fn run(mut self) {
        let mut targets = self.shared.target.subscribe();
        loop {
            let target = *targets.borrow_and_update();
            let Some(target) = target else {
                if targets.changed().await.is_err() {
                    return;
                }
                continue;
            };
            match self.sync(target, &mut targets).await {
                Ok(()) => {
                    self.await_last_batch().await;
                    self.finish(target);
                    if targets.changed().await.is_err() {
                        return;
                    }
                }
                Err(Stop::Replaced) => {}
                Err(Stop::Retry(why)) => {
                    tracing::warn!(%target, why, "sync interrupted; starting over");
                    self.reset();
                    tokio::select! {
                        _ = tokio::time::sleep(self.cfg.retry_after) => {}
                        _ = targets.changed() => {}
                    }
                }
                Err(Stop::Invalid { hash, parent, why }) => {
                    tracing::error!(%target, bad_block = %hash, why, "sync stopped: the target's chain holds an invalid block");
                    // The engine API's latestValidHash: the bad block's parent, which
                    // this node holds (it was imported, or the chain joined there).
                    let latest_valid = self.chain.header(&parent).ok().flatten().map(|_| parent);
                    let verdict = InvalidChain { latest_valid, why };
                    {
                        let mut bad = self.shared.bad.lock();
                        if bad.len() >= BAD_TARGETS {
                            bad.clear();
                        }
                        bad.insert(target, verdict.clone());
                        bad.insert(hash, verdict);
                    }
                    self.stop_session();
                    if targets.changed().await.is_err() {
                        return;
                    }
                }
                Err(Stop::Unreachable(why)) => {
                    tracing::error!(%target, why, "sync stopped: the target cannot be reached");
                    self.stop_session();
                    if targets.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// Brings the chain to `target`; returns once it is canonical.
    async fn sync(
        &mut self,
        target: B256,
        targets: &mut watch::Receiver<Option<B256>>,
    ) -> Result<(), Stop> {
        if self.is_canonical(&target)? {
            return Ok(());
        }
        let (head, _) = self.chain.head().map_err(retry)?;
        {
            let mut progress = self.shared.progress.lock();
            if progress.is_none() {
                *progress = Some((head, head));
                self.stats = Stats::new();
                tracing::info!(%target, head, "sync started");
            }
        }
        self.shared.synced.store(false, Ordering::Release);
        if self.cfg.snap && self.wants_snap()? {
            self.snap_stage(target).await?;
            if targets.borrow().is_some_and(|t| t != target) {
                return Err(Stop::Replaced);
            }
        }
        self.walk_back(target, targets).await?;
        self.fill(target, targets).await
    }

    /// The target turns canonical while its batch is still being flushed: its report
    /// comes a moment later, and the session's totals wait for it (2 s at most).
    async fn await_last_batch(&mut self) {
        let Some((start, _)) = *self.shared.progress.lock() else {
            return;
        };
        let head = self.chain.head().map_or(start, |(n, _)| n);
        while self.stats.blocks < head.saturating_sub(start) {
            match tokio::time::timeout(Duration::from_secs(2), self.events.recv()).await {
                Ok(Some(event)) => {
                    let _ = self.on_import(event);
                }
                _ => break,
            }
        }
    }

    /// The target is canonical: the node is at the head the consensus client named.
    fn finish(&mut self, target: B256) {
        let Some((start, _)) = self.shared.progress.lock().take() else {
            self.shared.synced.store(true, Ordering::Release);
            return;
        };
        let head = self.chain.head().map_or(start, |(n, _)| n);
        let secs = self.stats.started.elapsed().as_secs_f64().max(1e-3);
        tracing::info!(
            %target,
            head,
            blocks = self.stats.blocks,
            secs = format!("{secs:.1}"),
            blocks_per_sec = format!("{:.1}", self.stats.blocks as f64 / secs),
            mgas_per_sec = format!("{:.1}", self.stats.gas as f64 / secs / 1e6),
            // The importer's time: waiting for blocks (headers walk and bodies download
            // behind), executing and committing them, making batches durable.
            waiting_secs = format!("{:.1}", self.stats.time.idle.as_secs_f64()),
            import_secs = format!("{:.1}", self.stats.time.import.as_secs_f64()),
            flush_secs = format!("{:.1}", self.stats.time.flush.as_secs_f64()),
            "sync complete"
        );
        self.shared.synced.store(true, Ordering::Release);
        self.skeleton.clear();
        self.ready.clear();
    }

    /// Gives up on the current session (the target is bad or out of reach).
    fn stop_session(&mut self) {
        self.shared.progress.lock().take();
        self.reset();
    }

    /// Whether the state comes by snap: the node holds no block past genesis, or an
    /// earlier run left a snap sync under way.
    fn wants_snap(&self) -> Result<bool, Stop> {
        let store = self.chain.store();
        let at_genesis = self.chain.head().map_err(retry)?.0 == 0;
        if store.snap_progress().map_err(retry)?.is_some() {
            if at_genesis {
                return Ok(true);
            }
            // The chain moved past genesis by other means (the engine API imported
            // blocks on genesis' state): the download is of no use any more.
            self.drop_snap_download()?;
            return Ok(false);
        }
        Ok(!self.snap_off && at_genesis)
    }

    /// Runs the snap stage towards `target`: on success the pivot is the head and full
    /// sync goes on from there.
    async fn snap_stage(&mut self, target: B256) -> Result<(), Stop> {
        let result = snap::run(
            &self.chain,
            &self.source,
            target,
            &self.cfg.snap_cfg,
            &self.shared.snap,
        )
        .await;
        *self.shared.snap.lock() = None;
        match result {
            Ok(()) => {
                if let Ok((n, _)) = self.chain.head() {
                    *self.shared.progress.lock() = Some((n, n));
                }
                let head = self.chain.head().map(|(_, h)| h).unwrap_or_default();
                self.shared.heads.send_replace(head);
                Ok(())
            }
            // No peer speaks snap/1 at all: before the tries are built (the genesis
            // state is still whole) the download is dropped and full sync takes over.
            Err(SnapError::NoPeers)
                if self.source.snap_peers().is_empty() && !self.source.peers().is_empty() =>
            {
                let store = self.chain.store();
                let record = store.snap_progress().map_err(retry)?;
                // Once genesis' tries are replaced (a record of this version, from its
                // start) the sync finishes by snap, waiting for a snap peer.
                let building = record
                    .and_then(|r| snap::Progress::decode(&r))
                    .is_some_and(|p| p.stage == snap::Stage::Tries || p.tries_replaced());
                if building {
                    return Err(retry("no snap peer to finish the snap sync"));
                }
                self.drop_snap_download()?;
                self.snap_off = true;
                tracing::warn!("no peer serves snap/1: full sync from the local head instead");
                Err(retry("snap sync given up for full sync"))
            }
            // The record stays: the next attempt resumes.
            Err(e @ (SnapError::NoPeers | SnapError::Store(_))) => Err(retry(e)),
            // No peer serves the pivot's state any more: the next attempt picks a new
            // pivot, finishes the download against it and heals what is held.
            // (The record stays, its pivot cleared: the download is still under way.)
            Err(e @ SnapError::Stale) => {
                let store = self.chain.store();
                let record = store.snap_progress().map_err(retry)?;
                let mut batch = WriteBatch::new();
                match record.and_then(|r| snap::Progress::decode(&r)) {
                    Some(mut p) => {
                        p.pivot_hash = B256::ZERO;
                        batch.set_snap_progress(Some(p.encode()));
                    }
                    None => {
                        batch.clear_snap_state().set_snap_progress(None);
                    }
                }
                store.commit(batch).map_err(retry)?;
                Err(retry(e))
            }
            // The pivot is unusable, or what was built does not match: start over.
            Err(e @ (SnapError::Pivot(_) | SnapError::Mismatch(_))) => {
                self.drop_snap_download()?;
                Err(retry(e))
            }
        }
    }

    /// Drops the snap download and its record (the next snap sync starts over).
    fn drop_snap_download(&self) -> Result<(), Stop> {
        let mut batch = WriteBatch::new();
        batch.clear_snap_state().set_snap_progress(None);
        self.chain.store().commit(batch).map_err(retry)
    }

    /// Forgets downloaded headers and blocks, and what the importer has queued.
    fn reset(&mut self) {
        self.skeleton.clear();
        self.ready.clear();
        self.bump_epoch();
    }

    fn bump_epoch(&mut self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.sent_upto = self.chain.head().map_or(0, |(n, _)| n);
        if let Some(first) = self.skeleton.first_number() {
            self.sent_upto = self.sent_upto.min(first.saturating_sub(1));
        }
    }

    fn is_canonical(&self, hash: &B256) -> Result<bool, Stop> {
        self.chain.is_canonical(hash).map_err(retry)
    }

    fn set_highest(&self, number: u64) {
        if let Some((_, highest)) = self.shared.progress.lock().as_mut() {
            *highest = number;
        }
        metrics::gauge!("moat_sync_highest_block").set(number as f64);
    }

    fn is_resting(&self, peer: &PeerId, now: Instant) -> bool {
        self.resting.get(peer).is_some_and(|until| *until > now)
    }

    fn rest(&mut self, peer: PeerId) {
        self.resting.insert(peer, Instant::now() + REST);
    }

    /// Waits `d` unless a new target comes first.
    async fn wait(
        &self,
        targets: &mut watch::Receiver<Option<B256>>,
        d: Duration,
    ) -> Result<(), Stop> {
        tokio::select! {
            _ = tokio::time::sleep(d) => Ok(()),
            _ = targets.changed() => Err(Stop::Replaced),
        }
    }

    /// The peer to ask for headers: one that announced the target as its head first,
    /// then the one that serves the highest blocks.
    fn header_peer(&self, target: &B256, tried: &Set<PeerId>) -> Option<PeerId> {
        let now = Instant::now();
        self.source
            .peers()
            .into_iter()
            .filter(|p| {
                !tried.contains(&p.id)
                    && p.in_flight < MAX_IN_FLIGHT
                    && !self.is_resting(&p.id, now)
            })
            .max_by_key(|p| (p.head == *target, p.range.map_or(0, |r| r.1), p.reputation))
            .map(|p| p.id)
    }

    /// Fetches headers from `target` back until one's parent is on the local canonical
    /// chain or in the skeleton already, and makes the skeleton end at `target`.
    async fn walk_back(
        &mut self,
        target: B256,
        targets: &mut watch::Receiver<Option<B256>>,
    ) -> Result<(), Stop> {
        if let Some(n) = self.skeleton.number_of(&target) {
            // The consensus client went back to a block we are on the way to.
            self.skeleton.truncate_above(n);
            self.set_highest(n);
            if self.sent_upto > n {
                self.bump_epoch();
            }
            return Ok(());
        }
        let store = self.chain.store().clone();
        let mut fresh: Vec<SealedHeader> = Vec::new();
        let mut next = target;
        let mut tried = Set::default();
        let mut last_log = Instant::now();
        loop {
            if targets.has_changed().unwrap_or(false) {
                return Err(Stop::Replaced);
            }
            let Some(peer) = self.header_peer(&target, &tried) else {
                tracing::debug!(%next, asked = tried.len(), "no peer has the next headers; waiting");
                tried.clear();
                self.wait(targets, self.cfg.retry_after).await?;
                continue;
            };
            let req = HeadersRequest::back_from(next, self.cfg.header_batch);
            let headers = match self.source.headers(peer, req).await {
                Ok(h) if !h.is_empty() => h,
                Ok(_) => {
                    tried.insert(peer);
                    continue;
                }
                Err(e) => {
                    tracing::debug!(peer = %short(&peer), error = %e, "header request failed");
                    tried.insert(peer);
                    self.rest(peer);
                    continue;
                }
            };
            tried.clear();
            for h in headers {
                if fresh.is_empty() {
                    self.set_highest(h.number());
                }
                if store.canonical_hash(h.number()).map_err(retry)? == Some(h.hash) {
                    // Only the target itself can be canonical here (parents are checked
                    // below before their turn): nothing to fetch.
                    return Ok(());
                }
                let Some(parent_number) = h.number().checked_sub(1) else {
                    return Err(Stop::Unreachable(
                        "the target's chain has another genesis".into(),
                    ));
                };
                let parent = h.header.parent_hash;
                fresh.push(h);
                if store.canonical_hash(parent_number).map_err(retry)? == Some(parent) {
                    return self.join_canonical(fresh, parent_number);
                }
                if let Some(n) = self.skeleton.number_of(&parent) {
                    self.join_skeleton(fresh, n);
                    return Ok(());
                }
            }
            next = fresh.last().map_or(next, |h| h.header.parent_hash);
            if last_log.elapsed() >= self.cfg.progress_every {
                last_log = Instant::now();
                tracing::info!(
                    headers = fresh.len(),
                    at = fresh.last().map_or(0, |h| h.number()),
                    "sync: fetching headers back to the local chain"
                );
            }
        }
    }

    /// The walked headers start right above canonical block `fork_point`.
    fn join_canonical(&mut self, fresh: Vec<SealedHeader>, fork_point: u64) -> Result<(), Stop> {
        let (head, _) = self.chain.head().map_err(retry)?;
        let oldest = self.chain.oldest_undoable().map_err(retry)?;
        if fork_point < oldest {
            return Err(Stop::Unreachable(format!(
                "the target's chain leaves ours at #{fork_point}, {} blocks below the head #{head}: the chain can be taken back to #{oldest} at the oldest (the finalized block or the oldest undo record)",
                head - fork_point
            )));
        }
        if head > fork_point {
            tracing::info!(
                fork_point,
                head,
                "sync: the target's chain forks below the head; its blocks will replace ours"
            );
        }
        self.skeleton.clear();
        for h in fresh.into_iter().rev() {
            self.skeleton.push(h);
        }
        let skeleton = &self.skeleton;
        self.ready.retain(|hash, _| skeleton.contains(hash));
        self.bump_epoch();
        Ok(())
    }

    /// The walked headers continue the skeleton above its block `number`.
    fn join_skeleton(&mut self, fresh: Vec<SealedHeader>, number: u64) {
        self.skeleton.truncate_above(number);
        for h in fresh.into_iter().rev() {
            self.skeleton.push(h);
        }
        let skeleton = &self.skeleton;
        self.ready.retain(|hash, _| skeleton.contains(hash));
        if self.sent_upto > number {
            self.bump_epoch();
        }
    }

    /// Downloads bodies and hands blocks to the importer until `target` is canonical.
    async fn fill(
        &mut self,
        target: B256,
        targets: &mut watch::Receiver<Option<B256>>,
    ) -> Result<(), Stop> {
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        let mut last_log = Instant::now();
        loop {
            if self.is_canonical(&target)? {
                return Ok(());
            }
            self.prune()?;
            self.hand_over();
            self.request_bodies()?;
            if last_log.elapsed() >= self.cfg.progress_every {
                last_log = Instant::now();
                self.log_progress();
            }
            tokio::select! {
                changed = targets.changed() => {
                    return Err(match changed {
                        Ok(()) => Stop::Replaced,
                        Err(_) => Stop::Retry("the node is shutting down".into()),
                    });
                }
                Some(event) = self.events.recv() => self.on_import(event)?,
                Some(fetched) = self.fetches.join_next(), if !self.fetches.is_empty() => {
                    if let Ok(f) = fetched {
                        self.on_fetched(f);
                    }
                }
                _ = tick.tick() => {}
            }
        }
    }

    /// Drops the skeleton's front once the importer made it canonical.
    fn prune(&mut self) -> Result<(), Stop> {
        let store = self.chain.store();
        while let Some(h) = self.skeleton.headers.front() {
            if store.canonical_hash(h.number()).map_err(retry)? != Some(h.hash) {
                break;
            }
            self.ready.remove(&h.hash);
            self.skeleton.pop_front();
        }
        Ok(())
    }

    /// Hands the downloaded blocks that follow what the importer has, in order.
    fn hand_over(&mut self) {
        let epoch = self.epoch.load(Ordering::Acquire);
        if let Some(first) = self.skeleton.first_number() {
            self.sent_upto = self.sent_upto.max(first.saturating_sub(1));
        }
        loop {
            let next = self.sent_upto + 1;
            let ready = self
                .skeleton
                .get(next)
                .is_some_and(|h| self.ready.contains_key(&h.hash));
            if !ready {
                return;
            }
            let Ok(permit) = self.import_tx.try_reserve() else {
                return;
            };
            let mut blocks = Vec::with_capacity(IMPORT_BATCH);
            while blocks.len() < IMPORT_BATCH {
                let n = self.sent_upto + 1;
                let Some(h) = self.skeleton.get(n) else { break };
                let Some(block) = self.ready.remove(&h.hash) else {
                    break;
                };
                blocks.push(block);
                self.sent_upto = n;
            }
            permit.send(ImportBatch { epoch, blocks });
        }
    }

    /// Asks idle peers for the bodies of the next blocks not yet downloaded or asked for.
    fn request_bodies(&mut self) -> Result<(), Stop> {
        let Some(last) = self.skeleton.last_number() else {
            return Ok(());
        };
        let (head, _) = self.chain.head().map_err(retry)?;
        let end = last.min(head.max(self.sent_upto) + self.cfg.max_ahead);
        let now = Instant::now();
        let mut peers: Vec<SyncPeer> = self
            .source
            .peers()
            .into_iter()
            .filter(|p| !self.is_resting(&p.id, now))
            .collect();
        let mut n = self.sent_upto + 1;
        while self.fetches.len() < self.cfg.max_body_requests && n <= end {
            peers.retain(|p| {
                p.in_flight < MAX_IN_FLIGHT
                    && self.outstanding.get(&p.id).copied().unwrap_or(0) < BODY_REQUESTS_PER_PEER
            });
            let Some(peer) = peers
                .iter()
                .min_by_key(|p| {
                    (
                        self.outstanding.get(&p.id).copied().unwrap_or(0),
                        -p.reputation,
                    )
                })
                .map(|p| p.id)
            else {
                break;
            };
            let mut chunk = Vec::new();
            while chunk.len() < self.cfg.body_batch && n <= end {
                if let Some(h) = self.skeleton.get(n)
                    && !self.ready.contains_key(&h.hash)
                    && !self.in_flight.contains(&h.hash)
                {
                    chunk.push(h.clone());
                }
                n += 1;
            }
            if chunk.is_empty() {
                break;
            }
            let asked: Vec<B256> = chunk.iter().map(|h| h.hash).collect();
            self.in_flight.extend(asked.iter().copied());
            *self.outstanding.entry(peer).or_default() += 1;
            let source = self.source.clone();
            self.fetches.spawn(async move {
                let result = source.bodies(peer, chunk).await;
                Fetched {
                    peer,
                    asked,
                    result,
                }
            });
        }
        Ok(())
    }

    fn on_fetched(&mut self, f: Fetched) {
        if let Some(n) = self.outstanding.get_mut(&f.peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.outstanding.remove(&f.peer);
            }
        }
        for h in &f.asked {
            self.in_flight.remove(h);
        }
        match f.result {
            Ok(blocks) => {
                if blocks.is_empty() {
                    self.rest(f.peer);
                }
                metrics::counter!("moat_sync_bodies_total").increment(blocks.len() as u64);
                for b in blocks {
                    if self.skeleton.contains(&b.hash) {
                        self.ready.insert(b.hash, b);
                    }
                }
            }
            Err(e) => {
                tracing::debug!(peer = %short(&f.peer), error = %e, "body request failed");
                self.rest(f.peer);
            }
        }
    }

    fn on_import(&mut self, event: ImportEvent) -> Result<(), Stop> {
        match event {
            ImportEvent::Imported { blocks, gas, time } => {
                self.stats.blocks += blocks;
                self.stats.gas += gas;
                self.stats.time += time;
                // Seconds as floats: a gauge that only grows.
                for (name, d) in [
                    ("moat_sync_idle_seconds_total", time.idle),
                    ("moat_sync_import_seconds_total", time.import),
                    ("moat_sync_flush_seconds_total", time.flush),
                ] {
                    metrics::gauge!(name).increment(d.as_secs_f64());
                }
                self.stats.window_blocks += blocks;
                self.stats.window_gas += gas;
                metrics::counter!("moat_sync_blocks_imported_total").increment(blocks);
                Ok(())
            }
            // Of blocks that no longer led to the target when it failed: nothing to do.
            ImportEvent::Failed { epoch, .. } if epoch + 1 < self.epoch.load(Ordering::Acquire) => {
                Ok(())
            }
            ImportEvent::Failed {
                hash,
                number,
                parent,
                error,
                ..
            } => match error {
                ChainError::Mismatch { .. }
                | ChainError::Header { .. }
                | ChainError::Invalid { .. } => {
                    self.skeleton.truncate_above(number.saturating_sub(1));
                    Err(Stop::Invalid {
                        hash,
                        parent,
                        why: error.to_string(),
                    })
                }
                ChainError::ReorgTooDeep { .. } | ChainError::BelowFinalized { .. } => {
                    Err(Stop::Unreachable(error.to_string()))
                }
                other => Err(Stop::Retry(format!(
                    "importing #{number} ({hash}): {other}"
                ))),
            },
        }
    }

    fn log_progress(&mut self) {
        let Some(p) = (SyncHandle {
            shared: self.shared.clone(),
        })
        .progress() else {
            return;
        };
        let secs = self.stats.window_start.elapsed().as_secs_f64().max(1e-3);
        let rate = self.stats.window_blocks as f64 / secs;
        let left = p.highest_block.saturating_sub(p.current_block);
        let eta = if rate > 0.0 {
            format!("{:.0}s", left as f64 / rate)
        } else {
            "unknown".into()
        };
        tracing::info!(
            head = p.current_block,
            target = p.highest_block,
            blocks = self.stats.window_blocks,
            blocks_per_sec = format!("{rate:.1}"),
            mgas_per_sec = format!("{:.1}", self.stats.window_gas as f64 / secs / 1e6),
            downloaded = self.ready.len(),
            peers = self.source.peers().len(),
            eta,
            "syncing"
        );
        self.stats.window_start = Instant::now();
        self.stats.window_blocks = 0;
        self.stats.window_gas = 0;
    }
}

fn retry(e: impl std::fmt::Display) -> Stop {
    Stop::Retry(e.to_string())
}

fn short(id: &PeerId) -> String {
    alloy_primitives::hex::encode(&id[..8])
}

/// Imports batches in order on its own thread, each block its own atomic commit (durable
/// within a second; at once when no further batch is queued). A block whose parent is not the head belongs to a
/// chain that forks below it: it is stored aside and made the head (a reorg through the
/// undo records).
fn importer(
    chain: Chain,
    mut batches: mpsc::Receiver<ImportBatch>,
    events: mpsc::UnboundedSender<ImportEvent>,
    epoch: Arc<AtomicU64>,
    shared: Arc<Shared>,
) {
    let mut waiting = Instant::now();
    // The first batch after the queue ran dry (a sync starting) is made durable too: a
    // node killed early in a sync keeps a foothold past where it started.
    let mut after_idle = true;
    while let Some(batch) = batches.blocking_recv() {
        let idle = waiting.elapsed();
        let importing = Instant::now();
        let (mut blocks, mut gas) = (0, 0);
        for block in &batch.blocks {
            if epoch.load(Ordering::Acquire) != batch.epoch {
                break;
            }
            match import_one(&chain, block) {
                Ok(used) => {
                    blocks += 1;
                    gas += used;
                }
                Err(error) => {
                    // What is queued behind it cannot follow.
                    epoch.fetch_add(1, Ordering::AcqRel);
                    let _ = events.send(ImportEvent::Failed {
                        epoch: batch.epoch,
                        hash: block.hash,
                        number: block.header.number,
                        parent: block.header.parent_hash,
                        error,
                    });
                    break;
                }
            }
        }
        if blocks > 0 {
            let import = importing.elapsed();
            // Imports commit relaxed: the store makes them durable within a second (one
            // fsync a second however many blocks), so a crash costs at most a second of
            // blocks, fetched again. When nothing more is queued (the sync caught up, or
            // the download is behind) the batch is made durable at once rather than
            // left waiting for the next commit.
            let flushing = Instant::now();
            let idle_next = batches.is_empty();
            if (after_idle || idle_next)
                && let Err(e) = chain.store().flush()
            {
                tracing::warn!(error = %e, "sync: could not make imported blocks durable");
            }
            let flush = flushing.elapsed();
            after_idle = idle_next;
            if let Ok((_, head)) = chain.head() {
                shared.heads.send_replace(head);
            }
            let _ = events.send(ImportEvent::Imported {
                blocks,
                gas,
                time: ImportTime {
                    idle,
                    import,
                    flush,
                },
            });
        }
        waiting = Instant::now();
    }
}

/// Recovers the senders of each batch's transactions into the chain's sender cache, in
/// import order, one batch ahead of the importer: on a machine with a core to spare this
/// takes the ECDSA work (a sixth of a busy importer's time) off the importer's thread.
/// A signature that does not recover is left for the importer to refuse.
fn recoverer(
    cache: SenderCache,
    mut batches: mpsc::Receiver<ImportBatch>,
    recovered: mpsc::Sender<ImportBatch>,
) {
    while let Some(batch) = batches.blocking_recv() {
        for tx in batch.blocks.iter().flat_map(|b| &b.transactions) {
            let hash = tx.hash();
            if !cache.contains(&hash)
                && let Ok(sender) = tx.recover_sender()
            {
                cache.insert(hash, sender);
            }
        }
        if recovered.blocking_send(batch).is_err() {
            return;
        }
    }
}

fn import_one(chain: &Chain, block: &Block) -> Result<u64, ChainError> {
    match chain.import(block) {
        Ok(ImportOutcome::Imported { gas_used, .. }) => Ok(gas_used),
        Ok(ImportOutcome::AlreadyKnown) => Ok(0),
        Err(ChainError::NotOnHead { .. }) => {
            chain.store_side_block(block)?;
            let change = chain.set_head(block.hash)?;
            tracing::info!(
                removed = change.removed.len(),
                added = change.added.len(),
                head = block.header.number,
                "sync: chain reorganised onto the target's branch"
            );
            Ok(block.header.gas_used)
        }
        Err(e) => Err(e),
    }
}
