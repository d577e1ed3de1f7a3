//! [`WriteBatch`]: everything one commit changes, gathered before anything is written.
//!
//! A batch is applied in a fixed order of phases, not in the order its methods were
//! called, so that a caller can describe a block's effects in any order:
//!
//! 1. chain meta; headers, bodies, receipts;
//! 2. the canonical index: `unset_canonical_above` first, then the `set_canonical` entries
//!    (a reorg is "cut above the fork point, then write the new branch");
//! 3. the tx index, puts and deletes in call order;
//! 4. a whole-state clear (`clear_state`), then storage clears: every `wipe_storage` address and every address deleted with
//!    `set_account(_, None)` loses all its slots;
//! 5. storage writes (zero deletes the slot), except for addresses whose last account
//!    entry in this batch is a deletion: a deleted account keeps no storage;
//! 6. accounts, in call order; code; trie wipes, then trie nodes in call order;
//! 7. blob sidecars, the pool journal and undo records, puts and deletes in call order;
//! 8. the head, then the safe and finalized marks.
//!
//! Within a phase, a later entry for the same key wins.

use crate::backend::{Op, Table};
use crate::codec::{
    META_CHAIN, META_FINALIZED, META_HEAD, META_SAFE, encode_account, encode_meta,
    encode_number_hash, encode_slot_value, encode_tx_location, number_key, storage_bounds,
    storage_key, trie_node_key, trie_owner_bounds,
};
use crate::{Account, ChainMeta, TxLocation};
use alloy_primitives::{Address, B256, Bytes, U256};
use std::collections::{HashMap, HashSet};

/// Everything one [`crate::Store::commit`] writes, applied atomically in the phase order
/// of the module docs; the setters chain (`&mut Self`).
#[derive(Debug, Clone, Default)]
pub struct WriteBatch {
    meta: Option<ChainMeta>,
    headers: Vec<(B256, u64, Vec<u8>)>,
    bodies: Vec<(B256, Vec<u8>)>,
    receipts: Vec<(B256, Vec<u8>)>,
    unset_canonical_above: Option<u64>,
    canonical: Vec<(u64, B256)>,
    tx_locations: Vec<(B256, Option<TxLocation>)>,
    wipe_storage: Vec<Address>,
    accounts: Vec<(Address, Option<Account>)>,
    storage: Vec<(Address, B256, U256)>,
    code: Vec<(B256, Bytes)>,
    sidecars: Vec<(B256, Option<Vec<u8>>)>,
    journal: Vec<(B256, Option<Vec<u8>>)>,
    undo: Vec<(B256, Option<Vec<u8>>)>,
    wipe_tries: Vec<B256>,
    trie_nodes: Vec<(B256, Vec<u8>, Option<Vec<u8>>)>,
    clear_state: bool,
    head: Option<(u64, B256)>,
    /// New safe and finalized marks: `Some(None)` deletes one.
    safe: Option<Option<(u64, B256)>>,
    finalized: Option<Option<(u64, B256)>>,
    /// Snap sync's writes (see `crate::snap`), applied last but for the head.
    pub(crate) snap: Vec<Op>,
    /// The trie nodes written come from stored records, not from an update that hashed
    /// them ([`WriteBatch::nodes_from_records`]).
    pub(crate) nodes_from_records: bool,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// True when committing this batch would change nothing.
    pub fn is_empty(&self) -> bool {
        self.meta.is_none()
            && self.headers.is_empty()
            && self.bodies.is_empty()
            && self.receipts.is_empty()
            && self.unset_canonical_above.is_none()
            && self.canonical.is_empty()
            && self.tx_locations.is_empty()
            && self.wipe_storage.is_empty()
            && self.accounts.is_empty()
            && self.storage.is_empty()
            && self.code.is_empty()
            && self.sidecars.is_empty()
            && self.journal.is_empty()
            && self.undo.is_empty()
            && self.wipe_tries.is_empty()
            && self.trie_nodes.is_empty()
            && !self.clear_state
            && self.head.is_none()
            && self.safe.is_none()
            && self.finalized.is_none()
            && self.snap.is_empty()
    }

    /// Marks the datadir as belonging to `meta`'s chain; set it on the genesis commit.
    pub fn set_meta(&mut self, meta: ChainMeta) -> &mut Self {
        self.meta = Some(meta);
        self
    }

    /// Stores a block's RLP header under its hash, and its number in the hash → number
    /// index.
    pub fn put_header(&mut self, hash: B256, number: u64, rlp: impl Into<Vec<u8>>) -> &mut Self {
        self.headers.push((hash, number, rlp.into()));
        self
    }

    /// Stores a block's RLP body under its block hash.
    pub fn put_body(&mut self, hash: B256, rlp: impl Into<Vec<u8>>) -> &mut Self {
        self.bodies.push((hash, rlp.into()));
        self
    }

    /// Stores a block's RLP receipts under its block hash.
    pub fn put_receipts(&mut self, hash: B256, rlp: impl Into<Vec<u8>>) -> &mut Self {
        self.receipts.push((hash, rlp.into()));
        self
    }

    /// Makes `hash` the canonical block at height `number` (after `unset_canonical_above`).
    pub fn set_canonical(&mut self, number: u64, hash: B256) -> &mut Self {
        self.canonical.push((number, hash));
        self
    }

    /// Forgets the canonical hashes of every block above `number`, before this batch's
    /// `set_canonical` entries. The tx index is not touched: the caller knows which txs
    /// the abandoned blocks held and deletes their locations itself.
    pub fn unset_canonical_above(&mut self, number: u64) -> &mut Self {
        self.unset_canonical_above =
            Some(self.unset_canonical_above.map_or(number, |n| n.min(number)));
        self
    }

    /// Indexes a transaction of a canonical block by its hash.
    pub fn put_tx_location(&mut self, tx_hash: B256, location: TxLocation) -> &mut Self {
        self.tx_locations.push((tx_hash, Some(location)));
        self
    }

    /// Removes a transaction from the tx index (its block left the canonical chain).
    pub fn delete_tx_location(&mut self, tx_hash: B256) -> &mut Self {
        self.tx_locations.push((tx_hash, None));
        self
    }

    /// Writes an account, or with `None` deletes it together with all its storage.
    pub fn set_account(&mut self, address: Address, account: Option<Account>) -> &mut Self {
        self.accounts.push((address, account));
        self
    }

    /// Writes a storage slot; a zero value deletes it.
    pub fn set_storage(&mut self, address: Address, slot: B256, value: U256) -> &mut Self {
        self.storage.push((address, slot, value));
        self
    }

    /// Clears every slot of `address` before this batch's storage writes: what a
    /// SELFDESTRUCT or a contract created over an old address needs.
    pub fn wipe_storage(&mut self, address: Address) -> &mut Self {
        self.wipe_storage.push(address);
        self
    }

    /// Stores contract bytecode under its keccak256 hash.
    pub fn put_code(&mut self, code_hash: B256, code: Bytes) -> &mut Self {
        self.code.push((code_hash, code));
        self
    }

    /// Keeps a mined blob tx in network form (sidecar included), by tx hash, for a reorg
    /// to hand back to the pool.
    pub fn put_sidecar(&mut self, tx_hash: B256, bytes: impl Into<Vec<u8>>) -> &mut Self {
        self.sidecars.push((tx_hash, Some(bytes.into())));
        self
    }

    /// Drops a kept blob tx (its block is too deep for a reorg to need it).
    pub fn delete_sidecar(&mut self, tx_hash: B256) -> &mut Self {
        self.sidecars.push((tx_hash, None));
        self
    }

    /// Writes a raw local tx into the journal table, as earlier versions did (the pool
    /// now keeps its own journal file).
    pub fn put_journal(&mut self, tx_hash: B256, raw: impl Into<Vec<u8>>) -> &mut Self {
        self.journal.push((tx_hash, Some(raw.into())));
        self
    }

    /// Stores what `block_hash` overwrote (opaque to the store; the chain encodes it).
    pub fn put_undo(&mut self, block_hash: B256, record: impl Into<Vec<u8>>) -> &mut Self {
        self.undo.push((block_hash, Some(record.into())));
        self
    }

    /// Drops the undo record of `block_hash` (the block was taken back, or is past the
    /// undo window).
    pub fn delete_undo(&mut self, block_hash: B256) -> &mut Self {
        self.undo.push((block_hash, None));
        self
    }

    /// Removes a local tx from the journal table of earlier versions (once moved into the
    /// pool's journal file).
    pub fn delete_journal(&mut self, tx_hash: B256) -> &mut Self {
        self.journal.push((tx_hash, None));
        self
    }

    /// Drops every account, slot and trie node before this batch's state writes: what
    /// writing a genesis state in several commits starts with, so that the leftovers of
    /// an interrupted attempt cannot mix in.
    pub fn clear_state(&mut self) -> &mut Self {
        self.clear_state = true;
        self
    }

    /// Drops every node of trie `owner` before this batch's trie node writes.
    pub fn wipe_trie(&mut self, owner: B256) -> &mut Self {
        self.wipe_tries.push(owner);
        self
    }

    /// Marks the trie nodes of this batch as taken from stored records (an undo record
    /// taking a block back), not computed and hashed by a trie update: the node cache,
    /// which holds only checked nodes, forgets their paths instead of holding them, and
    /// the next read hashes them against their parents.
    pub fn nodes_from_records(&mut self) -> &mut Self {
        self.nodes_from_records = true;
        self
    }

    /// Writes the trie node at `path` of trie `owner`; `None` deletes it.
    pub fn set_trie_node(&mut self, owner: B256, path: Vec<u8>, rlp: Option<Vec<u8>>) -> &mut Self {
        self.trie_nodes.push((owner, path, rlp));
        self
    }

    /// Moves the canonical head to block (`number`, `hash`), written last.
    pub fn set_head(&mut self, number: u64, hash: B256) -> &mut Self {
        self.head = Some((number, hash));
        self
    }

    /// Records the consensus layer's safe and finalized blocks as (number, hash); `None`
    /// forgets one (no such block yet).
    pub fn set_forkchoice_marks(
        &mut self,
        safe: Option<(u64, B256)>,
        finalized: Option<(u64, B256)>,
    ) -> &mut Self {
        self.safe = Some(safe);
        self.finalized = Some(finalized);
        self
    }

    /// Lowers the batch to backend ops in the phase order of the module docs.
    pub(crate) fn into_ops(self) -> Vec<Op> {
        let mut ops = Vec::new();
        let put = |table, key: &[u8], value: Vec<u8>| Op::Put {
            table,
            key: key.to_vec(),
            value,
        };
        let delete = |table, key: &[u8]| Op::Delete {
            table,
            key: key.to_vec(),
        };
        let put_or_delete = |table, key: &[u8], value: Option<Vec<u8>>| match value {
            Some(value) => put(table, key, value),
            None => delete(table, key),
        };

        if let Some(meta) = self.meta {
            ops.push(put(Table::Meta, META_CHAIN, encode_meta(&meta).to_vec()));
        }
        for (hash, number, rlp) in self.headers {
            ops.push(put(Table::Headers, hash.as_slice(), rlp));
            ops.push(put(
                Table::HeaderNumbers,
                hash.as_slice(),
                number_key(number).to_vec(),
            ));
        }
        for (hash, rlp) in self.bodies {
            ops.push(put(Table::Bodies, hash.as_slice(), rlp));
        }
        for (hash, rlp) in self.receipts {
            ops.push(put(Table::Receipts, hash.as_slice(), rlp));
        }

        // Above u64::MAX there is nothing to unset.
        if let Some(first) = self.unset_canonical_above.and_then(|n| n.checked_add(1)) {
            ops.push(Op::DeleteRange {
                table: Table::Canonical,
                start: number_key(first).to_vec(),
                end: None,
            });
        }
        for (number, hash) in self.canonical {
            ops.push(put(Table::Canonical, &number_key(number), hash.to_vec()));
        }

        for (tx_hash, location) in self.tx_locations {
            let value = location.map(|l| encode_tx_location(&l).to_vec());
            ops.push(put_or_delete(Table::TxIndex, tx_hash.as_slice(), value));
        }

        if self.clear_state {
            for table in [Table::Accounts, Table::Storage, Table::TrieNodes] {
                ops.push(Op::DeleteRange {
                    table,
                    start: Vec::new(),
                    end: None,
                });
            }
        }
        let mut final_account: HashMap<Address, bool> = HashMap::new();
        for (address, account) in &self.accounts {
            final_account.insert(*address, account.is_some());
        }
        let deleted = self
            .accounts
            .iter()
            .filter(|(_, account)| account.is_none())
            .map(|(address, _)| *address);
        let mut cleared = HashSet::new();
        for address in self.wipe_storage.iter().copied().chain(deleted) {
            if !cleared.insert(address) {
                continue;
            }
            let (start, end) = storage_bounds(&address);
            ops.push(Op::DeleteRange {
                table: Table::Storage,
                start: start.to_vec(),
                end: Some(end.to_vec()),
            });
        }
        for (address, slot, value) in self.storage {
            if final_account.get(&address) == Some(&false) {
                continue;
            }
            let key = storage_key(&address, &slot);
            let value = (!value.is_zero()).then(|| encode_slot_value(&value));
            ops.push(put_or_delete(Table::Storage, &key, value));
        }

        for (address, account) in self.accounts {
            let value = account.map(|a| encode_account(&a).to_vec());
            ops.push(put_or_delete(Table::Accounts, address.as_slice(), value));
        }
        for (code_hash, code) in self.code {
            ops.push(put(Table::Code, code_hash.as_slice(), code.to_vec()));
        }
        for owner in &self.wipe_tries {
            let (start, end) = trie_owner_bounds(owner);
            ops.push(Op::DeleteRange {
                table: Table::TrieNodes,
                start,
                end: Some(end),
            });
        }
        for (owner, path, rlp) in self.trie_nodes {
            ops.push(put_or_delete(
                Table::TrieNodes,
                &trie_node_key(&owner, &path),
                rlp,
            ));
        }

        for (tx_hash, bytes) in self.sidecars {
            ops.push(put_or_delete(Table::Sidecars, tx_hash.as_slice(), bytes));
        }
        for (tx_hash, raw) in self.journal {
            ops.push(put_or_delete(Table::Journal, tx_hash.as_slice(), raw));
        }
        for (block_hash, record) in self.undo {
            ops.push(put_or_delete(Table::Undo, block_hash.as_slice(), record));
        }

        ops.extend(self.snap);
        if let Some((number, hash)) = self.head {
            ops.push(put(
                Table::Meta,
                META_HEAD,
                encode_number_hash(number, &hash).to_vec(),
            ));
        }
        for (key, mark) in [(META_SAFE, self.safe), (META_FINALIZED, self.finalized)] {
            if let Some(mark) = mark {
                let value = mark.map(|(number, hash)| encode_number_hash(number, &hash).to_vec());
                ops.push(put_or_delete(Table::Meta, key, value));
            }
        }
        ops
    }
}
