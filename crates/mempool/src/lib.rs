//! moat-mempool: the transaction pool, and the admission pipeline that guards it.
//!
//! Every transaction — from RPC, a peer's broadcast or reply, a reorg, or the local
//! journal — enters through [`Pool::add_transaction`], which runs the stages of DESIGN §2
//! cheapest first:
//!
//! ```text
//!  bytes ─▶ 1 pre-flight ─▶ 2 decode+hash ─▶ 3 recent failures ─▶ 4 dedup (pool + in-flight)
//!        ─▶ 5 validate_cheap ─▶ 6 stateless ─▶ 7 sender (cache, else ECDSA)
//!        ─▶ 8 stateful ─▶ 9 KZG (blob txs only, batched, off the runtime) ─▶ 10 insert
//! ```
//!
//! Each stage may reject with a typed [`Rejection`]; only failures the bytes decide are
//! remembered by hash ([`RecentFailures`]), so a repeat costs a hash lookup instead of
//! ECDSA or KZG. Senders recovered once are cached ([`SenderCache`], shared with block
//! import). Each origin pays for the CPU it makes the pool spend ([`Budgets`]), and its
//! standing decides the lane its work runs in ([`standing`]; the lanes themselves, their
//! low-priority runtime and ceiling locks, are `moat_sched`'s).
//!
//! Admitted transactions sit in one of four subpools ([`SubPool`]), classified per sender
//! in nonce order against the head's state:
//!
//! ```text
//!  pending  ─ next nonces, fee cap ≥ base fee: what the next block can take
//!  basefee  ─ next nonces, fee cap below the base fee (waits for the fee to drop)
//!  queued   ─ behind a nonce gap, or over the sender's balance
//!  blob     ─ EIP-4844 txs, with their sidecars, classified the same way and kept apart
//! ```
//!
//! A head change ([`Pool::on_head_change`], fed by [`maintain`]) drops what was mined,
//! re-reads the touched senders and reclassifies them; a reorg brings the undone block's
//! transactions back. Block building reads [`Pool::best_transactions`], pending txs by
//! effective tip, one sender run at a time. Local transactions are written to a
//! write-ahead [`Journal`] before they are acknowledged, and reloaded at start.
//!
//! Concurrency: the pool's state ([`pool`]'s `TxPool`) sits behind one mutex held for
//! microseconds (no I/O, no crypto, no await inside). Decoding, ECDSA and state reads
//! happen before it is taken; KZG runs on the blocking pool in batches ([`kzg`]). Shields
//! are sharded or lock-free.

pub mod bench_support;
mod best;
mod blobstore;
pub mod budget;
mod config;
mod convert;
mod error;
mod gapped;
pub mod inclusion;
mod journal;
mod kzg;
pub mod maintain;
mod metrics;
mod pool;
mod shields;
pub mod standing;
mod state;

pub use best::{BestTransactions, BlockBudget};
pub use blobstore::{BlobReload, BlobStore, BlobStoreContents, BlobStoreError, StoredBlobTx};
pub use budget::{
    BudgetConfig, BudgetState, Budgets, CpuMeter, DropReason, PeerBudget, Spent, Verdict,
};
pub use config::{PoolConfig, SubPoolLimit};
pub use error::{AddResult, Added, JournalFailure, PeerCost, Rejection, SubPool};
pub use gapped::GappedLimits;
pub use journal::{
    Journal, JournalContents, JournalOptions, JournalReload, ReloadFate, Snapshot, read_journal,
};
#[doc(hidden)]
pub use journal::{encode_record as journal_record, parse_records as journal_records};
pub use metrics::{Counter, PoolMetrics, Stage};
pub use moat_sched::Lane;
pub use pool::Usage;
pub use shields::{Backpressure, InFlight, RecentFailures, SenderCache};
pub use standing::{Record, Standing};
pub use state::{AccountState, CodeKind, HeadInfo, InMemoryState, StateView};

use alloy_primitives::{Address, B256, B512, Bytes, U256};
use kzg::KzgBatcher;
use metrics::StageClock;
use moat_common::config::Fork;
use moat_common::transaction::{
    BlobRules, BlobsBundle, MAX_TX_SIZE, PooledTransaction, SidecarVersion, StatelessRules, TxType,
    validate_stateless,
};
use moat_crypto::kzg::{BYTES_PER_BLOB, CELLS_PER_EXT_BLOB};
use parking_lot::RwLock;
use pool::TxPool;
use shields::InFlightClaim;
use smallvec::SmallVec;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::broadcast;

/// HashMap with a fast non-cryptographic hasher: keys here are hashes and addresses, and
/// the pool sits on the admission hot path. Seeds are random per process.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
pub(crate) type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// Where a transaction came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxOrigin {
    /// Submitted over RPC to this node.
    Local,
    /// Delivered by a peer (its node id).
    Peer(B512),
    /// Taken back from a block that left the canonical chain.
    Reorg,
    /// Reloaded from the local journal at start.
    Journal,
    /// Reloaded at start from the blob pool's store ([`BlobStore`]): a peer's blob tx
    /// pooled before the restart. Its sidecar was verified then.
    Stored,
}

impl TxOrigin {
    /// Local transactions skip the minimum tip (blob txs excepted), and are not evicted for price while local
    /// txs are within their share of the subpool (`PoolConfig::local_share`).
    pub fn is_local(&self) -> bool {
        matches!(self, TxOrigin::Local | TxOrigin::Journal)
    }
}

/// What `add_transaction` takes: wire bytes (network form) or an already decoded tx.
#[derive(Debug, Clone)]
pub enum TxInput {
    /// Wire bytes (the network form: a blob tx with its sidecar).
    Raw(Bytes),
    /// Wire bytes with the hash the caller already took of them
    /// ([`PooledTransaction::hash_of_envelope`]): admission does not take it again.
    Hashed(Bytes, B256),
    /// An already decoded transaction (e.g. one a reorg took back from a block).
    Decoded(Box<PooledTransaction>),
}

/// A pooled transaction with what admission learned about it.
#[derive(Debug)]
pub struct PoolTx {
    /// The transaction as pooled: the signed tx, with its blob sidecar if any.
    pub tx: PooledTransaction,
    /// Sender recovered from the signature (or found in the sender cache).
    pub sender: Address,
    /// Where it came from: decides the local exemptions.
    pub origin: TxOrigin,
    /// When admission took it: a queued tx's lifetime counts from here.
    pub added_at: Instant,
    /// Recovered EIP-7702 authorities (invalid authorizations left out).
    pub authorities: Vec<Address>,
    /// The most it can cost its sender: gas × fee cap (+ blob gas × blob fee cap) + value.
    pub cost: U256,
}

impl PoolTx {
    /// The transaction hash (of the signed envelope, without the sidecar).
    pub fn hash(&self) -> B256 {
        self.tx.hash()
    }

    /// The sender nonce it uses.
    pub fn nonce(&self) -> u64 {
        self.tx.tx().tx().nonce()
    }

    /// Network size, sidecar included.
    pub fn size(&self) -> usize {
        self.tx.size()
    }

    /// Whether it is an EIP-4844 blob transaction (type 3).
    pub fn is_blob(&self) -> bool {
        self.tx.tx_type() == TxType::Eip4844
    }

    /// The same tx, as admitted, carrying `bundle` instead (a converted sidecar).
    pub(crate) fn with_sidecar(&self, bundle: BlobsBundle) -> PoolTx {
        PoolTx {
            tx: PooledTransaction::new(self.tx.tx().clone(), Some(bundle)),
            sender: self.sender,
            origin: self.origin,
            added_at: self.added_at,
            authorities: self.authorities.clone(),
            cost: self.cost,
        }
    }
}

/// One sender's pooled transactions in nonce order, each with its subpool.
pub type SenderContent = (Address, Vec<(Arc<PoolTx>, SubPool)>);

/// Counts and bytes per subpool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStatus {
    /// Executable in the next block.
    pub pending: Usage,
    /// Executable but for a fee cap below the base fee.
    pub basefee: Usage,
    /// Behind a nonce gap, or over the sender's balance.
    pub queued: Usage,
    /// Blob transactions not executable yet.
    pub blob: Usage,
}

/// A head change as the pool needs it.
#[derive(Debug, Clone, Default)]
pub struct HeadUpdate {
    /// The new head, with the next block's fees.
    pub head: HeadInfo,
    /// Hashes of the transactions the new canonical blocks include.
    pub mined: Vec<B256>,
    /// Accounts whose state changed (senders of mined txs are added automatically).
    pub touched: Vec<Address>,
    /// Transactions of blocks that left the canonical chain, blob txs with their sidecars.
    pub reorged: Vec<PooledTransaction>,
}

/// What a head change did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeadChangeOutcome {
    /// Mined, made stale by the new state, or evicted to keep the subpools in their limits.
    pub removed: Vec<B256>,
    /// Reorged transactions the pool took back, of those in [`HeadUpdate::reorged`].
    pub reinjected: usize,
}

/// The rules of the next block, derived from the head.
#[derive(Debug, Clone, Copy)]
struct Rules {
    blob: Option<BlobRules>,
    remote: StatelessRules,
    local: StatelessRules,
    max_blob_wire_size: usize,
}

impl Rules {
    fn at(cfg: &PoolConfig, head: &HeadInfo) -> Self {
        let (number, timestamp) = (head.number + 1, head.timestamp + 1);
        let fork: Fork = cfg.chain.fork_at(number, timestamp);
        let blob = BlobRules::at(&cfg.chain, number, timestamp);
        let remote = StatelessRules {
            fork,
            chain_id: Some(cfg.chain.chain_id),
            max_blobs_per_tx: blob.map(|b| b.max_blobs_per_tx),
            block_gas_limit: (head.gas_limit > 0).then_some(head.gas_limit),
            min_tip: cfg.min_tip,
            max_tx_size: MAX_TX_SIZE,
        };
        // A blob on the wire: the blob, its commitment, and up to 128 cell proofs.
        let per_blob = BYTES_PER_BLOB + 4 + 49 + 49 * CELLS_PER_EXT_BLOB;
        let max_blob_wire_size =
            MAX_TX_SIZE + per_blob * blob.map_or(0, |b| b.max_blobs_per_tx as usize);
        Self {
            blob,
            remote,
            local: StatelessRules {
                min_tip: 0,
                ..remote
            },
            max_blob_wire_size,
        }
    }
}

/// Sidecars that failed KZG remembered at once (a digest and a deadline each).
const BAD_SIDECARS_CAPACITY: usize = 4096;

/// What every clone of [`Pool`] shares (reth's `PoolInner`): the [`TxPool`] behind its
/// lock, the admission rules, shields, budgets, KZG batcher and journal.
struct PoolInner {
    cfg: Arc<PoolConfig>,
    state: Arc<dyn StateView>,
    pool: moat_sched::CeilingMutex<TxPool>,
    rules: RwLock<Rules>,
    sender_cache: SenderCache,
    failures: RecentFailures,
    /// Sidecars that failed KZG, by [`kzg::sidecar_digest`]: KZG runs once per unique
    /// (transaction, sidecar).
    bad_sidecars: RecentFailures,
    /// Blob txs whose nonce is ahead of their sender's next, waiting for the gap to fill
    /// ([`gapped`]).
    gapped: moat_sched::CeilingMutex<gapped::Gapped>,
    in_flight: InFlight,
    backpressure: Backpressure,
    /// One batcher per lane ([`moat_sched::Lane`]): a trusted blob tx never waits for a batch of
    /// untrusted ones, nor runs on the untrusted lane's low-priority threads.
    kzg: [Arc<KzgBatcher>; 2],
    budgets: Budgets,
    metrics: Arc<PoolMetrics>,
    pending_events: broadcast::Sender<B256>,
    journal: std::sync::OnceLock<Journal>,
    /// Whether [`Pool::convert_pooled`]'s task is running.
    converting: std::sync::atomic::AtomicBool,
    /// Every pooled blob tx on disk ([`blobstore`]), once attached.
    blob_store: std::sync::OnceLock<BlobStore>,
    /// Sidecars read back from the blob pool's store at start, by
    /// [`kzg::sidecar_digest`]: verified before the restart, so stage 9 passes them
    /// without KZG (each once). Emptied when the reload is done.
    preverified: parking_lot::Mutex<FastSet<B256>>,
    /// Local txs replaced by a local tx whose journal record is being written, by the
    /// replacement's hash: put back if the journal refuses the replacement.
    replaced_locals: parking_lot::Mutex<FastMap<B256, Arc<PoolTx>>>,
    /// The last canonical blocks, for the inclusion list's passed-over count.
    recent_blocks: parking_lot::Mutex<inclusion::RecentBlocks>,
}

/// A transaction past admission's stages 2-6 ([`PoolInner::screen`]).
struct Screened<'a> {
    hash: B256,
    pooled: PooledTransaction,
    /// The wire bytes when they are the signed envelope (no sidecar): the sender is
    /// recovered from them without encoding the tx again.
    wire: Option<Bytes>,
    /// Admission's claim on the hash while it is being admitted (none when warming).
    claim: Option<InFlightClaim<'a>>,
}

impl Screened<'_> {
    fn recover_sender(&self) -> Result<Address, moat_crypto::secp::SignatureError> {
        match &self.wire {
            Some(envelope) => self.pooled.tx().recover_sender_from_envelope(envelope),
            None => self.pooled.tx().recover_sender(),
        }
    }
}

impl PoolInner {
    /// Stages 2-6 of admission, cheapest first: the size cap and the hash (from the
    /// envelope, before decoding), recent failures, dedup, decoding, the sidecar's
    /// structure, the stateless rules of the next block's fork.
    ///
    /// `origin` is the admitted tx's: the hash is claimed in flight and failures the
    /// bytes decide are remembered. `None` is sender warming ([`Pool::warm_senders`]),
    /// which only looks: no claim, nothing remembered, the remote rules, and a tx whose
    /// sender is cached already turned away (there is nothing to warm).
    fn screen(
        &self,
        input: TxInput,
        origin: Option<TxOrigin>,
        rules: &Rules,
        mut clock: Option<&mut StageClock<'_>>,
    ) -> Result<Screened<'_>, Rejection> {
        let mut lap = |stage| {
            if let Some(c) = clock.as_deref_mut() {
                c.lap(stage);
            }
        };
        let remember = |hash, e| match origin {
            Some(_) => self.fail(hash, e),
            None => e,
        };

        // 2. Hash, with a size cap on the wire bytes first. The hash of an envelope can be
        //    taken without decoding it, so stages 3 and 4 turn repeats away before decoding.
        let hash = match &input {
            TxInput::Raw(bytes) | TxInput::Hashed(bytes, _) => {
                let max = if bytes.first() == Some(&(TxType::Eip4844 as u8)) {
                    rules.max_blob_wire_size
                } else {
                    MAX_TX_SIZE
                };
                if bytes.len() > max {
                    return Err(Rejection::Oversized {
                        size: bytes.len(),
                        max,
                    });
                }
                let known = match &input {
                    TxInput::Hashed(_, hash) => Some(*hash),
                    _ => PooledTransaction::hash_of_envelope(bytes),
                };
                match known {
                    Some(hash) => hash,
                    None => {
                        let e = PooledTransaction::decode_2718(bytes).err();
                        return Err(Rejection::Decode(
                            e.unwrap_or(moat_common::DecodeError::Empty),
                        ));
                    }
                }
            }
            TxInput::Decoded(p) => p.hash(),
        };
        lap(Stage::Decode);

        // Stages 3 and 4 take locks that trusted work takes too: at normal priority on
        // the untrusted lane's threads (`moat_sched::Raised`), one raise for all of them.
        let raised = moat_sched::Raised::new();
        // 3. Recent failures (a reorg may legitimately revive a "nonce too low").
        if origin != Some(TxOrigin::Reorg) && self.failures.contains(&hash) {
            if origin.is_some() {
                self.metrics.inc(Counter::failure_cache_hits);
            }
            return Err(Rejection::RecentlyFailed);
        }
        lap(Stage::RecentFailure);

        // 4. Dedup: pooled, held as gapped (blob txs only), or being admitted right now
        //    (admission claims it).
        let blob = match &input {
            TxInput::Raw(bytes) | TxInput::Hashed(bytes, _) => {
                bytes.first() == Some(&(TxType::Eip4844 as u8))
            }
            TxInput::Decoded(p) => p.tx_type() == TxType::Eip4844,
        };
        if self.pool.lock().contains(&hash) || (blob && self.gapped.lock().contains(&hash)) {
            return Err(Rejection::AlreadyKnown);
        }
        let claim = match origin {
            Some(_) => Some(self.in_flight.claim(hash).ok_or(Rejection::AlreadyKnown)?),
            None if self.in_flight.contains(&hash) || self.sender_cache.contains(&hash) => {
                return Err(Rejection::AlreadyKnown);
            }
            None => None,
        };
        drop(raised);
        lap(Stage::Dedup);

        // Stage 2's decoding proper, for what got past the cheap filters.
        let (pooled, wire) = match input {
            TxInput::Decoded(p) => (*p, None),
            TxInput::Raw(bytes) | TxInput::Hashed(bytes, _) => {
                let p = PooledTransaction::decode_2718(&bytes).map_err(Rejection::Decode)?;
                // Without a sidecar the wire bytes are the envelope the signature covers.
                let envelope = p.sidecar().is_none().then_some(bytes);
                (p, envelope)
            }
        };
        debug_assert_eq!(pooled.hash(), hash);
        lap(Stage::Decode);

        // 5. Structural sidecar checks.
        if pooled.tx_type() == TxType::Eip4844 {
            let blob_rules = rules.blob.ok_or(Rejection::BlobsNotActive)?;
            match pooled.validate_cheap(&blob_rules) {
                Ok(()) => {}
                // From Osaka a version-0 sidecar is refused from peers. One sent over RPC
                // (or pooled before the fork and reloaded from the journal or the blob
                // pool's store, or taken back from a block) is converted to cell proofs
                // after the other checks ([`convert`]).
                Err(moat_common::BlobsBundleError::VersionNotAllowed {
                    version: SidecarVersion::V0,
                    fork,
                }) if origin.is_some_and(|o| {
                    matches!(
                        o,
                        TxOrigin::Local | TxOrigin::Journal | TxOrigin::Stored | TxOrigin::Reorg
                    )
                }) && fork >= Fork::Osaka => {}
                Err(e) => return Err(Rejection::Sidecar(e)),
            }
        }
        lap(Stage::ValidateCheap);

        // 6. Stateless rules of the next block's fork.
        // Local txs skip the minimum tip, except blob txs: as in go-ethereum's blob pool
        // (which has no locals), a blob tx no builder would take is not worth its sidecar.
        let stateless = match origin {
            Some(o)
                if o.is_local() && !self.cfg.no_locals && pooled.tx_type() != TxType::Eip4844 =>
            {
                &rules.local
            }
            _ => &rules.remote,
        };
        validate_stateless(pooled.tx(), stateless)
            .map_err(|e| remember(hash, Rejection::Stateless(e)))?;
        // A blob tx that can never pay a blob base fee (the minimum is 1 wei).
        if pooled.tx().tx().max_fee_per_blob_gas() == Some(0) {
            return Err(remember(hash, Rejection::BlobFeeCapTooLow));
        }
        let auths = pooled.tx().tx().authorization_list();
        if auths.len() > self.cfg.max_authorizations {
            let e = Rejection::TooManyAuthorizations {
                count: auths.len(),
                max: self.cfg.max_authorizations,
            };
            return Err(remember(hash, e));
        }
        lap(Stage::Stateless);
        Ok(Screened {
            hash,
            pooled,
            wire,
            claim,
        })
    }

    /// Remembers a hash-determined failure so a repeat is turned away at stage 3.
    fn fail(&self, hash: B256, e: Rejection) -> Rejection {
        if e.is_hash_determined() {
            let _raised = moat_sched::Raised::new();
            self.failures.insert(hash, Instant::now());
            self.metrics.inc(Counter::failure_cache_inserts);
        }
        e
    }
}

/// The transaction pool. Cloning shares it.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<PoolInner>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("status", &self.status())
            .finish()
    }
}

impl Pool {
    /// A pool over `state`, with a sender cache of its own.
    pub fn new(cfg: PoolConfig, state: Arc<dyn StateView>) -> Self {
        Self::with_sender_cache(cfg, state, None)
    }

    /// A pool sharing a sender cache made elsewhere (block import reads the same one).
    pub fn with_sender_cache(
        cfg: PoolConfig,
        state: Arc<dyn StateView>,
        cache: Option<SenderCache>,
    ) -> Self {
        let cfg = Arc::new(cfg);
        let head = state.head();
        let metrics = Arc::new(PoolMetrics::default());
        let inner = PoolInner {
            rules: RwLock::new(Rules::at(&cfg, &head)),
            pool: moat_sched::CeilingMutex::named("pool", TxPool::new(Arc::clone(&cfg), head)),
            sender_cache: cache.unwrap_or_else(|| SenderCache::new(cfg.sender_cache_capacity)),
            failures: RecentFailures::new(cfg.failure_cache_capacity, cfg.failure_ttl),
            bad_sidecars: RecentFailures::new(BAD_SIDECARS_CAPACITY, cfg.failure_ttl),
            gapped: moat_sched::CeilingMutex::named("gapped", gapped::Gapped::new(cfg.gapped)),
            in_flight: InFlight::default(),
            backpressure: Backpressure::new(cfg.max_in_flight, cfg.max_in_flight_per_origin),
            kzg: [(); 2]
                .map(|_| Arc::new(KzgBatcher::new(cfg.max_kzg_batch, Arc::clone(&metrics)))),
            budgets: Budgets::new(cfg.budget.clone()),
            metrics,
            pending_events: broadcast::channel(4096).0,
            journal: std::sync::OnceLock::new(),
            blob_store: std::sync::OnceLock::new(),
            converting: Default::default(),
            preverified: Default::default(),
            replaced_locals: Default::default(),
            recent_blocks: Default::default(),
            state,
            cfg,
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The settings the pool was built with.
    pub fn config(&self) -> &PoolConfig {
        &self.inner.cfg
    }

    /// The pool's counters (mirrored to the `metrics` facade).
    pub fn metrics(&self) -> &PoolMetrics {
        &self.inner.metrics
    }

    /// The shared sender-recovery cache.
    pub fn sender_cache(&self) -> &SenderCache {
        &self.inner.sender_cache
    }

    /// Hashes of transactions as they become pending (for gossip and subscriptions).
    pub fn subscribe_pending(&self) -> broadcast::Receiver<B256> {
        self.inner.pending_events.subscribe()
    }

    /// The admission CPU budgets of every origin.
    pub fn budgets(&self) -> &Budgets {
        &self.inner.budgets
    }

    /// Admits one transaction through every stage (DESIGN §2) and says where it went.
    ///
    /// Nothing is measured or budgeted here: RPC submissions come through
    /// [`Pool::submit_local`], and the network measures a peer's transactions a message
    /// chunk at a time with [`Pool::add_metered`].
    pub async fn add_transaction(&self, input: TxInput, origin: TxOrigin) -> AddResult {
        let added = self
            .add_metered(input, origin, &mut CpuMeter::off())
            .await?;
        if origin == TxOrigin::Local {
            self.journal_record(&added.hash).await?;
        }
        Ok(added)
    }

    /// A transaction submitted over RPC (`eth_sendRawTransaction`): waits out the local
    /// RPC budget's debt, if any, then admits it as [`TxOrigin::Local`], measuring its CPU
    /// (a clock read costs ~0.5 µs, an RPC call tens) and charging that budget. Peers
    /// cannot drain this budget; one RPC client flooding the node can only slow RPC.
    pub async fn submit_local(&self, input: TxInput) -> AddResult {
        if let Some(wait) = self.inner.budgets.rpc_wait(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
        // Announced to the journal while admitted, so that a batch being synced waits
        // for it; the wire bytes are its record (they are the tx's network form).
        let coming = self.inner.journal.get().map(Journal::announce);
        let wire = match &input {
            TxInput::Raw(bytes) | TxInput::Hashed(bytes, _) => Some(bytes.clone()),
            TxInput::Decoded(_) => None,
        };
        let mut meter = CpuMeter::start();
        let result = self.add_metered(input, TxOrigin::Local, &mut meter).await;
        self.charge(TxOrigin::Local, meter);
        let added = result?;
        self.journal_append(&added.hash, wire.as_ref().map(|b| &b[..]), coming)
            .await?;
        Ok(added)
    }

    /// Charges what `meter` measured to `origin`'s budget.
    pub fn charge(&self, origin: TxOrigin, meter: CpuMeter) {
        let spent = meter.finish();
        let budgets = &self.inner.budgets;
        match origin {
            TxOrigin::Peer(id) => budgets.charge_peer(&id, spent, Instant::now()),
            TxOrigin::Local => budgets.charge_rpc(spent, Instant::now()),
            TxOrigin::Reorg | TxOrigin::Journal | TxOrigin::Stored => budgets.charge_node(spent),
        }
    }

    /// [`Pool::add_transaction`] without the budget: the CPU it takes (KZG share
    /// included) goes on `meter`, which the caller charges. Local txs are not journaled
    /// here.
    pub async fn add_metered(
        &self,
        input: TxInput,
        origin: TxOrigin,
        meter: &mut CpuMeter,
    ) -> AddResult {
        let result = self.admit(input, origin, meter).await;
        meter.outcome(result.is_ok());
        match &result {
            Ok(added) => {
                self.inner.metrics.inc(Counter::added);
                if added.replaced.is_some() {
                    self.inner.metrics.inc(Counter::replaced);
                }
            }
            Err(e) => self.inner.metrics.rejected(e),
        }
        result
    }

    /// Recovers the senders of a batch of wire txs on blocking threads, spread over the
    /// cores, so that admitting them one by one afterwards (in order, as a peer's txs must
    /// be) finds every sender cached instead of paying ECDSA on one core. With lanes on,
    /// those are the untrusted lane's threads (`SCHED_IDLE`) whoever sent the batch.
    ///
    /// The shields still come first: a tx that is oversized, recently failed, pooled, in
    /// flight, undecodable or against the stateless rules costs no recovery here. Nothing
    /// is recorded as failed: admission meets those txs again and decides. Batches under
    /// 16 txs are left to admission. The recovery workers' CPU goes on `meter`.
    pub async fn warm_senders(&self, raw: &[Bytes], meter: &mut CpuMeter) {
        let hashed: Vec<(B256, Bytes)> = raw
            .iter()
            .filter_map(|b| Some((PooledTransaction::hash_of_envelope(b)?, b.clone())))
            .collect();
        self.warm_senders_hashed(&hashed, meter).await;
    }

    /// [`Self::warm_senders`] on wire bytes whose hashes the caller took already.
    pub async fn warm_senders_hashed(&self, raw: &[(B256, Bytes)], meter: &mut CpuMeter) {
        const MIN_BATCH: usize = 16;
        if raw.len() < MIN_BATCH {
            return;
        }
        let s = &*self.inner;
        let rules = *s.rules.read();
        // One recovery per distinct hash: a batch of copies of one tx costs one. What is
        // known already is left out before any worker starts; the workers then run the
        // admission's own stages 2-6 ([`PoolInner::screen`]) on the rest.
        let mut seen = FastSet::with_capacity_and_hasher(raw.len(), Default::default());
        let unknown: Vec<&(B256, Bytes)> = raw
            .iter()
            .filter(|(h, b)| {
                b.first() != Some(&(TxType::Eip4844 as u8))
                    && seen.insert(*h)
                    && !s.failures.contains(h)
                    && !s.sender_cache.contains(h)
                    && !s.in_flight.contains(h)
            })
            .collect();
        // The pool is looked at once for the batch (one lock, not one per tx).
        let candidates: Vec<(B256, Bytes)> = {
            let pool = s.pool.lock();
            unknown
                .into_iter()
                .filter(|(h, _)| !pool.contains(h))
                .cloned()
                .collect()
        };
        if candidates.len() < MIN_BATCH {
            return;
        }
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
        let chunk = candidates.len().div_ceil(workers);
        let mut tasks = Vec::with_capacity(workers);
        // With lanes on, the recovery runs on the untrusted lane's threads whoever sent
        // the batch: it only saves admission work, and a proven peer's burst (the
        // invalidation storm's 8,000 valid transfers) recovered at normal priority on
        // every core held honest calls up to 16 ms (docs/bench-history/attack.md, row 5).
        let lanes_on = s.budgets.config().lanes;
        for part in candidates.chunks(chunk) {
            let part = part.to_vec();
            let inner = self.inner.clone();
            let work = move || {
                let cpu = moat_sched::thread_cpu_ns();
                for (hash, bytes) in part {
                    let Ok(screened) =
                        inner.screen(TxInput::Hashed(bytes, hash), None, &rules, None)
                    else {
                        continue;
                    };
                    inner.metrics.inc(Counter::sender_recoveries);
                    if let Ok(sender) = screened.recover_sender() {
                        let _raised = moat_sched::Raised::new();
                        inner.sender_cache.insert(hash, sender);
                    }
                }
                moat_sched::thread_cpu_ns().saturating_sub(cpu)
            };
            tasks.push(if lanes_on {
                moat_sched::spawn_blocking_idle(work)
            } else {
                tokio::task::spawn_blocking(work)
            });
        }
        meter.pause();
        for t in tasks {
            if let Ok(ns) = t.await {
                meter.add_elsewhere(ns);
            }
        }
        meter.resume();
    }

    /// Keeps local transactions across restarts from now on (the node attaches the
    /// journal once, before reloading it).
    pub fn attach_journal(&self, journal: Journal) {
        let _ = self.inner.journal.set(journal);
    }

    /// The journal [`Pool::attach_journal`] attached, if any.
    pub fn journal(&self) -> Option<&Journal> {
        self.inner.journal.get()
    }

    /// Remembers a hash-determined failure so a repeat is turned away at stage 3.
    fn fail(&self, hash: B256, e: Rejection) -> Rejection {
        self.inner.fail(hash, e)
    }

    async fn admit(&self, input: TxInput, origin: TxOrigin, meter: &mut CpuMeter) -> AddResult {
        let s = &*self.inner;
        let m = &*s.metrics;
        let mut clock = m.clock();

        // 1. Pre-flight: refuse before spending anything on decoding.
        let _permit = s.backpressure.enter(origin).map_err(|r| match r {
            shields::Refused::Global => Rejection::Busy,
            shields::Refused::Origin => Rejection::OriginBusy,
        })?;
        let rules = *s.rules.read();
        clock.lap(Stage::Preflight);

        // 2-6: hash, recent failures, dedup (claiming the hash in flight), decoding,
        //      sidecar structure, stateless rules.
        let screened = s.screen(input, Some(origin), &rules, Some(&mut clock))?;
        let hash = screened.hash;
        let is_blob = screened.pooled.tx_type() == TxType::Eip4844;
        let auths = screened.pooled.tx().tx().authorization_list();

        // 7. Sender: the cache, else ECDSA. The cache's locks at normal priority
        //    (`moat_sched::Raised`), the ECDSA at the lane's.
        let cached = {
            let _raised = moat_sched::Raised::new();
            s.sender_cache.get(&hash)
        };
        let sender = match cached {
            Some(sender) => {
                m.inc(Counter::sender_cache_hits);
                sender
            }
            None => {
                m.inc(Counter::sender_cache_misses);
                m.inc(Counter::sender_recoveries);
                let sender = screened
                    .recover_sender()
                    .map_err(|e| self.fail(hash, Rejection::InvalidSender(e)))?;
                let _raised = moat_sched::Raised::new();
                s.sender_cache.insert(hash, sender);
                sender
            }
        };
        if !auths.is_empty() {
            m.add(Counter::authority_recoveries, auths.len() as u64);
        }
        let authorities = auths.iter().filter_map(|a| a.recover_authority()).collect();
        clock.lap(Stage::Sender);
        // The in-flight claim is held to the end of admission.
        let Screened {
            pooled,
            claim: _claim,
            ..
        } = screened;

        // 8. Stateful checks. State is read outside the lock.
        let known = s.pool.lock().known_account(&sender);
        let account = known.unwrap_or_else(|| s.state.account(&sender));
        let cost = pooled.tx().tx().max_cost();
        let tx = Arc::new(PoolTx {
            tx: pooled,
            sender,
            origin,
            added_at: Instant::now(),
            authorities,
            cost,
        });
        if !is_blob {
            // Check and insert in one critical section.
            let r = self.insert(tx, account).map_err(|e| self.fail(hash, e));
            clock.lap(Stage::Stateful);
            return r;
        }
        let checked = s.pool.lock().check(&tx, account);
        match checked {
            Ok(_) => {}
            // Ahead of the sender's next nonce: held for a while, no KZG yet, if the
            // buffer takes it (`gapped`); refused as a gap otherwise.
            Err(e @ Rejection::BlobNonceGap { .. }) => {
                let held = s
                    .gapped
                    .lock()
                    .insert(Arc::clone(&tx), account.nonce, Instant::now());
                if held.is_err() {
                    return Err(self.fail(hash, e));
                }
                m.inc(Counter::gapped_held);
                clock.lap(Stage::Stateful);
                return Ok(Added {
                    hash,
                    subpool: SubPool::Blob,
                    replaced: None,
                    gapped: true,
                });
            }
            Err(e) => return Err(self.fail(hash, e)),
        }
        clock.lap(Stage::Stateful);

        // 9a. A local version-0 sidecar after Osaka becomes version 1 (`convert`), its
        //     CPU charged to the caller's meter (the RPC budget).
        let tx = match tx.tx.sidecar_shared() {
            Some(b)
                if b.version == SidecarVersion::V0
                    && rules
                        .blob
                        .is_some_and(|r| r.sidecar_version() == SidecarVersion::V1) =>
            {
                meter.pause();
                let converted = convert::to_cell_proofs_blocking(Arc::clone(b)).await;
                meter.resume();
                let (bundle, cpu_ns) = match converted {
                    Some(Ok(done)) => done,
                    Some(Err(e)) => {
                        return Err(Rejection::Sidecar(moat_common::BlobsBundleError::Kzg(e)));
                    }
                    None => return Err(Rejection::Aborted),
                };
                meter.add_elsewhere(cpu_ns);
                m.inc(Counter::sidecars_converted);
                Arc::new(tx.with_sidecar(bundle))
            }
            _ => tx,
        };

        // 9. KZG, once per unique blob tx (the in-flight claim guarantees it).
        let bundle = Arc::clone(tx.tx.sidecar_shared().ok_or(Rejection::Sidecar(
            moat_common::BlobsBundleError::MissingSidecar,
        ))?);
        let digest = kzg::sidecar_digest(&hash, &bundle);
        // Read back from the blob pool's store: verified before the restart.
        let stored = {
            let mut pre = s.preverified.lock();
            !pre.is_empty() && pre.remove(&digest)
        };
        if stored {
            m.inc(Counter::kzg_skipped_stored);
        } else {
            self.verify_sidecar(digest, bundle, meter).await?;
        }
        clock.lap(Stage::Kzg);

        // 10. Insert; a gapped tx of the same sender may follow it now. The account is
        //     read again: a block may have mined the sender's txs during the KZG await,
        //     and the pool may have let go of what it knew of the sender (judged by the
        //     nonce read at stage 8, this tx would look like a gap).
        let known = s.pool.lock().known_account(&sender);
        let account = known.unwrap_or_else(|| s.state.account(&sender));
        let r = self.insert(tx, account).map_err(|e| self.fail(hash, e));
        clock.lap(Stage::Insert);
        if r.is_ok() {
            self.promote_gapped(sender);
        }
        r
    }

    /// Stage 9: the sidecar's KZG proofs, batched on the current lane's batcher, the
    /// CPU shared out to `meter`; a sidecar that failed a moment ago is refused without
    /// KZG.
    async fn verify_sidecar(
        &self,
        digest: B256,
        bundle: Arc<BlobsBundle>,
        meter: &mut CpuMeter,
    ) -> Result<(), Rejection> {
        let s = &*self.inner;
        if s.bad_sidecars.contains(&digest) {
            s.metrics.inc(Counter::kzg_repeats_refused);
            return Err(Rejection::Sidecar(moat_common::BlobsBundleError::Kzg(
                moat_crypto::kzg::KzgError::InvalidProof,
            )));
        }
        meter.pause();
        let batcher = match moat_sched::current() {
            Lane::Trusted => &s.kzg[0],
            Lane::Untrusted => &s.kzg[1],
        };
        let verdict = batcher.verify(bundle).await;
        meter.resume();
        match verdict {
            Some((Ok(()), cpu_ns)) => {
                meter.add_kzg_share(cpu_ns);
                Ok(())
            }
            Some((Err(e), cpu_ns)) => {
                meter.add_kzg_share(cpu_ns);
                if matches!(e, moat_common::BlobsBundleError::Kzg(_)) {
                    s.bad_sidecars.insert(digest, Instant::now());
                }
                Err(Rejection::Sidecar(e))
            }
            None => Err(Rejection::Aborted),
        }
    }

    /// Hands `sender`'s gapped blob txs that no longer wait (the run from its next
    /// nonce) back to admission, in nonce order, on a task of their own; each is charged
    /// to the origin that sent it. What was mined meanwhile is dropped.
    fn promote_gapped(&self, sender: Address) {
        // Most senders hold nothing there: no state read, no pool lock for them.
        if !self.inner.gapped.lock().holds(&sender) {
            return;
        }
        let next = self.pending_nonce(&sender);
        let ready = self.inner.gapped.lock().take_ready(&sender, next);
        if ready.is_empty() {
            return;
        }
        let pool = self.clone();
        tokio::spawn(async move {
            for tx in ready {
                let origin = tx.origin;
                let input = TxInput::Decoded(Box::new(tx.tx.clone()));
                let mut meter = CpuMeter::start();
                let hash = tx.hash();
                let result = pool.add_metered(input, origin, &mut meter).await;
                pool.charge(origin, meter);
                if let Err(e) = result {
                    tracing::debug!(%hash, error = %e, "a gapped blob tx refused at promotion");
                    break;
                }
                pool.inner.metrics.inc(Counter::gapped_promoted);
            }
        });
    }

    /// Drops gapped blob txs past their lifetime, and promotes those whose gap a block
    /// filled.
    fn upkeep_gapped(&self, now: Instant) {
        let (expired, senders) = {
            let mut g = self.inner.gapped.lock();
            (g.expire(now), g.senders())
        };
        self.inner
            .metrics
            .add(Counter::gapped_expired, expired as u64);
        for sender in senders {
            self.promote_gapped(sender);
        }
    }

    /// Inserts under the lock, then publishes events with the lock released.
    fn insert(&self, tx: Arc<PoolTx>, account: AccountState) -> AddResult {
        let tx_origin = tx.origin;
        let is_blob = tx.is_blob();
        let (result, evicted, pending, evicted_locals, replaced_local) = {
            let mut pool = self.inner.pool.lock();
            let (result, evicted) = pool.insert(tx, account);
            // Copied out rather than taken: the pool's buffer keeps its capacity, and an
            // insert (which promotes a handful of txs at most) allocates nothing here.
            let pending: SmallVec<[B256; 8]> = pool.newly_pending.drain(..).collect();
            let evicted_locals = std::mem::take(&mut pool.evicted_locals);
            let replaced_local = pool.replaced_local.take();
            (result, evicted, pending, evicted_locals, replaced_local)
        };
        // A local replacement is journaled by its caller next: the tx it replaced waits
        // here until then ([`Pool::journal_append`]).
        if let (Some(old), Ok(added)) = (replaced_local, &result)
            && tx_origin == TxOrigin::Local
            && self.inner.journal.get().is_some()
        {
            self.inner.replaced_locals.lock().insert(added.hash, old);
        }
        if !evicted.is_empty() {
            self.inner
                .metrics
                .add(Counter::evicted, evicted.len() as u64);
        }
        self.hold_evicted_locals(evicted_locals);
        self.publish(pending);
        if result.is_ok()
            && is_blob
            && let Some(store) = self.inner.blob_store.get()
        {
            store.wake();
        }
        result
    }

    /// Local txs that left the pool for room (evicted for price, or displaced by their
    /// sender's gap-filler) stay in the journal, as a refusal for a full pool does at
    /// reload: the next start offers them again. They leave it when mined, replaced or
    /// found invalid at a reload.
    fn hold_evicted_locals(&self, txs: Vec<Arc<PoolTx>>) {
        if txs.is_empty() {
            return;
        }
        if let Some(journal) = self.inner.journal.get() {
            journal.hold_more(txs.iter().map(|t| t.tx.encoded_2718()).collect());
        }
    }

    fn publish(&self, hashes: impl IntoIterator<Item = B256>) {
        // The channel's lock is the broadcaster's too.
        let _raised = moat_sched::Raised::new();
        for h in hashes {
            // No subscriber is not an error.
            let _ = self.inner.pending_events.send(h);
        }
    }

    /// Applies a new head: drops mined and stale transactions, refreshes the touched
    /// accounts, moves transactions between subpools, and re-admits reorged-out ones.
    /// The revalidation (account reads and the pool's update, reinjection aside) is timed
    /// in `moat_pool_head_change_seconds`; the accounts it read are counted in
    /// `moat_pool_head_change_accounts_total`.
    pub async fn on_head_change(&self, update: HeadUpdate) -> HeadChangeOutcome {
        let s = &*self.inner;
        let started = Instant::now();
        *s.rules.write() = Rules::at(&s.cfg, &update.head);
        let mut addresses = update.touched.clone();
        {
            let pool = s.pool.lock();
            addresses.extend(
                update
                    .mined
                    .iter()
                    .filter_map(|h| pool.get(h).map(|e| e.tx.sender)),
            );
        }
        addresses.sort_unstable();
        addresses.dedup();
        let accounts: Vec<(Address, AccountState)> = addresses
            .into_iter()
            .map(|a| (a, s.state.account(&a)))
            .collect();
        let (removed, pending, evicted_locals) = {
            let mut pool = s.pool.lock();
            let (mut removed, evicted) = pool.apply_head(update.head, &update.mined, &accounts);
            s.metrics.add(Counter::mined, removed.len() as u64);
            s.metrics.add(Counter::evicted, evicted.len() as u64);
            removed.extend(evicted);
            (
                removed,
                std::mem::take(&mut pool.newly_pending),
                std::mem::take(&mut pool.evicted_locals),
            )
        };
        self.hold_evicted_locals(evicted_locals);
        ::metrics::histogram!("moat_pool_head_change_seconds").record(started.elapsed());
        ::metrics::counter!("moat_pool_head_change_accounts_total")
            .increment(accounts.len() as u64);
        self.publish(pending);
        let mut reinjected = 0;
        for tx in update.reorged {
            s.metrics.inc(Counter::reinjected);
            if self
                .add_transaction(TxInput::Decoded(Box::new(tx)), TxOrigin::Reorg)
                .await
                .is_ok()
            {
                reinjected += 1;
            }
        }
        // A block may have filled a gapped blob tx's gap, or mined its nonce.
        self.upkeep_gapped(Instant::now());
        // Once the head's rules want cell proofs, pooled version-0 sidecars are converted.
        if s.rules
            .read()
            .blob
            .is_some_and(|r| r.sidecar_version() == SidecarVersion::V1)
        {
            self.convert_pooled();
        }
        HeadChangeOutcome {
            removed,
            reinjected,
        }
    }

    /// Drops queued transactions older than the configured lifetime; returns how many.
    pub fn remove_expired(&self, now: Instant) -> usize {
        let removed = self
            .inner
            .pool
            .lock()
            .remove_expired(now, self.inner.cfg.queued_lifetime);
        self.inner
            .metrics
            .add(Counter::expired, removed.len() as u64);
        self.upkeep_gapped(now);
        removed.len()
    }

    /// Removes a transaction and its sender's later ones (e.g. it failed in a block).
    pub fn remove_with_descendants(&self, hash: &B256) -> Vec<B256> {
        self.inner.pool.lock().remove_with_descendants(hash)
    }

    /// The pooled transaction with this hash.
    pub fn get(&self, hash: &B256) -> Option<Arc<PoolTx>> {
        self.inner.pool.lock().get(hash).map(|e| Arc::clone(&e.tx))
    }

    /// The pooled transaction with this hash, if it may leave the node: what the network
    /// gossips, announces and serves. A private sender's txs ([`PoolConfig::private`])
    /// are not.
    pub fn get_shareable(&self, hash: &B256) -> Option<Arc<PoolTx>> {
        self.get(hash).filter(|tx| self.is_shareable(tx))
    }

    /// Whether this pooled tx may be announced, gossiped or served to peers: not when its
    /// sender is private ([`PoolConfig::private`]).
    pub fn is_shareable(&self, tx: &PoolTx) -> bool {
        !self.inner.cfg.private.contains(&tx.sender)
    }

    /// Why a tx announced with its sender and nonce (eth/73, EIP-8077) cannot be pooled,
    /// judged from the head state alone, before anything is fetched: its nonce is used
    /// already (`nonce_too_low`), its sender can pay for no gas (`insufficient_funds`:
    /// a zero balance) or is a contract (`sender_has_code`, EIP-3607). `None` when it may
    /// be pooled; admission judges the rest once the tx is fetched. One account read.
    pub fn hopeless(&self, sender: &Address, nonce: u64) -> Option<&'static str> {
        let account = self.inner.state.account(sender);
        if nonce < account.nonce {
            Some("nonce_too_low")
        } else if account.balance.is_zero() {
            Some("insufficient_funds")
        } else if account.code == CodeKind::Contract {
            Some("sender_has_code")
        } else {
            None
        }
    }

    /// Whether a transaction with this hash is pooled (those being admitted not counted).
    pub fn contains(&self, hash: &B256) -> bool {
        self.inner.pool.lock().contains(hash)
    }

    /// Known to the pool or being admitted: what the fetcher must not request again.
    pub fn is_known_or_importing(&self, hash: &B256) -> bool {
        self.contains(hash) || self.is_importing(hash)
    }

    /// Not pooled yet but on its way: being admitted, or held until its nonce gap fills.
    pub fn is_importing(&self, hash: &B256) -> bool {
        self.inner.in_flight.contains(hash) || self.inner.gapped.lock().contains(hash)
    }

    /// The subpool of the pooled transaction with this hash.
    pub fn subpool_of(&self, hash: &B256) -> Option<SubPool> {
        self.inner.pool.lock().get(hash).map(|e| e.subpool)
    }

    /// Transactions pooled, all subpools together.
    pub fn len(&self) -> usize {
        self.inner.pool.lock().len()
    }

    /// Whether no transaction is pooled.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Count and bytes of each subpool now.
    pub fn status(&self) -> PoolStatus {
        let p = self.inner.pool.lock();
        PoolStatus {
            pending: p.usage(SubPool::Pending),
            basefee: p.usage(SubPool::BaseFee),
            queued: p.usage(SubPool::Queued),
            blob: p.usage(SubPool::Blob),
        }
    }

    /// The next nonce for `address` counting its gapless pooled transactions.
    pub fn pending_nonce(&self, address: &Address) -> u64 {
        let state_nonce = self.inner.state.account(address).nonce;
        self.inner.pool.lock().pending_nonce(address, state_nonce)
    }

    /// `address`'s pooled transactions, in nonce order.
    pub fn sender_txs(&self, address: &Address) -> Vec<Arc<PoolTx>> {
        self.inner.pool.lock().sender_txs(address)
    }

    /// Every pooled transaction with its subpool, grouped by sender.
    pub fn content(&self) -> Vec<SenderContent> {
        self.inner.pool.lock().content()
    }

    /// The current head the pool validates against.
    pub fn head(&self) -> HeadInfo {
        self.inner.pool.lock().head
    }

    /// Pending transactions best first, for a block with `budget`.
    pub fn best_transactions(&self, budget: BlockBudget) -> BestTransactions {
        let groups = self.inner.pool.lock().pending_by_sender();
        BestTransactions::new(groups, budget)
    }

    /// The sidecar holding the blob with versioned hash `vh`, and the blob's index in it.
    pub fn blob_by_versioned_hash(&self, vh: &B256) -> Option<(Arc<BlobsBundle>, usize)> {
        let pool = self.inner.pool.lock();
        let tx = pool.tx_by_versioned_hash(vh)?;
        let index = tx
            .tx
            .tx()
            .tx()
            .blob_versioned_hashes()
            .iter()
            .position(|h| h == vh)?;
        Some((Arc::clone(tx.tx.sidecar_shared()?), index))
    }

    /// Every hash in the pool.
    pub fn hashes(&self) -> Vec<B256> {
        self.inner.pool.lock().hashes()
    }

    #[cfg(test)]
    fn assert_consistent(&self) {
        self.inner.pool.lock().assert_consistent();
    }
}

#[cfg(test)]
mod tests;
