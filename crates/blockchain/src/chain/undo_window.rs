//! How far back the undo records reach, and their pruning: the one place the reorg
//! depth, the historical-state window and the blob sidecars kept for reorgs are decided.
//!
//! The records kept are those of the blocks above [`UndoWindow::floor`]: the last
//! [`UndoWindow::recent`] (128) blocks always, every block above the finalized block
//! too, but none more than [`UndoWindow::ceiling`] behind the head. From them:
//!
//! ```text
//!  undo_floor      = the oldest block whose state the kept records restore
//!                    (state reads: eth_call & co., eth_capabilities)
//!  oldest_undoable = max(undo_floor, finalized)   (the lowest fork point a reorg may have)
//!  sidecar_floor   = max(oldest_undoable, head - 128)   (blob txs kept to re-inject)
//! ```
//!
//! Pruning deletes the records at and below the floor, lowest first, at most
//! [`UndoWindow::prune_batch`] a commit, inside the atomic commit of an imported block
//! or of new forkchoice marks: a crash leaves one run of records ending at the head, and
//! a finality jump after a long stall is caught up over the next commits. Every writer
//! holds the chain's writer lock, and while a reorg imports its branch nothing above its
//! fork point is pruned, so no record a reorg under way needs is deleted.
//!
//! The records form one run from the oldest kept (the tail) to the head: a block's record
//! is written with it, unwinding deletes from the top and pruning from the bottom (after
//! a snap sync the run starts above the pivot). The tail is remembered in memory, checked
//! against the store before each use (the block below it holds no record, and the tail
//! holds one: known without reading it when this chain's pruning left it there, as a
//! record is some MB at 60M gas), and otherwise found by bisection.

use super::{Chain, ChainError};
use crate::undo::UndoWindow;
use moat_storage::WriteBatch;
use std::sync::atomic::{AtomicU64, Ordering};

/// No tail remembered yet.
pub(crate) const UNKNOWN: u64 = u64::MAX;

/// Blocks whose blob txs are kept with their sidecars at most, whatever the finality:
/// a sidecar is up to six 128 KiB blobs a tx, so at mainnet's blob counts 128 blocks are
/// already some hundreds of MiB, about what the blob pool itself holds; a reorg deeper
/// than that gives back its plain txs, and its blob txs only if their senders send them
/// again. Kept as it was before finality bounded the undo records.
pub const SIDECAR_DEPTH: u64 = crate::undo::UNDO_DEPTH;

/// Holds the pruning floor at a reorg's fork point while the reorg runs.
pub(super) struct Pin<'a>(&'a AtomicU64);

impl<'a> Pin<'a> {
    pub(super) fn new(pin: &'a AtomicU64, fork_point: u64) -> Self {
        pin.store(fork_point, Ordering::Relaxed);
        Self(pin)
    }
}

impl Drop for Pin<'_> {
    fn drop(&mut self) {
        self.0.store(u64::MAX, Ordering::Relaxed);
    }
}

impl Chain {
    /// Keeps the undo records `window` says (the default: [`UndoWindow::default`]).
    pub fn with_undo_window(mut self, window: UndoWindow) -> Self {
        self.undo_window = window;
        self
    }

    /// Which undo records the chain keeps (set by [`Chain::with_undo_window`]).
    pub fn undo_window(&self) -> UndoWindow {
        self.undo_window
    }

    /// The oldest block whose state the undo records restore: the state after it and
    /// after every later block can be read, and the chain taken back to it (finality
    /// aside: see [`Chain::oldest_undoable`]). The head itself when no record is kept.
    pub fn undo_floor(&self) -> Result<u64, ChainError> {
        let (head, _) = self.head()?;
        let rule = self.undo_window.floor(head, self.finalized_number()?);
        let tail = self.undo_tail(head)?;
        Ok(rule.max(tail - 1).min(head))
    }

    /// The lowest fork point a reorg may have: the records reach it
    /// ([`Chain::undo_floor`]) and it is not below the finalized block.
    pub fn oldest_undoable(&self) -> Result<u64, ChainError> {
        Ok(self.undo_floor()?.max(self.finalized_floor()?))
    }

    /// The block at and below which the blob txs mined are no longer kept with their
    /// sidecars: a reorg that can be undone can re-inject them, up to [`SIDECAR_DEPTH`].
    pub fn sidecar_floor(&self) -> Result<u64, ChainError> {
        let (head, _) = self.head()?;
        Ok(self
            .oldest_undoable()?
            .max(head.saturating_sub(SIDECAR_DEPTH)))
    }

    /// The finalized block's number, if the consensus layer named one still canonical.
    pub(super) fn finalized_number(&self) -> Result<Option<u64>, ChainError> {
        Ok(self.mark(super::Mark::Finalized)?.map(|(n, _)| n))
    }

    /// Whether canonical block `number` has its undo record.
    fn has_record(&self, number: u64) -> Result<bool, ChainError> {
        Ok(match self.store.canonical_hash(number)? {
            Some(hash) => self.store.has_undo(&hash)?,
            None => false,
        })
    }

    /// The oldest block of the run of records that ends at `head` (`head + 1`: none).
    fn undo_tail(&self, head: u64) -> Result<u64, ChainError> {
        let hint = self.undo_tail.load(Ordering::Relaxed);
        let pruned_here = hint == self.undo_tail_pruned.load(Ordering::Relaxed);
        if hint != UNKNOWN
            && (1..=head + 1).contains(&hint)
            && (hint == 1 || !self.has_record(hint - 1)?)
            && (hint > head || pruned_here || self.has_record(hint)?)
        {
            return Ok(hint);
        }
        // Bisect for the first block holding a record (genesis never has one).
        let tail = if head == 0 || !self.has_record(head)? {
            head + 1
        } else {
            let (mut lo, mut hi) = (1, head);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if self.has_record(mid)? {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            lo
        };
        self.undo_tail.store(tail, Ordering::Relaxed);
        Ok(tail)
    }

    /// Adds to `batch` the deletion of the oldest undo records at and below the floor
    /// of a chain at `head` with the finalized block at `finalized`, at most
    /// [`UndoWindow::prune_batch`] of them, none above the store's present head. Returns
    /// the tail to remember once the batch is committed. The writer lock is held.
    pub(super) fn prune_undo(
        &self,
        batch: &mut WriteBatch,
        head: u64,
        finalized: Option<u64>,
    ) -> Result<Option<u64>, ChainError> {
        let (stored_head, _) = self.head()?;
        let floor = self
            .undo_window
            .floor(head, finalized)
            .min(stored_head)
            .min(self.undo_pin.load(Ordering::Relaxed));
        let tail = self.undo_tail(stored_head)?;
        if floor < tail {
            return Ok(None);
        }
        let last = floor.min(tail + self.undo_window.prune_batch.max(1) - 1);
        for n in tail..=last {
            if let Some(hash) = self.store.canonical_hash(n)? {
                batch.delete_undo(hash);
            }
        }
        Ok(Some(last + 1))
    }

    /// Remembers the tail [`Chain::prune_undo`] gave, its batch committed.
    pub(super) fn pruned_to(&self, tail: Option<u64>) {
        if let Some(tail) = tail {
            self.undo_tail_pruned.store(tail, Ordering::Relaxed);
            self.undo_tail.store(tail, Ordering::Relaxed);
        }
    }

    /// The last block whose kept sidecars are known deleted ([`UNKNOWN`]: none yet).
    pub(crate) fn sidecar_cursor(&self) -> &std::sync::atomic::AtomicU64 {
        &self.sidecar_cursor
    }
}
