//! Which ⌈√peers⌉ peers get a transaction whole: a keyed choice per sender.
//!
//! Each peer is scored with SipHash-2-4 under a secret key of this node over
//! `(our node id, the peer's node id, the tx's sender)`, and the ⌈√n⌉ lowest scores get
//! the sender's txs in full (go-ethereum's `broadcastChoice`). So one sender's txs keep
//! flowing along the same edges (no nonce gaps from txs racing along different paths),
//! the choice differs from node to node, and a spy cannot place itself to be chosen
//! for a sender it targets: without the key it cannot predict the scores. The key is
//! drawn at start and drawn again every [`ROTATE_EVERY`], so a spy that learned the
//! choice by watching keeps it for an hour at most.

use alloy_primitives::Address;
use parking_lot::Mutex;
use siphasher::sip::SipHasher24;
use std::hash::Hasher;
use std::time::{Duration, Instant};

use crate::rlpx::PeerId;

/// How long one broadcast key is used before a new one is drawn.
pub(crate) const ROTATE_EVERY: Duration = Duration::from_secs(3600);

/// The node's secret broadcast key, redrawn every [`ROTATE_EVERY`].
#[derive(Debug)]
pub(crate) struct BroadcastKey {
    state: Mutex<([u8; 16], Instant)>,
}

impl BroadcastKey {
    /// A fresh random key.
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new((random_key(), Instant::now())),
        }
    }

    /// The key to use now; draws a new one once the current one is [`ROTATE_EVERY`] old.
    pub(crate) fn current(&self, now: Instant) -> [u8; 16] {
        let mut state = self.state.lock();
        if now.saturating_duration_since(state.1) >= ROTATE_EVERY {
            *state = (random_key(), now);
            metrics::counter!("moat_p2p_broadcast_key_rotations_total").increment(1);
        }
        state.0
    }
}

fn random_key() -> [u8; 16] {
    let mut key = [0u8; 16];
    // The OS's randomness; should it fail, the key stays zero for this hour (the choice
    // is still spread per sender, only predictable).
    if getrandom::fill(&mut key).is_err() {
        tracing::warn!("no OS randomness for the broadcast key");
    }
    key
}

/// The indexes into `peers` of the ⌈√n⌉ peers that get `sender`'s txs whole, in
/// ascending score order. Deterministic for one key, node id, peer set and sender.
pub(crate) fn full_peers(
    key: &[u8; 16],
    local: &PeerId,
    peers: &[PeerId],
    sender: &Address,
) -> Vec<usize> {
    let n = (peers.len() as f64).sqrt().ceil() as usize;
    let mut scored: Vec<(u64, usize)> = peers
        .iter()
        .enumerate()
        .map(|(i, peer)| {
            let mut h = SipHasher24::new_with_key(key);
            h.write(local.as_slice());
            h.write(peer.as_slice());
            h.write(sender.as_slice());
            (h.finish(), i)
        })
        .collect();
    scored.sort_unstable();
    scored.into_iter().take(n).map(|(_, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::B512;

    fn ids(n: u8) -> Vec<PeerId> {
        (0..n).map(|i| B512::repeat_byte(i + 1)).collect()
    }

    fn sender(i: u32) -> Address {
        let mut a = [0u8; 20];
        a[..4].copy_from_slice(&i.to_be_bytes());
        Address::from(a)
    }

    #[test]
    fn a_senders_full_peers_are_the_same_every_time_and_number_the_root_of_the_peers() {
        let peers = ids(25);
        let local = B512::repeat_byte(0xaa);
        let key = [7u8; 16];
        for s in 0..50 {
            let first = full_peers(&key, &local, &peers, &sender(s));
            assert_eq!(first.len(), 5);
            assert_eq!(first, full_peers(&key, &local, &peers, &sender(s)));
        }
        // The choice goes with the peer, not its place in the table.
        let mut shuffled = peers.clone();
        shuffled.reverse();
        let a: Vec<PeerId> = full_peers(&key, &local, &peers, &sender(1))
            .into_iter()
            .map(|i| peers[i])
            .collect();
        let mut b: Vec<PeerId> = full_peers(&key, &local, &shuffled, &sender(1))
            .into_iter()
            .map(|i| shuffled[i])
            .collect();
        let mut a2 = a.clone();
        a2.sort();
        b.sort();
        assert_eq!(a2, b);
    }

    #[test]
    fn the_choice_differs_between_nodes_keys_and_senders() {
        let peers = ids(16);
        let choices = |key: [u8; 16], local: PeerId| -> Vec<Vec<usize>> {
            (0..64)
                .map(|s| full_peers(&key, &local, &peers, &sender(s)))
                .collect()
        };
        let base = choices([1; 16], B512::repeat_byte(0xaa));
        let other_node = choices([1; 16], B512::repeat_byte(0xbb));
        let other_key = choices([2; 16], B512::repeat_byte(0xaa));
        // Most senders get another set of peers on another node or under another key.
        let differ =
            |x: &[Vec<usize>], y: &[Vec<usize>]| x.iter().zip(y).filter(|(a, b)| a != b).count();
        assert!(
            differ(&base, &other_node) > 48,
            "{}",
            differ(&base, &other_node)
        );
        assert!(
            differ(&base, &other_key) > 48,
            "{}",
            differ(&base, &other_key)
        );
        // And senders are spread over the peers: every peer is chosen for some sender.
        let mut chosen = [false; 16];
        for set in &base {
            for &i in set {
                chosen[i] = true;
            }
        }
        assert!(chosen.iter().all(|c| *c));
        // Not the first √n in table order for everyone, as before.
        assert!(base.iter().any(|set| set.iter().any(|&i| i >= 4)));
    }

    #[test]
    fn the_key_rotates_after_an_hour() {
        let key = BroadcastKey::new();
        let start = Instant::now();
        let k1 = key.current(start);
        assert_eq!(k1, key.current(start + Duration::from_secs(60)));
        let k2 = key.current(start + ROTATE_EVERY + Duration::from_secs(1));
        assert_ne!(k1, k2);
        assert_eq!(
            k2,
            key.current(start + ROTATE_EVERY + Duration::from_secs(2))
        );
    }

    #[test]
    fn no_peers_no_choice_and_one_peer_gets_everything() {
        let local = B512::repeat_byte(0xaa);
        assert!(full_peers(&[0; 16], &local, &[], &sender(1)).is_empty());
        assert_eq!(full_peers(&[0; 16], &local, &ids(1), &sender(1)), vec![0]);
    }
}
