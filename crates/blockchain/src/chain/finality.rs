//! The consensus layer's safe and finalized blocks, as its last forkchoiceUpdated named
//! them.
//!
//! The marks are kept in the store beside the head (so they survive a restart) and read
//! back only while they still name canonical blocks: a safe block that a reorg took off
//! the chain is no longer safe. A finalized block is never taken off by a reorg:
//! [`Chain::set_head`] refuses one whose fork point lies below it (a dev chain's
//! `evm_revert` rewinds anyway, and its marks are named again). The finalized block also
//! bounds the undo records kept (`undo_window`): those above it are kept, under a
//! ceiling, so a reorg can always reach back to it.
//!
//! The zero hash names no block: a mark given as zero is left as it was, as geth does
//! (a consensus client sends zero only before it has a checkpoint).

use super::{Chain, ChainError};
use alloy_primitives::B256;
use moat_storage::WriteBatch;

/// Which of the two marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// The consensus layer's safe block (`safeBlockHash` of forkchoiceUpdated).
    Safe,
    /// The consensus layer's finalized block (`finalizedBlockHash` of forkchoiceUpdated).
    Finalized,
}

impl Mark {
    /// The mark's name in errors and logs (`"safe"`, `"finalized"`).
    pub fn name(self) -> &'static str {
        match self {
            Mark::Safe => "safe",
            Mark::Finalized => "finalized",
        }
    }
}

impl Chain {
    /// (number, hash) of the block the consensus layer calls `mark`, while it is
    /// canonical; `None` before there is one.
    pub fn mark(&self, mark: Mark) -> Result<Option<(u64, B256)>, ChainError> {
        let stored = match mark {
            Mark::Safe => self.store.safe()?,
            Mark::Finalized => self.store.finalized()?,
        };
        let Some((number, hash)) = stored else {
            return Ok(None);
        };
        Ok((self.store.canonical_hash(number)? == Some(hash)).then_some((number, hash)))
    }

    /// Records the consensus layer's safe and finalized blocks. Each non-zero hash must
    /// name a canonical block ([`ChainError::NotCanonical`] otherwise, and nothing is
    /// written); a zero hash keeps that mark as it was. The write is no more durable
    /// than the head's: a crash can only take the marks back to earlier ones, which are
    /// ancestors of the head the store reopens at.
    pub fn set_marks(&self, safe: B256, finalized: B256) -> Result<(), ChainError> {
        let _writer = self.writer.lock();
        let resolve = |mark: Mark, hash: B256| -> Result<Option<(u64, B256)>, ChainError> {
            if hash.is_zero() {
                return self.mark(mark);
            }
            match self.store.block_number(&hash)? {
                Some(n) if self.store.canonical_hash(n)? == Some(hash) => Ok(Some((n, hash))),
                _ => Err(ChainError::NotCanonical {
                    what: mark.name(),
                    hash,
                }),
            }
        };
        let finalized = resolve(Mark::Finalized, finalized)?;
        let safe = resolve(Mark::Safe, safe)?;
        if safe == self.mark(Mark::Safe)? && finalized == self.mark(Mark::Finalized)? {
            return Ok(());
        }
        let mut batch = WriteBatch::new();
        batch.set_forkchoice_marks(safe, finalized);
        // Records the new finalized block no longer needs go with the marks, a bounded
        // number a commit: the imports after catch up with the rest.
        let (head, _) = self.head()?;
        let pruned = self.prune_undo(&mut batch, head, finalized.map(|(n, _)| n))?;
        self.store.commit_relaxed(batch)?;
        self.pruned_to(pruned);
        Ok(())
    }

    /// The finalized block's number, below which no reorg may cut (0 before finality:
    /// genesis is final anyway).
    pub(super) fn finalized_floor(&self) -> Result<u64, ChainError> {
        Ok(self.mark(Mark::Finalized)?.map_or(0, |(n, _)| n))
    }
}
