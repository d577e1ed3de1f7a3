//! The admission shields: the structures that let the pipeline turn work away before it
//! costs ECDSA or KZG.
//!
//! - [`SenderCache`]: tx hash → sender. A hash commits to the signature, so a hit is as good
//!   as a recovery. Shared with block import, which then pays no ECDSA for txs it has seen.
//! - [`RecentFailures`]: hashes that failed for a reason their bytes decide, with a TTL.
//! - [`InFlight`]: hashes being admitted right now. A claim here, not a pool lookup, is what
//!   keeps N simultaneous deliveries of one blob tx down to one KZG verification.
//! - [`Backpressure`]: a global and a per-origin cap on admissions in progress.

use super::TxOrigin;
use super::{FastMap as HashMap, FastSet as HashSet};
use alloy_primitives::{Address, B256};
use moat_sched::CeilingMutex as Mutex;
use quick_cache::sync::Cache;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Bounded tx hash → sender map with hit and miss counters. Cloning shares it.
#[derive(Clone)]
pub struct SenderCache {
    inner: Arc<SenderCacheInner>,
}

struct SenderCacheInner {
    map: Cache<B256, Address>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl SenderCache {
    /// An empty cache of at most `capacity` senders.
    pub fn new(capacity: usize) -> Self {
        Self {
            inner: Arc::new(SenderCacheInner {
                map: Cache::new(capacity.max(1)),
                hits: AtomicU64::new(0),
                misses: AtomicU64::new(0),
            }),
        }
    }

    /// The sender recovered earlier for `hash`, counting the hit or miss.
    pub fn get(&self, hash: &B256) -> Option<Address> {
        let found = self.inner.map.get(hash);
        let counter = if found.is_some() {
            &self.inner.hits
        } else {
            &self.inner.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Remembers the sender recovered for `hash`.
    pub fn insert(&self, hash: B256, sender: Address) {
        self.inner.map.insert(hash, sender);
    }

    /// Whether `hash` has a sender cached, without counting a hit or miss.
    pub fn contains(&self, hash: &B256) -> bool {
        self.inner.map.peek(hash).is_some()
    }

    /// Lookups that found a sender, since the cache was made.
    pub fn hits(&self) -> u64 {
        self.inner.hits.load(Ordering::Relaxed)
    }

    /// Lookups that found none, since the cache was made.
    pub fn misses(&self) -> u64 {
        self.inner.misses.load(Ordering::Relaxed)
    }

    /// Senders cached now.
    pub fn len(&self) -> usize {
        self.inner.map.len()
    }

    /// Whether no sender is cached.
    pub fn is_empty(&self) -> bool {
        self.inner.map.is_empty()
    }
}

impl std::fmt::Debug for SenderCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SenderCache")
            .field("len", &self.len())
            .finish()
    }
}

/// Bounded set of recently failed hashes; an entry lapses after the TTL.
pub struct RecentFailures {
    map: Cache<B256, Instant>,
    ttl: Duration,
}

impl RecentFailures {
    /// An empty set of at most `capacity` hashes, each remembered for `ttl`.
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        Self {
            map: Cache::new(capacity.max(1)),
            ttl,
        }
    }

    /// Whether `hash` failed less than a TTL ago (the clock is read only on a hit).
    pub fn contains(&self, hash: &B256) -> bool {
        self.contains_at(hash, Instant::now)
    }

    fn contains_at(&self, hash: &B256, now: impl FnOnce() -> Instant) -> bool {
        match self.map.get(hash) {
            Some(expires) if expires > now() => true,
            Some(_) => {
                self.map.remove(hash);
                false
            }
            None => false,
        }
    }

    /// Remembers `hash` as failed at `now`, until `now` + the TTL.
    pub fn insert(&self, hash: B256, now: Instant) {
        self.map.insert(hash, now + self.ttl);
    }

    /// Hashes held, lapsed ones not yet swept included.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no hash is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

const IN_FLIGHT_SHARDS: usize = 16;

/// Hashes under admission. [`InFlight::claim`] succeeds for one caller per hash at a time.
pub struct InFlight {
    shards: [Mutex<HashSet<B256>>; IN_FLIGHT_SHARDS],
}

impl Default for InFlight {
    fn default() -> Self {
        Self {
            shards: std::array::from_fn(|_| Mutex::named("in_flight", HashSet::default())),
        }
    }
}

impl InFlight {
    fn shard(&self, hash: &B256) -> &Mutex<HashSet<B256>> {
        &self.shards[hash[0] as usize % IN_FLIGHT_SHARDS]
    }

    /// Claims `hash`; `None` when another admission holds it. The claim ends on drop.
    pub fn claim(&self, hash: B256) -> Option<InFlightClaim<'_>> {
        // `then`, not `then_some`: a claim built and dropped on failure would release the
        // holder's claim (and re-lock the shard we are holding).
        let inserted = self.shard(&hash).lock().insert(hash);
        inserted.then(|| InFlightClaim { set: self, hash })
    }

    /// Whether an admission holds `hash` right now.
    pub fn contains(&self, hash: &B256) -> bool {
        self.shard(hash).lock().contains(hash)
    }
}

pub struct InFlightClaim<'a> {
    set: &'a InFlight,
    hash: B256,
}

impl Drop for InFlightClaim<'_> {
    fn drop(&mut self) {
        self.set.shard(&self.hash).lock().remove(&self.hash);
    }
}

/// Caps on admissions in progress, global and per origin.
pub struct Backpressure {
    global: AtomicUsize,
    global_limit: usize,
    per_origin: Mutex<HashMap<TxOrigin, usize>>,
    per_origin_limit: usize,
}

/// Why [`Backpressure::enter`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    Global,
    Origin,
}

impl Backpressure {
    /// At most `global_limit` admissions in progress in all, `per_origin_limit` from one origin.
    pub fn new(global_limit: usize, per_origin_limit: usize) -> Self {
        Self {
            global: AtomicUsize::new(0),
            global_limit,
            per_origin: Mutex::named("backpressure", HashMap::default()),
            per_origin_limit,
        }
    }

    /// Admits one more admission from `origin`, or refuses; the permit is released on drop.
    pub fn enter(&self, origin: TxOrigin) -> Result<Permit<'_>, Refused> {
        if self.global.fetch_add(1, Ordering::AcqRel) >= self.global_limit {
            self.global.fetch_sub(1, Ordering::AcqRel);
            return Err(Refused::Global);
        }
        let mut per = self.per_origin.lock();
        let n = per.entry(origin).or_insert(0);
        if *n >= self.per_origin_limit {
            drop(per);
            self.global.fetch_sub(1, Ordering::AcqRel);
            return Err(Refused::Origin);
        }
        *n += 1;
        Ok(Permit { bp: self, origin })
    }

    /// Admissions in progress now, all origins together.
    pub fn in_progress(&self) -> usize {
        self.global.load(Ordering::Acquire)
    }
}

pub struct Permit<'a> {
    bp: &'a Backpressure,
    origin: TxOrigin,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let mut per = self.bp.per_origin.lock();
        if let Some(n) = per.get_mut(&self.origin) {
            *n -= 1;
            if *n == 0 {
                per.remove(&self.origin);
            }
        }
        drop(per);
        self.bp.global.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sender_cache_counts_hits_and_misses() {
        let c = SenderCache::new(4);
        let h = B256::repeat_byte(1);
        assert_eq!(c.get(&h), None);
        c.insert(h, Address::repeat_byte(2));
        assert_eq!(c.clone().get(&h), Some(Address::repeat_byte(2)));
        assert_eq!((c.hits(), c.misses()), (1, 1));
    }

    #[test]
    fn sender_cache_is_bounded() {
        let c = SenderCache::new(100);
        for i in 0..1000u64 {
            c.insert(B256::from(alloy_primitives::U256::from(i)), Address::ZERO);
        }
        assert!(c.len() <= 110, "len {}", c.len());
    }

    #[test]
    fn recent_failures_expire() {
        let f = RecentFailures::new(16, Duration::from_secs(60));
        let h = B256::repeat_byte(3);
        let t0 = Instant::now();
        f.insert(h, t0);
        assert!(f.contains(&h));
        assert!(f.contains_at(&h, || t0 + Duration::from_secs(59)));
        assert!(!f.contains_at(&h, || t0 + Duration::from_secs(61)));
        assert!(!f.contains(&h), "the expired entry was dropped");
    }

    #[test]
    fn in_flight_claims_are_exclusive_until_dropped() {
        let s = InFlight::default();
        let h = B256::repeat_byte(4);
        let claim = s.claim(h).unwrap();
        assert!(s.claim(h).is_none());
        assert!(s.contains(&h));
        drop(claim);
        assert!(s.claim(h).is_some());
    }

    #[test]
    fn backpressure_limits_global_and_per_origin() {
        let bp = Backpressure::new(3, 2);
        let a = TxOrigin::Peer(alloy_primitives::B512::repeat_byte(1));
        let b = TxOrigin::Peer(alloy_primitives::B512::repeat_byte(2));
        let p1 = bp.enter(a).unwrap();
        let _p2 = bp.enter(a).unwrap();
        assert_eq!(bp.enter(a).err(), Some(Refused::Origin));
        let _p3 = bp.enter(b).unwrap();
        assert_eq!(bp.enter(TxOrigin::Local).err(), Some(Refused::Global));
        drop(p1);
        let _p4 = bp.enter(TxOrigin::Local).unwrap();
        assert_eq!(bp.in_progress(), 3);
    }
}
