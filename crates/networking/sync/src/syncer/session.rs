//! The syncer task's session: its main loop (one target at a time, a newer target
//! replacing it), a sync from start to finish, what ends one (done, replaced, retried,
//! invalid, out of reach), the bookkeeping shared by the stages (epochs, resting peers,
//! the highest block), and the import figures behind `eth_syncing` and the progress
//! lines.

use super::import::{ImportEvent, ImportTime};
use super::{BAD_TARGETS, InvalidChain, REST, Stop, SyncHandle, Syncer, retry};
use crate::source::BlockSource;
use alloy_primitives::B256;
use moat_blockchain::chain::ChainError;
use moat_p2p::rlpx::PeerId;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Import figures for the progress lines.
#[derive(Debug)]
pub(super) struct Stats {
    started: Instant,
    blocks: u64,
    gas: u64,
    /// The importer's time over the session.
    time: ImportTime,
    window_start: Instant,
    window_blocks: u64,
    window_gas: u64,
}

impl Stats {
    pub(super) fn new() -> Self {
        let now = Instant::now();
        Self {
            started: now,
            blocks: 0,
            gas: 0,
            time: ImportTime::default(),
            window_start: now,
            window_blocks: 0,
            window_gas: 0,
        }
    }
}

impl<S: BlockSource> Syncer<S> {
    pub(super) async fn run(mut self) {
        let mut targets = self.shared.target.subscribe();
        loop {
            let target = *targets.borrow_and_update();
            let Some(target) = target else {
                if targets.changed().await.is_err() {
                    return;
                }
                continue;
            };
            match self.sync(target, &mut targets).await {
                Ok(()) => {
                    self.await_last_batch().await;
                    self.finish(target);
                    if targets.changed().await.is_err() {
                        return;
                    }
                }
                Err(Stop::Replaced) => {}
                Err(Stop::Retry(why)) => {
                    tracing::warn!(%target, why, "sync interrupted; starting over");
                    self.reset();
                    tokio::select! {
                        _ = tokio::time::sleep(self.cfg.retry_after) => {}
                        _ = targets.changed() => {}
                    }
                }
                Err(Stop::Invalid { hash, parent, why }) => {
                    tracing::error!(%target, bad_block = %hash, why, "sync stopped: the target's chain holds an invalid block");
                    // The engine API's latestValidHash: the bad block's parent, which
                    // this node holds (it was imported, or the chain joined there).
                    let latest_valid = self.chain.header(&parent).ok().flatten().map(|_| parent);
                    let verdict = InvalidChain { latest_valid, why };
                    {
                        let mut bad = self.shared.bad.lock();
                        if bad.len() >= BAD_TARGETS {
                            bad.clear();
                        }
                        bad.insert(target, verdict.clone());
                        bad.insert(hash, verdict);
                    }
                    self.stop_session();
                    if targets.changed().await.is_err() {
                        return;
                    }
                }
                Err(Stop::Unreachable(why)) => {
                    tracing::error!(%target, why, "sync stopped: the target cannot be reached");
                    self.stop_session();
                    if targets.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// Brings the chain to `target`; returns once it is canonical.
    async fn sync(
        &mut self,
        target: B256,
        targets: &mut watch::Receiver<Option<B256>>,
    ) -> Result<(), Stop> {
        if self.is_canonical(&target)? {
            return Ok(());
        }
        let (head, _) = self.chain.head().map_err(retry)?;
        {
            let mut progress = self.shared.progress.lock();
            if progress.is_none() {
                *progress = Some((head, head));
                self.stats = Stats::new();
                tracing::info!(%target, head, "sync started");
            }
        }
        self.shared.synced.store(false, Ordering::Release);
        if self.cfg.snap && self.wants_snap()? {
            self.snap_stage(target).await?;
            if targets.borrow().is_some_and(|t| t != target) {
                return Err(Stop::Replaced);
            }
        }
        self.walk_back(target, targets).await?;
        self.fill(target, targets).await
    }

    /// The target turns canonical while its batch is still being flushed: its report
    /// comes a moment later, and the session's totals wait for it (2 s at most).
    async fn await_last_batch(&mut self) {
        let Some((start, _)) = *self.shared.progress.lock() else {
            return;
        };
        let head = self.chain.head().map_or(start, |(n, _)| n);
        while self.stats.blocks < head.saturating_sub(start) {
            match tokio::time::timeout(Duration::from_secs(2), self.events.recv()).await {
                Ok(Some(event)) => {
                    let _ = self.on_import(event);
                }
                _ => break,
            }
        }
    }

    /// The target is canonical: the node is at the head the consensus client named.
    fn finish(&mut self, target: B256) {
        let Some((start, _)) = self.shared.progress.lock().take() else {
            self.shared.synced.store(true, Ordering::Release);
            return;
        };
        let head = self.chain.head().map_or(start, |(n, _)| n);
        let secs = self.stats.started.elapsed().as_secs_f64().max(1e-3);
        tracing::info!(
            %target,
            head,
            blocks = self.stats.blocks,
            secs = format!("{secs:.1}"),
            blocks_per_sec = format!("{:.1}", self.stats.blocks as f64 / secs),
            mgas_per_sec = format!("{:.1}", self.stats.gas as f64 / secs / 1e6),
            // The importer's time: waiting for blocks (headers walk and bodies download
            // behind), executing and committing them, making batches durable.
            waiting_secs = format!("{:.1}", self.stats.time.idle.as_secs_f64()),
            import_secs = format!("{:.1}", self.stats.time.import.as_secs_f64()),
            flush_secs = format!("{:.1}", self.stats.time.flush.as_secs_f64()),
            "sync complete"
        );
        self.shared.synced.store(true, Ordering::Release);
        self.skeleton.clear();
        self.ready.clear();
    }

    /// Gives up on the current session (the target is bad or out of reach).
    fn stop_session(&mut self) {
        self.shared.progress.lock().take();
        self.reset();
    }
    /// Forgets downloaded headers and blocks, and what the importer has queued.
    fn reset(&mut self) {
        self.skeleton.clear();
        self.ready.clear();
        self.bump_epoch();
    }

    pub(super) fn bump_epoch(&mut self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.sent_upto = self.chain.head().map_or(0, |(n, _)| n);
        if let Some(first) = self.skeleton.first_number() {
            self.sent_upto = self.sent_upto.min(first.saturating_sub(1));
        }
    }

    pub(super) fn is_canonical(&self, hash: &B256) -> Result<bool, Stop> {
        self.chain.is_canonical(hash).map_err(retry)
    }

    pub(super) fn set_highest(&self, number: u64) {
        if let Some((_, highest)) = self.shared.progress.lock().as_mut() {
            *highest = number;
        }
        metrics::gauge!("moat_sync_highest_block").set(number as f64);
    }

    pub(super) fn is_resting(&self, peer: &PeerId, now: Instant) -> bool {
        self.resting.get(peer).is_some_and(|until| *until > now)
    }

    pub(super) fn rest(&mut self, peer: PeerId) {
        self.resting.insert(peer, Instant::now() + REST);
    }

    /// Waits `d` unless a new target comes first.
    pub(super) async fn wait(
        &self,
        targets: &mut watch::Receiver<Option<B256>>,
        d: Duration,
    ) -> Result<(), Stop> {
        tokio::select! {
            _ = tokio::time::sleep(d) => Ok(()),
            _ = targets.changed() => Err(Stop::Replaced),
        }
    }

    pub(super) fn on_import(&mut self, event: ImportEvent) -> Result<(), Stop> {
        match event {
            ImportEvent::Imported { blocks, gas, time } => {
                self.stats.blocks += blocks;
                self.stats.gas += gas;
                self.stats.time += time;
                // Seconds as floats: a gauge that only grows.
                for (name, d) in [
                    ("moat_sync_idle_seconds_total", time.idle),
                    ("moat_sync_import_seconds_total", time.import),
                    ("moat_sync_flush_seconds_total", time.flush),
                ] {
                    metrics::gauge!(name).increment(d.as_secs_f64());
                }
                self.stats.window_blocks += blocks;
                self.stats.window_gas += gas;
                metrics::counter!("moat_sync_blocks_imported_total").increment(blocks);
                Ok(())
            }
            // Of blocks that no longer led to the target when it failed: nothing to do.
            ImportEvent::Failed { epoch, .. } if epoch + 1 < self.epoch.load(Ordering::Acquire) => {
                Ok(())
            }
            ImportEvent::Failed {
                hash,
                number,
                parent,
                error,
                ..
            } => match error {
                ChainError::Mismatch { .. }
                | ChainError::Header { .. }
                | ChainError::Invalid { .. } => {
                    self.skeleton.truncate_above(number.saturating_sub(1));
                    Err(Stop::Invalid {
                        hash,
                        parent,
                        why: error.to_string(),
                    })
                }
                ChainError::ReorgTooDeep { .. } | ChainError::BelowFinalized { .. } => {
                    Err(Stop::Unreachable(error.to_string()))
                }
                other => Err(Stop::Retry(format!(
                    "importing #{number} ({hash}): {other}"
                ))),
            },
        }
    }

    pub(super) fn log_progress(&mut self) {
        let Some(p) = (SyncHandle {
            shared: self.shared.clone(),
        })
        .progress() else {
            return;
        };
        let secs = self.stats.window_start.elapsed().as_secs_f64().max(1e-3);
        let rate = self.stats.window_blocks as f64 / secs;
        let left = p.highest_block.saturating_sub(p.current_block);
        let eta = if rate > 0.0 {
            format!("{:.0}s", left as f64 / rate)
        } else {
            "unknown".into()
        };
        tracing::info!(
            head = p.current_block,
            target = p.highest_block,
            blocks = self.stats.window_blocks,
            blocks_per_sec = format!("{rate:.1}"),
            mgas_per_sec = format!("{:.1}", self.stats.window_gas as f64 / secs / 1e6),
            downloaded = self.ready.len(),
            peers = self.source.peers().len(),
            eta,
            "syncing"
        );
        self.stats.window_start = Instant::now();
        self.stats.window_blocks = 0;
        self.stats.window_gas = 0;
    }
}
