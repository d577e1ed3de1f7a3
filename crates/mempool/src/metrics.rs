//! Pool and pipeline counters. Each is an atomic the tests and tools read directly, mirrored
//! to the `metrics` facade (Prometheus once the node installs an exporter).

use super::Rejection;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The admission stages, in pipeline order (DESIGN §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Backpressure: too many admissions in progress (stage 1).
    Preflight,
    /// Size cap, envelope hash and decoding (stage 2).
    Decode,
    /// Lookup in the recent-failure set (stage 3).
    RecentFailure,
    /// Lookup in the pool, and the hash claimed in flight (stage 4).
    Dedup,
    /// Structural checks of a blob tx's sidecar, no KZG yet (stage 5).
    ValidateCheap,
    /// The next block's fork rules that need no state: chain id, gas, fees, size (stage 6).
    Stateless,
    /// Sender recovery: the sender cache, else ECDSA (stage 7).
    Sender,
    /// Checks against the sender's account and pooled txs: nonce, balance, slots (stage 8).
    Stateful,
    /// KZG proof verification of blob txs, batched (stage 9).
    Kzg,
    /// Insertion into a subpool, evicting when it is full (stage 10).
    Insert,
}

impl Stage {
    /// Every stage, in pipeline order.
    pub const ALL: [Stage; 10] = [
        Stage::Preflight,
        Stage::Decode,
        Stage::RecentFailure,
        Stage::Dedup,
        Stage::ValidateCheap,
        Stage::Stateless,
        Stage::Sender,
        Stage::Stateful,
        Stage::Kzg,
        Stage::Insert,
    ];

    /// The stage's label on the `moat_admission_stage_seconds` histogram.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Preflight => "preflight",
            Stage::Decode => "decode",
            Stage::RecentFailure => "recent_failure",
            Stage::Dedup => "dedup",
            Stage::ValidateCheap => "validate_cheap",
            Stage::Stateless => "stateless",
            Stage::Sender => "sender",
            Stage::Stateful => "stateful",
            Stage::Kzg => "kzg",
            Stage::Insert => "insert",
        }
    }
}

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident => $metric:literal,)*) => {
        /// Monotonic counters of the pool and its pipeline.
        pub struct PoolMetrics {
            $($(#[$doc])* pub $name: AtomicU64,)*
            rejections: [AtomicU64; Rejection::REASONS],
            admissions: AtomicU64,
            /// Handles into the `metrics` recorder, registered once: building a key per
            /// increment would cost more than the increment.
            mirrors: Vec<metrics::Counter>,
            rejection_mirrors: Vec<metrics::Counter>,
            stage_histograms: Vec<metrics::Histogram>,
        }

        impl PoolMetrics {
            /// Registers the mirrors with the `metrics` recorder installed now (if any).
            pub fn new() -> Self {
                Self {
                    $($name: AtomicU64::new(0),)*
                    rejections: Default::default(),
                    admissions: AtomicU64::new(0),
                    mirrors: vec![$(metrics::counter!($metric),)*],
                    rejection_mirrors: REASON_PROBES
                        .iter()
                        .map(|r| metrics::counter!("moat_pool_rejections_total", "reason" => r.reason()))
                        .collect(),
                    stage_histograms: Stage::ALL
                        .iter()
                        .map(|s| metrics::histogram!("moat_admission_stage_seconds", "stage" => s.name()))
                        .collect(),
                }
            }
        }

        /// Which counter to bump.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[allow(non_camel_case_types)]
        pub enum Counter { $($(#[$doc])* $name,)* }

        impl PoolMetrics {
            fn slot(&self, c: Counter) -> &AtomicU64 {
                match c { $(Counter::$name => &self.$name,)* }
            }
        }
    };
}

counters! {
    /// secp256k1 recoveries of transaction senders (cache misses that reached ECDSA).
    sender_recoveries => "moat_pool_sender_recoveries_total",
    /// Sender cache hits.
    sender_cache_hits => "moat_pool_sender_cache_hits_total",
    /// Sender cache misses.
    sender_cache_misses => "moat_pool_sender_cache_misses_total",
    /// Admissions turned away by the recent-failure set.
    failure_cache_hits => "moat_pool_failure_cache_hits_total",
    /// Hashes recorded in the recent-failure set.
    failure_cache_inserts => "moat_pool_failure_cache_inserts_total",
    /// EIP-7702 authority recoveries.
    authority_recoveries => "moat_pool_authority_recoveries_total",
    /// Blob transactions whose KZG proofs were verified (once per unique blob tx).
    kzg_verifications => "moat_pool_kzg_verifications_total",
    /// Blob transactions refused without KZG: the same transaction with the same
    /// sidecar failed KZG a moment ago.
    kzg_repeats_refused => "moat_pool_kzg_repeats_refused_total",
    /// KZG batch calls (a batch covers one or more transactions).
    kzg_batches => "moat_pool_kzg_batches_total",
    /// Batches that failed and were re-checked transaction by transaction.
    kzg_batch_fallbacks => "moat_pool_kzg_batch_fallbacks_total",
    /// Transactions added (replacements included).
    added => "moat_pool_added_total",
    /// Transactions that replaced another.
    replaced => "moat_pool_replaced_total",
    /// Transactions evicted because a subpool was full.
    evicted => "moat_pool_evicted_total",
    /// Transactions removed because a block included them or made them stale.
    mined => "moat_pool_mined_total",
    /// Queued transactions dropped for age.
    expired => "moat_pool_expired_total",
    /// Reorged-out transactions offered back to the pool.
    reinjected => "moat_pool_reinjected_total",
    /// Version-0 sidecars converted to cell proofs after Osaka: submitted over RPC,
    /// pooled before the fork, or reloaded from the journal or the blob pool's store.
    sidecars_converted => "moat_pool_sidecars_converted_total",
    /// Blob transactions reloaded from the blob pool's store at start whose sidecar was
    /// not verified again (it was before the restart).
    kzg_skipped_stored => "moat_pool_kzg_skipped_stored_total",
    /// Blob transactions written to the blob pool's store.
    blobstore_written => "moat_pool_blobstore_written_total",
    /// Blob transactions deleted from the blob pool's store (they left the pool).
    blobstore_deleted => "moat_pool_blobstore_deleted_total",
    /// Writes of the blob pool's store that failed (tried again a round later).
    blobstore_write_failures => "moat_pool_blobstore_write_failures_total",
    /// Blob transactions held in the gapped reorder buffer (their nonce was ahead).
    gapped_held => "moat_pool_gapped_held_total",
    /// Gapped blob transactions handed back to admission once their gap filled.
    gapped_promoted => "moat_pool_gapped_promoted_total",
    /// Gapped blob transactions dropped after their lifetime.
    gapped_expired => "moat_pool_gapped_expired_total",
}

impl PoolMetrics {
    /// Adds one to `c`, and to its mirror.
    pub fn inc(&self, c: Counter) {
        self.add(c, 1);
    }

    /// Adds `n` to `c`, and to its mirror.
    pub fn add(&self, c: Counter, n: u64) {
        self.slot(c).fetch_add(n, Ordering::Relaxed);
        self.mirrors[c as usize].increment(n);
    }

    /// The value of `c` since the pool started.
    pub fn get(&self, c: Counter) -> u64 {
        self.slot(c).load(Ordering::Relaxed)
    }

    pub(crate) fn rejected(&self, r: &Rejection) {
        self.rejections[r.index()].fetch_add(1, Ordering::Relaxed);
        self.rejection_mirrors[r.index()].increment(1);
    }

    /// Rejections counted under a [`Rejection::reason`] label.
    pub fn rejections(&self, reason: &str) -> u64 {
        REASON_PROBES
            .iter()
            .find(|r| r.reason() == reason)
            .map(|r| self.rejections[r.index()].load(Ordering::Relaxed))
            .unwrap_or(0)
    }

    /// A stage clock for one admission. One admission in [`STAGE_SAMPLE_EVERY`] is timed:
    /// reading the clock ten times per admission would cost more than some stages do.
    pub(crate) fn clock(&self) -> StageClock<'_> {
        let n = self.admissions.fetch_add(1, Ordering::Relaxed);
        StageClock {
            last: n.is_multiple_of(STAGE_SAMPLE_EVERY).then(Instant::now),
            histograms: &self.stage_histograms,
        }
    }
}

/// One admission in this many has its stages timed.
pub(crate) const STAGE_SAMPLE_EVERY: u64 = 16;

/// Times consecutive stages of one sampled admission into the stage histogram.
pub(crate) struct StageClock<'a> {
    last: Option<Instant>,
    histograms: &'a [metrics::Histogram],
}

impl StageClock<'_> {
    /// Records the time since the previous lap under `stage` (if this admission is sampled).
    pub(crate) fn lap(&mut self, stage: Stage) {
        if let Some(last) = self.last {
            let now = Instant::now();
            self.histograms[stage as usize].record((now - last).as_secs_f64());
            self.last = Some(now);
        }
    }
}

impl Default for PoolMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for PoolMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolMetrics")
            .field("added", &self.get(Counter::added))
            .field("sender_recoveries", &self.get(Counter::sender_recoveries))
            .field("kzg_verifications", &self.get(Counter::kzg_verifications))
            .finish_non_exhaustive()
    }
}

/// One value of each rejection kind, to map reason labels to slots.
static REASON_PROBES: std::sync::LazyLock<Vec<Rejection>> = std::sync::LazyLock::new(|| {
    use moat_common::transaction::StatelessError;
    vec![
        Rejection::Busy,
        Rejection::OriginBusy,
        Rejection::Oversized { size: 0, max: 0 },
        Rejection::Decode(moat_common::DecodeError::Empty),
        Rejection::RecentlyFailed,
        Rejection::AlreadyKnown,
        Rejection::Sidecar(moat_common::BlobsBundleError::MissingSidecar),
        Rejection::Stateless(StatelessError::NoBlobHashes),
        Rejection::InvalidSender(moat_crypto::secp::SignatureError::Unrecoverable),
        Rejection::NonceTooLow { state: 0, tx: 0 },
        Rejection::InsufficientFunds {
            balance: Default::default(),
            cost: Default::default(),
        },
        Rejection::Overdraft {
            balance: Default::default(),
            cost: Default::default(),
        },
        Rejection::SenderHasCode,
        Rejection::AccountLimit { slots: 0 },
        Rejection::ReplacementUnderpriced,
        Rejection::Underpriced,
        Rejection::AlreadyReserved,
        Rejection::InflightLimit,
        Rejection::AuthorityReserved,
        Rejection::TooManyAuthorizations { count: 0, max: 0 },
        Rejection::BlobsNotActive,
        Rejection::Aborted,
        Rejection::BlobNonceGap {
            expected: 0,
            found: 0,
        },
        Rejection::BlobFeeCapTooLow,
        Rejection::JournalFailed(super::JournalFailure {
            kind: std::io::ErrorKind::StorageFull,
            message: String::new(),
        }),
    ]
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_own_slot() {
        assert_eq!(REASON_PROBES.len(), Rejection::REASONS);
        let mut seen = std::collections::HashSet::new();
        for r in REASON_PROBES.iter() {
            assert!(seen.insert(r.index()), "{} shares a slot", r.reason());
            assert!(r.index() < Rejection::REASONS);
        }
        let m = PoolMetrics::default();
        m.rejected(&Rejection::Underpriced);
        assert_eq!(m.rejections("underpriced"), 1);
        assert_eq!(m.rejections("busy"), 0);
    }
}
