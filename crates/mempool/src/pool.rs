//! The pool's state: every pooled transaction by hash, each sender's transactions by
//! nonce, the subpool of each, and the indices that make eviction and block building
//! cheap. Everything here runs under the pool lock and does no I/O and no crypto.
//!
//! Classification walks a sender's transactions in nonce order from the state nonce:
//!
//! ```text
//!  nonce:   n      n+1     n+2     (gap)   n+4
//!  class:   Pending Pending BaseFee  ->     Queued
//! ```
//!
//! A transaction is never in a better subpool than the one before it, so each subpool
//! holds a contiguous nonce range of each sender. Eviction takes, among the senders with
//! transactions in a full subpool, the one whose last transaction there is the cheapest,
//! and removes that sender's transactions from its highest nonce down to it: no gap is
//! ever created below a pooled transaction. Local senders are left out of that choice
//! while their transactions in the subpool are within the local share of its limits
//! ([`PoolConfig::local_share`]); past it they are candidates like any other.
//!
//! In the pending subpool eviction goes by package by default
//! ([`PoolConfig::evict_by_package`]): the victim is the sender's pending suffix with the
//! least average tip, which [`packages`] keeps per sender and the pool indexes as it
//! indexes the tails.

use super::FastMap as HashMap;
use super::PoolTx;
use super::config::PoolConfig;
use super::error::{Added, Rejection, SubPool};
use super::state::{AccountState, CodeKind, HeadInfo};
use alloy_primitives::{Address, B256, U256};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

mod classify;
mod evict;
#[cfg(test)]
mod invariants;
mod packages;
mod revive;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SenderId(u32);

/// Eviction order, worst first: tip at the current base fee, then fee cap, then the newest.
type EvictKey = (u128, u128, u64);

/// Eviction order by package, worst first: the least average tip of a pending suffix of
/// the sender (rounded down), then the newest pending tail (as [`EvictKey`] orders ties).
type PackageKey = (u128, u64);

pub(crate) struct Entry {
    pub tx: Arc<PoolTx>,
    pub subpool: SubPool,
    seq: u64,
    /// A blob tx only: whether it was announceable at its last classification
    /// ([`classify::near_fees`]); a change to true publishes it.
    announced: bool,
}

struct Sender {
    address: Address,
    nonce: u64,
    balance: U256,
    code: CodeKind,
    txs: BTreeMap<u64, B256>,
    /// Sum of the costs of `txs` (kept as they come and go: the overdraft check reads it
    /// on every admission).
    cost: U256,
    /// Holds a local transaction: the larger allowance, and exempt from eviction while
    /// local txs are within their share of the subpool.
    local: bool,
    /// Per subpool: the eviction key and nonce of this sender's last transaction there.
    tails: [Option<(EvictKey, u64)>; 4],
    /// Per subpool: this sender's txs there, as of its last classification.
    counts: [Usage; 4],
    /// Whether `counts` are in the pool's local usage and `tails` in the local tails
    /// (`local` as of the last classification).
    counted_local: bool,
    /// The tips of this sender's pending txs, as the stack of [`packages`].
    suffixes: packages::Suffixes,
    /// This sender's key in the packages (the local ones if `counted_local`): see
    /// [`PackageKey`].
    package: Option<PackageKey>,
}

/// The first nonce missing from `s`'s txs at or after `state_nonce`: where its executable
/// run ends.
fn run_end(s: &Sender, state_nonce: u64) -> u64 {
    // Fast path: the keys are unique, so when they start at the state nonce and span
    // exactly as many nonces as there are txs, they are one unbroken run.
    if let (Some((first, _)), Some((last, _))) = (s.txs.first_key_value(), s.txs.last_key_value())
        && *first == state_nonce
        && last - first + 1 == s.txs.len() as u64
    {
        return last + 1;
    }
    let mut end = state_nonce;
    for n in s.txs.range(state_nonce..).map(|(n, _)| *n) {
        if n != end {
            break;
        }
        end += 1;
    }
    end
}

/// Count and bytes held by a subpool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Transactions held.
    pub txs: usize,
    /// Bytes held: network size, sidecars included.
    pub bytes: usize,
}

/// What the stateful checks decided for a newcomer.
pub(crate) struct Plan {
    pub replaces: Option<B256>,
    /// The sender's tx that leaves to make room (its highest nonce).
    pub displaces: Option<B256>,
}

/// The pool's state under its lock (reth's `TxPool`): the subpools and their indices.
pub(crate) struct TxPool {
    cfg: Arc<PoolConfig>,
    pub head: HeadInfo,
    by_hash: HashMap<B256, Entry>,
    sender_ids: HashMap<Address, SenderId>,
    senders: Vec<Option<Sender>>,
    free_ids: Vec<u32>,
    /// Per subpool, the eviction keys of remote senders' last txs there (worst first).
    tails: [BTreeSet<(EvictKey, SenderId)>; 4],
    /// The same for local senders: candidates only while locals pass their share.
    local_tails: [BTreeSet<(EvictKey, SenderId)>; 4],
    /// Remote senders with pending txs by the least average tip of a pending suffix
    /// (worst first): eviction by package takes the first.
    packages: BTreeSet<(PackageKey, SenderId)>,
    /// The same for local senders: candidates only while locals pass their share.
    local_packages: BTreeSet<(PackageKey, SenderId)>,
    usage: [Usage; 4],
    /// What local senders' txs hold of each subpool.
    local_usage: [Usage; 4],
    blob_index: HashMap<B256, B256>,
    /// Every pooled blob tx's hash (two txs may carry the same blob, so `blob_index`
    /// cannot list them).
    blob_txs: super::FastSet<B256>,
    /// Count and bytes of every pooled blob tx, executable or not: what the blob
    /// subpool's limits bound ([`TxPool::limited_usage`]).
    blob_usage: Usage,
    /// Authority → pooled authorizations that name it.
    authorities: HashMap<Address, usize>,
    next_seq: u64,
    /// Txs let go for room, remembered so a package can bring them back ([`revive`]).
    let_go: revive::LetGo,
    /// Hashes that became pending since the last drain; published after the lock is released.
    pub newly_pending: Vec<B256>,
    /// Local (journaled) txs that left for room since the last drain: evicted for price
    /// or displaced by their sender's gap-filler. The journal keeps them.
    pub evicted_locals: Vec<Arc<PoolTx>>,
    /// The local tx the last insert replaced (same sender and nonce), if any: kept until
    /// the replacement is journaled, to be put back should the journal refuse it.
    pub replaced_local: Option<Arc<PoolTx>>,
    /// Inserts classified by [`TxPool::classify_appended`] (for tests of that path).
    #[cfg(test)]
    pub appends_classified: u64,
    /// Links (pooled or remembered txs) looked at while judging packages (for tests of
    /// its bound).
    #[cfg(test)]
    pub package_links: std::cell::Cell<u64>,
    /// Txs walked by [`TxPool::reclassify`] (for tests of the paths that avoid it).
    #[cfg(test)]
    pub walked: u64,
}

fn priority(tx: &PoolTx, base_fee: u64) -> (u128, u128) {
    let inner = tx.tx.tx().tx();
    (
        inner.effective_tip_per_gas(base_fee).unwrap_or(0),
        inner.max_fee_per_gas(),
    )
}

/// The least a replacement must offer: `old` plus `percent`, and always more than `old`
/// (at small prices the percentage rounds to nothing; geth also wants a strict rise).
fn bumped(old: u128, percent: u128) -> u128 {
    (old.saturating_mul(100 + percent) / 100).max(old.saturating_add(1))
}

impl TxPool {
    pub(crate) fn new(cfg: Arc<PoolConfig>, head: HeadInfo) -> Self {
        // Sized for the configured limits up front (capped): growing a large table means a
        // rehash of every entry inside the lock, a latency spike under load.
        let expected = SubPool::ALL
            .iter()
            .map(|s| cfg.limit(*s).max_txs)
            .sum::<usize>()
            .min(1 << 16);
        Self {
            cfg,
            head,
            by_hash: HashMap::with_capacity_and_hasher(expected, Default::default()),
            sender_ids: HashMap::with_capacity_and_hasher(expected, Default::default()),
            senders: Vec::new(),
            free_ids: Vec::new(),
            tails: Default::default(),
            local_tails: Default::default(),
            packages: BTreeSet::new(),
            local_packages: BTreeSet::new(),
            usage: [Usage::default(); 4],
            local_usage: [Usage::default(); 4],
            blob_index: HashMap::default(),
            blob_txs: Default::default(),
            blob_usage: Usage::default(),
            authorities: HashMap::default(),
            next_seq: 0,
            let_go: Default::default(),
            newly_pending: Vec::new(),
            evicted_locals: Vec::new(),
            replaced_local: None,
            #[cfg(test)]
            appends_classified: 0,
            #[cfg(test)]
            package_links: Default::default(),
            #[cfg(test)]
            walked: 0,
        }
    }

    pub(crate) fn contains(&self, hash: &B256) -> bool {
        self.by_hash.contains_key(hash)
    }

    pub(crate) fn get(&self, hash: &B256) -> Option<&Entry> {
        self.by_hash.get(hash)
    }

    pub(crate) fn len(&self) -> usize {
        self.by_hash.len()
    }

    /// A sender past its executable slots may still extend its run while the pending
    /// subpool is under half full, as geth lets an account grow while global slots are
    /// free.
    fn pending_has_room(&self, cfg: &PoolConfig) -> bool {
        self.usage(SubPool::Pending).txs < cfg.pending.max_txs / 2
    }

    /// The allowance of a sender for a new nonce (not a replacement), geth's split: an
    /// executable run of `account_slots` (longer while pending has room) and
    /// `account_queue` txs behind a gap; a local sender gets the larger local allowance.
    /// A tx inside the sender's first nonce gap (it fills or narrows the gap) is never
    /// refused for the count: it displaces the sender's highest-nonce tx, the least
    /// likely to be mined. A queued tx past the allowance displaces the highest nonce
    /// only if its own is lower. Returns the tx to displace, if any.
    fn sender_allowance(
        &self,
        cfg: &PoolConfig,
        s: &Sender,
        tx: &PoolTx,
        state_nonce: u64,
    ) -> Result<Option<B256>, Rejection> {
        let nonce = tx.nonce();
        let (slots, queue) = cfg.account_allowance(s.local || cfg.is_local(tx.origin, &tx.sender));
        let run_end = run_end(s, state_nonce);
        let exec = (run_end - state_nonce) as usize;
        let queued = s.txs.len() - exec;
        let first_queued = s.txs.range(run_end..).next().map(|(n, _)| *n);
        let highest = s.txs.last_key_value().map(|(n, h)| (*n, *h));
        match (first_queued, highest) {
            // Inside the first gap: never refused for the count.
            (Some(gap_end), Some((_, top))) if nonce < gap_end => {
                let over_total = exec + queued + 1 > slots + queue;
                let over_queue = nonce > run_end && queued + 1 > queue;
                Ok((over_total || over_queue).then_some(top))
            }
            // Past the first gap: one more queued tx.
            (Some(_), Some((top_nonce, top))) => {
                if queued < queue {
                    Ok(None)
                } else if nonce < top_nonce {
                    Ok(Some(top))
                } else {
                    Err(Rejection::AccountLimit { slots: queued })
                }
            }
            // No gap yet: the next nonce extends the run, a later one opens a queue. A
            // run grows within the sender's whole allowance (slots + queue), and past it
            // while pending is under half full: the extension is worth more than a queued
            // tx would be, and refusing it while taking later nonces would leave a gap of
            // the pool's own making.
            _ if nonce == run_end => {
                if exec < slots + queue || self.pending_has_room(cfg) {
                    Ok(None)
                } else {
                    Err(Rejection::AccountLimit { slots: exec })
                }
            }
            _ => {
                if queue > 0 && (exec < slots + queue || self.pending_has_room(cfg)) {
                    Ok(None)
                } else {
                    Err(Rejection::AccountLimit { slots: exec })
                }
            }
        }
    }

    pub(crate) fn usage(&self, sub: SubPool) -> Usage {
        self.usage[sub as usize]
    }

    fn sender(&self, id: SenderId) -> &Sender {
        self.senders[id.0 as usize]
            .as_ref()
            .expect("sender ids in indices are live")
    }

    fn sender_mut(&mut self, id: SenderId) -> &mut Sender {
        self.senders[id.0 as usize]
            .as_mut()
            .expect("sender ids in indices are live")
    }

    /// The account state the pool tracks for `address`, if it has transactions here.
    pub(crate) fn known_account(&self, address: &Address) -> Option<AccountState> {
        let s = self.sender(*self.sender_ids.get(address)?);
        Some(AccountState {
            nonce: s.nonce,
            balance: s.balance,
            code: s.code,
        })
    }

    /// The next nonce of `address` counting its gapless pooled transactions.
    pub(crate) fn pending_nonce(&self, address: &Address, state_nonce: u64) -> u64 {
        let Some(id) = self.sender_ids.get(address) else {
            return state_nonce;
        };
        let s = self.sender(*id);
        let mut next = s.nonce.max(state_nonce);
        while s.txs.contains_key(&next) {
            next += 1;
        }
        next
    }

    /// Pooled transactions of `address`, in nonce order.
    pub(crate) fn sender_txs(&self, address: &Address) -> Vec<Arc<PoolTx>> {
        let Some(id) = self.sender_ids.get(address) else {
            return Vec::new();
        };
        self.sender(*id)
            .txs
            .values()
            .map(|h| Arc::clone(&self.by_hash[h].tx))
            .collect()
    }

    /// Stage 8: the checks that need the sender's state and the pool's contents.
    pub(crate) fn check(&self, tx: &PoolTx, account: AccountState) -> Result<Plan, Rejection> {
        let cfg = &self.cfg;
        let sender = self.sender_ids.get(&tx.sender).map(|id| self.sender(*id));
        let account = sender
            .map(|s| AccountState {
                nonce: s.nonce,
                balance: s.balance,
                code: s.code,
            })
            .unwrap_or(account);
        if account.code == CodeKind::Contract {
            return Err(Rejection::SenderHasCode);
        }
        let nonce = tx.nonce();
        if nonce < account.nonce {
            return Err(Rejection::NonceTooLow {
                state: account.nonce,
                tx: nonce,
            });
        }
        let existing = sender
            .and_then(|s| s.txs.get(&nonce))
            .map(|h| &self.by_hash[h]);
        let others = sender.map_or(0, |s| s.txs.len()) - usize::from(existing.is_some());

        // One kind of transaction per sender: blob or not. The pool holds that invariant,
        // so any one of the sender's other txs tells the kind of all of them (looking at
        // one keeps this check O(1) for a sender with hundreds of txs pooled).
        if let Some(s) = sender {
            let conflict = s
                .txs
                .iter()
                .find(|(n, _)| **n != nonce)
                .is_some_and(|(_, h)| self.by_hash[h].tx.is_blob() != tx.is_blob());
            if conflict {
                return Err(Rejection::AlreadyReserved);
            }
        }
        if let Some(old) = existing {
            let bump = if tx.is_blob() {
                cfg.blob_price_bump
            } else {
                cfg.price_bump
            };
            let (new, old) = (tx.tx.tx().tx(), old.tx.tx.tx().tx());
            let blob_ok = match (new.max_fee_per_blob_gas(), old.max_fee_per_blob_gas()) {
                (Some(n), Some(o)) => n >= bumped(o, bump),
                _ => true,
            };
            if new.max_fee_per_gas() < bumped(old.max_fee_per_gas(), bump)
                || new.max_priority_fee_per_gas() < bumped(old.max_priority_fee_per_gas(), bump)
                || !blob_ok
            {
                return Err(Rejection::ReplacementUnderpriced);
            }
        }
        // Blob txs must be contiguous from the sender's next nonce: a gapped one holds a
        // sidecar it cannot use (geth and reth refuse it too).
        if tx.is_blob() && existing.is_none() {
            let expected = sender.map_or(account.nonce, |s| run_end(s, account.nonce));
            if nonce != expected {
                return Err(Rejection::BlobNonceGap {
                    expected,
                    found: nonce,
                });
            }
        }
        let displaces = match (existing, sender) {
            (None, Some(s)) => self.sender_allowance(cfg, s, tx, account.nonce)?,
            _ => None,
        };

        // EIP-7702: delegated senders, and authorities with pooled authorizations, get few slots.
        let delegated = matches!(account.code, CodeKind::Delegated(_))
            || self.authorities.get(&tx.sender).is_some_and(|n| *n > 0);
        if delegated && existing.is_none() && others >= cfg.max_delegated_slots {
            return Err(Rejection::InflightLimit);
        }
        for authority in &tx.authorities {
            if *authority == tx.sender {
                continue;
            }
            let pooled = self
                .sender_ids
                .get(authority)
                .map_or(0, |id| self.sender(*id).txs.len());
            if pooled > cfg.max_delegated_slots {
                return Err(Rejection::AuthorityReserved);
            }
        }

        let cost = tx.cost;
        if cost > account.balance {
            return Err(Rejection::InsufficientFunds {
                balance: account.balance,
                cost,
            });
        }
        if let Some(s) = sender {
            // The sender's other pooled txs: all of them but the one this replaces or
            // displaces.
            let gone = existing.map_or(U256::ZERO, |e| e.tx.cost)
                + displaces.map_or(U256::ZERO, |h| self.by_hash[&h].tx.cost);
            let pooled = s.cost.saturating_sub(gone);
            let total = pooled.saturating_add(cost);
            if total > account.balance {
                return Err(Rejection::Overdraft {
                    balance: account.balance,
                    cost: total,
                });
            }
        }
        Ok(Plan {
            replaces: existing.map(|e| e.tx.hash()),
            displaces,
        })
    }

    /// Stage 10: checks again (the pool may have changed since stage 8), inserts, and
    /// enforces the subpool limits. Returns the hashes evicted along the way.
    pub(crate) fn insert(
        &mut self,
        tx: Arc<PoolTx>,
        account: AccountState,
    ) -> (Result<Added, Rejection>, Vec<B256>) {
        let plan = match self.check(&tx, account) {
            Ok(p) => p,
            Err(e) => return (Err(e), Vec::new()),
        };
        // Txs let go earlier that complete the newcomer's package come back first.
        let plan = self.revive(&tx, account, plan);
        let sender = tx.sender;
        let id = match self.sender_ids.get(&tx.sender) {
            Some(id) => *id,
            None => self.new_sender(tx.sender, account),
        };
        if let Some(old) = plan.replaces
            && let Some(gone) = self.remove_entry(&old)
            && gone.origin.is_local()
        {
            self.replaced_local = Some(gone);
        }
        let mut evicted = Vec::new();
        if let Some(doomed) = plan.displaces {
            if let Some(gone) = self.remove_entry(&doomed) {
                self.note_evicted(gone);
            }
            evicted.push(doomed);
        }
        let hash = tx.hash();
        let nonce = tx.nonce();
        let local = self.cfg.is_local(tx.origin, &tx.sender);
        let is_blob = tx.is_blob();
        for vh in tx.tx.tx().tx().blob_versioned_hashes() {
            self.blob_index.insert(*vh, hash);
        }
        if is_blob {
            self.blob_txs.insert(hash);
            self.blob_usage.txs += 1;
            self.blob_usage.bytes += tx.size();
        }
        for a in &tx.authorities {
            *self.authorities.entry(*a).or_insert(0) += 1;
        }
        let provisional = if is_blob {
            SubPool::Blob
        } else {
            SubPool::Queued
        };
        let u = &mut self.usage[provisional as usize];
        u.txs += 1;
        u.bytes += tx.size();
        let seq = self.next_seq;
        self.next_seq += 1;
        self.by_hash.insert(
            hash,
            Entry {
                tx,
                subpool: provisional,
                seq,
                announced: false,
            },
        );
        let cost = self.by_hash[&hash].tx.cost;
        let s = self.sender_mut(id);
        let before = s.txs.last_key_value().map(|(n, h)| (*n, *h));
        s.txs.insert(nonce, hash);
        s.cost = s.cost.saturating_add(cost);
        s.local |= local;
        // A new nonce past the sender's last, nothing else of its changed: only the
        // newcomer needs a class (the others' depend only on the txs below them).
        let appended = match before {
            Some((last, last_hash)) => {
                plan.replaces.is_none()
                    && plan.displaces.is_none()
                    && last < nonce
                    && self.classify_appended(id, last_hash, last, hash)
            }
            None => false,
        };
        if !appended {
            self.reclassify(id);
        }

        evicted.extend(self.evict_over_limits());
        if evicted.contains(&hash) {
            // Refused, not evicted: it was never acknowledged, so never journaled.
            self.evicted_locals.retain(|t| t.hash() != hash);
            return (
                Err(Rejection::Underpriced),
                evicted.into_iter().filter(|h| *h != hash).collect(),
            );
        }
        self.let_go.forget(&sender, nonce);
        let subpool = self.by_hash[&hash].subpool;
        (
            Ok(Added {
                hash,
                subpool,
                replaced: plan.replaces,
                gapped: false,
            }),
            evicted,
        )
    }

    /// What local senders' txs hold of `sub`.
    #[cfg(test)]
    pub(crate) fn local_usage(&self, sub: SubPool) -> Usage {
        self.local_usage[sub as usize]
    }

    fn new_sender(&mut self, address: Address, account: AccountState) -> SenderId {
        let sender = Sender {
            address,
            nonce: account.nonce,
            balance: account.balance,
            code: account.code,
            txs: BTreeMap::new(),
            cost: U256::ZERO,
            local: false,
            tails: [None; 4],
            counts: [Usage::default(); 4],
            counted_local: false,
            suffixes: Default::default(),
            package: None,
        };
        let id = match self.free_ids.pop() {
            Some(i) => {
                self.senders[i as usize] = Some(sender);
                SenderId(i)
            }
            None => {
                self.senders.push(Some(sender));
                SenderId((self.senders.len() - 1) as u32)
            }
        };
        self.sender_ids.insert(address, id);
        id
    }

    /// Removes one transaction from every index (not from its sender's classification:
    /// callers reclassify the sender afterwards).
    fn remove_entry(&mut self, hash: &B256) -> Option<Arc<PoolTx>> {
        let entry = self.by_hash.remove(hash)?;
        if self.blob_txs.remove(hash) {
            self.blob_usage.txs -= 1;
            self.blob_usage.bytes -= entry.tx.size();
        }
        let u = &mut self.usage[entry.subpool as usize];
        u.txs -= 1;
        u.bytes -= entry.tx.size();
        for vh in entry.tx.tx.tx().tx().blob_versioned_hashes() {
            if self.blob_index.get(vh) == Some(hash) {
                self.blob_index.remove(vh);
            }
        }
        for a in &entry.tx.authorities {
            if let Some(n) = self.authorities.get_mut(a) {
                *n -= 1;
                if *n == 0 {
                    self.authorities.remove(a);
                }
            }
        }
        if let Some(id) = self.sender_ids.get(&entry.tx.sender).copied() {
            let s = self.sender_mut(id);
            if s.txs.remove(&entry.tx.nonce()).is_some() {
                s.cost = s.cost.saturating_sub(entry.tx.cost);
            }
        }
        Some(entry.tx)
    }

    /// Applies a new head: new fees, fresh state for `accounts`, mined hashes out.
    /// Returns the hashes removed (mined or made stale by a higher state nonce), then
    /// those evicted to hold the subpools to their limits after the moves.
    pub(crate) fn apply_head(
        &mut self,
        head: HeadInfo,
        mined: &[B256],
        accounts: &[(Address, AccountState)],
    ) -> (Vec<B256>, Vec<B256>) {
        let fees_changed =
            head.base_fee != self.head.base_fee || head.blob_base_fee != self.head.blob_base_fee;
        self.head = head;
        let mut removed = Vec::new();
        let mut touched = BTreeSet::new();
        for h in mined {
            if let Some(tx) = self.remove_entry(h) {
                removed.push(*h);
                if let Some(id) = self.sender_ids.get(&tx.sender) {
                    touched.insert(*id);
                }
            }
        }
        for (address, account) in accounts {
            let Some(id) = self.sender_ids.get(address).copied() else {
                continue;
            };
            let s = self.sender_mut(id);
            s.nonce = account.nonce;
            s.balance = account.balance;
            s.code = account.code;
            let stale: Vec<B256> = s.txs.range(..account.nonce).map(|(_, h)| *h).collect();
            for h in stale {
                self.remove_entry(&h);
                removed.push(h);
            }
            touched.insert(id);
        }
        if fees_changed {
            let all: Vec<SenderId> = self.sender_ids.values().copied().collect();
            touched.extend(all);
        }
        for id in touched {
            if self.senders[id.0 as usize].is_some() {
                self.reclassify(id);
            }
        }
        // A head change moves txs between subpools (a rising base fee sends pending ones
        // to the base-fee subpool): hold every subpool to its limits again, as insertion
        // does.
        let evicted = self.evict_over_limits();
        (removed, evicted)
    }

    /// Drops queued transactions (and the sender's later ones) older than `max_age`.
    pub(crate) fn remove_expired(
        &mut self,
        now: std::time::Instant,
        max_age: std::time::Duration,
    ) -> Vec<B256> {
        let expired: Vec<(SenderId, u64)> = self
            .by_hash
            .values()
            .filter(|e| {
                e.subpool == SubPool::Queued && !self.cfg.is_local(e.tx.origin, &e.tx.sender)
            })
            .filter(|e| now.saturating_duration_since(e.tx.added_at) > max_age)
            .filter_map(|e| Some((*self.sender_ids.get(&e.tx.sender)?, e.tx.nonce())))
            .collect();
        let mut lowest: HashMap<SenderId, u64> = HashMap::default();
        for (id, n) in expired {
            let e = lowest.entry(id).or_insert(n);
            *e = (*e).min(n);
        }
        let mut removed = Vec::new();
        for (id, from) in lowest {
            let doomed: Vec<B256> = self.sender(id).txs.range(from..).map(|(_, h)| *h).collect();
            for h in &doomed {
                self.remove_entry(h);
            }
            removed.extend(doomed);
            self.reclassify(id);
        }
        removed
    }

    /// Removes one transaction only (its sender's later nonces stay, queued behind the
    /// gap if they were pending; the one exception to "no gap is created below a pooled
    /// tx": a local tx the journal could not keep, whose later nonces were journaled on
    /// their own); whether it was pooled.
    pub(crate) fn withdraw(&mut self, hash: &B256) -> bool {
        let Some(entry) = self.by_hash.get(hash) else {
            return false;
        };
        let id = self.sender_ids.get(&entry.tx.sender).copied();
        self.remove_entry(hash);
        if let Some(id) = id {
            self.reclassify(id);
        }
        true
    }

    /// Removes one transaction and everything its sender has above it.
    pub(crate) fn remove_with_descendants(&mut self, hash: &B256) -> Vec<B256> {
        let Some(entry) = self.by_hash.get(hash) else {
            return Vec::new();
        };
        let Some(id) = self.sender_ids.get(&entry.tx.sender).copied() else {
            return Vec::new();
        };
        let doomed: Vec<B256> = self
            .sender(id)
            .txs
            .range(entry.tx.nonce()..)
            .map(|(_, h)| *h)
            .collect();
        for h in &doomed {
            self.remove_entry(h);
        }
        self.reclassify(id);
        doomed
    }

    /// Pending transactions grouped by sender, each group in nonce order.
    pub(crate) fn pending_by_sender(&self) -> Vec<Vec<Arc<PoolTx>>> {
        self.senders
            .iter()
            .flatten()
            .map(|s| {
                s.txs
                    .values()
                    .map(|h| &self.by_hash[h])
                    .take_while(|e| e.subpool == SubPool::Pending)
                    .map(|e| Arc::clone(&e.tx))
                    .collect::<Vec<_>>()
            })
            .filter(|g| !g.is_empty())
            .collect()
    }

    /// Every transaction with its subpool, grouped by sender in nonce order.
    pub(crate) fn content(&self) -> Vec<super::SenderContent> {
        self.senders
            .iter()
            .flatten()
            .map(|s| {
                let txs = s
                    .txs
                    .values()
                    .map(|h| (Arc::clone(&self.by_hash[h].tx), self.by_hash[h].subpool));
                (s.address, txs.collect())
            })
            .collect()
    }

    pub(crate) fn tx_by_versioned_hash(&self, vh: &B256) -> Option<&Arc<PoolTx>> {
        self.blob_index.get(vh).map(|h| &self.by_hash[h].tx)
    }

    /// A pooled blob tx with a version-0 sidecar, if any (the next to convert).
    pub(crate) fn next_v0_sidecar(&self) -> Option<Arc<PoolTx>> {
        self.blob_txs
            .iter()
            .map(|h| &self.by_hash[h].tx)
            .find(|t| {
                t.tx.sidecar()
                    .is_some_and(|b| b.version == moat_common::transaction::SidecarVersion::V0)
            })
            .cloned()
    }

    /// Puts `new` (the same tx with another sidecar: a converted one) in place of the
    /// pooled tx of its hash, keeping its place, class and age; the subpools' bytes
    /// follow the new size, and what a larger sidecar pushes over a limit is evicted.
    /// Returns whether it was pooled, and the hashes evicted.
    pub(crate) fn swap_sidecar(&mut self, new: Arc<PoolTx>) -> (bool, Vec<B256>) {
        let hash = new.hash();
        let Some(entry) = self.by_hash.get_mut(&hash) else {
            return (false, Vec::new());
        };
        let sub = entry.subpool as usize;
        let old_size = entry.tx.size();
        let new_size = new.size();
        entry.tx = new;
        let u = &mut self.usage[sub];
        u.bytes = u.bytes - old_size + new_size;
        self.blob_usage.bytes = self.blob_usage.bytes - old_size + new_size;
        let sender = self.by_hash[&hash].tx.sender;
        if let Some(id) = self.sender_ids.get(&sender).copied() {
            // Recounts the sender's bytes (and the local share's).
            self.reclassify(id);
        }
        (true, self.evict_over_limits())
    }

    /// Every pooled blob tx (what the blob pool's store mirrors).
    pub(crate) fn blob_txs(&self) -> Vec<Arc<PoolTx>> {
        self.blob_txs
            .iter()
            .map(|h| Arc::clone(&self.by_hash[h].tx))
            .collect()
    }

    /// Every hash in the pool.
    pub(crate) fn hashes(&self) -> Vec<B256> {
        self.by_hash.keys().copied().collect()
    }
}
