//! Every eth/68, eth/69 and eth/70 message a peer sends (`EthMessage::decode`), and what
//! moat decodes further from them: transactions (`PooledTransaction::decode_2718`, as
//! admission does), headers (`SealedHeader::decode`, `check_headers`), bodies
//! (`Block::from_parts`, `check_bodies`), and whole blocks (`Block::decode`, as `moat
//! import` reads a chain file).
//!
//! The first byte picks the message id (every id of every version, and ids no version
//! has), the second the version; the rest is the body. Whatever decodes is encoded for the
//! same version and must decode to the same value; headers and blocks must encode to the
//! bytes they came from.

#![no_main]

use alloy_primitives::Bytes as Raw;
use libfuzzer_sys::fuzz_target;
use moat_common::PooledTransaction;
use moat_common::block::{Block, Header};
use moat_fuzz::Bytes;
use moat_p2p::SealedHeader;
use moat_p2p::eth::{EthMessage, HashOrNumber, SUPPORTED_VERSIONS};
use moat_p2p::requests::{HeadersRequest, check_bodies, check_headers};

fn headers(raw: &[Raw], r: &mut Bytes<'_>) {
    let mut sealed = Vec::new();
    for h in raw {
        if let Ok(s) = SealedHeader::decode(h.clone()) {
            assert_eq!(s.header.encoded(), &h[..], "header re-encoding differs");
            assert_eq!(s.header.hash(), s.hash);
            sealed.push(s);
        }
    }
    let origin = match sealed.first() {
        Some(s) if r.bool() => HashOrNumber::Hash(s.hash),
        Some(s) => HashOrNumber::Number(s.number()),
        None => HashOrNumber::Number(0),
    };
    let req = HeadersRequest {
        origin,
        amount: raw.len() as u64 + u64::from(r.u8() % 2),
        skip: u64::from(r.u8() % 3),
        reverse: r.bool(),
    };
    let _ = check_headers(&req, raw.to_vec());
}

fn bodies(raw: &[Raw]) {
    let header = Header::default();
    let header_rlp = header.encoded();
    for b in raw {
        if let Ok(block) = Block::from_parts(&header_rlp, b) {
            let again =
                Block::from_parts(&header_rlp, &block.encode_body()).expect("own body decodes");
            assert_eq!(again, block);
        }
    }
    let requested = SealedHeader::decode(header_rlp.into()).expect("own header decodes");
    let _ = check_bodies(&[requested], raw.to_vec());
}

fn transactions(txs: &[Raw]) {
    for env in txs {
        if let Ok(tx) = PooledTransaction::decode_2718(env) {
            assert_eq!(tx.encoded_2718(), &env[..]);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Bytes(data);
    let id = r.u8();
    let version = SUPPORTED_VERSIONS[r.u8() as usize % 3];
    if id == 0xff {
        // A block of a chain file.
        let mut rest = r.rest();
        let start = rest;
        if let Ok(block) = Block::decode(&mut rest) {
            let used = &start[..start.len() - rest.len()];
            assert_eq!(block.encode(), used, "block re-encoding differs");
        }
        return;
    }
    let id = u64::from(id % 0x20);
    let body = r.0;
    let Ok(msg) = EthMessage::decode(id, version, body) else {
        return;
    };
    let again =
        EthMessage::decode(msg.id(), version, &msg.encode(version)).expect("own message decodes");
    let msg = match msg {
        // The encoder writes the negotiated version into Status.
        EthMessage::Status(mut s) => {
            s.version = version;
            EthMessage::Status(s)
        }
        other => other,
    };
    assert_eq!(again, msg, "{} differs after a round trip", msg.name());
    let mut r = Bytes(body);
    match &msg {
        EthMessage::Transactions(txs) => transactions(txs),
        EthMessage::PooledTransactions { txs, .. } => transactions(txs),
        EthMessage::BlockHeaders { headers: h, .. } => headers(h, &mut r),
        EthMessage::BlockBodies { bodies: b, .. } => bodies(b),
        _ => {}
    }
});
