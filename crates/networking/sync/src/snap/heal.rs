//! Healing after a pivot move: the tries of what is held are built unchecked, then
//! walked from the new root with `GetTrieNodes` (a node asked for where the local
//! trie holds another or none, taken only if it hashes to what its parent names), the
//! flat state patched from every node taken. The account trie first, then the storage
//! tries whose stored root is not their account's; the patches are committed with
//! healing's record ([`HealRecord`]), from which a node killed while healing resumes.

use super::build::{build_unchecked, for_each_account_page};
use super::progress::{Progress, b256_after, take};
use super::requests::{Requests, Work};
use super::verify::decode_account;
use super::{HEAL_BATCH, Run, SnapError};
use crate::source::BlockSource;
use alloy_primitives::{B256, U256, keccak256};
use moat_common::rlp;
use moat_p2p::snap::SnapMessage;
use moat_storage::WriteBatch;
use moat_trie::range::key_of;
use moat_trie::{EMPTY_ROOT, NodeView, view_node};
use std::collections::VecDeque;
use std::time::Instant;

/// A trie node healing asks for: its trie (owner), path (nibbles), and the hash its
/// parent names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HealTask {
    pub(super) owner: B256,
    pub(super) path: Vec<u8>,
    pub(super) hash: B256,
}

/// Where healing stands, committed with the flat state's patches it goes with: the
/// nodes of the walk under way still to take (asked, queued or found), so that a node
/// killed while healing asks only those again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealRecord {
    /// The pivot's state root being healed to: a record for another root is ignored.
    root: B256,
    phase: HealPhase,
    tasks: Vec<HealTask>,
}

/// The walks of healing, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HealPhase {
    /// The account trie's walk; then the storage tries are listed.
    Accounts,
    /// The walk of the storage tries whose stored root is not their account's.
    Storage,
    /// Both walks finished: the codes of healed accounts are next.
    Done,
}

/// Version byte of healing's record.
pub(super) const HEAL_RECORD_VERSION: u8 = 1;

impl HealRecord {
    /// The nodes the record says are still to take.
    pub fn nodes_left(&self) -> usize {
        self.tasks.len()
    }

    /// Whether both walks are finished.
    pub fn done(&self) -> bool {
        self.phase == HealPhase::Done
    }

    /// The record as the store keeps it (version byte first); [`HealRecord::decode`] reads it back.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(38 + self.tasks.len() * 72);
        out.push(HEAL_RECORD_VERSION);
        out.extend_from_slice(self.root.as_slice());
        out.push(match self.phase {
            HealPhase::Accounts => 0,
            HealPhase::Storage => 1,
            HealPhase::Done => 2,
        });
        out.extend_from_slice(&(self.tasks.len() as u32).to_be_bytes());
        for t in &self.tasks {
            out.extend_from_slice(t.owner.as_slice());
            out.extend_from_slice(t.hash.as_slice());
            out.push(t.path.len() as u8);
            out.extend_from_slice(&t.path);
        }
        out
    }

    /// `None` for a record that does not decode (healing then starts over, as without
    /// one).
    pub fn decode(mut b: &[u8]) -> Option<Self> {
        if take(&mut b, 1)?[0] != HEAL_RECORD_VERSION {
            return None;
        }
        let root = B256::from_slice(take(&mut b, 32)?);
        let phase = match take(&mut b, 1)?[0] {
            0 => HealPhase::Accounts,
            1 => HealPhase::Storage,
            2 => HealPhase::Done,
            _ => return None,
        };
        let n = u32::from_be_bytes(take(&mut b, 4)?.try_into().ok()?) as usize;
        // Each task takes at least 65 bytes: no allocation beyond what the record holds.
        let mut tasks = Vec::with_capacity(n.min(b.len() / 65));
        for _ in 0..n {
            let owner = B256::from_slice(take(&mut b, 32)?);
            let hash = B256::from_slice(take(&mut b, 32)?);
            let len = take(&mut b, 1)?[0] as usize;
            let path = take(&mut b, len)?.to_vec();
            if len >= 64 || path.iter().any(|n| *n > 0x0f) {
                return None;
            }
            tasks.push(HealTask { owner, path, hash });
        }
        b.is_empty().then_some(Self { root, phase, tasks })
    }
}

impl<S: BlockSource> Run<'_, S> {
    /// Heals a download kept over a pivot move: the tries of what is held (they do
    /// not build the pivot's root), then the flat state patched from the pivot's trie
    /// until it builds that root; then the codes of healed accounts. A node killed here
    /// resumes from healing's record (the tries built unchecked are stored before the
    /// first record is written).
    pub(super) async fn heal_after_move(
        &mut self,
        progress: &mut Progress,
    ) -> Result<(), SnapError> {
        let store = self.chain.store().clone();
        let record = store
            .snap_heal()?
            .and_then(|r| HealRecord::decode(&r))
            .filter(|r| r.root == progress.state_root);
        let start = match record {
            Some(r) => {
                tracing::info!(
                    phase = ?r.phase,
                    nodes = r.tasks.len(),
                    "snap sync: healing resumed from its record"
                );
                HealStart::Resume(r)
            }
            None => {
                let store2 = store.clone();
                let p2 = progress.clone();
                let local_root = tokio::task::spawn_blocking(move || build_unchecked(&store2, &p2))
                    .await
                    .map_err(|e| SnapError::Pivot(e.to_string()))??;
                HealStart::Fresh(local_root)
            }
        };
        self.heal(progress, start).await?;
        self.healing = true;
        self.codes(progress).await?;
        self.save(progress, WriteBatch::new())?;
        Ok(())
    }

    /// Heals the flat state to the pivot's root: the account trie walked from the root,
    /// then every storage trie whose stored root is not its account's. `start`: the
    /// root the held accounts build (its node is not stored), or healing's record.
    pub(super) async fn heal(&mut self, p: &Progress, start: HealStart) -> Result<(), SnapError> {
        let started = Instant::now();
        let mut healed = 0u64;
        let storage_todo = match start {
            HealStart::Fresh(local_root) => {
                if local_root != p.state_root {
                    let root = HealTask {
                        owner: B256::ZERO,
                        path: Vec::new(),
                        hash: p.state_root,
                    };
                    healed += self.heal_walk(p, HealPhase::Accounts, vec![root]).await?;
                }
                None
            }
            HealStart::Resume(r) => match r.phase {
                HealPhase::Accounts => {
                    healed += self.heal_walk(p, HealPhase::Accounts, r.tasks).await?;
                    None
                }
                HealPhase::Storage => Some(r.tasks),
                HealPhase::Done => return Ok(()),
            },
        };
        let tasks = match storage_todo {
            Some(tasks) => tasks,
            None => self.storage_heal_tasks(p)?,
        };
        let storage_tries = tasks.len();
        healed += self.heal_walk(p, HealPhase::Storage, tasks).await?;
        tracing::info!(
            healed,
            storage_tries,
            secs = format!("{:.1}", started.elapsed().as_secs_f64()),
            "snap sync: healed to the pivot's root"
        );
        Ok(())
    }

    /// The roots of the storage tries to heal (every one whose stored root is not its
    /// account's), committed as healing's record with the slots of accounts whose
    /// storage is empty now dropped.
    pub(super) fn storage_heal_tasks(&mut self, p: &Progress) -> Result<Vec<HealTask>, SnapError> {
        let store = self.chain.store().clone();
        let mut tasks = Vec::new();
        let mut wipe = WriteBatch::new();
        for_each_account_page(&store, |page| {
            for (hash, a) in page {
                if a.storage_root == EMPTY_ROOT {
                    // Slots held of an account whose storage is empty now.
                    let mut any = false;
                    store.snap_slots_of(hash, |_, _| any = true)?;
                    if any {
                        wipe.clear_snap_slots(*hash);
                    }
                    continue;
                }
                let local = store.trie_node(hash, &[])?.map(|n| keccak256(&n));
                if local != Some(a.storage_root) {
                    tasks.push(HealTask {
                        owner: *hash,
                        path: Vec::new(),
                        hash: a.storage_root,
                    });
                }
            }
            Ok(())
        })?;
        let record = HealRecord {
            root: p.state_root,
            phase: HealPhase::Storage,
            tasks: tasks.clone(),
        };
        wipe.set_snap_heal(Some(record.encode()));
        store.commit(wipe)?;
        Ok(tasks)
    }

    /// Asks for the nodes of `tasks` and every node below them that the local tries
    /// lack, patching the flat state from them; returns how many nodes came.
    /// Each commit carries healing's record: the nodes not yet taken, so that a node
    /// killed here asks only those again.
    pub(super) async fn heal_walk(
        &mut self,
        p: &Progress,
        phase: HealPhase,
        mut todo: Vec<HealTask>,
    ) -> Result<u64, SnapError> {
        let store = self.chain.store().clone();
        let mut queue: VecDeque<Work> = VecDeque::new();
        let mut set = Requests::new();
        let mut waited = Instant::now();
        let mut batch = WriteBatch::new();
        let (mut answers, mut healed) = (0usize, 0u64);
        let walk_started = Instant::now();
        loop {
            while !todo.is_empty() {
                let n = todo.len().min(HEAL_BATCH);
                let tasks: Vec<HealTask> = todo.drain(..n).collect();
                queue.push_back(Work::Nodes { tasks });
            }
            if queue.is_empty() && set.is_empty() {
                break;
            }
            let answer = self.dispatch(
                &mut set,
                &mut queue,
                p.state_root,
                waited,
                "not trie nodes",
                |m| match m {
                    SnapMessage::TrieNodes { nodes, .. } => Some(nodes),
                    _ => None,
                },
            );
            let Some((peer, work, nodes)) = answer.await? else {
                continue;
            };
            let Work::Nodes { tasks } = work else {
                continue;
            };
            if nodes.is_empty() {
                self.empty(peer)?;
                queue.push_back(Work::Nodes { tasks });
                continue;
            }
            // A node is taken only if it hashes to what its parent names.
            if nodes.len() > tasks.len()
                || nodes
                    .iter()
                    .zip(&tasks)
                    .any(|(n, t)| keccak256(n) != t.hash)
            {
                self.fault(peer, "a trie node that is not the one asked for");
                queue.push_back(Work::Nodes { tasks });
                continue;
            }
            self.useful();
            waited = Instant::now();
            for (node, t) in nodes.iter().zip(&tasks) {
                heal_node(&store, t.owner, &t.path, node, &mut batch, &mut todo)?;
                self.heal.node_bytes += node.len() as u64;
            }
            healed += nodes.len() as u64;
            self.heal.nodes += nodes.len() as u64;
            if nodes.len() < tasks.len() {
                queue.push_back(Work::Nodes {
                    tasks: tasks[nodes.len()..].to_vec(),
                });
            }
            answers += 1;
            if answers % self.cfg.heal_commit_every.max(1) == 0 {
                // What is not taken yet: found, queued, or asked and in flight.
                let mut left = todo.clone();
                for w in queue.iter().chain(self.asked.values().map(|a| &a.1)) {
                    if let Work::Nodes { tasks } = w {
                        left.extend_from_slice(tasks);
                    }
                }
                let record = HealRecord {
                    root: p.state_root,
                    phase,
                    tasks: left,
                };
                batch.set_snap_heal(Some(record.encode()));
                // Durable at once (one sync per that many answers): a node killed
                // after this commit does not ask these answers' nodes again.
                store.commit(std::mem::take(&mut batch))?;
            }
            let queued: usize = (queue.iter().chain(self.asked.values().map(|a| &a.1)))
                .map(|w| match w {
                    Work::Nodes { tasks } => tasks.len(),
                    _ => 0,
                })
                .sum();
            self.heal.pending_nodes = (todo.len() + queued) as u64;
            self.publish(p);
            if self.last_line.elapsed() >= self.cfg.progress_every {
                self.last_line = Instant::now();
                // At the rate so far, for the nodes known to be needed (more are found
                // below them: a lower bound).
                let rate = healed as f64 / walk_started.elapsed().as_secs_f64().max(0.001);
                let eta = format!("{:.0}s", self.heal.pending_nodes as f64 / rate.max(1.0));
                tracing::info!(
                    pivot = p.pivot_number,
                    healed,
                    pending = self.heal.pending_nodes,
                    kib = self.heal.node_bytes >> 10,
                    eta,
                    "snap sync: healing"
                );
            }
        }
        // The walk is done. After the account trie's, a record with nothing left says
        // so (a node killed before the storage tries are listed lists them again);
        // after the storage tries', healing is over.
        let next = match phase {
            HealPhase::Accounts => HealPhase::Accounts,
            HealPhase::Storage | HealPhase::Done => HealPhase::Done,
        };
        let record = HealRecord {
            root: p.state_root,
            phase: next,
            tasks: Vec::new(),
        };
        batch.set_snap_heal(Some(record.encode()));
        store.commit(batch)?;
        Ok(healed)
    }
}

/// How healing starts: fresh, with the root the held accounts build, or from its record.
pub(super) enum HealStart {
    Fresh(B256),
    Resume(HealRecord),
}

/// What of the flat state under a path a healed node keeps.
pub(super) enum Keep<'a> {
    Nothing,
    /// The one key of a leaf.
    Key(B256),
    /// The subtree below an extension.
    Prefix(&'a [u8]),
}

/// The lowest and highest keys under a nibble path.
pub(super) fn key_bounds(prefix: &[u8]) -> (B256, B256) {
    let mut lo = [0u8; 64];
    let mut hi = [0x0fu8; 64];
    lo[..prefix.len()].copy_from_slice(prefix);
    hi[..prefix.len()].copy_from_slice(prefix);
    (key_of(&lo), key_of(&hi))
}

/// Drops the flat entries of trie `owner` under `prefix` but those `keep` names (an
/// account's slots go with it).
pub(super) fn delete_under(
    store: &moat_storage::Store,
    owner: B256,
    prefix: &[u8],
    keep: Keep<'_>,
    batch: &mut WriteBatch,
) -> Result<(), SnapError> {
    let (lo, hi) = key_bounds(prefix);
    // The ranges to drop: all of [lo, hi] but the kept key or subtree.
    let kept = match keep {
        Keep::Nothing => None,
        Keep::Key(k) => Some((k, k)),
        Keep::Prefix(p) => Some(key_bounds(p)),
    };
    let mut ranges = Vec::with_capacity(2);
    match kept {
        None => ranges.push((lo, hi)),
        Some((klo, khi)) => {
            let below = U256::from_be_bytes(klo.0).checked_sub(U256::from(1));
            if let Some(b) = below.map(|b| B256::from(b.to_be_bytes()))
                && klo > lo
            {
                ranges.push((lo, b));
            }
            if let Some(a) = b256_after(&khi)
                && khi < hi
            {
                ranges.push((a, hi));
            }
        }
    }
    for (from, to) in ranges {
        if owner == B256::ZERO {
            let mut doomed = Vec::new();
            store.snap_accounts_from(&from, |h, _| {
                if h > to {
                    return false;
                }
                doomed.push(h);
                true
            })?;
            for h in doomed {
                batch.delete_snap_account(h).clear_snap_slots(h);
            }
        } else {
            batch.delete_snap_slots_between(owner, from, to);
        }
    }
    Ok(())
}

/// One healed node of trie `owner` at `path`: its leaves written to the flat state,
/// what it no longer holds dropped from it, and its children the local trie lacks (a
/// stored node at their path with another hash, or none) added to `todo`.
pub(super) fn heal_node(
    store: &moat_storage::Store,
    owner: B256,
    path: &[u8],
    rlp: &[u8],
    batch: &mut WriteBatch,
    todo: &mut Vec<HealTask>,
) -> Result<(), SnapError> {
    let bad = |why: &str| SnapError::Mismatch(format!("trie node of {owner} at {path:?}: {why}"));
    match view_node(rlp).ok_or_else(|| bad("not a trie node"))? {
        NodeView::Leaf(key, value) => {
            let full = [path, &key].concat();
            if full.len() != 64 {
                return Err(bad("a leaf whose key is not 32 bytes"));
            }
            let k = key_of(&full);
            delete_under(store, owner, path, Keep::Key(k), batch)?;
            if owner == B256::ZERO {
                let a = decode_account(&value).map_err(|_| bad("not an account"))?;
                batch.put_snap_account(k, &a);
            } else {
                let mut buf = value.as_slice();
                let v = rlp::string(&mut buf, "slot value").map_err(|_| bad("not a slot"))?;
                if v.len() > 32 || !buf.is_empty() {
                    return Err(bad("not a 32-byte slot value"));
                }
                batch.put_snap_slot(owner, k, U256::from_be_slice(v));
            }
        }
        NodeView::Extension(key, child) => {
            let below = [path, &key].concat();
            if below.len() >= 64 {
                return Err(bad("an extension past the key's end"));
            }
            delete_under(store, owner, path, Keep::Prefix(&below), batch)?;
            heal_child(store, owner, &below, &child, batch, todo)?;
        }
        NodeView::Branch(children) => {
            if path.len() >= 64 {
                return Err(bad("a branch past the key's end"));
            }
            for (i, child) in children.iter().enumerate() {
                let below = [path, &[i as u8]].concat();
                if child.is_empty() {
                    delete_under(store, owner, &below, Keep::Nothing, batch)?;
                } else {
                    heal_child(store, owner, &below, child, batch, todo)?;
                }
            }
        }
    }
    Ok(())
}

/// A child reference of a healed node: an inline node is healed at once, a hashed one
/// asked for unless the local trie holds it.
pub(super) fn heal_child(
    store: &moat_storage::Store,
    owner: B256,
    path: &[u8],
    child: &[u8],
    batch: &mut WriteBatch,
    todo: &mut Vec<HealTask>,
) -> Result<(), SnapError> {
    if child.len() == 33 && child[0] == 0xa0 {
        let hash = B256::from_slice(&child[1..]);
        let local = store.trie_node(&owner, path)?.map(|n| keccak256(&n));
        if local != Some(hash) {
            todo.push(HealTask {
                owner,
                path: path.to_vec(),
                hash,
            });
        }
        Ok(())
    } else {
        heal_node(store, owner, path, child, batch, todo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::KECCAK256_EMPTY;
    use moat_storage::Account;

    #[test]
    fn the_heal_record_comes_back_and_bad_ones_are_refused() {
        let record = HealRecord {
            root: B256::repeat_byte(7),
            phase: HealPhase::Storage,
            tasks: vec![
                HealTask {
                    owner: B256::ZERO,
                    path: vec![],
                    hash: B256::repeat_byte(1),
                },
                HealTask {
                    owner: B256::repeat_byte(2),
                    path: vec![0x0f, 0, 3],
                    hash: B256::repeat_byte(3),
                },
            ],
        };
        let bytes = record.encode();
        assert_eq!(HealRecord::decode(&bytes), Some(record.clone()));
        assert_eq!(record.nodes_left(), 2);
        assert!(!record.done());
        // Every truncation, a trailing byte, another version or phase, a nibble out of
        // range: refused (healing then starts over), never a panic.
        for n in 0..bytes.len() {
            assert_eq!(HealRecord::decode(&bytes[..n]), None, "cut at {n}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(HealRecord::decode(&longer), None);
        let mut spoiled = bytes.clone();
        spoiled[0] = 9;
        assert_eq!(HealRecord::decode(&spoiled), None);
        let mut spoiled = bytes.clone();
        spoiled[33] = 3;
        assert_eq!(HealRecord::decode(&spoiled), None);
        let mut spoiled = bytes.clone();
        *spoiled.last_mut().unwrap() = 0x10;
        assert_eq!(HealRecord::decode(&spoiled), None);
        // A count larger than the record holds.
        let mut spoiled = bytes;
        spoiled[34..38].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(HealRecord::decode(&spoiled), None);
    }

    #[test]
    fn a_healed_node_drops_the_flat_entries_it_no_longer_holds() {
        let store = moat_storage::Store::in_memory();
        let key = |first: u8| {
            let mut k = [0x11u8; 32];
            k[0] = first;
            B256::from(k)
        };
        let a = Account {
            nonce: 1,
            balance: U256::from(1),
            storage_root: EMPTY_ROOT,
            code_hash: KECCAK256_EMPTY,
        };
        let slot = B256::repeat_byte(1);
        let mut batch = WriteBatch::new();
        for k in [0x00, 0x12, 0x1f, 0x20, 0xff].map(key) {
            batch.put_snap_account(k, &a);
            batch.put_snap_slot(k, slot, U256::from(7));
        }
        store.commit(batch).unwrap();
        let held = || {
            let mut out = Vec::new();
            store
                .snap_accounts_from(&B256::ZERO, |h, _| {
                    out.push(h);
                    true
                })
                .unwrap();
            out
        };
        let drop = |prefix: &[u8], keep: Keep<'_>, owner: B256| {
            let mut b = WriteBatch::new();
            delete_under(&store, owner, prefix, keep, &mut b).unwrap();
            store.commit(b).unwrap();
        };
        // An extension at nibble 1 with key 2: what is under 1 but off 1,2 goes, with
        // its slots.
        drop(&[1], Keep::Prefix(&[1, 2]), B256::ZERO);
        assert_eq!(held(), [0x00, 0x12, 0x20, 0xff].map(key));
        assert!(store.snap_slot(&key(0x1f), &slot).unwrap().is_zero());
        assert_eq!(store.snap_slot(&key(0x12), &slot).unwrap(), U256::from(7));
        // An empty branch slot at nibble 0; a leaf at the root keeps its key only (the
        // lowest and the highest key of the space are reached).
        drop(&[0], Keep::Nothing, B256::ZERO);
        assert_eq!(held(), [0x12, 0x20, 0xff].map(key));
        drop(&[], Keep::Key(key(0x20)), B256::ZERO);
        assert_eq!(held(), [key(0x20)]);
        // A storage trie's slots under a path.
        let owner = key(0x20);
        let mut batch = WriteBatch::new();
        for s in [0x00u8, 0x5a, 0xff] {
            batch.put_snap_slot(owner, B256::repeat_byte(s), U256::from(s as u64 + 1));
        }
        store.commit(batch).unwrap();
        drop(&[5], Keep::Key(B256::repeat_byte(0x5a)), owner);
        drop(&[0xf], Keep::Nothing, owner);
        let mut slots = Vec::new();
        store.snap_slots_of(&owner, |s, _| slots.push(s)).unwrap();
        assert_eq!(slots, [0x00, 0x01, 0x5a].map(B256::repeat_byte));
    }
}
