//! The store's value and key codecs as a restart reads them back from disk
//! (crates/storage/src/codec.rs: every `decode_*`, and `trie_node_path`), and the records
//! snap sync keeps in the store (`Progress::decode`, `HealRecord::decode`): a damaged or
//! foreign database must give errors, never a panic or a wrong value.
//!
//! codec.rs is private to moat-storage, so it is compiled here from its own source file
//! (the same code, not a copy), with the types it names taken from moat-storage. The
//! first byte picks the decoder; the rest is the stored bytes. Whatever decodes must
//! encode back to bytes that decode to the same value.

#![no_main]

use alloy_primitives::B256;
use libfuzzer_sys::fuzz_target;
use moat_fuzz::Bytes;
use moat_storage::{Account, ChainMeta, TxLocation, trie_node_key, trie_node_path};
use moat_sync::snap::{HealRecord, Progress};

/// What codec.rs names as `crate::error`.
mod error {
    pub use moat_storage::StoreError;
}

#[allow(dead_code)]
#[path = "../../crates/storage/src/codec.rs"]
mod codec;

use codec::*;

fuzz_target!(|data: &[u8]| {
    let mut r = Bytes(data);
    let pick = r.u8();
    let bytes = r.rest();
    match pick % 12 {
        0 => {
            if let Ok(n) = decode_number(bytes, "number") {
                assert_eq!(decode_number(&number_key(n), "number").ok(), Some(n));
            }
        }
        1 => {
            if let Ok(h) = decode_b256(bytes, "hash") {
                assert_eq!(h.as_slice(), bytes);
            }
        }
        2 => {
            if let Ok(a) = decode_address(bytes, "address") {
                assert_eq!(a.as_slice(), bytes);
            }
        }
        3 => {
            if let Ok((n, h)) = decode_number_hash(bytes, "head") {
                assert_eq!(encode_number_hash(n, &h).as_slice(), bytes);
            }
        }
        4 => {
            if let Ok(meta) = decode_meta(bytes) {
                let again: ChainMeta = decode_meta(&encode_meta(&meta)).expect("own meta");
                assert_eq!(
                    (again.chain_id, again.genesis_hash),
                    (meta.chain_id, meta.genesis_hash)
                );
            }
        }
        5 => {
            if let Ok(account) = decode_account(bytes) {
                let again: Account =
                    decode_account(&encode_account(&account)).expect("own account");
                assert_eq!(again, account);
            }
        }
        6 => {
            if let Ok(value) = decode_slot_value(bytes) {
                // Only minimal, non-zero values decode: the bytes are what the encoder writes.
                assert!(!value.is_zero());
                assert_eq!(encode_slot_value(&value), bytes);
            }
        }
        7 => {
            if let Ok(location) = decode_tx_location(bytes) {
                let again: TxLocation =
                    decode_tx_location(&encode_tx_location(&location)).expect("own location");
                assert_eq!(again, location);
            }
        }
        8 => {
            if let Ok(v) = decode_schema(bytes) {
                assert_eq!(decode_schema(&v.to_be_bytes()).ok(), Some(v));
            }
        }
        9 => {
            if let Ok(path) = trie_node_path(bytes) {
                assert!(path.iter().all(|n| *n < 16));
                let owner = B256::from_slice(&bytes[..32]);
                let key = trie_node_key(&owner, &path);
                assert_eq!(trie_node_path(&key).ok(), Some(path));
            }
        }
        10 => {
            if let Some(p) = Progress::decode(bytes) {
                assert_eq!(Progress::decode(&p.encode()), Some(p));
            }
        }
        _ => {
            if let Some(h) = HealRecord::decode(bytes) {
                assert_eq!(HealRecord::decode(&h.encode()), Some(h));
            }
        }
    }
});
