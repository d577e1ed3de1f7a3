//! The cull: a random peer dropped now and then while the peer table is full, so new
//! peers can join and the topology keeps moving (go-ethereum's `eth/dropper.go`).
//!
//! Every 3 to 7 minutes (drawn anew each time), if a direction (inbound or dialled) has
//! no free slot, one peer of a full direction is disconnected (`UselessPeer`), drawn at
//! random among those that are not spared:
//! - static peers (`--bootnodes`, `admin_addPeer`);
//! - peers connected for less than 10 minutes (time to prove themselves);
//! - the best tenth of each direction by the delivery tracker's fast figure, and the
//!   best tenth by its slow one ([`super::tracker`]): peers whose txs get mined.
//!
//! Nothing is culled before the node is synced.

use std::collections::HashSet;
use std::time::Duration;

use super::tracker::DeliveryStats;
use crate::rlpx::PeerId;

/// Shortest wait between two culls.
pub(crate) const CULL_MIN: Duration = Duration::from_secs(180);
/// Longest wait between two culls.
pub(crate) const CULL_MAX: Duration = Duration::from_secs(420);
/// A peer younger than this is never culled.
pub(crate) const YOUNG: Duration = Duration::from_secs(600);
/// The share of each direction's slots spared per tracker figure.
const SPARED_SHARE: f64 = 0.1;

/// One connected peer as the cull sees it.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub(crate) id: PeerId,
    pub(crate) inbound: bool,
    pub(crate) is_static: bool,
    pub(crate) connected_for: Duration,
}

/// The peers the tracker spares: per direction, the best ⌊10 %⌋ by each figure (a figure
/// of 0 spares no one).
pub(crate) fn spared(
    peers: &[Candidate],
    stats: &dyn Fn(&PeerId) -> DeliveryStats,
) -> HashSet<PeerId> {
    let mut out = HashSet::new();
    let figures: [fn(&DeliveryStats) -> f64; 2] = [|s| s.finalized, |s| s.included];
    for inbound in [true, false] {
        let side: Vec<&Candidate> = peers.iter().filter(|p| p.inbound == inbound).collect();
        let n = (side.len() as f64 * SPARED_SHARE) as usize;
        if n == 0 {
            continue;
        }
        for figure in figures {
            let mut scored: Vec<(f64, PeerId)> =
                side.iter().map(|p| (figure(&stats(&p.id)), p.id)).collect();
            scored.sort_by(|a, b| b.0.total_cmp(&a.0));
            out.extend(
                scored
                    .into_iter()
                    .take(n)
                    .filter(|(score, _)| *score > 0.0)
                    .map(|(_, id)| id),
            );
        }
    }
    out
}

/// The peers a cull may drop now, given each direction's limit: none unless a direction
/// is full, and then only peers of a full direction that are not spared.
pub(crate) fn droppable(
    peers: &[Candidate],
    max_inbound: usize,
    max_dialled: usize,
    stats: &dyn Fn(&PeerId) -> DeliveryStats,
) -> Vec<PeerId> {
    let inbound = peers.iter().filter(|p| p.inbound).count();
    let dialled = peers.len() - inbound;
    let (inbound_full, dialled_full) = (inbound >= max_inbound, dialled >= max_dialled);
    if !inbound_full && !dialled_full {
        return Vec::new();
    }
    let spared = spared(peers, stats);
    peers
        .iter()
        .filter(|p| {
            let full = if p.inbound {
                inbound_full
            } else {
                dialled_full
            };
            full && !p.is_static && p.connected_for >= YOUNG && !spared.contains(&p.id)
        })
        .map(|p| p.id)
        .collect()
}

/// A uniform draw in `0..n` (n > 0) from the OS's randomness.
pub(crate) fn draw(n: usize) -> usize {
    let mut b = [0u8; 8];
    let _ = getrandom::fill(&mut b);
    (u64::from_le_bytes(b) % n as u64) as usize
}

/// The next wait: uniform in [`CULL_MIN`, `CULL_MAX`].
pub(crate) fn next_wait(min: Duration, max: Duration) -> Duration {
    let span = max.saturating_sub(min).as_millis() as usize;
    if span == 0 {
        return min;
    }
    min + Duration::from_millis(draw(span) as u64)
}

impl super::Network {
    /// Culls a full peer table now and then (see the module's overview).
    pub(super) async fn cull_loop(self) {
        let (min, max) = self.inner.cfg.cull_wait;
        loop {
            tokio::time::sleep(next_wait(min, max)).await;
            if !self.inner.synced.load(std::sync::atomic::Ordering::Relaxed) {
                continue;
            }
            self.cull_once();
        }
    }

    /// One cull: drops a random droppable peer, if any; the one dropped.
    pub(super) fn cull_once(&self) -> Option<PeerId> {
        let now = std::time::Instant::now();
        let candidates: Vec<Candidate> = {
            let statics = self.inner.static_peers.lock();
            self.inner
                .peers
                .read()
                .values()
                .map(|p| Candidate {
                    id: p.info.id,
                    inbound: p.info.inbound,
                    is_static: statics.peers.contains_key(&p.info.id),
                    connected_for: now.saturating_duration_since(p.connected_at),
                })
                .collect()
        };
        let max = self.inner.cfg.max_peers;
        let max_in = super::max_inbound(max);
        let max_out = (max - max_in).max(1);
        let open = {
            let tracker = self.inner.tracker.lock();
            droppable(&candidates, max_in, max_out, &|id| {
                tracker.stats_of(id).unwrap_or_default()
            })
        };
        if open.is_empty() {
            metrics::counter!("moat_p2p_cull_skipped_total").increment(1);
            return None;
        }
        let victim = open[draw(open.len())];
        let peer = self.inner.peers.read().get(&victim).cloned()?;
        let direction = if peer.info.inbound {
            "inbound"
        } else {
            "dialled"
        };
        tracing::debug!(peer = %super::short(&victim), direction, "culling a random peer");
        metrics::counter!("moat_p2p_culled_total", "direction" => direction).increment(1);
        peer.disconnect(crate::p2p::DisconnectReason::UselessPeer);
        Some(victim)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::B512;
    use std::collections::HashMap;

    fn cand(n: u8, inbound: bool, minutes: u64) -> Candidate {
        Candidate {
            id: B512::repeat_byte(n),
            inbound,
            is_static: false,
            connected_for: Duration::from_secs(minutes * 60),
        }
    }

    #[test]
    fn a_credited_peer_survives_the_cull_that_drops_the_others() {
        // Ten inbound peers fill their ten slots; one is credited by the tracker.
        let peers: Vec<Candidate> = (1..=10).map(|n| cand(n, true, 30)).collect();
        let credited = B512::repeat_byte(4);
        let stats = |id: &PeerId| DeliveryStats {
            included: if *id == credited { 0.3 } else { 0.0 },
            finalized: 0.0,
        };
        let open = droppable(&peers, 10, 5, &stats);
        assert_eq!(open.len(), 9);
        assert!(!open.contains(&credited));
        // Culled one at a time, the others go and the credited peer stays.
        let mut left = peers.clone();
        for round in 0..9 {
            let open = droppable(&left, 10, 5, &stats);
            let victim = open[draw(open.len())];
            left.retain(|p| p.id != victim);
            // A free slot stops the cull: refill it with a fresh (young) peer.
            left.push(cand(100 + round, true, 1));
        }
        assert!(left.iter().any(|p| p.id == credited));
        assert!(
            left.iter()
                .filter(|p| p.connected_for.as_secs() > 600)
                .count()
                == 1
        );
    }

    #[test]
    fn nothing_is_culled_with_a_free_slot_nor_static_nor_young_peers() {
        let none = |_: &PeerId| DeliveryStats::default();
        let peers: Vec<Candidate> = (1..=9).map(|n| cand(n, true, 30)).collect();
        assert!(droppable(&peers, 10, 5, &none).is_empty(), "a free slot");
        let mut peers: Vec<Candidate> = (1..=10).map(|n| cand(n, true, 30)).collect();
        peers[0].is_static = true;
        peers[1].connected_for = Duration::from_secs(60);
        let open = droppable(&peers, 10, 5, &none);
        assert_eq!(open.len(), 8);
        assert!(!open.contains(&peers[0].id) && !open.contains(&peers[1].id));
        // Only the full direction is culled.
        let mut mixed: Vec<Candidate> = (1..=10).map(|n| cand(n, true, 30)).collect();
        mixed.extend((11..=12).map(|n| cand(n, false, 30)));
        let open = droppable(&mixed, 10, 5, &none);
        assert!(
            open.iter()
                .all(|id| mixed.iter().any(|p| p.id == *id && p.inbound))
        );
    }

    #[test]
    fn each_direction_spares_its_best_tenth_by_each_figure() {
        let mut peers: Vec<Candidate> = (1..=20).map(|n| cand(n, true, 30)).collect();
        peers.extend((21..=30).map(|n| cand(n, false, 30)));
        let figures: HashMap<PeerId, DeliveryStats> = (1..=30u8)
            .map(|n| {
                (
                    B512::repeat_byte(n),
                    DeliveryStats {
                        included: f64::from(n),
                        finalized: f64::from(31 - n),
                    },
                )
            })
            .collect();
        let spared = spared(&peers, &|id| figures[id]);
        let want: HashSet<PeerId> = [20u8, 19, 1, 2, 30, 21]
            .into_iter()
            .map(B512::repeat_byte)
            .collect();
        assert_eq!(spared, want);
    }

    #[test]
    fn waits_are_drawn_between_the_bounds() {
        for _ in 0..100 {
            let w = next_wait(CULL_MIN, CULL_MAX);
            assert!(w >= CULL_MIN && w <= CULL_MAX, "{w:?}");
        }
    }
}
