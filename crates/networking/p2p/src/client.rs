//! A minimal remote peer: dials a node, completes RLPx, Hello and Status, then sends and
//! receives eth (and, when offered, snap) messages, answering pings on its own. Tests and load tools use it to
//! play honest or hostile peers against a running node.

use crate::eth::{EthMessage, Status};
use crate::p2p::DisconnectReason;
use crate::session::{self, Incoming, LocalIdentity, Session, SessionError};
use crate::snap::SnapMessage;
use crate::{Enode, rlpx::RlpxError};
use std::time::Duration;
use tokio::net::TcpStream;

/// A connected peer of a node.
pub struct Client {
    session: Session<TcpStream>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.session.fmt(f)
    }
}

impl Client {
    /// Connects offering `versions`; `status` is sent with the negotiated version filled
    /// in. The node's Status is accepted as is (read it with [`Client::remote_status`]).
    pub async fn connect(
        enode: &Enode,
        key: secp256k1::SecretKey,
        versions: &[u32],
        status: Status,
    ) -> Result<Self, SessionError> {
        let mut local = LocalIdentity::new(key, "moat-peer", 0);
        local.eth_versions = versions.to_vec();
        Self::connect_as(enode, &local, status).await
    }

    /// As [`Client::connect`], offering snap/1 beside eth ([`Client::snap`] says whether
    /// the node took it).
    pub async fn connect_snap(
        enode: &Enode,
        key: secp256k1::SecretKey,
        versions: &[u32],
        status: Status,
    ) -> Result<Self, SessionError> {
        let mut local = LocalIdentity::new(key, "moat-peer", 0).with_snap();
        local.eth_versions = versions.to_vec();
        Self::connect_as(enode, &local, status).await
    }

    async fn connect_as(
        enode: &Enode,
        local: &LocalIdentity,
        status: Status,
    ) -> Result<Self, SessionError> {
        let session = session::connect(
            enode.addr,
            enode.id,
            local,
            |version| Status { version, ..status },
            |_, _| Ok(()),
        )
        .await?;
        Ok(Self { session })
    }

    /// As [`Client::connect`], over a TCP connection already open to the node (from a
    /// chosen local address, say).
    pub async fn connect_stream(
        stream: TcpStream,
        remote: crate::rlpx::PeerId,
        key: secp256k1::SecretKey,
        versions: &[u32],
        status: Status,
    ) -> Result<Self, SessionError> {
        let mut local = LocalIdentity::new(key, "moat-peer", 0);
        local.eth_versions = versions.to_vec();
        let session = session::connect_stream(
            stream,
            remote,
            &local,
            |version| Status { version, ..status },
            |_, _| Ok(()),
        )
        .await?;
        Ok(Self { session })
    }

    /// The eth version negotiated.
    pub fn version(&self) -> u32 {
        self.session.framing.version
    }

    /// The Status the peer sent.
    pub fn remote_status(&self) -> &Status {
        &self.session.status
    }

    /// Sends one eth message.
    pub async fn send(&mut self, msg: &EthMessage) -> Result<(), RlpxError> {
        let frame = self.session.framing.eth(msg);
        self.session.writer.send(&frame).await
    }

    /// The session's framing (eth version, compression), for frames built ahead of time
    /// ([`Client::send_framed`]).
    pub fn framing(&self) -> crate::session::Framing {
        self.session.framing
    }

    /// Sends a frame already built for this session's framing (e.g. by
    /// [`crate::p2p::frame_with_tail`]).
    pub async fn send_framed(&mut self, frame: &[u8]) -> Result<(), RlpxError> {
        self.session.writer.send(frame).await
    }

    /// Calls `pause` between the 64 KB steps of every large frame's encryption and
    /// decryption ([`crate::rlpx::RlpxWriter::set_pause`]): a client that stands for a
    /// remote machine gives the core away there.
    pub fn set_pause(&mut self, pause: fn()) {
        self.session.reader.set_pause(pause);
        self.session.writer.set_pause(pause);
    }

    /// Whether snap/1 was negotiated.
    pub fn snap(&self) -> bool {
        self.session.framing.snap
    }

    /// Sends a snap message (the session must have negotiated snap).
    pub async fn send_snap(&mut self, msg: &SnapMessage) -> Result<(), RlpxError> {
        let frame = self.session.framing.snap(msg);
        self.session.writer.send(&frame).await
    }

    /// Sends Disconnect with `reason`, ignoring a send failure.
    pub async fn disconnect(&mut self, reason: DisconnectReason) {
        let frame = self.session.framing.disconnect(reason);
        let _ = self.session.writer.send(&frame).await;
    }

    /// The next eth message or Disconnect within `timeout`; pings are answered and
    /// pongs skipped on the way. `Ok(None)` when the time runs out.
    pub async fn recv(&mut self, timeout: Duration) -> Result<Option<Incoming>, SessionError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let payload = match tokio::time::timeout_at(deadline, self.session.reader.recv()).await
            {
                Err(_) => return Ok(None),
                Ok(r) => r?,
            };
            match self.session.framing.decode(&payload)? {
                Incoming::Ping => {
                    let pong = self.session.framing.pong();
                    self.session.writer.send(&pong).await?;
                }
                Incoming::Pong => {}
                other => return Ok(Some(other)),
            }
        }
    }

    /// Waits for the first eth message `pick` accepts, skipping others; `None` on
    /// timeout, disconnect or error.
    pub async fn wait_for<T>(
        &mut self,
        timeout: Duration,
        mut pick: impl FnMut(&EthMessage) -> Option<T>,
    ) -> Option<T> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.recv(left).await {
                Ok(Some(Incoming::Eth(m))) => {
                    if let Some(t) = pick(&m) {
                        return Some(t);
                    }
                }
                _ => return None,
            }
        }
    }

    /// Reads until the node disconnects (returns its reason) or `timeout` passes
    /// (`None`). An abrupt close counts as a disconnect without reason.
    pub async fn wait_disconnect(&mut self, timeout: Duration) -> Option<Option<DisconnectReason>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.recv(left).await {
                Ok(Some(Incoming::Disconnect(r))) => return Some(r),
                Ok(Some(_)) => continue,
                Ok(None) => return None,
                Err(_) => return Some(None),
            }
        }
    }
}
