//! Which blocks a log feed (a `logs` subscription, a log filter) takes back and which it
//! reports when the head moves. As in geth, the logs of blocks a reorg undid are sent
//! again with `removed: true` before the logs of the blocks that replaced them.
//!
//! A feed remembers the blocks it reported (number and hash, the last
//! [`TRACKED_BLOCKS`]). When the head moves, the remembered blocks that are no longer
//! canonical are undone, newest first; then every canonical block after the last one
//! still standing, up to the head, is new. A reorg deeper than what is remembered undoes
//! what is remembered only.

use alloy_primitives::B256;
use std::collections::VecDeque;

/// Blocks a feed remembers (the depth of reorg it can take back).
pub(crate) const TRACKED_BLOCKS: usize = 128;

/// The blocks a feed reported, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ReportedBlocks {
    blocks: VecDeque<(u64, B256)>,
}

/// What moving to a new head means for a feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Advance {
    /// Blocks to take back, newest first.
    pub undone: Vec<(u64, B256)>,
    /// Heights of the canonical blocks to report (empty when nothing is new). Only the
    /// last [`TRACKED_BLOCKS`] of them are remembered.
    pub new: std::ops::RangeInclusive<u64>,
}

impl ReportedBlocks {
    /// A feed that starts after block `number` (`hash`): that block counts as reported.
    pub(crate) fn starting_after(number: u64, hash: B256) -> Self {
        Self {
            blocks: VecDeque::from([(number, hash)]),
        }
    }

    /// The newest block reported.
    #[cfg(test)]
    pub(crate) fn last(&self) -> Option<(u64, B256)> {
        self.blocks.back().copied()
    }

    /// Moves the feed to `head`; `canonical(n)` is the canonical hash at height `n`.
    pub(crate) fn advance<E>(
        &mut self,
        head: u64,
        mut canonical: impl FnMut(u64) -> Result<Option<B256>, E>,
    ) -> Result<Advance, E> {
        let mut undone = Vec::new();
        while let Some(&(number, hash)) = self.blocks.back() {
            if canonical(number)? == Some(hash) {
                break;
            }
            self.blocks.pop_back();
            undone.push((number, hash));
        }
        let start = match (self.blocks.back(), undone.last()) {
            (Some(&(n, _)), _) => n + 1,
            // Everything remembered was undone: report from the oldest undone height.
            (None, Some(&(n, _))) => n,
            (None, None) => head,
        };
        // Only what the feed can remember is read.
        for n in start.max(head.saturating_sub(TRACKED_BLOCKS as u64 - 1))..=head {
            if let Some(hash) = canonical(n)? {
                self.blocks.push_back((n, hash));
            }
        }
        while self.blocks.len() > TRACKED_BLOCKS {
            self.blocks.pop_front();
        }
        Ok(Advance {
            undone,
            new: start..=head,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::convert::Infallible;

    fn h(n: u64, fork: u8) -> B256 {
        let mut b = B256::repeat_byte(fork);
        b.0[..8].copy_from_slice(&n.to_be_bytes());
        b
    }

    /// A chain of heights 0..=top on fork `fork` from `from` on (fork 0 below).
    fn chain(top: u64, fork: u8, from: u64) -> HashMap<u64, B256> {
        (0..=top)
            .map(|n| (n, h(n, if n >= from { fork } else { 0 })))
            .collect()
    }

    fn advance(r: &mut ReportedBlocks, head: u64, c: &HashMap<u64, B256>) -> Advance {
        r.advance(head, |n| Ok::<_, Infallible>(c.get(&n).copied()))
            .unwrap()
    }

    #[test]
    fn new_heads_are_reported_once_and_gaps_are_filled() {
        let c = chain(5, 0, 0);
        let mut r = ReportedBlocks::starting_after(2, h(2, 0));
        let a = advance(&mut r, 2, &c);
        assert!(a.undone.is_empty() && a.new.is_empty());
        let a = advance(&mut r, 5, &c);
        assert!(a.undone.is_empty());
        assert_eq!(a.new, 3..=5);
        assert_eq!(r.last(), Some((5, h(5, 0))));
        assert!(advance(&mut r, 5, &c).new.is_empty());
    }

    #[test]
    fn a_reorg_undoes_the_replaced_blocks_newest_first_then_reports_the_new_ones() {
        let mut r = ReportedBlocks::starting_after(2, h(2, 0));
        advance(&mut r, 5, &chain(5, 0, 0));
        // Blocks 4 and 5 replaced by 4' (a shorter chain).
        let a = advance(&mut r, 4, &chain(4, 1, 4));
        assert_eq!(a.undone, vec![(5, h(5, 0)), (4, h(4, 0))]);
        assert_eq!(a.new, 4..=4);
        assert_eq!(r.last(), Some((4, h(4, 1))));
        // And back to a longer chain from 3 on.
        let a = advance(&mut r, 6, &chain(6, 2, 3));
        assert_eq!(a.undone, vec![(4, h(4, 1)), (3, h(3, 0))]);
        assert_eq!(a.new, 3..=6);
        assert_eq!(r.last(), Some((6, h(6, 2))));
    }

    #[test]
    fn a_reorg_deeper_than_remembered_takes_back_what_is_remembered() {
        let mut r = ReportedBlocks::starting_after(0, h(0, 0));
        let top = TRACKED_BLOCKS as u64 + 10;
        advance(&mut r, top, &chain(top, 0, 0));
        let a = advance(&mut r, top, &chain(top, 1, 1));
        assert_eq!(a.undone.len(), TRACKED_BLOCKS);
        assert_eq!(a.new, top + 1 - TRACKED_BLOCKS as u64..=top);
        // A feed polled rarely still gets the whole range, and remembers its end.
        let mut r = ReportedBlocks::starting_after(0, h(0, 0));
        let a = advance(&mut r, top, &chain(top, 0, 0));
        assert_eq!(a.new, 1..=top);
        assert_eq!(r.blocks.len(), TRACKED_BLOCKS);
        assert_eq!(r.last(), Some((top, h(top, 0))));
    }
}
