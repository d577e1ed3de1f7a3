//! Eviction: whether a subpool is over its limits, which sender's tail goes (the
//! cheapest, locals spared within their share; in pending, the package with the least
//! average tip), and what is remembered of what left.

use super::*;

impl TxPool {
    pub(super) fn over_limit(&self, sub: SubPool) -> bool {
        let limit = self.cfg.limit(sub);
        let u = self.usage[sub as usize];
        u.txs > limit.max_txs || u.bytes > limit.max_bytes
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
        let remote = self.packages.first().copied();
        let local = if self.locals_over_share(SubPool::Pending) {
            self.local_packages.first().copied()
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
        let remote = self.tails[sub as usize].first().copied();
        let local = if self.locals_over_share(sub) {
            self.local_tails[sub as usize].first().copied()
        } else {
            None
        };
        let (_, id) = match (remote, local) {
            (Some(r), Some(l)) => r.min(l),
            (r, l) => r.or(l)?,
        };
        // By package, the victim is the sender with the cheapest pending suffix; it loses
        // its pending tail, as by the least tail, and the next eviction looks again (the
        // rest of its cheap suffix is then likely the victim, unless the room is made).
        let id = match sub {
            SubPool::Pending if self.cfg.evict_by_package => self.package_victim().unwrap_or(id),
            _ => id,
        };
        let (_, down_to) =
            self.sender(id).tails[sub as usize].expect("a sender in tails has a tail");
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
