//! Key and value layouts of every table.
//!
//! Keys are fixed-width big-endian so that byte order is numeric order: the canonical
//! index can be cut above a block number with one range delete, and an account's storage
//! is one contiguous range under its address. Values are fixed layouts rather than RLP:
//! they never leave the node, and a length check is all the validation they need.

use crate::error::StoreError;
use crate::{Account, ChainMeta, TxLocation};
use alloy_primitives::{Address, B256, U256};

/// Keys of the meta table.
pub(crate) const META_CHAIN: &[u8] = b"chain_meta";
pub(crate) const META_HEAD: &[u8] = b"head";
/// The consensus layer's safe and finalized blocks (its last forkchoiceUpdated).
pub(crate) const META_SAFE: &[u8] = b"safe";
pub(crate) const META_FINALIZED: &[u8] = b"finalized";
pub(crate) const META_SCHEMA: &[u8] = b"schema_version";

/// Bumped whenever a table or layout below changes incompatibly.
pub(crate) const SCHEMA_VERSION: u32 = 1;

const ACCOUNT_LEN: usize = 8 + 32 + 32 + 32;

pub(crate) fn number_key(number: u64) -> [u8; 8] {
    number.to_be_bytes()
}

pub(crate) fn storage_key(address: &Address, slot: &B256) -> [u8; 52] {
    let mut key = [0u8; 52];
    key[..20].copy_from_slice(address.as_slice());
    key[20..].copy_from_slice(slot.as_slice());
    key
}

/// Key of a trie node: owner ‖ the path's nibbles packed two a byte ‖ the path length.
/// The length makes paths of odd and even length distinct; all keys of one owner share
/// the owner as prefix.
pub fn trie_node_key(owner: &B256, path: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(32 + path.len().div_ceil(2) + 1);
    key.extend_from_slice(owner.as_slice());
    for pair in path.chunks(2) {
        key.push((pair[0] << 4) | pair.get(1).copied().unwrap_or(0));
    }
    key.push(path.len() as u8);
    key
}

/// The path of a trie node key (inverse of [`trie_node_key`] after the owner).
pub fn trie_node_path(key: &[u8]) -> Result<Vec<u8>, StoreError> {
    let bad = || StoreError::Corrupt(format!("trie node key of {} bytes", key.len()));
    let (len, packed) = key.get(32..).and_then(|k| k.split_last()).ok_or_else(bad)?;
    let len = *len as usize;
    if packed.len() != len.div_ceil(2) {
        return Err(bad());
    }
    Ok(packed
        .iter()
        .flat_map(|b| [b >> 4, b & 0x0f])
        .take(len)
        .collect())
}

/// First and last possible trie node key of `owner`, both inclusive.
pub fn trie_owner_bounds(owner: &B256) -> (Vec<u8>, Vec<u8>) {
    let mut end = owner.to_vec();
    end.extend_from_slice(&[0xff; 34]);
    (owner.to_vec(), end)
}

/// First and last possible storage key of `address`, both inclusive.
pub(crate) fn storage_bounds(address: &Address) -> ([u8; 52], [u8; 52]) {
    (
        storage_key(address, &B256::ZERO),
        storage_key(address, &B256::repeat_byte(0xff)),
    )
}

fn fixed<const N: usize>(bytes: &[u8], what: &str) -> Result<[u8; N], StoreError> {
    bytes.try_into().map_err(|_| {
        StoreError::Corrupt(format!("{what}: expected {N} bytes, found {}", bytes.len()))
    })
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_be_bytes(word)
}

pub(crate) fn decode_number(bytes: &[u8], what: &str) -> Result<u64, StoreError> {
    Ok(u64::from_be_bytes(fixed::<8>(bytes, what)?))
}

pub(crate) fn decode_b256(bytes: &[u8], what: &str) -> Result<B256, StoreError> {
    Ok(B256::from(fixed::<32>(bytes, what)?))
}

pub(crate) fn decode_address(bytes: &[u8], what: &str) -> Result<Address, StoreError> {
    Ok(Address::from(fixed::<20>(bytes, what)?))
}

/// Layout shared by the chain meta (chain id, genesis hash) and the head (number, hash).
pub(crate) fn encode_number_hash(number: u64, hash: &B256) -> [u8; 40] {
    let mut out = [0u8; 40];
    out[..8].copy_from_slice(&number.to_be_bytes());
    out[8..].copy_from_slice(hash.as_slice());
    out
}

pub(crate) fn decode_number_hash(bytes: &[u8], what: &str) -> Result<(u64, B256), StoreError> {
    let raw = fixed::<40>(bytes, what)?;
    Ok((u64_at(&raw, 0), B256::from_slice(&raw[8..])))
}

pub(crate) fn encode_meta(meta: &ChainMeta) -> [u8; 40] {
    encode_number_hash(meta.chain_id, &meta.genesis_hash)
}

pub(crate) fn decode_meta(bytes: &[u8]) -> Result<ChainMeta, StoreError> {
    let (chain_id, genesis_hash) = decode_number_hash(bytes, "chain meta")?;
    Ok(ChainMeta {
        chain_id,
        genesis_hash,
    })
}

pub(crate) fn encode_account(account: &Account) -> [u8; ACCOUNT_LEN] {
    let mut out = [0u8; ACCOUNT_LEN];
    out[..8].copy_from_slice(&account.nonce.to_be_bytes());
    out[8..40].copy_from_slice(&account.balance.to_be_bytes::<32>());
    out[40..72].copy_from_slice(account.code_hash.as_slice());
    out[72..].copy_from_slice(account.storage_root.as_slice());
    out
}

pub(crate) fn decode_account(bytes: &[u8]) -> Result<Account, StoreError> {
    let raw = fixed::<ACCOUNT_LEN>(bytes, "account")?;
    Ok(Account {
        nonce: u64_at(&raw, 0),
        balance: U256::from_be_slice(&raw[8..40]),
        code_hash: B256::from_slice(&raw[40..72]),
        storage_root: B256::from_slice(&raw[72..]),
    })
}

/// Storage values are stored without leading zero bytes: most slots hold small numbers,
/// and storage is the largest table. A zero value is never stored (it is a delete).
pub(crate) fn encode_slot_value(value: &U256) -> Vec<u8> {
    let bytes = value.to_be_bytes::<32>();
    let first = bytes.iter().position(|b| *b != 0).unwrap_or(32);
    bytes[first..].to_vec()
}

/// A stored slot value: its minimal big-endian bytes, never zero (a zero slot is
/// deleted), so a leading zero byte is damage, not a value.
pub(crate) fn decode_slot_value(bytes: &[u8]) -> Result<U256, StoreError> {
    if bytes.is_empty() || bytes.len() > 32 {
        return Err(StoreError::Corrupt(format!(
            "storage value: expected 1 to 32 bytes, found {}",
            bytes.len()
        )));
    }
    if bytes[0] == 0 {
        return Err(StoreError::Corrupt(
            "storage value: a leading zero byte (zero slots are not stored)".to_string(),
        ));
    }
    Ok(U256::from_be_slice(bytes))
}

pub(crate) fn encode_tx_location(location: &TxLocation) -> [u8; 48] {
    let mut out = [0u8; 48];
    out[..32].copy_from_slice(location.block_hash.as_slice());
    out[32..40].copy_from_slice(&location.block_number.to_be_bytes());
    out[40..].copy_from_slice(&location.index.to_be_bytes());
    out
}

pub(crate) fn decode_tx_location(bytes: &[u8]) -> Result<TxLocation, StoreError> {
    let raw = fixed::<48>(bytes, "tx location")?;
    Ok(TxLocation {
        block_hash: B256::from_slice(&raw[..32]),
        block_number: u64_at(&raw, 32),
        index: u64_at(&raw, 40),
    })
}

pub(crate) fn decode_schema(bytes: &[u8]) -> Result<u32, StoreError> {
    Ok(u32::from_be_bytes(fixed::<4>(bytes, "schema version")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the store_codecs fuzz target: bytes of a zero value, which the encoder
    /// never writes, decoded as zero instead of as damage.
    #[test]
    fn a_slot_value_with_a_leading_zero_is_damage() {
        for bytes in [&[0x00][..], &[0x00, 0x01], &[0x00, 0x00]] {
            assert!(matches!(
                decode_slot_value(bytes),
                Err(StoreError::Corrupt(_))
            ));
        }
        let value = U256::from(0x0102u64);
        assert_eq!(encode_slot_value(&value), vec![0x01, 0x02]);
        assert_eq!(decode_slot_value(&[0x01, 0x02]).unwrap(), value);
    }

    #[test]
    fn account_round_trip() {
        let account = Account {
            nonce: u64::MAX - 1,
            balance: U256::MAX - U256::from(7),
            code_hash: B256::repeat_byte(0xc0),
            storage_root: B256::repeat_byte(0x5e),
        };
        assert_eq!(decode_account(&encode_account(&account)).unwrap(), account);
        assert!(matches!(
            decode_account(&[0u8; 5]),
            Err(StoreError::Corrupt(_))
        ));
    }

    #[test]
    fn slot_values_drop_leading_zeros() {
        for value in [U256::from(1), U256::from(0x1234), U256::MAX] {
            let bytes = encode_slot_value(&value);
            assert_ne!(bytes[0], 0);
            assert_eq!(decode_slot_value(&bytes).unwrap(), value);
        }
        assert!(decode_slot_value(&[]).is_err());
        assert!(decode_slot_value(&[1u8; 33]).is_err());
    }

    #[test]
    fn tx_location_round_trip() {
        let location = TxLocation {
            block_hash: B256::repeat_byte(9),
            block_number: 77,
            index: 3,
        };
        assert_eq!(
            decode_tx_location(&encode_tx_location(&location)).unwrap(),
            location
        );
    }
}
