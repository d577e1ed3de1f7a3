//! The account trie built while the accounts come (a pivot that never moved): chunk
//! `i` of the hash space builds the trie below path `[i]` ([`ChunkTrie`]) on a thread
//! of its own, another commits each answer's batch with the nodes it finished
//! ([`TrieWriter`]); the root branch over the 16 chunks' nodes is made when the tries
//! are built ([`root_from_chunks`]).

use super::SnapError;
use super::build::ACCOUNTS_PAGE;
use super::progress::{CHUNKS, Chunk, b256_after, chunk_start};
use alloy_primitives::B256;
use moat_blockchain::state_root::account_leaf;
use moat_storage::{Account, StoreError, WriteBatch};
use moat_trie::{NodeView, SortedBuilder, view_node};
use std::time::{Duration, Instant};

/// The account trie below path `[nibble]`, built from chunk `nibble`'s accounts as they
/// come in key order. A node the builder finishes at a path of one nibble or more is
/// the whole trie's node at that path: everything below `[nibble]` is this chunk's, and
/// where the builder placed it depends only on keys below it (a leaf one nibble below
/// its longest common prefix with a neighbour: a neighbour in another chunk shares no
/// nibble with it). Only the node at `[nibble]` itself may differ: over keys that share
/// more than their first nibble the builder's top is an extension (or a single leaf)
/// from the empty path, which in the whole trie starts one nibble lower, below the
/// root branch. [`ChunkTrie::finish`] writes it there; the root branch is made from the
/// 16 nodes at `[i]` when the tries are built ([`root_from_chunks`]).
pub(super) struct ChunkTrie {
    nibble: u8,
    builder: SortedBuilder,
}

impl ChunkTrie {
    pub(super) fn new(nibble: u8) -> Self {
        Self {
            nibble,
            builder: SortedBuilder::new(),
        }
    }

    /// Adds an account of the chunk (keys in strictly ascending order).
    pub(super) fn push(&mut self, hash: &B256, account: &Account) -> Result<(), SnapError> {
        if hash.0[0] >> 4 != self.nibble {
            return Err(SnapError::Mismatch(format!(
                "account {hash} outside chunk {}",
                self.nibble
            )));
        }
        self.builder
            .push(hash, account_leaf(account))
            .map_err(|e| SnapError::Mismatch(e.to_string()))
    }

    /// The finished nodes below the root so far.
    pub(super) fn take(&mut self) -> impl Iterator<Item = moat_trie::sorted::BuiltNode> {
        self.builder
            .take_nodes()
            .into_iter()
            .filter(|(path, _)| !path.is_empty())
    }

    /// The chunk's last nodes, its node at `[nibble]` among them (none for a chunk
    /// without accounts).
    pub(super) fn finish(self) -> Result<Vec<moat_trie::sorted::BuiltNode>, SnapError> {
        let nibble = self.nibble;
        let (_, nodes) = self.builder.finish();
        let mut out = Vec::with_capacity(nodes.len() + 1);
        let mut top = None;
        for (path, rlp) in nodes {
            if path.is_empty() {
                top = Some(rlp);
            } else {
                out.push((path, rlp));
            }
        }
        let bad = |why: &str| SnapError::Mismatch(format!("chunk {nibble}'s trie: {why}"));
        let Some(top) = top else { return Ok(out) };
        match view_node(&top).ok_or_else(|| bad("not a trie node"))? {
            NodeView::Leaf(key, value) if key.first() == Some(&nibble) => {
                let leaf = NodeView::Leaf(key[1..].to_vec(), value);
                let rlp = leaf
                    .encode()
                    .ok_or_else(|| bad("its leaf does not encode"))?;
                out.push((vec![nibble], rlp));
            }
            // Over one nibble the extension's child is the branch at `[nibble]`, which
            // the builder wrote at its own path.
            NodeView::Extension(key, child) if key.first() == Some(&nibble) => {
                if key.len() > 1 {
                    let ext = NodeView::Extension(key[1..].to_vec(), child);
                    let rlp = ext
                        .encode()
                        .ok_or_else(|| bad("its extension does not encode"))?;
                    out.push((vec![nibble], rlp));
                }
            }
            _ => return Err(bad("its top is not below its nibble")),
        }
        Ok(out)
    }
}

/// One checked account range for the [`TrieWriter`]: its chunk (`at`: where the chunk
/// stood before it), its accounts in the chunk, whether it ends the chunk, and the batch
/// of its writes and the record.
pub(super) struct TrieJob {
    pub(super) chunk: usize,
    pub(super) at: Chunk,
    pub(super) accounts: Vec<(B256, Account)>,
    pub(super) done: bool,
    pub(super) batch: WriteBatch,
}

/// The threads that build the account trie's chunks during the download and commit
/// each answer's batch with the nodes it finished: one builds, the other commits, in
/// the order sent (so the record never gets ahead of the writes it covers).
pub(super) struct TrieWriter {
    tx: Option<std::sync::mpsc::SyncSender<TrieJob>>,
    handle: Option<std::thread::JoinHandle<Result<Busy, SnapError>>>,
}

/// How long the builder and the committer worked.
pub(super) type Busy = (Duration, Duration);

pub(super) fn trie_thread_stopped() -> SnapError {
    SnapError::Store(StoreError::Db("the trie thread stopped".into()))
}

impl TrieWriter {
    pub(super) fn start(store: moat_storage::Store) -> Result<Self, SnapError> {
        let spawn = |name: &str| std::thread::Builder::new().name(name.into());
        let spawn_err = |e: std::io::Error| SnapError::Store(StoreError::Db(format!("{e}")));
        let (tx, rx) = std::sync::mpsc::sync_channel::<TrieJob>(4);
        let (ctx, crx) = std::sync::mpsc::sync_channel::<WriteBatch>(4);
        let store2 = store.clone();
        let committer = spawn("snap-commit")
            .spawn(move || -> Result<Duration, SnapError> {
                let mut busy = Duration::ZERO;
                for batch in crx {
                    let t = Instant::now();
                    store2.commit_bulk(batch)?;
                    busy += t.elapsed();
                }
                Ok(busy)
            })
            .map_err(spawn_err)?;
        let handle = spawn("snap-trie")
            .spawn(move || -> Result<Busy, SnapError> {
                let mut busy = Duration::ZERO;
                let mut tries: Vec<Option<ChunkTrie>> = (0..CHUNKS).map(|_| None).collect();
                let mut built = Ok(());
                for mut job in rx {
                    let t = Instant::now();
                    let r = (|| {
                        let trie = chunk_trie(&store, &mut tries, job.chunk, &job.at)?;
                        for (hash, account) in &job.accounts {
                            trie.push(hash, account)?;
                        }
                        let mut nodes: Vec<_> = trie.take().collect();
                        if job.done
                            && let Some(trie) = tries[job.chunk].take()
                        {
                            nodes.extend(trie.finish()?);
                        }
                        for (path, rlp) in nodes {
                            job.batch.set_trie_node(B256::ZERO, path, Some(rlp));
                        }
                        ctx.send(job.batch).map_err(|_| trie_thread_stopped())
                    })();
                    busy += t.elapsed();
                    if r.is_err() {
                        built = r;
                        break;
                    }
                }
                // What was sent is committed before the thread ends.
                drop(ctx);
                let committed = committer
                    .join()
                    .unwrap_or_else(|_| Err(trie_thread_stopped()));
                built?;
                Ok((busy, committed?))
            })
            .map_err(spawn_err)?;
        Ok(Self {
            tx: Some(tx),
            handle: Some(handle),
        })
    }

    /// Hands over an answer (waiting while four are queued); threads that stopped give
    /// their error.
    pub(super) fn send(&mut self, job: TrieJob) -> Result<(), SnapError> {
        let sent = self.tx.as_ref().is_some_and(|tx| tx.send(job).is_ok());
        if sent {
            return Ok(());
        }
        self.join()?;
        Err(trie_thread_stopped())
    }

    /// Waits until every answer sent is committed; how long building and committing took.
    pub(super) fn finish(mut self) -> Result<Busy, SnapError> {
        self.join()
    }

    pub(super) fn join(&mut self) -> Result<Busy, SnapError> {
        self.tx = None;
        match self.handle.take().map(|h| h.join()) {
            Some(Ok(result)) => result,
            Some(Err(_)) | None => Err(trie_thread_stopped()),
        }
    }
}

impl Drop for TrieWriter {
    /// A stage that ends early still waits for what it sent to be committed, so that no
    /// write lands after the stage has returned.
    fn drop(&mut self) {
        if self.handle.is_some() {
            let _ = self.join();
        }
    }
}

/// The trie builder of chunk `i` (at `c`, before the answer): made at its first
/// answer, and fed then with what the store holds of the chunk (from an earlier run)
/// up to `c.next`, the nodes it finishes meanwhile being stored already.
pub(super) fn chunk_trie<'t>(
    store: &moat_storage::Store,
    tries: &'t mut [Option<ChunkTrie>],
    i: usize,
    c: &Chunk,
) -> Result<&'t mut ChunkTrie, SnapError> {
    if tries[i].is_none() {
        let mut trie = ChunkTrie::new(i as u8);
        let mut from = chunk_start(i);
        while from < c.next {
            let mut page = Vec::with_capacity(ACCOUNTS_PAGE);
            store.snap_accounts_from(&from, |h, a| {
                if h >= c.next {
                    return false;
                }
                page.push((h, a));
                page.len() < ACCOUNTS_PAGE
            })?;
            for (h, a) in &page {
                trie.push(h, a)?;
            }
            drop(trie.take());
            match page.last().and_then(|l| b256_after(&l.0)) {
                Some(next) if page.len() == ACCOUNTS_PAGE => from = next,
                _ => break,
            }
        }
        tries[i] = Some(trie);
    }
    tries[i]
        .as_mut()
        .ok_or_else(|| SnapError::Mismatch("no chunk trie".into()))
}

/// The account trie's root branch over the 16 chunks' nodes at `[i]`; `None` when fewer
/// than two chunks hold accounts (the root is then no branch: the caller builds the
/// trie whole).
pub(super) fn root_from_chunks(store: &moat_storage::Store) -> Result<Option<Vec<u8>>, SnapError> {
    let mut children = Vec::with_capacity(16);
    for i in 0..16u8 {
        let child = store.trie_node(&B256::ZERO, &[i])?;
        children.push(
            child
                .map(|rlp| moat_trie::node_ref(&rlp))
                .unwrap_or_default(),
        );
    }
    if children.iter().filter(|c| !c.is_empty()).count() < 2 {
        return Ok(None);
    }
    let root = NodeView::Branch(children).encode();
    root.map(Some)
        .ok_or_else(|| SnapError::Mismatch("a chunk's node at [i] is no trie node".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::{KECCAK256_EMPTY, U256, keccak256};
    use moat_trie::EMPTY_ROOT;

    /// The account trie built chunk by chunk (as the download does, nodes taken a few
    /// accounts at a time), with its root made from the 16 nodes at `[i]`, is node for
    /// node the trie built whole: chunks with no account, one account, keys sharing
    /// more than their first nibble (an extension below the root) or only it.
    #[test]
    fn the_account_trie_built_by_chunks_is_the_whole_trie() {
        let account = |i: u64| Account {
            nonce: i,
            balance: U256::from(i * 3 + 1),
            storage_root: EMPTY_ROOT,
            code_hash: KECCAK256_EMPTY,
        };
        let spread = |n: u64| {
            (0..n)
                .map(|i| keccak256(i.to_be_bytes()))
                .collect::<Vec<_>>()
        };
        // Keys of one chunk sharing `prefix` (two nibbles or more).
        let under = |prefix: &[u8], n: u64| {
            (0..n)
                .map(|i| {
                    let mut k = keccak256((i + 1000).to_be_bytes()).0;
                    k[..prefix.len()].copy_from_slice(prefix);
                    B256::from(k)
                })
                .collect::<Vec<_>>()
        };
        let cases: Vec<Vec<B256>> = vec![
            spread(3000),
            spread(40),
            // Chunk 3 one account, chunk 5 under 0x5a 0x7, chunk 9 under 0x9c, the rest empty.
            [
                under(&[0x30], 1),
                under(&[0x5a, 0x70], 30),
                under(&[0x9c], 7),
            ]
            .concat(),
            // Two chunks of one account each.
            [under(&[0x10], 1), under(&[0xe0], 1)].concat(),
        ];
        for mut keys in cases {
            keys.sort();
            keys.dedup();
            let leaves: Vec<(B256, Account)> = keys
                .iter()
                .enumerate()
                .map(|(i, k)| (*k, account(i as u64)))
                .collect();
            let mut whole = SortedBuilder::new();
            for (k, a) in &leaves {
                whole.push(k, account_leaf(a)).unwrap();
            }
            let (root, nodes) = whole.finish();
            let want: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = nodes.into_iter().collect();

            let store = moat_storage::Store::in_memory();
            let mut got = std::collections::BTreeMap::new();
            for nibble in 0..16u8 {
                let mut trie = ChunkTrie::new(nibble);
                let mine: Vec<_> = leaves.iter().filter(|l| l.0.0[0] >> 4 == nibble).collect();
                for part in mine.chunks(7) {
                    for (k, a) in part {
                        trie.push(k, a).unwrap();
                    }
                    got.extend(trie.take());
                }
                got.extend(trie.finish().unwrap());
            }
            let mut batch = WriteBatch::new();
            for (path, rlp) in &got {
                batch.set_trie_node(B256::ZERO, path.clone(), Some(rlp.clone()));
            }
            store.commit(batch).unwrap();
            let top = root_from_chunks(&store).unwrap().unwrap();
            assert_eq!(keccak256(&top), root);
            got.insert(Vec::new(), top);
            assert_eq!(got, want, "{} accounts", leaves.len());
        }
        // An account of another chunk is refused.
        let mut trie = ChunkTrie::new(2);
        assert!(trie.push(&B256::repeat_byte(0x31), &account(1)).is_err());
        // One chunk alone makes no root branch (the trie is then built whole).
        let store = moat_storage::Store::in_memory();
        let mut trie = ChunkTrie::new(4);
        trie.push(&B256::repeat_byte(0x44), &account(1)).unwrap();
        let mut batch = WriteBatch::new();
        for (path, rlp) in trie.finish().unwrap() {
            batch.set_trie_node(B256::ZERO, path, Some(rlp));
        }
        store.commit(batch).unwrap();
        assert!(root_from_chunks(&store).unwrap().is_none());
    }
}
