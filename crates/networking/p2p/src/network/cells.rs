//! eth/72's cells (EIP-8070, the sparse blobpool): blob data as cells, both ways.
//!
//! On eth/72 a blob tx travels in `PooledTransactions` without its blobs; the blobs
//! travel as cells (`GetCells`/`Cells`, 2,048 bytes each, no proofs: those are in the
//! sidecar). This node is a provider of the blob txs it holds whole and a sampler of
//! those it holds sampled (the sampler module draws which):
//! - **out**: blob txs are announced to eth/72 peers with the cells held ([`ALL_CELLS`],
//!   or a sampled tx's custody) and the size without blobs, served without blobs, and
//!   `GetCells` is answered from the blobs: cells 0..64 are the blob's own bytes,
//!   64..128 are computed (c-kzg, charged to the asking peer's admission budget); a
//!   sampled tx answers masks within its custody only; at most [`MAX_CELLS_SERVED`]
//!   cells a reply, checked before each tx (go-ethereum's rule), only txs whose cells
//!   are all there;
//! - **in**: a blob tx body from an eth/72 peer gets the cheap checks that do not need
//!   the blobs (`validate_without_blobs`), then the same peer is asked for its data
//!   cells ([`DATA_CELLS`]) or, for a sampled tx, its custody's cells — only peers that
//!   announced them are asked for the tx at all. Data cells make the blobs again;
//!   custody cells make a sampled sidecar. The tx then goes through admission as a
//!   fetched tx, so KZG (blob proofs, or the sampled cells' proofs) runs once per unique
//!   sidecar whoever sends it (the pool's dedup) and a cell that fails its proof fails
//!   the sidecar: the peer is dropped, as for any bad sidecar.
//!
//! A `Cells` reply bigger than any reply is refused before decoding (`MAX_CELLS_BODY`),
//! and its reading is charged to the peer as a `PooledTransactions` reply's is; one whose
//! counts differ from what was asked, or that leaves out a tx the peer said it holds, is
//! a fault; one answering no outstanding request costs reputation. A request unanswered
//! within [`CELLS_TIMEOUT`] sends its txs to their next announcers (the fetcher), without
//! penalty. Bounds: a body without blobs is at most [`max_body_without_blobs`] (a bigger
//! one is a fault, a bigger announced size is not fetched); bodies waiting for cells
//! hold at most 4 MiB a peer and 64 MiB in all (past that, they go to other announcers);
//! a peer with more than 8 frames unread gets empty `Cells` answers.

use super::{Network, Peer, short};
use crate::eth::{ALL_CELLS, CellMask, DATA_CELLS, EthMessage, mask_covers, mask_indices};
use crate::fetcher::Meta;
use crate::rlpx::PeerId;
use alloy_primitives::{B256, Bytes};
use moat_common::transaction::mask_count;
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
/// Frames waiting in a peer's queue past which its `GetCells` is answered empty.
const MAX_FRAMES_WAITING: usize = 8;
/// Reputation a `Cells` reply to no outstanding request costs.
const UNSOLICITED_CELLS_PENALTY: i64 = 10;
/// How long a peer has to answer a `GetCells`.
pub(crate) const CELLS_TIMEOUT: Duration = Duration::from_secs(5);

/// The cells mask this node announces its blob txs with on eth/72: all of them.
pub(crate) const OUR_MASK: CellMask = ALL_CELLS;
/// Bytes of bodies one peer may have waiting for their cells; past it, its further
/// bodies go to their next announcers.
const MAX_PARKED_PER_PEER: usize = 4 << 20;
/// Bytes of bodies waiting for cells, all peers together.
const MAX_PARKED: usize = 64 << 20;

/// The most bytes a blob tx body without its blobs may take: a tx of the largest size
/// the pool takes, and `max_blobs` blobs' commitment and 128 cell proofs (49 bytes each
/// with their RLP headers), with room for the headers. A bigger body is a fault, and a
/// bigger announced one is not fetched.
pub(crate) fn max_body_without_blobs(max_blobs: u64) -> usize {
    moat_common::transaction::MAX_TX_SIZE + max_blobs as usize * 129 * 49 + 1024
}

/// Blob tx bodies waiting for their cells from the peer that sent them.
#[derive(Debug)]
pub(super) struct CellRequest {
    peer: PeerId,
    bodies: Vec<PooledTransaction>,
    /// The bodies' bytes (held until the cells come).
    bytes: usize,
    mask: CellMask,
    sent: Instant,
}

/// The `GetCells` requests in flight, by request id.
#[derive(Debug, Default)]
pub(super) struct CellFetches {
    by_id: HashMap<u64, CellRequest, foldhash::fast::RandomState>,
    next_id: u64,
    /// Bytes of the bodies waiting, in all.
    bytes: usize,
}

impl CellFetches {
    /// A request for `bodies`' cells; `Err(bodies)` when they would pass the peer's or
    /// the total bytes of bodies waiting.
    fn start(
        &mut self,
        peer: PeerId,
        bodies: Vec<PooledTransaction>,
        mask: CellMask,
        now: Instant,
    ) -> Result<u64, Vec<PooledTransaction>> {
        let bytes: usize = bodies.iter().map(PooledTransaction::size).sum();
        let of_peer: usize = self
            .by_id
            .values()
            .filter(|r| r.peer == peer)
            .map(|r| r.bytes)
            .sum();
        if of_peer + bytes > MAX_PARKED_PER_PEER || self.bytes + bytes > MAX_PARKED {
            return Err(bodies);
        }
        self.next_id += 1;
        self.bytes += bytes;
        self.by_id.insert(
            self.next_id,
            CellRequest {
                peer,
                bodies,
                bytes,
                mask,
                sent: now,
            },
        );
        Ok(self.next_id)
    }

    /// The request `id` if `peer` is the one asked, taken out.
    fn take(&mut self, id: u64, peer: &PeerId) -> Option<CellRequest> {
        match self.by_id.get(&id) {
            Some(r) if r.peer == *peer => {
                let r = self.by_id.remove(&id)?;
                self.bytes -= r.bytes;
                Some(r)
            }
            _ => None,
        }
    }

    /// Requests older than [`CELLS_TIMEOUT`], taken out.
    fn expired(&mut self, now: Instant) -> Vec<CellRequest> {
        let late: Vec<u64> = self
            .by_id
            .iter()
            .filter(|(_, r)| now.saturating_duration_since(r.sent) >= CELLS_TIMEOUT)
            .map(|(id, _)| *id)
            .collect();
        late.iter().filter_map(|id| self.remove(*id)).collect()
    }

    fn remove(&mut self, id: u64) -> Option<CellRequest> {
        let r = self.by_id.remove(&id)?;
        self.bytes -= r.bytes;
        Some(r)
    }

    /// A departed peer's requests, taken out.
    fn of_peer(&mut self, peer: &PeerId) -> Vec<CellRequest> {
        let ids: Vec<u64> = self
            .by_id
            .iter()
            .filter(|(_, r)| r.peer == *peer)
            .map(|(id, _)| *id)
            .collect();
        ids.iter().filter_map(|id| self.remove(*id)).collect()
    }
}

/// How many blobs a blob tx body carries (its versioned hashes).
fn blob_count(tx: &PooledTransaction) -> usize {
    tx.tx().tx().blob_versioned_hashes().len()
}

/// The cells at `indices` of each blob of `sidecar`, blob by blob; `None` if a cell
/// could not be computed.
fn cells_of(sidecar: &BlobsBundle, indices: &[usize]) -> Option<Vec<Bytes>> {
    let blobs = sidecar.commitments.len();
    let mut out = Vec::with_capacity(blobs * indices.len());
    for blob in 0..blobs {
        for cell in sidecar.cells(blob, indices)? {
            out.push(Bytes::copy_from_slice(&cell));
        }
    }
    Some(out)
}

/// `count` cells as they came (2,048 bytes each), or `None` for another count or size.
fn sampled_cells(cells: &[Bytes], count: usize) -> Option<Vec<kzg::Cell>> {
    if cells.len() != count {
        return None;
    }
    cells
        .iter()
        .map(|c| <kzg::Cell>::try_from(&c[..]).ok())
        .collect()
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
        // A peer that does not read what it asked for gets no more: each reply is up to
        // 3.7 MB that its queue would hold.
        let waiting = peer.out.max_capacity() - peer.out.capacity();
        let indices = if waiting > MAX_FRAMES_WAITING {
            metrics::counter!("moat_p2p_cells_refused_backlog_total").increment(1);
            Vec::new()
        } else {
            mask_indices(&mask)
        };
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
            // A sampled tx serves masks within its custody only.
            if sidecar.version != SidecarVersion::V1 || !mask_covers(&sidecar.held_cells(), &mask) {
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

    /// Asks `peer` for the cells of blob tx bodies it delivered without blobs: the data
    /// cells of those fetched whole, the custody's of those sampled (the sampler's
    /// plan), one request per mask and at most [`MAX_CELLS_ASKED`] cells a request.
    pub(super) fn fetch_cells(&self, peer: &Peer, bodies: Vec<PooledTransaction>) {
        let now = Instant::now();
        let mut by_mask: Vec<(CellMask, Vec<PooledTransaction>)> = Vec::new();
        {
            let sampler = self.inner.sampler.lock();
            for body in bodies {
                let mask = sampler.mask_for(&body.hash());
                match by_mask.iter_mut().find(|(m, _)| *m == mask) {
                    Some((_, group)) => group.push(body),
                    None => by_mask.push((mask, vec![body])),
                }
            }
        }
        let mut requests = Vec::new();
        for (mask, bodies) in by_mask {
            let per_blob = mask_count(&mask);
            let mut batch: Vec<PooledTransaction> = Vec::new();
            let mut cells = 0;
            for body in bodies {
                let n = blob_count(&body) * per_blob;
                if !batch.is_empty() && cells + n > MAX_CELLS_ASKED {
                    requests.push((mask, std::mem::take(&mut batch)));
                    cells = 0;
                }
                cells += n;
                batch.push(body);
            }
            if !batch.is_empty() {
                requests.push((mask, batch));
            }
        }
        for (mask, bodies) in requests {
            let hashes: Vec<B256> = bodies.iter().map(|b| b.hash()).collect();
            let started = self
                .inner
                .cell_fetches
                .lock()
                .start(peer.info.id, bodies, mask, now);
            let request_id = match started {
                Ok(id) => id,
                Err(bodies) => {
                    // Too much waiting already: these go to their next announcers.
                    metrics::counter!("moat_p2p_cell_requests_refused_total").increment(1);
                    let mut f = self.inner.fetcher.lock();
                    for b in &bodies {
                        f.peer_fault(peer.info.id, &b.hash());
                    }
                    continue;
                }
            };
            metrics::counter!("moat_p2p_cell_requests_total").increment(1);
            if mask != DATA_CELLS {
                metrics::counter!("moat_p2p_blob_txs_sampled_total").increment(hashes.len() as u64);
            }
            peer.send(peer.framing.eth(&EthMessage::GetCells {
                request_id,
                hashes,
                mask,
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
        let request = self
            .inner
            .cell_fetches
            .lock()
            .take(request_id, &peer.info.id);
        let Some(request) = request else {
            // Late (after its timeout) or asked for by no one: megabytes read for nothing.
            tracing::debug!(peer = %short(&peer.info.id), request_id, "unsolicited Cells");
            metrics::counter!("moat_p2p_unsolicited_replies_total").increment(1);
            self.penalize(peer, UNSOLICITED_CELLS_PENALTY, "unsolicited Cells");
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
                let bad_count = || format!("Cells for {hash}: {} cells", tx_cells.len());
                let tx = if request.mask == DATA_CELLS {
                    let blobs =
                        blobs_from_data_cells(tx_cells, blob_count(body)).ok_or_else(bad_count)?;
                    body.with_blobs(blobs)
                } else {
                    // Sampled: the custody's cells, checked against their cell proofs by
                    // admission (a bad one fails the sidecar, the peer's fault).
                    let cells = sampled_cells(tx_cells, blob_count(body) * mask_count(&mask))
                        .ok_or_else(bad_count)?;
                    body.with_sampled_cells(mask, cells)
                };
                let tx = tx.ok_or_else(|| format!("Cells for {hash}: no sidecar"))?;
                admit.push((Some(*hash), TxInput::Decoded(Box::new(tx))));
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

    /// Released announcements of peers still connected (one may leave meanwhile: the
    /// fetcher must not track it again).
    pub(super) fn still_here<T>(
        &self,
        released: Vec<(T, Vec<(PeerId, Meta)>)>,
    ) -> Vec<(T, Vec<(PeerId, Meta)>)> {
        if released.is_empty() {
            return released;
        }
        let peers = self.inner.peers.read();
        released
            .into_iter()
            .map(|(h, from)| {
                (
                    h,
                    from.into_iter()
                        .filter(|(p, _)| peers.contains_key(p))
                        .collect(),
                )
            })
            .collect()
    }

    /// The custody a sampled blob tx is fetched with (EIP-8070: the consensus client's
    /// custody columns): cells asked for from now on. With 64 cells or more, the txs
    /// waiting for their providers are fetched whole at once.
    pub fn set_blob_custody(&self, custody: CellMask) {
        let now = Instant::now();
        let released = self.inner.sampler.lock().set_custody(custody, now);
        let released = self.still_here(released);
        if released.is_empty() {
            return;
        }
        let requests = {
            let mut f = self.inner.fetcher.lock();
            Self::announce_released_in(&mut f, released);
            f.schedule(now)
        };
        self.send_requests(requests);
    }

    /// Hands the sampler's released announcements (after [`Self::still_here`]) to the
    /// fetcher; returns how many it dropped over its caps.
    pub(super) fn announce_released_in(
        f: &mut crate::fetcher::Fetcher,
        released: Vec<(B256, Vec<(PeerId, Meta)>)>,
    ) -> usize {
        let mut dropped = 0;
        for (hash, from) in released {
            for (p, meta) in from {
                dropped += f.announce(p, [(hash, meta)]);
            }
        }
        dropped
    }

    /// Cell requests past their time, taken out (the caller hands them to
    /// [`Self::forget_cell_requests_in`] under the fetcher's lock).
    pub(super) fn expired_cell_requests(&self, now: Instant) -> Vec<CellRequest> {
        let late = self.inner.cell_fetches.lock().expired(now);
        if !late.is_empty() {
            metrics::counter!("moat_p2p_cell_timeouts_total").increment(late.len() as u64);
        }
        late
    }

    /// A departed peer's cell requests, taken out (for [`Self::forget_cell_requests_in`]).
    pub(super) fn take_cell_requests(&self, peer: &PeerId) -> Vec<CellRequest> {
        self.inner.cell_fetches.lock().of_peer(peer)
    }

    /// The txs of cell requests that will not be answered go to their next announcers.
    pub(super) fn forget_cell_requests_in(
        f: &mut crate::fetcher::Fetcher,
        requests: Vec<CellRequest>,
    ) {
        for r in &requests {
            for body in &r.bodies {
                f.peer_fault(r.peer, &body.hash());
            }
        }
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
    fn bodies_waiting_for_cells_are_bounded_per_peer() {
        let signer = moat_crypto::secp::Signer::from_seed(3);
        let body = moat_common::testing::sample_blob_tx(SidecarVersion::V1, 6, 0, &signer)
            .with_blobs(Vec::new())
            .unwrap();
        assert!(body.size() <= max_body_without_blobs(6));
        let mut f = CellFetches::default();
        let (a, b) = (PeerId::repeat_byte(1), PeerId::repeat_byte(2));
        let now = Instant::now();
        let mut taken = 0;
        while f.start(a, vec![body.clone()], DATA_CELLS, now).is_ok() {
            taken += 1;
        }
        assert_eq!(taken, MAX_PARKED_PER_PEER / body.size());
        // Another peer still has its share; answering frees the first one's.
        assert!(f.start(b, vec![body.clone()], DATA_CELLS, now).is_ok());
        assert!(f.take(1, &b).is_none(), "request 1 is a's");
        assert!(f.take(1, &a).is_some());
        assert!(f.start(a, vec![body.clone()], DATA_CELLS, now).is_ok());
    }

    #[test]
    fn cell_requests_expire_and_leave_with_their_peer() {
        let mut f = CellFetches::default();
        let (a, b) = (PeerId::repeat_byte(1), PeerId::repeat_byte(2));
        let now = Instant::now();
        let one = f.start(a, vec![], DATA_CELLS, now).unwrap();
        let two = f
            .start(b, vec![], DATA_CELLS, now + Duration::from_secs(3))
            .unwrap();
        assert_ne!(one, two);
        assert_eq!(f.expired(now + Duration::from_secs(4)).len(), 0);
        assert_eq!(f.expired(now + CELLS_TIMEOUT).len(), 1);
        assert_eq!(f.of_peer(&b).len(), 1);
        assert!(f.by_id.is_empty());
    }
}
