//! The best-transactions iterator block building reads.
//!
//! It works on a snapshot of the pending subpool taken under the lock, so the builder
//! never holds the pool. Order: senders by the best average effective tip per gas over
//! their next transactions (so a cheap transaction that opens the way to rich ones is not
//! left behind for a middling one elsewhere), each sender's transactions in nonce order. Gas and blob gas budgets are respected: a
//! transaction that does not fit is skipped together with the rest of its sender (its
//! later nonces cannot go without it), as is a sender whose transaction the builder
//! marks invalid. The blob txs are chosen up front, exactly (a knapsack over the block's
//! blobs, see `plan_blobs`).

use super::PoolTx;
use alloy_primitives::B256;
use moat_common::constants::GAS_PER_BLOB;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

/// How many of a sender's next txs the ordering looks at.
const LOOKAHEAD: usize = 64;

struct Candidate {
    /// The best average effective tip per gas over the sender's next txs.
    tip: u128,
    /// Earlier-seen senders win ties, so the order is deterministic.
    group: usize,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.tip == other.tip && self.group == other.group
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.tip
            .cmp(&other.tip)
            .then_with(|| other.group.cmp(&self.group))
    }
}

/// Budgets of the block being built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockBudget {
    /// Base fee per gas of the block, wei: a tx goes in only if its fee cap reaches it.
    pub base_fee: u64,
    /// Blob base fee per blob gas of the block, wei (EIP-4844): a blob tx's blob fee cap must reach it.
    pub blob_base_fee: u128,
    /// Gas limit of the block: a tx whose gas no longer fits is skipped.
    pub gas_limit: u64,
    /// Max blob gas of the block (blob count × 2^17).
    pub max_blob_gas: u64,
    /// Least effective tip per gas for inclusion (geth's `--miner.gasprice`), applied to
    /// a sender's run as its order key is: its next tx goes in when the best average tip
    /// over its next txs pays it, so a tx under it (a local zero tip) goes in ahead of the
    /// txs of its sender that pay for it, and a sender whose next txs pay less on average
    /// is skipped. Blob txs must each pay it.
    pub min_tip: u128,
}

/// Pending transactions in block order, from [`crate::Pool::best_transactions`]: best
/// effective tip first, each sender's txs in nonce order, within the block's gas and blob gas.
pub struct BestTransactions {
    groups: Vec<VecDeque<Arc<PoolTx>>>,
    heap: BinaryHeap<Candidate>,
    budget: BlockBudget,
    gas_left: u64,
    blob_gas_left: u64,
    /// The group of the transaction yielded last (for `mark_invalid`).
    last: Option<(B256, usize)>,
}

impl BestTransactions {
    pub(crate) fn new(groups: Vec<Vec<Arc<PoolTx>>>, budget: BlockBudget) -> Self {
        // A sampled blob tx (some cells of its blobs, EIP-8070) cannot go into a block:
        // its sender's run stops before it.
        let groups = groups.into_iter().map(|mut run| {
            if let Some(at) = run.iter().position(|t| !t.tx.has_whole_blobs()) {
                run.truncate(at);
            }
            VecDeque::from(run)
        });
        let mut this = Self {
            groups: groups.collect(),
            heap: BinaryHeap::new(),
            budget,
            gas_left: budget.gas_limit,
            blob_gas_left: budget.max_blob_gas,
            last: None,
        };
        this.plan_blobs();
        for g in 0..this.groups.len() {
            this.push_head(g);
        }
        this
    }

    /// Blob space is a knapsack: a greedy walk by tip can fill it with a rich 3-blob tx and
    /// leave out three 1-blob txs worth more together. So the blob senders' runs are
    /// chosen up front, exactly: per sender the prefix of its includable blob txs, all the
    /// prefixes together within the block's blobs, at the most Σ tip × gas (dynamic
    /// programming over the blob count, which is small). Each blob sender's run is cut to
    /// its chosen prefix; the walk then places them among the plain txs as before.
    fn plan_blobs(&mut self) {
        let cap = (self.budget.max_blob_gas / GAS_PER_BLOB) as usize;
        let blobs = |tx: &PoolTx| tx.tx.tx().tx().blob_versioned_hashes().len();
        let blob_groups: Vec<usize> = (0..self.groups.len())
            .filter(|g| self.groups[*g].front().is_some_and(|t| blobs(t) > 0))
            .collect();
        if blob_groups.is_empty() {
            return;
        }
        // dp[b]: (value, choice per blob group so far) of the best set with b blobs.
        let mut dp: Vec<Option<(u128, Vec<usize>)>> = vec![None; cap + 1];
        dp[0] = Some((0, Vec::new()));
        for &g in &blob_groups {
            // (blobs, value) of each prefix of the group, the empty one first.
            let mut prefixes = vec![(0usize, 0u128)];
            for tx in &self.groups[g] {
                let Some(tip) = self.includable_tip(tx) else {
                    break;
                };
                let (b, v) = *prefixes.last().expect("starts with the empty prefix");
                let b = b + blobs(tx);
                if b > cap {
                    break;
                }
                let gas = u128::from(tx.tx.tx().tx().gas_limit());
                prefixes.push((b, v.saturating_add(tip.saturating_mul(gas))));
            }
            let mut next: Vec<Option<(u128, Vec<usize>)>> = vec![None; cap + 1];
            for (used, cell) in dp.iter().enumerate() {
                let Some((value, choice)) = cell else {
                    continue;
                };
                for (k, (b, v)) in prefixes.iter().enumerate() {
                    if used + b > cap {
                        break;
                    }
                    let total = value.saturating_add(*v);
                    let slot = &mut next[used + b];
                    if slot.as_ref().is_none_or(|(best, _)| total > *best) {
                        let mut c = choice.clone();
                        c.push(k);
                        *slot = Some((total, c));
                    }
                }
            }
            dp = next;
        }
        let Some((_, choice)) = dp.into_iter().flatten().max_by_key(|(v, _)| *v) else {
            return;
        };
        for (&g, &k) in blob_groups.iter().zip(&choice) {
            self.groups[g].truncate(k);
        }
    }

    /// The effective tip `tx` pays in this block, if its fee caps let it in at all (fee
    /// cap over the base fee, blob fee cap over the blob base fee).
    fn paid_tip(&self, tx: &PoolTx) -> Option<u128> {
        let inner = tx.tx.tx().tx();
        let tip = inner.effective_tip_per_gas(self.budget.base_fee)?;
        let blob_ok = inner
            .max_fee_per_blob_gas()
            .is_none_or(|f| f >= self.budget.blob_base_fee);
        blob_ok.then_some(tip)
    }

    /// [`Self::paid_tip`], if it is at least the least tip (for blob txs, each of which
    /// must pay it).
    fn includable_tip(&self, tx: &PoolTx) -> Option<u128> {
        self.paid_tip(tx).filter(|tip| *tip >= self.budget.min_tip)
    }

    /// The best average tip per gas over the sender's next txs (the first `k`, for the
    /// best `k` up to [`LOOKAHEAD`] whose gas still fits the block): a cheap tx that opens
    /// the way to rich ones is worth what the run is worth, and once it is taken the rest
    /// of that run averages at least as much, so the run goes in whole. `None` when the
    /// head cannot go in (fees) or does not fit, or the key is under the least tip.
    fn key(&self, group: usize) -> Option<u128> {
        let head = self.groups[group].front()?;
        let head_tip = self.paid_tip(head)?;
        if head.tx.tx().tx().gas_limit() > self.gas_left {
            return None;
        }
        let (mut paid, mut gas, mut best) = (0u128, 0u128, head_tip);
        for tx in self.groups[group].iter().take(LOOKAHEAD) {
            let Some(tip) = self.paid_tip(tx) else {
                break;
            };
            let g = u128::from(tx.tx.tx().tx().gas_limit().max(1));
            if gas + g > u128::from(self.gas_left) {
                break;
            }
            paid = paid.saturating_add(tip.saturating_mul(g));
            gas += g;
            best = best.max(paid / gas);
        }
        (best >= self.budget.min_tip).then_some(best)
    }

    /// Queues the sender's next tx under its [`Self::key`], or drops the sender when its
    /// next tx cannot go in: its later nonces cannot go without it.
    fn push_head(&mut self, group: usize) {
        match self.key(group) {
            Some(tip) => self.heap.push(Candidate { tip, group }),
            None => self.groups[group].clear(),
        }
    }

    /// Skips the rest of the sender of the transaction yielded last (it failed execution).
    pub fn mark_invalid(&mut self, hash: &B256) {
        if let Some((last, group)) = self.last
            && last == *hash
        {
            self.groups[group].clear();
        }
    }

    /// Gives back gas the builder did not use (the iterator assumed the full gas limit).
    pub fn refund_gas(&mut self, gas: u64) {
        self.gas_left = self.gas_left.saturating_add(gas).min(self.budget.gas_limit);
    }
}

impl Iterator for BestTransactions {
    type Item = Arc<PoolTx>;

    fn next(&mut self) -> Option<Arc<PoolTx>> {
        while let Some(Candidate { tip, group }) = self.heap.pop() {
            // Keys only fall as the block fills: re-read this one, and queue it again if
            // it fell (another sender may now be worth more).
            match self.key(group) {
                None => {
                    self.groups[group].clear();
                    continue;
                }
                Some(now) if now < tip => {
                    self.heap.push(Candidate { tip: now, group });
                    continue;
                }
                Some(_) => {}
            }
            let Some(tx) = self.groups[group].pop_front() else {
                continue;
            };
            let gas = tx.tx.tx().tx().gas_limit();
            let blob_gas = tx.tx.tx().tx().blob_versioned_hashes().len() as u64 * GAS_PER_BLOB;
            if gas > self.gas_left || blob_gas > self.blob_gas_left {
                self.groups[group].clear();
                continue;
            }
            self.gas_left -= gas;
            self.blob_gas_left -= blob_gas;
            self.push_head(group);
            self.last = Some((tx.hash(), group));
            return Some(tx);
        }
        None
    }
}
