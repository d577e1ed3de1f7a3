//! Each sender's pending suffix with the least average tip, kept as the sender's txs come
//! and go, so that eviction by package ([`PoolConfig::evict_by_package`]) finds its victim
//! in O(log n) instead of scanning every sender.
//!
//! A sender's pending tips, in nonce order, are folded into segments on a stack: a new tip
//! is pushed as a segment of its own, and while the top segment's average is above the
//! one's below, the two merge. The averages therefore never rise from the bottom of the
//! stack to its top, and every proper suffix of a segment averages strictly more than the
//! segment. So the top segment is the sender's suffix with the least average tip, the
//! shortest of those on a tie: a suffix reaching into a lower segment adds txs that
//! average at least as much. A push merges each segment at most once: an append costs
//! O(1) amortized (the append path of classification stays O(1)); a whole walk rebuilds
//! the stack in O(pending txs), as it walks them anyway.
//!
//! Eviction takes pending txs from the top of a run, so the stack also drops its last
//! tips ([`Suffixes::truncate`]): the segments wholly past the cut go, and the one the cut
//! falls in is pushed again from its first tip up to the cut. The segments below it were
//! last touched when its first tip was pushed (pushes only change the top), so they are
//! the stack of the tips before it, and pushing the rest again gives the stack of the
//! tips kept, as if the dropped ones had never come. That costs the tips of one segment,
//! not a walk of the sender's txs.
//!
//! ```text
//!  tips:      5   1   4   2        stack (sum, count), bottom first:
//!  push 5     [5]                  (5,1)
//!  push 1     [5] [1]              (5,1) (1,1)
//!  push 4     [5] [1 4]            (5,1) (5,2)       4 > 1: merged, average 2.5
//!  push 2     [5] [1 4] [2]        (5,1) (5,2) (2,1) 2 < 2.5: the least suffix is [2]
//! ```
//!
//! The pool indexes each sender with pending txs by its least average (remote and local
//! senders apart, as for the tails): the first entry is eviction's victim, which loses its
//! txs from the first nonce of that suffix up.
//!
//! [`PoolConfig::evict_by_package`]: crate::PoolConfig::evict_by_package

use alloy_primitives::U256;

/// A sender's pending tips as the segments of the module's stack: (sum of tips, count),
/// bottom (lowest nonces) first; and the tips themselves, in nonce order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Suffixes {
    segments: Vec<(u128, u64)>,
    tips: Vec<u128>,
}

/// Whether segment `a` averages more than segment `b` (exactly: by cross products, in
/// 128 bits when they fit, as they do for any real tips).
fn averages_more(a: (u128, u64), b: (u128, u64)) -> bool {
    match (
        a.0.checked_mul(u128::from(b.1)),
        b.0.checked_mul(u128::from(a.1)),
    ) {
        (Some(x), Some(y)) => x > y,
        _ => U256::from(a.0) * U256::from(b.1) > U256::from(b.0) * U256::from(a.1),
    }
}

impl Suffixes {
    /// Forgets every tip (keeps the allocation: a whole walk refills it).
    pub(crate) fn clear(&mut self) {
        self.segments.clear();
        self.tips.clear();
    }

    /// One more pending tx, above the others, with tip `tip`.
    pub(crate) fn push(&mut self, tip: u128) {
        self.tips.push(tip);
        let mut top = (tip, 1u64);
        while let Some(&below) = self.segments.last() {
            if !averages_more(top, below) {
                break;
            }
            self.segments.pop();
            top = (below.0.saturating_add(top.0), below.1 + top.1);
        }
        self.segments.push(top);
    }

    /// Keeps the first `len` tips only, as if the others had never been pushed (see the
    /// module's doc): O(tips of the segment the cut falls in).
    pub(crate) fn truncate(&mut self, len: usize) {
        let mut end = self.tips.len();
        if len >= end {
            return;
        }
        while let Some(&(_, count)) = self.segments.last() {
            let start = end - count as usize;
            if start >= len {
                // Wholly past the cut.
                self.segments.pop();
                end = start;
                continue;
            }
            if end > len {
                // The cut falls in it: pushed again from its first tip up to the cut.
                self.segments.pop();
                let again = self.tips[start..len].to_vec();
                self.tips.truncate(start);
                for tip in again {
                    self.push(tip);
                }
            }
            break;
        }
        self.tips.truncate(len);
    }

    /// The suffix with the least average tip, the shortest on a tie: (its average tip,
    /// rounded down, and its length). `None` without pending txs.
    pub(crate) fn least(&self) -> Option<(u128, u64)> {
        self.segments
            .last()
            .map(|(sum, count)| (sum / u128::from(*count), *count))
    }
}

/// The suffix of `tips` with the least average, the shortest on a tie, by trying every
/// suffix: (average rounded down, length). The reference the stack is checked against.
#[cfg(test)]
pub(crate) fn least_by_scan(tips: &[u128]) -> Option<(u128, u64)> {
    let mut best: Option<(u128, u64)> = None;
    let mut sum = 0u128;
    for (i, tip) in tips.iter().rev().enumerate() {
        sum = sum.saturating_add(*tip);
        let len = i as u64 + 1;
        let better = match best {
            None => true,
            Some((b_sum, b_len)) => averages_more((b_sum, b_len), (sum, len)),
        };
        if better {
            best = Some((sum, len));
        }
    }
    best.map(|(sum, len)| (sum / u128::from(len), len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_example_of_the_module_doc() {
        let mut s = Suffixes::default();
        assert_eq!(s.least(), None);
        let mut least = Vec::new();
        for tip in [5, 1, 4, 2] {
            s.push(tip);
            least.push(s.least().unwrap());
        }
        assert_eq!(least, vec![(5, 1), (1, 1), (2, 2), (2, 1)]);
        assert_eq!(s.segments, vec![(5, 1), (5, 2), (2, 1)]);
        s.clear();
        assert_eq!(s.least(), None);
    }

    #[test]
    fn a_truncation_inside_a_merged_segment_splits_it_again() {
        let mut s = Suffixes::default();
        for tip in [5, 1, 4, 2] {
            s.push(tip);
        }
        // [5] [1 4] [2]: cutting after the 1 leaves [5] [1].
        s.truncate(2);
        assert_eq!(s.segments, vec![(5, 1), (1, 1)]);
        assert_eq!(s.least(), Some((1, 1)));
        s.truncate(0);
        assert_eq!(s, Suffixes::default());
    }

    proptest! {
        /// Tips pushed, then cut at any length, give the stack of pushing only the tips
        /// kept; and pushing goes on from there as it would have.
        #[test]
        fn a_truncated_stack_is_the_stack_of_the_tips_kept(
            tips in proptest::collection::vec(prop_oneof![0u128..6, 0u128..1 << 80], 0..60),
            cut in 0usize..61,
            more in proptest::collection::vec(0u128..6, 0..10),
        ) {
            let mut s = Suffixes::default();
            for tip in &tips {
                s.push(*tip);
            }
            s.truncate(cut);
            let kept = &tips[..cut.min(tips.len())];
            let mut fresh = Suffixes::default();
            for tip in kept {
                fresh.push(*tip);
            }
            prop_assert_eq!(&s, &fresh);
            for tip in &more {
                s.push(*tip);
                fresh.push(*tip);
            }
            prop_assert_eq!(&s, &fresh);
        }

        /// After every push, the stack's top is the suffix the scan of every suffix finds:
        /// the least average, the shortest on a tie (small tips make ties common; tips
        /// near 2^122 make the cross products pass 128 bits, their sums do not).
        #[test]
        fn the_top_is_the_least_average_suffix(
            tips in proptest::collection::vec(prop_oneof![0u128..6, 0u128..1 << 80, (1u128 << 120)..1 << 122], 1..60)
        ) {
            let mut s = Suffixes::default();
            for (i, tip) in tips.iter().enumerate() {
                s.push(*tip);
                prop_assert_eq!(s.least(), least_by_scan(&tips[..=i]), "after {} tips", i + 1);
            }
        }
    }
}
