//! Node records and node addresses from outside: `Enr::decode_exact` (discv4's
//! ENRResponse, records given on the command line), their text forms (`enr:…` through
//! `FromStr`, `enode://…` through `NodeRecord::from_str`: `--bootnodes`,
//! `admin_addPeer`), and what is read out of a record (addresses, ports, the `eth` fork
//! id entry, `NodeRecord::from_enr`).
//!
//! Signatures guard records, so besides raw bytes the input may describe a record's
//! content (sequence number, keys, values) that the target signs with a fixed key. A
//! record that decodes must keep its bytes and decode from them to the same value; its
//! text form must parse back to it; a signed record whose values are well-formed RLP
//! items must decode to what was signed; an enode URL must parse back from the one it
//! prints.

#![no_main]

use alloy_rlp::Encodable;
use libfuzzer_sys::fuzz_target;
use moat_discovery::enr::{decode_eth_entry, encode_eth_entry};
use moat_discovery::{Enr, NodeRecord};
use moat_fuzz::Bytes;
use secp256k1::SecretKey;
use std::sync::OnceLock;

const KEYS: [&[u8]; 10] = [
    b"eth",
    b"id",
    b"ip",
    b"ip6",
    b"secp256k1",
    b"snap",
    b"tcp",
    b"tcp6",
    b"udp",
    b"udp6",
];

fn key() -> &'static SecretKey {
    static K: OnceLock<SecretKey> = OnceLock::new();
    K.get_or_init(|| SecretKey::from_byte_array([0x21; 32]).unwrap())
}

fn check_record(enr: &Enr) {
    let again = Enr::decode_exact(enr.as_bytes()).expect("a record's own bytes decode");
    assert_eq!(&again, enr);
    let text: Enr = enr.to_text().parse().expect("a record's text form parses");
    assert_eq!(&text, enr);
    let _ = (
        enr.ip(),
        enr.tcp(),
        enr.udp(),
        enr.ip6(),
        enr.udp6(),
        enr.tcp6(),
    );
    let _ = enr.entries().count();
    if let Some(fork) = enr.eth_fork_id() {
        assert_eq!(decode_eth_entry(&encode_eth_entry(fork)), Some(fork));
    }
    if let Some(node) = NodeRecord::from_enr(enr.clone()) {
        check_node(&node);
    }
}

fn check_node(node: &NodeRecord) {
    let url = node.enode_url();
    let back: NodeRecord = url.parse().expect("an enode URL we print parses");
    assert_eq!(
        (back.id, back.ip, back.udp, back.tcp),
        (node.id, node.ip, node.udp, node.tcp),
        "{url}"
    );
}

/// A value as an RLP item: a string, an integer, a list of strings, or raw bytes (which
/// may not be one item).
fn value(r: &mut Bytes<'_>) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    match r.u8() % 4 {
        0 => r.piece().encode(&mut out),
        1 => r.u64().encode(&mut out),
        2 => {
            let mut items = Vec::new();
            for _ in 0..r.u8() % 4 {
                r.piece().encode(&mut items);
            }
            alloy_rlp::Header {
                list: true,
                payload_length: items.len(),
            }
            .encode(&mut out);
            out.extend_from_slice(&items);
        }
        _ => return (r.piece().to_vec(), false),
    }
    (out, true)
}

fuzz_target!(|data: &[u8]| {
    let mut r = Bytes(data);
    match r.u8() % 4 {
        0 => {
            if let Ok(enr) = Enr::decode_exact(r.rest()) {
                check_record(&enr);
            }
        }
        1 => {
            let text = String::from_utf8_lossy(r.rest());
            if let Ok(enr) = text.parse::<Enr>() {
                check_record(&enr);
            }
            if let Ok(node) = text.parse::<NodeRecord>() {
                check_node(&node);
            }
        }
        _ => {
            let seq = r.u64();
            let mut pairs = Vec::new();
            let mut items_ok = true;
            for _ in 0..r.u8() % 8 {
                let k = match r.u8() {
                    n if n < 0xc0 => KEYS[n as usize % KEYS.len()].to_vec(),
                    _ => r.piece().to_vec(),
                };
                let (v, ok) = value(&mut r);
                items_ok &= ok;
                pairs.push((k, v));
            }
            let Ok(signed) = Enr::sign(key(), seq, pairs) else {
                return;
            };
            match Enr::decode_exact(signed.as_bytes()) {
                Ok(enr) => {
                    // Raw values that are not one item each read back as other entries
                    // of the same bytes; well-formed ones as what was signed.
                    if items_ok {
                        assert_eq!(enr, signed);
                    }
                    assert_eq!(enr.as_bytes(), signed.as_bytes());
                    check_record(&enr);
                }
                Err(e) => assert!(!items_ok, "a signed record of good items is refused: {e}"),
            }
        }
    }
});
