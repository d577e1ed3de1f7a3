//! discv4 packets as the UDP service reads them (`packet::decode`): size limits, hash,
//! signature recovery, then the six bodies (and the ENR an ENRResponse carries).
//!
//! Random bytes rarely carry a matching hash, so after a mode byte the input is mostly a
//! packet type and body that the target signs and frames as a sender would; raw
//! datagrams are tried too. A decoded packet must name the signer as its sender, and
//! encode (signed again) to a packet that decodes to the same value.

#![no_main]

use alloy_primitives::keccak256;
use libfuzzer_sys::fuzz_target;
use moat_discovery::packet::{self, Packet};
use moat_discovery::{NodeRecord, is_lan, node_id, public_key, relay_allowed};
use secp256k1::{Message, SECP256K1, SecretKey};
use std::sync::OnceLock;

fn key() -> &'static SecretKey {
    static K: OnceLock<SecretKey> = OnceLock::new();
    K.get_or_init(|| SecretKey::from_byte_array([0x11; 32]).unwrap())
}

/// `hash || signature || type || body`, signed by [`key`].
fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; 97];
    out.push(kind);
    out.extend_from_slice(body);
    let digest = keccak256(&out[97..]);
    let (recid, rs) = SECP256K1
        .sign_ecdsa_recoverable(Message::from_digest(digest.0), key())
        .serialize_compact();
    out[32..96].copy_from_slice(&rs);
    out[96] = i32::from(recid) as u8;
    let hash = keccak256(&out[32..]);
    out[..32].copy_from_slice(hash.as_slice());
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let signed;
    let wire = if mode < 0x10 {
        rest
    } else {
        let Some((&kind, body)) = rest.split_first() else {
            return;
        };
        signed = frame(kind % 8, body);
        &signed[..]
    };
    let Ok(decoded) = packet::decode(wire) else {
        return;
    };
    assert_eq!(decoded.hash, keccak256(&wire[32..]));
    if mode >= 0x10 {
        assert_eq!(decoded.sender, node_id(&key().public_key(SECP256K1)));
    }
    let (again, hash) = decoded.packet.encode(key());
    let back = packet::decode(&again).expect("own packet decodes");
    assert_eq!(back.packet, decoded.packet);
    assert_eq!(back.hash, hash);
    // What the service takes from the packet: nodes from Neighbors, a record from
    // ENRResponse.
    match &decoded.packet {
        Packet::EnrResponse(r) => {
            let _ = NodeRecord::from_enr(r.enr.clone());
        }
        Packet::Neighbors(n) => {
            let sender = std::net::IpAddr::from([203, 0, 113, 9]);
            for node in &n.nodes {
                if let Some(ip) = node.ip {
                    let _ = relay_allowed(&sender, &ip);
                    let _ = is_lan(&ip);
                }
                let _ = public_key(&node.id);
            }
        }
        _ => {}
    }
});
