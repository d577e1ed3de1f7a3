//! The transaction fetcher: turns peers' announcements into `GetPooledTransactions`
//! requests and checks what comes back against what was announced.
//!
//! ```text
//! announce(peer, hashes) ──▶ unknown to the pool? ──▶ hash waits, with its announcers
//!                           (one being admitted from a delivery and still tracked here
//!                           gains the announcer too: it is asked if that delivery fails)
//! schedule()            ──▶ per idle peer: ≤256 hashes / ≤128 KiB it announced ─▶ request
//! deliver(peer, reply)  ──▶ subsequence of the request? type and size as announced?
//!                           yes: hand to admission (hash "importing")   no: peer fault
//! admitted / rejected   ──▶ settled(hash): forgotten
//! peer fault on a tx    ──▶ peer_fault(peer, hash): that announcer is dropped, the hash
//!                           is asked of the next one
//! expire(now)           ──▶ requests older than the timeout: their hashes go to the next
//!                           announcer, the slow peer is no longer asked for them
//! ```
//!
//! An announcer that does not deliver must not hold up the ones that do:
//! - each peer keeps a record of hashes it was asked for and did not deliver (timed out
//!   or left out of its reply) against those it delivered; a waiting hash goes to its
//!   announcer with the best record, so a hash a never-delivering peer announced first
//!   is asked of an honest announcer as soon as the first peer has failed once;
//! - a peer that leaves hands its record to its IPv4 /24 (IPv6 /64), as its admission
//!   budget does: a new identity from there starts with that record, not a clean one
//!   ([`Fetcher::attach_peer`]);
//! - when the fetcher tracks as many hashes as it may, a peer announcing less than the
//!   biggest announcer takes the place of one of that announcer's waiting hashes, so a
//!   crowd of peers announcing hashes they never deliver cannot crowd out an honest
//!   peer's announcements.
//!
//! State is plain data with no I/O; the network drives it under one mutex.

use crate::rlpx::PeerId;
use alloy_primitives::{Address, B256};
use moat_mempool::budget::Subnet;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Limits of the fetcher (geth's values).
#[derive(Debug, Clone, Copy)]
pub struct FetcherConfig {
    /// Announced hashes a peer may have waiting at once; more are dropped.
    pub max_announces_per_peer: usize,
    /// Hashes per request.
    pub max_request_hashes: usize,
    /// Announced bytes per request (one oversized tx still goes alone).
    pub max_request_bytes: usize,
    /// How long a peer has to answer.
    pub timeout: Duration,
    /// Hashes waiting in total; announcements beyond it are dropped.
    pub max_tracked: usize,
}

impl Default for FetcherConfig {
    fn default() -> Self {
        Self {
            max_announces_per_peer: 4096,
            max_request_hashes: 256,
            max_request_bytes: 128 * 1024,
            timeout: Duration::from_secs(5),
            max_tracked: 64 * 1024,
        }
    }
}

/// What a peer said about a hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// The announced EIP-2718 transaction type.
    pub ty: u8,
    /// The announced encoded size, in bytes.
    pub size: u32,
    /// eth/73 (EIP-8077): the announced sender and nonce, checked on delivery.
    pub origin: Option<(Address, u64)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fetch {
    Waiting,
    Requested(PeerId),
    /// Delivered and being admitted: not asked for again unless admission blames the peer.
    Importing(PeerId),
}

#[derive(Debug)]
struct HashState {
    /// Announcers in arrival order, with what each announced.
    announcers: Vec<(PeerId, Meta)>,
    fetch: Fetch,
}

#[derive(Debug)]
struct Request {
    id: u64,
    hashes: Vec<B256>,
    sent: Instant,
}

#[derive(Debug, Default)]
struct PeerState {
    /// Hashes this peer announced that are still tracked, oldest first.
    announced: VecDeque<B256>,
    request: Option<Request>,
    /// Hashes it delivered when asked.
    delivered: u64,
    /// Hashes it was asked for and did not deliver (timed out, or left out).
    undelivered: u64,
    /// Where it connected from (none for a peer never attached).
    subnet: Option<Subnet>,
}

impl PeerState {
    /// Undelivered hashes beyond the delivered ones: 0 for a peer that delivers (an
    /// honest peer may leave out the odd tx it dropped meanwhile).
    fn strikes(&self) -> u64 {
        self.undelivered.saturating_sub(self.delivered)
    }
}

/// A request to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    /// The peer to ask.
    pub peer: PeerId,
    /// The id of the `GetPooledTransactions` request.
    pub request_id: u64,
    /// The transaction hashes to ask for.
    pub hashes: Vec<B256>,
}

/// A delivered transaction as the network saw it on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivered {
    /// The transaction hash.
    pub hash: B256,
    /// Its EIP-2718 type.
    pub ty: u8,
    /// The length of its EIP-2718 envelope, in bytes (what announcements state).
    pub size: usize,
}

/// Why a reply is a protocol fault of the peer that sent it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    /// The reply's request id is not one outstanding to this peer.
    #[error("reply to request {0} that is not outstanding")]
    Unsolicited(u64),
    /// A delivered transaction was not asked for, or comes out of request order.
    #[error("delivered tx {0} was not requested, or out of order")]
    NotRequested(B256),
    /// A delivered transaction's type differs from its announcement.
    #[error("delivered tx {hash} has type {found}, announced {announced}")]
    TypeMismatch {
        /// The transaction hash.
        hash: B256,
        /// The type announced.
        announced: u8,
        /// The type delivered.
        found: u8,
    },
    /// A delivered transaction's size is further from its announcement than the slack allows.
    #[error("delivered tx {hash} is {found} bytes, announced {announced}")]
    SizeMismatch {
        /// The transaction hash.
        hash: B256,
        /// The size announced, in bytes.
        announced: u32,
        /// The size delivered, in bytes.
        found: usize,
    },
}

/// Announced and delivered sizes may differ by this much before it is a fault: clients
/// have disagreed on how sizes of typed txs count, and an honest off-by-a-few must not
/// cost a peer.
pub const SIZE_TOLERANCE: usize = 8;

/// Subnets whose departed peers' records are remembered at most (the longest gone are
/// forgotten first).
const MAX_SUBNET_RECORDS: usize = 4096;

/// A subnet's delivery record, left by its peers that went away.
#[derive(Debug, Clone, Copy)]
struct SubnetRecord {
    delivered: u64,
    undelivered: u64,
    /// When it was last written, in departures (for forgetting the oldest).
    seq: u64,
}

/// The fetcher's state.
#[derive(Debug)]
pub struct Fetcher {
    cfg: FetcherConfig,
    hashes: Map<B256, HashState>,
    peers: Map<PeerId, PeerState>,
    subnets: Map<Subnet, SubnetRecord>,
    departures: u64,
    next_id: u64,
}

impl Fetcher {
    /// An empty fetcher with limits `cfg`.
    pub fn new(cfg: FetcherConfig) -> Self {
        Self {
            cfg,
            hashes: Map::default(),
            peers: Map::default(),
            subnets: Map::default(),
            departures: 0,
            next_id: 1,
        }
    }

    /// A peer connected from `ip`: it starts with the delivery record its subnet's
    /// departed peers left, if any.
    pub fn attach_peer(&mut self, peer: PeerId, ip: IpAddr) {
        let subnet = Subnet::of(ip);
        let (delivered, undelivered) = self
            .subnets
            .get(&subnet)
            .map_or((0, 0), |r| (r.delivered, r.undelivered));
        let state = self.peers.entry(peer).or_default();
        state.subnet = Some(subnet);
        state.delivered = state.delivered.max(delivered);
        state.undelivered = state.undelivered.max(undelivered);
    }

    /// What a departing peer leaves its subnet: of its record and the subnet's, the one
    /// with more strikes.
    fn remember_subnet(&mut self, state: &PeerState) {
        let Some(subnet) = state.subnet else {
            return;
        };
        self.departures += 1;
        let mine = SubnetRecord {
            delivered: state.delivered,
            undelivered: state.undelivered,
            seq: self.departures,
        };
        let strikes = |r: &SubnetRecord| r.undelivered.saturating_sub(r.delivered);
        let kept = match self.subnets.get(&subnet) {
            Some(r) if strikes(r) > strikes(&mine) => SubnetRecord {
                seq: mine.seq,
                ..*r
            },
            _ => mine,
        };
        if self.subnets.len() >= MAX_SUBNET_RECORDS
            && !self.subnets.contains_key(&subnet)
            && let Some(oldest) = self
                .subnets
                .iter()
                .min_by_key(|(_, r)| r.seq)
                .map(|(k, _)| *k)
        {
            self.subnets.remove(&oldest);
        }
        self.subnets.insert(subnet, kept);
    }

    /// Hashes tracked (waiting, requested or importing).
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Whether no hash is tracked.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// Whether `hash` is tracked.
    pub fn contains(&self, hash: &B256) -> bool {
        self.hashes.contains_key(hash)
    }

    /// Records `peer`'s announcement of hashes the pool does not have (the caller filters
    /// with the pool). Returns how many were dropped over the per-peer or global cap.
    pub fn announce(
        &mut self,
        peer: PeerId,
        entries: impl IntoIterator<Item = (B256, Meta)>,
    ) -> usize {
        let mut dropped = 0;
        let max_tracked = self.cfg.max_tracked;
        let cap = self.cfg.max_announces_per_peer;
        // This peer's tracked hashes: making room takes from other peers only.
        let mut mine = self.peers.entry(peer).or_default().announced.len();
        for (hash, meta) in entries {
            if mine >= cap {
                dropped += 1;
                continue;
            }
            match self.hashes.get_mut(&hash) {
                Some(h) => {
                    if h.announcers.iter().any(|(p, _)| *p == peer) {
                        continue;
                    }
                    h.announcers.push((peer, meta));
                }
                None => {
                    if self.hashes.len() >= max_tracked && !self.make_room_for(peer, mine) {
                        dropped += 1;
                        continue;
                    }
                    self.hashes.insert(
                        hash,
                        HashState {
                            announcers: vec![(peer, meta)],
                            fetch: Fetch::Waiting,
                        },
                    );
                }
            }
            if let Some(state) = self.peers.get_mut(&peer) {
                state.announced.push_back(hash);
                mine += 1;
            }
        }
        dropped
    }

    /// The fetcher is full and `peer`, which has `mine` hashes tracked, announces a new
    /// one: the biggest announcer, if it has more than one hash over `mine`, gives up its
    /// oldest waiting hash that no one else announced. Whether room was made.
    fn make_room_for(&mut self, peer: PeerId, mine: usize) -> bool {
        let Some((biggest, count)) = self
            .peers
            .iter()
            .filter(|(p, _)| **p != peer)
            .map(|(p, s)| (*p, s.announced.len()))
            .max_by_key(|(_, n)| *n)
        else {
            return false;
        };
        if count <= mine + 1 {
            return false;
        }
        let hashes = &self.hashes;
        let Some(state) = self.peers.get_mut(&biggest) else {
            return false;
        };
        let Some(i) = state.announced.iter().position(|h| {
            hashes
                .get(h)
                .is_some_and(|st| st.fetch == Fetch::Waiting && st.announcers.len() == 1)
        }) else {
            return false;
        };
        if let Some(h) = state.announced.remove(i) {
            self.hashes.remove(&h);
        }
        true
    }

    /// Requests to send now: one per idle peer, of waiting hashes it announced.
    pub fn schedule(&mut self, now: Instant) -> Vec<FetchRequest> {
        let mut out = Vec::new();
        // Each announcer's record as the round starts (requests made in the round do
        // not change it).
        let records: Map<PeerId, u64> = self
            .peers
            .iter()
            .filter(|(_, s)| s.undelivered > 0)
            .map(|(p, s)| (*p, s.strikes()))
            .collect();
        let ids: Vec<PeerId> = self
            .peers
            .iter()
            .filter(|(_, s)| s.request.is_none() && !s.announced.is_empty())
            .map(|(id, _)| *id)
            .collect();
        for peer in ids {
            let Some(state) = self.peers.get_mut(&peer) else {
                continue;
            };
            let strikes = state.strikes();
            let mut hashes = Vec::new();
            let mut bytes = 0usize;
            for hash in &state.announced {
                let Some(h) = self.hashes.get_mut(hash) else {
                    continue;
                };
                if h.fetch != Fetch::Waiting {
                    continue;
                }
                // A peer with undelivered hashes on its record leaves a hash to another
                // announcer with a better one (asked in its own turn, now or once its
                // request is answered).
                if strikes > 0
                    && h.announcers
                        .iter()
                        .any(|(p, _)| *p != peer && strikes_of(&records, p) < strikes)
                {
                    continue;
                }
                let size = h
                    .announcers
                    .iter()
                    .find(|(p, _)| *p == peer)
                    .map_or(0, |(_, m)| m.size as usize);
                if !hashes.is_empty() && bytes + size > self.cfg.max_request_bytes {
                    break;
                }
                bytes += size;
                h.fetch = Fetch::Requested(peer);
                hashes.push(*hash);
                if hashes.len() >= self.cfg.max_request_hashes {
                    break;
                }
            }
            if hashes.is_empty() {
                continue;
            }
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1);
            state.request = Some(Request {
                id,
                hashes: hashes.clone(),
                sent: now,
            });
            out.push(FetchRequest {
                peer,
                request_id: id,
                hashes,
            });
        }
        out
    }

    /// Checks a `PooledTransactions` reply. On success the delivered hashes are marked
    /// importing and returned in order; hashes asked for but not delivered lose this
    /// peer as an announcer. On a fault the request is closed the same way and nothing
    /// is returned; the caller disconnects the peer.
    pub fn deliver(
        &mut self,
        peer: PeerId,
        request_id: u64,
        delivered: &[Delivered],
    ) -> Result<Vec<B256>, DeliveryError> {
        let request = match self.peers.get_mut(&peer) {
            Some(s) if s.request.as_ref().is_some_and(|r| r.id == request_id) => {
                s.request.take().expect("checked above")
            }
            _ => return Err(DeliveryError::Unsolicited(request_id)),
        };
        let verdict = self.check(peer, &request.hashes, delivered);
        let accepted: Vec<B256> = match &verdict {
            Ok(()) => delivered.iter().map(|d| d.hash).collect(),
            Err(_) => Vec::new(),
        };
        if let Some(s) = self.peers.get_mut(&peer) {
            s.delivered += accepted.len() as u64;
            s.undelivered += (request.hashes.len() - accepted.len()) as u64;
        }
        let mut missing = Vec::new();
        for hash in &request.hashes {
            if accepted.contains(hash) {
                if let Some(h) = self.hashes.get_mut(hash) {
                    h.fetch = Fetch::Importing(peer);
                }
            } else {
                missing.push(*hash);
            }
        }
        self.drop_announcer_of(&missing, peer);
        verdict.map(|()| accepted)
    }

    fn check(
        &self,
        peer: PeerId,
        requested: &[B256],
        delivered: &[Delivered],
    ) -> Result<(), DeliveryError> {
        let mut next = 0;
        for d in delivered {
            match requested[next..].iter().position(|h| *h == d.hash) {
                Some(i) => next += i + 1,
                None => return Err(DeliveryError::NotRequested(d.hash)),
            }
            let meta = self
                .hashes
                .get(&d.hash)
                .and_then(|h| h.announcers.iter().find(|(p, _)| *p == peer))
                .map(|(_, m)| *m);
            if let Some(meta) = meta {
                if meta.ty != d.ty {
                    return Err(DeliveryError::TypeMismatch {
                        hash: d.hash,
                        announced: meta.ty,
                        found: d.ty,
                    });
                }
                if (meta.size as usize).abs_diff(d.size) > SIZE_TOLERANCE {
                    return Err(DeliveryError::SizeMismatch {
                        hash: d.hash,
                        announced: meta.size,
                        found: d.size,
                    });
                }
            }
        }
        Ok(())
    }

    /// What `peer` announced of `hash`'s sender and nonce (eth/73), if it did.
    pub fn announced_origin(&self, peer: PeerId, hash: &B256) -> Option<(Address, u64)> {
        self.hashes
            .get(hash)?
            .announcers
            .iter()
            .find(|(p, _)| *p == peer)?
            .1
            .origin
    }

    /// Admission decided `hash` (pooled, or refused for a reason that is not the
    /// delivering peer's fault): forget it.
    pub fn settled(&mut self, hash: &B256) {
        if let Some(h) = self.hashes.remove(hash) {
            for (p, _) in h.announcers {
                if let Some(s) = self.peers.get_mut(&p) {
                    s.announced.retain(|x| x != hash);
                }
            }
        }
    }

    /// `peer` delivered a bad copy of `hash`: it is no longer asked for it, and the hash
    /// waits for the next announcer (or is forgotten if there is none).
    pub fn peer_fault(&mut self, peer: PeerId, hash: &B256) {
        self.drop_announcer(hash, peer);
    }

    /// [`Self::drop_announcer`] for many hashes of one peer: its list of announced
    /// hashes is walked once, not once per hash (a timed-out request of 256 hashes from a
    /// peer with 4,096 announced was a million comparisons under the fetcher's lock).
    fn drop_announcer_of(&mut self, hashes: &[B256], peer: PeerId) {
        if hashes.is_empty() {
            return;
        }
        let gone: std::collections::HashSet<&B256> = hashes.iter().collect();
        if let Some(s) = self.peers.get_mut(&peer) {
            s.announced.retain(|x| !gone.contains(x));
        }
        for hash in hashes {
            self.forget_announcer(hash, peer);
        }
    }

    fn drop_announcer(&mut self, hash: &B256, peer: PeerId) {
        if let Some(s) = self.peers.get_mut(&peer) {
            s.announced.retain(|x| x != hash);
        }
        self.forget_announcer(hash, peer);
    }

    /// The hash's side of dropping `peer` as its announcer.
    fn forget_announcer(&mut self, hash: &B256, peer: PeerId) {
        let Some(h) = self.hashes.get_mut(hash) else {
            return;
        };
        h.announcers.retain(|(p, _)| *p != peer);
        if matches!(h.fetch, Fetch::Requested(p) | Fetch::Importing(p) if p == peer) {
            h.fetch = Fetch::Waiting;
        }
        if h.announcers.is_empty() && h.fetch == Fetch::Waiting {
            self.hashes.remove(hash);
        }
    }

    /// Closes requests older than the timeout; returns the peers that timed out. Their
    /// hashes go back to waiting for another announcer.
    pub fn expire(&mut self, now: Instant) -> Vec<PeerId> {
        let timeout = self.cfg.timeout;
        let late: Vec<(PeerId, Vec<B256>)> = self
            .peers
            .iter_mut()
            .filter(|(_, s)| {
                s.request
                    .as_ref()
                    .is_some_and(|r| now.duration_since(r.sent) >= timeout)
            })
            .filter_map(|(p, s)| s.request.take().map(|r| (*p, r.hashes)))
            .collect();
        for (peer, hashes) in &late {
            if let Some(s) = self.peers.get_mut(peer) {
                s.undelivered += hashes.len() as u64;
            }
            self.drop_announcer_of(hashes, *peer);
        }
        late.into_iter().map(|(p, _)| p).collect()
    }

    /// A peer left: its announcements and request go with it.
    pub fn remove_peer(&mut self, peer: PeerId) {
        let Some(state) = self.peers.remove(&peer) else {
            return;
        };
        self.remember_subnet(&state);
        let mut hashes: Vec<B256> = state.announced.into_iter().collect();
        if let Some(r) = state.request {
            hashes.extend(r.hashes);
        }
        // Its own list went with it: only the hashes' side is left.
        for hash in hashes {
            self.forget_announcer(&hash, peer);
        }
    }
}

/// A peer's strikes from the round's records (none on record: 0).
fn strikes_of(records: &Map<PeerId, u64>, peer: &PeerId) -> u64 {
    records.get(peer).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::B512;

    fn peer(n: u8) -> PeerId {
        B512::repeat_byte(n)
    }
    fn h(n: u16) -> B256 {
        let mut b = [0u8; 32];
        b[..2].copy_from_slice(&n.to_be_bytes());
        b[31] = 1;
        B256::from(b)
    }
    fn meta(size: u32) -> Meta {
        Meta {
            ty: 2,
            size,
            origin: None,
        }
    }

    #[test]
    fn one_request_per_peer_within_count_and_byte_caps() {
        let mut f = Fetcher::new(FetcherConfig::default());
        let a = peer(1);
        f.announce(a, (0..300).map(|i| (h(i), meta(100))));
        let now = Instant::now();
        let reqs = f.schedule(now);
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].hashes.len(), 256);
        // Nothing more while the request is out.
        assert!(f.schedule(now).is_empty());
        let delivered: Vec<Delivered> = reqs[0]
            .hashes
            .iter()
            .map(|hash| Delivered {
                hash: *hash,
                ty: 2,
                size: 100,
            })
            .collect();
        assert_eq!(
            f.deliver(a, reqs[0].request_id, &delivered).unwrap().len(),
            256
        );
        let next = f.schedule(now);
        assert_eq!(next[0].hashes.len(), 44);

        // Bytes: 40 KiB txs, 128 KiB per request → 3 per request; one huge tx goes alone.
        let mut f = Fetcher::new(FetcherConfig::default());
        f.announce(a, (0..5).map(|i| (h(i), meta(40 * 1024))));
        assert_eq!(f.schedule(now)[0].hashes.len(), 3);
        let mut f = Fetcher::new(FetcherConfig::default());
        f.announce(a, [(h(9), meta(900_000))]);
        assert_eq!(f.schedule(now)[0].hashes, vec![h(9)]);
    }

    #[test]
    fn fifty_announced_hashes_make_one_request_of_fifty() {
        let mut f = Fetcher::new(FetcherConfig::default());
        f.announce(peer(1), (0..50).map(|i| (h(i), meta(120))));
        let reqs = f.schedule(Instant::now());
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].hashes, (0..50).map(h).collect::<Vec<_>>());
    }

    #[test]
    fn per_peer_announcement_cap() {
        let cfg = FetcherConfig {
            max_announces_per_peer: 10,
            ..Default::default()
        };
        let mut f = Fetcher::new(cfg);
        assert_eq!(f.announce(peer(1), (0..15).map(|i| (h(i), meta(1)))), 5);
        assert_eq!(f.len(), 10);
        // Another peer has its own budget.
        assert_eq!(f.announce(peer(2), (20..30).map(|i| (h(i), meta(1)))), 0);
    }

    #[test]
    fn replies_must_be_an_ordered_subsequence_matching_the_announcement() {
        let a = peer(1);
        let now = Instant::now();
        let setup = || {
            let mut f = Fetcher::new(FetcherConfig::default());
            f.announce(
                a,
                [
                    (h(1), meta(100)),
                    (
                        h(2),
                        Meta {
                            ty: 3,
                            size: 100_000,
                            origin: None,
                        },
                    ),
                ],
            );
            let id = f.schedule(now)[0].request_id;
            (f, id)
        };
        let d = |n, ty, size| Delivered {
            hash: h(n),
            ty,
            size,
        };

        let (mut f, id) = setup();
        assert_eq!(f.deliver(a, id, &[d(2, 3, 100_000)]).unwrap(), vec![h(2)]);
        // h(1) was not delivered: a has no copy, and no one else announced it.
        assert!(!f.contains(&h(1)));

        let (mut f, id) = setup();
        assert_eq!(
            f.deliver(a, id, &[d(2, 3, 100_000), d(1, 2, 100)]),
            Err(DeliveryError::NotRequested(h(1)))
        );
        let (mut f, id) = setup();
        assert!(matches!(
            f.deliver(a, id, &[d(7, 2, 100)]),
            Err(DeliveryError::NotRequested(_))
        ));
        let (mut f, id) = setup();
        assert!(matches!(
            f.deliver(a, id, &[d(2, 2, 100_000)]),
            Err(DeliveryError::TypeMismatch { .. })
        ));
        let (mut f, id) = setup();
        assert!(matches!(
            f.deliver(a, id, &[d(2, 3, 1_000)]),
            Err(DeliveryError::SizeMismatch { .. })
        ));
        let (mut f, id) = setup();
        assert!(f.deliver(a, id, &[d(1, 2, 100 + SIZE_TOLERANCE)]).is_ok());
        let (mut f, id) = setup();
        assert_eq!(
            f.deliver(a, id + 1, &[]),
            Err(DeliveryError::Unsolicited(id + 1))
        );
    }

    #[test]
    fn a_bad_copy_sends_the_hash_to_the_next_announcer() {
        let (bad, good) = (peer(1), peer(2));
        let mut f = Fetcher::new(FetcherConfig::default());
        let now = Instant::now();
        f.announce(
            bad,
            [(
                h(1),
                Meta {
                    ty: 3,
                    size: 1000,
                    origin: None,
                },
            )],
        );
        f.announce(
            good,
            [(
                h(1),
                Meta {
                    ty: 3,
                    size: 1000,
                    origin: None,
                },
            )],
        );
        let reqs = f.schedule(now);
        assert_eq!(reqs.len(), 1, "one peer is asked at a time");
        let first = reqs[0].peer;
        let other = if first == bad { good } else { bad };
        let got = f
            .deliver(
                first,
                reqs[0].request_id,
                &[Delivered {
                    hash: h(1),
                    ty: 3,
                    size: 1000,
                }],
            )
            .unwrap();
        assert_eq!(got, vec![h(1)]);
        assert!(f.schedule(now).is_empty(), "importing: not asked again");
        f.peer_fault(first, &h(1));
        let again = f.schedule(now);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].peer, other);
        assert_eq!(again[0].hashes, vec![h(1)]);
        f.deliver(
            other,
            again[0].request_id,
            &[Delivered {
                hash: h(1),
                ty: 3,
                size: 1000,
            }],
        )
        .unwrap();
        f.settled(&h(1));
        assert!(f.is_empty());
    }

    #[test]
    fn timeouts_move_hashes_and_departures_clean_up() {
        let (slow, other) = (peer(1), peer(2));
        let mut f = Fetcher::new(FetcherConfig::default());
        let t0 = Instant::now();
        f.announce(slow, [(h(1), meta(10))]);
        let first = f.schedule(t0);
        assert_eq!(first[0].peer, slow);
        f.announce(other, [(h(1), meta(10))]);
        assert!(f.schedule(t0).is_empty());
        assert!(f.expire(t0 + Duration::from_secs(1)).is_empty());
        assert_eq!(f.expire(t0 + Duration::from_secs(5)), vec![slow]);
        let retry = f.schedule(t0 + Duration::from_secs(5));
        assert_eq!(retry[0].peer, other);
        f.remove_peer(other);
        assert!(f.is_empty());
        // The late reply from the slow peer is unsolicited now.
        assert!(f.deliver(slow, first[0].request_id, &[]).is_err());
    }

    #[test]
    fn a_peer_that_did_not_deliver_leaves_shared_hashes_to_one_that_does() {
        // Which idle peer a round visits first depends on the map's random order: 16
        // fetchers, so that a rule that only held for one order would be caught.
        for _ in 0..16 {
            a_peer_that_did_not_deliver_leaves_shared_hashes_to_one_that_does_once();
        }
    }

    fn a_peer_that_did_not_deliver_leaves_shared_hashes_to_one_that_does_once() {
        let (attacker, honest) = (peer(1), peer(2));
        let mut f = Fetcher::new(FetcherConfig::default());
        let t0 = Instant::now();
        // The attacker announces hashes it will never deliver; its request times out.
        f.announce(attacker, (100..356).map(|i| (h(i), meta(100))));
        let first = f.schedule(t0);
        assert_eq!(first.len(), 1);
        assert_eq!(f.expire(t0 + Duration::from_secs(5)), vec![attacker]);
        // Both announce a real tx, the attacker first (it copies announcements it hears).
        f.announce(attacker, [(h(1), meta(100))]);
        f.announce(honest, [(h(1), meta(100))]);
        let t1 = t0 + Duration::from_secs(5);
        let reqs = f.schedule(t1);
        let asked: Vec<(PeerId, Vec<B256>)> =
            reqs.iter().map(|r| (r.peer, r.hashes.clone())).collect();
        assert!(
            asked.contains(&(honest, vec![h(1)])),
            "the honest announcer is asked at once: {asked:?}"
        );
        assert!(
            asked
                .iter()
                .all(|(p, hs)| *p != attacker || !hs.contains(&h(1))),
            "the peer that did not deliver is not asked for it"
        );
        // A peer that delivers keeps a clean record, whatever it left out once.
        let id = reqs.iter().find(|r| r.peer == honest).unwrap().request_id;
        let got = f
            .deliver(
                honest,
                id,
                &[Delivered {
                    hash: h(1),
                    ty: 2,
                    size: 100,
                }],
            )
            .unwrap();
        assert_eq!(got, vec![h(1)]);
        assert_eq!(f.peers[&honest].strikes(), 0);
        assert_eq!(f.peers[&attacker].strikes(), 256);
    }

    #[test]
    fn a_new_identity_from_the_same_subnet_starts_with_its_record() {
        let (attacker, honest) = (peer(1), peer(2));
        let mut f = Fetcher::new(FetcherConfig::default());
        let t0 = Instant::now();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        f.attach_peer(attacker, ip("10.0.0.1"));
        f.attach_peer(honest, ip("10.0.9.1"));
        f.announce(attacker, (100..356).map(|i| (h(i), meta(100))));
        assert_eq!(f.schedule(t0).len(), 1);
        assert_eq!(f.expire(t0 + Duration::from_secs(5)), vec![attacker]);
        f.remove_peer(attacker);
        // Back with a new key from another address of the same /24: its 256 strikes
        // came with it, so a hash it announces first still goes to the honest peer.
        let again = peer(3);
        f.attach_peer(again, ip("10.0.0.77"));
        assert_eq!(f.peers[&again].strikes(), 256);
        f.announce(again, [(h(1), meta(100))]);
        f.announce(honest, [(h(1), meta(100))]);
        let reqs = f.schedule(t0 + Duration::from_secs(5));
        assert!(
            reqs.iter()
                .any(|r| r.peer == honest && r.hashes == vec![h(1)]),
            "{reqs:?}"
        );
        assert!(
            reqs.iter()
                .all(|r| r.peer != again || !r.hashes.contains(&h(1)))
        );
        // Another /24 starts clean; and a clean departure does not wash the record.
        let elsewhere = peer(4);
        f.attach_peer(elsewhere, ip("10.0.1.1"));
        assert_eq!(f.peers[&elsewhere].strikes(), 0);
        let clean = peer(5);
        f.attach_peer(clean, ip("10.0.0.5"));
        f.peers.get_mut(&clean).unwrap().undelivered = 0;
        f.peers.get_mut(&clean).unwrap().delivered = 0;
        f.remove_peer(clean);
        let fourth = peer(6);
        f.attach_peer(fourth, ip("10.0.0.6"));
        assert_eq!(f.peers[&fourth].strikes(), 256);
    }

    #[test]
    fn a_full_fetcher_makes_room_for_a_peer_announcing_less_than_the_biggest() {
        let cfg = FetcherConfig {
            max_tracked: 100,
            ..Default::default()
        };
        let mut f = Fetcher::new(cfg);
        let (flooder, honest) = (peer(1), peer(2));
        assert_eq!(f.announce(flooder, (0..150).map(|i| (h(i), meta(100)))), 50);
        assert_eq!(f.len(), 100);
        // Full: the honest peer's announcements take the flooder's places, until both
        // hold about as many.
        assert_eq!(
            f.announce(honest, (1000..1010).map(|i| (h(i), meta(100)))),
            0
        );
        assert_eq!(f.len(), 100);
        assert!((1000..1010).all(|i| f.contains(&h(i))));
        assert_eq!(f.peers[&flooder].announced.len(), 90);
        // The flooder, the biggest, cannot take places from anyone.
        assert_eq!(
            f.announce(flooder, (200..210).map(|i| (h(i), meta(100)))),
            10
        );
        // Nor can a peer take more than an even share from the biggest.
        assert_eq!(
            f.announce(honest, (2000..2100).map(|i| (h(i), meta(100)))),
            60
        );
        let (a, b) = (
            f.peers[&flooder].announced.len(),
            f.peers[&honest].announced.len(),
        );
        assert!(a.abs_diff(b) <= 1, "flooder {a}, honest {b}");
    }
}
