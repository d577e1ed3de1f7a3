//! Version-0 sidecars (one blob proof per blob, EIP-4844) turned into version 1 (128 cell
//! proofs per blob, EIP-7594) once Osaka is active.
//!
//! From Osaka on, a block's blobs travel with cell proofs, and a peer must send the fork's
//! version (a version-0 sidecar from a peer is refused, as before). A wallet that still
//! signs version-0 sidecars submits over RPC; its transaction is converted, as
//! go-ethereum and reth do, so the user is not told to upgrade mid-fork:
//!
//! ```text
//!  RPC ─▶ stages 1–8 as any tx (stage 5 lets a local version-0 sidecar through at Osaka)
//!      ─▶ 9a to_cell_proofs: 128 cell proofs per blob, on the blocking pool, its CPU
//!            charged to the RPC budget (a client cannot buy cell proofs for free)
//!      ─▶ 9 KZG of the version-1 sidecar, as any ─▶ 10 insert
//! ```
//!
//! The conversion runs after the sender and the stateful checks, so a transaction that
//! would be refused anyway costs no cell proofs; the commitments are kept, and stage 9
//! checks the new proofs against them, so a sidecar whose blobs do not match its
//! commitments is refused there. Transactions pooled as version 0 before Osaka are
//! converted by [`convert_pooled`](crate::Pool::convert_pooled) once the head reaches
//! the fork, off the admission path.

use crate::{Counter, Pool};
use moat_common::transaction::{BlobsBundle, SidecarVersion};
use moat_crypto::kzg::{self, KzgError};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// `bundle` with version-1 cell proofs in place of its version-0 blob proofs (blobs and
/// commitments unchanged), and the thread CPU the proofs took (ns). A version-1 bundle
/// comes back as it is.
pub(crate) fn to_cell_proofs(bundle: &BlobsBundle) -> Result<(BlobsBundle, u64), KzgError> {
    let started = moat_sched::thread_cpu_ns();
    if bundle.version == SidecarVersion::V1 {
        return Ok((bundle.clone(), 0));
    }
    let mut proofs = Vec::with_capacity(bundle.blobs.len() * SidecarVersion::V1.proofs_per_blob());
    for blob in &bundle.blobs {
        proofs.extend(kzg::compute_cell_proofs(blob)?);
    }
    let converted = BlobsBundle {
        version: SidecarVersion::V1,
        blobs: bundle.blobs.clone(),
        commitments: bundle.commitments.clone(),
        proofs,
        sampled: None,
    };
    Ok((
        converted,
        moat_sched::thread_cpu_ns().saturating_sub(started),
    ))
}

/// [`to_cell_proofs`] on the blocking pool (it takes tens of milliseconds a blob).
/// `None` if the task was lost (runtime shutting down).
pub(crate) async fn to_cell_proofs_blocking(
    bundle: Arc<BlobsBundle>,
) -> Option<Result<(BlobsBundle, u64), KzgError>> {
    tokio::task::spawn_blocking(move || to_cell_proofs(&bundle))
        .await
        .ok()
}

impl Pool {
    /// Converts the pooled version-0 sidecars to cell proofs (the head reached Osaka),
    /// off the admission path: one task, one tx at a time on the blocking pool, its CPU
    /// charged to the node. Each converted sidecar takes the old one's place (same tx,
    /// same class and age; the blob pool's store rewrites its record); a sidecar whose
    /// blobs cannot be converted takes its tx out with its sender's later ones. Until a
    /// tx is converted the builder leaves it out of Osaka payloads (their bundles are
    /// version 1), and it is served as it is. A second call while the task runs is
    /// a no-op.
    pub fn convert_pooled(&self) {
        let s = &*self.inner;
        if s.converting.swap(true, Ordering::AcqRel) {
            return;
        }
        if s.pool.lock().next_v0_sidecar().is_none() {
            s.converting.store(false, Ordering::Release);
            return;
        }
        let pool = self.clone();
        tokio::spawn(async move {
            let s = &*pool.inner;
            loop {
                let Some(tx) = s.pool.lock().next_v0_sidecar() else {
                    break;
                };
                let Some(bundle) = tx.tx.sidecar_shared().cloned() else {
                    break;
                };
                let Some(converted) = to_cell_proofs_blocking(bundle).await else {
                    break; // the runtime is going away
                };
                match converted {
                    Ok((bundle, cpu_ns)) => {
                        s.budgets.charge_node(crate::Spent {
                            cpu_us: cpu_ns / 1_000,
                            useful_us: cpu_ns / 1_000,
                            ..Default::default()
                        });
                        s.metrics.inc(Counter::sidecars_converted);
                        let new = Arc::new(tx.with_sidecar(bundle));
                        let (evicted, evicted_locals) = {
                            let mut p = s.pool.lock();
                            let (_, evicted) = p.swap_sidecar(new);
                            (evicted, std::mem::take(&mut p.evicted_locals))
                        };
                        s.metrics.add(Counter::evicted, evicted.len() as u64);
                        pool.hold_evicted_locals(evicted_locals);
                        if let Some(store) = s.blob_store.get() {
                            store.rewrite(tx.hash());
                        }
                    }
                    Err(e) => {
                        tracing::warn!(tx = %tx.hash(), error = %e, "a pooled version-0 sidecar could not be converted; dropped");
                        pool.remove_with_descendants(&tx.hash());
                    }
                }
            }
            s.converting.store(false, Ordering::Release);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_converted_sidecar_verifies_as_version_one_with_the_same_commitments() {
        let blobs = vec![*kzg::sample_blob(1), *kzg::sample_blob(2)];
        let v0 = BlobsBundle::build(SidecarVersion::V0, blobs).unwrap();
        v0.verify_proofs().unwrap();
        let (v1, cpu_ns) = to_cell_proofs(&v0).unwrap();
        assert_eq!(v1.version, SidecarVersion::V1);
        assert_eq!(v1.commitments, v0.commitments);
        assert_eq!(v1.blobs, v0.blobs);
        assert_eq!(v1.proofs.len(), 2 * SidecarVersion::V1.proofs_per_blob());
        v1.verify_proofs().unwrap();
        assert!(cpu_ns > 0, "the conversion's CPU is measured");
    }

    #[test]
    fn blobs_that_do_not_match_their_commitments_fail_after_conversion() {
        let mut v0 = BlobsBundle::build(SidecarVersion::V0, vec![*kzg::sample_blob(3)]).unwrap();
        v0.blobs[0] = *kzg::sample_blob(4);
        let (v1, _) = to_cell_proofs(&v0).unwrap();
        assert!(
            v1.verify_proofs().is_err(),
            "the cell proofs do not open the commitment"
        );
    }
}
