//! Inclusion lists (EIP-7805, FOCIL): the txs this node asks the next block to carry.
//!
//! A consensus client on an inclusion-list committee asks for a list
//! (`engine_getInclusionListV1`); the block of the next slot must carry every tx of the
//! list it could have appended (the rule is `moat_blockchain::inclusion`). The list is
//! worth something only if it holds what a builder would otherwise leave out, and it is
//! small (8 KiB of RLP), so the pool chooses:
//! - **only runs the next block could append**: a sender's pending txs from its account
//!   nonce on (the pending subpool: fee cap at the next base fee, the funds for the whole
//!   run), so no entry is dead on arrival and a sender's later tx never comes without
//!   the one before;
//! - **no blob txs** (the spec's rule: their sidecars do not travel with the list) and no
//!   private sender's txs ([`crate::PoolConfig::private`]: a list is gossiped);
//! - **no origins the budgets distrust**: a tx delivered by a peer whose standing is poor
//!   or over budget ends its sender's run there (spam the node already pays for should
//!   not be forced into blocks);
//! - **passed-over senders first**: a sender whose next tx waited through recent blocks
//!   that had the room for it at a tip they took, or that took a lower tip where it would
//!   have fitted, is what censorship looks like from the pool; such senders' runs go
//!   first, most-passed-over first, then by tip, then by age;
//! - **senders round-robin** within each tier (the passed-over, then the rest): each
//!   sender's next tx, then each one's second, so a long run does not crowd out other
//!   senders.
//!
//! go-ethereum has no list; reth takes the best tips in order and stops at the first that
//! does not fit; Nethermind samples senders at random. `moat-inclusion-bench` measures the
//! three against a builder that censors a set of senders (docs/BENCHMARKS.md).

use crate::{Pool, PoolTx, Standing, SubPool, TxOrigin};
use alloy_primitives::{Address, Bytes};
use moat_common::block::Block;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

/// Most bytes of one inclusion list, its RLP encoding whole (EIP-7805's
/// `MAX_BYTES_PER_INCLUSION_LIST`).
pub const MAX_BYTES_PER_INCLUSION_LIST: usize = 8192;
/// Recent canonical blocks remembered for the passed-over count.
pub(crate) const RECENT_BLOCKS: usize = 32;

/// What the pool remembers of a canonical block for inclusion lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinedBlock {
    /// Its number.
    pub number: u64,
    /// Its base fee per gas.
    pub base_fee: u64,
    /// Gas it left unused.
    pub gas_left: u64,
    /// The least effective tip per gas among its txs (`None`: it had none).
    pub min_tip: Option<u128>,
    /// Gas limit of the tx that paid the least tip (0 without txs).
    pub min_tip_gas: u64,
}

impl MinedBlock {
    /// The summary of `block`.
    pub fn of(block: &Block) -> Self {
        let base_fee = block.header.base_fee_per_gas.unwrap_or(0);
        let least = block
            .transactions
            .iter()
            .filter_map(|t| Some((t.tx().effective_tip_per_gas(base_fee)?, t.tx().gas_limit())))
            .min_by_key(|(tip, _)| *tip);
        Self {
            number: block.header.number,
            base_fee,
            gas_left: block.header.gas_limit.saturating_sub(block.header.gas_used),
            min_tip: least.map(|(tip, _)| tip),
            min_tip_gas: least.map_or(0, |(_, gas)| gas),
        }
    }

    /// Whether this block passed over `tx` (waiting when the block was made): the tx
    /// could pay its base fee with a tip at least the least the block took (a tip that
    /// would have paid), and either fitted in the gas the block left, or tipped more than
    /// that least tip and would have fitted in its place.
    pub fn passed_over(&self, tx: &PoolTx) -> bool {
        let Some(tip) = tx.tx.tx().tx().effective_tip_per_gas(self.base_fee) else {
            return false;
        };
        let gas = tx.tx.tx().tx().gas_limit();
        match self.min_tip {
            None => self.gas_left >= gas,
            Some(least) => {
                tip >= least
                    && (self.gas_left >= gas
                        || (tip > least && self.gas_left + self.min_tip_gas >= gas))
            }
        }
    }
}

/// The recent canonical blocks, newest last, each with the moment the pool learned of it.
#[derive(Debug, Default)]
pub(crate) struct RecentBlocks(VecDeque<(Instant, MinedBlock)>);

impl RecentBlocks {
    pub(crate) fn push(&mut self, at: Instant, block: MinedBlock) {
        // A reorg's blocks replace those of their numbers.
        self.0.retain(|(_, b)| b.number < block.number);
        self.0.push_back((at, block));
        while self.0.len() > RECENT_BLOCKS {
            self.0.pop_front();
        }
    }

    /// How many remembered blocks, made after `tx` was pooled, passed it over.
    pub(crate) fn passed_over(&self, tx: &PoolTx) -> usize {
        self.0
            .iter()
            .filter(|(at, b)| *at > tx.added_at && b.passed_over(tx))
            .count()
    }
}

/// Bytes `len` bytes take as one RLP string item.
fn rlp_item_len(len: usize) -> usize {
    alloy_rlp::Header {
        list: false,
        payload_length: len,
    }
    .length()
        + len
}

/// Bytes of an RLP list whose items take `payload` bytes.
pub fn rlp_list_len(payload: usize) -> usize {
    alloy_rlp::Header {
        list: true,
        payload_length: payload,
    }
    .length()
        + payload
}

/// Fills a list from per-sender runs taken round-robin in the given sender order: each
/// round takes every sender's next tx; a tx that does not fit ends its sender's run
/// (its later nonces need it), smaller txs of other senders may still go in. The whole
/// list's RLP stays within `max_bytes`.
pub fn round_robin(runs: &[Vec<Bytes>], max_bytes: usize) -> Vec<Bytes> {
    let mut out = Vec::new();
    round_robin_into(&mut out, &mut 0, runs, max_bytes);
    out
}

/// [`round_robin`] appending to `out`, whose items take `payload` bytes so far.
fn round_robin_into(
    out: &mut Vec<Bytes>,
    payload: &mut usize,
    runs: &[Vec<Bytes>],
    max_bytes: usize,
) {
    let mut open: Vec<bool> = vec![true; runs.len()];
    let longest = runs.iter().map(Vec::len).max().unwrap_or(0);
    for round in 0..longest {
        for (i, run) in runs.iter().enumerate() {
            if !open[i] {
                continue;
            }
            let Some(tx) = run.get(round) else {
                continue;
            };
            let item = rlp_item_len(tx.len());
            if rlp_list_len(*payload + item) > max_bytes {
                open[i] = false;
                continue;
            }
            *payload += item;
            out.push(tx.clone());
        }
    }
}

impl Pool {
    /// Remembers a new canonical block (the pool's upkeep calls it for each block it
    /// follows) for the passed-over count.
    pub fn note_mined_block(&self, block: MinedBlock) {
        self.inner.recent_blocks.lock().push(Instant::now(), block);
    }

    /// The inclusion list this node proposes (`engine_getInclusionListV1`): the 2718
    /// envelopes, at most `max_bytes` of RLP (see the module's overview for the choice).
    pub fn inclusion_list(&self, max_bytes: usize) -> Vec<Bytes> {
        let now = Instant::now();
        let content = self.content();
        let recent = self.inner.recent_blocks.lock();
        let base_fee = self.head().base_fee;
        // Per sender: its appendable run (from its account nonce, trusted, not blob or
        // private), with the sort key of its first tx.
        let mut senders: Vec<(usize, u128, Instant, Address, Vec<Bytes>)> = Vec::new();
        for (sender, txs) in &content {
            let mut run = Vec::new();
            let mut first: Option<&Arc<PoolTx>> = None;
            for (tx, sub) in txs {
                if *sub != SubPool::Pending
                    || tx.is_blob()
                    || !self.is_shareable(tx)
                    || !self.trusted_origin(tx.origin, now)
                {
                    break;
                }
                first.get_or_insert(tx);
                run.push(Bytes::from(tx.tx.encoded_2718()));
            }
            let Some(first) = first else {
                continue;
            };
            let passed = recent.passed_over(first);
            let tip = first
                .tx
                .tx()
                .tx()
                .effective_tip_per_gas(base_fee)
                .unwrap_or(0);
            senders.push((passed, tip, first.added_at, *sender, run));
        }
        drop(recent);
        senders.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then(b.1.cmp(&a.1))
                .then(a.2.cmp(&b.2))
                .then(a.3.cmp(&b.3))
        });
        // Passed-over senders' runs first (round-robin among them), then the others'.
        let (passed, others): (Vec<_>, Vec<_>) = senders.into_iter().partition(|s| s.0 > 0);
        let mut out = Vec::new();
        let mut payload = 0;
        for tier in [passed, others] {
            let runs: Vec<Vec<Bytes>> = tier.into_iter().map(|s| s.4).collect();
            round_robin_into(&mut out, &mut payload, &runs, max_bytes);
        }
        out
    }

    /// Whether txs from `origin` may go in an inclusion list: not a peer's whose budget
    /// standing is poor or over budget.
    fn trusted_origin(&self, origin: TxOrigin, now: Instant) -> bool {
        match origin {
            TxOrigin::Peer(id) => match self.inner.budgets.standing(&id, now) {
                Standing::PeerPoor | Standing::PeerOverBudget => false,
                Standing::PeerProven
                | Standing::PeerNew
                | Standing::LocalRpc
                | Standing::LocalRpcPoor
                | Standing::Node => true,
            },
            TxOrigin::Local | TxOrigin::Reorg | TxOrigin::Journal | TxOrigin::Stored => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_takes_each_senders_next_tx_in_turn_within_the_bytes() {
        let tx = |n: u8, len: usize| Bytes::from(vec![n; len]);
        let runs = vec![
            vec![tx(1, 100), tx(2, 100), tx(3, 100)],
            vec![tx(4, 100)],
            vec![tx(5, 100), tx(6, 100)],
        ];
        let all = round_robin(&runs, MAX_BYTES_PER_INCLUSION_LIST);
        let order: Vec<u8> = all.iter().map(|t| t[0]).collect();
        assert_eq!(order, vec![1, 4, 5, 2, 6, 3]);
        // 103 bytes an item, 3 for the list's header: two items fit in 209.
        let two = round_robin(&runs, 209);
        assert_eq!(two.iter().map(|t| t[0]).collect::<Vec<_>>(), vec![1, 4]);
        // A tx that does not fit ends its sender's run; a smaller one of another fits.
        let runs = vec![vec![tx(1, 300), tx(2, 10)], vec![tx(3, 10)]];
        let some = round_robin(&runs, 100);
        assert_eq!(some.iter().map(|t| t[0]).collect::<Vec<_>>(), vec![3]);
        let payload: usize = some.iter().map(|t| rlp_item_len(t.len())).sum();
        assert!(rlp_list_len(payload) <= 100);
    }
}
