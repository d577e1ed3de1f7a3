//! Answers peers' chain queries from the store: headers, bodies and receipts.
//!
//! Every answer is capped in count and in bytes; what is not known is left out (an
//! empty answer, never a disconnect).

use crate::eth::{ETH69, ETH70, HashOrNumber};
use alloy_primitives::{B256, Bytes};
use alloy_rlp::Encodable;
use moat_common::receipt::{Receipt, decode_receipts};
use moat_common::rlp;
use moat_storage::Store;

/// Most headers, bodies or receipt lists in one answer.
pub const MAX_SERVE: usize = 1024;
/// An answer stops growing once it passes this many bytes.
pub const SOFT_RESPONSE_LIMIT: usize = 2 * 1024 * 1024;

/// Headers for a `GetBlockHeaders` query. Back from the origin without skip, the
/// answer follows parent hashes (as geth's does), so a syncing peer gets the chain of
/// the block it asked for even off our canonical chain; other queries follow the
/// canonical chain, and from an origin off it serve the origin alone (the canonical
/// blocks past it would not chain to it).
pub fn headers(
    store: &Store,
    origin: HashOrNumber,
    amount: u64,
    skip: u64,
    reverse: bool,
) -> Vec<Bytes> {
    let mut out = Vec::new();
    let Ok(Some((head, _))) = store.head() else {
        return out;
    };
    let first = match origin {
        HashOrNumber::Number(n) => n,
        HashOrNumber::Hash(h) => match store.block_number(&h) {
            Ok(Some(n)) => n,
            _ => return out,
        },
    };
    let amount = (amount as usize).min(MAX_SERVE);
    let step = skip.saturating_add(1);
    let by_parent = reverse && skip == 0;
    let off_canonical = match origin {
        HashOrNumber::Hash(h) => store.canonical_hash(first).ok().flatten() != Some(h),
        HashOrNumber::Number(_) => false,
    };
    let mut bytes = 0;
    let mut number = Some(first);
    let mut parent = None;
    while let Some(n) = number {
        if out.len() >= amount || bytes >= SOFT_RESPONSE_LIMIT {
            break;
        }
        let hash = match (out.is_empty(), origin) {
            // The origin by hash may sit off the canonical chain; serve it as asked.
            (true, HashOrNumber::Hash(h)) => Some(h),
            (false, _) if by_parent => parent,
            (false, _) if off_canonical => break,
            _ if n > head => break,
            _ => store.canonical_hash(n).ok().flatten(),
        };
        let Some(rlp) = hash.and_then(|h| store.header_rlp(&h).ok().flatten()) else {
            break;
        };
        if by_parent {
            // A stored header's first field is its parent hash.
            parent = rlp::list(&mut &rlp[..], "header")
                .and_then(|mut f| f.b256("parentHash"))
                .ok();
        }
        bytes += rlp.len();
        out.push(Bytes::from(rlp));
        number = if reverse {
            n.checked_sub(step)
        } else {
            n.checked_add(step)
        };
    }
    out
}

/// Bodies for `GetBlockBodies`; unknown hashes are skipped.
pub fn bodies(store: &Store, hashes: &[B256]) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut bytes = 0;
    for h in hashes.iter().take(MAX_SERVE) {
        if bytes >= SOFT_RESPONSE_LIMIT {
            break;
        }
        if let Ok(Some(b)) = store.body_rlp(h) {
            bytes += b.len();
            out.push(Bytes::from(b));
        }
    }
    out
}

/// eth/71: the access lists of the blocks `hashes` names, in request order, at most
/// [`MAX_SERVE`]. No block before Amsterdam (EIP-7928) has one, and this node keeps none:
/// each is answered with [`crate::eth::NO_ACCESS_LIST`], as go-ethereum answers for a
/// block it has no access list of.
pub fn access_lists(hashes: &[B256]) -> Vec<Bytes> {
    hashes
        .iter()
        .take(MAX_SERVE)
        .map(|_| Bytes::from_static(&crate::eth::NO_ACCESS_LIST))
        .collect()
}

/// A `Receipts` answer: one list per block, in the version's format, and (eth/70)
/// whether the last list was cut short.
pub fn receipts(
    store: &Store,
    version: u32,
    first_index: u64,
    hashes: &[B256],
) -> (Vec<Bytes>, bool) {
    let mut out = Vec::new();
    let mut bytes = 0;
    for (i, h) in hashes.iter().take(MAX_SERVE).enumerate() {
        if bytes >= SOFT_RESPONSE_LIMIT {
            break;
        }
        let Ok(Some(stored)) = store.receipts_rlp(h) else {
            // Geth stops at the first unknown block for eth/70 and skips it before.
            if version >= ETH70 {
                break;
            }
            continue;
        };
        if version < ETH69 {
            bytes += stored.len();
            out.push(Bytes::from(stored));
            continue;
        }
        let Ok(list) = decode_receipts(&stored) else {
            continue;
        };
        let skip = if i == 0 && version >= ETH70 {
            first_index as usize
        } else {
            0
        };
        let mut payload = Vec::new();
        let mut incomplete = false;
        for r in list.iter().skip(skip) {
            if version >= ETH70 && bytes + payload.len() >= SOFT_RESPONSE_LIMIT {
                incomplete = true;
                break;
            }
            encode_receipt_69(r, &mut payload);
        }
        let mut item = Vec::with_capacity(payload.len() + 9);
        rlp::encode_list_payload(&payload, &mut item);
        bytes += item.len();
        out.push(Bytes::from(item));
        if incomplete {
            return (out, true);
        }
    }
    (out, false)
}

/// eth/69's receipt: `[tx-type, status, cumulative-gas, logs]`, no bloom.
pub fn encode_receipt_69(r: &Receipt, out: &mut Vec<u8>) {
    let mut p = Vec::new();
    (r.tx_type as u8).encode(&mut p);
    r.success.encode(&mut p);
    r.cumulative_gas_used.encode(&mut p);
    let mut logs = Vec::new();
    for log in &r.logs {
        let mut l = Vec::new();
        log.address.encode(&mut l);
        log.data.topics().to_vec().encode(&mut l);
        log.data.data.encode(&mut l);
        rlp::encode_list_payload(&l, &mut logs);
    }
    rlp::encode_list_payload(&logs, &mut p);
    rlp::encode_list_payload(&p, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use moat_common::TxType;
    use moat_common::receipt::encode_receipts;
    use moat_storage::WriteBatch;

    fn store_with(n: u64) -> Store {
        let store = Store::in_memory();
        let mut batch = WriteBatch::new();
        for i in 0..=n {
            let hash = B256::with_last_byte(i as u8 + 1);
            // Stored under made-up hashes, linked by their parent hashes.
            let header = moat_common::block::Header {
                number: i,
                parent_hash: if i == 0 {
                    B256::ZERO
                } else {
                    B256::with_last_byte(i as u8)
                },
                ..Default::default()
            };
            batch
                .put_header(hash, i, header.encoded())
                .put_body(hash, vec![0xc3, 0xc0, 0xc0, 0xc0])
                .set_canonical(i, hash);
            let receipts: Vec<Receipt> = (0..3)
                .map(|k| Receipt {
                    tx_type: TxType::Eip1559,
                    success: true,
                    post_state: None,
                    cumulative_gas_used: 21_000 * (k + 1),
                    logs: vec![],
                })
                .collect();
            batch.put_receipts(hash, encode_receipts(&receipts));
        }
        batch.set_head(n, B256::with_last_byte(n as u8 + 1));
        store.commit(batch).unwrap();
        store
    }

    fn numbers(headers: &[Bytes]) -> Vec<u8> {
        headers
            .iter()
            .map(|h| {
                moat_common::block::Header::decode(&mut &h[..])
                    .unwrap()
                    .number as u8
            })
            .collect()
    }

    #[test]
    fn header_queries() {
        let s = store_with(20);
        let by_num = |n, amount, skip, reverse| {
            numbers(&headers(&s, HashOrNumber::Number(n), amount, skip, reverse))
        };
        assert_eq!(by_num(0, 3, 0, false), vec![0, 1, 2]);
        assert_eq!(by_num(2, 4, 2, false), vec![2, 5, 8, 11]);
        assert_eq!(by_num(10, 4, 1, true), vec![10, 8, 6, 4]);
        assert_eq!(by_num(1, 5, 0, true), vec![1, 0]);
        assert_eq!(by_num(19, 5, 0, false), vec![19, 20]);
        assert!(by_num(21, 5, 0, false).is_empty());
        assert_eq!(by_num(0, u64::MAX, u64::MAX, false), vec![0]);
        let by_hash = headers(&s, HashOrNumber::Hash(B256::with_last_byte(6)), 2, 0, false);
        assert_eq!(numbers(&by_hash), vec![5, 6]);
        let back = headers(&s, HashOrNumber::Hash(B256::with_last_byte(6)), 3, 0, true);
        assert_eq!(numbers(&back), vec![5, 4, 3]);
        // A side block (stored, not canonical) at #4 whose parent is #3.
        let mut batch = WriteBatch::new();
        let side = moat_common::block::Header {
            number: 4,
            parent_hash: B256::with_last_byte(4),
            gas_limit: 1,
            ..Default::default()
        };
        let side_hash = B256::repeat_byte(0x5e);
        batch.put_header(side_hash, 4, side.encoded());
        s.commit(batch).unwrap();
        // Back from it: its own ancestors; forward from it: itself only.
        let back = headers(&s, HashOrNumber::Hash(side_hash), 3, 0, true);
        assert_eq!(numbers(&back), vec![4, 3, 2]);
        assert_eq!(back[0].as_ref(), side.encoded());
        let fwd = headers(&s, HashOrNumber::Hash(side_hash), 3, 0, false);
        assert_eq!(fwd.len(), 1);
        let skipping = headers(&s, HashOrNumber::Hash(side_hash), 3, 1, true);
        assert_eq!(skipping.len(), 1);
        assert!(headers(&s, HashOrNumber::Hash(B256::repeat_byte(9)), 2, 0, false).is_empty());
    }

    #[test]
    fn bodies_skip_unknown() {
        let s = store_with(3);
        let got = bodies(
            &s,
            &[B256::with_last_byte(1), B256::ZERO, B256::with_last_byte(3)],
        );
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn receipts_per_version() {
        let s = store_with(2);
        let hashes = [B256::with_last_byte(1), B256::with_last_byte(2)];
        let (v68, _) = receipts(&s, 68, 0, &hashes);
        assert_eq!(
            v68[0].as_ref(),
            s.receipts_rlp(&hashes[0]).unwrap().unwrap()
        );
        let (v69, incomplete) = receipts(&s, 69, 0, &hashes);
        assert!(!incomplete);
        let mut f = rlp::Fields::new(&v69[0][..], "x");
        let mut list = f.list("block").unwrap();
        let mut first = list.list("receipt").unwrap();
        assert_eq!(first.u8("type").unwrap(), 2);
        assert!(first.bool("status").unwrap());
        assert_eq!(first.u64("gas").unwrap(), 21_000);
        // eth/70 starts the first block at the given index.
        let (v70, _) = receipts(&s, 70, 2, &hashes);
        let mut f = rlp::Fields::new(&v70[0][..], "x");
        let mut list = f.list("block").unwrap();
        let mut only = list.list("receipt").unwrap();
        only.u8("type").unwrap();
        only.bool("status").unwrap();
        assert_eq!(only.u64("gas").unwrap(), 63_000);
        assert!(list.is_empty());
    }
}
