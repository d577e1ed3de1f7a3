//! State as it was after a recent block, read through the undo records.
//!
//! The store holds the head state only. The state after canonical block `n` (at or above
//! [`Chain::undo_floor`]: the last 128 blocks, back to the finalized block while the
//! records reach it) is the head state with the undo records of blocks
//! `n + 1 ..= head` laid over it: walking from the head down, each record says what an
//! account or slot held before its block, and the oldest record for a key wins.

use crate::chain::{Chain, ChainError};
use crate::undo::Undo;
use crate::vm::{AccountInfo, StateReader, VmError};
use alloy_primitives::{Address, B256, Bytes, U256};
use moat_storage::{Account, Store, StoreError, trie_node_key, trie_node_path, trie_owner_bounds};
use std::collections::{BTreeMap, HashMap, HashSet};

/// The state after one block: the store, plus what changed since. With no overlay it
/// is the head state itself: the one adapter execution reads state through, for block
/// import, payload building and calls alike.
#[derive(Debug, Clone)]
pub struct StateAtBlock {
    store: Store,
    overlay: Option<Box<Overlay>>,
}

/// What the blocks above a recent one changed, as it was before them.
#[derive(Debug, Clone, Default)]
struct Overlay {
    /// Accounts as they were (`None`: absent).
    accounts: HashMap<Address, Option<Account>>,
    /// Slots as they were.
    slots: HashMap<(Address, B256), U256>,
    /// Accounts whose whole storage was, back then, exactly this list.
    storage: HashMap<Address, HashMap<B256, U256>>,
    /// Accounts that did not exist back then: no storage at all.
    absent: HashSet<Address>,
    /// Trie nodes as they were (`None`: absent), by their key in the store's trie-node
    /// table ([`trie_node_key`]): sorted as the table is, so a range of the old trie is
    /// the table's range with these laid over it.
    nodes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Tries that were, back then, exactly these nodes (by the same key).
    tries: HashMap<B256, BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl StateAtBlock {
    /// The head state itself.
    pub fn head(store: Store) -> Self {
        Self {
            store,
            overlay: None,
        }
    }

    /// The state that `records` (the undo records of the blocks above it, newest first)
    /// take the store's head state back to.
    pub fn with_undo(store: Store, records: impl IntoIterator<Item = Undo>) -> Self {
        let mut state = Self::head(store);
        for undo in records {
            state.apply(undo);
        }
        state
    }

    /// Lays one undo record over what is there (records must come newest first).
    fn apply(&mut self, undo: Undo) {
        let o = self.overlay.get_or_insert_with(Box::default);
        for (address, old) in undo.accounts {
            if old.is_none() {
                o.absent.insert(address);
            } else {
                o.absent.remove(&address);
            }
            o.accounts.insert(address, old);
        }
        for (address, list) in undo.wiped {
            o.slots.retain(|(a, _), _| *a != address);
            o.storage.insert(address, list.into_iter().collect());
        }
        for (address, slot, old) in undo.slots {
            o.slots.insert((address, slot), old);
        }
        for (owner, list) in &undo.wiped_tries {
            let (start, end) = trie_owner_bounds(owner);
            let newer: Vec<Vec<u8>> = o.nodes.range(start..=end).map(|(k, _)| k.clone()).collect();
            for key in newer {
                o.nodes.remove(&key);
            }
            let trie = list
                .iter()
                .map(|(path, node)| (trie_node_key(owner, path), node.clone()))
                .collect();
            o.tries.insert(*owner, trie);
        }
        for (owner, path, old) in undo.trie {
            // A wiped trie's nodes come whole from its list.
            if !undo.wiped_tries.iter().any(|(w, _)| *w == owner) {
                o.nodes.insert(trie_node_key(&owner, &path), old);
            }
        }
    }

    /// The trie node at `path` of trie `owner` as it was.
    pub fn trie_node(&self, owner: &B256, path: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some(o) = &self.overlay {
            let key = trie_node_key(owner, path);
            if let Some(old) = o.nodes.get(&key) {
                return Ok(old.clone());
            }
            if let Some(trie) = o.tries.get(owner) {
                return Ok(trie.get(&key).cloned());
            }
        }
        self.store.trie_node(owner, path)
    }

    /// The nodes of trie `owner` as they were, from `path`'s key on, in the order of the
    /// trie-node table ([`Store::trie_node_entries_from`]), until `visit` returns
    /// `false`.
    pub fn trie_nodes_from(
        &self,
        owner: &B256,
        path: &[u8],
        mut visit: impl FnMut(Vec<u8>, &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        let mut bad = None;
        self.trie_node_entries_from(owner, path, |key, node| match trie_node_path(key) {
            Ok(path) => visit(path, node),
            Err(e) => {
                bad = Some(e);
                false
            }
        })?;
        bad.map_or(Ok(()), Err)
    }

    /// [`StateAtBlock::trie_nodes_from`] with each node's table key ([`trie_node_key`])
    /// rather than its path. The head state is one scan of the table; an older one is
    /// that scan (or, for a trie dropped since, its old node list) merged in key order
    /// with the nodes the blocks since changed, their old node taking the place of the
    /// table's at the same key, their absence dropping it.
    pub fn trie_node_entries_from(
        &self,
        owner: &B256,
        path: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        let Some(o) = &self.overlay else {
            return self.store.trie_node_entries_from(owner, path, visit);
        };
        let start = trie_node_key(owner, path);
        let (_, end) = trie_owner_bounds(owner);
        let mut changed = o.nodes.range(start.clone()..=end.clone()).peekable();
        // The base node `key`: first the changed nodes before it, then it or the
        // changed node in its place. Whether to go on.
        let mut next = |key: &[u8], node: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool| {
            while let Some((k, old)) = changed.next_if(|(k, _)| k.as_slice() < key) {
                if let Some(old) = old
                    && !visit(k, old)
                {
                    return false;
                }
            }
            match changed.next_if(|(k, _)| k.as_slice() == key) {
                Some((k, Some(old))) => visit(k, old),
                Some((_, None)) => true,
                None => visit(key, node),
            }
        };
        let mut stopped = false;
        match o.tries.get(owner) {
            Some(trie) => {
                for (key, node) in trie.range(start..=end) {
                    if !next(key, node, &mut visit) {
                        stopped = true;
                        break;
                    }
                }
            }
            None => {
                self.store
                    .trie_node_entries_from(owner, path, |key, node| {
                        let go_on = next(key, node, &mut visit);
                        stopped |= !go_on;
                        go_on
                    })?;
            }
        }
        if !stopped {
            // The changed nodes after the last base node.
            for (k, old) in changed {
                if let Some(old) = old
                    && !visit(k, old)
                {
                    break;
                }
            }
        }
        Ok(())
    }

    /// The account as it was at this block; `None` if it did not exist.
    pub fn account(&self, address: &Address) -> Result<Option<Account>, StoreError> {
        if let Some(old) = self.overlay.as_ref().and_then(|o| o.accounts.get(address)) {
            return Ok(*old);
        }
        self.store.account(address)
    }

    /// The value of `slot` in `address`'s storage at this block (zero when unset).
    pub fn storage(&self, address: &Address, slot: &B256) -> Result<U256, StoreError> {
        let Some(o) = &self.overlay else {
            return self.store.storage(address, slot);
        };
        if let Some(v) = o.slots.get(&(*address, *slot)) {
            return Ok(*v);
        }
        if o.absent.contains(address) {
            return Ok(U256::ZERO);
        }
        if let Some(list) = o.storage.get(address) {
            return Ok(list.get(slot).copied().unwrap_or_default());
        }
        self.store.storage(address, slot)
    }

    /// The code whose keccak256 is `code_hash`; `None` if the store lacks it.
    pub fn code(&self, code_hash: &B256) -> Result<Option<Bytes>, StoreError> {
        self.store.code(code_hash)
    }
}

impl StateAtBlock {
    /// The state root of this (past) state with `changes` applied, read through the
    /// overlay; nothing is written. Changes of one address apply in order.
    fn root_over_overlay(&self, changes: &[crate::vm::AccountChange]) -> Result<B256, StoreError> {
        let previous = |address: &Address| StateAtBlock::account(self, address);
        let err = |e: moat_trie::TrieError| StoreError::Corrupt(e.to_string());
        crate::state_root::update_over(self, changes, previous, err).map(|u| u.root)
    }
}

fn state_err(e: StoreError) -> VmError {
    VmError::State(e.to_string())
}

impl StateReader for StateAtBlock {
    fn state_root_with(
        &self,
        changes: &[crate::vm::AccountChange],
    ) -> Result<Option<B256>, VmError> {
        // The head state has its tries in the store as they are; an older state reads
        // its trie nodes and accounts through the overlay.
        if self.overlay.is_none() {
            return crate::state_root::state_root_after(&self.store, changes)
                .map(|(root, _)| Some(root))
                .map_err(state_err);
        }
        self.root_over_overlay(changes).map(Some).map_err(state_err)
    }

    fn warm_trie_path(&self, address: &Address, slot: Option<&B256>) {
        // An older state's tries are read through its overlay, which a warmed cache of
        // the head's nodes would not serve.
        if self.overlay.is_none() {
            crate::state_root::warm_path(&self.store, address, slot);
        }
    }

    fn account(&self, address: &Address) -> Result<Option<AccountInfo>, VmError> {
        Ok(StateAtBlock::account(self, address)
            .map_err(state_err)?
            .map(|a| AccountInfo {
                nonce: a.nonce,
                balance: a.balance,
                code_hash: a.code_hash,
            }))
    }

    fn storage(&self, address: &Address, slot: &B256) -> Result<U256, VmError> {
        StateAtBlock::storage(self, address, slot).map_err(state_err)
    }

    fn code(&self, code_hash: &B256) -> Result<Option<Bytes>, VmError> {
        StateAtBlock::code(self, code_hash).map_err(state_err)
    }

    fn block_hash(&self, number: u64) -> Result<B256, VmError> {
        Ok(self
            .store
            .canonical_hash(number)
            .map_err(state_err)?
            .unwrap_or_default())
    }
}

impl Chain {
    /// The state after canonical block `number`: the head's, or one back to
    /// [`Chain::undo_floor`]. Older state is gone ([`ChainError::HistoryUnavailable`]).
    pub fn state_at(&self, number: u64) -> Result<StateAtBlock, ChainError> {
        let (head, _) = self.head()?;
        if number >= head {
            return Ok(StateAtBlock::head(self.store().clone()));
        }
        let oldest = self.undo_floor()?;
        if number < oldest {
            return Err(ChainError::HistoryUnavailable {
                number,
                head,
                oldest,
            });
        }
        let mut state = StateAtBlock::head(self.store().clone());
        for n in (number + 1..=head).rev() {
            let hash = self
                .store()
                .canonical_hash(n)?
                .ok_or_else(|| ChainError::Corrupt(format!("no canonical block {n}")))?;
            let record = self
                .store()
                .undo(&hash)?
                .ok_or(ChainError::HistoryUnavailable {
                    number,
                    head,
                    oldest: n,
                })?;
            let undo = Undo::decode(&record)
                .map_err(|e| ChainError::Corrupt(format!("undo record of {hash}: {e}")))?;
            state.apply(undo);
        }
        Ok(state)
    }
}

impl moat_trie::NodeSource for StateAtBlock {
    fn node(&self, owner: &B256, path: &[u8]) -> Result<Option<Vec<u8>>, moat_trie::TrieError> {
        self.trie_node(owner, path)
            .map_err(|e| moat_trie::TrieError::Source(e.to_string()))
    }

    /// A node the undo records give is checked here; one the store gives, by the store
    /// (its cache of checked nodes spares hashing it again).
    fn node_expected(
        &self,
        owner: &B256,
        path: &[u8],
        expected: moat_trie::Expected<'_>,
    ) -> Result<Vec<u8>, moat_trie::TrieError> {
        if let Some(o) = &self.overlay {
            let key = trie_node_key(owner, path);
            let old = match (o.nodes.get(&key), o.tries.get(owner)) {
                (Some(old), _) => Some(old.clone()),
                (None, Some(trie)) => Some(trie.get(&key).cloned()),
                (None, None) => None,
            };
            if let Some(old) = old {
                let rlp = old.ok_or_else(|| moat_trie::TrieError::missing(owner, path))?;
                expected.check(owner, path, &rlp)?;
                return Ok(rlp);
            }
        }
        let store = crate::state_root::StoreNodes(&self.store);
        moat_trie::NodeSource::node_expected(&store, owner, path, expected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use moat_storage::WriteBatch;

    /// Trie nodes by (owner, path).
    type Nodes = BTreeMap<(B256, Vec<u8>), Vec<u8>>;

    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        fn path(&mut self) -> Vec<u8> {
            let len = match self.below(4) {
                0 => self.below(4),
                1 => 64,
                _ => self.below(65),
            };
            (0..len).map(|_| self.below(16) as u8).collect()
        }

        fn node(&mut self) -> Vec<u8> {
            let len = 1 + self.below(40) as usize;
            (0..len).map(|_| self.next() as u8).collect()
        }
    }

    /// The owners: the account trie, a trie changed in place, one wiped and rebuilt in
    /// block 1, one created in block 1, one deleted in block 2.
    const KEPT: [B256; 2] = [B256::ZERO, B256::repeat_byte(1)];
    const REBUILT: B256 = B256::repeat_byte(2);
    const CREATED: B256 = B256::repeat_byte(3);
    const DELETED: B256 = B256::repeat_byte(4);

    fn fill(rng: &mut Rng, nodes: &mut Nodes, owner: B256, count: usize) {
        for _ in 0..count {
            nodes.insert((owner, rng.path()), rng.node());
        }
    }

    /// `before` with some nodes of `owners` deleted, some changed and some added.
    fn changed(rng: &mut Rng, before: &Nodes, owners: &[B256]) -> Nodes {
        let mut after = before.clone();
        for (owner, path) in before.keys() {
            if !owners.contains(owner) {
                continue;
            }
            match rng.below(4) {
                0 => {
                    after.remove(&(*owner, path.clone()));
                }
                1 => {
                    after.insert((*owner, path.clone()), rng.node());
                }
                _ => {}
            }
        }
        for owner in owners {
            fill(rng, &mut after, *owner, 60);
        }
        after
    }

    /// The undo record of a block that took `before` to `after`, dropping `wiped` whole.
    fn undo(before: &Nodes, after: &Nodes, wiped: &[B256]) -> Undo {
        let mut undo = Undo::default();
        let keys: HashSet<&(B256, Vec<u8>)> = before.keys().chain(after.keys()).collect();
        for key in keys {
            if before.get(key) != after.get(key) {
                undo.trie
                    .push((key.0, key.1.clone(), before.get(key).cloned()));
            }
        }
        for owner in wiped {
            let list = before
                .iter()
                .filter(|((o, _), _)| o == owner)
                .map(|((_, p), n)| (p.clone(), n.clone()))
                .collect();
            undo.wiped_tries.push((*owner, list));
        }
        undo
    }

    /// The nodes of `owner` from `path`'s key on, in the table's order.
    fn expected(nodes: &Nodes, owner: &B256, path: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let start = trie_node_key(owner, path);
        let mut out: Vec<(Vec<u8>, Vec<u8>, Vec<u8>)> = nodes
            .iter()
            .filter(|((o, _), _)| o == owner)
            .map(|((o, p), n)| (trie_node_key(o, p), p.clone(), n.clone()))
            .filter(|(k, _, _)| *k >= start)
            .collect();
        out.sort();
        out.into_iter().map(|(_, p, n)| (p, n)).collect()
    }

    fn scanned(
        state: &StateAtBlock,
        owner: &B256,
        path: &[u8],
        most: usize,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        state
            .trie_nodes_from(owner, path, |p, n| {
                out.push((p, n.to_vec()));
                out.len() < most
            })
            .unwrap();
        out
    }

    #[test]
    fn an_older_tries_nodes_are_the_tables_merged_with_the_undo_records() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut v0 = Nodes::new();
        for owner in KEPT.iter().chain([&REBUILT, &DELETED]) {
            fill(&mut rng, &mut v0, *owner, 300);
        }
        // Block 1 changes the kept tries, rebuilds one from nothing and creates one.
        let mut v1 = changed(&mut rng, &v0, &KEPT);
        v1.retain(|(o, _), _| *o != REBUILT);
        fill(&mut rng, &mut v1, REBUILT, 200);
        fill(&mut rng, &mut v1, CREATED, 100);
        // Block 2 changes the kept and new tries and deletes one.
        let mut v2 = changed(&mut rng, &v1, &[KEPT[0], KEPT[1], REBUILT, CREATED]);
        v2.retain(|(o, _), _| *o != DELETED);
        let undo1 = undo(&v0, &v1, &[REBUILT]);
        let undo2 = undo(&v1, &v2, &[DELETED]);

        let store = Store::in_memory();
        let mut batch = WriteBatch::new();
        for ((owner, path), node) in &v2 {
            batch.set_trie_node(*owner, path.clone(), Some(node.clone()));
        }
        store.commit(batch).unwrap();

        let cases = [
            (StateAtBlock::head(store.clone()), &v2),
            (StateAtBlock::with_undo(store.clone(), [undo2.clone()]), &v1),
            (StateAtBlock::with_undo(store.clone(), [undo2, undo1]), &v0),
        ];
        let owners = [
            KEPT[0],
            KEPT[1],
            REBUILT,
            CREATED,
            DELETED,
            B256::repeat_byte(9),
        ];
        for (back, (state, want)) in cases.iter().enumerate() {
            for owner in &owners {
                let mut starts = vec![vec![], vec![15; 64], vec![8], vec![0; 64]];
                for _ in 0..30 {
                    starts.push(rng.path());
                }
                // Starts on the nodes themselves, stored and changed ones alike.
                starts.extend(
                    v0.keys()
                        .chain(v2.keys())
                        .filter(|(o, _)| o == owner)
                        .take(20)
                        .map(|(_, p)| p.clone()),
                );
                for start in &starts {
                    let all = expected(want, owner, start);
                    assert_eq!(
                        scanned(state, owner, start, usize::MAX),
                        all,
                        "{back} blocks back, owner {owner}, from {start:?}"
                    );
                    // A visit that stops ends the scan there.
                    for most in [1, 7] {
                        let got = scanned(state, owner, start, most);
                        assert_eq!(got, all[..all.len().min(most)]);
                    }
                }
            }
            // Point reads agree with the scan.
            for (owner, path) in v0.keys().chain(v1.keys()).chain(v2.keys()) {
                assert_eq!(
                    state.trie_node(owner, path).unwrap(),
                    want.get(&(*owner, path.clone())).cloned()
                );
            }
        }
    }
}
