//! What snap sync keeps while it downloads a state: the accounts and storage slots of
//! the pivot's state under their *hashed* keys (snap/1 carries no addresses), and its
//! progress record in the meta table.
//!
//! ```text
//!  snap_accounts  keccak(address) → account (the flat layout of `accounts`)
//!  snap_storage   keccak(address) ‖ keccak(slot) → non-zero value
//!  meta           "snap_progress" → the syncer's record (opaque here)
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
use alloy_primitives::{B256, U256};

/// Meta key of the snap sync progress record.
const META_SNAP_PROGRESS: &[u8] = b"snap_progress";

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
        let key = META_SNAP_PROGRESS.to_vec();
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

    /// Drops every downloaded account and slot (a sync that starts over).
    pub fn clear_snap_state(&mut self) -> &mut Self {
        for table in [Table::SnapAccounts, Table::SnapStorage] {
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
        let mut stopped = false;
        let result =
            self.backend
                .scan(Table::SnapAccounts, start.as_slice(), None, |key, value| {
                    if visit(
                        decode_b256(key, "snap account key")?,
                        decode_account(value)?,
                    ) {
                        Ok(())
                    } else {
                        stopped = true;
                        Err(StoreError::Db(String::new()))
                    }
                });
        if stopped { Ok(()) } else { result }
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
