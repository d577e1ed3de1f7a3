//! Warming the database's page cache after a start ([`Store::warm_trie_nodes`]).
//!
//! The first pass over the trie-node table after a start (a peer snap-syncing from us
//! reads the whole account trie) pays for filling redb's page cache: a `pread` per page
//! and the kernel handing the process fresh, zeroed memory for it. Read ahead of time
//! on an otherwise idle thread, that cost is gone from the first peer's requests. The
//! read goes in chunks, each under a snapshot of its own (a long read would keep old
//! pages alive while blocks are written), and is bounded by the page cache's own size.

use crate::backend::Table;
use crate::{Store, StoreError};

/// Entries read under one snapshot.
const CHUNK_ENTRIES: u64 = 8192;
/// Pages are about half full: keys and values of this fraction of the page cache's size
/// fill it.
const PAGE_FILL_DIVISOR: u64 = 2;

/// What a [`Store::warm_trie_nodes`] read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Warmed {
    /// Trie nodes read.
    pub entries: u64,
    /// Their keys' and values' bytes.
    pub bytes: u64,
    /// Why it ended.
    pub end: WarmEnd,
}

/// Why a warm-up ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WarmEnd {
    /// The whole table was read.
    #[default]
    Done,
    /// The page cache's share was read ([`Store::warm_budget`]).
    Budget,
    /// The caller asked it to stop.
    Stopped,
    /// The store keeps no page cache (in memory): nothing to warm.
    NoCache,
}

impl Store {
    /// The keys' and values' bytes a warm-up reads at most: what fills the database's
    /// page cache (the `--cache` share given to it), 0 for a store without one.
    pub fn warm_budget(&self) -> u64 {
        self.backend.page_cache_bytes() as u64 / PAGE_FILL_DIVISOR
    }

    /// Reads the trie-node table in key order (the account trie, then the storage tries)
    /// so that the database's page cache holds its pages, up to [`Store::warm_budget`].
    /// `go_on` is asked before each chunk of [`CHUNK_ENTRIES`] nodes; the read stops when
    /// it says no. Nothing is kept but the pages the database caches.
    pub fn warm_trie_nodes(&self, mut go_on: impl FnMut() -> bool) -> Result<Warmed, StoreError> {
        let budget = self.warm_budget();
        let mut warmed = Warmed::default();
        if budget == 0 {
            warmed.end = WarmEnd::NoCache;
            return Ok(warmed);
        }
        let mut start: Vec<u8> = Vec::new();
        loop {
            if !go_on() {
                warmed.end = WarmEnd::Stopped;
                return Ok(warmed);
            }
            let mut read = 0u64;
            let mut last: Option<Vec<u8>> = None;
            self.backend
                .scan_while(Table::TrieNodes, &start, None, |key, value| {
                    warmed.entries += 1;
                    warmed.bytes += (key.len() + value.len()) as u64;
                    read += 1;
                    if read >= CHUNK_ENTRIES || warmed.bytes >= budget {
                        last = Some(key.to_vec());
                        return Ok(false);
                    }
                    Ok(true)
                })?;
            // A scan not cut short read the table to its end.
            let Some(mut next) = last else {
                warmed.end = WarmEnd::Done;
                return Ok(warmed);
            };
            if warmed.bytes >= budget {
                warmed.end = WarmEnd::Budget;
                return Ok(warmed);
            }
            // The next chunk starts just past the last key read.
            next.push(0);
            start = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WriteBatch;
    use crate::tests::TempDir as Dir;
    use alloy_primitives::B256;

    /// `count` nodes of 40 bytes over three tries (the account trie and two storage
    /// tries); the keys' and values' bytes.
    fn fill(store: &Store, count: u64) -> u64 {
        let mut batch = WriteBatch::new();
        let mut bytes = 0;
        for i in 0..count {
            let owner = B256::repeat_byte((i % 3) as u8);
            let path: Vec<u8> = (0..8).map(|s| ((i >> (4 * s)) & 0x0f) as u8).collect();
            bytes += crate::trie_node_key(&owner, &path).len() as u64 + 40;
            batch.set_trie_node(owner, path, Some(vec![0xab; 40]));
        }
        store.commit(batch).unwrap();
        bytes
    }

    #[test]
    fn a_warm_up_reads_every_trie_node_once_when_they_fit() {
        let dir = Dir::new("all");
        let store = Store::open(dir.path(), None).unwrap();
        let bytes = fill(&store, 3 * CHUNK_ENTRIES + 17);
        let mut asked = 0;
        let warmed = store
            .warm_trie_nodes(|| {
                asked += 1;
                true
            })
            .unwrap();
        assert_eq!(warmed.end, WarmEnd::Done);
        assert_eq!(warmed.entries, 3 * CHUNK_ENTRIES + 17);
        assert_eq!(warmed.bytes, bytes);
        // Asked before each of the four chunks.
        assert_eq!(asked, 4);
    }

    #[test]
    fn a_warm_up_stops_at_the_page_cache_share() {
        let dir = Dir::new("budget");
        let store = Store::open_with_caches(dir.path(), None, 256 << 10, 0).unwrap();
        assert_eq!(store.warm_budget(), 128 << 10);
        fill(&store, 3 * CHUNK_ENTRIES);
        let warmed = store.warm_trie_nodes(|| true).unwrap();
        assert_eq!(warmed.end, WarmEnd::Budget);
        assert!(warmed.bytes >= 128 << 10 && warmed.bytes < (128 << 10) + 100);
        assert!(warmed.entries < 3 * CHUNK_ENTRIES);
    }

    #[test]
    fn a_warm_up_stops_when_asked_and_sees_commits_between_chunks() {
        let dir = Dir::new("stop");
        let store = Store::open(dir.path(), None).unwrap();
        fill(&store, 2 * CHUNK_ENTRIES + 5);
        let mut chunks = 0;
        let warmed = store
            .warm_trie_nodes(|| {
                chunks += 1;
                chunks <= 1
            })
            .unwrap();
        assert_eq!(warmed.end, WarmEnd::Stopped);
        assert_eq!(warmed.entries, CHUNK_ENTRIES);
        // A block committed while it warms: the next chunk reads the newest state.
        let mut chunks = 0;
        let warmed = store
            .warm_trie_nodes(|| {
                chunks += 1;
                if chunks == 2 {
                    let mut batch = WriteBatch::new();
                    batch.set_trie_node(B256::repeat_byte(0xee), vec![1], Some(vec![1; 40]));
                    store.commit(batch).unwrap();
                }
                true
            })
            .unwrap();
        assert_eq!(warmed.end, WarmEnd::Done);
        assert_eq!(warmed.entries, 2 * CHUNK_ENTRIES + 6);
    }

    #[test]
    fn an_in_memory_store_has_nothing_to_warm() {
        let store = Store::in_memory();
        fill(&store, 10);
        assert_eq!(store.warm_budget(), 0);
        let warmed = store.warm_trie_nodes(|| true).unwrap();
        assert_eq!(warmed.end, WarmEnd::NoCache);
        assert_eq!(warmed.entries, 0);
    }
}
