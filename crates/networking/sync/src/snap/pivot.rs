//! The pivot: picked [`PIVOT_DISTANCE`] below the target, or taken up from the record
//! an earlier run left (a stale pivot's record keeps its download and gets a new
//! pivot, whose root the download then goes on against and is healed to); and the
//! pivot block itself, fetched before the tries are built.

use super::{PIVOT_DISTANCE, Progress, SnapError};
use crate::source::BlockSource;
use alloy_primitives::B256;
use moat_common::block::Block;
use moat_p2p::{HeadersRequest, SealedHeader};
use moat_storage::{Store, WriteBatch};
use std::sync::Arc;
use std::time::Duration;

/// The progress to go on from, whether it was taken up from an earlier run's record,
/// and the highest block known (the target's number, or the pivot's on a resume):
/// the record's own pivot when it still has one, a new pivot for a stale record's
/// download (healed later), or a new sync from a new pivot (genesis' tries cleared in
/// the commit that writes the first record).
pub(super) async fn start<S: BlockSource>(
    store: &Store,
    source: &Arc<S>,
    target: B256,
) -> Result<(Progress, bool, u64), SnapError> {
    let mut resumed = false;
    let highest;
    // A record whose pivot went stale (zero hash) keeps its download but needs a new pivot.
    let record = store.snap_progress()?.and_then(|r| Progress::decode(&r));
    let progress = match record {
        Some(p) if p.pivot_hash != B256::ZERO => {
            resumed = true;
            highest = p.pivot_number;
            tracing::info!(
                pivot = p.pivot_number,
                stage = p.stage.name(),
                accounts = p.accounts,
                slots = p.slots,
                "snap sync resumed"
            );
            p
        }
        // The pivot went stale: the download held so far stays (its ranges, stage and
        // boundaries), goes on against the new pivot's root, and the tries built from
        // it are healed to that root.
        Some(mut p) => {
            let (pivot, top) = pick_pivot(source, target).await?;
            highest = top;
            p.pivot_number = pivot.number();
            p.pivot_hash = pivot.hash;
            p.state_root = pivot.header.state_root;
            p.heal = true;
            let mut batch = WriteBatch::new();
            batch.set_snap_progress(Some(p.encode()));
            store.commit(batch)?;
            tracing::info!(
                pivot = p.pivot_number,
                root = %p.state_root,
                stage = p.stage.name(),
                "snap sync: new pivot, the download goes on and is healed"
            );
            p
        }
        None => {
            let (pivot, top) = pick_pivot(source, target).await?;
            highest = top;
            let p = Progress::new(&pivot);
            // Genesis' tries go (all but the account trie's root, which the store keeps
            // as its head's until the pivot is the head): the account trie is built
            // below it as the ranges come.
            let mut batch = WriteBatch::new();
            batch
                .clear_snap_state()
                .clear_tries_but_root()
                .set_snap_progress(Some(p.encode()));
            store.commit(batch)?;
            tracing::info!(pivot = p.pivot_number, root = %p.state_root, "snap sync started");
            p
        }
    };
    Ok((progress, resumed, highest))
}

/// The pivot's header: `PIVOT_DISTANCE` back from the target, walked by hash.
pub(super) async fn pick_pivot<S: BlockSource>(
    source: &Arc<S>,
    target: B256,
) -> Result<(SealedHeader, u64), SnapError> {
    for _ in 0..30 {
        for peer in source.peers() {
            let req = HeadersRequest::back_from(target, PIVOT_DISTANCE + 1);
            match source.headers(peer.id, req).await {
                Ok(headers) if !headers.is_empty() => {
                    // Ancestors of the target chained by hash (checked by the source): the
                    // pivot is PIVOT_DISTANCE below the target, or the target itself on a
                    // chain no longer than that.
                    let top = headers[0].number();
                    if top == 0 {
                        return Err(SnapError::Pivot("the target is genesis".into()));
                    }
                    let want = if top > PIVOT_DISTANCE {
                        top - PIVOT_DISTANCE
                    } else {
                        top
                    };
                    if let Some(pivot) = headers.into_iter().find(|h| h.number() == want) {
                        return Ok((pivot, top));
                    }
                }
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(SnapError::NoPeers)
}

/// The pivot block: its header again by hash, and its body.
pub(super) async fn fetch_pivot_block<S: BlockSource>(
    source: &Arc<S>,
    progress: &Progress,
) -> Result<Block, SnapError> {
    for _ in 0..30 {
        for peer in source.peers() {
            let Ok(headers) = source
                .headers(peer.id, HeadersRequest::back_from(progress.pivot_hash, 1))
                .await
            else {
                continue;
            };
            let Some(h) = headers.into_iter().next() else {
                continue;
            };
            if h.hash != progress.pivot_hash {
                continue;
            }
            if let Ok(mut blocks) = source.bodies(peer.id, vec![h]).await
                && let Some(b) = blocks.pop()
            {
                return Ok(b);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(SnapError::NoPeers)
}
