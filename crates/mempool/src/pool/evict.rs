//! Eviction: whether a subpool is over its limits, which sender's tail goes (the
//! cheapest, locals spared within their share; in pending, the package with the least
//! average tip), and what is remembered of what left.

use super::*;

impl TxPool {
    pub(super) fn over_limit(&self, sub: SubPool) -> bool {
        let limit = self.cfg.limit(sub);
        let u = self.limited_usage(sub);
        u.txs > limit.max_txs || u.bytes > limit.max_bytes
    }

    /// What counts against `sub`'s limits: blob txs count against the blob subpool's
    /// (`--blobpool.datacap`) wherever their class puts them, and not against the
    /// pending subpool's, where the executable ones sit (a few hundred sidecars would
    /// otherwise fill its bytes and push plain txs out, or be refused as underpriced).
    pub(crate) fn limited_usage(&self, sub: SubPool) -> Usage {
        match sub {
            SubPool::Pending => {
                let pending_blobs = Usage {
                    txs: self.blob_usage.txs - self.usage[SubPool::Blob as usize].txs,
                    bytes: self.blob_usage.bytes - self.usage[SubPool::Blob as usize].bytes,
                };
                let u = self.usage[sub as usize];
                Usage {
                    txs: u.txs - pending_blobs.txs,
                    bytes: u.bytes - pending_blobs.bytes,
                }
            }
            SubPool::Blob => self.blob_usage,
            SubPool::BaseFee | SubPool::Queued => self.usage[sub as usize],
        }
    }

    /// Whether sender `id` holds blob txs (a sender holds blob txs or others, never both).
    fn holds_blobs(&self, id: SenderId) -> bool {
        let s = self.sender(id);
        s.txs
            .values()
            .next()
            .is_some_and(|h| self.by_hash[h].tx.is_blob())
    }

    /// The first of `index` (worst first) whose sender holds blob txs (`blobs`) or not.
    fn first_of_kind<K: Copy>(
        &self,
        index: &BTreeSet<(K, SenderId)>,
        blobs: bool,
    ) -> Option<(K, SenderId)> {
        index
            .iter()
            .find(|(_, id)| self.holds_blobs(*id) == blobs)
            .copied()
    }

    /// Evicts until every subpool is within its limits (or nothing there can go);
    /// returns the hashes evicted.
    pub(super) fn evict_over_limits(&mut self) -> Vec<B256> {
        let mut evicted = Vec::new();
        for sub in SubPool::ALL {
            while self.over_limit(sub) {
                let Some(removed) = self.evict_worst(sub) else {
                    break;
                };
                evicted.extend(removed);
            }
        }
        evicted
    }

    /// Whether local senders' txs in `sub` pass their share of its limits (then they are
    /// candidates for eviction like any other).
    pub(super) fn locals_over_share(&self, sub: SubPool) -> bool {
        let limit = self.cfg.local_limit(sub);
        let u = self.local_usage[sub as usize];
        u.txs > limit.max_txs || u.bytes > limit.max_bytes
    }

    pub(super) fn note_evicted(&mut self, tx: Arc<PoolTx>) {
        self.let_go.remember(Arc::clone(&tx), self.cfg.let_go);
        if tx.origin.is_local() {
            self.evicted_locals.push(tx);
        }
    }

    /// The package index of local or of remote senders.
    pub(super) fn packages_of(&mut self, local: bool) -> &mut BTreeSet<(PackageKey, SenderId)> {
        if local {
            &mut self.local_packages
        } else {
            &mut self.packages
        }
    }

    /// The sender whose pending suffix (its pending txs from some nonce to its last) has
    /// the least average tip at the current base fee, among remote senders and, while
    /// locals pass their share, local ones: the victim of eviction by package. O(log n):
    /// the first of the packages' indices.
    pub(super) fn package_victim(&self) -> Option<SenderId> {
        // Blob senders' txs do not count against the pending subpool's limits.
        let remote = self.first_of_kind(&self.packages, false);
        let local = if self.locals_over_share(SubPool::Pending) {
            self.first_of_kind(&self.local_packages, false)
        } else {
            None
        };
        let (_, id) = match (remote, local) {
            (Some(r), Some(l)) => r.min(l),
            (r, l) => r.or(l)?,
        };
        Some(id)
    }

    /// Evicts the worst sender's transactions from its top nonce down to its last one in
    /// `sub`: the worst remote sender, or the worst of all while local senders' txs pass
    /// their share of `sub`. `None` when no sender there can be evicted.
    pub(super) fn evict_worst(&mut self, sub: SubPool) -> Option<Vec<B256>> {
        // Which txs count against `sub`'s limits ([`Self::limited_usage`]), and so where
        // the victims are: for the pending subpool its plain txs; for the blob
        // subpool the non-executable blob txs first, then the executable ones (in the
        // pending subpool).
        let worst = |pool: &Self, index: SubPool, blobs: Option<bool>| {
            let i = index as usize;
            let pick = |set: &BTreeSet<(EvictKey, SenderId)>| match blobs {
                Some(kind) => pool.first_of_kind(set, kind),
                None => set.first().copied(),
            };
            let remote = pick(&pool.tails[i]);
            let local = if pool.locals_over_share(sub) {
                pick(&pool.local_tails[i])
            } else {
                None
            };
            match (remote, local) {
                (Some(r), Some(l)) => Some(r.min(l)),
                (r, l) => r.or(l),
            }
        };
        let (from, found) = match sub {
            SubPool::Pending => (sub, worst(self, sub, Some(false))),
            SubPool::Blob => match worst(self, sub, None) {
                Some(found) => (sub, Some(found)),
                None => (SubPool::Pending, worst(self, SubPool::Pending, Some(true))),
            },
            SubPool::BaseFee | SubPool::Queued => (sub, worst(self, sub, None)),
        };
        let (_, id) = found?;
        // By package, the victim is the sender with the cheapest pending suffix; it loses
        // its pending tail, as by the least tail, and the next eviction looks again (the
        // rest of its cheap suffix is then likely the victim, unless the room is made).
        let id = match sub {
            SubPool::Pending if self.cfg.evict_by_package => self.package_victim().unwrap_or(id),
            _ => id,
        };
        let (_, down_to) =
            self.sender(id).tails[from as usize].expect("a sender in tails has a tail");
        let doomed: Vec<B256> = self
            .sender(id)
            .txs
            .range(down_to..)
            .map(|(_, h)| *h)
            .collect();
        let mut gone = Vec::with_capacity(doomed.len());
        for h in &doomed {
            let subpool = self.by_hash.get(h).map(|e| e.subpool);
            if let (Some(subpool), Some(tx)) = (subpool, self.remove_entry(h)) {
                gone.push((subpool, tx.size()));
                self.note_evicted(tx);
            }
        }
        self.classify_truncated(id, down_to, &gone);
        Some(doomed)
    }
}
