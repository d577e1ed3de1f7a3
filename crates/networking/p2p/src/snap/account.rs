//! The slim account form snap/1 carries accounts in (`[nonce, balance, root, codeHash]`
//! with the empty storage root and the empty code hash as empty strings), and back.

use alloy_primitives::{B256, KECCAK256_EMPTY};
use alloy_rlp::Encodable;
use moat_common::rlp::{self, RlpError};
use moat_trie::EMPTY_ROOT;

/// The slim form of an account's RLP (`[nonce, balance, root, codeHash]`): the empty
/// storage root and the empty code hash become empty strings.
pub fn slim_account(full: &[u8]) -> Result<Vec<u8>, RlpError> {
    let mut out = Vec::new();
    slim_account_into(full, &mut out)?;
    Ok(out)
}

/// [`slim_account`] appended to `out`: what an account range writes its accounts into,
/// one buffer for the whole answer instead of an allocation per account.
pub(super) fn slim_account_into(full: &[u8], out: &mut Vec<u8>) -> Result<(), RlpError> {
    if !slim_by_copy(full, out) {
        out.extend_from_slice(&convert_account(full, true)?);
    }
    Ok(())
}

/// The slim form of a well-formed full account, copied rather than decoded and encoded
/// again (what serving a million accounts does): nonce and balance as they stand, once
/// checked minimal, and the two hashes, the last 66 bytes, appended to `out`. `false`
/// (nothing appended) for anything else, which [`convert_account`] then reads (or
/// refuses) as before.
fn slim_by_copy(full: &[u8], out: &mut Vec<u8>) -> bool {
    let mut buf = full;
    let Ok(mut items) = rlp::list(&mut buf, "account") else {
        return false;
    };
    if !buf.is_empty() {
        return false;
    }
    let (Ok(nonce), Ok(balance)) = (items.raw_item("nonce"), items.raw_item("balance")) else {
        return false;
    };
    let hashes = items.remaining();
    if !minimal_uint(nonce, 8)
        || !minimal_uint(balance, 32)
        || hashes.len() != 66
        || hashes[0] != 0xa0
        || hashes[33] != 0xa0
    {
        return false;
    }
    let hash_items = [
        (&hashes[..33], EMPTY_ROOT),
        (&hashes[33..], KECCAK256_EMPTY),
    ];
    let slim_len = |item: &[u8], empty: B256| if item[1..] == empty[..] { 1 } else { 33 };
    let payload = nonce.len()
        + balance.len()
        + hash_items
            .iter()
            .map(|(item, empty)| slim_len(item, *empty))
            .sum::<usize>();
    alloy_rlp::Header {
        list: true,
        payload_length: payload,
    }
    .encode(out);
    out.extend_from_slice(nonce);
    out.extend_from_slice(balance);
    for (item, empty) in hash_items {
        if slim_len(item, empty) == 1 {
            out.push(alloy_rlp::EMPTY_STRING_CODE);
        } else {
            out.extend_from_slice(item);
        }
    }
    true
}

/// Whether `item` is the minimal RLP of an unsigned integer of at most `max` bytes.
fn minimal_uint(item: &[u8], max: usize) -> bool {
    match item {
        [] => false,
        [b] => *b == alloy_rlp::EMPTY_STRING_CODE || (1..0x80).contains(b),
        [h, first, ..] => {
            let n = usize::from(*h).wrapping_sub(0x80);
            n == item.len() - 1 && n <= max && n <= 55 && *first != 0 && (n > 1 || *first >= 0x80)
        }
    }
}

/// The account RLP that the trie holds, from its slim form.
pub fn full_account(slim: &[u8]) -> Result<Vec<u8>, RlpError> {
    convert_account(slim, false)
}

fn convert_account(input: &[u8], to_slim: bool) -> Result<Vec<u8>, RlpError> {
    let mut buf = input;
    let mut f = rlp::list(&mut buf, "account")?;
    if !buf.is_empty() {
        return Err(RlpError::TrailingBytes {
            field: "account",
            extra: buf.len(),
        });
    }
    let nonce = f.u64("nonce")?;
    let balance = f.u256("balance")?;
    let mut hash_field = |field, empty: B256| -> Result<B256, RlpError> {
        let b = f.bytes(field)?;
        match (b.len(), to_slim) {
            (32, _) => Ok(B256::from_slice(b)),
            (0, false) => Ok(empty),
            (found, _) => Err(RlpError::BadLength {
                field,
                expected: 32,
                found,
            }),
        }
    };
    let root = hash_field("storage root", EMPTY_ROOT)?;
    let code = hash_field("code hash", KECCAK256_EMPTY)?;
    f.finish()?;
    let mut p = Vec::with_capacity(80);
    nonce.encode(&mut p);
    balance.encode(&mut p);
    for (hash, empty) in [(root, EMPTY_ROOT), (code, KECCAK256_EMPTY)] {
        if to_slim && hash == empty {
            p.push(alloy_rlp::EMPTY_STRING_CODE);
        } else {
            hash.encode(&mut p);
        }
    }
    let mut out = Vec::with_capacity(p.len() + 2);
    rlp::encode_list_payload(&p, &mut out);
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use alloy_primitives::U256;

    /// A full account's RLP, as the trie holds it.
    pub(crate) fn full(nonce: u64, balance: u64, root: B256, code: B256) -> Vec<u8> {
        let mut p = Vec::new();
        nonce.encode(&mut p);
        U256::from(balance).encode(&mut p);
        root.encode(&mut p);
        code.encode(&mut p);
        let mut out = Vec::new();
        rlp::encode_list_payload(&p, &mut out);
        out
    }

    #[test]
    fn slim_accounts_drop_the_empty_hashes_and_come_back() {
        let plain = full(3, 4, EMPTY_ROOT, KECCAK256_EMPTY);
        let slim = slim_account(&plain).unwrap();
        assert_eq!(slim, [0xc4, 0x03, 0x04, 0x80, 0x80]);
        assert_eq!(full_account(&slim).unwrap(), plain);
        let contract = full(1, 0, B256::repeat_byte(1), B256::repeat_byte(2));
        assert_eq!(slim_account(&contract).unwrap(), contract);
        assert_eq!(full_account(&contract).unwrap(), contract);
        assert!(slim_account(&[0xc0]).is_err());
        assert!(
            slim_account(&slim).is_err(),
            "a slim account is not a trie leaf"
        );
        // The copying path gives what decoding and encoding again gives.
        let big = U256::MAX;
        for nonce in [0, 1, 127, 128, 255, 256, u64::MAX] {
            for balance in [
                U256::ZERO,
                U256::from(1),
                U256::from(0x80),
                U256::from(1u64 << 40),
                big,
            ] {
                for (root, code) in [
                    (EMPTY_ROOT, KECCAK256_EMPTY),
                    (B256::repeat_byte(1), KECCAK256_EMPTY),
                    (EMPTY_ROOT, B256::repeat_byte(2)),
                ] {
                    let mut p = Vec::new();
                    nonce.encode(&mut p);
                    balance.encode(&mut p);
                    root.encode(&mut p);
                    code.encode(&mut p);
                    let mut plain = Vec::new();
                    rlp::encode_list_payload(&p, &mut plain);
                    // Appended after what the buffer holds.
                    let mut copied = vec![7u8];
                    assert!(slim_by_copy(&plain, &mut copied));
                    assert_eq!(copied.remove(0), 7);
                    assert_eq!(copied, convert_account(&plain, true).unwrap());
                    assert_eq!(full_account(&copied).unwrap(), plain);
                }
            }
        }
        // Not minimal, or not hashes at the end: left to the decoder, which refuses.
        for bad in [
            vec![0xe3, 0x00, 0x80, 0xa0],
            [vec![0xf8, 0x45, 0x81, 0x05, 0x80], vec![0xa0; 66]].concat(),
            [vec![0xf8, 0x46, 0x82, 0x00, 0x05, 0x80], vec![0xa0; 66]].concat(),
        ] {
            let mut out = vec![7u8];
            assert!(!slim_by_copy(&bad, &mut out));
            assert_eq!(out, [7], "nothing appended");
            assert!(slim_account(&bad).is_err());
        }
    }
}
