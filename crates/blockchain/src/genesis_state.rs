//! Writing a genesis state of any size in bounded memory.
//!
//! ```text
//!  accounts, in any order ─▶ per account: code, slots, storage trie (SortedBuilder over
//!  │                          its sorted hashed slots), account record  ─▶ commits of
//!  │                          `chunk` accounts
//!  └─▶ (keccak(address), account leaf) ─▶ 256 bucket files by the key's first byte
//!      (or one vector when the state is already in memory)
//!  finish: bucket by bucket, sorted ─▶ SortedBuilder ─▶ account trie nodes, in commits
//!          ─▶ state root
//! ```
//!
//! The account trie is built once, over keys in order, so each node is written once;
//! inserting chunk after chunk into the stored trie instead rewrote its upper branches
//! for every chunk. Memory: one chunk's batch, one bucket (1/256 of the leaves, ~120
//! bytes each) and the builder's open branches. The first commit clears whatever an
//! interrupted attempt left; the chunks commit without waiting for the disk (one sync at
//! the end, in `finish`: a crash before it leaves no chain, and the next attempt starts
//! over); the caller commits the block that makes the state a chain's only after
//! [`GenesisStateWriter::finish`].

use crate::state_root::{ACCOUNT_TRIE, account_leaf, slot_leaf};
use alloy_primitives::{Address, B256, Bytes, U256, keccak256};
use moat_storage::{Account, Store, StoreError, WriteBatch};
use moat_trie::SortedBuilder;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Account-trie nodes per commit while the trie is built.
const NODES_PER_COMMIT: usize = 200_000;
const BUCKETS: usize = 256;

enum Leaves {
    Memory(Vec<(B256, Vec<u8>)>),
    Buckets {
        dir: PathBuf,
        files: Vec<BufWriter<std::fs::File>>,
    },
}

/// Takes a state account by account; [`GenesisStateWriter::finish`] gives its root.
pub struct GenesisStateWriter<'s> {
    store: &'s Store,
    chunk: usize,
    batch: WriteBatch,
    in_batch: usize,
    leaves: Leaves,
    accounts: u64,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The storage trie of one account over its slots (zero values are absent): its root,
/// and its nodes written to `batch` under `owner`.
fn write_storage_trie(
    batch: &mut WriteBatch,
    owner: B256,
    slots: &[(B256, U256)],
) -> Result<B256, StoreError> {
    let mut hashed: Vec<(B256, &U256)> = slots
        .iter()
        .filter(|(_, v)| !v.is_zero())
        .map(|(k, v)| (keccak256(k), v))
        .collect();
    if hashed.is_empty() {
        return Ok(moat_trie::EMPTY_ROOT);
    }
    hashed.sort_unstable_by_key(|e| e.0);
    let mut builder = SortedBuilder::new();
    for (key, value) in hashed {
        builder
            .push(&key, slot_leaf(value))
            .map_err(|e| StoreError::Corrupt(format!("storage slot given twice: {e}")))?;
    }
    let (root, nodes) = builder.finish();
    for (path, rlp) in nodes {
        batch.set_trie_node(owner, path, Some(rlp));
    }
    Ok(root)
}

impl<'s> GenesisStateWriter<'s> {
    /// A writer into the (cleared) state of `store`, committing every `chunk` accounts.
    /// With `scratch`, the account leaves wait in files in that directory (made anew,
    /// removed by `finish`) rather than in memory.
    pub fn new(store: &'s Store, chunk: usize, scratch: Option<&Path>) -> Result<Self, StoreError> {
        let mut batch = WriteBatch::new();
        batch.clear_state();
        store.commit(batch)?;
        let leaves = match scratch {
            None => Leaves::Memory(Vec::new()),
            Some(dir) => {
                match std::fs::remove_dir_all(dir) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(io_err(dir)(e));
                    }
                    _ => {}
                }
                std::fs::create_dir_all(dir).map_err(io_err(dir))?;
                let mut files = Vec::with_capacity(BUCKETS);
                for i in 0..BUCKETS {
                    let path = dir.join(format!("{i:02x}"));
                    let file = std::fs::File::create(&path).map_err(io_err(&path))?;
                    files.push(BufWriter::with_capacity(16 << 10, file));
                }
                Leaves::Buckets {
                    dir: dir.to_owned(),
                    files,
                }
            }
        };
        Ok(Self {
            store,
            chunk: chunk.max(1),
            batch: WriteBatch::new(),
            in_batch: 0,
            leaves,
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
        let storage_root = write_storage_trie(&mut self.batch, owner, slots)?;
        for (slot, value) in slots {
            if !value.is_zero() {
                self.batch.set_storage(address, *slot, *value);
            }
        }
        let code_hash = keccak256(&code);
        if !code.is_empty() {
            self.batch.put_code(code_hash, code);
        }
        let account = Account {
            nonce,
            balance,
            code_hash,
            storage_root,
        };
        self.batch.set_account(address, Some(account));
        let leaf = account_leaf(&account);
        match &mut self.leaves {
            Leaves::Memory(v) => v.push((owner, leaf)),
            Leaves::Buckets { dir, files } => {
                let len = u8::try_from(leaf.len())
                    .map_err(|_| StoreError::Corrupt("an account leaf over 255 bytes".into()))?;
                let file = &mut files[owner[0] as usize];
                file.write_all(owner.as_slice())
                    .and_then(|()| file.write_all(&[len]))
                    .and_then(|()| file.write_all(&leaf))
                    .map_err(io_err(dir))?;
            }
        }
        self.accounts += 1;
        self.in_batch += 1;
        if self.in_batch >= self.chunk {
            self.store.commit_relaxed(std::mem::take(&mut self.batch))?;
            self.in_batch = 0;
        }
        Ok(account)
    }

    /// Writes the account trie and returns the state root. An address given twice is
    /// refused.
    pub fn finish(mut self) -> Result<B256, StoreError> {
        self.store.commit_relaxed(std::mem::take(&mut self.batch))?;
        let mut builder = SortedBuilder::new();
        let mut batch = WriteBatch::new();
        let store = self.store;
        let feed = |mut leaves: Vec<(B256, Vec<u8>)>,
                    builder: &mut SortedBuilder,
                    batch: &mut WriteBatch|
         -> Result<(), StoreError> {
            leaves.sort_unstable_by_key(|e| e.0);
            for (key, leaf) in leaves {
                builder.push(&key, leaf).map_err(|_| {
                    StoreError::Corrupt(format!(
                        "an account is given twice in the genesis allocation (hashed {key})"
                    ))
                })?;
                if builder.pending_nodes() >= NODES_PER_COMMIT {
                    for (path, rlp) in builder.take_nodes() {
                        batch.set_trie_node(ACCOUNT_TRIE, path, Some(rlp));
                    }
                    store.commit_relaxed(std::mem::take(batch))?;
                }
            }
            Ok(())
        };
        match std::mem::replace(&mut self.leaves, Leaves::Memory(Vec::new())) {
            Leaves::Memory(v) => feed(v, &mut builder, &mut batch)?,
            Leaves::Buckets { dir, files } => {
                for file in files {
                    file.into_inner()
                        .map_err(|e| io_err(&dir)(e.into_error()))?;
                }
                for i in 0..BUCKETS {
                    let path = dir.join(format!("{i:02x}"));
                    let mut raw = Vec::new();
                    std::fs::File::open(&path)
                        .and_then(|mut f| f.read_to_end(&mut raw))
                        .map_err(io_err(&path))?;
                    let mut leaves = Vec::new();
                    let mut rest = &raw[..];
                    while !rest.is_empty() {
                        let bad =
                            || StoreError::Corrupt(format!("{} is cut short", path.display()));
                        let key = B256::from_slice(rest.get(..32).ok_or_else(bad)?);
                        let len = *rest.get(32).ok_or_else(bad)? as usize;
                        let leaf = rest.get(33..33 + len).ok_or_else(bad)?.to_vec();
                        rest = &rest[33 + len..];
                        leaves.push((key, leaf));
                    }
                    drop(raw);
                    feed(leaves, &mut builder, &mut batch)?;
                    std::fs::remove_file(&path).map_err(io_err(&path))?;
                }
                std::fs::remove_dir(&dir).map_err(io_err(&dir))?;
            }
        }
        let (root, nodes) = builder.finish();
        for (path, rlp) in nodes {
            batch.set_trie_node(ACCOUNT_TRIE, path, Some(rlp));
        }
        // Durable, and with it every relaxed commit before.
        store.commit(batch)?;
        store.flush()?;
        Ok(root)
    }
}
