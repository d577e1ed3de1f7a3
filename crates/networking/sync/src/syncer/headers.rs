//! Headers: walking back from the target, a batch of headers at a time from the best
//! peer, until a header's parent is on the local canonical chain or in the skeleton,
//! and joining what was walked to the skeleton (the fork point no lower than the chain
//! can be taken back to).

use super::{Set, Stop, Syncer, retry, short};
use crate::source::BlockSource;
use alloy_primitives::B256;
use moat_p2p::requests::MAX_IN_FLIGHT;
use moat_p2p::rlpx::PeerId;
use moat_p2p::{HeadersRequest, SealedHeader};
use std::time::Instant;
use tokio::sync::watch;

impl<S: BlockSource> Syncer<S> {
    /// The peer to ask for headers: one that announced the target as its head first,
    /// then the one that serves the highest blocks.
    fn header_peer(&self, target: &B256, tried: &Set<PeerId>) -> Option<PeerId> {
        let now = Instant::now();
        self.source
            .peers()
            .into_iter()
            .filter(|p| {
                !tried.contains(&p.id)
                    && p.in_flight < MAX_IN_FLIGHT
                    && !self.is_resting(&p.id, now)
            })
            .max_by_key(|p| (p.head == *target, p.range.map_or(0, |r| r.1), p.reputation))
            .map(|p| p.id)
    }

    /// Fetches headers from `target` back until one's parent is on the local canonical
    /// chain or in the skeleton already, and makes the skeleton end at `target`.
    pub(super) async fn walk_back(
        &mut self,
        target: B256,
        targets: &mut watch::Receiver<Option<B256>>,
    ) -> Result<(), Stop> {
        if let Some(n) = self.skeleton.number_of(&target) {
            // The consensus client went back to a block we are on the way to.
            self.skeleton.truncate_above(n);
            self.set_highest(n);
            if self.sent_upto > n {
                self.bump_epoch();
            }
            return Ok(());
        }
        let store = self.chain.store().clone();
        let mut fresh: Vec<SealedHeader> = Vec::new();
        let mut next = target;
        let mut tried = Set::default();
        let mut last_log = Instant::now();
        loop {
            if targets.has_changed().unwrap_or(false) {
                return Err(Stop::Replaced);
            }
            let Some(peer) = self.header_peer(&target, &tried) else {
                tracing::debug!(%next, asked = tried.len(), "no peer has the next headers; waiting");
                tried.clear();
                self.wait(targets, self.cfg.retry_after).await?;
                continue;
            };
            let req = HeadersRequest::back_from(next, self.cfg.header_batch);
            let headers = match self.source.headers(peer, req).await {
                Ok(h) if !h.is_empty() => h,
                Ok(_) => {
                    tried.insert(peer);
                    continue;
                }
                Err(e) => {
                    tracing::debug!(peer = %short(&peer), error = %e, "header request failed");
                    tried.insert(peer);
                    self.rest(peer);
                    continue;
                }
            };
            tried.clear();
            for h in headers {
                if fresh.is_empty() {
                    self.set_highest(h.number());
                }
                if store.canonical_hash(h.number()).map_err(retry)? == Some(h.hash) {
                    // Only the target itself can be canonical here (parents are checked
                    // below before their turn): nothing to fetch.
                    return Ok(());
                }
                let Some(parent_number) = h.number().checked_sub(1) else {
                    return Err(Stop::Unreachable(
                        "the target's chain has another genesis".into(),
                    ));
                };
                let parent = h.header.parent_hash;
                fresh.push(h);
                if store.canonical_hash(parent_number).map_err(retry)? == Some(parent) {
                    return self.join_canonical(fresh, parent_number);
                }
                if let Some(n) = self.skeleton.number_of(&parent) {
                    self.join_skeleton(fresh, n);
                    return Ok(());
                }
            }
            next = fresh.last().map_or(next, |h| h.header.parent_hash);
            if last_log.elapsed() >= self.cfg.progress_every {
                last_log = Instant::now();
                tracing::info!(
                    headers = fresh.len(),
                    at = fresh.last().map_or(0, |h| h.number()),
                    "sync: fetching headers back to the local chain"
                );
            }
        }
    }

    /// The walked headers start right above canonical block `fork_point`.
    fn join_canonical(&mut self, fresh: Vec<SealedHeader>, fork_point: u64) -> Result<(), Stop> {
        let (head, _) = self.chain.head().map_err(retry)?;
        let oldest = self.chain.oldest_undoable().map_err(retry)?;
        if fork_point < oldest {
            return Err(Stop::Unreachable(format!(
                "the target's chain leaves ours at #{fork_point}, {} blocks below the head #{head}: the chain can be taken back to #{oldest} at the oldest (the finalized block or the oldest undo record)",
                head - fork_point
            )));
        }
        if head > fork_point {
            tracing::info!(
                fork_point,
                head,
                "sync: the target's chain forks below the head; its blocks will replace ours"
            );
        }
        self.skeleton.clear();
        for h in fresh.into_iter().rev() {
            self.skeleton.push(h);
        }
        let skeleton = &self.skeleton;
        self.ready.retain(|hash, _| skeleton.contains(hash));
        self.bump_epoch();
        Ok(())
    }

    /// The walked headers continue the skeleton above its block `number`.
    fn join_skeleton(&mut self, fresh: Vec<SealedHeader>, number: u64) {
        self.skeleton.truncate_above(number);
        for h in fresh.into_iter().rev() {
            self.skeleton.push(h);
        }
        let skeleton = &self.skeleton;
        self.ready.retain(|hash, _| skeleton.contains(hash));
        if self.sent_upto > number {
            self.bump_epoch();
        }
    }
}
