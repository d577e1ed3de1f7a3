//! Bodies: asking the peers (several requests at once, a few per peer) for the bodies of
//! the skeleton's next blocks, taking what comes back, and handing the downloaded blocks
//! that follow what the importer has to it in batches, in order, until the target is
//! canonical.

use super::import::ImportBatch;
use super::{BODY_REQUESTS_PER_PEER, IMPORT_BATCH, Stop, Syncer, retry, short};
use crate::source::BlockSource;
use alloy_primitives::B256;
use moat_common::block::Block;
use moat_p2p::requests::MAX_IN_FLIGHT;
use moat_p2p::rlpx::PeerId;
use moat_p2p::{RequestError, SyncPeer};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::watch;
/// One body request's outcome.
pub(super) struct Fetched {
    peer: PeerId,
    asked: Vec<B256>,
    result: Result<Vec<Block>, RequestError>,
}

impl<S: BlockSource> Syncer<S> {
    /// Downloads bodies and hands blocks to the importer until `target` is canonical.
    pub(super) async fn fill(
        &mut self,
        target: B256,
        targets: &mut watch::Receiver<Option<B256>>,
    ) -> Result<(), Stop> {
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        let mut last_log = Instant::now();
        loop {
            if self.is_canonical(&target)? {
                return Ok(());
            }
            self.prune()?;
            self.hand_over();
            self.request_bodies()?;
            if last_log.elapsed() >= self.cfg.progress_every {
                last_log = Instant::now();
                self.log_progress();
            }
            tokio::select! {
                changed = targets.changed() => {
                    return Err(match changed {
                        Ok(()) => Stop::Replaced,
                        Err(_) => Stop::Retry("the node is shutting down".into()),
                    });
                }
                Some(event) = self.events.recv() => self.on_import(event)?,
                Some(fetched) = self.fetches.join_next(), if !self.fetches.is_empty() => {
                    if let Ok(f) = fetched {
                        self.on_fetched(f);
                    }
                }
                _ = tick.tick() => {}
            }
        }
    }

    /// Drops the skeleton's front once the importer made it canonical.
    fn prune(&mut self) -> Result<(), Stop> {
        let store = self.chain.store();
        while let Some(h) = self.skeleton.headers.front() {
            if store.canonical_hash(h.number()).map_err(retry)? != Some(h.hash) {
                break;
            }
            self.ready.remove(&h.hash);
            self.skeleton.pop_front();
        }
        Ok(())
    }

    /// Hands the downloaded blocks that follow what the importer has, in order.
    fn hand_over(&mut self) {
        let epoch = self.epoch.load(Ordering::Acquire);
        if let Some(first) = self.skeleton.first_number() {
            self.sent_upto = self.sent_upto.max(first.saturating_sub(1));
        }
        loop {
            let next = self.sent_upto + 1;
            let ready = self
                .skeleton
                .get(next)
                .is_some_and(|h| self.ready.contains_key(&h.hash));
            if !ready {
                return;
            }
            let Ok(permit) = self.import_tx.try_reserve() else {
                return;
            };
            let mut blocks = Vec::with_capacity(IMPORT_BATCH);
            while blocks.len() < IMPORT_BATCH {
                let n = self.sent_upto + 1;
                let Some(h) = self.skeleton.get(n) else { break };
                let Some(block) = self.ready.remove(&h.hash) else {
                    break;
                };
                blocks.push(block);
                self.sent_upto = n;
            }
            permit.send(ImportBatch { epoch, blocks });
        }
    }

    /// Asks idle peers for the bodies of the next blocks not yet downloaded or asked for.
    fn request_bodies(&mut self) -> Result<(), Stop> {
        let Some(last) = self.skeleton.last_number() else {
            return Ok(());
        };
        let (head, _) = self.chain.head().map_err(retry)?;
        let end = last.min(head.max(self.sent_upto) + self.cfg.max_ahead);
        let now = Instant::now();
        let mut peers: Vec<SyncPeer> = self
            .source
            .peers()
            .into_iter()
            .filter(|p| !self.is_resting(&p.id, now))
            .collect();
        let mut n = self.sent_upto + 1;
        while self.fetches.len() < self.cfg.max_body_requests && n <= end {
            peers.retain(|p| {
                p.in_flight < MAX_IN_FLIGHT
                    && self.outstanding.get(&p.id).copied().unwrap_or(0) < BODY_REQUESTS_PER_PEER
            });
            let Some(peer) = peers
                .iter()
                .min_by_key(|p| {
                    (
                        self.outstanding.get(&p.id).copied().unwrap_or(0),
                        -p.reputation,
                    )
                })
                .map(|p| p.id)
            else {
                break;
            };
            let mut chunk = Vec::new();
            while chunk.len() < self.cfg.body_batch && n <= end {
                if let Some(h) = self.skeleton.get(n)
                    && !self.ready.contains_key(&h.hash)
                    && !self.in_flight.contains(&h.hash)
                {
                    chunk.push(h.clone());
                }
                n += 1;
            }
            if chunk.is_empty() {
                break;
            }
            let asked: Vec<B256> = chunk.iter().map(|h| h.hash).collect();
            self.in_flight.extend(asked.iter().copied());
            *self.outstanding.entry(peer).or_default() += 1;
            let source = self.source.clone();
            self.fetches.spawn(async move {
                let result = source.bodies(peer, chunk).await;
                Fetched {
                    peer,
                    asked,
                    result,
                }
            });
        }
        Ok(())
    }

    fn on_fetched(&mut self, f: Fetched) {
        if let Some(n) = self.outstanding.get_mut(&f.peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.outstanding.remove(&f.peer);
            }
        }
        for h in &f.asked {
            self.in_flight.remove(h);
        }
        match f.result {
            Ok(blocks) => {
                if blocks.is_empty() {
                    self.rest(f.peer);
                }
                metrics::counter!("moat_sync_bodies_total").increment(blocks.len() as u64);
                for b in blocks {
                    if self.skeleton.contains(&b.hash) {
                        self.ready.insert(b.hash, b);
                    }
                }
            }
            Err(e) => {
                tracing::debug!(peer = %short(&f.peer), error = %e, "body request failed");
                self.rest(f.peer);
            }
        }
    }
}
