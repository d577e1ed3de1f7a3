//! Where blocks come from: the peers of the p2p network, behind a trait so the syncer
//! can be driven by something else in tests.

use moat_common::block::Block;
use moat_p2p::rlpx::PeerId;
use moat_p2p::snap::SnapMessage;
use moat_p2p::{HeadersRequest, Network, RequestError, SealedHeader, SyncPeer};
use std::future::Future;

/// Peers to ask for headers and bodies. Answers are already checked for shape (see
/// `moat_p2p::requests`): headers start where asked and chain, bodies match their
/// headers' roots; a peer that broke those rules has been dropped by the source.
pub trait BlockSource: Send + Sync + 'static {
    /// The peers that may be asked now.
    fn peers(&self) -> Vec<SyncPeer>;

    /// Asks `peer` for the headers `req` names (`GetBlockHeaders`); they come checked to start
    /// where asked and chain by hash.
    fn headers(
        &self,
        peer: PeerId,
        req: HeadersRequest,
    ) -> impl Future<Output = Result<Vec<SealedHeader>, RequestError>> + Send;

    /// The blocks of those of `headers` whose bodies the peer sent.
    fn bodies(
        &self,
        peer: PeerId,
        headers: Vec<SealedHeader>,
    ) -> impl Future<Output = Result<Vec<Block>, RequestError>> + Send;

    /// The peers that speak snap/1 (none unless the source serves snap requests).
    fn snap_peers(&self) -> Vec<PeerId> {
        Vec::new()
    }

    /// Sends a snap/1 request (its request id is filled in) and waits for the answer,
    /// which is of the kind asked but not yet checked against any root.
    fn snap_request(
        &self,
        _peer: PeerId,
        _msg: SnapMessage,
    ) -> impl Future<Output = Result<SnapMessage, RequestError>> + Send {
        async { Err(RequestError::NotConnected) }
    }

    /// A snap answer that failed its proof: the peer is dropped.
    fn report_snap_fault(&self, _peer: &PeerId, _why: &str) {}
}

impl BlockSource for Network {
    fn peers(&self) -> Vec<SyncPeer> {
        self.sync_peers()
    }

    async fn headers(
        &self,
        peer: PeerId,
        req: HeadersRequest,
    ) -> Result<Vec<SealedHeader>, RequestError> {
        self.get_headers(&peer, req).await
    }

    async fn bodies(
        &self,
        peer: PeerId,
        headers: Vec<SealedHeader>,
    ) -> Result<Vec<Block>, RequestError> {
        self.get_bodies(&peer, &headers).await
    }

    fn snap_peers(&self) -> Vec<PeerId> {
        Network::snap_peers(self)
    }

    async fn snap_request(
        &self,
        peer: PeerId,
        msg: SnapMessage,
    ) -> Result<SnapMessage, RequestError> {
        Network::snap_request(self, &peer, msg).await
    }

    fn report_snap_fault(&self, peer: &PeerId, why: &str) {
        Network::report_snap_fault(self, peer, why)
    }
}
