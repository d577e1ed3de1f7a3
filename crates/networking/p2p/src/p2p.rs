//! The p2p base protocol that runs first on every RLPx connection: Hello (identity and
//! capabilities), Disconnect, Ping and Pong, and the snappy compression that p2p v5 turns
//! on for every later message.
//!
//! Message ids 0x00–0x0f belong to this protocol; capabilities shared with the peer are
//! laid out after it in alphabetical order (here only `eth`, at 0x10).

use crate::rlpx::PeerId;
use alloy_primitives::B512;
use alloy_rlp::Encodable;
use moat_common::rlp::{self, RlpError};

/// Hello (0x00): identity and capabilities, the first message each way.
pub const HELLO: u64 = 0x00;
/// Disconnect (0x01): the sender is closing, with a reason.
pub const DISCONNECT: u64 = 0x01;
/// Ping (0x02): asks for a Pong (liveness).
pub const PING: u64 = 0x02;
/// Pong (0x03): the answer to a Ping.
pub const PONG: u64 = 0x03;
/// Where the first capability's message ids start.
pub const BASE_PROTOCOL_LENGTH: u64 = 0x10;
/// The p2p version we speak; 5 turns snappy on.
pub const P2P_VERSION: u64 = 5;
/// The largest message a peer may send us, decompressed (geth's eth limit).
pub const MAX_MESSAGE_SIZE: usize = 10 * 1024 * 1024;

/// A capability: protocol name and version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capability {
    /// The protocol's name, e.g. `eth` or `snap`.
    pub name: String,
    /// The protocol version, e.g. 68 for eth/68.
    pub version: u64,
}

impl Capability {
    /// The capability `name/version`.
    pub fn new(name: &str, version: u64) -> Self {
        Self {
            name: name.to_string(),
            version,
        }
    }
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.name, self.version)
    }
}

/// The first message on a connection, both ways.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The p2p base protocol version; snappy is on when both sides send 5 ([`P2P_VERSION`]) or more.
    pub protocol_version: u64,
    /// The client's name and version, free text (e.g. `Geth/v1.14.0/linux-amd64/go1.22`).
    pub client_id: String,
    /// The sub-protocols the sender speaks, as name/version pairs.
    pub capabilities: Vec<Capability>,
    /// The sender's RLPx TCP port; 0 when it does not listen (most clients ignore it).
    pub listen_port: u16,
    /// The sender's node id (secp256k1 public key); must match the RLPx handshake's.
    pub id: PeerId,
}

impl Hello {
    /// The message body (the RLP list, without the id).
    pub fn encode(&self) -> Vec<u8> {
        let mut caps = Vec::new();
        for c in &self.capabilities {
            let mut item = Vec::new();
            c.name.as_str().encode(&mut item);
            c.version.encode(&mut item);
            rlp::encode_list_payload(&item, &mut caps);
        }
        let mut payload = Vec::new();
        self.protocol_version.encode(&mut payload);
        self.client_id.as_str().encode(&mut payload);
        rlp::encode_list_payload(&caps, &mut payload);
        u64::from(self.listen_port).encode(&mut payload);
        self.id.encode(&mut payload);
        let mut out = Vec::with_capacity(payload.len() + 4);
        rlp::encode_list_payload(&payload, &mut out);
        out
    }

    /// Decodes a Hello; extra trailing fields are allowed (forward compatibility).
    pub fn decode(mut bytes: &[u8]) -> Result<Self, RlpError> {
        let mut f = rlp::list(&mut bytes, "hello")?;
        let protocol_version = f.u64("hello version")?;
        let client_id = String::from_utf8_lossy(f.bytes("hello client id")?).into_owned();
        let mut list = f.list("hello capabilities")?;
        let mut capabilities = Vec::new();
        while !list.is_empty() {
            let mut c = list.list("capability")?;
            let name = String::from_utf8_lossy(c.bytes("capability name")?).into_owned();
            let version = c.u64("capability version")?;
            capabilities.push(Capability { name, version });
        }
        let listen_port = f.u64("hello listen port")?;
        let id = B512::from(f.fixed::<64>("hello node id")?);
        Ok(Self {
            protocol_version,
            client_id,
            capabilities,
            listen_port: u16::try_from(listen_port).unwrap_or(0),
            id,
        })
    }
}

/// Why a connection is closed (the devp2p reason codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DisconnectReason {
    /// 0x00: asked to disconnect (a normal close).
    Requested = 0x00,
    /// 0x01: a TCP sub-system error.
    TcpError = 0x01,
    /// 0x02: the peer broke the protocol.
    ProtocolBreach = 0x02,
    /// 0x03: the peer is of no use (no shared capability or chain).
    UselessPeer = 0x03,
    /// 0x04: the sender has no free peer slot.
    TooManyPeers = 0x04,
    /// 0x05: the two nodes are already connected.
    AlreadyConnected = 0x05,
    /// 0x06: incompatible p2p protocol version.
    IncompatibleVersion = 0x06,
    /// 0x07: invalid node identity.
    InvalidIdentity = 0x07,
    /// 0x08: the client is shutting down.
    ClientQuitting = 0x08,
    /// 0x09: the identity differs from the one expected.
    UnexpectedIdentity = 0x09,
    /// 0x0a: the peer is ourselves.
    ConnectedToSelf = 0x0a,
    /// 0x0b: a ping or read timed out.
    Timeout = 0x0b,
    /// 0x10: a sub-protocol (eth, snap) error.
    SubprotocolError = 0x10,
}

impl DisconnectReason {
    /// The reason with code `b`; `None` for a code devp2p does not define.
    pub fn from_u8(b: u8) -> Option<Self> {
        use DisconnectReason::*;
        Some(match b {
            0x00 => Requested,
            0x01 => TcpError,
            0x02 => ProtocolBreach,
            0x03 => UselessPeer,
            0x04 => TooManyPeers,
            0x05 => AlreadyConnected,
            0x06 => IncompatibleVersion,
            0x07 => InvalidIdentity,
            0x08 => ClientQuitting,
            0x09 => UnexpectedIdentity,
            0x0a => ConnectedToSelf,
            0x0b => Timeout,
            0x10 => SubprotocolError,
            _ => return None,
        })
    }

    /// Stable label for logs and metrics.
    pub fn as_str(&self) -> &'static str {
        use DisconnectReason::*;
        match self {
            Requested => "requested",
            TcpError => "tcp error",
            ProtocolBreach => "breach of protocol",
            UselessPeer => "useless peer",
            TooManyPeers => "too many peers",
            AlreadyConnected => "already connected",
            IncompatibleVersion => "incompatible p2p version",
            InvalidIdentity => "invalid node identity",
            ClientQuitting => "client quitting",
            UnexpectedIdentity => "unexpected identity",
            ConnectedToSelf => "connected to self",
            Timeout => "read timeout",
            SubprotocolError => "subprotocol error",
        }
    }

    /// `[reason]`, the form geth sends.
    pub fn encode(&self) -> Vec<u8> {
        vec![0xc1, *self as u8]
    }

    /// Reads the reason from `[reason]`, a bare byte, or an empty payload (geth accepts
    /// all three; an unknown code reads as `None`).
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        match bytes {
            [] | [0xc0] => Some(Self::Requested),
            [0xc1, 0x80] | [0x80] => Some(Self::Requested),
            [0xc1, b] | [b] => Self::from_u8(*b),
            _ => None,
        }
    }
}

impl std::fmt::Display for DisconnectReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The empty list Ping and Pong carry.
pub const EMPTY_LIST: [u8; 1] = [0xc0];

/// Why a compressed payload was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnappyError {
    /// The stated decompressed size is over the limit.
    #[error("snappy: decompressed size {size} exceeds the {max}-byte limit")]
    TooLarge {
        /// The stated decompressed size, in bytes.
        size: usize,
        /// The limit, in bytes.
        max: usize,
    },
    /// The data is not valid snappy (the decoder's message).
    #[error("snappy: {0}")]
    Corrupt(String),
}

/// Decompresses one message, refusing before allocating when the stated size is over `max`.
pub fn decompress(data: &[u8], max: usize) -> Result<Vec<u8>, SnappyError> {
    let size = snap::raw::decompress_len(data).map_err(|e| SnappyError::Corrupt(e.to_string()))?;
    if size > max {
        return Err(SnappyError::TooLarge { size, max });
    }
    snap::raw::Decoder::new()
        .decompress_vec(data)
        .map_err(|e| SnappyError::Corrupt(e.to_string()))
}

/// Snappy-compresses one message body (raw block format, as p2p v5 requires).
pub fn compress(data: &[u8]) -> Vec<u8> {
    // Compression of an in-memory buffer cannot fail short of a >4 GiB input, which no
    // message reaches; fall back to an empty body rather than panic.
    snap::raw::Encoder::new()
        .compress_vec(data)
        .unwrap_or_default()
}

/// Frames a message: `rlp(id) || body`, the body compressed when snappy is on.
pub fn frame(id: u64, body: &[u8], snappy: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 9);
    id.encode(&mut out);
    if snappy {
        out.extend_from_slice(&compress(body));
    } else {
        out.extend_from_slice(body);
    }
    out
}

/// The tail of a message body compressed once, to be framed behind many different heads
/// ([`frame_with_tail`]): a reply whose only varying part is its request id, say.
#[derive(Debug, Clone)]
pub struct CompressedTail {
    raw: Vec<u8>,
    /// The snappy elements of `raw`, without the preamble (the decompressed length).
    elements: Vec<u8>,
}

impl CompressedTail {
    /// Compresses `raw` once.
    pub fn new(raw: Vec<u8>) -> Self {
        let compressed = compress(&raw);
        // The preamble is a little-endian base-128 varint: its last byte is < 0x80.
        let preamble = compressed
            .iter()
            .position(|b| b & 0x80 == 0)
            .map_or(compressed.len(), |i| i + 1);
        Self {
            elements: compressed[preamble..].to_vec(),
            raw,
        }
    }

    /// The uncompressed tail.
    pub fn raw(&self) -> &[u8] {
        &self.raw
    }
}

/// Appends `n` as a little-endian base-128 varint (snappy's length preamble).
fn put_uvarint(mut n: u64, out: &mut Vec<u8>) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// [`frame`] of the body `head || tail` with the tail's compression done once: with
/// snappy, the preamble of the whole length, `head` as one literal element, then the
/// tail's elements (a snappy copy reaches back only within the tail's own output, so
/// they stay valid behind the literal). Any snappy decoder reads the same body.
pub fn frame_with_tail(id: u64, head: &[u8], tail: &CompressedTail, snappy: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(head.len() + tail.elements.len().max(tail.raw.len()) + 24);
    id.encode(&mut out);
    if !snappy {
        out.extend_from_slice(head);
        out.extend_from_slice(&tail.raw);
        return out;
    }
    put_uvarint((head.len() + tail.raw.len()) as u64, &mut out);
    if !head.is_empty() {
        // A literal's tag: length - 1 in the upper six bits below 60, else 60 + the
        // number of little-endian length bytes that follow (up to 4).
        let n = (head.len() - 1) as u32;
        if n < 60 {
            out.push((n as u8) << 2);
        } else {
            let bytes = (4 - n.leading_zeros() as usize / 8).max(1);
            out.push(((59 + bytes) as u8) << 2);
            out.extend_from_slice(&n.to_le_bytes()[..bytes]);
        }
        out.extend_from_slice(head);
    }
    out.extend_from_slice(&tail.elements);
    out
}

/// Splits a frame into its message id and (decompressed) body.
pub fn unframe(payload: &[u8], snappy: bool) -> Result<(u64, Vec<u8>), FrameError> {
    let mut buf = payload;
    let id = <u64 as alloy_rlp::Decodable>::decode(&mut buf).map_err(|_| FrameError::BadId)?;
    let body = if snappy {
        decompress(buf, MAX_MESSAGE_SIZE)?
    } else {
        if buf.len() > MAX_MESSAGE_SIZE {
            return Err(FrameError::Snappy(SnappyError::TooLarge {
                size: buf.len(),
                max: MAX_MESSAGE_SIZE,
            }));
        }
        buf.to_vec()
    };
    Ok((id, body))
}

/// Why a frame does not hold a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The frame does not start with an RLP integer message id.
    #[error("frame does not start with a message id")]
    BadId,
    /// The body does not decompress.
    #[error(transparent)]
    Snappy(#[from] SnappyError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trip_and_extra_fields() {
        let hello = Hello {
            protocol_version: 5,
            client_id: "moat/v0.1.0".into(),
            capabilities: vec![Capability::new("eth", 68), Capability::new("eth", 69)],
            listen_port: 30303,
            id: B512::repeat_byte(7),
        };
        let enc = hello.encode();
        assert_eq!(Hello::decode(&enc).unwrap(), hello);
        // A newer peer may append fields.
        let mut rest = &enc[..];
        alloy_rlp::Header::decode(&mut rest).unwrap();
        let mut payload = rest.to_vec();
        payload.extend_from_slice(&[0x82, 0xab, 0xcd]);
        let mut longer = Vec::new();
        rlp::encode_list_payload(&payload, &mut longer);
        assert_eq!(Hello::decode(&longer).unwrap(), hello);
        assert!(Hello::decode(&[0xc1, 0x05]).is_err());
    }

    #[test]
    fn disconnect_reason_forms() {
        assert_eq!(
            DisconnectReason::decode(&DisconnectReason::SubprotocolError.encode()),
            Some(DisconnectReason::SubprotocolError)
        );
        assert_eq!(
            DisconnectReason::decode(&[0x04]),
            Some(DisconnectReason::TooManyPeers)
        );
        assert_eq!(
            DisconnectReason::decode(&[]),
            Some(DisconnectReason::Requested)
        );
        assert_eq!(DisconnectReason::decode(&[0xc1, 0x55]), None);
    }

    #[test]
    fn snappy_frames_and_limits() {
        let body = vec![0xab; 5000];
        let f = frame(0x12, &body, true);
        assert!(f.len() < 400, "{}", f.len());
        assert_eq!(unframe(&f, true).unwrap(), (0x12, body.clone()));
        assert_eq!(unframe(&frame(3, &body, false), false).unwrap(), (3, body));
        // A header claiming a huge size is refused before decompressing.
        let mut bomb = vec![0x12];
        bomb.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(matches!(
            unframe(&bomb, true),
            Err(FrameError::Snappy(SnappyError::TooLarge { .. }))
        ));
        assert!(unframe(&[0x12, 0x01, 0x02], true).is_err());
        assert!(unframe(&[], true).is_err());
    }

    #[test]
    fn a_tail_compressed_once_frames_like_the_whole_body() {
        // Spans several of snappy's 64 KB blocks, with runs it compresses and noise it
        // does not.
        let mut x = 0x9e37_79b9u32;
        let tail: Vec<u8> = (0..200_000u32)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                if (i / 1000) % 2 == 0 {
                    (i % 7) as u8
                } else {
                    x as u8
                }
            })
            .collect();
        let compressed = CompressedTail::new(tail.clone());
        assert_eq!(compressed.raw(), &tail[..]);
        for head_len in [0usize, 1, 3, 60, 61, 300, 70_000] {
            let head: Vec<u8> = (0..head_len).map(|i| (i * 31) as u8).collect();
            let whole = [&head[..], &tail[..]].concat();
            for snappy in [true, false] {
                let f = frame_with_tail(0x1a, &head, &compressed, snappy);
                assert_eq!(
                    unframe(&f, snappy).unwrap(),
                    (0x1a, whole.clone()),
                    "{head_len}"
                );
                if snappy {
                    // The head, a few bytes of tags, and the tail as compressed alone.
                    assert!(
                        f.len() <= 1 + head_len + 5 + compress(&tail).len(),
                        "{head_len}"
                    );
                }
            }
        }
    }
}
