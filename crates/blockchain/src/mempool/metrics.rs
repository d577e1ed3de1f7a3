//! Pool and pipeline counters. Each is an atomic the tests and tools read directly, mirrored
//! to the `metrics` facade (Prometheus once the node installs an exporter).

use super::Rejection;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The admission stages, in pipeline order (DESIGN §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Preflight,
    Decode,
    RecentFailure,
    Dedup,
    ValidateCheap,
    Stateless,
    Sender,
    Stateful,
    Kzg,
    Insert,
}

impl Stage {
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
        #[derive(Debug, Default)]
        pub struct PoolMetrics {
            $($(#[$doc])* pub $name: AtomicU64,)*
            rejections: [AtomicU64; Rejection::REASONS],
        }

        /// Which counter to bump.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[allow(non_camel_case_types)]
        pub enum Counter { $($name,)* }

        impl PoolMetrics {
            fn slot(&self, c: Counter) -> (&AtomicU64, &'static str) {
                match c { $(Counter::$name => (&self.$name, $metric),)* }
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
}

impl PoolMetrics {
    pub fn inc(&self, c: Counter) {
        self.add(c, 1);
    }

    pub fn add(&self, c: Counter, n: u64) {
        let (atomic, name) = self.slot(c);
        atomic.fetch_add(n, Ordering::Relaxed);
        metrics::counter!(name).increment(n);
    }

    pub fn get(&self, c: Counter) -> u64 {
        self.slot(c).0.load(Ordering::Relaxed)
    }

    pub(crate) fn rejected(&self, r: &Rejection) {
        self.rejections[r.index()].fetch_add(1, Ordering::Relaxed);
        metrics::counter!("moat_pool_rejections_total", "reason" => r.reason()).increment(1);
    }

    /// Rejections counted under a [`Rejection::reason`] label.
    pub fn rejections(&self, reason: &str) -> u64 {
        REASON_PROBES
            .iter()
            .find(|r| r.reason() == reason)
            .map(|r| self.rejections[r.index()].load(Ordering::Relaxed))
            .unwrap_or(0)
    }

    /// Records how long `stage` took since `started`; returns now for the next stage.
    pub(crate) fn stage(&self, stage: Stage, started: Instant) -> Instant {
        let now = Instant::now();
        metrics::histogram!("moat_admission_stage_seconds", "stage" => stage.name())
            .record((now - started).as_secs_f64());
        now
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
        Rejection::BlobFeeCapTooLow { fee_cap: 0, min: 0 },
        Rejection::BlobsNotActive,
        Rejection::Aborted,
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
