//! Chain requests to peers for the syncer: headers and bodies asked of one peer, each
//! bounded in flight and in time, and the answers handed to the request that waits.

use crate::eth::EthMessage;
use crate::requests::{
    self, HeadersRequest, MAX_BODIES, MAX_HEADERS, MAX_IN_FLIGHT, RequestError, SealedHeader,
    SyncPeer,
};
use crate::rlpx::PeerId;
use alloy_primitives::{B256, Bytes};
use moat_common::block::Block;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::{OwnedSemaphorePermit, oneshot};

use super::{Network, Peer, short};

/// Reputation a peer loses for a chain request it leaves unanswered.
const TIMEOUT_PENALTY: i64 = 10;

/// Which answer a pending request waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReplyKind {
    Headers,
    Bodies,
    /// A snap/1 answer (see `snap_request`).
    Snap,
}

/// What a pending request is answered with.
pub(super) enum Reply {
    Items(Vec<Bytes>),
    Snap(crate::snap::SnapMessage),
}

/// A chain request waiting for its answer.
pub(super) struct Pending {
    pub(super) kind: ReplyKind,
    pub(super) reply: oneshot::Sender<Reply>,
}

/// Removes a pending request when its caller stops waiting.
pub(super) struct PendingEntry {
    pub(super) peer: Arc<Peer>,
    pub(super) id: u64,
}

impl Drop for PendingEntry {
    fn drop(&mut self) {
        self.peer.pending.lock().remove(&self.id);
    }
}

/// One of a peer's request slots, taken, with its pending entry under a fresh id: the
/// answer comes on `rx`; dropping it frees the slot and the entry.
pub(super) struct Slot {
    pub(super) rx: oneshot::Receiver<Reply>,
    entry: PendingEntry,
    _permit: OwnedSemaphorePermit,
}

impl Slot {
    pub(super) fn peer(&self) -> &Arc<Peer> {
        &self.entry.peer
    }

    pub(super) fn id(&self) -> u64 {
        self.entry.id
    }
}

/// Chain requests to peers, for the syncer (see [`crate::requests`]).
impl Network {
    /// The connected peers with what they say of their chains, for picking whom to ask.
    pub fn sync_peers(&self) -> Vec<SyncPeer> {
        self.inner
            .peers
            .read()
            .values()
            .map(|p| {
                let status = *p.chain_status.lock();
                SyncPeer {
                    id: p.info.id,
                    eth_version: p.info.eth_version,
                    head: status.head,
                    range: status.range,
                    in_flight: MAX_IN_FLIGHT - p.request_slots.available_permits(),
                    reputation: p.reputation.load(Ordering::Relaxed),
                }
            })
            .collect()
    }

    /// Asks `peer` for headers; the answer is checked against the request
    /// ([`requests::check_headers`]) and a peer that breaks the rules is dropped. An
    /// empty answer means the peer does not have them.
    pub async fn get_headers(
        &self,
        peer: &PeerId,
        req: HeadersRequest,
    ) -> Result<Vec<SealedHeader>, RequestError> {
        if req.amount > MAX_HEADERS {
            return Err(RequestError::TooLarge(req.amount as usize));
        }
        let (p, raw) = self
            .request(peer, ReplyKind::Headers, |request_id| {
                EthMessage::GetBlockHeaders {
                    request_id,
                    origin: req.origin,
                    amount: req.amount,
                    skip: req.skip,
                    reverse: req.reverse,
                }
            })
            .await?;
        requests::check_headers(&req, raw).map_err(|why| {
            self.fault(&p, "bad block headers", &why);
            RequestError::BadAnswer(why)
        })
    }

    /// Asks `peer` for the bodies of `headers` and returns the blocks it sent, each
    /// checked against its header's roots ([`requests::check_bodies`]); a peer may leave
    /// some out, one that sends a body no header commits to is dropped.
    pub async fn get_bodies(
        &self,
        peer: &PeerId,
        headers: &[SealedHeader],
    ) -> Result<Vec<Block>, RequestError> {
        if headers.len() > MAX_BODIES {
            return Err(RequestError::TooLarge(headers.len()));
        }
        let hashes: Vec<B256> = headers.iter().map(|h| h.hash).collect();
        let (p, raw) = self
            .request(peer, ReplyKind::Bodies, |request_id| {
                EthMessage::GetBlockBodies { request_id, hashes }
            })
            .await?;
        requests::check_bodies(headers, raw).map_err(|why| {
            self.fault(&p, "bad block bodies", &why);
            RequestError::BadAnswer(why)
        })
    }

    /// A fault the caller found in what `peer` sent (drops the peer).
    pub fn report_fault(&self, peer: &PeerId, detail: &str) {
        let p = self.inner.peers.read().get(peer).cloned();
        if let Some(p) = p {
            self.fault(&p, "bad chain data", detail);
        }
    }

    /// Takes one of `peer`'s request slots (bounded in flight) and registers an answer
    /// of `kind` pending under a fresh request id.
    pub(super) fn take_slot(&self, peer: &PeerId, kind: ReplyKind) -> Result<Slot, RequestError> {
        let p = self
            .inner
            .peers
            .read()
            .get(peer)
            .cloned()
            .ok_or(RequestError::NotConnected)?;
        let permit = p
            .request_slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| RequestError::Busy)?;
        let id = self.inner.next_request.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        p.pending.lock().insert(id, Pending { kind, reply: tx });
        // Whatever ends the wait (answer, timeout, the caller giving up), the entry goes.
        Ok(Slot {
            rx,
            entry: PendingEntry { peer: p, id },
            _permit: permit,
        })
    }

    /// Sends one request and waits for its answer (bounded per peer and in time).
    pub(super) async fn request(
        &self,
        peer: &PeerId,
        kind: ReplyKind,
        make: impl FnOnce(u64) -> EthMessage,
    ) -> Result<(Arc<Peer>, Vec<Bytes>), RequestError> {
        let mut slot = self.take_slot(peer, kind)?;
        let p = slot.peer().clone();
        let msg = make(slot.id());
        metrics::counter!("moat_p2p_chain_requests_total", "msg" => msg.name()).increment(1);
        if !p.send(p.framing.eth(&msg)) {
            return Err(RequestError::Busy);
        }
        match tokio::time::timeout(self.inner.cfg.request_timeout, &mut slot.rx).await {
            Ok(Ok(Reply::Items(answer))) => Ok((p, answer)),
            Ok(Ok(Reply::Snap(_))) => Err(RequestError::BadAnswer("a snap answer".into())),
            Ok(Err(_)) => Err(RequestError::Disconnected),
            Err(_) => {
                metrics::counter!("moat_p2p_chain_request_timeouts_total").increment(1);
                self.penalize(&p, TIMEOUT_PENALTY, "chain request timed out");
                Err(RequestError::Timeout)
            }
        }
    }

    /// Hands an answer to the request waiting for it. An answer to nothing (late, after
    /// its timeout, or never asked) is dropped; one of the wrong kind is a fault.
    pub(super) fn on_reply(
        &self,
        peer: &Arc<Peer>,
        kind: ReplyKind,
        request_id: u64,
        items: Reply,
    ) {
        let pending = peer.pending.lock().remove(&request_id);
        match pending {
            Some(p) if p.kind == kind => {
                let _ = p.reply.send(items);
            }
            Some(_) => self.fault(
                peer,
                "delivery mismatch",
                &format!("answer of the wrong kind to request {request_id}"),
            ),
            None => {
                tracing::debug!(peer = %short(&peer.info.id), request_id, ?kind, "unsolicited chain answer");
                metrics::counter!("moat_p2p_unsolicited_replies_total").increment(1);
            }
        }
    }
}
