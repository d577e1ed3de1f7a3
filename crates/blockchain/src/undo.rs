//! Undo records: what a block overwrote in the flat state, kept so a reorg can take the
//! block back.
//!
//! Only the head state is stored, so going back to a fork point means restoring, block
//! by block from the head down, every account and storage slot each block changed. The
//! record is taken at import from the state before the block (the reads the state root
//! needs anyway, `chain::state_root_and_undo`) and written in the block's own atomic
//! commit.
//!
//! Which records are kept is [`UndoWindow`]'s rule: those of the last [`UNDO_DEPTH`]
//! blocks, and those of every block above the consensus layer's finalized block (so a
//! reorg can always reach back to it, however long finality stalls), but none more than
//! [`UndoWindow::ceiling`] blocks behind the head. The rest are pruned a bounded number
//! per commit (`chain::undo_window`); a reorg whose fork point they no longer reach, or
//! that lies below the finalized block, is refused.

use alloy_primitives::{Address, B256, U256};
use alloy_rlp::Encodable;
use moat_common::rlp::{self, RlpError};
use moat_storage::{Account, TrieNode, WriteBatch};

/// How many blocks back the undo records always reach (finality or not): reorgs of this
/// depth, and the state of the last this many blocks.
pub const UNDO_DEPTH: u64 = 128;

/// The default [`UndoWindow::ceiling`]: go-ethereum's `--history.state` default.
pub const DEFAULT_UNDO_CEILING: u64 = 90_000;

/// Undo records deleted per commit at most: a finality jump after a long stall leaves
/// tens of thousands to delete, taken over several commits.
pub const DEFAULT_PRUNE_BATCH: u64 = 1024;

/// Which undo records the chain keeps, in blocks behind the head `h`. With the
/// finalized block at `f` (`None` before the consensus layer names one), the records of
/// blocks above `floor` are kept, where
///
/// ```text
///  floor = max(h - ceiling, min(h - recent, f))      (f = None: max(h - ceiling, h - recent))
/// ```
///
/// so the state after `floor` and every block above it can be read, and the chain taken
/// back to any fork point at or above `max(floor, f)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UndoWindow {
    /// Blocks always kept, finality or not ([`UNDO_DEPTH`]).
    pub recent: u64,
    /// Blocks kept at most, however far the finalized block lags (a disk guard during a
    /// long non-finality); `u64::MAX` for no limit.
    pub ceiling: u64,
    /// Records deleted per commit at most.
    pub prune_batch: u64,
}

impl Default for UndoWindow {
    fn default() -> Self {
        Self {
            recent: UNDO_DEPTH,
            ceiling: DEFAULT_UNDO_CEILING,
            prune_batch: DEFAULT_PRUNE_BATCH,
        }
    }
}

impl UndoWindow {
    /// The window with at most `ceiling` blocks kept (0: no limit, as geth's
    /// `--history.state 0`).
    pub fn with_ceiling(ceiling: u64) -> Self {
        Self {
            ceiling: if ceiling == 0 { u64::MAX } else { ceiling },
            ..Self::default()
        }
    }

    /// The block at and below which records go, at head `head` with the finalized block
    /// at `finalized`.
    pub fn floor(&self, head: u64, finalized: Option<u64>) -> u64 {
        let recent = head.saturating_sub(self.recent);
        let wanted = finalized.map_or(recent, |f| recent.min(f));
        wanted.max(head.saturating_sub(self.ceiling))
    }
}

/// The state a block overwrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Undo {
    /// Every account the block wrote, as it was before (`None`: it did not exist).
    pub accounts: Vec<(Address, Option<Account>)>,
    /// Every slot the block wrote, with its value before (zero: it was empty).
    pub slots: Vec<(Address, B256, U256)>,
    /// Accounts whose whole storage the block dropped (wiped or deleted), with all their
    /// slots before.
    pub wiped: Vec<(Address, Vec<(B256, U256)>)>,
    /// Every trie node the block wrote or deleted: (trie owner, path, node before).
    pub trie: Vec<(B256, Vec<u8>, Option<Vec<u8>>)>,
    /// Tries the block dropped whole (storage of wiped or deleted accounts), with all
    /// their nodes before: (owner, [(path, node)]).
    pub wiped_tries: Vec<(B256, Vec<TrieNode>)>,
}

impl Undo {
    /// Adds the writes that restore the state before the block to `batch`. The trie
    /// nodes come from the record, not from a hashed update: the node cache forgets
    /// them, and they are checked against their parents when next read.
    pub fn apply(&self, batch: &mut WriteBatch) {
        batch.nodes_from_records();
        for (address, slots) in &self.wiped {
            batch.wipe_storage(*address);
            for (slot, value) in slots {
                batch.set_storage(*address, *slot, *value);
            }
        }
        for (address, slot, value) in &self.slots {
            // A slot of a wiped account is restored from the full list above.
            if !self.wiped.iter().any(|(a, _)| a == address) {
                batch.set_storage(*address, *slot, *value);
            }
        }
        for (address, account) in &self.accounts {
            batch.set_account(*address, *account);
        }
        for (owner, nodes) in &self.wiped_tries {
            batch.wipe_trie(*owner);
            for (path, rlp) in nodes {
                batch.set_trie_node(*owner, path.clone(), Some(rlp.clone()));
            }
        }
        for (owner, path, old) in &self.trie {
            // A node of a wiped trie is restored from the full list above.
            if !self.wiped_tries.iter().any(|(o, _)| o == owner) {
                batch.set_trie_node(*owner, path.clone(), old.clone());
            }
        }
    }

    /// The record as the store keeps it (RLP); [`Undo::decode`] reads it back.
    pub fn encode(&self) -> Vec<u8> {
        // A busy block's record is megabytes, most of it old trie nodes. The length of
        // every item and section is worked out first, so the record is written once, each
        // value copied straight into one buffer of its exact size (building each section
        // apart and copying the sections in copied it three times, onto as many fresh
        // buffers; `benches/undo.rs`).
        let header = |out: &mut Vec<u8>, payload_length: usize| {
            alloy_rlp::Header {
                list: true,
                payload_length,
            }
            .encode(out)
        };
        // Each item's payload length, used for its own header and for its section's.
        let account_item = |(address, account): &(Address, Option<Account>)| {
            address.length()
                + match account {
                    None => false.length(),
                    Some(a) => {
                        true.length()
                            + a.nonce.length()
                            + a.balance.length()
                            + a.code_hash.length()
                            + a.storage_root.length()
                    }
                }
        };
        let slot_item = |(address, slot, value): &(Address, B256, U256)| {
            address.length() + slot.length() + value.length()
        };
        let pair_item = |(slot, value): &(B256, U256)| slot.length() + value.length();
        let node_pair_item =
            |(path, node): &TrieNode| path.as_slice().length() + node.as_slice().length();
        let trie_item = |(owner, path, old): &(B256, Vec<u8>, Option<Vec<u8>>)| {
            owner.length()
                + path.as_slice().length()
                + match old {
                    None => false.length(),
                    Some(node) => true.length() + node.as_slice().length(),
                }
        };
        // A list's payload: its items, each with its header.
        fn payload<T>(items: &[T], item: impl Fn(&T) -> usize) -> usize {
            items.iter().map(|x| rlp::list_length(item(x))).sum()
        }
        let wiped_item = |(address, list): &(Address, Vec<(B256, U256)>)| {
            address.length() + rlp::list_length(payload(list, pair_item))
        };
        let wiped_trie_item = |(owner, nodes): &(B256, Vec<TrieNode>)| {
            owner.length() + rlp::list_length(payload(nodes, node_pair_item))
        };
        let accounts = payload(&self.accounts, account_item);
        let slots = payload(&self.slots, slot_item);
        let wiped = payload(&self.wiped, wiped_item);
        let trie = payload(&self.trie, trie_item);
        let wiped_tries = payload(&self.wiped_tries, wiped_trie_item);
        let payload_len: usize = [accounts, slots, wiped, trie, wiped_tries]
            .into_iter()
            .map(rlp::list_length)
            .sum();
        let mut out = Vec::with_capacity(rlp::list_length(payload_len));
        header(&mut out, payload_len);

        header(&mut out, accounts);
        for entry @ (address, account) in &self.accounts {
            header(&mut out, account_item(entry));
            address.encode(&mut out);
            match account {
                None => false.encode(&mut out),
                Some(a) => {
                    true.encode(&mut out);
                    a.nonce.encode(&mut out);
                    a.balance.encode(&mut out);
                    a.code_hash.encode(&mut out);
                    a.storage_root.encode(&mut out);
                }
            }
        }
        header(&mut out, slots);
        for entry @ (address, slot, value) in &self.slots {
            header(&mut out, slot_item(entry));
            address.encode(&mut out);
            slot.encode(&mut out);
            value.encode(&mut out);
        }
        header(&mut out, wiped);
        for entry @ (address, list) in &self.wiped {
            header(&mut out, wiped_item(entry));
            address.encode(&mut out);
            header(&mut out, payload(list, pair_item));
            for pair @ (slot, value) in list {
                header(&mut out, pair_item(pair));
                slot.encode(&mut out);
                value.encode(&mut out);
            }
        }
        header(&mut out, trie);
        for entry @ (owner, path, old) in &self.trie {
            header(&mut out, trie_item(entry));
            owner.encode(&mut out);
            path.as_slice().encode(&mut out);
            match old {
                None => false.encode(&mut out),
                Some(node) => {
                    true.encode(&mut out);
                    node.as_slice().encode(&mut out);
                }
            }
        }
        header(&mut out, wiped_tries);
        for entry @ (owner, nodes) in &self.wiped_tries {
            header(&mut out, wiped_trie_item(entry));
            owner.encode(&mut out);
            header(&mut out, payload(nodes, node_pair_item));
            for pair @ (path, node) in nodes {
                header(&mut out, node_pair_item(pair));
                path.as_slice().encode(&mut out);
                node.as_slice().encode(&mut out);
            }
        }
        debug_assert_eq!(out.len(), rlp::list_length(payload_len));
        out
    }

    /// The accounts a record [`Undo::encode`] wrote names (every account its block
    /// wrote), read without decoding the rest: the slots and trie nodes that follow are
    /// most of a busy block's record.
    pub fn decode_addresses(mut bytes: &[u8]) -> Result<Vec<Address>, RlpError> {
        let mut f = rlp::list(&mut bytes, "undo")?;
        let mut accounts = f.list("undo accounts")?;
        let mut out = Vec::new();
        while !accounts.is_empty() {
            out.push(accounts.list("undo account")?.address("address")?);
        }
        Ok(out)
    }

    /// Reads a record [`Undo::encode`] wrote.
    pub fn decode(mut bytes: &[u8]) -> Result<Self, RlpError> {
        let mut f = rlp::list(&mut bytes, "undo")?;
        let mut undo = Undo::default();
        let mut accounts = f.list("undo accounts")?;
        while !accounts.is_empty() {
            let mut item = accounts.list("undo account")?;
            let address = item.address("address")?;
            let account = if item.bool("exists")? {
                Some(Account {
                    nonce: item.u64("nonce")?,
                    balance: item.u256("balance")?,
                    code_hash: item.b256("code hash")?,
                    storage_root: item.b256("storage root")?,
                })
            } else {
                None
            };
            item.finish()?;
            undo.accounts.push((address, account));
        }
        let mut slots = f.list("undo slots")?;
        while !slots.is_empty() {
            let mut item = slots.list("undo slot")?;
            undo.slots.push((
                item.address("address")?,
                item.b256("slot")?,
                item.u256("value")?,
            ));
            item.finish()?;
        }
        let mut wiped = f.list("undo wiped")?;
        while !wiped.is_empty() {
            let mut item = wiped.list("undo wiped account")?;
            let address = item.address("address")?;
            let mut pairs = item.list("slots")?;
            let mut list = Vec::new();
            while !pairs.is_empty() {
                let mut pair = pairs.list("slot")?;
                list.push((pair.b256("slot")?, pair.u256("value")?));
                pair.finish()?;
            }
            item.finish()?;
            undo.wiped.push((address, list));
        }
        // Records written before the state trie was stored end here.
        if !f.is_empty() {
            let mut trie = f.list("undo trie")?;
            while !trie.is_empty() {
                let mut item = trie.list("undo trie node")?;
                let owner = item.b256("owner")?;
                let path = item.bytes("path")?.to_vec();
                let old = if item.bool("existed")? {
                    Some(item.bytes("node")?.to_vec())
                } else {
                    None
                };
                item.finish()?;
                undo.trie.push((owner, path, old));
            }
            let mut wiped = f.list("undo wiped tries")?;
            while !wiped.is_empty() {
                let mut item = wiped.list("undo wiped trie")?;
                let owner = item.b256("owner")?;
                let mut pairs = item.list("nodes")?;
                let mut nodes = Vec::new();
                while !pairs.is_empty() {
                    let mut pair = pairs.list("node")?;
                    nodes.push((pair.bytes("path")?.to_vec(), pair.bytes("node")?.to_vec()));
                    pair.finish()?;
                }
                item.finish()?;
                undo.wiped_tries.push((owner, nodes));
            }
        }
        f.finish()?;
        Ok(undo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_the_recent_blocks_or_back_to_finality_under_the_ceiling() {
        let w = UndoWindow {
            recent: 4,
            ceiling: 10,
            prune_batch: 2,
        };
        // No finality: the recent blocks only.
        assert_eq!(w.floor(100, None), 96);
        assert_eq!(w.floor(3, None), 0);
        // Finality above the recent window: the recent blocks still kept.
        assert_eq!(w.floor(100, Some(99)), 96);
        // Finality lagging: back to it...
        assert_eq!(w.floor(100, Some(93)), 93);
        // ...but not past the ceiling.
        assert_eq!(w.floor(100, Some(50)), 90);
        assert_eq!(UndoWindow::with_ceiling(0).floor(1_000_000, Some(5)), 5);
        assert_eq!(UndoWindow::default().floor(200_000, Some(5)), 110_000);
        assert_eq!(UndoWindow::default().floor(200_000, None), 200_000 - 128);
    }

    #[test]
    fn round_trip() {
        let undo = Undo {
            accounts: vec![
                (Address::repeat_byte(1), None),
                (
                    Address::repeat_byte(2),
                    Some(Account {
                        nonce: 3,
                        balance: U256::from(10),
                        code_hash: B256::repeat_byte(4),
                        storage_root: B256::repeat_byte(5),
                    }),
                ),
            ],
            slots: vec![(Address::repeat_byte(2), B256::repeat_byte(6), U256::ZERO)],
            wiped: vec![(
                Address::repeat_byte(7),
                vec![(B256::repeat_byte(8), U256::from(9))],
            )],
            trie: vec![
                (B256::ZERO, vec![], Some(vec![0xc1, 0x80])),
                (B256::repeat_byte(3), vec![1, 2, 3], None),
            ],
            wiped_tries: vec![(B256::repeat_byte(4), vec![(vec![5], vec![0xc0])])],
        };
        assert_eq!(Undo::decode(&undo.encode()).unwrap(), undo);
        // A busy block's record: megabytes, items and sections past the short headers.
        let big = Undo {
            trie: (0..3000u32)
                .map(|i| {
                    let node = (i % 7 != 0).then(|| vec![i as u8; 40 + (i as usize % 500)]);
                    (B256::repeat_byte(i as u8), i.to_be_bytes().to_vec(), node)
                })
                .collect(),
            wiped_tries: vec![(
                B256::repeat_byte(9),
                (0..500u32)
                    .map(|i| (i.to_be_bytes().to_vec(), vec![0xaa; 70]))
                    .collect(),
            )],
            ..undo
        };
        assert_eq!(Undo::decode(&big.encode()).unwrap(), big);
        let addresses: Vec<Address> = big.accounts.iter().map(|(a, _)| *a).collect();
        assert_eq!(Undo::decode_addresses(&big.encode()).unwrap(), addresses);
        assert_eq!(
            Undo::decode(&Undo::default().encode()).unwrap(),
            Undo::default()
        );
        assert!(Undo::decode(&[0xc1, 0x01]).is_err());
    }
}
