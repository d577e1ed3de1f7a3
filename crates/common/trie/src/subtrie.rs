//! Updating a trie's 16 top-level subtries independently (on worker threads), then
//! merging their new references into the root branch.
//!
//! When the stored root of a trie is a branch, every key whose hash starts with nibble
//! `i` lives below path `[i]`, and nothing an insert or a removal there does reaches
//! above `[i]` except the root's child reference `i` (and, when the root is left with
//! fewer than two children, its collapse into a leaf or extension). So a [`Subtrie`]
//! per nibble can be updated and hashed on its own, with no shared state but the
//! read-only [`NodeSource`], and [`RootBranch::commit`] puts the root back together.
//!
//! Invariants, so that the parallel update is interchangeable with [`Trie::commit`]:
//! - a subtrie holds only keys of its nibble (others are refused with an error);
//! - its writes are what the sequential commit writes below `[i]`, in the same order:
//!   children before parents, a subtree's nodes together, subtries in nibble order, then
//!   the root, then the removed paths sorted (every removed path of subtrie `i` sorts
//!   before those of `i + 1`), so the concatenation equals the sequential commit's list
//!   exactly (same paths, nodes, old nodes, order);
//! - when the merged root would have fewer than two children, [`RootBranch::commit`]
//!   gives `None` and the caller runs the sequential update instead: the collapse moves
//!   a node across subtries, which only the whole trie can do.

use super::*;

/// The root of a trie as stored, when it is a branch: its RLP and its children.
#[derive(Clone)]
pub struct RootBranch {
    rlp: Vec<u8>,
    children: Box<[Child; 16]>,
}

impl RootBranch {
    /// The stored root of `owner` if it is a branch (`None`: an empty trie, or a root
    /// leaf or extension: small tries, updated sequentially).
    pub fn read<S: NodeSource + ?Sized>(
        source: &S,
        owner: &B256,
    ) -> Result<Option<RootBranch>, TrieError> {
        Self::decode(source.node(owner, &[])?, owner)
    }

    /// [`Self::read`] of a trie whose root must hash to `root`.
    pub fn read_expecting<S: NodeSource + ?Sized>(
        source: &S,
        owner: &B256,
        root: &B256,
    ) -> Result<Option<RootBranch>, TrieError> {
        if *root == EMPTY_ROOT {
            return Self::read(source, owner);
        }
        let rlp = source.node_expected(owner, &[], Expected::Root(root))?;
        Self::decode(Some(rlp), owner)
    }

    fn decode(rlp: Option<Vec<u8>>, owner: &B256) -> Result<Option<RootBranch>, TrieError> {
        let Some(rlp) = rlp else {
            return Ok(None);
        };
        match decode_node(&rlp) {
            Some(Node::Branch { children }) => Ok(Some(RootBranch { rlp, children })),
            Some(_) => Ok(None),
            None => Err(TrieError::Corrupt {
                owner: *owner,
                path: String::new(),
                reason: "undecodable node",
            }),
        }
    }

    /// The trie's commit from its subtries' (at most one per nibble, any order): the new
    /// root and the writes in [`Trie::commit`]'s order. `None` when the root would be
    /// left with fewer than two children (the caller updates the trie sequentially).
    pub fn commit(self, mut subtries: Vec<SubtrieCommit>) -> Result<Option<TrieCommit>, TrieError> {
        subtries.sort_unstable_by_key(|s| s.nibble);
        if subtries.windows(2).any(|w| w[0].nibble == w[1].nibble) {
            return Err(TrieError::Source(
                "two subtrie commits for one nibble".to_string(),
            ));
        }
        let mut children = self.children;
        for s in &subtries {
            if s.touched {
                children[s.nibble as usize] = match s.child {
                    Some(r) => Child::Stored(r),
                    None => Child::Empty,
                };
            }
        }
        if children.iter().filter(|c| **c != Child::Empty).count() < 2 {
            return Ok(None);
        }
        let rlp = encode_node(&Node::Branch { children });
        let root = keccak256(&rlp);
        let count = subtries
            .iter()
            .map(|s| s.written.len() + s.removed.len())
            .sum::<usize>();
        let mut writes = Vec::with_capacity(count + 1);
        let mut removed = Vec::new();
        for s in subtries {
            writes.extend(s.written);
            removed.extend(s.removed);
        }
        if rlp != self.rlp {
            writes.push(TrieWrite {
                path: Vec::new(),
                node: Some(rlp),
                old: Some(self.rlp),
            });
        }
        writes.extend(removed);
        Ok(Some(TrieCommit { root, writes }))
    }
}

impl RootBranch {
    /// The subtrie below `nibble` of this root, whose first node is checked against the
    /// reference this root holds for it.
    pub fn subtrie<'s, S: NodeSource + ?Sized>(
        &self,
        source: &'s S,
        owner: B256,
        nibble: u8,
    ) -> Subtrie<'s, S> {
        let nibble = nibble & 0x0f;
        Subtrie {
            trie: Trie::new(source, owner),
            nibble,
            expect: Expect::of(&self.children[nibble as usize]),
        }
    }
}

/// The part of a trie below one nibble of its root branch, being updated.
pub struct Subtrie<'s, S: NodeSource + ?Sized> {
    trie: Trie<'s, S>,
    nibble: u8,
    /// What the root branch names at the nibble (`Unknown` when not given).
    expect: Expect,
}

/// What a [`Subtrie`] changed: its new reference in the root branch and its writes.
pub struct SubtrieCommit {
    nibble: u8,
    /// Something below the nibble changed (its reference is `child`).
    touched: bool,
    child: Option<NodeRef>,
    written: Vec<TrieWrite>,
    removed: Vec<TrieWrite>,
}

impl SubtrieCommit {
    /// The root branch's child slot (0..=15) this subtrie lies under.
    pub fn nibble(&self) -> u8 {
        self.nibble
    }
}

impl<'s, S: NodeSource + ?Sized> Subtrie<'s, S> {
    /// The keys of `owner` whose first nibble is `nibble` (below 16).
    pub fn new(source: &'s S, owner: B256, nibble: u8) -> Self {
        Self {
            trie: Trie::new(source, owner),
            nibble: nibble & 0x0f,
            expect: Expect::Unknown,
        }
    }

    /// The nibbles of `key` after the first, which must be this subtrie's.
    fn rest(&self, key: &B256) -> Result<Vec<u8>, TrieError> {
        let mut n = nibbles(key);
        if n[0] != self.nibble {
            return Err(self
                .trie
                .corrupt(&[self.nibble], "a key outside the subtrie"));
        }
        n.remove(0);
        Ok(n)
    }

    /// [`Trie::insert_with`] for a key of this subtrie.
    pub fn insert_with(
        &mut self,
        key: &B256,
        value: impl FnOnce(Option<&[u8]>) -> Result<Vec<u8>, TrieError>,
    ) -> Result<Option<Vec<u8>>, TrieError> {
        let rest = self.rest(key)?;
        self.trie
            .insert_at(vec![self.nibble], self.expect, &rest, value)
    }

    /// [`Trie::insert`] for a key of this subtrie.
    pub fn insert(&mut self, key: &B256, value: Vec<u8>) -> Result<Option<Vec<u8>>, TrieError> {
        self.insert_with(key, |_| Ok(value))
    }

    /// [`Trie::remove`] for a key of this subtrie.
    pub fn remove(&mut self, key: &B256) -> Result<Option<Vec<u8>>, TrieError> {
        let rest = self.rest(key)?;
        self.trie.remove_at(vec![self.nibble], self.expect, &rest)
    }

    /// Hashes the changed nodes below the nibble; its writes as [`Trie::commit`] would
    /// give them for these paths.
    pub fn commit(mut self) -> Result<SubtrieCommit, TrieError> {
        let path = [self.nibble];
        let mut encoded = Vec::with_capacity(self.trie.touched.len());
        let touched = self.trie.touched.contains(&PathKey::of(&path));
        let child = if touched {
            self.trie.hash_at(&path, &mut encoded)?
        } else {
            None
        };
        let (written, removed) = self.trie.writes(encoded)?;
        Ok(SubtrieCommit {
            nibble: self.nibble,
            touched,
            child,
            written,
            removed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::U256;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const OWNER: B256 = B256::ZERO;

    fn value(v: u64) -> Vec<u8> {
        alloy_rlp::encode(U256::from(v))
    }

    fn reference_root(state: &BTreeMap<B256, u64>) -> B256 {
        alloy_trie::root::storage_root_unsorted(state.iter().map(|(k, v)| (*k, U256::from(*v))))
    }

    /// The sequential commit of `ops` on `nodes`.
    fn sequential(nodes: &MemoryNodes, ops: &[(B256, Option<u64>)]) -> TrieCommit {
        let mut trie = Trie::new(nodes, OWNER);
        for (k, v) in ops {
            match v {
                Some(v) => trie.insert(k, value(*v)).unwrap(),
                None => trie.remove(k).unwrap(),
            };
        }
        trie.commit().unwrap()
    }

    /// The same `ops` through one subtrie per nibble, each on its own thread, merged;
    /// `None` when the root is not a branch or would collapse. The values each op
    /// returned are checked against the sequential trie's.
    fn parallel(nodes: &MemoryNodes, ops: &[(B256, Option<u64>)]) -> Option<TrieCommit> {
        let root = RootBranch::read(nodes, &OWNER).unwrap()?;
        let mut buckets: Vec<Vec<(B256, Option<u64>)>> = vec![Vec::new(); 16];
        for (k, v) in ops {
            buckets[(k[0] >> 4) as usize].push((*k, *v));
        }
        let commits = std::thread::scope(|s| {
            let handles: Vec<_> = buckets
                .iter()
                .enumerate()
                .filter(|(_, b)| !b.is_empty())
                .map(|(nibble, bucket)| {
                    s.spawn(move || {
                        let mut sub = Subtrie::new(nodes, OWNER, nibble as u8);
                        for (k, v) in bucket {
                            match v {
                                Some(v) => sub.insert(k, value(*v)).unwrap(),
                                None => sub.remove(k).unwrap(),
                            };
                        }
                        sub.commit().unwrap()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        });
        root.commit(commits).unwrap()
    }

    fn key_strategy() -> impl Strategy<Value = B256> {
        prop_oneof![
            any::<[u8; 32]>().prop_map(B256::from),
            // Shared prefixes under a few nibbles: deep and inline nodes, subtries that
            // empty or shrink to one leaf.
            (0u8..3, 0u8..3, 0u8..8).prop_map(|(a, b, c)| {
                let mut k = B256::repeat_byte(0x5a);
                k[0] = (a << 4) | 0x1;
                k[30] = b;
                k[31] = c;
                k
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// Random states, random batches of inserts and removals (keys present and
        /// absent): the merged subtrie commits equal the sequential commit exactly
        /// (root, every write, old node and order), and the root equals alloy-trie's.
        #[test]
        fn subtries_merge_into_the_sequential_commit(
            initial in proptest::collection::vec((key_strategy(), 1u64..1000), 0..200),
            batches in proptest::collection::vec(
                proptest::collection::vec((key_strategy(), proptest::option::of(1u64..1000)), 1..60),
                1..5,
            ),
            remove_existing in proptest::collection::vec(any::<prop::sample::Index>(), 0..40),
        ) {
            let mut nodes = MemoryNodes::default();
            let mut state: BTreeMap<B256, u64> = initial.into_iter().collect();
            let ops: Vec<_> = state.iter().map(|(k, v)| (*k, Some(*v))).collect();
            let c = sequential(&nodes, &ops);
            nodes.apply(&OWNER, &c);
            for (n, batch) in batches.iter().enumerate() {
                let mut ops = batch.clone();
                // Deletions of keys that are there (the first batch also removes a lot).
                if !state.is_empty() {
                    let keys: Vec<B256> = state.keys().copied().collect();
                    let take = if n == 0 { remove_existing.len() } else { remove_existing.len() / 4 };
                    for ix in &remove_existing[..take] {
                        ops.push((*ix.get(&keys), None));
                    }
                }
                let seq = sequential(&nodes, &ops);
                for (k, v) in &ops {
                    match v {
                        Some(v) => state.insert(*k, *v),
                        None => state.remove(k),
                    };
                }
                prop_assert_eq!(seq.root, reference_root(&state));
                if let Some(par) = parallel(&nodes, &ops) {
                    prop_assert_eq!(&par, &seq);
                } else {
                    // Only a root that is not a branch, or one left with under two
                    // children, falls back.
                    let children = match RootBranch::read(&nodes, &OWNER).unwrap() {
                        None => 0,
                        Some(_) => {
                            let mut after = nodes.clone();
                            after.apply(&OWNER, &seq);
                            match after.node(&OWNER, &[]).unwrap().and_then(|r| decode_node(&r)) {
                                Some(Node::Branch { children }) => {
                                    children.iter().filter(|c| **c != Child::Empty).count()
                                }
                                _ => 0,
                            }
                        }
                    };
                    prop_assert!(children < 2, "fell back with a branch root of {} children", children);
                }
                nodes.apply(&OWNER, &seq);
            }
        }
    }

    #[test]
    fn a_key_of_another_nibble_is_an_error() {
        let nodes = MemoryNodes::default();
        let mut sub = Subtrie::new(&nodes, OWNER, 3);
        let key = B256::repeat_byte(0x41);
        assert!(matches!(
            sub.insert(&key, value(1)),
            Err(TrieError::Corrupt { .. })
        ));
        assert!(matches!(sub.remove(&key), Err(TrieError::Corrupt { .. })));
    }

    #[test]
    fn a_root_left_with_one_child_falls_back() {
        let mut nodes = MemoryNodes::default();
        let a = B256::repeat_byte(0x11);
        let b = B256::repeat_byte(0x22);
        let c = sequential(&nodes, &[(a, Some(1)), (b, Some(2))]);
        nodes.apply(&OWNER, &c);
        assert!(parallel(&nodes, &[(b, None)]).is_none());
        // Changing a value keeps the branch: merged, and equal to the sequential commit.
        let ops = [(b, Some(3))];
        assert_eq!(parallel(&nodes, &ops), Some(sequential(&nodes, &ops)));
    }
}
