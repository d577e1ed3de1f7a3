//! Broadcast: the pool's new pending transactions gossiped whole to ⌈√peers⌉ peers
//! (chosen per sender, [`super::choice`]) and by hash to the rest, and the pending pool
//! announced to a new peer.

use crate::eth::{Announcement, EthMessage};
use alloy_primitives::{Address, B256, Bytes};
use moat_common::transaction::SidecarVersion;
use moat_mempool::TxOrigin;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use super::{MAX_BROADCAST_TX_SIZE, Network, Peer, choice};
use crate::rlpx::PeerId;

/// Most hashes in one announcement message we send.
const MAX_ANNOUNCE: usize = 4096;
/// A `Transactions` message we send stops growing past this many bytes.
const MAX_TXS_MESSAGE: usize = 100 * 1024;

/// Appends `tx` to an announcement for `peer`, with its sender and nonce on eth/73.
fn push(ann: &mut Announcement, peer: &Peer, tx: &moat_mempool::PoolTx, size: u32) {
    let ty = tx.tx.tx_type() as u8;
    if peer.framing.version >= crate::eth::ETH73 {
        ann.push_with_origin(ty, size, tx.hash(), tx.sender, tx.nonce());
    } else {
        ann.push(ty, size, tx.hash());
    }
}

impl Network {
    pub(super) fn announce_pool_to(&self, peer: &Arc<Peer>) {
        // One look at the pool (one lock), not three per transaction: a peer that
        // reconnects again and again would otherwise hold the pool's lock against
        // admission for the whole pool each time.
        let content = self.inner.pool.content();
        let mut ann = Announcement::default();
        for (tx, sub) in content.iter().flat_map(|(_, txs)| txs) {
            // Pending non-blob txs, as geth does; blob txs travel by fresh announcements.
            if tx.is_blob()
                || *sub != moat_mempool::SubPool::Pending
                || !self.inner.pool.is_shareable(tx)
            {
                continue;
            }
            push(&mut ann, peer, tx, tx.size() as u32);
            if ann.len() >= MAX_ANNOUNCE {
                self.announce_new(peer, std::mem::take(&mut ann));
            }
        }
        if !ann.is_empty() {
            self.announce_new(peer, ann);
        }
    }

    /// One announcement of the pool to a new peer: its hashes made known (one short
    /// lock per message: the broadcaster takes the same lock for every tx it gossips),
    /// then sent.
    fn announce_new(&self, peer: &Peer, ann: Announcement) {
        {
            let mut known = peer.known.lock();
            for hash in &ann.hashes {
                known.insert(*hash);
            }
        }
        peer.send(
            peer.framing
                .eth(&EthMessage::NewPooledTransactionHashes(ann)),
        );
    }

    /// Gossips new pending transactions: whole to the sender's ⌈√peers⌉ chosen peers
    /// (small non-blob ones; the chosen peer that has it already gets nothing),
    /// by hash to the rest. A peer is never sent a hash it has or was sent.
    pub(super) async fn broadcast_loop(self) {
        let mut events = self.inner.pool.subscribe_pending();
        loop {
            let first = match events.recv().await {
                Ok(h) => h,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    metrics::counter!("moat_p2p_broadcast_lagged_total").increment(n);
                    continue;
                }
                Err(_) => return,
            };
            let mut batch = vec![first];
            while batch.len() < 4096 {
                match events.try_recv() {
                    Ok(h) => batch.push(h),
                    Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => continue,
                    Err(_) => break,
                }
            }
            self.broadcast(&batch);
        }
    }

    pub(super) fn broadcast(&self, hashes: &[B256]) {
        let peers: Vec<Arc<Peer>> = self.inner.peers.read().values().cloned().collect();
        if peers.is_empty() {
            return;
        }
        let ids: Vec<PeerId> = peers.iter().map(|p| p.info.id).collect();
        let key = self.inner.broadcast_key.current(Instant::now());
        // One choice per sender in the batch: a sender's run of txs costs one scoring.
        let mut choices: HashMap<Address, Vec<bool>, foldhash::fast::RandomState> =
            HashMap::default();
        let mut full: Vec<Vec<Bytes>> = vec![Vec::new(); peers.len()];
        let mut anns: Vec<Announcement> = vec![Announcement::default(); peers.len()];
        // eth/72 announcements of sampled blob txs, one per custody mask they hold.
        let mut sampled: Vec<Vec<Announcement>> = vec![Vec::new(); peers.len()];
        for hash in hashes {
            let Some(tx) = self.inner.pool.get_shareable(hash) else {
                continue;
            };
            let whole = !tx.is_blob() && tx.size() <= MAX_BROADCAST_TX_SIZE;
            let env = whole.then(|| Bytes::from(tx.tx.encoded_2718()));
            let chosen = whole.then(|| {
                choices.entry(tx.sender).or_insert_with(|| {
                    let mut set = vec![false; ids.len()];
                    for i in choice::full_peers(&key, &self.inner.local.id, &ids, &tx.sender) {
                        set[i] = true;
                    }
                    set
                })
            });
            for (i, p) in peers.iter().enumerate() {
                if TxOrigin::Peer(p.info.id) == tx.origin {
                    continue;
                }
                // A peer whose set is locked right now (its own work inserting into it,
                // maybe at low priority in the untrusted lane) is sent the tx without
                // the check rather than made to hold up gossip to everyone: at worst it
                // hears of a tx twice.
                let fresh = match p.known.try_lock() {
                    Some(mut known) => known.insert(*hash),
                    None => true,
                };
                if !fresh {
                    continue;
                }
                match (&env, &chosen) {
                    (Some(e), Some(set)) if set[i] => full[i].push(e.clone()),
                    _ if tx.is_blob() && p.framing.version >= crate::eth::ETH72 => {
                        // eth/72 peers take cell-proof sidecars only, announced with the
                        // cells held (every one, or a sampled tx's custody) and sized
                        // without the blobs.
                        if let Some(s) = tx.tx.sidecar()
                            && s.version == SidecarVersion::V1
                        {
                            let size = tx.tx.size_without_blobs() as u32;
                            let held = s.held_cells();
                            let ann = if held == super::cells::OUR_MASK {
                                &mut anns[i]
                            } else {
                                let at = match sampled[i].iter().position(|a| a.mask == Some(held))
                                {
                                    Some(at) => at,
                                    None => {
                                        sampled[i].push(Announcement {
                                            mask: Some(held),
                                            ..Announcement::default()
                                        });
                                        sampled[i].len() - 1
                                    }
                                };
                                &mut sampled[i][at]
                            };
                            push(ann, p, &tx, size);
                            ann.mask = Some(held);
                        }
                    }
                    // Peers before eth/72 take blobs whole: a sampled tx is not for them.
                    _ if !tx.tx.has_whole_blobs() => {}
                    _ => push(&mut anns[i], p, &tx, tx.size() as u32),
                }
            }
        }
        for (i, p) in peers.iter().enumerate() {
            let mut batch = Vec::new();
            let mut bytes = 0;
            for e in full[i].drain(..) {
                if bytes + e.len() > MAX_TXS_MESSAGE && !batch.is_empty() {
                    self.send_or_count(p, EthMessage::Transactions(std::mem::take(&mut batch)));
                    bytes = 0;
                }
                bytes += e.len();
                batch.push(e);
            }
            if !batch.is_empty() {
                self.send_or_count(p, EthMessage::Transactions(batch));
            }
            let mut all = vec![std::mem::take(&mut anns[i])];
            all.append(&mut sampled[i]);
            for ann in all {
                for chunk in 0..ann.len().div_ceil(MAX_ANNOUNCE) {
                    let r = chunk * MAX_ANNOUNCE..((chunk + 1) * MAX_ANNOUNCE).min(ann.len());
                    self.send_or_count(p, EthMessage::NewPooledTransactionHashes(ann.slice(r)));
                }
            }
        }
    }

    pub(super) fn send_or_count(&self, p: &Peer, msg: EthMessage) {
        if !p.send(p.framing.eth(&msg)) {
            metrics::counter!("moat_p2p_broadcasts_dropped_total").increment(1);
        }
    }
}
