//! The best-transactions iterator block building reads.
//!
//! It works on a snapshot of the pending subpool taken under the lock, so the builder
//! never holds the pool. Order: highest effective tip at the block's base fee first, each
//! sender's transactions in nonce order. Gas and blob gas budgets are respected: a
//! transaction that does not fit is skipped together with the rest of its sender (its
//! later nonces cannot go without it), as is a sender whose transaction the builder
//! marks invalid.

use super::PoolTx;
use alloy_primitives::B256;
use moat_common::constants::GAS_PER_BLOB;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

struct Candidate {
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
    pub base_fee: u64,
    pub blob_base_fee: u128,
    pub gas_limit: u64,
    /// Max blob gas of the block (blob count × 2^17).
    pub max_blob_gas: u64,
    /// Least effective tip a transaction must pay to be included (geth's
    /// `--miner.gasprice`); a sender whose next tx pays less is skipped.
    pub min_tip: u128,
}

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
        let mut this = Self {
            groups: groups.into_iter().map(VecDeque::from).collect(),
            heap: BinaryHeap::new(),
            budget,
            gas_left: budget.gas_limit,
            blob_gas_left: budget.max_blob_gas,
            last: None,
        };
        for g in 0..this.groups.len() {
            this.push_head(g);
        }
        this
    }

    fn push_head(&mut self, group: usize) {
        let Some(tx) = self.groups[group].front() else {
            return;
        };
        let inner = tx.tx.tx().tx();
        match inner.effective_tip_per_gas(self.budget.base_fee) {
            Some(tip)
                if tip >= self.budget.min_tip
                    && inner
                        .max_fee_per_blob_gas()
                        .is_none_or(|f| f >= self.budget.blob_base_fee) =>
            {
                self.heap.push(Candidate { tip, group });
            }
            // Under the block's fees or the least tip: neither it nor its sender's later
            // txs can go.
            _ => self.groups[group].clear(),
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
        while let Some(Candidate { group, .. }) = self.heap.pop() {
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
