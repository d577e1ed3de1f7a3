//! eth/72's cells (EIP-8070, the sparse blobpool): blob data as cells, both ways.
//!
//! On eth/72 a blob tx travels in `PooledTransactions` without its blobs; the blobs
//! travel as cells (`GetCells`/`Cells`, 2,048 bytes each, no proofs: those are in the
//! sidecar). This node keeps whole blobs, so it is a provider for every blob tx:
//! - **out**: blob txs are announced to eth/72 peers with every cell ([`ALL_CELLS`]) and
//!   the size without blobs, served without blobs, and `GetCells` is answered from the
//!   blobs: cells 0..64 are the blob's own bytes, 64..128 are computed (c-kzg, charged to
//!   the asking peer's admission budget); at most [`MAX_CELLS_SERVED`] cells a reply,
//!   checked before each tx (go-ethereum's rule), only txs whose cells are all there;
//! - **in**: a blob tx body from an eth/72 peer gets the cheap checks that do not need
//!   the blobs (`validate_without_blobs`), then the same peer is asked for its data
//!   cells ([`DATA_CELLS`]) — only peers that announced them are asked for the tx at
//!   all. The cells make the blobs again; the whole tx then goes through admission
//!   as a fetched tx, so KZG runs once per unique sidecar whoever sends it (the pool's
//!   dedup) and a cell that fails its proof fails the sidecar: the peer is dropped, as
//!   for any bad sidecar.
//!
//! A `Cells` reply bigger than any reply is refused before decoding (`MAX_CELLS_BODY`);
//! one whose counts differ from what was asked, or that leaves out a tx the peer said it
//! holds, is a fault. A request unanswered within [`CELLS_TIMEOUT`] sends its txs to
//! their next announcers (the fetcher), without penalty.

use super::{Network, Peer, short};
use crate::eth::{ALL_CELLS, CellMask, DATA_CELLS, EthMessage, mask_indices};
use crate::rlpx::PeerId;
use alloy_primitives::{B256, Bytes};
use moat_common::transaction::{BlobsBundle, PooledTransaction, SidecarVersion};
use moat_crypto::kzg::{self, BYTES_PER_BLOB, Blob};
use moat_mempool::{CpuMeter, TxInput, TxOrigin};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most cells one `Cells` reply of ours holds (go-ethereum's 2 MiB budget).
pub(crate) const MAX_CELLS_SERVED: usize = 1024;
/// Most cells one `GetCells` of ours asks for.
const MAX_CELLS_ASKED: usize = 1024;
/// How long a peer has to answer a `GetCells`.
pub(crate) const CELLS_TIMEOUT: Duration = Duration::from_secs(5);

/// The cells mask this node announces its blob txs with on eth/72: all of them.
pub(crate) const OUR_MASK: CellMask = ALL_CELLS;

/// Blob tx bodies waiting for their cells from the peer that sent them.
#[derive(Debug)]
pub(super) struct CellRequest {
    peer: PeerId,
    bodies: Vec<PooledTransaction>,
    mask: CellMask,
    sent: Instant,
}

/// The `GetCells` requests in flight, by request id.
#[derive(Debug, Default)]
pub(super) struct CellFetches {
    by_id: HashMap<u64, CellRequest, foldhash::fast::RandomState>,
    next_id: u64,
}

impl CellFetches {
    fn start(&mut self, peer: PeerId, bodies: Vec<PooledTransaction>, now: Instant) -> u64 {
        self.next_id += 1;
        self.by_id.insert(
            self.next_id,
            CellRequest {
                peer,
                bodies,
                mask: DATA_CELLS,
                sent: now,
            },
        );
        self.next_id
    }

    /// Requests older than [`CELLS_TIMEOUT`], taken out.
    fn expired(&mut self, now: Instant) -> Vec<CellRequest> {
        let late: Vec<u64> = self
            .by_id
            .iter()
            .filter(|(_, r)| now.saturating_duration_since(r.sent) >= CELLS_TIMEOUT)
            .map(|(id, _)| *id)
            .collect();
        late.iter().filter_map(|id| self.by_id.remove(id)).collect()
    }

    /// A departed peer's requests, taken out.
    fn of_peer(&mut self, peer: &PeerId) -> Vec<CellRequest> {
        let ids: Vec<u64> = self
            .by_id
            .iter()
            .filter(|(_, r)| r.peer == *peer)
            .map(|(id, _)| *id)
            .collect();
        ids.iter().filter_map(|id| self.by_id.remove(id)).collect()
    }
}

/// How many blobs a blob tx body carries (its versioned hashes).
fn blob_count(tx: &PooledTransaction) -> usize {
    tx.tx().tx().blob_versioned_hashes().len()
}

/// The cells at `indices` of each blob of `sidecar`, blob by blob; `None` if a cell
/// could not be computed.
fn cells_of(sidecar: &BlobsBundle, indices: &[usize]) -> Option<Vec<Bytes>> {
    let mut out = Vec::with_capacity(sidecar.blobs.len() * indices.len());
    for blob in 0..sidecar.blobs.len() {
        for cell in sidecar.cells(blob, indices)? {
            out.push(Bytes::copy_from_slice(&cell));
        }
    }
    Some(out)
}

/// The blobs again from their data cells (blob by blob, cells 0..64 each).
fn blobs_from_data_cells(cells: &[Bytes], blobs: usize) -> Option<Vec<Blob>> {
    if cells.len() != blobs * kzg::DATA_CELLS {
        return None;
    }
    let mut out = Vec::with_capacity(blobs);
    for chunk in cells.chunks(kzg::DATA_CELLS) {
        let mut bytes = Vec::with_capacity(BYTES_PER_BLOB);
        for cell in chunk {
            bytes.extend_from_slice(cell);
        }
        out.push(*Blob::from_slice(&bytes)?);
    }
    Some(out)
}

impl Network {
    /// Answers a `GetCells`: the cells of `mask` of each pooled blob tx asked for that
    /// the node holds whole (version-1 sidecars), within [`MAX_CELLS_SERVED`] (checked
    /// before each tx). The CPU (extension cells are computed) is charged to the peer.
    pub(super) fn serve_cells(
        &self,
        peer: &Peer,
        request_id: u64,
        hashes: &[B256],
        mask: CellMask,
    ) {
        let meter = CpuMeter::start();
        let indices = mask_indices(&mask);
        let mut served = Vec::new();
        let mut cells = Vec::new();
        let mut count = 0;
        for hash in hashes {
            if count >= MAX_CELLS_SERVED || indices.is_empty() {
                break;
            }
            let Some(tx) = self.inner.pool.get_shareable(hash) else {
                continue;
            };
            let Some(sidecar) = tx.tx.sidecar() else {
                continue;
            };
            if sidecar.version != SidecarVersion::V1 {
                continue;
            }
            let Some(tx_cells) = cells_of(sidecar, &indices) else {
                continue;
            };
            count += tx_cells.len();
            served.push(*hash);
            cells.push(tx_cells);
        }
        self.inner.pool.charge(TxOrigin::Peer(peer.info.id), meter);
        metrics::counter!("moat_p2p_cells_served_total").increment(count as u64);
        peer.send(peer.framing.eth(&EthMessage::Cells {
            request_id,
            hashes: served,
            cells,
            mask,
        }));
    }

    /// Asks `peer` for the data cells of blob tx bodies it delivered without blobs, at
    /// most [`MAX_CELLS_ASKED`] cells a request.
    pub(super) fn fetch_cells(&self, peer: &Peer, bodies: Vec<PooledTransaction>) {
        let now = Instant::now();
        let mut batch: Vec<PooledTransaction> = Vec::new();
        let mut cells = 0;
        let mut requests = Vec::new();
        for body in bodies {
            let n = blob_count(&body) * kzg::DATA_CELLS;
            if !batch.is_empty() && cells + n > MAX_CELLS_ASKED {
                requests.push(std::mem::take(&mut batch));
                cells = 0;
            }
            cells += n;
            batch.push(body);
        }
        if !batch.is_empty() {
            requests.push(batch);
        }
        for bodies in requests {
            let hashes: Vec<B256> = bodies.iter().map(|b| b.hash()).collect();
            let request_id = self
                .inner
                .cell_fetches
                .lock()
                .start(peer.info.id, bodies, now);
            metrics::counter!("moat_p2p_cell_requests_total").increment(1);
            peer.send(peer.framing.eth(&EthMessage::GetCells {
                request_id,
                hashes,
                mask: DATA_CELLS,
            }));
        }
    }

    /// A `Cells` reply: the blobs rebuilt from the data cells, the whole txs admitted as
    /// fetched ones. A tx left out, a count off, or an unknown mask is the peer's fault.
    pub(super) async fn on_cells(
        &self,
        peer: &Arc<Peer>,
        request_id: u64,
        hashes: Vec<B256>,
        cells: Vec<Vec<Bytes>>,
        mask: CellMask,
    ) {
        let request = {
            let mut fetches = self.inner.cell_fetches.lock();
            match fetches.by_id.get(&request_id) {
                Some(r) if r.peer == peer.info.id => fetches.by_id.remove(&request_id),
                _ => None,
            }
        };
        let Some(request) = request else {
            tracing::debug!(peer = %short(&peer.info.id), request_id, "unsolicited Cells");
            metrics::counter!("moat_p2p_unsolicited_replies_total").increment(1);
            return;
        };
        let verdict = (|| {
            if mask != request.mask {
                return Err("Cells for another mask than asked".to_string());
            }
            let mut admit = Vec::with_capacity(hashes.len());
            let mut next = 0;
            for (hash, tx_cells) in hashes.iter().zip(&cells) {
                let Some(i) = request.bodies[next..]
                    .iter()
                    .position(|b| b.hash() == *hash)
                else {
                    return Err(format!("Cells for {hash}, not asked or out of order"));
                };
                let at = next + i;
                if at != next {
                    // A tx it announced whole and delivered the body of, then left out.
                    return Err(format!(
                        "Cells left out {}, whose cells it announced",
                        request.bodies[next].hash()
                    ));
                }
                next = at + 1;
                let body = &request.bodies[at];
                let blobs = blobs_from_data_cells(tx_cells, blob_count(body))
                    .ok_or_else(|| format!("Cells for {hash}: {} cells", tx_cells.len()))?;
                let whole = body
                    .with_blobs(blobs)
                    .ok_or_else(|| format!("Cells for {hash}: no sidecar"))?;
                admit.push((Some(*hash), TxInput::Decoded(Box::new(whole))));
            }
            if next != request.bodies.len() {
                return Err(format!(
                    "Cells left out {}, whose cells it announced",
                    request.bodies[next].hash()
                ));
            }
            Ok(admit)
        })();
        match verdict {
            Ok(admit) => {
                metrics::counter!("moat_p2p_cells_received_total")
                    .increment(cells.iter().map(Vec::len).sum::<usize>() as u64);
                self.spawn_admission(peer, admit, true).await;
            }
            Err(why) => {
                {
                    let mut f = self.inner.fetcher.lock();
                    for body in &request.bodies {
                        f.peer_fault(peer.info.id, &body.hash());
                    }
                }
                self.fault(peer, "bad cells", &why);
                self.reschedule();
            }
        }
    }

    /// Cell requests past their time: their txs go to their next announcers.
    pub(super) fn expire_cells(&self, now: Instant) {
        let late = self.inner.cell_fetches.lock().expired(now);
        self.forget_cell_requests(late, "moat_p2p_cell_timeouts_total");
    }

    /// A departed peer's cell requests: their txs go to their next announcers.
    pub(super) fn drop_cell_requests(&self, peer: &PeerId) {
        let gone = self.inner.cell_fetches.lock().of_peer(peer);
        self.forget_cell_requests(gone, "moat_p2p_cell_requests_dropped_total");
    }

    fn forget_cell_requests(&self, requests: Vec<CellRequest>, counter: &'static str) {
        if requests.is_empty() {
            return;
        }
        metrics::counter!(counter).increment(requests.len() as u64);
        {
            let mut f = self.inner.fetcher.lock();
            for r in &requests {
                for body in &r.bodies {
                    f.peer_fault(r.peer, &body.hash());
                }
            }
        }
        self.reschedule();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_cells_make_the_blobs_again_and_extension_cells_are_computed() {
        let blobs = vec![*kzg::sample_blob(1), *kzg::sample_blob(2)];
        let sidecar = BlobsBundle::build(SidecarVersion::V1, blobs.clone()).unwrap();
        let data: Vec<usize> = (0..kzg::DATA_CELLS).collect();
        let cells = cells_of(&sidecar, &data).unwrap();
        assert_eq!(cells.len(), 128);
        let back = blobs_from_data_cells(&cells, 2).unwrap();
        assert!(back.iter().zip(&blobs).all(|(a, b)| a.0[..] == b.0[..]));
        assert!(
            blobs_from_data_cells(&cells[1..], 2).is_none(),
            "a cell short"
        );
        // An extension cell is the one c-kzg computes.
        let some = cells_of(&sidecar, &[3, 100]).unwrap();
        let all = kzg::compute_cells(&blobs[0]).unwrap();
        assert_eq!(&some[0][..], &all[3][..]);
        assert_eq!(&some[1][..], &all[100][..]);
        assert!(cells_of(&sidecar, &[128]).is_none());
    }

    #[test]
    fn cell_requests_expire_and_leave_with_their_peer() {
        let mut f = CellFetches::default();
        let (a, b) = (PeerId::repeat_byte(1), PeerId::repeat_byte(2));
        let now = Instant::now();
        let one = f.start(a, vec![], now);
        let two = f.start(b, vec![], now + Duration::from_secs(3));
        assert_ne!(one, two);
        assert_eq!(f.expired(now + Duration::from_secs(4)).len(), 0);
        assert_eq!(f.expired(now + CELLS_TIMEOUT).len(), 1);
        assert_eq!(f.of_peer(&b).len(), 1);
        assert!(f.by_id.is_empty());
    }
}
