//! A read-through cache of trie nodes above the database.
//!
//! A block's state-root update reads the nodes on the paths of the keys it changed. The
//! upper levels of the account trie are read by every block, and in a large state each
//! database read descends a deeper B-tree: without this cache the cost of a node read
//! grows with the state. Here a node read is one hash lookup, whatever the state's size.
//!
//! Coherence: the cache holds only what the database holds. Every write to the trie-node
//! table goes through a store commit, and the commit, once the database has applied it,
//! updates the cache with the written values (a removed node leaves the cache; a range
//! delete, rare: a wiped storage trie or a cleared state, empties it; nodes a commit takes
//! from stored records, an undo record, leave it). A checked reader that missed fills the
//! cache with what it read, once it passed the reader's hash check, and only if no commit
//! updated the cache since it started (a generation counter checked under a lock the
//! commit takes to write), so a value read before a commit can never be inserted after
//! that commit's update. Unchecked reads do not fill it: a cached node is a checked one.

use crate::backend::{Op, Table};
use parking_lot::RwLock;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes an entry costs beyond its key and value (the cache's slot, the `Arc` header).
const ENTRY_OVERHEAD: u64 = 64;

#[derive(Clone)]
struct ByBytes;

impl quick_cache::Weighter<Vec<u8>, Arc<[u8]>> for ByBytes {
    fn weight(&self, key: &Vec<u8>, value: &Arc<[u8]>) -> u64 {
        key.len() as u64 + value.len() as u64 + ENTRY_OVERHEAD
    }
}

/// Trie nodes by their table key, bounded in bytes.
pub(crate) struct NodeCache {
    entries: quick_cache::sync::Cache<Vec<u8>, Arc<[u8]>, ByBytes>,
    /// Bumped by every commit that changed the trie-node table.
    generation: AtomicU64,
    /// Readers insert under the read side; a commit updates under the write side.
    fill: RwLock<()>,
}

/// A written node: its table key, and its RLP or `None` when removed.
type NodeWrite = (Vec<u8>, Option<Arc<[u8]>>);

/// What a commit does to the cache, taken from its ops before they are applied.
pub(crate) enum NodeChanges {
    None,
    /// The written nodes: a value, or `None` for a removed node.
    Nodes(Vec<NodeWrite>),
    /// A range of nodes was deleted: forget everything.
    Clear,
}

impl NodeChanges {
    /// The same paths, each forgotten rather than cached (nodes nobody hashed).
    pub(crate) fn forgetting(self) -> NodeChanges {
        match self {
            NodeChanges::Nodes(nodes) => {
                NodeChanges::Nodes(nodes.into_iter().map(|(k, _)| (k, None)).collect())
            }
            other => other,
        }
    }

    pub(crate) fn of(ops: &[Op]) -> NodeChanges {
        let mut nodes = Vec::new();
        for op in ops {
            match op {
                Op::Put {
                    table: Table::TrieNodes,
                    key,
                    value,
                } => nodes.push((key.clone(), Some(Arc::from(value.as_slice())))),
                Op::Delete {
                    table: Table::TrieNodes,
                    key,
                } => nodes.push((key.clone(), None)),
                Op::DeleteRange {
                    table: Table::TrieNodes,
                    ..
                } => return NodeChanges::Clear,
                Op::Put { .. } | Op::Delete { .. } | Op::DeleteRange { .. } => {}
                #[cfg(test)]
                Op::Fail | Op::FailDisk => {}
            }
        }
        if nodes.is_empty() {
            NodeChanges::None
        } else {
            NodeChanges::Nodes(nodes)
        }
    }
}

impl NodeCache {
    pub(crate) fn new(capacity_bytes: u64) -> NodeCache {
        // A typical node with its key is a few hundred bytes.
        let items = (capacity_bytes / 256).clamp(16, 1 << 24) as usize;
        NodeCache {
            entries: quick_cache::sync::Cache::with_weighter(items, capacity_bytes, ByBytes),
            generation: AtomicU64::new(0),
            fill: RwLock::new(()),
        }
    }

    pub(crate) fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.entries.get(key).map(|v| v.to_vec())
    }

    /// The generation to pass to [`NodeCache::fill`] for a read about to start.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Caches what a read that started at `generation` found, unless a commit has
    /// updated the cache since.
    pub(crate) fn fill(&self, generation: u64, key: &[u8], value: &[u8]) {
        let _guard = self.fill.read();
        if self.generation.load(Ordering::Acquire) == generation {
            self.entries.insert(key.to_vec(), Arc::from(value));
        }
    }

    /// Applies a commit's changes; call after the database applied them.
    pub(crate) fn apply(&self, changes: NodeChanges) {
        if matches!(changes, NodeChanges::None) {
            return;
        }
        let _guard = self.fill.write();
        match changes {
            NodeChanges::None => {}
            NodeChanges::Clear => self.entries.clear(),
            NodeChanges::Nodes(nodes) => {
                for (key, value) in nodes {
                    match value {
                        Some(v) => self.entries.insert(key, v),
                        None => {
                            self.entries.remove(&key);
                        }
                    }
                }
            }
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Forgets everything (a failed commit: the database may or may not hold it).
    pub(crate) fn clear(&self) {
        let _guard = self.fill.write();
        self.entries.clear();
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &[u8], value: &[u8]) -> Op {
        Op::Put {
            table: Table::TrieNodes,
            key: key.to_vec(),
            value: value.to_vec(),
        }
    }

    #[test]
    fn a_read_from_before_a_commit_is_not_cached_after_it() {
        let cache = NodeCache::new(1 << 20);
        // A reader starts, reads the old value from the database...
        let generation = cache.generation();
        // ...a commit writes a new one and updates the cache...
        cache.apply(NodeChanges::of(&[put(b"k", b"new")]));
        // ...and the reader's late fill must not bring the old value back.
        cache.fill(generation, b"k", b"old");
        assert_eq!(cache.get(b"k").as_deref(), Some(&b"new"[..]));

        // A commit that removes the node takes it out; a stale fill stays out.
        let generation = cache.generation();
        cache.apply(NodeChanges::of(&[Op::Delete {
            table: Table::TrieNodes,
            key: b"k".to_vec(),
        }]));
        cache.fill(generation, b"k", b"new");
        assert_eq!(cache.get(b"k"), None);

        // A fill with no commit in between is kept.
        let generation = cache.generation();
        cache.fill(generation, b"k", b"v");
        assert_eq!(cache.get(b"k").as_deref(), Some(&b"v"[..]));
    }

    #[test]
    fn other_tables_leave_the_cache_alone_and_a_range_delete_empties_it() {
        let cache = NodeCache::new(1 << 20);
        cache.apply(NodeChanges::of(&[put(b"a", b"1"), put(b"b", b"2")]));
        let before = cache.generation();
        let other = Op::Put {
            table: Table::Accounts,
            key: b"a".to_vec(),
            value: b"x".to_vec(),
        };
        cache.apply(NodeChanges::of(&[other]));
        assert_eq!(
            cache.generation(),
            before,
            "no trie write, no new generation"
        );
        assert_eq!(cache.get(b"a").as_deref(), Some(&b"1"[..]));
        cache.apply(NodeChanges::of(&[Op::DeleteRange {
            table: Table::TrieNodes,
            start: b"a".to_vec(),
            end: Some(b"a".to_vec()),
        }]));
        assert_eq!(cache.get(b"a"), None);
        assert_eq!(cache.get(b"b"), None);
    }
}
