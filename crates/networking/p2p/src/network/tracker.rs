//! Which peers bring transactions that get mined: the delivery tracker.
//!
//! The first peer to deliver a tx the pool accepts is its deliverer (a rejected or
//! duplicate delivery credits no one, so replaying mined txs earns nothing). On each new
//! head the head's txs credit their deliverers, unless delivered at or after the block's
//! own time (a mined tx rebroadcast is not relay work); the credits feed a fast moving
//! average per peer (`included`, α = 0.05 a block). When blocks are finalized, the
//! credits recorded for them count again, once, if the block is still canonical, in a
//! slow average (`finalized`, α = 0.0001: a half-life of ~6,900 heads, about a day).
//! go-ethereum's `eth/txtracker` keeps the same two figures.
//!
//! The cull ([`super::cull`]) spares the best tenth of each direction's peers by either
//! figure, so a peer that keeps feeding the chain is not dropped at random.

use alloy_primitives::B256;
use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::rlpx::PeerId;

/// Most tx → deliverer records kept (the oldest go first).
pub(crate) const MAX_TRACKED: usize = 262_144;
/// Blocks whose credits wait for finality at most (a chain not finalizing keeps the
/// newest).
const MAX_UNFINAL_BLOCKS: usize = 8_192;
/// Smoothing of the per-block inclusion average.
const INCLUDED_ALPHA: f64 = 0.05;
/// Smoothing of the per-block finalization average.
const FINALIZED_ALPHA: f64 = 0.0001;

/// A peer's record: moving averages of its txs included and finalized per head.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct DeliveryStats {
    /// Fast: txs it delivered found in recent head blocks.
    pub(crate) included: f64,
    /// Slow: txs it delivered in blocks since finalized.
    pub(crate) finalized: f64,
}

#[derive(Debug, Clone, Copy)]
struct Delivery {
    peer: PeerId,
    /// Unix seconds at acceptance.
    at: u64,
}

/// A block as the tracker reads it.
#[derive(Debug, Clone)]
pub(crate) struct HeadBlock {
    pub(crate) number: u64,
    pub(crate) hash: B256,
    pub(crate) timestamp: u64,
    pub(crate) txs: Vec<B256>,
}

/// The tracker's state (held under the network's lock).
#[derive(Debug, Default)]
pub(crate) struct TxTracker {
    deliveries: HashMap<B256, Delivery, foldhash::fast::RandomState>,
    order: VecDeque<B256>,
    peers: HashMap<PeerId, DeliveryStats, foldhash::fast::RandomState>,
    /// Per block number: (block hash, deliverer) of each credited tx, until finalized.
    unfinal: BTreeMap<u64, Vec<(B256, PeerId)>>,
    /// The last finalized number whose credits were counted.
    last_final: u64,
}

impl TxTracker {
    /// A tracker that counts finality from `finalized` on (not from genesis).
    pub(crate) fn new(finalized: u64) -> Self {
        Self {
            last_final: finalized,
            ..Default::default()
        }
    }

    /// A peer joined: it has figures from now on.
    pub(crate) fn peer_attached(&mut self, peer: PeerId) {
        self.peers.entry(peer).or_default();
    }

    /// `peer` delivered `hashes`, which the pool accepted, at unix time `now`. The first
    /// deliverer of a tx keeps it. A peer not attached (gone already) credits nothing.
    pub(crate) fn accepted(&mut self, peer: PeerId, hashes: &[B256], now: u64) {
        if hashes.is_empty() || !self.peers.contains_key(&peer) {
            return;
        }
        for hash in hashes {
            if self.deliveries.contains_key(hash) {
                continue;
            }
            self.deliveries.insert(*hash, Delivery { peer, at: now });
            self.order.push_back(*hash);
            while self.order.len() > MAX_TRACKED {
                if let Some(old) = self.order.pop_front() {
                    self.deliveries.remove(&old);
                }
            }
        }
    }

    /// A peer left: its figures go (a reconnect starts from nothing, as in geth).
    pub(crate) fn peer_dropped(&mut self, peer: &PeerId) {
        self.peers.remove(peer);
    }

    /// A new head: its txs credit their deliverers, both averages step, and the credits
    /// of blocks newly finalized (up to `finalized`) count if `canonical(number)` still
    /// names the block they were seen in.
    pub(crate) fn on_head(
        &mut self,
        block: &HeadBlock,
        finalized: u64,
        canonical: impl Fn(u64) -> Option<B256>,
    ) {
        let mut included: HashMap<PeerId, u32, foldhash::fast::RandomState> = HashMap::default();
        let mut seen = Vec::new();
        for tx in &block.txs {
            let Some(d) = self.deliveries.get(tx) else {
                continue;
            };
            if d.at >= block.timestamp {
                continue;
            }
            *included.entry(d.peer).or_default() += 1;
            seen.push((block.hash, d.peer));
        }
        if !seen.is_empty() {
            self.unfinal.entry(block.number).or_default().extend(seen);
            while self.unfinal.len() > MAX_UNFINAL_BLOCKS {
                self.unfinal.pop_first();
            }
        }
        let mut final_credits: HashMap<PeerId, u32, foldhash::fast::RandomState> =
            HashMap::default();
        if finalized > self.last_final {
            let keep = self.unfinal.split_off(&(finalized + 1));
            let done = std::mem::replace(&mut self.unfinal, keep);
            for (number, credits) in done {
                if number <= self.last_final {
                    continue;
                }
                let Some(canon) = canonical(number) else {
                    continue;
                };
                for (hash, peer) in credits {
                    if hash == canon {
                        *final_credits.entry(peer).or_default() += 1;
                    }
                }
            }
            self.last_final = finalized;
        }
        // Every known peer's averages step, so an idle peer's decay.
        for (peer, stats) in self.peers.iter_mut() {
            let inc = f64::from(included.get(peer).copied().unwrap_or(0));
            let fin = f64::from(final_credits.get(peer).copied().unwrap_or(0));
            stats.included = (1.0 - INCLUDED_ALPHA) * stats.included + INCLUDED_ALPHA * inc;
            stats.finalized = (1.0 - FINALIZED_ALPHA) * stats.finalized + FINALIZED_ALPHA * fin;
        }
    }

    /// One peer's figures.
    pub(crate) fn stats_of(&self, peer: &PeerId) -> Option<DeliveryStats> {
        self.peers.get(peer).copied()
    }
}

/// Blocks read back from a new head toward the last one seen, at most.
const MAX_WALK: u64 = 64;

impl super::Network {
    /// Feeds the tracker each new canonical head (and the blocks between it and the last
    /// head seen, up to [`MAX_WALK`]), with the store's finalized number.
    pub(super) async fn tracker_loop(self) {
        let mut heads = self.inner.chain.subscribe_heads();
        let mut last: Option<u64> = None;
        while heads.changed().await.is_ok() {
            let head = *heads.borrow_and_update();
            let net = self.clone();
            // Store reads: on the blocking pool, not a runtime worker.
            let done = tokio::task::spawn_blocking(move || net.track_head(head.hash, last)).await;
            if let Ok(Some(n)) = done {
                last = Some(n);
            }
        }
    }

    /// Reads the head block and the ones back to `last` (newest last) and credits them;
    /// the head's number.
    fn track_head(&self, hash: B256, last: Option<u64>) -> Option<u64> {
        let chain = &self.inner.chain;
        let mut blocks = Vec::new();
        let mut next = hash;
        while let Ok(Some(block)) = chain.block(&next) {
            let number = block.header.number;
            let stop = last.is_none_or(|l| number <= l + 1) || blocks.len() as u64 >= MAX_WALK;
            next = block.header.parent_hash;
            blocks.push(HeadBlock {
                number,
                hash: block.hash,
                timestamp: block.header.timestamp,
                txs: block.transactions.iter().map(|t| t.hash()).collect(),
            });
            if stop || number == 0 {
                break;
            }
        }
        let head = blocks.first().map(|b| b.number)?;
        let store = chain.store();
        let finalized = store.finalized().ok().flatten().map_or(0, |(n, _)| n);
        let mut tracker = self.inner.tracker.lock();
        for block in blocks.iter().rev() {
            tracker.on_head(block, finalized, |n| store.canonical_hash(n).ok().flatten());
        }
        Some(head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::B512;

    fn peer(n: u8) -> PeerId {
        B512::repeat_byte(n)
    }

    fn tx(n: u32) -> B256 {
        B256::left_padding_from(&n.to_be_bytes())
    }

    fn block(number: u64, txs: &[B256]) -> HeadBlock {
        HeadBlock {
            number,
            hash: B256::repeat_byte(number as u8),
            timestamp: 1_000 + number * 12,
            txs: txs.to_vec(),
        }
    }

    #[test]
    fn a_peer_whose_txs_are_mined_is_credited_and_the_first_deliverer_keeps_the_tx() {
        let mut t = TxTracker::new(0);
        t.peer_attached(peer(1));
        t.peer_attached(peer(2));
        t.accepted(peer(1), &[tx(1), tx(2)], 900);
        t.accepted(peer(2), &[tx(1), tx(3)], 950);
        t.on_head(&block(1, &[tx(1), tx(2), tx(3), tx(9)]), 0, |_| None);
        let one = t.stats_of(&peer(1)).unwrap();
        let two = t.stats_of(&peer(2)).unwrap();
        assert!(
            (one.included - 2.0 * INCLUDED_ALPHA).abs() < 1e-12,
            "{one:?}"
        );
        assert!((two.included - INCLUDED_ALPHA).abs() < 1e-12, "{two:?}");
        assert_eq!(one.finalized, 0.0);
        // An idle block decays both.
        t.on_head(&block(2, &[]), 0, |_| None);
        assert!(t.stats_of(&peer(1)).unwrap().included < one.included);
    }

    #[test]
    fn a_tx_delivered_after_its_block_was_made_credits_no_one() {
        let mut t = TxTracker::new(0);
        t.peer_attached(peer(1));
        // Block 1's time is 1012: a delivery at that second is a rebroadcast.
        t.accepted(peer(1), &[tx(1)], 1_012);
        t.on_head(&block(1, &[tx(1)]), 0, |_| None);
        assert_eq!(t.stats_of(&peer(1)).unwrap().included, 0.0);
    }

    #[test]
    fn finality_credits_count_once_and_only_for_canonical_blocks() {
        let mut t = TxTracker::new(0);
        t.peer_attached(peer(1));
        t.accepted(peer(1), &[tx(1), tx(2)], 900);
        t.on_head(&block(1, &[tx(1)]), 0, |_| None);
        t.on_head(&block(2, &[tx(2)]), 0, |_| None);
        // Block 2 was reorged out: the canonical block 2 is another one.
        let canonical = |n: u64| match n {
            1 => Some(B256::repeat_byte(1)),
            _ => Some(B256::repeat_byte(0xee)),
        };
        t.on_head(&block(3, &[]), 2, canonical);
        let once = t.stats_of(&peer(1)).unwrap().finalized;
        assert!(once > 0.0);
        assert!((once - FINALIZED_ALPHA).abs() < 1e-9, "one credit: {once}");
        // The same finalized number again counts nothing more (only decay).
        t.on_head(&block(4, &[]), 2, canonical);
        assert!(t.stats_of(&peer(1)).unwrap().finalized < once);
    }

    #[test]
    fn a_dropped_peer_is_forgotten_and_the_record_is_bounded() {
        let mut t = TxTracker::new(0);
        t.peer_attached(peer(1));
        t.accepted(peer(1), &[tx(1)], 900);
        t.peer_dropped(&peer(1));
        assert!(t.stats_of(&peer(1)).is_none());
        // A late admission of a departed peer does not bring it back.
        t.accepted(peer(1), &[tx(5)], 900);
        assert!(t.stats_of(&peer(1)).is_none());
        t.on_head(&block(1, &[tx(1)]), 0, |_| None);
        assert!(t.peers.is_empty(), "not brought back by a block");
        let many: Vec<B256> = (0..MAX_TRACKED as u32 + 10).map(tx).collect();
        t.peer_attached(peer(2));
        t.accepted(peer(2), &many, 900);
        assert_eq!(t.deliveries.len(), MAX_TRACKED);
        assert!(!t.deliveries.contains_key(&tx(0)), "the oldest went first");
    }
}
