//! The pool's side of the blob pool's store: the records offered back to admission at a
//! start, and the writer thread that keeps the store equal to the pool afterwards.

use super::{BlobStore, BlobStoreContents};
use crate::{FastSet, Pool, PoolInner, Rejection, TxInput, TxOrigin, kzg};
use std::sync::Arc;
use std::time::Duration;

/// What became of the store's records at a start.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BlobReload {
    /// Pooled again (or pooled already, from the journal).
    pub readmitted: usize,
    /// Pooled again without KZG: the sidecar was verified before the restart.
    pub kzg_skipped: u64,
    /// Refused by admission against the current state (mined or replaced meanwhile,
    /// unaffordable, the pool full, past the blob fee...): deleted from disk by the
    /// writer's first round.
    pub refused: usize,
    /// Records dropped as damaged when the store was opened.
    pub damaged: usize,
}

impl Pool {
    /// Marks the sidecars read back from the store as verified: their txs pass stage 9
    /// without KZG, each once. Called before the journal's reload, so that local blob
    /// txs (in both) skip it too.
    pub fn preverify_stored(&self, contents: &BlobStoreContents) {
        let mut pre = self.inner.preverified.lock();
        for stored in &contents.txs {
            if let Some(bundle) = stored.tx.sidecar() {
                pre.insert(kzg::sidecar_digest(&stored.tx.hash(), bundle));
            }
        }
    }

    /// Offers the store's blob txs back to admission, per sender in nonce order, the
    /// sender as recovered before (no ECDSA) and the sidecar as verified before (no
    /// KZG): a local one as [`TxOrigin::Journal`], a peer's as [`TxOrigin::Stored`].
    /// Admission still checks each against the current state and fees.
    pub async fn reload_blob_store(&self, contents: BlobStoreContents) -> BlobReload {
        self.preverify_stored(&contents);
        let skipped_before = self.inner.metrics.get(crate::Counter::kzg_skipped_stored);
        let mut out = BlobReload {
            damaged: contents.damaged,
            ..BlobReload::default()
        };
        let mut txs = contents.txs;
        txs.sort_by_key(|t| (t.sender, t.tx.tx().tx().nonce()));
        for stored in txs {
            let hash = stored.tx.hash();
            self.inner.sender_cache.insert(hash, stored.sender);
            let origin = if stored.local {
                TxOrigin::Journal
            } else {
                TxOrigin::Stored
            };
            match self
                .add_transaction(TxInput::Decoded(Box::new(stored.tx)), origin)
                .await
            {
                Ok(_) | Err(Rejection::AlreadyKnown) => out.readmitted += 1,
                Err(_) => out.refused += 1,
            }
        }
        // What was not taken (refused before stage 9) is verified again if it comes back.
        *self.inner.preverified.lock() = FastSet::default();
        out.kzg_skipped =
            self.inner.metrics.get(crate::Counter::kzg_skipped_stored) - skipped_before;
        out
    }

    /// Keeps every pooled blob tx in `store` from now on: a writer thread mirrors the
    /// pool's blob txs to it ([`BlobStore::run`]), its first round at once (deleting
    /// what the reload refused). Attached once; a second store is ignored.
    pub fn attach_blob_store(&self, store: BlobStore) -> std::io::Result<()> {
        if self.inner.blob_store.set(store.clone()).is_err() {
            return Ok(());
        }
        let pool = Arc::downgrade(&self.inner);
        let metrics = Arc::clone(&self.inner.metrics);
        let writer = store.clone();
        std::thread::Builder::new()
            .name("moat-blobstore".into())
            .spawn(move || {
                writer.run(&metrics, || {
                    pool.upgrade()
                        .map(|inner: Arc<PoolInner>| inner.pool.lock().blob_txs())
                })
            })?;
        store.wake();
        Ok(())
    }

    /// The store [`Pool::attach_blob_store`] attached, if any.
    pub fn blob_store(&self) -> Option<&BlobStore> {
        self.inner.blob_store.get()
    }

    /// Writes the blob pool as it is now and stops the store's writer, waiting at most
    /// `within`; whether it stopped in time (true when no store is attached).
    pub fn close_blob_store(&self, within: Duration) -> bool {
        self.inner.blob_store.get().is_none_or(|s| s.close(within))
    }
}
