//! Writing a genesis state of any size in bounded memory, each table in key order.
//!
//! ```text
//!  accounts, in any order ─▶ per account: its storage trie (SortedBuilder over its
//!  │                          sorted hashed slots) and record; code ─▶ commits
//!  ├─▶ (address, record, slots)            ─▶ 256 "flat" buckets by address[0]
//!  ├─▶ (keccak(address), account leaf)     ─▶ 256 "leaf" buckets by keccak(address)[0]
//!  └─▶ (keccak(address), storage-trie nodes) ─▶ 256 "storage" buckets, likewise
//!  finish: flat buckets in order, each sorted ─▶ accounts, storage    ─▶ commits
//!          leaf buckets in order, each sorted ─▶ SortedBuilder ─▶ account-trie nodes
//!          storage buckets in order, each sorted ─▶ storage-trie nodes
//!                                                                     ─▶ commits ─▶ root
//! ```
//!
//! Every table is written in the order of its keys (the `accounts` and `storage` tables
//! by address, the `trie_nodes` table by owner: the account trie, owner zero, whole
//! before any storage trie), so each commit appends to its tables instead of landing
//! all over them: with redb's copy-on-write pages, commits of accounts in allocation
//! order rewrote pages across the whole of each table, commit after commit (a
//! 10M-account init wrote 50 GB for a 6.8 GB datadir). Appending also leaves pages
//! full, where a key landing between keys already written splits a page in halves:
//! the account trie written beside the storage tries, bucket by bucket, took 1.2M
//! pages for the 20M nodes of a 10M-account state, against 0.74M in key order, twice
//! the pages for every later block to read and to write. The account trie is built
//! once, over keys in order, so each node is written once.
//!
//! Memory: one bucket (1/256 of the state) and one commit's batch, plus the builder's
//! open branches. The buckets are files in a scratch directory (or vectors, for a state
//! already in memory). The first commit clears whatever an interrupted attempt left; the
//! commits do not wait for the disk (one sync at the end, in `finish`: a crash before it
//! leaves no chain, and the next attempt starts over); the caller commits the block that
//! makes the state a chain's only after [`GenesisStateWriter::finish`].

use crate::state_root::{ACCOUNT_TRIE, account_leaf, slot_leaf};
use alloy_primitives::{Address, B256, Bytes, U256, keccak256};
use moat_storage::{Account, Store, StoreError, WriteBatch};
use moat_trie::SortedBuilder;
use moat_trie::sorted::BuiltNode;
use std::collections::HashSet;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Account-trie nodes the builder may hold before they go into the batch.
const NODES_PER_COMMIT: usize = 200_000;
const BUCKETS: usize = 256;

/// Where one kind of record waits for `finish`: 256 buckets by the first byte of its key.
enum Spool {
    Memory(Vec<Vec<u8>>),
    Files {
        dir: PathBuf,
        prefix: &'static str,
        files: Vec<BufWriter<std::fs::File>>,
    },
}

impl Spool {
    fn new(scratch: Option<&Path>, prefix: &'static str) -> Result<Spool, StoreError> {
        let Some(dir) = scratch else {
            return Ok(Spool::Memory(vec![Vec::new(); BUCKETS]));
        };
        let mut files = Vec::with_capacity(BUCKETS);
        for i in 0..BUCKETS {
            let path = dir.join(format!("{prefix}{i:02x}"));
            let file = std::fs::File::create(&path).map_err(io_err(&path))?;
            files.push(BufWriter::with_capacity(16 << 10, file));
        }
        Ok(Spool::Files {
            dir: dir.to_owned(),
            prefix,
            files,
        })
    }

    fn append(&mut self, bucket: u8, record: &[u8]) -> Result<(), StoreError> {
        match self {
            Spool::Memory(buckets) => {
                buckets[bucket as usize].extend_from_slice(record);
                Ok(())
            }
            Spool::Files { dir, files, .. } => files[bucket as usize]
                .write_all(record)
                .map_err(io_err(dir)),
        }
    }

    /// The buckets' contents in order, each handed over once (a file is removed once
    /// read).
    fn drain(
        self,
        mut each: impl FnMut(Vec<u8>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        match self {
            Spool::Memory(buckets) => buckets.into_iter().try_for_each(each),
            Spool::Files { dir, prefix, files } => {
                for file in files {
                    file.into_inner()
                        .map_err(|e| io_err(&dir)(e.into_error()))?;
                }
                for i in 0..BUCKETS {
                    let path = dir.join(format!("{prefix}{i:02x}"));
                    let mut raw = Vec::new();
                    std::fs::File::open(&path)
                        .and_then(|mut f| f.read_to_end(&mut raw))
                        .map_err(io_err(&path))?;
                    std::fs::remove_file(&path).map_err(io_err(&path))?;
                    each(raw)?;
                }
                Ok(())
            }
        }
    }
}

/// Reads a bucket's records back.
struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn cut() -> StoreError {
        StoreError::Corrupt("a genesis scratch bucket is cut short".into())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], StoreError> {
        if self.rest.len() < n {
            return Err(Self::cut());
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<usize, StoreError> {
        Ok(self.take(1)?[0] as usize)
    }

    fn u32(&mut self) -> Result<usize, StoreError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    fn b256(&mut self) -> Result<B256, StoreError> {
        Ok(B256::from_slice(self.take(32)?))
    }
}

fn len_u32(n: usize) -> Result<[u8; 4], StoreError> {
    u32::try_from(n)
        .map(u32::to_be_bytes)
        .map_err(|_| StoreError::Corrupt(format!("a genesis record of {n} entries or bytes")))
}

/// A flat record: address, nonce, balance, code hash, storage root, then the non-zero
/// slots (count, then slot and value each).
fn flat_record(
    address: &Address,
    account: &Account,
    slots: &[(B256, U256)],
) -> Result<Vec<u8>, StoreError> {
    let live = slots.iter().filter(|(_, v)| !v.is_zero());
    let mut out = Vec::with_capacity(128 + 64 * slots.len());
    out.extend_from_slice(address.as_slice());
    out.extend_from_slice(&account.nonce.to_be_bytes());
    out.extend_from_slice(&account.balance.to_be_bytes::<32>());
    out.extend_from_slice(account.code_hash.as_slice());
    out.extend_from_slice(account.storage_root.as_slice());
    out.extend_from_slice(&len_u32(live.clone().count())?);
    for (slot, value) in live {
        out.extend_from_slice(slot.as_slice());
        out.extend_from_slice(&value.to_be_bytes::<32>());
    }
    Ok(out)
}

struct FlatEntry {
    address: Address,
    account: Account,
    slots: Vec<(B256, U256)>,
}

fn read_flat(c: &mut Cursor<'_>) -> Result<FlatEntry, StoreError> {
    let address = Address::from_slice(c.take(20)?);
    let nonce = u64::from_be_bytes(c.take(8)?.try_into().map_err(|_| Cursor::cut())?);
    let balance = U256::from_be_slice(c.take(32)?);
    let code_hash = c.b256()?;
    let storage_root = c.b256()?;
    let n = c.u32()?;
    let mut slots = Vec::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        let slot = c.b256()?;
        slots.push((slot, U256::from_be_slice(c.take(32)?)));
    }
    Ok(FlatEntry {
        address,
        account: Account {
            nonce,
            balance,
            code_hash,
            storage_root,
        },
        slots,
    })
}

/// A trie record: keccak(address), the account leaf, then the storage trie's nodes
/// (count, then path and RLP each).
fn trie_record(owner: &B256, leaf: &[u8], nodes: &[BuiltNode]) -> Result<Vec<u8>, StoreError> {
    let mut out = Vec::with_capacity(40 + leaf.len() + nodes.len() * 80);
    out.extend_from_slice(owner.as_slice());
    out.extend_from_slice(&len_u32(leaf.len())?);
    out.extend_from_slice(leaf);
    out.extend_from_slice(&len_u32(nodes.len())?);
    for (path, rlp) in nodes {
        // A path is at most 64 nibbles.
        out.push(path.len() as u8);
        out.extend_from_slice(path);
        out.extend_from_slice(&len_u32(rlp.len())?);
        out.extend_from_slice(rlp);
    }
    Ok(out)
}

struct TrieEntry<'a> {
    owner: B256,
    leaf: &'a [u8],
    nodes: Vec<(&'a [u8], &'a [u8])>,
}

fn read_trie<'a>(c: &mut Cursor<'a>) -> Result<TrieEntry<'a>, StoreError> {
    let owner = c.b256()?;
    let len = c.u32()?;
    let leaf = c.take(len)?;
    let n = c.u32()?;
    let mut nodes = Vec::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        let plen = c.u8()?;
        let path = c.take(plen)?;
        let rlen = c.u32()?;
        nodes.push((path, c.take(rlen)?));
    }
    Ok(TrieEntry { owner, leaf, nodes })
}

/// A trie bucket's records, by owner.
fn trie_bucket(raw: &[u8]) -> Result<Vec<TrieEntry<'_>>, StoreError> {
    let mut c = Cursor { rest: raw };
    let mut bucket = Vec::new();
    while !c.rest.is_empty() {
        bucket.push(read_trie(&mut c)?);
    }
    bucket.sort_unstable_by_key(|e| e.owner);
    Ok(bucket)
}

/// Takes a state account by account; [`GenesisStateWriter::finish`] writes it and gives
/// its root.
pub struct GenesisStateWriter<'s> {
    store: &'s Store,
    /// Entries (accounts, slots, trie nodes, codes) per commit.
    chunk: usize,
    /// Code, by hash (the one table written as the allocation comes).
    code: WriteBatch,
    code_hashes: HashSet<B256>,
    flat: Spool,
    /// Each account's leaf into the account trie, by its hashed address.
    leaves: Spool,
    /// Each account's storage-trie nodes (accounts with storage only).
    storage_nodes: Spool,
    scratch: Option<PathBuf>,
    accounts: u64,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The storage trie of one account over its slots (zero values are absent): its root
/// and its nodes.
fn storage_trie(slots: &[(B256, U256)]) -> Result<(B256, Vec<BuiltNode>), StoreError> {
    let mut hashed: Vec<(B256, &U256)> = slots
        .iter()
        .filter(|(_, v)| !v.is_zero())
        .map(|(k, v)| (keccak256(k), v))
        .collect();
    if hashed.is_empty() {
        return Ok((moat_trie::EMPTY_ROOT, Vec::new()));
    }
    hashed.sort_unstable_by_key(|e| e.0);
    let mut builder = SortedBuilder::new();
    for (key, value) in hashed {
        builder
            .push(&key, slot_leaf(value))
            .map_err(|e| StoreError::Corrupt(format!("storage slot given twice: {e}")))?;
    }
    Ok(builder.finish())
}

/// Commits `batch` once it holds `chunk` entries.
fn commit_if_full(
    store: &Store,
    batch: &mut WriteBatch,
    entries: &mut usize,
    chunk: usize,
) -> Result<(), StoreError> {
    if *entries >= chunk {
        store.commit_bulk(std::mem::take(batch))?;
        *entries = 0;
    }
    Ok(())
}

impl<'s> GenesisStateWriter<'s> {
    /// A writer into the (cleared) state of `store`, committing `chunk` entries
    /// (accounts, slots, trie nodes) at a time. With `scratch`, the state waits in files
    /// in that directory (made anew, removed by `finish`) rather than in memory.
    pub fn new(store: &'s Store, chunk: usize, scratch: Option<&Path>) -> Result<Self, StoreError> {
        let mut batch = WriteBatch::new();
        batch.clear_state();
        store.commit(batch)?;
        if let Some(dir) = scratch {
            match std::fs::remove_dir_all(dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(io_err(dir)(e));
                }
                _ => {}
            }
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        Ok(Self {
            store,
            chunk: chunk.max(1),
            code: WriteBatch::new(),
            code_hashes: HashSet::new(),
            flat: Spool::new(scratch, "a")?,
            leaves: Spool::new(scratch, "t")?,
            storage_nodes: Spool::new(scratch, "s")?,
            scratch: scratch.map(Path::to_owned),
            accounts: 0,
        })
    }

    /// Accounts taken so far.
    pub fn accounts(&self) -> u64 {
        self.accounts
    }

    /// Adds one account; returns its record (the storage root computed from `slots`).
    pub fn add(
        &mut self,
        address: Address,
        nonce: u64,
        balance: U256,
        code: Bytes,
        slots: &[(B256, U256)],
    ) -> Result<Account, StoreError> {
        // Not through the bounded caches of hashed keys: these are all different.
        let owner = keccak256(address);
        let (storage_root, nodes) = storage_trie(slots)?;
        let code_hash = keccak256(&code);
        if !code.is_empty() && self.code_hashes.insert(code_hash) {
            self.code.put_code(code_hash, code);
            if self.code_hashes.len() >= self.chunk {
                self.store.commit_bulk(std::mem::take(&mut self.code))?;
                self.code_hashes.clear();
            }
        }
        let account = Account {
            nonce,
            balance,
            code_hash,
            storage_root,
        };
        self.flat
            .append(address[0], &flat_record(&address, &account, slots)?)?;
        self.leaves.append(
            owner[0],
            &trie_record(&owner, &account_leaf(&account), &[])?,
        )?;
        if !nodes.is_empty() {
            self.storage_nodes
                .append(owner[0], &trie_record(&owner, &[], &nodes)?)?;
        }
        self.accounts += 1;
        Ok(account)
    }

    /// Writes the state, table by table in key order, and returns the state root. An
    /// address given twice is refused.
    pub fn finish(self) -> Result<B256, StoreError> {
        let store = self.store;
        let chunk = self.chunk;
        store.commit_bulk(self.code)?;
        let mut batch = WriteBatch::new();
        let mut entries = 0usize;

        // The flat state, by address.
        self.flat.drain(|raw| {
            let mut c = Cursor { rest: &raw };
            let mut bucket = Vec::new();
            while !c.rest.is_empty() {
                bucket.push(read_flat(&mut c)?);
            }
            bucket.sort_unstable_by_key(|e| e.address);
            if let Some(w) = bucket.windows(2).find(|w| w[0].address == w[1].address) {
                return Err(StoreError::Corrupt(format!(
                    "an account is given twice in the genesis allocation ({})",
                    w[0].address
                )));
            }
            for mut e in bucket {
                e.slots.sort_unstable_by_key(|s| s.0);
                entries += 1 + e.slots.len();
                for (slot, value) in e.slots {
                    batch.set_storage(e.address, slot, value);
                }
                batch.set_account(e.address, Some(e.account));
                commit_if_full(store, &mut batch, &mut entries, chunk)?;
            }
            Ok(())
        })?;

        // The tries, by owner: the account trie (owner zero, the front of the table)
        // first and whole, then each account's storage trie. So the table grows at its
        // end only, where redb leaves a full page full; keys that land between keys
        // already written split pages in halves (written by bucket, an account's
        // leaf beside its storage nodes, the account trie took 1.2M pages for 20M
        // nodes at 10M accounts, against 0.74M written in key order).
        let mut builder = SortedBuilder::new();
        self.leaves.drain(|raw| {
            for e in trie_bucket(&raw)? {
                builder.push(&e.owner, e.leaf.to_vec()).map_err(|_| {
                    StoreError::Corrupt(format!(
                        "an account is given twice in the genesis allocation (hashed {})",
                        e.owner
                    ))
                })?;
                if builder.pending_nodes() >= NODES_PER_COMMIT {
                    entries += builder.pending_nodes();
                    for (path, rlp) in builder.take_nodes() {
                        batch.set_trie_node(ACCOUNT_TRIE, path, Some(rlp));
                    }
                }
                commit_if_full(store, &mut batch, &mut entries, chunk)?;
            }
            Ok(())
        })?;
        let (root, nodes) = builder.finish();
        for (path, rlp) in nodes {
            batch.set_trie_node(ACCOUNT_TRIE, path, Some(rlp));
        }
        self.storage_nodes.drain(|raw| {
            for e in trie_bucket(&raw)? {
                entries += e.nodes.len();
                for (path, rlp) in e.nodes {
                    batch.set_trie_node(e.owner, path.to_vec(), Some(rlp.to_vec()));
                }
                commit_if_full(store, &mut batch, &mut entries, chunk)?;
            }
            Ok(())
        })?;
        // Durable, and with it every relaxed commit before.
        store.commit(batch)?;
        store.flush()?;
        if let Some(dir) = &self.scratch {
            std::fs::remove_dir(dir).map_err(io_err(dir))?;
        }
        Ok(root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A genesis state is written table by table in key order, the trie-node table
    /// included (the account trie whole, then the storage tries), so its pages are
    /// full: every block after it reads and writes no more pages than the state needs.
    #[test]
    fn a_genesis_state_leaves_its_pages_full() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), None).unwrap();
        let scratch = dir.path().join("scratch");
        let mut writer = GenesisStateWriter::new(&store, 5_000, Some(&scratch)).unwrap();
        for i in 0..20_000u64 {
            let address = Address::from_word(keccak256(i.to_be_bytes()));
            let slots: Vec<(B256, U256)> = if i % 50 == 0 {
                (1..=10u64)
                    .map(|s| (B256::from(U256::from(s)), U256::from(i + s)))
                    .collect()
            } else {
                Vec::new()
            };
            writer
                .add(address, i, U256::from(i), Bytes::new(), &slots)
                .unwrap();
        }
        writer.finish().unwrap();
        let pages = store.table_pages().unwrap();
        for name in ["accounts", "storage", "trie_nodes"] {
            let (_, table) = pages.iter().find(|(n, _)| *n == name).unwrap();
            assert!(table.entries > 1_000, "{name}: {table:?}");
            // At most a fifth of its pages' bytes unused (written out of order, the
            // account trie's pages were left half empty).
            assert!(
                table.fragmented_bytes * 5 <= table.leaf_pages * 4096,
                "{name}: {table:?}"
            );
        }
    }
}
