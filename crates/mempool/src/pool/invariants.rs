//! The pool's invariants, checked by the unit and property tests.

use super::*;

impl TxPool {
    #[cfg(test)]
    /// [`TxPool::assert_consistent`], and what the subpools mean (for property tests):
    /// - every subpool is within its limits of count and bytes (local txs are exempt
    ///   from eviction only within a share of them);
    /// - a sender's pending txs are the longest run from its state nonce, nonces
    ///   contiguous, that it can afford in total and whose fee caps meet the head's fees;
    /// - along a sender's nonces, a non-blob tx is never in a better subpool than an
    ///   earlier one (pending, then base fee, then queued).
    pub(crate) fn assert_invariants(&self) {
        self.assert_consistent();
        for sub in SubPool::ALL {
            let (u, limit) = (self.limited_usage(sub), self.cfg.limit(sub));
            // Local txs are exempt only within a share of the limits, so nothing holds a
            // subpool over them.
            assert!(
                u.txs <= limit.max_txs && u.bytes <= limit.max_bytes,
                "{sub:?} over its limits: {u:?} > {limit:?}"
            );
        }
        let rank = |sub: SubPool| match sub {
            SubPool::Pending => 0,
            SubPool::BaseFee => 1,
            SubPool::Queued => 2,
            SubPool::Blob => 3,
        };
        for s in self.senders.iter().flatten() {
            let mut spent = U256::ZERO;
            let mut run_open = true;
            let mut worst = 0;
            for (i, (nonce, h)) in s.txs.iter().enumerate() {
                let e = &self.by_hash[h];
                let inner = e.tx.tx.tx().tx();
                spent = spent.saturating_add(e.tx.cost);
                let executable = run_open
                    && *nonce == s.nonce + i as u64
                    && spent <= s.balance
                    && inner.max_fee_per_gas() >= u128::from(self.head.base_fee)
                    && inner
                        .max_fee_per_blob_gas()
                        .is_none_or(|f| f >= self.head.blob_base_fee);
                assert_eq!(
                    e.subpool == SubPool::Pending,
                    executable,
                    "sender {} nonce {nonce}: {:?}, but executable is {executable}",
                    s.address,
                    e.subpool
                );
                run_open = executable;
                if !e.tx.is_blob() {
                    assert!(
                        rank(e.subpool) >= worst,
                        "sender {} nonce {nonce}: {:?} after a worse subpool",
                        s.address,
                        e.subpool
                    );
                    worst = rank(e.subpool);
                }
            }
        }
    }

    /// Every sender classified again by a whole walk ([`Self::reclassify`]): a test
    /// compares the subpools before and after.
    #[cfg(test)]
    pub(crate) fn reclassify_all(&mut self) {
        let ids: Vec<SenderId> = self.sender_ids.values().copied().collect();
        for id in ids {
            self.reclassify(id);
        }
    }

    #[cfg(test)]
    pub(crate) fn assert_consistent(&self) {
        let mut usage = [Usage::default(); 4];
        for (h, e) in &self.by_hash {
            assert_eq!(*h, e.tx.hash());
            let u = &mut usage[e.subpool as usize];
            u.txs += 1;
            u.bytes += e.tx.size();
            let id = self.sender_ids[&e.tx.sender];
            assert_eq!(self.sender(id).txs.get(&e.tx.nonce()), Some(h));
        }
        assert_eq!(usage, self.usage);
        let blobs: super::super::FastSet<B256> = self
            .by_hash
            .iter()
            .filter(|(_, e)| e.tx.is_blob())
            .map(|(h, _)| *h)
            .collect();
        assert_eq!(blobs, self.blob_txs, "every blob tx listed, nothing else");
        let blob_usage = Usage {
            txs: blobs.len(),
            bytes: blobs.iter().map(|h| self.by_hash[h].tx.size()).sum(),
        };
        assert_eq!(blob_usage, self.blob_usage);
        for s in self.senders.iter().flatten() {
            assert!(!s.txs.is_empty(), "empty senders are freed");
            assert!(s.txs.keys().all(|n| *n >= s.nonce), "no stale nonces");
            let cost = s
                .txs
                .values()
                .fold(U256::ZERO, |a, h| a + self.by_hash[h].tx.cost);
            assert_eq!(s.cost, cost, "a sender's cost is the sum of its txs'");
            assert_eq!(s.counted_local, s.local, "classified as it is now");
        }
        let mut local = [Usage::default(); 4];
        for (id, s) in self.senders.iter().enumerate() {
            let Some(s) = s else { continue };
            for (sub, tail) in s.tails.iter().enumerate() {
                let (mine, other) = if s.local {
                    (&self.local_tails[sub], &self.tails[sub])
                } else {
                    (&self.tails[sub], &self.local_tails[sub])
                };
                if let Some((key, _)) = tail {
                    assert!(mine.contains(&(*key, SenderId(id as u32))));
                    assert!(!other.contains(&(*key, SenderId(id as u32))));
                }
            }
            for h in s.txs.values().filter(|_| s.local) {
                let e = &self.by_hash[h];
                local[e.subpool as usize].txs += 1;
                local[e.subpool as usize].bytes += e.tx.size();
            }
        }
        assert_eq!(
            local, self.local_usage,
            "local usage is the local senders' txs"
        );
        // Each sender's counts and tails are those of its txs' subpools as they stand
        // (however they were derived: a whole walk or the append path).
        let base_fee = self.head.base_fee;
        for s in self.senders.iter().flatten() {
            let mut counts = [Usage::default(); 4];
            let mut tails: [Option<(EvictKey, u64)>; 4] = [None; 4];
            for (nonce, h) in &s.txs {
                let e = &self.by_hash[h];
                let c = &mut counts[e.subpool as usize];
                c.txs += 1;
                c.bytes += e.tx.size();
                let (tip, cap) = priority(&e.tx, base_fee);
                tails[e.subpool as usize] = Some(((tip, cap, u64::MAX - e.seq), *nonce));
            }
            assert_eq!(s.counts, counts, "sender {}: counts", s.address);
            assert_eq!(s.tails, tails, "sender {}: tails", s.address);
        }
        let tails: usize = self
            .tails
            .iter()
            .chain(&self.local_tails)
            .map(|t| t.len())
            .sum();
        let sender_tails: usize = self
            .senders
            .iter()
            .flatten()
            .map(|s| s.tails.iter().flatten().count())
            .sum();
        assert_eq!(
            tails, sender_tails,
            "one indexed tail per sender and subpool"
        );
        // Each sender's least pending suffix is the one a scan of its pending tips finds,
        // and it is indexed once, in the packages of its kind (local or remote).
        let mut indexed = 0;
        for (id, s) in self.senders.iter().enumerate() {
            let Some(s) = s else { continue };
            let tips: Vec<u128> = s
                .txs
                .values()
                .map(|h| &self.by_hash[h])
                .take_while(|e| e.subpool == SubPool::Pending)
                .map(|e| priority(&e.tx, base_fee).0)
                .collect();
            let least = packages::least_by_scan(&tips);
            assert_eq!(s.suffixes.least(), least, "sender {}: suffixes", s.address);
            let newest = s.tails[SubPool::Pending as usize].map(|((_, _, n), _)| n);
            assert_eq!(
                s.package,
                least.zip(newest).map(|((a, _), n)| (a, n)),
                "sender {}: package key",
                s.address
            );
            let (mine, other) = if s.local {
                (&self.local_packages, &self.packages)
            } else {
                (&self.packages, &self.local_packages)
            };
            if let Some(k) = s.package {
                let key = (k, SenderId(id as u32));
                assert!(mine.contains(&key), "sender {}: indexed", s.address);
                assert!(!other.contains(&key), "sender {}: once", s.address);
                indexed += 1;
            }
        }
        assert_eq!(
            self.packages.len() + self.local_packages.len(),
            indexed,
            "one indexed package per sender with pending txs"
        );
    }
}
