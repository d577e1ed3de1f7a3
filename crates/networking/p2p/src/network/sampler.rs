//! eth/72's sampler (EIP-8070, the sparse blobpool): which blob txs are fetched whole
//! and which only as the cells of this node's custody.
//!
//! A node with a custody of fewer than 64 cells of each blob (`--blobpool.custody`; the
//! consensus client's custody columns) need not pull every blob whole. For each blob tx,
//! at its first announcement by an eth/72 peer, it draws once:
//! - with probability `fetch_percent` (`--blobpool.fetchprobability`, 15 by default as
//!   go-ethereum's) it is a **provider** of that tx: body and data cells, the blobs
//!   rebuilt, pooled whole, announced with every cell;
//! - otherwise a **sampler**: it waits until [`AVAILABILITY_THRESHOLD`] distinct peers
//!   announced the tx with every cell (the blobs are out there whole), then fetches the
//!   body and only its custody cells from one of them; the tx is pooled *sampled*
//!   (`SampledCells`: verified against their cell proofs, never put into a block this
//!   node builds, served to eth/72 peers for masks within the custody, announced with
//!   the custody mask, given to the consensus client by `engine_getBlobsV4`).
//!   If the peers do not show within [`AVAILABILITY_TIMEOUT`], the tx is fetched whole
//!   from those that announced it (go-ethereum's rule: nothing is lost for want of
//!   providers).
//!
//! With a custody of 64 cells or more (the default: every cell, as go-ethereum starts
//! before its consensus client names one) every blob tx is fetched whole.
//!
//! The custody can change ([`Sampler::set_custody`]): the cells asked for are the
//! custody's at the time of asking, so a tx waiting for availability is fetched for the
//! new custody, and one whose cells are in flight is pooled with those it was asked for
//! (its request answered or timed out, never left half fetched). A custody of 64 cells
//! or more sends every waiting tx to be fetched whole at once.
//!
//! Bounds: at most [`MAX_WAITING`] txs wait for availability (further ones are fetched
//! whole), and the draws are forgotten after [`PLAN_LIFETIME`] or past [`MAX_PLANS`].
//! Only an announcement of every cell draws a tx. A custody of no cell samples nothing.

use crate::eth::{ALL_CELLS, CellMask, DATA_CELLS, mask_covers};
use crate::fetcher::Meta;
use crate::rlpx::PeerId;
use alloy_primitives::B256;
use moat_common::transaction::mask_count;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Peers that must announce a tx with every cell before a sampler fetches its cells
/// (EIP-8070's and go-ethereum's 2).
pub(crate) const AVAILABILITY_THRESHOLD: usize = 2;
/// How long a sampled tx waits for its providers before it is fetched whole
/// (go-ethereum's 2 s).
pub(crate) const AVAILABILITY_TIMEOUT: Duration = Duration::from_secs(2);
/// Most txs waiting for availability at once.
const MAX_WAITING: usize = 4096;
/// Most draws remembered.
const MAX_PLANS: usize = 65_536;
/// How long a draw is remembered.
const PLAN_LIFETIME: Duration = Duration::from_secs(600);
/// Percent of blob txs a sampler fetches whole (go-ethereum's default).
pub(crate) const DEFAULT_FETCH_PERCENT: u8 = 15;

/// How a blob tx's blob data is fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Body and data cells: the blobs whole.
    Full,
    /// Body and the custody's cells only.
    Sample,
}

/// What to do with one announcement of a blob tx by an eth/72 peer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Hand it to the fetcher as usual.
    Fetch,
    /// Not from this peer: its announced cells do not serve the plan.
    Skip,
    /// Held until the tx's providers show.
    Held,
    /// The providers showed: these announcements go to the fetcher.
    Release(Vec<(PeerId, Meta)>),
}

#[derive(Debug)]
struct Waiting {
    since: Instant,
    /// Announcers of every cell, with what they announced.
    providers: Vec<(PeerId, Meta)>,
}

/// The draws and the txs waiting for availability.
#[derive(Debug)]
pub(crate) struct Sampler {
    custody: CellMask,
    fetch_percent: u8,
    rng: u64,
    plans: HashMap<B256, (Plan, Instant), foldhash::fast::RandomState>,
    waiting: HashMap<B256, Waiting, foldhash::fast::RandomState>,
}

impl Sampler {
    pub(crate) fn new(custody: CellMask, fetch_percent: u8, seed: u64) -> Self {
        Self {
            custody,
            fetch_percent: fetch_percent.min(100),
            rng: seed | 1,
            plans: HashMap::default(),
            waiting: HashMap::default(),
        }
    }

    /// Whether this node samples at all (a custody of fewer than 64 cells).
    fn samples(&self) -> bool {
        (1..mask_count(&DATA_CELLS)).contains(&mask_count(&self.custody))
    }

    fn draw(&mut self) -> u8 {
        // xorshift64*: a fair enough coin, seeded from the node's randomness.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        ((self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) % 100) as u8
    }

    /// How `hash`'s blobs are fetched: drawn at its first announcement.
    pub(crate) fn plan(&self, hash: &B256) -> Plan {
        match self.plans.get(hash) {
            Some((plan, _)) if self.samples() => *plan,
            _ => Plan::Full,
        }
    }

    /// The mask a `GetCells` for `hash` asks for: data cells, or the custody.
    pub(crate) fn mask_for(&self, hash: &B256) -> CellMask {
        match self.plan(hash) {
            Plan::Full => DATA_CELLS,
            Plan::Sample => self.custody,
        }
    }

    /// An eth/72 peer announced blob tx `hash` with the cells `mask`.
    pub(crate) fn announced(
        &mut self,
        hash: B256,
        peer: PeerId,
        mask: CellMask,
        meta: Meta,
        now: Instant,
    ) -> Verdict {
        if !self.samples() {
            return full_from(&mask);
        }
        let plan = match self.plans.get(&hash) {
            Some((plan, _)) => *plan,
            // Only an announcer of every cell gets a tx drawn (and waiting): one that
            // holds some cells cannot serve either plan's first fetch.
            None if mask != ALL_CELLS => return Verdict::Skip,
            None => {
                self.prune(now);
                let plan = if self.draw() < self.fetch_percent || self.waiting.len() >= MAX_WAITING
                {
                    Plan::Full
                } else {
                    self.waiting.insert(
                        hash,
                        Waiting {
                            since: now,
                            providers: Vec::new(),
                        },
                    );
                    Plan::Sample
                };
                self.plans.insert(hash, (plan, now));
                plan
            }
        };
        match plan {
            Plan::Full => full_from(&mask),
            // Only announcers of every cell count (and serve): the blobs are whole there,
            // and whatever the custody is when the cells are asked for, they have it.
            Plan::Sample if mask != ALL_CELLS => Verdict::Skip,
            Plan::Sample => match self.waiting.get_mut(&hash) {
                None => Verdict::Fetch,
                Some(w) => {
                    if !w.providers.iter().any(|(p, _)| *p == peer) {
                        w.providers.push((peer, meta));
                    }
                    if w.providers.len() >= AVAILABILITY_THRESHOLD {
                        let w = self.waiting.remove(&hash).expect("just seen");
                        Verdict::Release(w.providers)
                    } else {
                        Verdict::Held
                    }
                }
            },
        }
    }

    /// Txs whose providers did not show in time: fetched whole from those that did.
    pub(crate) fn expired(&mut self, now: Instant) -> Vec<(B256, Vec<(PeerId, Meta)>)> {
        let late: Vec<B256> = self
            .waiting
            .iter()
            .filter(|(_, w)| now.saturating_duration_since(w.since) >= AVAILABILITY_TIMEOUT)
            .map(|(h, _)| *h)
            .collect();
        late.into_iter()
            .filter_map(|h| self.make_full(h, now))
            .collect()
    }

    fn make_full(&mut self, hash: B256, now: Instant) -> Option<(B256, Vec<(PeerId, Meta)>)> {
        let w = self.waiting.remove(&hash)?;
        self.plans.insert(hash, (Plan::Full, now));
        Some((hash, w.providers))
    }

    /// A new custody (the consensus client's, or the operator's). At 64 cells or more,
    /// every waiting tx is fetched whole at once: those returned.
    pub(crate) fn set_custody(
        &mut self,
        custody: CellMask,
        now: Instant,
    ) -> Vec<(B256, Vec<(PeerId, Meta)>)> {
        self.custody = custody;
        if self.samples() {
            return Vec::new();
        }
        let waiting: Vec<B256> = self.waiting.keys().copied().collect();
        waiting
            .into_iter()
            .filter_map(|h| self.make_full(h, now))
            .collect()
    }

    /// A departed peer no longer counts as a provider.
    pub(crate) fn peer_left(&mut self, peer: &PeerId) {
        for w in self.waiting.values_mut() {
            w.providers.retain(|(p, _)| p != peer);
        }
    }

    /// Txs waiting for their providers.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.len()
    }

    fn prune(&mut self, now: Instant) {
        if self.plans.len() < MAX_PLANS {
            return;
        }
        let waiting = &self.waiting;
        self.plans.retain(|h, (_, at)| {
            waiting.contains_key(h) || now.saturating_duration_since(*at) < PLAN_LIFETIME
        });
        if self.plans.len() >= MAX_PLANS {
            // Still full of fresh draws: the oldest half goes (a forgotten draw is drawn
            // again at the next announcement, no harm).
            let mut ats: Vec<Instant> = self.plans.values().map(|(_, at)| *at).collect();
            ats.sort_unstable();
            let cut = ats[ats.len() / 2];
            self.plans
                .retain(|h, (_, at)| waiting.contains_key(h) || *at > cut);
        }
    }
}

/// A tx fetched whole: only from a peer that announced its data cells.
fn full_from(mask: &CellMask) -> Verdict {
    if mask_covers(mask, &DATA_CELLS) {
        Verdict::Fetch
    } else {
        Verdict::Skip
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use moat_common::transaction::mask_of;

    fn meta() -> Meta {
        Meta {
            ty: 3,
            size: 1000,
            origin: None,
        }
    }

    fn peer(n: u8) -> PeerId {
        PeerId::repeat_byte(n)
    }

    fn custody8() -> CellMask {
        mask_of([0, 17, 33, 50, 64, 90, 101, 127])
    }

    #[test]
    fn a_full_custody_fetches_every_blob_tx_whole() {
        let mut s = Sampler::new(ALL_CELLS, 0, 7);
        let now = Instant::now();
        let h = B256::repeat_byte(1);
        assert_eq!(
            s.announced(h, peer(1), ALL_CELLS, meta(), now),
            Verdict::Fetch
        );
        assert_eq!(s.plan(&h), Plan::Full);
        assert_eq!(s.mask_for(&h), DATA_CELLS);
        // A peer holding only some cells cannot give the blobs whole.
        assert_eq!(
            s.announced(h, peer(2), custody8(), meta(), now),
            Verdict::Skip
        );
    }

    #[test]
    fn a_sampled_tx_waits_for_two_providers_then_asks_for_the_custody() {
        let mut s = Sampler::new(custody8(), 0, 7);
        let now = Instant::now();
        let h = B256::repeat_byte(1);
        assert_eq!(
            s.announced(h, peer(1), ALL_CELLS, meta(), now),
            Verdict::Held
        );
        // The same peer again, and a peer with only some cells, do not count.
        assert_eq!(
            s.announced(h, peer(1), ALL_CELLS, meta(), now),
            Verdict::Held
        );
        assert_eq!(
            s.announced(h, peer(3), custody8(), meta(), now),
            Verdict::Skip
        );
        match s.announced(h, peer(2), ALL_CELLS, meta(), now) {
            Verdict::Release(from) => {
                let peers: Vec<PeerId> = from.iter().map(|(p, _)| *p).collect();
                assert_eq!(peers, vec![peer(1), peer(2)]);
            }
            other => panic!("expected release, got {other:?}"),
        }
        assert_eq!(s.plan(&h), Plan::Sample);
        assert_eq!(s.mask_for(&h), custody8());
        // Later providers go straight to the fetcher.
        assert_eq!(
            s.announced(h, peer(4), ALL_CELLS, meta(), now),
            Verdict::Fetch
        );
        assert_eq!(s.waiting(), 0);
    }

    #[test]
    fn providers_that_do_not_show_make_the_tx_fetched_whole() {
        let mut s = Sampler::new(custody8(), 0, 7);
        let now = Instant::now();
        let h = B256::repeat_byte(1);
        assert_eq!(
            s.announced(h, peer(1), ALL_CELLS, meta(), now),
            Verdict::Held
        );
        assert!(s.expired(now + Duration::from_millis(1900)).is_empty());
        let late = s.expired(now + AVAILABILITY_TIMEOUT);
        assert_eq!(late.len(), 1);
        assert_eq!(late[0].0, h);
        assert_eq!(late[0].1.len(), 1);
        assert_eq!(s.plan(&h), Plan::Full);
        assert_eq!(s.waiting(), 0);
    }

    #[test]
    fn the_draw_fetches_about_the_given_share_whole() {
        let mut s = Sampler::new(custody8(), 15, 99);
        let now = Instant::now();
        let mut full = 0;
        for i in 0..2000u64 {
            let h = B256::left_padding_from(&i.to_be_bytes());
            if s.announced(h, peer(1), ALL_CELLS, meta(), now) == Verdict::Fetch {
                full += 1;
            }
            // Keep the waiting set small: expire as we go.
            s.expired(now + AVAILABILITY_TIMEOUT);
        }
        assert!((200..400).contains(&full), "{full} of 2000 fetched whole");
        let mut all = Sampler::new(custody8(), 100, 99);
        let h = B256::repeat_byte(9);
        assert_eq!(
            all.announced(h, peer(1), ALL_CELLS, meta(), now),
            Verdict::Fetch
        );
    }

    #[test]
    fn a_custody_change_mid_wait_is_what_gets_asked_and_a_full_one_releases_all() {
        let mut s = Sampler::new(custody8(), 0, 7);
        let now = Instant::now();
        let (a, b) = (B256::repeat_byte(1), B256::repeat_byte(2));
        assert_eq!(
            s.announced(a, peer(1), ALL_CELLS, meta(), now),
            Verdict::Held
        );
        assert_eq!(
            s.announced(b, peer(1), ALL_CELLS, meta(), now),
            Verdict::Held
        );
        let other = mask_of([1, 2, 3, 4]);
        assert!(s.set_custody(other, now).is_empty());
        assert_eq!(s.mask_for(&a), other);
        // A departed provider does not count toward the threshold.
        s.peer_left(&peer(1));
        assert_eq!(
            s.announced(a, peer(2), ALL_CELLS, meta(), now),
            Verdict::Held
        );
        // Every cell in custody: nothing waits any more, all fetched whole.
        let mut released = s.set_custody(ALL_CELLS, now);
        released.sort_by_key(|(h, _)| *h);
        assert_eq!(released.len(), 2);
        assert_eq!(released[0].1.len(), 1);
        assert!(released[1].1.is_empty());
        assert_eq!(s.plan(&a), Plan::Full);
        assert_eq!(s.waiting(), 0);
    }

    #[test]
    fn a_partial_announcement_draws_nothing_and_an_empty_custody_samples_nothing() {
        let mut s = Sampler::new(custody8(), 0, 7);
        let now = Instant::now();
        let h = B256::repeat_byte(1);
        assert_eq!(
            s.announced(h, peer(1), custody8(), meta(), now),
            Verdict::Skip
        );
        assert_eq!(
            s.announced(h, peer(1), DATA_CELLS, meta(), now),
            Verdict::Skip
        );
        assert_eq!(s.waiting(), 0);
        assert_eq!(
            s.announced(h, peer(1), ALL_CELLS, meta(), now),
            Verdict::Held
        );
        let mut none = Sampler::new([0; 16], 0, 7);
        assert_eq!(
            none.announced(h, peer(1), ALL_CELLS, meta(), now),
            Verdict::Fetch
        );
        assert_eq!(none.plan(&h), Plan::Full);
    }

    #[test]
    fn waiting_is_bounded() {
        let mut s = Sampler::new(custody8(), 0, 7);
        let now = Instant::now();
        for i in 0..MAX_WAITING as u64 + 10 {
            let h = B256::left_padding_from(&i.to_be_bytes());
            s.announced(h, peer(1), ALL_CELLS, meta(), now);
        }
        assert_eq!(s.waiting(), MAX_WAITING);
    }
}
