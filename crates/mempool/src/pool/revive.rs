//! Txs let go for room, remembered so that a later nonce of their sender can bring them
//! back as a package.
//!
//! When the pool is full, eviction takes a sender's cheapest tail; the stream may later
//! bring that sender's next nonce at a rich tip, which then waits behind a gap nothing
//! fills; or eviction takes a sender's pending tail with the queued txs above it, rich
//! ones waiting for a gap-filler. [`LetGo`] remembers what left for room (evicted for
//! price, displaced by the sender's gap-filler, or a newcomer that would itself have been
//! the first evicted, refused as underpriced), bounded in count and bytes, oldest
//! forgotten first. When a new tx arrives behind a gap that remembered txs fill, the
//! package (the remembered txs and the sender's pooled txs in the gap, the newcomer, and
//! the pooled or remembered txs it makes executable above it) is judged
//! by its ancestor score, as Bitcoin Core's mempool judges a package: Σ tip × gas / Σ gas
//! at the current base fee. It comes back when pending has room for it, or when that
//! score beats the tip of every tail eviction would take to make the room. Otherwise the
//! newcomer is queued as before. A package is at most the sender's allowance (slots +
//! queue of its class), so judging one costs at most that many lookups: a stream of one
//! sender's nonces refused at a full pool does not make each newcomer walk every refused
//! nonce before it.

use super::{Plan, SenderId, SubPool, TxPool, Usage, priority, run_end};
use crate::config::SubPoolLimit;
use crate::state::AccountState;
use crate::{FastMap as HashMap, PoolTx};
use alloy_primitives::{Address, B256};
use std::collections::VecDeque;
use std::sync::Arc;

/// Txs that left the pool for room, by sender and nonce (the latest let go per nonce),
/// within a count and a byte bound: past either, the oldest are forgotten.
#[derive(Default)]
pub(crate) struct LetGo {
    by_nonce: HashMap<(Address, u64), Arc<PoolTx>>,
    /// Arrival order; entries whose nonce has been forgotten or let go again since are
    /// skipped when they reach the front.
    order: VecDeque<(Address, u64, B256)>,
    bytes: usize,
}

impl LetGo {
    /// Remembers `tx` (not a blob tx: its sidecar is large and a blob sender's txs are
    /// contiguous anyway), then forgets the oldest until within `limit`.
    pub(crate) fn remember(&mut self, tx: Arc<PoolTx>, limit: SubPoolLimit) {
        if tx.is_blob() || limit.max_txs == 0 || tx.size() > limit.max_bytes {
            return;
        }
        let key = (tx.sender, tx.nonce());
        self.order.push_back((key.0, key.1, tx.hash()));
        self.bytes += tx.size();
        if let Some(old) = self.by_nonce.insert(key, tx) {
            self.bytes -= old.size();
        }
        while self.by_nonce.len() > limit.max_txs
            || self.bytes > limit.max_bytes
            || self.order.len() > 2 * limit.max_txs
        {
            let Some((sender, nonce, hash)) = self.order.pop_front() else {
                break;
            };
            if self
                .by_nonce
                .get(&(sender, nonce))
                .is_some_and(|t| t.hash() == hash)
            {
                self.forget(&sender, nonce);
            }
        }
    }

    /// Forgets what is remembered at `sender`'s `nonce`.
    pub(crate) fn forget(&mut self, sender: &Address, nonce: u64) -> Option<Arc<PoolTx>> {
        let gone = self.by_nonce.remove(&(*sender, nonce))?;
        self.bytes -= gone.size();
        Some(gone)
    }

    fn get(&self, sender: &Address, nonce: u64) -> Option<&Arc<PoolTx>> {
        self.by_nonce.get(&(*sender, nonce))
    }

    /// What is remembered: count and bytes.
    pub(crate) fn usage(&self) -> Usage {
        Usage {
            txs: self.by_nonce.len(),
            bytes: self.bytes,
        }
    }
}

impl TxPool {
    /// The remembered txs that `tx`'s package needs back, in nonce order, if the package
    /// is worth the room it takes (see the module's doc); `None` otherwise.
    fn package(&self, tx: &PoolTx, account: AccountState) -> Option<Vec<Arc<PoolTx>>> {
        if tx.is_blob() || self.let_go.usage().txs == 0 {
            return None;
        }
        let s = self.sender_ids.get(&tx.sender).map(|id| self.sender(*id));
        let state_nonce = s.map_or(account.nonce, |s| s.nonce);
        let start = s.map_or(state_nonce, |s| run_end(s, state_nonce));
        let nonce = tx.nonce();
        if nonce <= start {
            return None;
        }
        // A package is at most the sender's allowance (slots + queue of its class): the
        // txs brought back are placed under the same rules, and a sender's remembered
        // txs were pooled within it or refused. Past it the package is not looked at, so
        // a stream of one sender's nonces, each refused as underpriced and remembered,
        // costs each newcomer at most that many lookups under the pool's lock, not one
        // per nonce refused before it.
        let local = s.is_some_and(|s| s.local) || self.cfg.is_local(tx.origin, &tx.sender);
        let most = {
            let (slots, queue) = self.cfg.account_allowance(local);
            (slots + queue) as u64
        };
        if nonce - start >= most {
            return None;
        }
        let base_fee = self.head.base_fee;
        let worth = |t: &PoolTx| {
            let g = u128::from(t.tx.tx().tx().gas_limit());
            (priority(t, base_fee).0.saturating_mul(g), g)
        };
        let pooled = |n: u64| s.and_then(|s| s.txs.get(&n)).map(|h| &self.by_hash[h].tx);
        // The chain from the run's end: per tx its tip × gas, its gas, and the tx if it is
        // a remembered one. A link is the pooled tx at a nonce, else the remembered one.
        let link = |n: u64| -> Option<(u128, u128, Option<&Arc<PoolTx>>)> {
            #[cfg(test)]
            self.package_links.set(self.package_links.get() + 1);
            if let Some(t) = pooled(n) {
                let (v, g) = worth(t);
                Some((v, g, None))
            } else {
                let t = self.let_go.get(&tx.sender, n)?;
                let (v, g) = worth(t);
                Some((v, g, Some(t)))
            }
        };
        // Below the newcomer every link is needed (they fill its gap)...
        let mut chain = (start..nonce).map(link).collect::<Option<Vec<_>>>()?;
        let newcomer = chain.len();
        let (v, g) = worth(tx);
        chain.push((v, g, None));
        // ...above it, as far as they go: pooled txs, and remembered ones (let go with the
        // tail below them, they may come back with it).
        chain.extend(
            (nonce + 1..)
                .map_while(link)
                .take((most as usize).saturating_sub(chain.len())),
        );
        // The package: the prefix through the newcomer or past it with the best ancestor
        // score (a block takes a prefix of a run, so a cheap top does not count against
        // the rich txs below it), and the pooled txs right above it, which come along.
        let (mut value, mut gas) = (0u128, 0u128);
        let mut best: Option<(u128, usize)> = None;
        for (i, (v, g, _)) in chain.iter().enumerate() {
            value = value.saturating_add(*v);
            gas = gas.saturating_add(*g);
            let score = value / gas.max(1);
            if i >= newcomer && best.is_none_or(|(b, _)| score > b) {
                best = Some((score, i));
            }
        }
        let (score, mut last) = best?;
        while chain.get(last + 1).is_some_and(|c| c.2.is_none()) {
            last += 1;
        }
        let back: Vec<Arc<PoolTx>> = chain[..=last]
            .iter()
            .filter_map(|c| c.2.map(Arc::clone))
            .collect();
        if back.is_empty() {
            return None;
        }
        // Everything in the package becomes executable.
        let moved = last + 1;
        let limit = self.cfg.limit(SubPool::Pending).max_txs;
        let used = self.usage(SubPool::Pending).txs;
        if used + moved <= limit {
            return Some(back);
        }
        // The tails eviction would take for the room, worst first (locals only while
        // they pass their share): the package must beat the best of them.
        let need = used + moved - limit;
        let sub = SubPool::Pending as usize;
        let mut worst: Vec<u128> = self.tails[sub]
            .iter()
            .take(need)
            .map(|((tip, _, _), _)| *tip)
            .collect();
        if self.locals_over_share(SubPool::Pending) {
            worst.extend(
                self.local_tails[sub]
                    .iter()
                    .take(need)
                    .map(|((tip, _, _), _)| *tip),
            );
            worst.sort_unstable();
        }
        // Fewer candidates than the room needs: the package's own top goes for the rest.
        let bar = *worst.get(need - 1).or(worst.last())?;
        (score > bar).then_some(back)
    }

    /// Brings back the remembered txs `tx`'s package needs, if it is worth it, and checks
    /// `tx` again over them; returns the plan for `tx` (the one given when nothing comes
    /// back). The txs brought back are placed and classified, not yet held to the
    /// subpools' limits: the caller's insertion does that.
    pub(super) fn revive(&mut self, tx: &PoolTx, account: AccountState, plan: Plan) -> Plan {
        let Some(back) = self.package(tx, account) else {
            return plan;
        };
        // The remembered txs below the newcomer must all come back (they fill its gap);
        // those above it come back as far as they pass.
        let needed = back.iter().filter(|t| t.nonce() < tx.nonce()).count();
        let mut id: Option<SenderId> = self.sender_ids.get(&tx.sender).copied();
        let mut placed = Vec::new();
        for t in back {
            match self.check(&t, account) {
                Ok(Plan {
                    replaces: None,
                    displaces: None,
                }) => {}
                Ok(_) | Err(_) => break,
            }
            let sid = *id.get_or_insert_with(|| self.new_sender(tx.sender, account));
            placed.push(t.hash());
            self.place(sid, t);
        }
        let Some(id) = id else {
            return plan;
        };
        self.reclassify(id);
        let whole = placed.len() >= needed;
        match self.check(tx, account) {
            Ok(p) if whole && !placed.is_empty() => {
                for h in &placed {
                    let e = &self.by_hash[h];
                    let (sender, nonce) = (e.tx.sender, e.tx.nonce());
                    self.let_go.forget(&sender, nonce);
                }
                p
            }
            _ => {
                // Not all of it came back, or the newcomer no longer passes: as it was.
                for h in &placed {
                    if let Some(t) = self.remove_entry(h) {
                        self.let_go.remember(t, self.cfg.let_go);
                    }
                }
                self.newly_pending.retain(|h| !placed.contains(h));
                self.reclassify(id);
                plan
            }
        }
    }

    /// Indexes `tx` as one of sender `id`'s txs (provisionally queued; the caller
    /// classifies the sender).
    fn place(&mut self, id: SenderId, tx: Arc<PoolTx>) {
        let hash = tx.hash();
        let nonce = tx.nonce();
        let cost = tx.cost;
        let local = self.cfg.is_local(tx.origin, &tx.sender);
        for a in &tx.authorities {
            *self.authorities.entry(*a).or_insert(0) += 1;
        }
        let u = &mut self.usage[SubPool::Queued as usize];
        u.txs += 1;
        u.bytes += tx.size();
        let seq = self.next_seq;
        self.next_seq += 1;
        self.by_hash.insert(
            hash,
            super::Entry {
                tx,
                subpool: SubPool::Queued,
                seq,
                announced: false,
            },
        );
        let s = self.sender_mut(id);
        s.txs.insert(nonce, hash);
        s.cost = s.cost.saturating_add(cost);
        s.local |= local;
    }

    /// What is remembered of txs let go for room (for tests).
    #[cfg(test)]
    pub(crate) fn let_go_usage(&self) -> Usage {
        self.let_go.usage()
    }

    /// Whether `hash` is remembered (for tests).
    #[cfg(test)]
    pub(crate) fn let_go_holds(&self, hash: &B256) -> bool {
        self.let_go.by_nonce.values().any(|t| t.hash() == *hash)
    }

    /// The memory's rules: within its bounds, its byte count true, and nothing it holds
    /// is pooled at its nonce (what comes back or is taken anew is forgotten).
    #[cfg(test)]
    pub(crate) fn assert_let_go(&self) {
        let limit = self.cfg.let_go;
        let m = &self.let_go;
        assert!(m.by_nonce.len() <= limit.max_txs, "count over its bound");
        assert!(m.bytes <= limit.max_bytes, "bytes over their bound");
        assert!(
            m.order.len() <= 2 * limit.max_txs.max(1),
            "order over its bound"
        );
        let bytes: usize = m.by_nonce.values().map(|t| t.size()).sum();
        assert_eq!(bytes, m.bytes);
        for ((sender, nonce), t) in &m.by_nonce {
            assert_eq!((t.sender, t.nonce()), (*sender, *nonce));
            let pooled = self
                .sender_ids
                .get(sender)
                .is_some_and(|id| self.sender(*id).txs.contains_key(nonce));
            assert!(
                !pooled,
                "{sender} nonce {nonce} is both remembered and pooled"
            );
        }
    }
}
