//! Classification: which subpool each of a sender's transactions belongs in, walked in
//! nonce order from the state nonce ([`TxPool::reclassify`]), or kept up cheaply when a
//! transaction is appended at the top ([`TxPool::classify_appended`]) or the top is cut
//! off ([`TxPool::classify_truncated`]).

use super::*;

/// Whether a blob tx whose fee caps are below the next block's fees is still announced:
/// within one block's largest fall of both, as go-ethereum's blob pool decides
/// (`announceThreshold = -1` in fee jumps): the base fee falls at most 1/8 a block,
/// the blob base fee at most ~1/1.17 since the BPO forks (EIP-7892). Such a tx may be
/// includable in the very next block, so peers and builders should have it by then;
/// one further below is a limit order the network need not carry, and is announced
/// only once the fees come near it. A blob tx that pays the fees now is announced as
/// any pending tx.
pub(crate) fn near_fees(
    inner: &moat_common::transaction::Transaction,
    base_fee: u64,
    blob_base_fee: u128,
) -> bool {
    let base_ok = inner.max_fee_per_gas().saturating_mul(9) >= u128::from(base_fee) * 8;
    let blob_ok = inner
        .max_fee_per_blob_gas()
        .is_none_or(|f| f.saturating_mul(117) >= blob_base_fee.saturating_mul(100));
    base_ok && blob_ok
}

impl Entry {
    /// Whether classing this tx into `sub` publishes it for announcement: a plain tx when
    /// it becomes pending; a blob tx when it becomes `announceable` (pending, or near the
    /// fees with every tx below it announceable), once per return. Call before
    /// `subpool` is updated.
    fn announce(&mut self, sub: SubPool, announceable: bool) -> bool {
        if self.tx.is_blob() {
            let fresh = announceable && !self.announced;
            self.announced = announceable;
            fresh
        } else {
            sub == SubPool::Pending && self.subpool != sub
        }
    }
}

impl TxPool {
    /// Classifies `hash`, just inserted as sender `id`'s highest nonce, from the class of
    /// the tx below it (`last`, nonce `last_nonce`): O(1) (and O(log n) for its eviction
    /// key) where [`Self::reclassify`] walks the sender's whole run. Gives what
    /// `reclassify` would. Declines (`false`, nothing changed) when the class below cannot
    /// be read from its subpool (a blob tx in the blob subpool: its run may have ended
    /// for either reason) or when the sender's local flag has changed since it was last
    /// classified (its keys must move between the indices).
    pub(super) fn classify_appended(
        &mut self,
        id: SenderId,
        last: B256,
        last_nonce: u64,
        hash: B256,
    ) -> bool {
        let s = self.senders[id.0 as usize].as_mut().expect("live sender");
        if s.local != s.counted_local {
            return false;
        }
        // The class the walk of `reclassify` carries past the tx below (`floor`).
        let floor = match self.by_hash[&last].subpool {
            SubPool::Blob => return false,
            sub @ (SubPool::Pending | SubPool::BaseFee | SubPool::Queued) => sub,
        };
        let (base_fee, blob_base_fee) = (self.head.base_fee, self.head.blob_base_fee);
        let entry = self
            .by_hash
            .get_mut(&hash)
            .expect("the newcomer is indexed by hash");
        let nonce = entry.tx.nonce();
        let inner = entry.tx.tx.tx().tx();
        // Below a pending or base-fee tx the run is unbroken from the state nonce and
        // affordable, so the newcomer's own class needs only its nonce, the sender's
        // total cost (everything it holds is at or below it) and its fee caps.
        let own = if nonce != last_nonce + 1 || s.cost > s.balance {
            SubPool::Queued
        } else if inner.max_fee_per_gas() < u128::from(base_fee)
            || inner
                .max_fee_per_blob_gas()
                .is_some_and(|f| f < blob_base_fee)
        {
            SubPool::BaseFee
        } else {
            SubPool::Pending
        };
        let floor = floor.max(own);
        let sub = if entry.tx.is_blob() && floor != SubPool::Pending {
            SubPool::Blob
        } else {
            floor
        };
        let size = entry.tx.size();
        // Announced once pending, and a blob tx once near enough to it (the tx below is
        // pending here: a sender holds blob txs or others, not both).
        let near = own == SubPool::Pending
            || (own == SubPool::BaseFee && near_fees(inner, base_fee, blob_base_fee));
        if entry.announce(sub, near) {
            self.newly_pending.push(hash);
        }
        if entry.subpool != sub {
            let from = &mut self.usage[entry.subpool as usize];
            from.txs -= 1;
            from.bytes -= size;
            let to = &mut self.usage[sub as usize];
            to.txs += 1;
            to.bytes += size;
            entry.subpool = sub;
        }
        // The highest nonce: the sender's new tail in its subpool.
        let (tip, cap) = priority(&entry.tx, base_fee);
        let key = (tip, cap, u64::MAX - entry.seq);
        let indexed = if s.counted_local {
            let total = &mut self.local_usage[sub as usize];
            total.txs += 1;
            total.bytes += size;
            &mut self.local_tails[sub as usize]
        } else {
            &mut self.tails[sub as usize]
        };
        if let Some((old, _)) = s.tails[sub as usize].replace((key, nonce)) {
            indexed.remove(&(old, id));
        }
        indexed.insert((key, id));
        let own = &mut s.counts[sub as usize];
        own.txs += 1;
        own.bytes += size;
        // One more pending tx: the sender's least suffix average may move.
        if sub == SubPool::Pending {
            s.suffixes.push(tip);
            let packages = if s.counted_local {
                &mut self.local_packages
            } else {
                &mut self.packages
            };
            if let Some(old) = s.package.take() {
                packages.remove(&(old, id));
            }
            s.package = s.suffixes.least().map(|(average, _)| (average, key.2));
            if let Some(k) = s.package {
                packages.insert((k, id));
            }
        }
        #[cfg(test)]
        {
            self.appends_classified += 1;
        }
        true
    }

    /// Re-derives the subpool of each of a sender's transactions and its eviction keys;
    /// frees the sender when it has none left.
    pub(super) fn reclassify(&mut self, id: SenderId) {
        let base_fee = self.head.base_fee;
        let blob_base_fee = self.head.blob_base_fee;
        let s = self.senders[id.0 as usize].as_mut().expect("live sender");
        let indexed = if s.counted_local {
            &mut self.local_tails
        } else {
            &mut self.tails
        };
        for (sub, tail) in s.tails.iter_mut().enumerate() {
            if let Some((key, _)) = tail.take() {
                indexed[sub].remove(&(key, id));
            }
        }
        // The package key leaves its index only if it changes (a new base fee often
        // leaves every tip as it was): see the end.
        let old_package = s.package.take().map(|k| (k, s.counted_local));
        s.suffixes.clear();
        if s.counted_local {
            for (total, own) in self.local_usage.iter_mut().zip(&s.counts) {
                total.txs -= own.txs;
                total.bytes -= own.bytes;
            }
        }
        s.counts = [Usage::default(); 4];
        s.counted_local = false;
        if s.txs.is_empty() {
            let address = s.address;
            if let Some((k, local)) = old_package {
                self.packages_of(local).remove(&(k, id));
            }
            self.senders[id.0 as usize] = None;
            self.free_ids.push(id.0);
            self.sender_ids.remove(&address);
            return;
        }
        #[cfg(test)]
        {
            self.walked += s.txs.len() as u64;
        }
        let mut expected = s.nonce;
        let mut gapped = false;
        let mut spent = U256::ZERO;
        let mut floor = SubPool::Pending;
        // Every tx below is announceable (a blob tx is announced in nonce order only).
        let mut announceable = true;
        let mut tails: [Option<(EvictKey, u64)>; 4] = [None; 4];
        let mut counts = [Usage::default(); 4];
        let mut suffixes = std::mem::take(&mut s.suffixes);
        for (nonce, hash) in &s.txs {
            let entry = self
                .by_hash
                .get_mut(hash)
                .expect("sender txs are indexed by hash");
            let inner = entry.tx.tx.tx().tx();
            gapped |= *nonce != expected;
            expected = nonce + 1;
            spent = spent.saturating_add(entry.tx.cost);
            let own = if gapped || spent > s.balance {
                SubPool::Queued
            } else if inner.max_fee_per_gas() < u128::from(base_fee)
                || inner
                    .max_fee_per_blob_gas()
                    .is_some_and(|f| f < blob_base_fee)
            {
                SubPool::BaseFee
            } else {
                SubPool::Pending
            };
            floor = floor.max(own);
            let sub = if entry.tx.is_blob() && floor != SubPool::Pending {
                SubPool::Blob
            } else {
                floor
            };
            announceable &= own == SubPool::Pending
                || (own == SubPool::BaseFee && near_fees(inner, base_fee, blob_base_fee));
            if entry.announce(sub, announceable) {
                self.newly_pending.push(*hash);
            }
            if entry.subpool != sub {
                let size = entry.tx.size();
                let from = &mut self.usage[entry.subpool as usize];
                from.txs -= 1;
                from.bytes -= size;
                let to = &mut self.usage[sub as usize];
                to.txs += 1;
                to.bytes += size;
                entry.subpool = sub;
            }
            let (tip, cap) = priority(&entry.tx, base_fee);
            tails[sub as usize] = Some(((tip, cap, u64::MAX - entry.seq), *nonce));
            let c = &mut counts[sub as usize];
            c.txs += 1;
            c.bytes += entry.tx.size();
            if sub == SubPool::Pending {
                suffixes.push(tip);
            }
        }
        s.tails = tails;
        s.counts = counts;
        s.counted_local = s.local;
        s.package = suffixes
            .least()
            .zip(tails[SubPool::Pending as usize])
            .map(|((average, _), ((_, _, newest), _))| (average, newest));
        s.suffixes = suffixes;
        let indexed = if s.local {
            for (total, own) in self.local_usage.iter_mut().zip(&counts) {
                total.txs += own.txs;
                total.bytes += own.bytes;
            }
            &mut self.local_tails
        } else {
            &mut self.tails
        };
        for (sub, tail) in tails.iter().enumerate() {
            if let Some((key, _)) = tail {
                indexed[sub].insert((*key, id));
            }
        }
        let new_package = s.package.map(|k| (k, s.local));
        if old_package != new_package {
            if let Some((k, local)) = old_package {
                self.packages_of(local).remove(&(k, id));
            }
            if let Some((k, local)) = new_package {
                self.packages_of(local).insert((k, id));
            }
        }
    }

    /// Sender `id` has lost its txs from nonce `from` up; `gone` holds each one's subpool
    /// and size (they are out of every index but the sender's classification). The txs
    /// below keep their classes, as a tx's class depends only on the txs below it, so
    /// only the sender's tails, counts, pending tips and package key change: O(log n)
    /// plus the pending tips of one segment ([`packages::Suffixes::truncate`]), where
    /// [`Self::reclassify`] walks every tx the sender holds. A sender holding thousands of
    /// cheap txs (a run may pass its allowance while pending is under half full) would
    /// otherwise make each eviction of its top, paid by whoever's admission needed the
    /// room, walk them all under the pool's lock. Falls back to the walk when the sender's
    /// local flag changed since it was classified, and frees a sender left with nothing.
    pub(super) fn classify_truncated(
        &mut self,
        id: SenderId,
        from: u64,
        gone: &[(SubPool, usize)],
    ) {
        let s = self.senders[id.0 as usize].as_ref().expect("live sender");
        let Some((&top_nonce, top_hash)) = s.txs.last_key_value() else {
            return self.reclassify(id);
        };
        if s.local != s.counted_local {
            return self.reclassify(id);
        }
        let base_fee = self.head.base_fee;
        let top = &self.by_hash[top_hash];
        let top_sub = top.subpool;
        let (tip, cap) = priority(&top.tx, base_fee);
        let top_key = (tip, cap, u64::MAX - top.seq);
        let s = self.senders[id.0 as usize].as_mut().expect("live sender");
        let (indexed, packages) = if s.counted_local {
            (&mut self.local_tails, &mut self.local_packages)
        } else {
            (&mut self.tails, &mut self.packages)
        };
        // A subpool whose tail was cut: its txs were all at or past the cut unless it is
        // the class of the new top (classes only rise along a run), whose tail that is.
        for sub in SubPool::ALL {
            let i = sub as usize;
            if let Some((key, nonce)) = s.tails[i]
                && nonce >= from
            {
                indexed[i].remove(&(key, id));
                s.tails[i] = (sub == top_sub).then_some((top_key, top_nonce));
                if sub == top_sub {
                    indexed[i].insert((top_key, id));
                }
            }
        }
        for &(sub, bytes) in gone {
            let own = &mut s.counts[sub as usize];
            own.txs -= 1;
            own.bytes -= bytes;
            if s.counted_local {
                let total = &mut self.local_usage[sub as usize];
                total.txs -= 1;
                total.bytes -= bytes;
            }
        }
        // The pending txs are the run's first ones: the tips kept are theirs.
        s.suffixes.truncate(s.counts[SubPool::Pending as usize].txs);
        let package = s
            .suffixes
            .least()
            .zip(s.tails[SubPool::Pending as usize])
            .map(|((average, _), ((_, _, newest), _))| (average, newest));
        if package != s.package {
            if let Some(old) = s.package {
                packages.remove(&(old, id));
            }
            if let Some(new) = package {
                packages.insert((new, id));
            }
            s.package = package;
        }
    }
}
