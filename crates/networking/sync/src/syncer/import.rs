//! The importer thread: batches of blocks, in order, executed and committed one block
//! at a time (durable within a second), with a report of each batch back to the syncer;
//! a block off the head's chain is stored aside and made head (a reorg). Ahead of it,
//! when the node gives the chain a sender cache, a second thread recovers the batches'
//! transaction senders into that cache.

use super::Shared;
use alloy_primitives::B256;
use moat_blockchain::chain::{Chain, ChainError, ImportOutcome};
use moat_common::block::Block;
use moat_mempool::SenderCache;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
/// A batch of blocks, in order, for the importer.
pub(super) struct ImportBatch {
    pub(super) epoch: u64,
    pub(super) blocks: Vec<Block>,
}

pub(super) enum ImportEvent {
    Imported {
        blocks: u64,
        gas: u64,
        time: ImportTime,
    },
    Failed {
        /// The epoch of the batch that failed.
        epoch: u64,
        hash: B256,
        number: u64,
        parent: B256,
        error: ChainError,
    },
}

/// Where a batch's time went on the importer thread: waiting for it (the download
/// behind), executing and committing its blocks, making them durable.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ImportTime {
    pub(super) idle: Duration,
    pub(super) import: Duration,
    pub(super) flush: Duration,
}

impl std::ops::AddAssign for ImportTime {
    fn add_assign(&mut self, o: Self) {
        self.idle += o.idle;
        self.import += o.import;
        self.flush += o.flush;
    }
}

/// Imports batches in order on its own thread, each block its own atomic commit (durable
/// within a second; at once when no further batch is queued). A block whose parent is not the head belongs to a
/// chain that forks below it: it is stored aside and made the head (a reorg through the
/// undo records).
pub(super) fn importer(
    chain: Chain,
    mut batches: mpsc::Receiver<ImportBatch>,
    events: mpsc::UnboundedSender<ImportEvent>,
    epoch: Arc<AtomicU64>,
    shared: Arc<Shared>,
) {
    let mut waiting = Instant::now();
    // The first batch after the queue ran dry (a sync starting) is made durable too: a
    // node killed early in a sync keeps a foothold past where it started.
    let mut after_idle = true;
    while let Some(batch) = batches.blocking_recv() {
        let idle = waiting.elapsed();
        let importing = Instant::now();
        let (mut blocks, mut gas) = (0, 0);
        for block in &batch.blocks {
            if epoch.load(Ordering::Acquire) != batch.epoch {
                break;
            }
            match import_one(&chain, block) {
                Ok(used) => {
                    blocks += 1;
                    gas += used;
                }
                Err(error) => {
                    // What is queued behind it cannot follow.
                    epoch.fetch_add(1, Ordering::AcqRel);
                    let _ = events.send(ImportEvent::Failed {
                        epoch: batch.epoch,
                        hash: block.hash,
                        number: block.header.number,
                        parent: block.header.parent_hash,
                        error,
                    });
                    break;
                }
            }
        }
        if blocks > 0 {
            let import = importing.elapsed();
            // Imports commit relaxed: the store makes them durable within a second (one
            // fsync a second however many blocks), so a crash costs at most a second of
            // blocks, fetched again. When nothing more is queued (the sync caught up, or
            // the download is behind) the batch is made durable at once rather than
            // left waiting for the next commit.
            let flushing = Instant::now();
            let idle_next = batches.is_empty();
            if (after_idle || idle_next)
                && let Err(e) = chain.store().flush()
            {
                tracing::warn!(error = %e, "sync: could not make imported blocks durable");
            }
            let flush = flushing.elapsed();
            after_idle = idle_next;
            if let Ok((_, head)) = chain.head() {
                shared.heads.send_replace(head);
            }
            let _ = events.send(ImportEvent::Imported {
                blocks,
                gas,
                time: ImportTime {
                    idle,
                    import,
                    flush,
                },
            });
        }
        waiting = Instant::now();
    }
}

/// Recovers the senders of each batch's transactions into the chain's sender cache, in
/// import order, one batch ahead of the importer: on a machine with a core to spare this
/// takes the ECDSA work (a sixth of a busy importer's time) off the importer's thread.
/// A signature that does not recover is left for the importer to refuse.
pub(super) fn recoverer(
    cache: SenderCache,
    mut batches: mpsc::Receiver<ImportBatch>,
    recovered: mpsc::Sender<ImportBatch>,
) {
    while let Some(batch) = batches.blocking_recv() {
        for tx in batch.blocks.iter().flat_map(|b| &b.transactions) {
            let hash = tx.hash();
            if !cache.contains(&hash)
                && let Ok(sender) = tx.recover_sender()
            {
                cache.insert(hash, sender);
            }
        }
        if recovered.blocking_send(batch).is_err() {
            return;
        }
    }
}

fn import_one(chain: &Chain, block: &Block) -> Result<u64, ChainError> {
    match chain.import(block) {
        Ok(ImportOutcome::Imported { gas_used, .. }) => Ok(gas_used),
        Ok(ImportOutcome::AlreadyKnown) => Ok(0),
        Err(ChainError::NotOnHead { .. }) => {
            chain.store_side_block(block)?;
            let change = chain.set_head(block.hash)?;
            tracing::info!(
                removed = change.removed.len(),
                added = change.added.len(),
                head = block.header.number,
                "sync: chain reorganised onto the target's branch"
            );
            Ok(block.header.gas_used)
        }
        Err(e) => Err(e),
    }
}
