//! Pool and pipeline settings, with the defaults an operator of geth or reth would expect.

use moat_common::config::ChainConfig;
use std::time::Duration;

/// Count and byte caps of one subpool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubPoolLimit {
    /// Most transactions the subpool holds.
    pub max_txs: usize,
    /// Most bytes the subpool holds (network size of its txs, sidecars included).
    pub max_bytes: usize,
}

impl SubPoolLimit {
    /// Caps of `max_txs` transactions and `max_bytes` bytes.
    pub const fn new(max_txs: usize, max_bytes: usize) -> Self {
        Self { max_txs, max_bytes }
    }
}

/// Settings of the pool and its admission pipeline ([`PoolConfig::new`] gives the defaults).
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// The chain admitted for: its chain id and fork schedule decide the next block's rules.
    pub chain: ChainConfig,
    /// Limits of the pending subpool (the node sets its count from `--txpool.globalslots`).
    pub pending: SubPoolLimit,
    /// Limits of the basefee subpool (its count too from `--txpool.globalslots`).
    pub basefee: SubPoolLimit,
    /// Limits of the queued subpool (the node sets its count from `--txpool.globalqueue`).
    pub queued: SubPoolLimit,
    /// Bytes here include the sidecars.
    pub blob: SubPoolLimit,
    /// Executable txs (a gapless run from the state nonce) one sender is sure to keep
    /// (geth's `--txpool.accountslots`); the run may grow past it while pending has room.
    pub max_account_slots: usize,
    /// Txs behind a nonce gap one sender may have (geth's `--txpool.accountqueue`).
    pub max_account_queue: usize,
    /// The same two for senders of local (RPC) txs: larger, and bounded.
    pub local_account_slots: usize,
    /// Txs behind a nonce gap one local sender may have.
    pub local_account_queue: usize,
    /// Percent of each subpool's limits (count and bytes) that local senders' txs may
    /// hold exempt from eviction. Past it, local senders are evicted as any other, worst
    /// effective tip at the current base fee first, farthest nonce first; within it, a
    /// full subpool evicts remote txs only. At most 100.
    pub local_share: usize,
    /// Senders whose txs count as local from any origin (geth's `--txpool.locals`).
    pub locals: std::collections::HashSet<alloy_primitives::Address>,
    /// Senders whose txs are private (`--txpool.private`): pooled, journaled and built
    /// into this node's blocks, but never announced, gossiped or served to a peer
    /// ([`crate::Pool::get_shareable`]). Until a block holds one, only this node has it.
    pub private: std::collections::HashSet<alloy_primitives::Address>,
    /// Local txs get no exemption (geth's `--txpool.nolocals`): the least tip, the
    /// remote allowance and eviction apply to them as to any. They are still journaled.
    pub no_locals: bool,
    /// Pooled transactions allowed to an EIP-7702-delegated sender, or to an authority of
    /// a pooled authorization.
    pub max_delegated_slots: usize,
    /// Max authorizations in one EIP-7702 transaction (each costs an ECDSA recovery here).
    pub max_authorizations: usize,
    /// Fee bump (percent) a replacement needs on every fee field.
    pub price_bump: u128,
    /// The same for blob transactions.
    pub blob_price_bump: u128,
    /// Least tip per gas for non-local transactions.
    pub min_tip: u128,
    /// Queued transactions older than this are dropped.
    pub queued_lifetime: Duration,
    /// Senders the [`crate::SenderCache`] keeps (tx hash → sender), unless the pool is given one.
    pub sender_cache_capacity: usize,
    /// Hashes the recent-failure set keeps (stage 3's [`crate::RecentFailures`]).
    pub failure_cache_capacity: usize,
    /// How long a failed hash (or a bad blob sidecar) is turned away without another look.
    pub failure_ttl: Duration,
    /// Admissions in progress at once (beyond that: busy, before decoding).
    pub max_in_flight: usize,
    /// Admissions in progress at once from one origin.
    pub max_in_flight_per_origin: usize,
    /// Max transactions verified in one KZG batch.
    pub max_kzg_batch: usize,
    /// CPU budgets of admission per origin (see [`super::budget`]).
    pub budget: super::BudgetConfig,
    /// Txs let go for room that the pool remembers, count and bytes (oldest forgotten
    /// first), so that a later nonce of their sender can bring them back as a package
    /// worth its room. Zero txs turns this off.
    pub let_go: SubPoolLimit,
    /// In the pending subpool, eviction's victim is the sender's suffix (from a pending
    /// tx to its top) with the least average tip, as Bitcoin Core evicts by descendant
    /// score, instead of the sender's last tx with the least tip. On by default: each
    /// sender's least suffix is kept as its txs come and go, so an eviction finds it in
    /// O(log n) (docs/bench-history/pool-quality.md, "packages brought back", measures what it gains).
    pub evict_by_package: bool,
    /// The reorder buffer for blob txs whose nonce is ahead of their sender's next
    /// (go-ethereum's lifetime and overall cap, and a per-origin share).
    pub gapped: crate::GappedLimits,
}

impl PoolConfig {
    /// The defaults for `chain`: geth's per-sender slots (16, queue 64) and price bump (10%),
    /// 10,000 txs per subpool.
    pub fn new(chain: ChainConfig) -> Self {
        Self {
            chain,
            pending: SubPoolLimit::new(10_000, 20 << 20),
            basefee: SubPoolLimit::new(10_000, 20 << 20),
            queued: SubPoolLimit::new(10_000, 20 << 20),
            blob: SubPoolLimit::new(1_000, 800 << 20),
            max_account_slots: 16,
            max_account_queue: 64,
            local_account_slots: 1_024,
            local_account_queue: 256,
            local_share: 50,
            locals: Default::default(),
            private: Default::default(),
            no_locals: false,
            max_delegated_slots: 1,
            max_authorizations: 64,
            price_bump: 10,
            blob_price_bump: 100,
            min_tip: 1,
            queued_lifetime: Duration::from_secs(3 * 3600),
            sender_cache_capacity: 131_072,
            failure_cache_capacity: 65_536,
            failure_ttl: Duration::from_secs(60),
            max_in_flight: 4_096,
            max_in_flight_per_origin: 256,
            max_kzg_batch: 32,
            budget: super::BudgetConfig::for_this_machine(),
            let_go: SubPoolLimit::new(16_384, 8 << 20),
            evict_by_package: true,
            gapped: crate::GappedLimits::default(),
        }
    }

    /// A sender's allowance, (executable slots, queue behind a gap): the local one when
    /// `local`.
    pub(crate) fn account_allowance(&self, local: bool) -> (usize, usize) {
        if local {
            (self.local_account_slots, self.local_account_queue)
        } else {
            (self.max_account_slots, self.max_account_queue)
        }
    }

    /// Whether a tx of `sender` from `origin` gets the local exemptions.
    pub fn is_local(&self, origin: super::TxOrigin, sender: &alloy_primitives::Address) -> bool {
        !self.no_locals && (origin.is_local() || self.locals.contains(sender))
    }

    /// What local senders' txs may hold of `sub` exempt from eviction
    /// ([`PoolConfig::local_share`] of its limits).
    pub(crate) fn local_limit(&self, sub: super::SubPool) -> SubPoolLimit {
        let limit = self.limit(sub);
        let share = self.local_share.min(100);
        SubPoolLimit::new(
            limit.max_txs / 100 * share + limit.max_txs % 100 * share / 100,
            limit.max_bytes / 100 * share + limit.max_bytes % 100 * share / 100,
        )
    }

    pub(crate) fn limit(&self, sub: super::SubPool) -> SubPoolLimit {
        match sub {
            super::SubPool::Pending => self.pending,
            super::SubPool::BaseFee => self.basefee,
            super::SubPool::Queued => self.queued,
            super::SubPool::Blob => self.blob,
        }
    }
}
