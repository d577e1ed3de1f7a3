//! The local-transaction journal: transactions submitted to this node (RPC) survive a
//! restart. Each is written to the store's journal table (one durable write) when the pool
//! takes it; entries whose transaction has left the pool are dropped at each head change;
//! at start the node reloads them through the normal admission pipeline.

use alloy_primitives::B256;
use moat_common::PooledTransaction;
use moat_storage::{Store, StoreError, WriteBatch};

/// The journal over a store.
#[derive(Debug, Clone)]
pub struct Journal {
    store: Store,
}

impl Journal {
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    /// Records a local transaction in its network form (blob sidecar included).
    pub fn record(&self, tx: &PooledTransaction) -> Result<(), StoreError> {
        let mut batch = WriteBatch::new();
        batch.put_journal(tx.hash(), tx.encoded_2718());
        self.store.commit(batch)
    }

    /// Drops the given entries in one write.
    pub fn forget(&self, hashes: &[B256]) -> Result<(), StoreError> {
        if hashes.is_empty() {
            return Ok(());
        }
        let mut batch = WriteBatch::new();
        for h in hashes {
            batch.delete_journal(*h);
        }
        self.store.commit(batch)
    }

    /// Every entry: hash and network bytes.
    pub fn entries(&self) -> Result<Vec<(B256, Vec<u8>)>, StoreError> {
        self.store.journal()
    }
}

/// What reloading the journal did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JournalReload {
    pub readmitted: usize,
    /// Entries no longer valid (mined while the node was down, …), now forgotten.
    pub dropped: usize,
}
