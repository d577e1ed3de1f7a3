//! The skeleton: the headers walked back from the target, held ascending from just
//! above the local chain up to the target, each the parent of the next, with an index
//! by hash. Bodies are fetched for it in order and its front is dropped as the importer
//! makes those blocks canonical.

use super::Map;
use alloy_primitives::B256;
use moat_p2p::SealedHeader;
use std::collections::VecDeque;
/// The headers from just above the local chain up to the target, ascending, each the
/// parent of the next.
#[derive(Debug, Default)]
pub(super) struct Skeleton {
    pub(super) headers: VecDeque<SealedHeader>,
    numbers: Map<B256, u64>,
}

impl Skeleton {
    pub(super) fn first_number(&self) -> Option<u64> {
        self.headers.front().map(|h| h.number())
    }

    pub(super) fn last_number(&self) -> Option<u64> {
        self.headers.back().map(|h| h.number())
    }

    pub(super) fn get(&self, number: u64) -> Option<&SealedHeader> {
        let first = self.first_number()?;
        self.headers
            .get(usize::try_from(number.checked_sub(first)?).ok()?)
    }

    pub(super) fn number_of(&self, hash: &B256) -> Option<u64> {
        self.numbers.get(hash).copied()
    }

    pub(super) fn contains(&self, hash: &B256) -> bool {
        self.numbers.contains_key(hash)
    }

    /// Keeps the headers up to `number`.
    pub(super) fn truncate_above(&mut self, number: u64) {
        while self.last_number().is_some_and(|n| n > number) {
            if let Some(h) = self.headers.pop_back() {
                self.numbers.remove(&h.hash);
            }
        }
    }

    /// Appends `h`, which must be the child of the last header.
    pub(super) fn push(&mut self, h: SealedHeader) {
        debug_assert!(
            self.headers
                .back()
                .is_none_or(|l| l.hash == h.header.parent_hash && l.number() + 1 == h.number())
        );
        self.numbers.insert(h.hash, h.number());
        self.headers.push_back(h);
    }

    pub(super) fn pop_front(&mut self) {
        if let Some(h) = self.headers.pop_front() {
            self.numbers.remove(&h.hash);
        }
    }

    pub(super) fn clear(&mut self) {
        self.headers.clear();
        self.numbers.clear();
    }
}
