//! The decoders never panic: random bytes, mutated valid packets, and arbitrary bodies
//! in properly signed frames (so the RLP parser itself is reached) all end in a value
//! or a typed error. Valid packets round-trip.

use alloy_primitives::{B256, B512, keccak256};
use moat_discovery::enr::{Enr, EnrFields};
use moat_discovery::packet::{
    self, Endpoint, EnrRequest, EnrResponse, FindNode, Neighbor, Neighbors, Packet, Ping, Pong,
};
use proptest::prelude::*;
use secp256k1::{Message, SECP256K1, SecretKey};
use std::net::IpAddr;

fn key() -> SecretKey {
    SecretKey::from_byte_array([0x11; 32]).unwrap()
}

/// Frames `type || body` as a sender would: signature, then hash.
fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; 97];
    out.push(kind);
    out.extend_from_slice(body);
    let digest = keccak256(&out[97..]);
    let (recid, rs) = SECP256K1
        .sign_ecdsa_recoverable(Message::from_digest(digest.0), &key())
        .serialize_compact();
    out[32..96].copy_from_slice(&rs);
    out[96] = i32::from(recid) as u8;
    refresh_hash(&mut out);
    out
}

fn refresh_hash(p: &mut [u8]) {
    if p.len() >= 32 {
        let h = keccak256(&p[32..]);
        p[..32].copy_from_slice(h.as_slice());
    }
}

fn ip() -> impl Strategy<Value = Option<IpAddr>> {
    prop_oneof![
        Just(None),
        any::<[u8; 4]>().prop_map(|b| Some(IpAddr::from(b))),
        any::<[u8; 16]>().prop_map(|b| {
            let v6 = std::net::Ipv6Addr::from(b);
            Some(match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(v6),
            })
        }),
    ]
}

fn endpoint() -> impl Strategy<Value = Endpoint> {
    (ip(), any::<u16>(), any::<u16>()).prop_map(|(ip, udp, tcp)| Endpoint { ip, udp, tcp })
}

fn packet_strategy() -> impl Strategy<Value = Packet> {
    prop_oneof![
        (
            any::<u64>(),
            endpoint(),
            endpoint(),
            any::<u64>(),
            any::<Option<u64>>()
        )
            .prop_map(
                |(version, from, to, expiration, enr_seq)| Packet::Ping(Ping {
                    version,
                    from,
                    to,
                    expiration,
                    enr_seq
                })
            ),
        (
            endpoint(),
            any::<[u8; 32]>(),
            any::<u64>(),
            any::<Option<u64>>()
        )
            .prop_map(|(to, h, expiration, enr_seq)| Packet::Pong(Pong {
                to,
                ping_hash: B256::from(h),
                expiration,
                enr_seq
            })),
        (any::<[u8; 32]>(), any::<[u8; 32]>(), any::<u64>()).prop_map(|(a, b, expiration)| {
            let mut t = [0u8; 64];
            t[..32].copy_from_slice(&a);
            t[32..].copy_from_slice(&b);
            Packet::FindNode(FindNode {
                target: B512::from(t),
                expiration,
            })
        }),
        (
            proptest::collection::vec((ip(), any::<u16>(), any::<u16>(), any::<u8>()), 0..12),
            any::<u64>()
        )
            .prop_map(|(nodes, expiration)| Packet::Neighbors(Neighbors {
                nodes: nodes
                    .into_iter()
                    .map(|(ip, udp, tcp, b)| Neighbor {
                        ip,
                        udp,
                        tcp,
                        id: B512::repeat_byte(b),
                    })
                    .collect(),
                expiration
            })),
        any::<u64>().prop_map(|expiration| Packet::EnrRequest(EnrRequest { expiration })),
        (any::<[u8; 32]>(), any::<u64>()).prop_map(|(h, seq)| {
            let enr = Enr::build(&key(), seq, &EnrFields::default()).unwrap();
            Packet::EnrResponse(EnrResponse {
                request_hash: B256::from(h),
                enr,
            })
        }),
    ]
}

/// Item-shaped bytes: RLP-like prefixes the parser has to look into.
fn rlpish() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        prop_oneof![
            any::<u8>(),
            Just(0x80u8),
            Just(0xb8u8),
            Just(0xbfu8),
            Just(0xc0u8),
            Just(0xf8u8),
            Just(0xffu8),
        ],
        0..200,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1400)) {
        let _ = packet::decode(&bytes);
        let _ = Enr::decode_exact(&bytes);
    }

    #[test]
    fn signed_random_bodies_never_panic(kind in 0u8..8, body in rlpish()) {
        let _ = packet::decode(&frame(kind, &body));
        let mut wrapped = vec![0xf8, body.len().min(255) as u8];
        wrapped.extend_from_slice(&body);
        let _ = packet::decode(&frame(kind, &wrapped));
        let _ = Enr::decode_exact(&wrapped);
    }

    #[test]
    fn packets_round_trip(p in packet_strategy()) {
        let (bytes, hash) = p.encode(&key());
        prop_assert!(bytes.len() <= packet::MAX_PACKET_SIZE);
        let d = packet::decode(&bytes).unwrap();
        prop_assert_eq!(d.hash, hash);
        prop_assert_eq!(d.packet, p);
    }

    #[test]
    fn mutated_packets_never_panic(
        p in packet_strategy(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in any::<usize>(),
        tail in proptest::collection::vec(any::<u8>(), 0..16),
        rehash in any::<bool>(),
    ) {
        let (mut bytes, _) = p.encode(&key());
        // Mutate the body (past the header), keep a valid hash so parsing is reached.
        for (at, v) in edits {
            let i = 97 + at % (bytes.len() - 97);
            bytes[i] = v;
        }
        if cut % 3 == 0 {
            bytes.truncate(98 + cut % (bytes.len() - 97));
        }
        bytes.extend_from_slice(&tail);
        if rehash {
            refresh_hash(&mut bytes);
        }
        let _ = packet::decode(&bytes);
    }

    #[test]
    fn mutated_records_never_panic(
        seq in any::<u64>(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
    ) {
        let enr = Enr::build(&key(), seq, &EnrFields {
            ip: Some(IpAddr::from([1, 2, 3, 4])),
            tcp: Some(1),
            udp: Some(2),
            fork_id: Some(moat_discovery::ForkId { hash: [1, 2, 3, 4], next: seq }),
        }).unwrap();
        let mut raw = enr.as_bytes().to_vec();
        for (at, v) in edits {
            let i = at % raw.len();
            raw[i] = v;
        }
        if let Ok(e) = Enr::decode_exact(&raw) {
            // Whatever still verifies reads without panicking.
            let _ = (e.ip(), e.tcp(), e.udp(), e.eth_fork_id(), e.to_text());
            // And crosses to the discv5 crate's type and back unchanged.
            if let Ok(v5) = moat_discovery::discv5::to_v5(&e) {
                prop_assert_eq!(moat_discovery::discv5::from_v5(&v5), Some(e));
            }
        }
        // The discv5 crate's own decoder on the mutated bytes: a value or an error.
        if let Ok(v5) = alloy_rlp::Decodable::decode(&mut raw.as_slice()) {
            let v5: moat_discovery::discv5::V5Enr = v5;
            let _ = moat_discovery::discv5::from_v5(&v5);
        }
    }

    #[test]
    fn bootnode_strings_never_panic(
        text in "(enode://|enr:-|enr:)?[0-9a-zA-Z_@:.?=&/-]{0,200}",
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let _ = text.parse::<moat_discovery::NodeRecord>();
        let _ = String::from_utf8_lossy(&bytes).parse::<moat_discovery::NodeRecord>();
        let _ = moat_discovery::bootnodes::PublicNetwork::from_name(&text);
    }
}
