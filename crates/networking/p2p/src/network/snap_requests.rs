//! snap/1 requests to peers, for snap sync: one request asked of one peer, sharing the
//! peer's request slots and time limit with the chain requests, its answer handed back
//! of the kind asked (what it proves is for the caller to check).

use super::Network;
use super::chain::{Reply, ReplyKind};
use crate::requests::RequestError;
use crate::rlpx::PeerId;
use crate::snap::SnapMessage;

/// Reputation a snap request that times out costs the peer (a chain request's cost).
const SNAP_TIMEOUT_PENALTY: i64 = 10;

impl Network {
    /// The connected peers that negotiated snap/1.
    pub fn snap_peers(&self) -> Vec<PeerId> {
        self.inner
            .peers
            .read()
            .values()
            .filter(|p| p.framing.snap)
            .map(|p| p.info.id)
            .collect()
    }

    /// Sends snap request `msg` (its request id replaced by a fresh one) to `peer` and
    /// waits for the answer. An answer of the wrong kind is a fault (the peer is dropped).
    pub async fn snap_request(
        &self,
        peer: &PeerId,
        msg: SnapMessage,
    ) -> Result<SnapMessage, RequestError> {
        if msg.answer_id().is_some() {
            return Err(RequestError::NotConnected);
        }
        let mut slot = self.take_slot(peer, ReplyKind::Snap)?;
        let p = slot.peer().clone();
        if !p.framing.snap {
            return Err(RequestError::NotConnected);
        }
        let msg = msg.with_request_id(slot.id());
        metrics::counter!("moat_p2p_snap_requests_total", "msg" => msg.name()).increment(1);
        if !p.send(p.framing.snap(&msg)) {
            return Err(RequestError::Busy);
        }
        match tokio::time::timeout(self.inner.cfg.request_timeout, &mut slot.rx).await {
            Ok(Ok(Reply::Snap(answer))) if msg.answered_by(&answer) => Ok(answer),
            Ok(Ok(_)) => {
                let why = format!("wrong answer to {}", msg.name());
                self.fault(&p, "bad snap answer", &why);
                Err(RequestError::BadAnswer(why))
            }
            Ok(Err(_)) => Err(RequestError::Disconnected),
            Err(_) => {
                metrics::counter!("moat_p2p_snap_request_timeouts_total").increment(1);
                // As a chain request's: a peer that keeps not answering is dropped once
                // its reputation reaches the floor.
                self.penalize(&p, SNAP_TIMEOUT_PENALTY, "snap request timed out");
                Err(RequestError::Timeout)
            }
        }
    }

    /// A snap answer whose proof failed: the peer is dropped.
    pub fn report_snap_fault(&self, peer: &PeerId, detail: &str) {
        let p = self.inner.peers.read().get(peer).cloned();
        if let Some(p) = p {
            self.fault(&p, "bad snap proof", detail);
        }
    }
}
