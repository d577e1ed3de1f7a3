//! KZG verification off the async runtime, batched across transactions.
//!
//! A blob transaction that reaches the KZG stage joins a queue. If no worker is running,
//! its caller starts one on the blocking pool; the worker drains the queue in batches and
//! verifies each batch with one c-kzg call per sidecar version. Transactions that arrive
//! while a batch runs wait for the next one, so batches grow exactly when load does and
//! no timer adds latency when it doesn't. A failed batch is re-checked transaction by
//! transaction to find the culprit; the others still pass.

use super::metrics::{Counter, PoolMetrics};
use moat_common::transaction::{BlobsBundle, BlobsBundleError, SidecarVersion};
use parking_lot::Mutex;
use std::sync::Arc;
use tokio::sync::oneshot;

/// What identifies a blob transaction's sidecar exactly: SHA-256 over the transaction
/// hash, the sidecar version, commitments, proofs and blobs. The hash does not commit to
/// the sidecar, so a sidecar that failed KZG is remembered by this digest: a peer that
/// sends the same bad bundle again costs a hash of it, not another KZG check, and an
/// honest peer's good sidecar for the same transaction still gets its own check.
pub(crate) fn sidecar_digest(
    hash: &alloy_primitives::B256,
    bundle: &BlobsBundle,
) -> alloy_primitives::B256 {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(hash);
    h.update([bundle.version as u8]);
    for c in &bundle.commitments {
        h.update(c);
    }
    for p in &bundle.proofs {
        h.update(p);
    }
    for b in &bundle.blobs {
        h.update(&b.0[..]);
    }
    if let Some(s) = &bundle.sampled {
        h.update(s.custody);
        for c in &s.cells {
            h.update(&c[..]);
        }
    }
    alloy_primitives::B256::from(<[u8; 32]>::from(h.finalize()))
}

/// The verdict, and this bundle's share (ns) of its batch's thread CPU.
type Reply = oneshot::Sender<(Result<(), BlobsBundleError>, u64)>;

struct Job {
    bundle: Arc<BlobsBundle>,
    reply: Reply,
}

#[derive(Default)]
struct Queue {
    jobs: Vec<Job>,
    worker_running: bool,
}

pub(crate) struct KzgBatcher {
    queue: Mutex<Queue>,
    max_batch: usize,
    metrics: Arc<PoolMetrics>,
}

impl KzgBatcher {
    pub(crate) fn new(max_batch: usize, metrics: Arc<PoolMetrics>) -> Self {
        Self {
            queue: Mutex::new(Queue::default()),
            max_batch: max_batch.max(1),
            metrics,
        }
    }

    /// Verifies `bundle`'s proofs, batched with whatever else is waiting; with the
    /// verdict, the bundle's share of the batch's CPU (ns, split by blob count).
    pub(crate) async fn verify(
        self: &Arc<Self>,
        bundle: Arc<BlobsBundle>,
    ) -> Option<(Result<(), BlobsBundleError>, u64)> {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime (a synchronous caller): verify here.
            let cpu = moat_sched::thread_cpu_ns();
            let result = self.verify_batch_now(vec![bundle]).pop()?;
            return Some((result, moat_sched::thread_cpu_ns().saturating_sub(cpu)));
        };
        let (reply, result) = oneshot::channel();
        let start_worker = {
            let mut q = self.queue.lock();
            q.jobs.push(Job { bundle, reply });
            !std::mem::replace(&mut q.worker_running, true)
        };
        if start_worker {
            let this = Arc::clone(self);
            runtime.spawn_blocking(move || this.drain());
        }
        result.await.ok()
    }

    fn drain(&self) {
        loop {
            let jobs = {
                let mut q = self.queue.lock();
                if q.jobs.is_empty() {
                    q.worker_running = false;
                    return;
                }
                let take = q.jobs.len().min(self.max_batch);
                q.jobs.drain(..take).collect::<Vec<_>>()
            };
            let (bundles, replies): (Vec<_>, Vec<_>) =
                jobs.into_iter().map(|j| (j.bundle, j.reply)).unzip();
            let blobs: Vec<u64> = bundles
                .iter()
                .map(|b| b.blobs.len().max(1) as u64)
                .collect();
            let cpu = moat_sched::thread_cpu_ns();
            // On the untrusted lane's `SCHED_IDLE` threads a batch (milliseconds in one
            // c-kzg call) gives way every 0.5 ms to a waiting trusted thread.
            let results = moat_sched::preemptible(|| self.verify_batch_now(bundles));
            let spent = moat_sched::thread_cpu_ns().saturating_sub(cpu);
            let total: u64 = blobs.iter().sum();
            for ((reply, result), n) in replies.into_iter().zip(results).zip(blobs) {
                let _ = reply.send((result, spent * n / total.max(1)));
            }
        }
    }

    /// Verifies bundles, one batch call per version, with a per-bundle fallback on failure.
    fn verify_batch_now(
        &self,
        bundles: Vec<Arc<BlobsBundle>>,
    ) -> Vec<Result<(), BlobsBundleError>> {
        let mut results: Vec<Result<(), BlobsBundleError>> = vec![Ok(()); bundles.len()];
        for version in [SidecarVersion::V0, SidecarVersion::V1] {
            let idx: Vec<usize> = (0..bundles.len())
                .filter(|i| bundles[*i].version == version)
                .collect();
            if idx.is_empty() {
                continue;
            }
            let group: Vec<&BlobsBundle> = idx.iter().map(|i| &*bundles[*i]).collect();
            self.metrics.inc(Counter::kzg_batches);
            self.metrics
                .add(Counter::kzg_verifications, group.len() as u64);
            let batch = BlobsBundle::verify_proofs_batch(&group);
            if batch.is_ok() {
                continue;
            }
            if let [only] = idx[..] {
                results[only] = batch;
                continue;
            }
            self.metrics.inc(Counter::kzg_batch_fallbacks);
            for i in idx {
                results[i] = bundles[i].verify_proofs();
            }
        }
        results
    }
}
