//! The reorder buffer for blob transactions whose nonce is ahead of their sender's next.
//!
//! Blob transactions must not leave a nonce gap in the pool (a gapped blob tx would hold
//! its sidecar, hundreds of kilobytes, for a block that may never come). But blob txs
//! travel separately and arrive out of order: nonce n+1 from one peer before nonce n from
//! another. The buffer holds such a tx for a short while ([`GappedLimits::lifetime`]) and
//! hands it back to admission once the gap fills:
//!
//! ```text
//!  stage 8 says "nonce gap" ─▶ buffer (no KZG yet: the sidecar is only checked in
//!                               structure; ECDSA and the stateful checks were paid)
//!  a tx of the same sender is inserted, or a block moves its nonce
//!                             ─▶ take_ready: the run from the sender's next nonce
//!                             ─▶ admission again (KZG now, charged to the tx's origin)
//!  lifetime passed, or its nonce was mined ─▶ dropped
//! ```
//!
//! The buffer cannot be used to pin memory or CPU: it holds at most `total` txs, each
//! sender at most `log10(nonce + 1)` of them (go-ethereum's allowance: an account with
//! history may reorder a few, a fresh spam account none), each origin (a peer, or RPC)
//! at most `per_origin`; a tx costs no KZG until its gap fills, and when the buffer is full
//! the newcomer is refused, so what waits is not displaced by a flood.

use crate::{FastMap as HashMap, PoolTx, TxOrigin};
use alloy_primitives::{Address, B256};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The buffer's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GappedLimits {
    /// Txs held at once in all (go-ethereum: 128).
    pub total: usize,
    /// Txs one origin (a peer, or all RPC clients together) may have held at once.
    pub per_origin: usize,
    /// How long a tx waits for its gap to fill (go-ethereum: one minute).
    pub lifetime: Duration,
}

impl Default for GappedLimits {
    fn default() -> Self {
        Self {
            total: 128,
            per_origin: 16,
            lifetime: Duration::from_secs(60),
        }
    }
}

/// Why the buffer did not take a tx.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The sender's allowance (`log10(nonce + 1)`) is used up, or it is zero.
    SenderAllowance,
    /// The origin holds its share already.
    OriginFull,
    /// The buffer is full.
    Full,
    /// A tx of the same sender and nonce waits already.
    Duplicate,
}

struct Held {
    tx: Arc<PoolTx>,
    since: Instant,
}

/// Gapped blob txs by sender, in nonce order.
#[derive(Default)]
pub(crate) struct Gapped {
    limits: GappedLimits,
    by_sender: HashMap<Address, Vec<Held>>,
    by_hash: HashMap<B256, Address>,
    per_origin: HashMap<TxOrigin, usize>,
}

impl Gapped {
    pub(crate) fn new(limits: GappedLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// How many txs wait.
    pub(crate) fn len(&self) -> usize {
        self.by_hash.len()
    }

    /// Whether `sender` has txs waiting here.
    pub(crate) fn holds(&self, sender: &Address) -> bool {
        self.by_sender.contains_key(sender)
    }

    /// Whether `hash` waits here.
    pub(crate) fn contains(&self, hash: &B256) -> bool {
        self.by_hash.contains_key(hash)
    }

    /// How many gapped txs a sender whose next nonce is `state_nonce` may have held:
    /// `⌊log10(nonce + 1)⌋`, as go-ethereum allows.
    pub(crate) fn allowance(state_nonce: u64) -> usize {
        state_nonce.saturating_add(1).ilog10() as usize
    }

    /// Holds `tx` (its sender's next nonce is `state_nonce`), or says why not.
    pub(crate) fn insert(
        &mut self,
        tx: Arc<PoolTx>,
        state_nonce: u64,
        now: Instant,
    ) -> Result<(), Refused> {
        let held = self.by_sender.get(&tx.sender).map_or(0, Vec::len);
        if held >= Self::allowance(state_nonce) {
            return Err(Refused::SenderAllowance);
        }
        if self.len() >= self.limits.total {
            return Err(Refused::Full);
        }
        let origin_count = self.per_origin.get(&tx.origin).copied().unwrap_or(0);
        if origin_count >= self.limits.per_origin {
            return Err(Refused::OriginFull);
        }
        let list = self.by_sender.entry(tx.sender).or_default();
        let nonce = tx.nonce();
        let at = match list.binary_search_by_key(&nonce, |h| h.tx.nonce()) {
            Ok(_) => return Err(Refused::Duplicate),
            Err(at) => at,
        };
        self.by_hash.insert(tx.hash(), tx.sender);
        *self.per_origin.entry(tx.origin).or_default() += 1;
        list.insert(at, Held { tx, since: now });
        Ok(())
    }

    /// Takes `sender`'s txs that no longer wait: those below `next_nonce` (mined or
    /// replaced: dropped) and the run from `next_nonce` up with no gap (returned, in
    /// nonce order, for admission). What lies beyond the next gap stays.
    pub(crate) fn take_ready(&mut self, sender: &Address, next_nonce: u64) -> Vec<Arc<PoolTx>> {
        let Some(list) = self.by_sender.get_mut(sender) else {
            return Vec::new();
        };
        let mut expected = next_nonce;
        let mut split = 0;
        let mut ready = Vec::new();
        for h in list.iter() {
            let n = h.tx.nonce();
            if n < next_nonce {
                split += 1;
            } else if n == expected {
                expected += 1;
                split += 1;
                ready.push(Arc::clone(&h.tx));
            } else {
                break;
            }
        }
        let gone: Vec<Held> = list.drain(..split).collect();
        if list.is_empty() {
            self.by_sender.remove(sender);
        }
        for h in &gone {
            self.forget(&h.tx);
        }
        ready
    }

    /// Drops what has waited past the lifetime; returns how many.
    pub(crate) fn expire(&mut self, now: Instant) -> usize {
        let lifetime = self.limits.lifetime;
        let mut gone = Vec::new();
        self.by_sender.retain(|_, list| {
            list.retain(|h| {
                let keep = now.saturating_duration_since(h.since) < lifetime;
                if !keep {
                    gone.push(Arc::clone(&h.tx));
                }
                keep
            });
            !list.is_empty()
        });
        for tx in &gone {
            self.forget(tx);
        }
        gone.len()
    }

    /// The senders with txs waiting (for the pool to check against new heads).
    pub(crate) fn senders(&self) -> Vec<Address> {
        self.by_sender.keys().copied().collect()
    }

    fn forget(&mut self, tx: &PoolTx) {
        self.by_hash.remove(&tx.hash());
        if let Some(n) = self.per_origin.get_mut(&tx.origin) {
            *n -= 1;
            if *n == 0 {
                self.per_origin.remove(&tx.origin);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::{B512, U256};
    use moat_common::testing::sample_signed;
    use moat_common::transaction::{PooledTransaction, TxType};
    use moat_crypto::secp::Signer;

    fn held(signer: &Signer, nonce: u64, origin: TxOrigin) -> Arc<PoolTx> {
        let tx = sample_signed(TxType::Eip1559, nonce, signer);
        Arc::new(PoolTx {
            tx: PooledTransaction::new(tx, None),
            sender: signer.address(),
            origin,
            added_at: Instant::now(),
            authorities: Vec::new(),
            cost: U256::ZERO,
        })
    }

    #[test]
    fn the_allowance_grows_with_the_senders_history() {
        assert_eq!(
            Gapped::allowance(0),
            0,
            "a fresh account may not leave gaps"
        );
        assert_eq!(Gapped::allowance(8), 0);
        assert_eq!(Gapped::allowance(9), 1);
        assert_eq!(Gapped::allowance(99), 2);
        assert_eq!(Gapped::allowance(u64::MAX), 19);
    }

    #[test]
    fn a_filled_gap_releases_the_run_and_drops_what_was_mined() {
        let s = Signer::from_seed(7);
        let now = Instant::now();
        let mut g = Gapped::new(GappedLimits::default());
        // Next nonce 100: allowance 2.
        for n in [103, 102] {
            g.insert(held(&s, n, TxOrigin::Local), 100, now).unwrap();
        }
        assert_eq!(
            g.insert(held(&s, 105, TxOrigin::Local), 100, now),
            Err(Refused::SenderAllowance)
        );
        assert!(
            g.take_ready(&s.address(), 101).is_empty(),
            "102 still behind a gap"
        );
        let ready = g.take_ready(&s.address(), 102);
        assert_eq!(
            ready.iter().map(|t| t.nonce()).collect::<Vec<_>>(),
            [102, 103]
        );
        assert_eq!(g.len(), 0);
        // Mined meanwhile: dropped, not returned.
        g.insert(held(&s, 110, TxOrigin::Local), 100, now).unwrap();
        assert!(g.take_ready(&s.address(), 111).is_empty());
        assert_eq!(g.len(), 0);
    }

    #[test]
    fn bounds_hold_per_origin_and_in_all_and_the_old_wait_is_kept() {
        let now = Instant::now();
        let peer = TxOrigin::Peer(B512::repeat_byte(1));
        let limits = GappedLimits {
            total: 3,
            per_origin: 2,
            lifetime: Duration::from_secs(60),
        };
        let mut g = Gapped::new(limits);
        let senders: Vec<Signer> = (1..=4).map(Signer::from_seed).collect();
        g.insert(held(&senders[0], 12, peer), 10, now).unwrap();
        g.insert(held(&senders[1], 12, peer), 10, now).unwrap();
        assert_eq!(
            g.insert(held(&senders[2], 12, peer), 10, now),
            Err(Refused::OriginFull)
        );
        g.insert(held(&senders[2], 12, TxOrigin::Local), 10, now)
            .unwrap();
        assert_eq!(
            g.insert(held(&senders[3], 12, TxOrigin::Local), 10, now),
            Err(Refused::Full),
            "a full buffer refuses the newcomer"
        );
        assert_eq!(
            g.insert(held(&senders[0], 12, TxOrigin::Local), 100, now),
            Err(Refused::Full)
        );
    }

    #[test]
    fn txs_past_their_lifetime_are_dropped() {
        let s = Signer::from_seed(9);
        let t0 = Instant::now();
        let mut g = Gapped::new(GappedLimits::default());
        g.insert(held(&s, 50, TxOrigin::Local), 20, t0).unwrap();
        assert_eq!(g.expire(t0 + Duration::from_secs(59)), 0);
        assert_eq!(g.expire(t0 + Duration::from_secs(60)), 1);
        assert!(g.senders().is_empty());
        assert!(!g.contains(&held(&s, 50, TxOrigin::Local).hash()));
    }
}
