//! The snap stage: whether a sync starts by downloading the state at a pivot
//! ([`crate::snap`]) rather than executing every block, running that stage, and what
//! each of its failures leaves for the next attempt (resume, new pivot, start over, or
//! full sync when no peer serves snap/1).

use super::{Stop, Syncer, retry};
use crate::snap::{self, SnapError};
use crate::source::BlockSource;
use alloy_primitives::B256;
use moat_storage::WriteBatch;

impl<S: BlockSource> Syncer<S> {
    /// Whether the state comes by snap: the node holds no block past genesis, or an
    /// earlier run left a snap sync under way.
    pub(super) fn wants_snap(&self) -> Result<bool, Stop> {
        let store = self.chain.store();
        let at_genesis = self.chain.head().map_err(retry)?.0 == 0;
        if store.snap_progress().map_err(retry)?.is_some() {
            if at_genesis {
                return Ok(true);
            }
            // The chain moved past genesis by other means (the engine API imported
            // blocks on genesis' state): the download is of no use any more.
            self.drop_snap_download()?;
            return Ok(false);
        }
        Ok(!self.snap_off && at_genesis)
    }

    /// Runs the snap stage towards `target`: on success the pivot is the head and full
    /// sync goes on from there.
    pub(super) async fn snap_stage(&mut self, target: B256) -> Result<(), Stop> {
        let result = snap::run(
            &self.chain,
            &self.source,
            target,
            &self.cfg.snap_cfg,
            &self.shared.snap,
        )
        .await;
        *self.shared.snap.lock() = None;
        match result {
            Ok(()) => {
                if let Ok((n, _)) = self.chain.head() {
                    *self.shared.progress.lock() = Some((n, n));
                }
                let head = self.chain.head().map(|(_, h)| h).unwrap_or_default();
                self.shared.heads.send_replace(head);
                Ok(())
            }
            // No peer speaks snap/1 at all: before the tries are built (the genesis
            // state is still whole) the download is dropped and full sync takes over.
            Err(SnapError::NoPeers)
                if self.source.snap_peers().is_empty() && !self.source.peers().is_empty() =>
            {
                let store = self.chain.store();
                let record = store.snap_progress().map_err(retry)?;
                // Once genesis' tries are replaced (a record of this version, from its
                // start) the sync finishes by snap, waiting for a snap peer.
                let building = record
                    .and_then(|r| snap::Progress::decode(&r))
                    .is_some_and(|p| p.stage == snap::Stage::Tries || p.tries_replaced());
                if building {
                    return Err(retry("no snap peer to finish the snap sync"));
                }
                self.drop_snap_download()?;
                self.snap_off = true;
                tracing::warn!("no peer serves snap/1: full sync from the local head instead");
                Err(retry("snap sync given up for full sync"))
            }
            // The record stays: the next attempt resumes.
            Err(e @ (SnapError::NoPeers | SnapError::Store(_))) => Err(retry(e)),
            // No peer serves the pivot's state any more: the next attempt picks a new
            // pivot, finishes the download against it and heals what is held.
            // (The record stays, its pivot cleared: the download is still under way.)
            Err(e @ SnapError::Stale) => {
                let store = self.chain.store();
                let record = store.snap_progress().map_err(retry)?;
                let mut batch = WriteBatch::new();
                match record.and_then(|r| snap::Progress::decode(&r)) {
                    Some(mut p) => {
                        p.pivot_hash = B256::ZERO;
                        batch.set_snap_progress(Some(p.encode()));
                    }
                    None => {
                        batch.clear_snap_state().set_snap_progress(None);
                    }
                }
                store.commit(batch).map_err(retry)?;
                Err(retry(e))
            }
            // The pivot is unusable, or what was built does not match: start over.
            Err(e @ (SnapError::Pivot(_) | SnapError::Mismatch(_))) => {
                self.drop_snap_download()?;
                Err(retry(e))
            }
        }
    }

    /// Drops the snap download and its record (the next snap sync starts over).
    fn drop_snap_download(&self) -> Result<(), Stop> {
        let mut batch = WriteBatch::new();
        batch.clear_snap_state().set_snap_progress(None);
        self.chain.store().commit(batch).map_err(retry)
    }
}
