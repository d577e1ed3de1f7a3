//! The Kademlia node table.
//!
//! Nodes sit in 256 buckets by the log distance of `keccak256(id)` from ours; a bucket
//! holds 16 entries and up to 10 replacements (nodes seen while it was full, promoted
//! when an entry dies). Against table poisoning, as geth: at most 2 nodes of one /24 in
//! a bucket and 10 in the table, replacements included; addresses on local networks
//! are exempt (a test network on 127.0.0.1 must work).
//!
//! The table is plain data: the service ([`crate::discv4`]) decides when nodes are
//! added, checked and dropped, and keeps it behind a lock.

use crate::{NodeId, NodeRecord, is_lan, log_distance, node_hash};
use alloy_primitives::B256;
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Buckets, one per log distance (1 to 256) from our node hash.
pub const BUCKET_COUNT: usize = 256;
/// Most live entries per bucket (Kademlia's k).
pub const BUCKET_SIZE: usize = 16;
/// Most replacement candidates kept per bucket, for when an entry drops out.
pub const MAX_REPLACEMENTS: usize = 10;
/// Nodes of one /24 in a bucket.
pub const BUCKET_IP_LIMIT: usize = 2;
/// Nodes of one /24 in the whole table.
pub const TABLE_IP_LIMIT: usize = 10;

/// A node in the table with its liveness record.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The node.
    pub node: NodeRecord,
    /// keccak256 of the node id: the table's distance is measured on it.
    pub hash: B256,
    /// When the node entered the table.
    pub added: Instant,
    /// Answers to liveness checks; cut to a third on each miss, removed at zero.
    pub liveness_checks: u32,
    /// When it was last seen alive (a liveness check answered or a verified contact).
    pub last_checked: Option<Instant>,
}

impl Entry {
    fn new(node: NodeRecord, hash: B256, now: Instant) -> Self {
        Entry {
            node,
            hash,
            added: now,
            liveness_checks: 0,
            last_checked: None,
        }
    }

    /// Whether the node has answered a check since it was added.
    pub fn is_live(&self) -> bool {
        self.liveness_checks > 0
    }
}

/// What became of a node offered to the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddResult {
    /// It is a new entry.
    Added,
    /// It was already an entry (its endpoint or record may have been updated).
    Present,
    /// The bucket is full: it waits among the replacements.
    Replacement,
    /// Its /24 has too many nodes already.
    IpLimit,
    /// It is us, or has no usable address.
    Refused,
}

/// Counts of nodes per /24 (IPv4) or /24 prefix (IPv6), with a limit.
#[derive(Debug, Default)]
struct Subnets {
    counts: HashMap<u32, usize>,
}

fn subnet(ip: &IpAddr) -> u32 {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            u32::from_be_bytes([0, o[0], o[1], o[2]])
        }
        IpAddr::V6(v6) => {
            let o = v6.octets();
            u32::from_be_bytes([1, o[0], o[1], o[2]])
        }
    }
}

impl Subnets {
    fn fits(&self, ip: &IpAddr, limit: usize) -> bool {
        is_lan(ip) || self.counts.get(&subnet(ip)).copied().unwrap_or(0) < limit
    }

    fn add(&mut self, ip: &IpAddr) {
        if !is_lan(ip) {
            *self.counts.entry(subnet(ip)).or_default() += 1;
        }
    }

    fn remove(&mut self, ip: &IpAddr) {
        if is_lan(ip) {
            return;
        }
        let key = subnet(ip);
        if let Some(c) = self.counts.get_mut(&key) {
            *c -= 1;
            if *c == 0 {
                self.counts.remove(&key);
            }
        }
    }
}

#[derive(Debug, Default)]
struct Bucket {
    entries: Vec<Entry>,
    replacements: Vec<Entry>,
    subnets: Subnets,
}

/// A small xorshift generator: bucket and replacement picks need no more.
#[derive(Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new() -> Self {
        let mut seed = [0u8; 8];
        let _ = getrandom::fill(&mut seed);
        Rng(u64::from_le_bytes(seed) | 1)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A value in `0..n` (`n` > 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub(crate) fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

/// The table. See the module docs.
#[derive(Debug)]
pub struct Table {
    local: B256,
    buckets: Vec<Bucket>,
    subnets: Subnets,
    rng: Rng,
}

impl Table {
    /// An empty table around our own id.
    pub fn new(local: NodeId) -> Self {
        Table {
            local: node_hash(&local),
            buckets: (0..BUCKET_COUNT).map(|_| Bucket::default()).collect(),
            subnets: Subnets::default(),
            rng: Rng::new(),
        }
    }

    fn bucket_index(&self, hash: &B256) -> Option<usize> {
        log_distance(&self.local, hash).checked_sub(1)
    }

    /// Entries in the table (replacements not counted).
    pub fn len(&self) -> usize {
        self.buckets.iter().map(|b| b.entries.len()).sum()
    }

    /// Whether the table holds no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries per bucket index, for the non-empty buckets.
    pub fn bucket_sizes(&self) -> Vec<(usize, usize)> {
        self.buckets
            .iter()
            .enumerate()
            .filter(|(_, b)| !b.entries.is_empty())
            .map(|(i, b)| (i, b.entries.len()))
            .collect()
    }

    /// The entry for node `id`, if it is in the table (not a replacement).
    pub fn get(&self, id: &NodeId) -> Option<&Entry> {
        let hash = node_hash(id);
        let b = &self.buckets[self.bucket_index(&hash)?];
        b.entries.iter().find(|e| e.node.id == *id)
    }

    /// Whether node `id` is in the table (not counting replacements).
    pub fn contains(&self, id: &NodeId) -> bool {
        self.get(id).is_some()
    }

    /// Whether `id` is waiting among its bucket's replacements.
    pub fn is_replacement(&self, id: &NodeId) -> bool {
        let hash = node_hash(id);
        self.bucket_index(&hash).is_some_and(|i| {
            self.buckets[i]
                .replacements
                .iter()
                .any(|e| e.node.id == *id)
        })
    }

    fn ip_fits(&self, b: usize, ip: &IpAddr) -> bool {
        self.subnets.fits(ip, TABLE_IP_LIMIT) && self.buckets[b].subnets.fits(ip, BUCKET_IP_LIMIT)
    }

    fn add_ip(&mut self, b: usize, ip: &IpAddr) {
        self.subnets.add(ip);
        self.buckets[b].subnets.add(ip);
    }

    fn remove_ip(&mut self, b: usize, ip: &IpAddr) {
        self.subnets.remove(ip);
        self.buckets[b].subnets.remove(ip);
    }

    /// Offers a node. `verified` says it has just answered us from this endpoint (a
    /// Pong), so it enters as live and an entry's endpoint may move to it; a node only
    /// heard of (a Neighbors answer) enters unchecked and changes nothing of an entry.
    pub fn add(&mut self, node: NodeRecord, verified: bool, now: Instant) -> AddResult {
        let hash = node_hash(&node.id);
        let Some(b) = self.bucket_index(&hash) else {
            return AddResult::Refused;
        };
        if node.ip.is_unspecified() || node.udp == 0 {
            return AddResult::Refused;
        }
        if let Some(i) = self.buckets[b]
            .entries
            .iter()
            .position(|e| e.node.id == node.id)
        {
            if verified {
                let old_ip = self.buckets[b].entries[i].node.ip;
                if old_ip != node.ip {
                    self.remove_ip(b, &old_ip);
                    if !self.ip_fits(b, &node.ip) {
                        self.add_ip(b, &old_ip);
                        return AddResult::Present;
                    }
                    self.add_ip(b, &node.ip);
                }
                let e = &mut self.buckets[b].entries[i];
                let enr = e.node.enr.take();
                e.node = NodeRecord { enr, ..node };
                e.liveness_checks = e.liveness_checks.max(1);
                e.last_checked = Some(now);
            }
            return AddResult::Present;
        }
        if self.buckets[b].entries.len() >= BUCKET_SIZE {
            return self.add_replacement(b, node, hash, now);
        }
        // A replacement becoming an entry leaves the replacements first.
        if let Some(r) = self.buckets[b]
            .replacements
            .iter()
            .position(|e| e.node.id == node.id)
        {
            let old = self.buckets[b].replacements.remove(r);
            self.remove_ip(b, &old.node.ip);
        }
        if !self.ip_fits(b, &node.ip) {
            return AddResult::IpLimit;
        }
        self.add_ip(b, &node.ip);
        let mut entry = Entry::new(node, hash, now);
        if verified {
            entry.liveness_checks = 1;
            entry.last_checked = Some(now);
        }
        self.buckets[b].entries.push(entry);
        AddResult::Added
    }

    fn add_replacement(
        &mut self,
        b: usize,
        node: NodeRecord,
        hash: B256,
        now: Instant,
    ) -> AddResult {
        if self.buckets[b]
            .replacements
            .iter()
            .any(|e| e.node.id == node.id)
        {
            return AddResult::Replacement;
        }
        if !self.ip_fits(b, &node.ip) {
            return AddResult::IpLimit;
        }
        self.add_ip(b, &node.ip);
        let reps = &mut self.buckets[b].replacements;
        reps.insert(0, Entry::new(node, hash, now));
        if reps.len() > MAX_REPLACEMENTS
            && let Some(old) = reps.pop()
        {
            self.remove_ip(b, &old.node.ip);
        }
        AddResult::Replacement
    }

    /// Records an answered liveness check; returns the entry's record sequence number
    /// (0 without a record), or `None` if the node is not an entry.
    pub fn mark_live(&mut self, id: &NodeId, now: Instant) -> Option<u64> {
        let hash = node_hash(id);
        let b = self.bucket_index(&hash)?;
        let e = self.buckets[b]
            .entries
            .iter_mut()
            .find(|e| e.node.id == *id)?;
        e.liveness_checks = e.liveness_checks.saturating_add(1);
        e.last_checked = Some(now);
        Some(e.node.enr.as_ref().map_or(0, |r| r.seq()))
    }

    /// Records a missed liveness check: the count drops to a third, and at zero the
    /// node is removed and a random replacement takes its place. Returns the
    /// replacement if one was promoted.
    pub fn mark_dead(&mut self, id: &NodeId, now: Instant) -> Option<NodeRecord> {
        let hash = node_hash(id);
        let b = self.bucket_index(&hash)?;
        let e = self.buckets[b]
            .entries
            .iter_mut()
            .find(|e| e.node.id == *id)?;
        e.liveness_checks /= 3;
        e.last_checked = Some(now);
        if e.liveness_checks > 0 {
            return None;
        }
        self.remove(id)
    }

    /// Removes an entry; a random replacement (if any) takes its place and is returned.
    pub fn remove(&mut self, id: &NodeId) -> Option<NodeRecord> {
        let hash = node_hash(id);
        let b = self.bucket_index(&hash)?;
        let i = self.buckets[b]
            .entries
            .iter()
            .position(|e| e.node.id == *id)?;
        let old = self.buckets[b].entries.remove(i);
        self.remove_ip(b, &old.node.ip);
        let n = self.buckets[b].replacements.len();
        if n == 0 {
            return None;
        }
        let r = self.rng.below(n);
        let rep = self.buckets[b].replacements.remove(r);
        // Its IP stays counted: it moves from replacement to entry in the same bucket.
        let node = rep.node.clone();
        self.buckets[b].entries.push(rep);
        Some(node)
    }

    /// Stores a node's record if it is newer than the one held (entries and
    /// replacements); the TCP port follows the record. Returns the updated node.
    pub fn set_enr(&mut self, enr: crate::Enr) -> Option<NodeRecord> {
        let id = enr.id();
        let hash = node_hash(&id);
        let b = self.bucket_index(&hash)?;
        let bucket = &mut self.buckets[b];
        let e = bucket
            .entries
            .iter_mut()
            .chain(bucket.replacements.iter_mut())
            .find(|e| e.node.id == id)?;
        if e.node
            .enr
            .as_ref()
            .is_some_and(|old| old.seq() >= enr.seq())
        {
            return None;
        }
        if let Some(tcp) = enr.tcp() {
            e.node.tcp = tcp;
        }
        e.node.enr = Some(enr);
        Some(e.node.clone())
    }

    /// The `n` entries closest to `target` (a keyspace position). With `prefer_live`,
    /// only nodes that answered a check, unless there are none (geth's rule for
    /// answering FindNode).
    pub fn closest(&self, target: &B256, n: usize, prefer_live: bool) -> Vec<NodeRecord> {
        let all = || self.buckets.iter().flat_map(|b| b.entries.iter());
        let mut picked: Vec<&Entry> = if prefer_live {
            all().filter(|e| e.is_live()).collect()
        } else {
            Vec::new()
        };
        if picked.is_empty() {
            picked = all().collect();
        }
        picked.sort_by_cached_key(|e| e.hash ^ *target);
        picked.truncate(n);
        picked.into_iter().map(|e| e.node.clone()).collect()
    }

    /// Up to `n` entries in random order, live ones first.
    pub fn random_nodes(&mut self, n: usize) -> Vec<NodeRecord> {
        let mut all: Vec<&Entry> = self.buckets.iter().flat_map(|b| b.entries.iter()).collect();
        self.rng.shuffle(&mut all);
        // Stable: the shuffle holds within the live and the unchecked.
        all.sort_by_key(|e| !e.is_live());
        all.into_iter().take(n).map(|e| e.node.clone()).collect()
    }

    /// Every entry.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.buckets.iter().flat_map(|b| b.entries.iter())
    }

    /// The next node to check: a never-checked entry first (oldest first), else the
    /// least recently checked entry of a random non-empty bucket, if its last check is
    /// older than `min_age`.
    pub fn next_to_check(&mut self, now: Instant, min_age: Duration) -> Option<NodeRecord> {
        let unchecked = self
            .entries()
            .filter(|e| e.last_checked.is_none())
            .min_by_key(|e| e.added);
        if let Some(e) = unchecked {
            return Some(e.node.clone());
        }
        let full: Vec<usize> = (0..BUCKET_COUNT)
            .filter(|&i| !self.buckets[i].entries.is_empty())
            .collect();
        if full.is_empty() {
            return None;
        }
        let b = &self.buckets[full[self.rng.below(full.len())]];
        let e = b.entries.iter().min_by_key(|e| e.last_checked)?;
        let last = e.last_checked.unwrap_or(e.added);
        (now.saturating_duration_since(last) >= min_age).then(|| e.node.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secp256k1::{SECP256K1, SecretKey};

    fn id(i: u32) -> NodeId {
        let mut b = [0u8; 32];
        b[..4].copy_from_slice(&(i + 1).to_be_bytes());
        b[31] = 1;
        crate::node_id(&SecretKey::from_byte_array(b).unwrap().public_key(SECP256K1))
    }

    fn node(i: u32, ip: [u8; 4]) -> NodeRecord {
        NodeRecord::new(id(i), IpAddr::from(ip), 30303, 30303)
    }

    /// Ids whose hashes land in the same bucket as `id(0)`'s around `local`.
    fn same_bucket(table: &Table, count: usize) -> Vec<u32> {
        let target = table.bucket_index(&node_hash(&id(0))).unwrap();
        (0..100_000u32)
            .filter(|&i| table.bucket_index(&node_hash(&id(i))) == Some(target))
            .take(count)
            .collect()
    }

    #[test]
    fn buckets_fill_then_replacements() {
        let mut t = Table::new(NodeId::repeat_byte(0x42));
        let now = Instant::now();
        // The biggest bucket (distance 256) takes half the keyspace: 40 ids suffice.
        let ids = same_bucket(&t, BUCKET_SIZE + MAX_REPLACEMENTS + 2);
        for (n, &i) in ids.iter().enumerate() {
            let ip = [127, 0, (n / 250) as u8, (n % 250) as u8 + 1];
            let r = t.add(node(i, ip), false, now);
            if n < BUCKET_SIZE {
                assert_eq!(r, AddResult::Added);
            } else {
                assert_eq!(r, AddResult::Replacement);
            }
        }
        assert_eq!(t.len(), BUCKET_SIZE);
        assert_eq!(
            t.add(node(ids[0], [127, 0, 0, 1]), false, now),
            AddResult::Present
        );
        // A dead entry gives way to a replacement.
        let first = id(ids[0]);
        let rep = t.mark_dead(&first, now).expect("replacement promoted");
        assert!(!t.contains(&first));
        assert!(t.contains(&rep.id));
        assert_eq!(t.len(), BUCKET_SIZE);
        // A live entry survives one miss (3 checks → 1).
        let second = id(ids[1]);
        for _ in 0..3 {
            t.mark_live(&second, now);
        }
        assert!(t.mark_dead(&second, now).is_none());
        assert!(t.contains(&second));
    }

    #[test]
    fn ip_limits_per_bucket_and_table() {
        let mut t = Table::new(NodeId::repeat_byte(0x42));
        let now = Instant::now();
        let ids = same_bucket(&t, 4);
        // Same /24, public: two per bucket.
        assert_eq!(
            t.add(node(ids[0], [8, 8, 8, 1]), false, now),
            AddResult::Added
        );
        assert_eq!(
            t.add(node(ids[1], [8, 8, 8, 2]), false, now),
            AddResult::Added
        );
        assert_eq!(
            t.add(node(ids[2], [8, 8, 8, 3]), false, now),
            AddResult::IpLimit
        );
        // Another /24 is fine, and so is a LAN address.
        assert_eq!(
            t.add(node(ids[2], [8, 8, 9, 3]), false, now),
            AddResult::Added
        );
        assert_eq!(
            t.add(node(ids[3], [10, 0, 0, 1]), false, now),
            AddResult::Added
        );
        // Ten per table: fill /24 8.8.7.x across buckets.
        let mut t = Table::new(NodeId::repeat_byte(0x42));
        let mut added = 0;
        for i in 0..2000u32 {
            if t.add(node(i, [8, 8, 7, (i % 200) as u8 + 1]), false, now) == AddResult::Added {
                added += 1;
            }
        }
        assert_eq!(added, TABLE_IP_LIMIT);
        // Removing one frees a place.
        let some = t.entries().next().unwrap().node.id;
        t.remove(&some);
        assert_eq!(t.len(), TABLE_IP_LIMIT - 1);
    }

    #[test]
    fn closest_and_checks() {
        let mut t = Table::new(NodeId::repeat_byte(1));
        let now = Instant::now();
        for i in 0..50u32 {
            t.add(node(i, [127, 0, 0, 1]), false, now);
        }
        let target = node_hash(&id(7));
        let c = t.closest(&target, 16, false);
        assert!(c.len() <= 16 && !c.is_empty());
        if t.contains(&id(7)) {
            assert_eq!(c[0].id, id(7));
        }
        // Sorted by xor distance.
        let d: Vec<B256> = c.iter().map(|n| node_hash(&n.id) ^ target).collect();
        assert!(d.windows(2).all(|w| w[0] <= w[1]));
        // prefer_live: only the live one.
        let live = c[3].id;
        t.mark_live(&live, now);
        let c = t.closest(&target, 16, true);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].id, live);
        // Unchecked nodes come up for checking first.
        let next = t.next_to_check(now, Duration::from_secs(60)).unwrap();
        assert!(t.get(&next.id).unwrap().last_checked.is_none());
        assert_eq!(t.random_nodes(5).len(), 5);
        assert_eq!(t.random_nodes(5)[0].id, live);
    }

    #[test]
    fn self_and_bad_addresses_are_refused() {
        let me = id(1);
        let mut t = Table::new(me);
        let now = Instant::now();
        assert_eq!(
            t.add(node(1, [127, 0, 0, 1]), true, now),
            AddResult::Refused
        );
        assert_eq!(t.add(node(2, [0, 0, 0, 0]), true, now), AddResult::Refused);
        assert!(t.is_empty());
    }
}
