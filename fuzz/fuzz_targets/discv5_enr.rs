//! discv5 as moat's code sees it. The `discv5` crate owns the socket, the packets and
//! the sessions; what reaches moat are the records it hands out (found nodes, table
//! entries), which moat turns into its own (`discv5::from_v5`, then
//! `NodeRecord::from_enr`) to dial them, and the records moat gives it
//! (`discv5::to_v5`: bootnodes, records discv4 fetched).
//!
//! The input is a record as the crate decodes it from a NODES response (raw bytes, or a
//! content the target signs so that the signature holds). Whatever the crate accepts
//! must convert without panicking; a record both sides accept must be the same record
//! on both (same bytes), and convert back to the crate's the same.

#![no_main]

use alloy_rlp::{Decodable, Encodable};
use libfuzzer_sys::fuzz_target;
use moat_discovery::discv5::{V5Enr, from_v5, to_v5};
use moat_discovery::{Enr, NodeRecord};
use moat_fuzz::Bytes;
use secp256k1::SecretKey;
use std::sync::OnceLock;

const KEYS: [&[u8]; 8] = [
    b"eth", b"ip", b"ip6", b"snap", b"tcp", b"tcp6", b"udp", b"udp6",
];

fn key() -> &'static SecretKey {
    static K: OnceLock<SecretKey> = OnceLock::new();
    K.get_or_init(|| SecretKey::from_byte_array([0x22; 32]).unwrap())
}

fn from_crate(bytes: &[u8]) {
    let mut buf = bytes;
    let Ok(v5) = V5Enr::decode(&mut buf) else {
        return;
    };
    let ours = from_v5(&v5);
    let Some(ours) = ours else {
        return;
    };
    assert_eq!(ours.as_bytes(), alloy_rlp::encode(&v5), "records differ");
    assert_eq!(ours.id(), moat_discovery::node_id(&public(&v5)));
    let back = to_v5(&ours).expect("a record from the crate goes back to it");
    assert_eq!(back, v5);
    if let Some(node) = NodeRecord::from_enr(ours) {
        let _ = (node.udp_addr(), node.tcp_addr(), node.fork_id());
    }
}

/// The crate's view of the record's key, uncompressed.
fn public(v5: &V5Enr) -> secp256k1::PublicKey {
    let raw = v5
        .get_raw_rlp("secp256k1")
        .expect("a v4 record has its key");
    let mut item = raw;
    let bytes = alloy_rlp::Header::decode_bytes(&mut item, false).expect("the key is a string");
    secp256k1::PublicKey::from_slice(bytes).expect("the crate checked the key")
}

fuzz_target!(|data: &[u8]| {
    let mut r = Bytes(data);
    if r.u8() < 0x40 {
        from_crate(r.rest());
        return;
    }
    let seq = r.u64();
    let mut pairs = Vec::new();
    for _ in 0..r.u8() % 8 {
        let k = KEYS[r.u8() as usize % KEYS.len()].to_vec();
        let mut v = Vec::new();
        match r.u8() % 3 {
            0 => r.piece().encode(&mut v),
            1 => u64::from(r.u16()).encode(&mut v),
            _ => v.extend_from_slice(r.piece()),
        }
        pairs.push((k, v));
    }
    let Ok(signed) = Enr::sign(key(), seq, pairs) else {
        return;
    };
    from_crate(signed.as_bytes());
    // Raw values that are not one item each read back as other entries of the same
    // bytes: what goes to the crate is the record as decoded.
    if let Ok(ours) = Enr::decode_exact(signed.as_bytes())
        && let Ok(v5) = to_v5(&ours)
    {
        assert_eq!(from_v5(&v5).as_ref(), Some(&ours));
    }
});
