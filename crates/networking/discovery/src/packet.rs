//! The discv4 wire format: `hash || signature || type || rlp(body)`.
//!
//! - `hash` = `keccak256(signature || type || body)`: a checksum, and the token a reply
//!   echoes (Pong, ENRResponse).
//! - `signature` = 65-byte recoverable secp256k1 signature (`r || s || v`) of
//!   `keccak256(type || body)`; the sender's node id is recovered from it.
//! - `type`: 1 Ping, 2 Pong, 3 FindNode, 4 Neighbors, 5 ENRRequest, 6 ENRResponse.
//!
//! Decoding is forward compatible as geth's: list elements after the known ones are
//! ignored, and so are bytes after the body's list. Everything else that is off (sizes,
//! non-canonical integers, a bad signature, an unknown type) is a typed [`DecodeError`];
//! the decoder never panics (`tests/codec_fuzz.rs` feeds it random and mutated packets).

use crate::enr::{Enr, EnrError};
use crate::rlp::{self, RlpError, RlpReader};
use crate::{NodeId, node_id};
use alloy_primitives::{B256, keccak256};
use alloy_rlp::Encodable;
use secp256k1::ecdsa::{RecoverableSignature, RecoveryId};
use secp256k1::{Message, SECP256K1, SecretKey};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Largest packet sent or accepted (the protocol's limit).
pub const MAX_PACKET_SIZE: usize = 1280;
const HASH_SIZE: usize = 32;
const SIG_SIZE: usize = 65;
const HEAD_SIZE: usize = HASH_SIZE + SIG_SIZE;
/// Most nodes in one Neighbors packet: with 16-byte addresses and the largest ports
/// and expiration, 12 keep the packet under [`MAX_PACKET_SIZE`] (geth's constant).
pub const MAX_NEIGHBORS: usize = 12;

/// Why bytes are not a discv4 packet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Shorter than hash, signature and type (the size in bytes).
    #[error("packet of {0} bytes is too small")]
    TooSmall(usize),
    /// Longer than [`MAX_PACKET_SIZE`] (the size in bytes).
    #[error("packet of {0} bytes is larger than 1280")]
    TooLarge(usize),
    /// The leading hash is not keccak256 of the rest.
    #[error("packet hash does not match its contents")]
    BadHash,
    /// The signature recovers no public key.
    #[error("packet signature does not recover a public key")]
    BadSignature,
    /// The type byte is not 1 to 6.
    #[error("unknown packet type {0}")]
    UnknownType(u8),
    /// A field of the body does not decode.
    #[error("{packet} {field}: {error}")]
    Field {
        /// The packet's name (`ping`, `neighbors`, ...).
        packet: &'static str,
        /// The field's name.
        field: &'static str,
        /// What was wrong with it.
        error: RlpError,
    },
    /// The ENRResponse's record does not decode or verify.
    #[error("ENRResponse record: {0}")]
    Enr(EnrError),
}

/// A UDP/TCP endpoint as Ping and Pong carry it. An address that is neither 4 nor 16
/// bytes reads as `None` (geth ignores the `from` field, so it must not fail a Ping).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// The IP address; `None` when the bytes are not 4 or 16 long.
    pub ip: Option<IpAddr>,
    /// The discovery (UDP) port.
    pub udp: u16,
    /// The RLPx (TCP) port; 0 for none.
    pub tcp: u16,
}

/// A node in a Neighbors packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neighbor {
    /// The IP address; `None` when the bytes are not 4 or 16 long.
    pub ip: Option<IpAddr>,
    /// The discovery (UDP) port.
    pub udp: u16,
    /// The RLPx (TCP) port.
    pub tcp: u16,
    /// The node's public key (its node id).
    pub id: NodeId,
}

/// Ping (type 1): asks for a Pong, proving the sender's endpoint (bonding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ping {
    /// The discovery protocol version; we send 4.
    pub version: u64,
    /// The sender's endpoint as it sees itself.
    pub from: Endpoint,
    /// The recipient's endpoint as the sender sees it.
    pub to: Endpoint,
    /// Unix time (seconds) after which the packet is stale.
    pub expiration: u64,
    /// EIP-868: the sender's record sequence number.
    pub enr_seq: Option<u64>,
}

/// Pong (type 2): the answer to a Ping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pong {
    /// The address the Ping came from, as the responder saw it.
    pub to: Endpoint,
    /// The hash of the Ping answered.
    pub ping_hash: B256,
    /// Unix time (seconds) after which the packet is stale.
    pub expiration: u64,
    /// EIP-868: the responder's record sequence number.
    pub enr_seq: Option<u64>,
}

/// FindNode (type 3): asks for the nodes closest to a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FindNode {
    /// A public key; nodes closest to its keccak256 are asked for.
    pub target: NodeId,
    /// Unix time (seconds) after which the packet is stale.
    pub expiration: u64,
}

/// Neighbors (type 4): the answer to FindNode, at most [`MAX_NEIGHBORS`] per packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbors {
    /// Nodes the responder knows near the target.
    pub nodes: Vec<Neighbor>,
    /// Unix time (seconds) after which the packet is stale.
    pub expiration: u64,
}

/// ENRRequest (type 5, EIP-868): asks for the recipient's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrRequest {
    /// Unix time (seconds) after which the packet is stale.
    pub expiration: u64,
}

/// ENRResponse (type 6, EIP-868): the answer to ENRRequest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrResponse {
    /// The hash of the ENRRequest answered.
    pub request_hash: B256,
    /// The responder's signed record.
    pub enr: Enr,
}

/// One discv4 message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    /// Type 1.
    Ping(Ping),
    /// Type 2.
    Pong(Pong),
    /// Type 3.
    FindNode(FindNode),
    /// Type 4.
    Neighbors(Neighbors),
    /// Type 5.
    EnrRequest(EnrRequest),
    /// Type 6.
    EnrResponse(EnrResponse),
}

/// The six kinds, for matching replies and labelling metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PacketKind {
    /// Ping (type 1).
    Ping = 1,
    /// Pong (type 2).
    Pong = 2,
    /// FindNode (type 3).
    FindNode = 3,
    /// Neighbors (type 4).
    Neighbors = 4,
    /// ENRRequest (type 5).
    EnrRequest = 5,
    /// ENRResponse (type 6).
    EnrResponse = 6,
}

impl PacketKind {
    /// Lowercase name, as used in logs and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            PacketKind::Ping => "ping",
            PacketKind::Pong => "pong",
            PacketKind::FindNode => "findnode",
            PacketKind::Neighbors => "neighbors",
            PacketKind::EnrRequest => "enrrequest",
            PacketKind::EnrResponse => "enrresponse",
        }
    }
}

impl Packet {
    /// The packet's kind (its type byte).
    pub fn kind(&self) -> PacketKind {
        match self {
            Packet::Ping(_) => PacketKind::Ping,
            Packet::Pong(_) => PacketKind::Pong,
            Packet::FindNode(_) => PacketKind::FindNode,
            Packet::Neighbors(_) => PacketKind::Neighbors,
            Packet::EnrRequest(_) => PacketKind::EnrRequest,
            Packet::EnrResponse(_) => PacketKind::EnrResponse,
        }
    }

    /// The absolute expiry (Unix seconds); ENRResponse has none.
    pub fn expiration(&self) -> Option<u64> {
        match self {
            Packet::Ping(p) => Some(p.expiration),
            Packet::Pong(p) => Some(p.expiration),
            Packet::FindNode(p) => Some(p.expiration),
            Packet::Neighbors(p) => Some(p.expiration),
            Packet::EnrRequest(p) => Some(p.expiration),
            Packet::EnrResponse(_) => None,
        }
    }

    /// Whether the packet has expired at `now` (Unix seconds). As geth, the expiration
    /// reads as a signed number (a "negative" one is long past) and a packet expiring
    /// within the current second is expired.
    pub fn is_expired(&self, now: u64) -> bool {
        self.expiration()
            .is_some_and(|e| (e as i64) <= i64::try_from(now).unwrap_or(i64::MAX))
    }

    fn encode_body(&self, out: &mut Vec<u8>) {
        let mut p = Vec::with_capacity(256);
        match self {
            Packet::Ping(ping) => {
                ping.version.encode(&mut p);
                encode_endpoint(&ping.from, &mut p);
                encode_endpoint(&ping.to, &mut p);
                ping.expiration.encode(&mut p);
                if let Some(seq) = ping.enr_seq {
                    seq.encode(&mut p);
                }
            }
            Packet::Pong(pong) => {
                encode_endpoint(&pong.to, &mut p);
                pong.ping_hash.as_slice().encode(&mut p);
                pong.expiration.encode(&mut p);
                if let Some(seq) = pong.enr_seq {
                    seq.encode(&mut p);
                }
            }
            Packet::FindNode(f) => {
                f.target.as_slice().encode(&mut p);
                f.expiration.encode(&mut p);
            }
            Packet::Neighbors(n) => {
                let mut nodes = Vec::with_capacity(n.nodes.len() * 90);
                for node in &n.nodes {
                    let mut item = Vec::with_capacity(90);
                    encode_ip(node.ip, &mut item);
                    node.udp.encode(&mut item);
                    node.tcp.encode(&mut item);
                    node.id.as_slice().encode(&mut item);
                    nodes.extend_from_slice(&rlp::list(&item));
                }
                p.extend_from_slice(&rlp::list(&nodes));
                n.expiration.encode(&mut p);
            }
            Packet::EnrRequest(r) => r.expiration.encode(&mut p),
            Packet::EnrResponse(r) => {
                r.request_hash.as_slice().encode(&mut p);
                p.extend_from_slice(r.enr.as_bytes());
            }
        }
        out.extend_from_slice(&rlp::list(&p));
    }

    /// Signs and frames the packet; returns the bytes and the packet hash.
    pub fn encode(&self, key: &SecretKey) -> (Vec<u8>, B256) {
        let mut out = vec![0u8; HEAD_SIZE];
        out.push(self.kind() as u8);
        self.encode_body(&mut out);
        let digest = keccak256(&out[HEAD_SIZE..]);
        let (recid, rs) = SECP256K1
            .sign_ecdsa_recoverable(Message::from_digest(digest.0), key)
            .serialize_compact();
        out[HASH_SIZE..HASH_SIZE + 64].copy_from_slice(&rs);
        out[HASH_SIZE + 64] = i32::from(recid) as u8;
        let hash = keccak256(&out[HASH_SIZE..]);
        out[..HASH_SIZE].copy_from_slice(hash.as_slice());
        (out, hash)
    }
}

fn encode_ip(ip: Option<IpAddr>, out: &mut Vec<u8>) {
    match ip {
        Some(IpAddr::V4(v4)) => v4.octets().as_slice().encode(out),
        Some(IpAddr::V6(v6)) => v6.octets().as_slice().encode(out),
        None => [0u8; 0].as_slice().encode(out),
    }
}

fn encode_endpoint(e: &Endpoint, out: &mut Vec<u8>) {
    let mut item = Vec::with_capacity(24);
    encode_ip(e.ip, &mut item);
    e.udp.encode(&mut item);
    e.tcp.encode(&mut item);
    out.extend_from_slice(&rlp::list(&item));
}

/// A decoded packet with what the frame says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The message.
    pub packet: Packet,
    /// The sender, recovered from the signature.
    pub sender: NodeId,
    /// The packet hash (what a reply echoes).
    pub hash: B256,
}

/// An address of 4 or 16 bytes; an IPv4-mapped IPv6 address reads as IPv4.
pub fn ip_from_bytes(b: &[u8]) -> Option<IpAddr> {
    match b.len() {
        4 => Some(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))),
        16 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(b);
            let v6 = Ipv6Addr::from(a);
            Some(match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(v6),
            })
        }
        _ => None,
    }
}

/// Field-level error context.
struct Ctx(&'static str);

impl Ctx {
    fn err(&self, field: &'static str) -> impl FnOnce(RlpError) -> DecodeError + '_ {
        move |error| DecodeError::Field {
            packet: self.0,
            field,
            error,
        }
    }
}

fn read_endpoint(
    r: &mut RlpReader<'_>,
    ctx: &Ctx,
    field: &'static str,
) -> Result<Endpoint, DecodeError> {
    let mut e = r.list().map_err(ctx.err(field))?;
    let ip = ip_from_bytes(e.bytes().map_err(ctx.err(field))?);
    let udp = e.uint::<u16>().map_err(ctx.err(field))?;
    let tcp = e.uint::<u16>().map_err(ctx.err(field))?;
    Ok(Endpoint { ip, udp, tcp })
}

/// Reads an optional trailing integer (EIP-868's enr-seq); anything else there is
/// read as absent only if the list ends.
fn read_optional_seq(r: &mut RlpReader<'_>, ctx: &Ctx) -> Result<Option<u64>, DecodeError> {
    if r.is_empty() {
        return Ok(None);
    }
    r.uint::<u64>().map(Some).map_err(ctx.err("enr-seq"))
}

fn decode_body(kind: u8, body: &[u8]) -> Result<Packet, DecodeError> {
    let name = match kind {
        1 => "Ping",
        2 => "Pong",
        3 => "FindNode",
        4 => "Neighbors",
        5 => "ENRRequest",
        6 => "ENRResponse",
        other => return Err(DecodeError::UnknownType(other)),
    };
    let ctx = Ctx(name);
    let mut buf = body;
    // Bytes after the list are ignored (geth reads one value from a stream).
    let mut r = RlpReader::new(rlp::take_list(&mut buf).map_err(ctx.err("list"))?);
    let packet = match kind {
        1 => {
            let version = r.uint::<u64>().map_err(ctx.err("version"))?;
            let from = read_endpoint(&mut r, &ctx, "from")?;
            let to = read_endpoint(&mut r, &ctx, "to")?;
            let expiration = r.uint::<u64>().map_err(ctx.err("expiration"))?;
            let enr_seq = read_optional_seq(&mut r, &ctx)?;
            Packet::Ping(Ping {
                version,
                from,
                to,
                expiration,
                enr_seq,
            })
        }
        2 => {
            let to = read_endpoint(&mut r, &ctx, "to")?;
            let ping_hash = B256::from(r.fixed::<32>().map_err(ctx.err("ping-hash"))?);
            let expiration = r.uint::<u64>().map_err(ctx.err("expiration"))?;
            let enr_seq = read_optional_seq(&mut r, &ctx)?;
            Packet::Pong(Pong {
                to,
                ping_hash,
                expiration,
                enr_seq,
            })
        }
        3 => {
            let target = NodeId::from(r.fixed::<64>().map_err(ctx.err("target"))?);
            let expiration = r.uint::<u64>().map_err(ctx.err("expiration"))?;
            Packet::FindNode(FindNode { target, expiration })
        }
        4 => {
            let mut list = r.list().map_err(ctx.err("nodes"))?;
            let mut nodes = Vec::new();
            while !list.is_empty() {
                let mut n = list.list().map_err(ctx.err("node"))?;
                let ip = ip_from_bytes(n.bytes().map_err(ctx.err("node ip"))?);
                let udp = n.uint::<u16>().map_err(ctx.err("node udp"))?;
                let tcp = n.uint::<u16>().map_err(ctx.err("node tcp"))?;
                let id = NodeId::from(n.fixed::<64>().map_err(ctx.err("node id"))?);
                nodes.push(Neighbor { ip, udp, tcp, id });
            }
            let expiration = r.uint::<u64>().map_err(ctx.err("expiration"))?;
            Packet::Neighbors(Neighbors { nodes, expiration })
        }
        5 => {
            let expiration = r.uint::<u64>().map_err(ctx.err("expiration"))?;
            Packet::EnrRequest(EnrRequest { expiration })
        }
        _ => {
            let request_hash = B256::from(r.fixed::<32>().map_err(ctx.err("request-hash"))?);
            let mut rest = r.raw().map_err(ctx.err("record"))?;
            let enr = Enr::decode(&mut rest).map_err(DecodeError::Enr)?;
            Packet::EnrResponse(EnrResponse { request_hash, enr })
        }
    };
    Ok(packet)
}

/// Checks the frame (hash, signature) and decodes the packet.
pub fn decode(input: &[u8]) -> Result<Decoded, DecodeError> {
    if input.len() < HEAD_SIZE + 1 {
        return Err(DecodeError::TooSmall(input.len()));
    }
    if input.len() > MAX_PACKET_SIZE {
        return Err(DecodeError::TooLarge(input.len()));
    }
    let hash = keccak256(&input[HASH_SIZE..]);
    if hash.as_slice() != &input[..HASH_SIZE] {
        return Err(DecodeError::BadHash);
    }
    let sig = &input[HASH_SIZE..HEAD_SIZE];
    let recid = RecoveryId::try_from(i32::from(sig[64])).map_err(|_| DecodeError::BadSignature)?;
    let sig = RecoverableSignature::from_compact(&sig[..64], recid)
        .map_err(|_| DecodeError::BadSignature)?;
    let digest = keccak256(&input[HEAD_SIZE..]);
    let public = SECP256K1
        .recover_ecdsa(Message::from_digest(digest.0), &sig)
        .map_err(|_| DecodeError::BadSignature)?;
    let packet = decode_body(input[HEAD_SIZE], &input[HEAD_SIZE + 1..])?;
    Ok(Decoded {
        packet,
        sender: node_id(&public),
        hash,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::enr::EnrFields;

    fn key(b: u8) -> SecretKey {
        SecretKey::from_byte_array([b; 32]).unwrap()
    }

    fn ep(ip: [u8; 4], udp: u16, tcp: u16) -> Endpoint {
        Endpoint {
            ip: Some(IpAddr::from(ip)),
            udp,
            tcp,
        }
    }

    fn all_packets() -> Vec<Packet> {
        let enr = Enr::build(&key(3), 5, &EnrFields::default()).unwrap();
        vec![
            Packet::Ping(Ping {
                version: 4,
                from: ep([127, 0, 0, 1], 30303, 30303),
                to: ep([10, 0, 0, 1], 1, 0),
                expiration: 1_900_000_000,
                enr_seq: Some(7),
            }),
            Packet::Ping(Ping {
                version: 4,
                from: Endpoint {
                    ip: None,
                    udp: 0,
                    tcp: 0,
                },
                to: Endpoint {
                    ip: Some("::1".parse().unwrap()),
                    udp: 65535,
                    tcp: 65535,
                },
                expiration: u64::MAX,
                enr_seq: None,
            }),
            Packet::Pong(Pong {
                to: ep([1, 2, 3, 4], 5, 6),
                ping_hash: B256::repeat_byte(9),
                expiration: 1,
                enr_seq: Some(0),
            }),
            Packet::FindNode(FindNode {
                target: NodeId::repeat_byte(0xab),
                expiration: 2,
            }),
            Packet::Neighbors(Neighbors {
                nodes: (0..MAX_NEIGHBORS as u8)
                    .map(|i| Neighbor {
                        ip: Some(IpAddr::V6(Ipv6Addr::from([i; 16]))),
                        udp: u16::MAX,
                        tcp: u16::MAX,
                        id: NodeId::repeat_byte(i),
                    })
                    .collect(),
                expiration: u64::MAX,
            }),
            Packet::EnrRequest(EnrRequest { expiration: 3 }),
            Packet::EnrResponse(EnrResponse {
                request_hash: B256::repeat_byte(1),
                enr,
            }),
        ]
    }

    #[test]
    fn every_packet_round_trips_and_fits() {
        let k = key(1);
        let me = node_id(&k.public_key(SECP256K1));
        for p in all_packets() {
            let (bytes, hash) = p.encode(&k);
            assert!(bytes.len() <= MAX_PACKET_SIZE, "{} bytes", bytes.len());
            let d = decode(&bytes).unwrap();
            assert_eq!(d.packet, p);
            assert_eq!(d.sender, me);
            assert_eq!(d.hash, hash);
        }
    }

    /// EIP-8's discv4 vectors (signed by b71c71a6...f291): a plain Ping, then a Ping,
    /// a FindNode and a Neighbors with extra list elements, which must be ignored.
    #[test]
    fn eip8_vectors_decode() {
        let vectors = [
            "71dbda3a79554728d4f94411e42ee1f8b0d561c10e1e5f5893367948c6a7d70bb87b235fa28a77070271b6c164a2dce8c7e13a5739b53b5e96f2e5acb0e458a02902f5965d55ecbeb2ebb6cabb8b2b232896a36b737666c55265ad0a68412f250001ea04cb847f000001820cfa8215a8d790000000000000000000000000000000018208ae820d058443b9a355",
            "e9614ccfd9fc3e74360018522d30e1419a143407ffcce748de3e22116b7e8dc92ff74788c0b6663aaa3d67d641936511c8f8d6ad8698b820a7cf9e1be7155e9a241f556658c55428ec0563514365799a4be2be5a685a80971ddcfa80cb422cdd0101ec04cb847f000001820cfa8215a8d790000000000000000000000000000000018208ae820d058443b9a3550102",
            "c7c44041b9f7c7e41934417ebac9a8e1a4c6298f74553f2fcfdcae6ed6fe53163eb3d2b52e39fe91831b8a927bf4fc222c3902202027e5e9eb812195f95d20061ef5cd31d502e47ecb61183f74a504fe04c51e73df81f25c4d506b26db4517490103f84eb840ca634cae0d49acb401d8a4c6b6fe8c55b70d115bf400769cc1400f3258cd31387574077f301b421bc84df7266c44e9e6d569fc56be00812904767bf5ccd1fc7f8443b9a35582999983999999280dc62cc8255c73471e0a61da0c89acdc0e035e260add7fc0c04ad9ebf3919644c91cb247affc82b69bd2ca235c71eab8e49737c937a2c396",
            "c679fc8fe0b8b12f06577f2e802d34f6fa257e6137a995f6f4cbfc9ee50ed3710faf6e66f932c4c8d81d64343f429651328758b47d3dbc02c4042f0fff6946a50f4a49037a72bb550f3a7872363a83e1b9ee6469856c24eb4ef80b7535bcf99c0004f9015bf90150f84d846321163782115c82115db8403155e1427f85f10a5c9a7755877748041af1bcd8d474ec065eb33df57a97babf54bfd2103575fa829115d224c523596b401065a97f74010610fce76382c0bf32f84984010203040101b840312c55512422cf9b8a4097e9a6ad79402e87a15ae909a4bfefa22398f03d20951933beea1e4dfa6f968212385e829f04c2d314fc2d4e255e0d3bc08792b069dbf8599020010db83c4d001500000000abcdef12820d05820d05b84038643200b172dcfef857492156971f0e6aa2c538d8b74010f8e140811d53b98c765dd2d96126051913f44582e8c199ad7c6d6819e9a56483f637feaac9448aacf8599020010db885a308d313198a2e037073488203e78203e8b8408dcab8618c3253b558d459da53bd8fa68935a719aff8b811197101a4b2b47dd2d47295286fc00cc081bb542d760717d1bdd6bec2c37cd72eca367d6dd3b9df738443b9a355010203b525a138aa34383fec3d2719a0",
        ];
        let signer = SecretKey::from_byte_array(
            alloy_primitives::hex::decode(
                "b71c71a67e1177ad4e901695e1b4b9ee17ae16c6668d313eac2f96dbcda3f291",
            )
            .unwrap()
            .try_into()
            .unwrap(),
        )
        .unwrap();
        let want = node_id(&signer.public_key(SECP256K1));
        let decoded: Vec<Decoded> = vectors
            .iter()
            .map(|v| decode(&alloy_primitives::hex::decode(v).unwrap()).unwrap())
            .collect();
        assert!(decoded.iter().all(|d| d.sender == want));
        let lo = Endpoint {
            ip: Some(IpAddr::from([127, 0, 0, 1])),
            udp: 3322,
            tcp: 5544,
        };
        let v6 = Endpoint {
            ip: Some("::1".parse().unwrap()),
            udp: 2222,
            tcp: 3333,
        };
        let ping = |enr_seq| {
            Packet::Ping(Ping {
                version: 4,
                from: lo,
                to: v6,
                expiration: 1136239445,
                enr_seq,
            })
        };
        assert_eq!(decoded[0].packet, ping(None));
        assert_eq!(decoded[1].packet, ping(Some(1)));
        let Packet::FindNode(f) = &decoded[2].packet else {
            panic!("not a findnode")
        };
        assert_eq!(f.expiration, 1136239445);
        assert_eq!(f.target.0[..2], [0xca, 0x63]);
        let Packet::Neighbors(n) = &decoded[3].packet else {
            panic!("not neighbors")
        };
        assert_eq!(n.nodes.len(), 4);
        assert_eq!(n.nodes[0].ip, Some(IpAddr::from([99, 33, 22, 55])));
        assert_eq!((n.nodes[0].udp, n.nodes[0].tcp), (4444, 4445));
        assert_eq!(
            n.nodes[3].ip,
            Some("2001:db8:85a3:8d3:1319:8a2e:370:7348".parse().unwrap())
        );
        assert_eq!((n.nodes[3].udp, n.nodes[3].tcp), (999, 1000));
    }

    #[test]
    fn malformed_packets_give_typed_errors() {
        let k = key(2);
        let (good, _) = Packet::EnrRequest(EnrRequest { expiration: 9 }).encode(&k);
        assert_eq!(decode(&good[..50]), Err(DecodeError::TooSmall(50)));
        assert_eq!(decode(&[0u8; 1281]), Err(DecodeError::TooLarge(1281)));
        let mut bad = good.clone();
        bad[0] ^= 1;
        assert_eq!(decode(&bad), Err(DecodeError::BadHash));
        // An unknown type, properly framed.
        let mut t = good.clone();
        t[HEAD_SIZE] = 66;
        let h = keccak256(&t[HASH_SIZE..]);
        t[..HASH_SIZE].copy_from_slice(h.as_slice());
        assert!(matches!(
            decode(&t),
            Err(DecodeError::UnknownType(66) | DecodeError::BadSignature)
        ));
        // A bad recovery id.
        let mut r = good.clone();
        r[HEAD_SIZE - 1] = 9;
        let h = keccak256(&r[HASH_SIZE..]);
        r[..HASH_SIZE].copy_from_slice(h.as_slice());
        assert_eq!(decode(&r), Err(DecodeError::BadSignature));
    }

    #[test]
    fn expiration_is_checked_against_now() {
        let p = Packet::EnrRequest(EnrRequest { expiration: 100 });
        assert!(!p.is_expired(99));
        assert!(p.is_expired(100));
        assert!(p.is_expired(101));
        // geth's testers send `-(now + 20)` as a u64: far in the past, not the future.
        let past = Packet::EnrRequest(EnrRequest {
            expiration: 0u64.wrapping_sub(120),
        });
        assert!(past.is_expired(100));
        assert!(
            !Packet::EnrRequest(EnrRequest {
                expiration: i64::MAX as u64
            })
            .is_expired(100)
        );
    }
}
