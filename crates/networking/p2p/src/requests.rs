//! Chain requests this node makes of its peers (headers and bodies, for sync), and the
//! checks their answers must pass before anything else sees them.
//!
//! ```text
//!  syncer ─▶ Network::get_headers / get_bodies ─▶ per-peer slot (at most
//!           MAX_IN_FLIGHT) ─▶ GetBlockHeaders / GetBlockBodies with a fresh request id
//!  peer task ─▶ BlockHeaders / BlockBodies ─▶ pending request of that id? ─▶ waiting caller
//!           (none: a late or unsolicited answer, counted and dropped)
//!  caller ─▶ check_headers / check_bodies ─▶ typed headers / blocks, or a fault
//!           (the peer is dropped) ─▶ timeout: a reputation penalty
//! ```
//!
//! What an answer may be: fewer items than asked (a peer serves what it has), never
//! more; headers decode strictly, start at the origin asked for, step by `skip + 1` and,
//! without skip, chain by hash; each body matches its header's transactions root,
//! ommers hash and withdrawals root. Anything else is a lie or garbage and costs the peer
//! its connection. Nothing here panics on what a peer sends.

use crate::eth::HashOrNumber;
use crate::rlpx::PeerId;
use alloy_primitives::{B256, Bytes, keccak256};
use moat_common::block::{Block, Header};
use moat_common::rlp;
use std::time::Duration;

/// How long a peer has to answer a request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Sync requests one peer may have outstanding at once.
pub const MAX_IN_FLIGHT: usize = 4;
/// Most headers asked for in one request (what geth and moat serve at most).
pub const MAX_HEADERS: u64 = 1024;
/// Most bodies asked for in one request.
pub const MAX_BODIES: usize = 1024;

/// A header as a peer sent it: decoded, with its hash and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedHeader {
    /// The decoded header.
    pub header: Header,
    /// keccak256 of `raw`: the block hash.
    pub hash: B256,
    /// The header's RLP as received.
    pub raw: Bytes,
}

impl SealedHeader {
    /// Decodes one header; its hash is the keccak of exactly these bytes (the decoder
    /// takes canonical RLP only, so they are the bytes every node hashes).
    pub fn decode(raw: Bytes) -> Result<Self, String> {
        let mut buf = &raw[..];
        let header = Header::decode(&mut buf).map_err(|e| e.to_string())?;
        if !buf.is_empty() {
            return Err(format!("{} bytes after a header", buf.len()));
        }
        Ok(Self {
            hash: keccak256(&raw),
            header,
            raw,
        })
    }

    /// The block number.
    pub fn number(&self) -> u64 {
        self.header.number
    }
}

/// A `GetBlockHeaders` query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadersRequest {
    /// The first header wanted.
    pub origin: HashOrNumber,
    /// Most headers wanted (at most [`MAX_HEADERS`]).
    pub amount: u64,
    /// Headers left out between two returned (0 for consecutive).
    pub skip: u64,
    /// Walk towards genesis instead of towards the head.
    pub reverse: bool,
}

impl HeadersRequest {
    /// `amount` headers from `hash` towards genesis, each the parent of the one before.
    pub fn back_from(hash: B256, amount: u64) -> Self {
        Self {
            origin: HashOrNumber::Hash(hash),
            amount,
            skip: 0,
            reverse: true,
        }
    }
}

/// Why a request gave nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The peer is not (or no longer) connected.
    #[error("peer is not connected")]
    NotConnected,
    /// The peer already has its most requests in flight.
    #[error("peer already has {MAX_IN_FLIGHT} requests in flight")]
    Busy,
    /// Asks for more items than a peer serves (the count asked).
    #[error("request of {0} items is larger than a peer serves")]
    TooLarge(usize),
    /// No answer within the request timeout.
    #[error("no answer within the timeout")]
    Timeout,
    /// The peer disconnected before answering.
    #[error("peer disconnected before answering")]
    Disconnected,
    /// The answer broke the rules; the peer has been dropped for it.
    #[error("bad answer (peer dropped): {0}")]
    BadAnswer(String),
}

/// What the sync layer knows of a connected peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncPeer {
    /// The peer's node id.
    pub id: PeerId,
    /// The eth version negotiated (68, 69 or 70).
    pub eth_version: u32,
    /// The head it announced (Status, or eth/69's latest BlockRangeUpdate).
    pub head: B256,
    /// eth/69+: the block range it serves; `None` for eth/68 peers, which say only
    /// their head hash.
    pub range: Option<(u64, u64)>,
    /// Our requests to it not yet answered.
    pub in_flight: usize,
    /// Its score: starts at 0, lowered by penalties.
    pub reputation: i64,
}

/// Checks a `BlockHeaders` answer against its request and decodes it.
pub fn check_headers(req: &HeadersRequest, raw: Vec<Bytes>) -> Result<Vec<SealedHeader>, String> {
    if raw.len() as u64 > req.amount {
        return Err(format!(
            "{} headers for a request of {}",
            raw.len(),
            req.amount
        ));
    }
    let step = req.skip.saturating_add(1);
    let mut out: Vec<SealedHeader> = Vec::with_capacity(raw.len());
    for (i, bytes) in raw.into_iter().enumerate() {
        let h = SealedHeader::decode(bytes).map_err(|e| format!("header {i}: {e}"))?;
        match out.last() {
            None => match req.origin {
                HashOrNumber::Hash(origin) if h.hash != origin => {
                    return Err(format!("first header is {}, asked for {origin}", h.hash));
                }
                HashOrNumber::Number(n) if h.number() != n => {
                    return Err(format!("first header is #{}, asked for #{n}", h.number()));
                }
                _ => {}
            },
            Some(prev) => {
                let expected = if req.reverse {
                    prev.number().checked_sub(step)
                } else {
                    prev.number().checked_add(step)
                };
                if expected != Some(h.number()) {
                    return Err(format!(
                        "header {i} is #{} after #{} (skip {})",
                        h.number(),
                        prev.number(),
                        req.skip
                    ));
                }
                let linked = match (req.skip, req.reverse) {
                    (0, true) => prev.header.parent_hash == h.hash,
                    (0, false) => h.header.parent_hash == prev.hash,
                    _ => true,
                };
                if !linked {
                    return Err(format!(
                        "header #{} does not chain to #{}",
                        h.number(),
                        prev.number()
                    ));
                }
            }
        }
        out.push(h);
    }
    Ok(out)
}

/// The roots a body must match in its header.
fn body_roots(block: &Block) -> (B256, B256, Option<B256>) {
    let mut ommers = Vec::new();
    for o in &block.ommers {
        o.encode(&mut ommers);
    }
    let mut list = Vec::with_capacity(ommers.len() + 9);
    rlp::encode_list_payload(&ommers, &mut list);
    (
        block.transactions_root(),
        keccak256(&list),
        block.withdrawals_root(),
    )
}

fn header_roots(h: &Header) -> (B256, B256, Option<B256>) {
    (h.transactions_root, h.ommers_hash, h.withdrawals_root)
}

/// Checks a `BlockBodies` answer against the headers asked for (in request order) and
/// makes blocks of it. A peer may leave out bodies it lacks, so each body is matched to
/// the next header, in order, whose roots it has: two headers with equal roots commit to
/// equal bodies, so a match can never put the wrong transactions in a block.
pub fn check_bodies(requested: &[SealedHeader], raw: Vec<Bytes>) -> Result<Vec<Block>, String> {
    if raw.len() > requested.len() {
        return Err(format!(
            "{} bodies for a request of {}",
            raw.len(),
            requested.len()
        ));
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut next = 0;
    for (i, body) in raw.iter().enumerate() {
        let Some(first) = requested.get(next) else {
            return Err(format!("body {i} matches no requested header"));
        };
        let mut block =
            Block::from_parts(&first.raw, body).map_err(|e| format!("body {i}: {e}"))?;
        let roots = body_roots(&block);
        let Some(found) = requested[next..]
            .iter()
            .position(|h| header_roots(&h.header) == roots)
        else {
            return Err(format!(
                "body {i} (transactions root {}) matches no requested header",
                roots.0
            ));
        };
        let header = &requested[next + found];
        if found != 0 {
            block.header = header.header.clone();
        }
        block.hash = header.hash;
        next += found + 1;
        out.push(block);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::Address;
    use moat_common::transaction::{Eip1559Tx, SignedTransaction, Transaction};

    /// A chain of `n` headers with empty bodies except where `with_tx` says.
    fn chain(n: u64, with_tx: &[u64]) -> Vec<(SealedHeader, Bytes)> {
        let signer = moat_crypto::secp::Signer::from_bytes(&B256::repeat_byte(1)).unwrap();
        let mut out: Vec<(SealedHeader, Bytes)> = Vec::new();
        let mut parent = B256::ZERO;
        for number in 0..n {
            let mut block = Block {
                header: Header {
                    parent_hash: parent,
                    ommers_hash: moat_common::constants::EMPTY_OMMERS_HASH,
                    number,
                    gas_limit: 30_000_000,
                    timestamp: number * 12,
                    base_fee_per_gas: Some(7),
                    ..Default::default()
                },
                hash: B256::ZERO,
                transactions: Vec::new(),
                ommers: Vec::new(),
                withdrawals: Some(Vec::new()),
            };
            if with_tx.contains(&number) {
                let tx = Transaction::Eip1559(Eip1559Tx {
                    chain_id: 1,
                    nonce: number,
                    gas_limit: 21_000,
                    max_fee_per_gas: 10,
                    to: alloy_primitives::TxKind::Call(Address::repeat_byte(2)),
                    ..Default::default()
                });
                block
                    .transactions
                    .push(SignedTransaction::sign(tx, &signer));
            }
            block.header.transactions_root = block.transactions_root();
            block.header.withdrawals_root = block.withdrawals_root();
            let raw = Bytes::from(block.header.encoded());
            let sealed = SealedHeader::decode(raw).unwrap();
            parent = sealed.hash;
            out.push((sealed, Bytes::from(block.encode_body())));
        }
        out
    }

    fn raws(c: &[(SealedHeader, Bytes)]) -> Vec<Bytes> {
        c.iter().map(|(h, _)| h.raw.clone()).collect()
    }

    #[test]
    fn headers_must_start_at_the_origin_and_chain() {
        let c = chain(10, &[]);
        let back: Vec<_> = c.iter().rev().cloned().collect();
        let req = HeadersRequest::back_from(c[9].0.hash, 5);
        let got = check_headers(&req, raws(&back[..5])).unwrap();
        assert_eq!(got.len(), 5);
        assert_eq!(got[4].number(), 5);
        // Fewer than asked is fine, none too.
        assert_eq!(check_headers(&req, raws(&back[..2])).unwrap().len(), 2);
        assert!(check_headers(&req, Vec::new()).unwrap().is_empty());
        // More than asked.
        assert!(check_headers(&req, raws(&back[..6])).is_err());
        // Not the origin.
        assert!(check_headers(&req, raws(&back[1..4])).is_err());
        // A gap, a wrong order, a duplicate.
        let mut gap = raws(&back[..5]);
        gap.remove(2);
        assert!(check_headers(&req, gap).is_err());
        let forward = HeadersRequest {
            origin: HashOrNumber::Number(3),
            amount: 4,
            skip: 0,
            reverse: false,
        };
        assert_eq!(check_headers(&forward, raws(&c[3..7])).unwrap().len(), 4);
        let mut dup = raws(&c[3..6]);
        dup.push(dup[2].clone());
        assert!(check_headers(&forward, dup).is_err());
        let mut swapped = raws(&c[3..7]);
        swapped.swap(1, 2);
        assert!(check_headers(&forward, swapped).is_err());
        // With skip, numbers step by skip + 1.
        let skipping = HeadersRequest {
            origin: HashOrNumber::Number(0),
            amount: 3,
            skip: 2,
            reverse: false,
        };
        let stepped = vec![c[0].0.raw.clone(), c[3].0.raw.clone(), c[6].0.raw.clone()];
        assert_eq!(check_headers(&skipping, stepped).unwrap().len(), 3);
        assert!(check_headers(&skipping, raws(&c[0..3])).is_err());
    }

    #[test]
    fn a_header_that_lies_about_its_chain_is_refused() {
        let c = chain(4, &[]);
        // Same numbers, but the parent hash of #2 is not #1's hash.
        let mut forged = c[2].0.header.clone();
        forged.parent_hash = B256::repeat_byte(9);
        let req = HeadersRequest {
            origin: HashOrNumber::Number(1),
            amount: 2,
            skip: 0,
            reverse: false,
        };
        let bad = vec![c[1].0.raw.clone(), Bytes::from(forged.encoded())];
        assert!(check_headers(&req, bad).is_err());
    }

    #[test]
    fn garbage_headers_are_errors_not_panics() {
        let req = HeadersRequest::back_from(B256::ZERO, 3);
        for junk in [
            vec![Bytes::new()],
            vec![Bytes::from_static(&[0xc0])],
            vec![Bytes::from_static(&[0x80])],
            vec![Bytes::from_static(&[0xf9, 0xff])],
        ] {
            assert!(check_headers(&req, junk).is_err());
        }
        assert!(check_headers(&HeadersRequest { amount: 0, ..req }, vec![Bytes::new()]).is_err());
    }

    #[test]
    fn bodies_must_match_their_headers() {
        let c = chain(6, &[2, 4]);
        let headers: Vec<SealedHeader> = c[1..6].iter().map(|(h, _)| h.clone()).collect();
        let bodies: Vec<Bytes> = c[1..6].iter().map(|(_, b)| b.clone()).collect();
        let blocks = check_bodies(&headers, bodies.clone()).unwrap();
        assert_eq!(blocks.len(), 5);
        for (b, h) in blocks.iter().zip(&headers) {
            assert_eq!(b.hash, h.hash);
            assert_eq!(b.header, h.header);
        }
        assert_eq!(blocks[1].transactions.len(), 1);
        // A body left out: the rest still land on their own headers.
        let partial = vec![bodies[0].clone(), bodies[3].clone()];
        let blocks = check_bodies(&headers, partial).unwrap();
        assert_eq!(blocks[1].hash, headers[3].hash);
        assert_eq!(blocks[1].header.number, 4);
        // Too many, out of order, a body of another block, garbage.
        let mut more = bodies.clone();
        more.push(bodies[0].clone());
        assert!(check_bodies(&headers, more).is_err());
        let swapped = vec![bodies[3].clone(), bodies[1].clone()];
        assert!(check_bodies(&headers, swapped).is_err());
        let foreign = chain(6, &[1]);
        assert!(check_bodies(&headers[..1], vec![foreign[1].1.clone()]).is_err());
        assert!(check_bodies(&headers, vec![Bytes::from_static(&[0xc1, 0x80])]).is_err());
        assert!(check_bodies(&headers, vec![Bytes::new()]).is_err());
        // Withdrawals missing where the header has a root.
        let no_withdrawals = Bytes::from_static(&[0xc2, 0xc0, 0xc0]);
        assert!(check_bodies(&headers[..1], vec![no_withdrawals]).is_err());
    }
}
