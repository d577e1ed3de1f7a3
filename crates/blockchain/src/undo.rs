//! Undo records: what a block overwrote in the flat state, kept so a reorg can take the
//! block back.
//!
//! Only the head state is stored, so going back to a fork point means restoring, block
//! by block from the head down, every account and storage slot each block changed. The
//! record is taken at import from the state before the block (the reads the state root
//! needs anyway, `chain::state_root_and_undo`) and written in the block's own atomic
//! commit. Records older
//! than [`UNDO_DEPTH`] blocks are dropped: a deeper reorg is refused.

use alloy_primitives::{Address, B256, U256};
use alloy_rlp::Encodable;
use moat_common::rlp::{self, RlpError};
use moat_storage::{Account, TrieNode, WriteBatch};

/// How many blocks back a reorg may reach.
pub const UNDO_DEPTH: u64 = 128;

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

    pub fn encode(&self) -> Vec<u8> {
        let mut accounts = Vec::new();
        for (address, account) in &self.accounts {
            let mut item = Vec::new();
            address.encode(&mut item);
            match account {
                None => false.encode(&mut item),
                Some(a) => {
                    true.encode(&mut item);
                    a.nonce.encode(&mut item);
                    a.balance.encode(&mut item);
                    a.code_hash.encode(&mut item);
                    a.storage_root.encode(&mut item);
                }
            }
            rlp::encode_list_payload(&item, &mut accounts);
        }
        let mut slots = Vec::new();
        for (address, slot, value) in &self.slots {
            let mut item = Vec::new();
            address.encode(&mut item);
            slot.encode(&mut item);
            value.encode(&mut item);
            rlp::encode_list_payload(&item, &mut slots);
        }
        let mut wiped = Vec::new();
        for (address, list) in &self.wiped {
            let mut pairs = Vec::new();
            for (slot, value) in list {
                let mut pair = Vec::new();
                slot.encode(&mut pair);
                value.encode(&mut pair);
                rlp::encode_list_payload(&pair, &mut pairs);
            }
            let mut item = Vec::new();
            address.encode(&mut item);
            rlp::encode_list_payload(&pairs, &mut item);
            rlp::encode_list_payload(&item, &mut wiped);
        }
        let mut trie = Vec::new();
        for (owner, path, old) in &self.trie {
            let mut item = Vec::new();
            owner.encode(&mut item);
            path.as_slice().encode(&mut item);
            match old {
                None => false.encode(&mut item),
                Some(node) => {
                    true.encode(&mut item);
                    node.as_slice().encode(&mut item);
                }
            }
            rlp::encode_list_payload(&item, &mut trie);
        }
        let mut wiped_tries = Vec::new();
        for (owner, nodes) in &self.wiped_tries {
            let mut pairs = Vec::new();
            for (path, node) in nodes {
                let mut pair = Vec::new();
                path.as_slice().encode(&mut pair);
                node.as_slice().encode(&mut pair);
                rlp::encode_list_payload(&pair, &mut pairs);
            }
            let mut item = Vec::new();
            owner.encode(&mut item);
            rlp::encode_list_payload(&pairs, &mut item);
            rlp::encode_list_payload(&item, &mut wiped_tries);
        }
        let mut payload = Vec::new();
        rlp::encode_list_payload(&accounts, &mut payload);
        rlp::encode_list_payload(&slots, &mut payload);
        rlp::encode_list_payload(&wiped, &mut payload);
        rlp::encode_list_payload(&trie, &mut payload);
        rlp::encode_list_payload(&wiped_tries, &mut payload);
        let mut out = Vec::with_capacity(payload.len() + 9);
        rlp::encode_list_payload(&payload, &mut out);
        out
    }

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
        assert_eq!(
            Undo::decode(&Undo::default().encode()).unwrap(),
            Undo::default()
        );
        assert!(Undo::decode(&[0xc1, 0x01]).is_err());
    }
}
