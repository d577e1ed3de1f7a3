//! What snap sync keeps while it downloads a state: the accounts and storage slots of
//! the pivot's state under their *hashed* keys (snap/1 carries no addresses), and its
//! progress record in the meta table.
//!
//! ```text
//!  snap_accounts  keccak(address) → account (the flat layout of `accounts`)
//!  snap_storage   keccak(address) ‖ keccak(slot) → non-zero value
//!  meta           "snap_progress" → the syncer's record (opaque here)
//!  meta           "snap_heal"     → what healing has left to ask (opaque here)
//! ```
//!
//! The syncer writes each verified range together with the progress that covers it in
//! one commit, so a node killed at any point reopens with ranges and record agreeing.
//! The tries are built from these tables in key order ([`Store::snap_accounts_from`],
//! [`Store::snap_slots_of`]); reads of the state by address after a snap sync look here
//! through the hashed key ([`Store::snap_account`], [`Store::snap_slot`]).

use crate::backend::{Op, Table};
use crate::codec::{
    decode_account, decode_b256, decode_slot_value, encode_account, encode_slot_value,
};
use crate::{Account, Store, StoreError, WriteBatch};
use alloy_primitives::{B256, U256, keccak256};

/// Meta key of the snap sync progress record.
const META_SNAP_PROGRESS: &[u8] = b"snap_progress";
/// Meta key of healing's record (the trie nodes it has still to ask).
const META_SNAP_HEAL: &[u8] = b"snap_heal";

fn slot_key(owner: &B256, slot: &B256) -> [u8; 64] {
    let mut key = [0u8; 64];
    key[..32].copy_from_slice(owner.as_slice());
    key[32..].copy_from_slice(slot.as_slice());
    key
}

impl WriteBatch {
    /// Stores a downloaded account under its hashed address.
    pub fn put_snap_account(&mut self, hash: B256, account: &Account) -> &mut Self {
        self.snap.push(Op::Put {
            table: Table::SnapAccounts,
            key: hash.to_vec(),
            value: encode_account(account).to_vec(),
        });
        self
    }

    /// Stores a downloaded storage slot of account `owner` (hashed address) under its
    /// hashed slot; zero deletes it.
    pub fn put_snap_slot(&mut self, owner: B256, slot: B256, value: U256) -> &mut Self {
        let key = slot_key(&owner, &slot).to_vec();
        self.snap.push(if value.is_zero() {
            Op::Delete {
                table: Table::SnapStorage,
                key,
            }
        } else {
            Op::Put {
                table: Table::SnapStorage,
                key,
                value: encode_slot_value(&value),
            }
        });
        self
    }

    /// Writes (or with `None` removes) the snap sync progress record.
    pub fn set_snap_progress(&mut self, record: Option<Vec<u8>>) -> &mut Self {
        self.set_snap_meta(META_SNAP_PROGRESS, record)
    }

    /// Writes (or with `None` removes) healing's record: written in the same commit as
    /// the flat state's patches it goes with.
    pub fn set_snap_heal(&mut self, record: Option<Vec<u8>>) -> &mut Self {
        self.set_snap_meta(META_SNAP_HEAL, record)
    }

    fn set_snap_meta(&mut self, key: &[u8], record: Option<Vec<u8>>) -> &mut Self {
        let key = key.to_vec();
        self.snap.push(match record {
            Some(value) => Op::Put {
                table: Table::Meta,
                key,
                value,
            },
            None => Op::Delete {
                table: Table::Meta,
                key,
            },
        });
        self
    }

    /// Drops every downloaded account, keeping the slots (a new pivot: the storage
    /// tries that still prove out against their accounts' new roots are kept).
    pub fn clear_snap_accounts(&mut self) -> &mut Self {
        self.snap.push(Op::DeleteRange {
            table: Table::SnapAccounts,
            start: Vec::new(),
            end: None,
        });
        self
    }

    /// Drops a downloaded account (its slots stay: [`Self::clear_snap_slots`]).
    pub fn delete_snap_account(&mut self, hash: B256) -> &mut Self {
        self.snap.push(Op::Delete {
            table: Table::SnapAccounts,
            key: hash.to_vec(),
        });
        self
    }

    /// Drops the downloaded slots of account `owner` from hashed slot `from` to `to`
    /// (both included; nothing when `from` is above `to`).
    pub fn delete_snap_slots_between(&mut self, owner: B256, from: B256, to: B256) -> &mut Self {
        if from > to {
            return self;
        }
        self.snap.push(Op::DeleteRange {
            table: Table::SnapStorage,
            start: slot_key(&owner, &from).to_vec(),
            end: Some(slot_key(&owner, &to).to_vec()),
        });
        self
    }

    /// Drops the downloaded slots of account `owner`.
    pub fn clear_snap_slots(&mut self, owner: B256) -> &mut Self {
        self.snap.push(Op::DeleteRange {
            table: Table::SnapStorage,
            start: slot_key(&owner, &B256::ZERO).to_vec(),
            end: Some(slot_key(&owner, &B256::repeat_byte(0xff)).to_vec()),
        });
        self
    }

    /// Drops every trie node but the account trie's root (the first step of building
    /// the downloaded state's tries: until the last commit puts the new root there, the
    /// stored root stays the head's, so a node killed meanwhile still opens). Applied
    /// after the batch's own trie-node writes: commit it alone.
    pub fn clear_tries_but_root(&mut self) -> &mut Self {
        let mut start = vec![0u8; 32];
        // The root's key is owner ‖ 0 (no nibbles, length 0); every other key is larger.
        start.extend_from_slice(&[0, 0]);
        self.snap.push(Op::DeleteRange {
            table: Table::TrieNodes,
            start,
            end: None,
        });
        self
    }

    /// Drops the by-address accounts and storage (genesis' state, replaced by a snap
    /// sync's download).
    pub fn clear_flat_state(&mut self) -> &mut Self {
        self.clear_tables([Table::Accounts, Table::Storage])
    }

    /// Drops every downloaded account and slot (a sync that starts over).
    pub fn clear_snap_state(&mut self) -> &mut Self {
        self.clear_tables([Table::SnapAccounts, Table::SnapStorage])
    }

    /// Drops every row of `tables`.
    fn clear_tables(&mut self, tables: [Table; 2]) -> &mut Self {
        for table in tables {
            self.snap.push(Op::DeleteRange {
                table,
                start: Vec::new(),
                end: None,
            });
        }
        self
    }
}

impl Store {
    /// The snap sync progress record, if a snap sync was started and not finished.
    pub fn snap_progress(&self) -> Result<Option<Vec<u8>>, StoreError> {
        self.raw(Table::Meta, META_SNAP_PROGRESS)
    }

    /// Healing's record, if healing was under way ([`WriteBatch::set_snap_heal`]).
    pub fn snap_heal(&self) -> Result<Option<Vec<u8>>, StoreError> {
        self.raw(Table::Meta, META_SNAP_HEAL)
    }

    /// A downloaded account by hashed address.
    pub fn snap_account(&self, hash: &B256) -> Result<Option<Account>, StoreError> {
        self.backend
            .get_with(Table::SnapAccounts, hash.as_slice(), decode_account)
    }

    /// A downloaded slot (zero when absent).
    pub fn snap_slot(&self, owner: &B256, slot: &B256) -> Result<U256, StoreError> {
        Ok(self
            .backend
            .get_with(
                Table::SnapStorage,
                &slot_key(owner, slot),
                decode_slot_value,
            )?
            .unwrap_or_default())
    }

    /// Downloaded accounts from hashed address `start` on, in key order, until `visit`
    /// returns `false`.
    pub fn snap_accounts_from(
        &self,
        start: &B256,
        mut visit: impl FnMut(B256, Account) -> bool,
    ) -> Result<(), StoreError> {
        self.backend
            .scan_while(Table::SnapAccounts, start.as_slice(), None, |key, value| {
                Ok(visit(
                    decode_b256(key, "snap account key")?,
                    decode_account(value)?,
                ))
            })
    }

    /// The downloaded slots of account `owner`, in key order.
    pub fn snap_slots_of(
        &self,
        owner: &B256,
        mut visit: impl FnMut(B256, U256),
    ) -> Result<(), StoreError> {
        let start = slot_key(owner, &B256::ZERO);
        let end = slot_key(owner, &B256::repeat_byte(0xff));
        self.backend
            .scan(Table::SnapStorage, &start, Some(&end), |key, value| {
                let slot = decode_b256(key.get(32..).unwrap_or_default(), "snap slot key")?;
                visit(slot, decode_slot_value(value)?);
                Ok(())
            })
    }
}

impl Store {
    /// Whether downloaded (hashed-key) state is present.
    pub fn has_snap_state(&self) -> bool {
        self.snap_state.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Sets the snap-state flag from the table (at open).
    pub(crate) fn detect_snap_state(&self) -> Result<(), StoreError> {
        let mut any = false;
        self.snap_accounts_from(&B256::ZERO, |_, _| {
            any = true;
            false
        })?;
        if any {
            self.snap_state
                .store(true, std::sync::atomic::Ordering::Release);
        }
        Ok(())
    }

    /// With downloaded state present, every write by address also retires the entry the
    /// download left under the hashed key (the by-address one is the state from then
    /// on): an account or slot changed, deleted or wiped after a snap sync is never read
    /// back from the download.
    pub(crate) fn retire_snap_entries(&self, ops: &mut Vec<Op>) {
        let writes_snap = ops.iter().any(|op| {
            matches!(
                op,
                Op::Put {
                    table: Table::SnapAccounts,
                    ..
                }
            )
        });
        if writes_snap {
            self.snap_state
                .store(true, std::sync::atomic::Ordering::Release);
        }
        if !self.has_snap_state() {
            return;
        }
        let mut extra = Vec::new();
        for op in ops.iter() {
            match op {
                Op::Put {
                    table: Table::Accounts,
                    key,
                    ..
                }
                | Op::Delete {
                    table: Table::Accounts,
                    key,
                } if key.len() == 20 => extra.push(Op::Delete {
                    table: Table::SnapAccounts,
                    key: keccak256(key).to_vec(),
                }),
                Op::Put {
                    table: Table::Storage,
                    key,
                    ..
                }
                | Op::Delete {
                    table: Table::Storage,
                    key,
                } if key.len() == 52 => extra.push(Op::Delete {
                    table: Table::SnapStorage,
                    key: slot_key(&keccak256(&key[..20]), &keccak256(&key[20..])).to_vec(),
                }),
                // One account's storage wiped (a whole-table clear is not mirrored: the
                // trie build clears the by-address state while it reads the download).
                Op::DeleteRange {
                    table: Table::Storage,
                    start,
                    end: Some(_),
                } if start.len() == 52 => {
                    let owner = keccak256(&start[..20]);
                    extra.push(Op::DeleteRange {
                        table: Table::SnapStorage,
                        start: slot_key(&owner, &B256::ZERO).to_vec(),
                        end: Some(slot_key(&owner, &B256::repeat_byte(0xff)).to_vec()),
                    });
                }
                _ => {}
            }
        }
        ops.extend(extra);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::Address;

    fn account(nonce: u64) -> Account {
        Account {
            nonce,
            balance: U256::from(nonce * 10),
            code_hash: B256::repeat_byte(1),
            storage_root: B256::repeat_byte(2),
        }
    }

    #[test]
    fn reads_by_address_find_the_download_until_a_write_by_address_retires_it() {
        let store = Store::in_memory();
        let (a, b) = (Address::repeat_byte(0xaa), Address::repeat_byte(0xbb));
        let slot = B256::repeat_byte(7);
        assert_eq!(store.account(&a).unwrap(), None);
        let mut batch = WriteBatch::new();
        batch
            .put_snap_account(keccak256(a), &account(1))
            .put_snap_account(keccak256(b), &account(2))
            .put_snap_slot(keccak256(a), keccak256(slot), U256::from(5))
            .put_snap_slot(keccak256(b), keccak256(slot), U256::from(6));
        store.commit(batch).unwrap();
        assert!(store.has_snap_state());
        assert_eq!(store.account(&a).unwrap(), Some(account(1)));
        assert_eq!(store.storage(&a, &slot).unwrap(), U256::from(5));

        // a deleted, b's slot cleared: neither is read back from the download.
        let mut batch = WriteBatch::new();
        batch
            .set_account(a, None)
            .set_storage(b, slot, U256::ZERO)
            .set_account(b, Some(account(3)));
        store.commit(batch).unwrap();
        assert_eq!(store.account(&a).unwrap(), None);
        assert_eq!(store.storage(&a, &slot).unwrap(), U256::ZERO);
        assert_eq!(store.account(&b).unwrap(), Some(account(3)));
        assert_eq!(store.storage(&b, &slot).unwrap(), U256::ZERO);
        assert_eq!(store.snap_account(&keccak256(b)).unwrap(), None);
    }

    #[test]
    fn clearing_the_tries_keeps_the_account_root_until_it_is_replaced() {
        let store = Store::in_memory();
        let other = B256::repeat_byte(9);
        let mut batch = WriteBatch::new();
        batch
            .set_trie_node(B256::ZERO, vec![], Some(vec![1]))
            .set_trie_node(B256::ZERO, vec![0], Some(vec![2]))
            .set_trie_node(B256::ZERO, vec![3, 4], Some(vec![3]))
            .set_trie_node(other, vec![], Some(vec![4]))
            .set_account(Address::repeat_byte(1), Some(account(1)));
        store.commit(batch).unwrap();
        let mut batch = WriteBatch::new();
        batch.clear_tries_but_root();
        store.commit(batch).unwrap();
        assert_eq!(store.trie_node(&B256::ZERO, &[]).unwrap(), Some(vec![1]));
        assert_eq!(store.trie_node(&B256::ZERO, &[0]).unwrap(), None);
        assert_eq!(store.trie_node(&B256::ZERO, &[3, 4]).unwrap(), None);
        assert_eq!(store.trie_node(&other, &[]).unwrap(), None);
        assert!(store.account(&Address::repeat_byte(1)).unwrap().is_some());
        let mut batch = WriteBatch::new();
        batch
            .set_trie_node(B256::ZERO, vec![], Some(vec![5]))
            .clear_flat_state();
        store.commit(batch).unwrap();
        assert_eq!(store.trie_node(&B256::ZERO, &[]).unwrap(), Some(vec![5]));
        assert!(store.account(&Address::repeat_byte(1)).unwrap().is_none());
    }

    #[test]
    fn a_store_reopened_knows_it_holds_downloaded_state() {
        // Removed on drop (after the stores, declared later), also on a panic.
        let tmp = crate::tests::TempDir::new("snap-store");
        let dir = tmp.path();
        let a = Address::repeat_byte(0xcc);
        {
            let store = Store::open(dir, None).unwrap();
            assert!(!store.has_snap_state());
            let mut batch = WriteBatch::new();
            batch
                .put_snap_account(keccak256(a), &account(4))
                .set_snap_progress(Some(vec![1, 2, 3]));
            store.commit(batch).unwrap();
        }
        let store = Store::open(dir, None).unwrap();
        assert!(store.has_snap_state());
        assert_eq!(store.account(&a).unwrap(), Some(account(4)));
        assert_eq!(store.snap_progress().unwrap(), Some(vec![1, 2, 3]));
        drop(store);
    }
}
