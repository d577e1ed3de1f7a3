//! One peer connection above RLPx: the Hello exchange, eth version negotiation (and
//! snap/1 when both sides offer it), the Status handshake, and the framing of every
//! later message.
//!
//! Used by the node for its peers and by tests and tools that play a remote peer, so the
//! handshake lives here in one place and both sides speak it the same way.

use crate::eth::{self, EthDecodeError, EthMessage, Status};
use crate::p2p::{self, Capability, DisconnectReason, FrameError, Hello};
use crate::rlpx::Split;
use crate::rlpx::{PeerId, RlpxError, RlpxReader, RlpxStream, RlpxWriter};
use crate::snap::{self, SnapDecodeError, SnapMessage};
use alloy_primitives::Bytes;
use alloy_rlp::Encodable;
use moat_common::config::{ForkFilter, ForkIdError};
use std::time::Duration;

/// How long each handshake step may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a session could not be set up or went on.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The RLPx transport failed (handshake, MAC or I/O).
    #[error(transparent)]
    Rlpx(#[from] RlpxError),
    /// A handshake step took longer than [`HANDSHAKE_TIMEOUT`] (the step named).
    #[error("timed out during {0}")]
    Timeout(&'static str),
    /// The peer sent Disconnect (its reason, if it gave a known one).
    #[error("peer disconnected: {}", .0.map_or("unknown reason", |r| r.as_str()))]
    Disconnected(Option<DisconnectReason>),
    /// A frame's id or compression is malformed.
    #[error("malformed message: {0}")]
    Frame(#[from] FrameError),
    /// The peer's Hello does not decode.
    #[error("malformed hello: {0}")]
    Hello(moat_common::rlp::RlpError),
    /// The Hello's node id is not the one of the RLPx handshake (handshake id, Hello id).
    #[error("hello names node {}, the handshake was with {}", .0.1, .0.0)]
    WrongIdentity(Box<(PeerId, PeerId)>),
    /// The peer offers no eth version we speak (its capabilities listed).
    #[error("no eth version in common (peer offers {0})")]
    NoCommonVersion(String),
    /// An eth message does not decode.
    #[error(transparent)]
    Eth(#[from] EthDecodeError),
    /// A snap message does not decode.
    #[error(transparent)]
    Snap(#[from] SnapDecodeError),
    /// A message arrived where another was due.
    #[error("expected {expected}, got message {found:#x}")]
    Unexpected {
        /// What was due.
        expected: &'static str,
        /// The message id that came instead.
        found: u64,
    },
    /// The peer's Status is refused.
    #[error("status: {0}")]
    Status(#[from] StatusError),
    /// A message id beyond every capability negotiated.
    #[error("message id {0:#x} is outside every shared capability")]
    UnknownCapability(u64),
}

impl SessionError {
    /// The reason to send the peer when closing over this error.
    pub fn disconnect_reason(&self) -> DisconnectReason {
        match self {
            SessionError::Rlpx(_) => DisconnectReason::TcpError,
            SessionError::Timeout(_) => DisconnectReason::Timeout,
            SessionError::Disconnected(_) => DisconnectReason::Requested,
            SessionError::WrongIdentity(_) => DisconnectReason::UnexpectedIdentity,
            SessionError::NoCommonVersion(_) => DisconnectReason::UselessPeer,
            SessionError::Hello(_) | SessionError::Unexpected { .. } => {
                DisconnectReason::ProtocolBreach
            }
            SessionError::Frame(_)
            | SessionError::Eth(_)
            | SessionError::Snap(_)
            | SessionError::Status(_)
            | SessionError::UnknownCapability(_) => DisconnectReason::SubprotocolError,
        }
    }
}

/// Why a peer's Status is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatusError {
    /// The peer's Status names another eth version than the one negotiated.
    #[error("protocol version {found}, negotiated {expected}")]
    Version {
        /// The version negotiated in Hello.
        expected: u32,
        /// The version in the peer's Status.
        found: u32,
    },
    /// The peer is on another network id.
    #[error("network id {found}, ours {expected}")]
    NetworkId {
        /// Our network id.
        expected: u64,
        /// The peer's network id.
        found: u64,
    },
    /// The peer's chain has another genesis block.
    #[error("genesis {found}, ours {expected}")]
    Genesis {
        /// Our genesis hash.
        expected: alloy_primitives::B256,
        /// The peer's genesis hash.
        found: alloy_primitives::B256,
    },
    /// The peer's EIP-2124 fork id is incompatible with our chain.
    #[error("fork id: {0}")]
    ForkId(ForkIdError),
    /// eth/69+: the served range is empty (`earliest` above `latest`).
    #[error("invalid block range: earliest {earliest} > latest {latest}")]
    BlockRange {
        /// The oldest block the peer says it serves.
        earliest: u64,
        /// The peer's head block number.
        latest: u64,
    },
}

/// Checks a peer's Status against ours.
pub fn check_status(
    ours: &Status,
    theirs: &Status,
    filter: &ForkFilter,
    head_number: u64,
    head_timestamp: u64,
) -> Result<(), StatusError> {
    if theirs.version != ours.version {
        return Err(StatusError::Version {
            expected: ours.version,
            found: theirs.version,
        });
    }
    if theirs.network_id != ours.network_id {
        return Err(StatusError::NetworkId {
            expected: ours.network_id,
            found: theirs.network_id,
        });
    }
    if theirs.genesis != ours.genesis {
        return Err(StatusError::Genesis {
            expected: ours.genesis,
            found: theirs.genesis,
        });
    }
    if ours.version >= eth::ETH69 && theirs.earliest > theirs.latest {
        return Err(StatusError::BlockRange {
            earliest: theirs.earliest,
            latest: theirs.latest,
        });
    }
    filter
        .validate(theirs.fork_id, head_number, head_timestamp)
        .map_err(StatusError::ForkId)
}

/// Who we are on the wire.
#[derive(Debug, Clone)]
pub struct LocalIdentity {
    /// Our node key: signs the RLPx handshake.
    pub key: secp256k1::SecretKey,
    /// Our node id, the key's public key.
    pub id: PeerId,
    /// Our client name sent in Hello.
    pub client_id: String,
    /// Our RLPx TCP port sent in Hello (0 for none).
    pub listen_port: u16,
    /// eth versions offered, best first.
    pub eth_versions: Vec<u32>,
    /// Whether snap/1 is offered (the node serves it; peers played by tests need not).
    pub snap: bool,
}

impl LocalIdentity {
    /// An identity for `key`, offering every supported eth version and no snap.
    pub fn new(key: secp256k1::SecretKey, client_id: &str, listen_port: u16) -> Self {
        let id = crate::rlpx::peer_id(&key.public_key(secp256k1::SECP256K1));
        Self {
            key,
            id,
            client_id: client_id.to_string(),
            listen_port,
            eth_versions: eth::SUPPORTED_VERSIONS.to_vec(),
            snap: false,
        }
    }

    /// The same identity, offering snap/1 beside eth.
    pub fn with_snap(mut self) -> Self {
        self.snap = true;
        self
    }

    fn hello(&self) -> Hello {
        Hello {
            protocol_version: p2p::P2P_VERSION,
            client_id: self.client_id.clone(),
            capabilities: self
                .eth_versions
                .iter()
                .map(|v| Capability::new("eth", u64::from(*v)))
                .chain(self.snap.then(|| Capability::new("snap", snap::SNAP1)))
                .collect(),
            listen_port: self.listen_port,
            id: self.id,
        }
    }
}

/// A message after the handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// p2p Ping: the peer wants a Pong.
    Ping,
    /// p2p Pong: the answer to our Ping.
    Pong,
    /// p2p Disconnect, with the reason when it is a known code.
    Disconnect(Option<DisconnectReason>),
    /// An eth message.
    Eth(EthMessage),
    /// A snap/1 message (only on a session that negotiated snap).
    Snap(SnapMessage),
}

/// Framing state shared by both halves: negotiated eth version, whether snap/1 was
/// negotiated (its ids follow eth's), and compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framing {
    /// The negotiated eth version (68, 69 or 70).
    pub version: u32,
    /// Whether snap/1 was negotiated; its message ids follow eth's.
    pub snap: bool,
    /// Whether messages are snappy-compressed (both sides speak p2p v5+).
    pub snappy: bool,
}

impl Framing {
    /// A framed eth message, ready for [`RlpxWriter::send`].
    pub fn eth(&self, msg: &EthMessage) -> Vec<u8> {
        p2p::frame(
            p2p::BASE_PROTOCOL_LENGTH + msg.id(),
            &msg.encode(self.version),
            self.snappy,
        )
    }

    /// A framed snap message (only for a session that negotiated snap).
    pub fn snap(&self, msg: &SnapMessage) -> Vec<u8> {
        p2p::frame(
            p2p::BASE_PROTOCOL_LENGTH + eth::protocol_length(self.version) + msg.id(),
            &msg.encode(),
            self.snappy,
        )
    }

    /// The tail of a `PooledTransactions` reply carrying `txs` (their list), compressed
    /// once for [`Framing::pooled_transactions`]: a peer that answers with the same txs
    /// again and again (a load tool) then frames each answer without compressing again.
    pub fn pooled_transactions_tail(txs: &[Bytes]) -> p2p::CompressedTail {
        // The list of txs is the same in every eth version, and is the whole body of a
        // `Transactions` message.
        p2p::CompressedTail::new(EthMessage::Transactions(txs.to_vec()).encode(eth::ETH68))
    }

    /// A framed `PooledTransactions { request_id, txs }` whose list of txs is `tail`
    /// ([`Framing::pooled_transactions_tail`]): the same frame payload as
    /// [`Framing::eth`] of that message, up to how snappy cut it.
    pub fn pooled_transactions(&self, request_id: u64, tail: &p2p::CompressedTail) -> Vec<u8> {
        let mut id = Vec::new();
        request_id.encode(&mut id);
        let mut head = Vec::with_capacity(id.len() + 9);
        alloy_rlp::Header {
            list: true,
            payload_length: id.len() + tail.raw().len(),
        }
        .encode(&mut head);
        head.extend_from_slice(&id);
        let msg_id = EthMessage::PooledTransactions {
            request_id,
            txs: Vec::new(),
        }
        .id();
        p2p::frame_with_tail(p2p::BASE_PROTOCOL_LENGTH + msg_id, &head, tail, self.snappy)
    }

    /// A framed p2p Ping.
    pub fn ping(&self) -> Vec<u8> {
        p2p::frame(p2p::PING, &p2p::EMPTY_LIST, self.snappy)
    }

    /// A framed p2p Pong.
    pub fn pong(&self) -> Vec<u8> {
        p2p::frame(p2p::PONG, &p2p::EMPTY_LIST, self.snappy)
    }

    /// A framed p2p Disconnect with `reason`.
    pub fn disconnect(&self, reason: DisconnectReason) -> Vec<u8> {
        p2p::frame(p2p::DISCONNECT, &reason.encode(), self.snappy)
    }

    /// Reads one frame's message.
    pub fn decode(&self, payload: &[u8]) -> Result<Incoming, SessionError> {
        let (id, body) = p2p::unframe(payload, self.snappy)?;
        match id {
            p2p::PING => Ok(Incoming::Ping),
            p2p::PONG => Ok(Incoming::Pong),
            p2p::DISCONNECT => Ok(Incoming::Disconnect(DisconnectReason::decode(&body))),
            p2p::HELLO => Err(SessionError::Unexpected {
                expected: "no second hello",
                found: id,
            }),
            id if id < p2p::BASE_PROTOCOL_LENGTH => Err(SessionError::UnknownCapability(id)),
            id => {
                let rel = id - p2p::BASE_PROTOCOL_LENGTH;
                let eth_length = eth::protocol_length(self.version);
                if rel < eth_length {
                    return Ok(Incoming::Eth(EthMessage::decode(rel, self.version, &body)?));
                }
                let snap_id = rel - eth_length;
                if !self.snap || snap_id >= snap::PROTOCOL_LENGTH {
                    return Err(SessionError::UnknownCapability(id));
                }
                Ok(Incoming::Snap(SnapMessage::decode(snap_id, &body)?))
            }
        }
    }
}

/// A connection past the Status exchange.
pub struct Session<S: Split> {
    /// The half that reads frames.
    pub reader: RlpxReader<S::Read>,
    /// The half that writes frames.
    pub writer: RlpxWriter<S::Write>,
    /// Message ids and compression negotiated.
    pub framing: Framing,
    /// The peer's Hello.
    pub hello: Hello,
    /// The peer's Status.
    pub status: Status,
    /// The peer's node id, from the RLPx handshake.
    pub remote_id: PeerId,
}

impl<S: Split> std::fmt::Debug for Session<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("remote_id", &self.remote_id)
            .field("framing", &self.framing)
            .field("client", &self.hello.client_id)
            .finish()
    }
}

async fn timed<T>(
    what: &'static str,
    fut: impl Future<Output = Result<T, SessionError>>,
) -> Result<T, SessionError> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, fut)
        .await
        .map_err(|_| SessionError::Timeout(what))?
}

/// Runs Hello and Status over an RLPx connection. `our_status` builds our Status for the
/// negotiated version; it is sent at once, before the peer's is read. `check` judges the
/// peer's Status. On failure a Disconnect with the matching reason is sent (best effort)
/// before the error is returned.
pub async fn handshake<S>(
    rlpx: RlpxStream<S>,
    local: &LocalIdentity,
    our_status: impl FnOnce(u32) -> Status,
    check: impl FnOnce(&Status, &Status) -> Result<(), StatusError>,
) -> Result<Session<S>, SessionError>
where
    S: Split,
{
    let remote_id = rlpx.remote_id();
    let (mut reader, mut writer) = rlpx.split();
    let mut negotiated = Framing {
        version: 0,
        snap: false,
        snappy: false,
    };
    let result = async {
        writer
            .send(&p2p::frame(p2p::HELLO, &local.hello().encode(), false))
            .await?;
        let payload = timed("hello", async { Ok(reader.recv().await?) }).await?;
        let (id, body) = p2p::unframe(&payload, false)?;
        let hello = match id {
            p2p::HELLO => Hello::decode(&body).map_err(SessionError::Hello)?,
            p2p::DISCONNECT => {
                return Err(SessionError::Disconnected(DisconnectReason::decode(&body)));
            }
            other => {
                return Err(SessionError::Unexpected {
                    expected: "hello",
                    found: other,
                });
            }
        };
        if hello.id != remote_id {
            return Err(SessionError::WrongIdentity(Box::new((remote_id, hello.id))));
        }
        let version = local
            .eth_versions
            .iter()
            .copied()
            .find(|v| {
                hello
                    .capabilities
                    .iter()
                    .any(|c| c.name == "eth" && c.version == u64::from(*v))
            })
            .ok_or_else(|| {
                let offered: Vec<String> =
                    hello.capabilities.iter().map(|c| c.to_string()).collect();
                SessionError::NoCommonVersion(offered.join(", "))
            })?;
        let snap = local.snap
            && hello
                .capabilities
                .iter()
                .any(|c| c.name == "snap" && c.version == snap::SNAP1);
        let framing = Framing {
            version,
            snap,
            snappy: hello.protocol_version >= p2p::P2P_VERSION,
        };
        negotiated = framing;
        let ours = our_status(version);
        writer
            .send(&framing.eth(&EthMessage::Status(ours.clone())))
            .await?;
        let theirs = timed("status", async {
            loop {
                let payload = reader.recv().await?;
                match framing.decode(&payload)? {
                    Incoming::Eth(EthMessage::Status(s)) => return Ok(s),
                    Incoming::Ping => writer.send(&framing.pong()).await?,
                    Incoming::Pong => {}
                    Incoming::Disconnect(r) => return Err(SessionError::Disconnected(r)),
                    Incoming::Eth(other) => {
                        return Err(SessionError::Unexpected {
                            expected: "status",
                            found: other.id(),
                        });
                    }
                    Incoming::Snap(other) => {
                        return Err(SessionError::Unexpected {
                            expected: "status",
                            found: other.id(),
                        });
                    }
                }
            }
        })
        .await?;
        check(&ours, &theirs)?;
        Ok((framing, hello, theirs))
    }
    .await;
    match result {
        Ok((framing, hello, status)) => Ok(Session {
            reader,
            writer,
            framing,
            hello,
            status,
            remote_id,
        }),
        Err(e) => {
            if !matches!(e, SessionError::Rlpx(_) | SessionError::Disconnected(_)) {
                // Before Hello completes the reason goes uncompressed, as the peer
                // expects; after, with the negotiated framing.
                let _ = tokio::time::timeout(
                    Duration::from_secs(1),
                    writer.send(&negotiated.disconnect(e.disconnect_reason())),
                )
                .await;
            }
            Err(e)
        }
    }
}

/// Dials `remote` over TCP and runs the whole handshake.
pub async fn connect(
    addr: std::net::SocketAddr,
    remote: PeerId,
    local: &LocalIdentity,
    our_status: impl FnOnce(u32) -> Status,
    check: impl FnOnce(&Status, &Status) -> Result<(), StatusError>,
) -> Result<Session<tokio::net::TcpStream>, SessionError> {
    let stream = timed("dial", async {
        Ok(tokio::net::TcpStream::connect(addr)
            .await
            .map_err(RlpxError::from)?)
    })
    .await?;
    connect_stream(stream, remote, local, our_status, check).await
}

/// Runs the whole handshake over a TCP connection already open (from a chosen local
/// address, say).
pub async fn connect_stream(
    stream: tokio::net::TcpStream,
    remote: PeerId,
    local: &LocalIdentity,
    our_status: impl FnOnce(u32) -> Status,
    check: impl FnOnce(&Status, &Status) -> Result<(), StatusError>,
) -> Result<Session<tokio::net::TcpStream>, SessionError> {
    let _ = stream.set_nodelay(true);
    let rlpx = timed("rlpx handshake", async {
        Ok(RlpxStream::connect(stream, &local.key, remote).await?)
    })
    .await?;
    handshake(rlpx, local, our_status, check).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pooled_reply_from_a_compressed_tail_reads_as_the_reply() {
        let txs: Vec<Bytes> = vec![
            Bytes::from(vec![0x02; 300]),
            Bytes::from(
                (0..150_000u32)
                    .map(|i| (i * 7 % 253) as u8)
                    .collect::<Vec<_>>(),
            ),
        ];
        let tail = Framing::pooled_transactions_tail(&txs);
        for snappy in [true, false] {
            let framing = Framing {
                version: eth::ETH68,
                snap: false,
                snappy,
            };
            for request_id in [0u64, 1, 0x7f, 0x80, 0xdead_beef, u64::MAX] {
                let msg = EthMessage::PooledTransactions {
                    request_id,
                    txs: txs.clone(),
                };
                let built = framing.pooled_transactions(request_id, &tail);
                let Incoming::Eth(read) = framing.decode(&built).unwrap() else {
                    panic!("not an eth message");
                };
                assert_eq!(read, msg, "request {request_id}, snappy {snappy}");
                // The same body as the message framed the usual way.
                assert_eq!(
                    p2p::unframe(&built, snappy).unwrap(),
                    p2p::unframe(&framing.eth(&msg), snappy).unwrap()
                );
            }
        }
    }
}
