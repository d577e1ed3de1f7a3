//! Transaction envelopes as peers and RPC clients send them: the canonical EIP-2718 form
//! (`SignedTransaction::decode_2718`, `decode_network`) and the network form with blob
//! sidecars (`PooledTransaction::decode_2718`, `decode_network`, `hash_of_envelope`),
//! then the cheap sidecar checks and the stateless rules admission runs next.
//!
//! Decoding is strict, so whatever decodes must encode to exactly the input bytes; the
//! hash found without decoding must be the decoded one; the sender recovered from the
//! wire bytes must be the one recovered from the re-encoded fields.

#![no_main]

use alloy_primitives::keccak256;
use libfuzzer_sys::fuzz_target;
use moat_common::config::Fork;
use moat_common::transaction::{
    BlobRules, PooledTransaction, SignedTransaction, StatelessRules, TxType, validate_stateless,
};

const FORKS: [Fork; 5] = [
    Fork::London,
    Fork::Shanghai,
    Fork::Cancun,
    Fork::Prague,
    Fork::Osaka,
];

fn check_signed(tx: &SignedTransaction, bytes: &[u8]) {
    assert_eq!(tx.encoded_2718(), bytes, "canonical re-encoding differs");
    assert_eq!(tx.hash(), keccak256(bytes));
    assert_eq!(tx.size(), bytes.len());
    let mut net = Vec::new();
    tx.encode_network(&mut net);
    assert_eq!(net.len(), tx.network_len());
    let mut rest = &net[..];
    let back = SignedTransaction::decode_network(&mut rest).expect("own network form decodes");
    assert!(rest.is_empty());
    assert_eq!(&back, tx);
    // What admission derives from a decoded transaction.
    let _ = tx.tx().max_cost();
    let _ = tx.tx().blob_gas();
    let _ = tx.tx().effective_tip_per_gas(7);
    let _ = tx.v();
    for fork in FORKS {
        let mut rules = StatelessRules::new(fork);
        rules.chain_id = Some(1);
        rules.block_gas_limit = Some(30_000_000);
        let _ = validate_stateless(tx, &rules);
    }
    let from_fields = tx.recover_sender();
    let from_wire = tx.recover_sender_from_envelope(bytes);
    assert_eq!(
        from_fields.ok(),
        from_wire.ok(),
        "sender from the wire bytes differs"
    );
}

fn check_pooled(tx: &PooledTransaction, bytes: &[u8]) {
    assert_eq!(tx.encoded_2718(), bytes, "network re-encoding differs");
    assert_eq!(tx.size(), bytes.len());
    assert_eq!(PooledTransaction::hash_of_envelope(bytes), Some(tx.hash()));
    let canonical = tx.tx().encoded_2718();
    assert_eq!(keccak256(&canonical), tx.hash());
    if tx.sidecar().is_none() {
        assert_eq!(canonical, bytes);
    } else {
        assert_eq!(tx.tx_type(), TxType::Eip4844);
    }
    let mut net = Vec::new();
    tx.encode_network(&mut net);
    let mut rest = &net[..];
    let back = PooledTransaction::decode_network(&mut rest).expect("own network form decodes");
    assert!(rest.is_empty());
    assert_eq!(&back, tx);
    for fork in [Fork::Cancun, Fork::Prague, Fork::Osaka] {
        let rules = BlobRules::for_fork(fork).expect("blob forks have rules");
        let _ = tx.validate_cheap(&rules);
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(tx) = SignedTransaction::decode_2718(data) {
        check_signed(&tx, data);
    }
    match PooledTransaction::decode_2718(data) {
        Ok(tx) => check_pooled(&tx, data),
        Err(_) => {
            let _ = PooledTransaction::hash_of_envelope(data);
        }
    }
    // One element of a list (block body, `Transactions`, `PooledTransactions`).
    let mut rest = data;
    if let Ok(tx) = SignedTransaction::decode_network(&mut rest) {
        let used = &data[..data.len() - rest.len()];
        let mut again = Vec::new();
        tx.encode_network(&mut again);
        assert_eq!(again, used, "network element re-encoding differs");
    }
    let mut rest = data;
    if let Ok(tx) = PooledTransaction::decode_network(&mut rest) {
        let used = &data[..data.len() - rest.len()];
        let mut again = Vec::new();
        tx.encode_network(&mut again);
        assert_eq!(again, used, "pooled network element re-encoding differs");
    }
});
