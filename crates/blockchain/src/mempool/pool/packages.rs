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
//! [`PoolConfig::evict_by_package`]: crate::mempool::PoolConfig::evict_by_package

use alloy_primitives::U256;

/// A sender's pending tips as the segments of the module's stack: (sum of tips, count),
/// bottom (lowest nonces) first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Suffixes {
    segments: Vec<(u128, u64)>,
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
    }

    /// One more pending tx, above the others, with tip `tip`.
    pub(crate) fn push(&mut self, tip: u128) {
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

    proptest! {
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
