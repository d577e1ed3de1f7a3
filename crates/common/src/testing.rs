//! Sample transactions for tests, benchmarks and load tools: deterministic, signed, valid.

use crate::transaction::{
    AccessListItem, Authorization, BlobsBundle, Eip1559Tx, Eip2930Tx, Eip4844Tx, Eip7702Tx,
    LegacyTx, PooledTransaction, SidecarVersion, SignedTransaction, Transaction, TxType,
};
use alloy_primitives::{Address, B256, Bytes, TxKind, U256};
use moat_crypto::{kzg, secp::Signer};

/// The chain id samples are signed for.
pub const SAMPLE_CHAIN_ID: u64 = 1;

/// An unsigned transaction of type `ty` with typical fields (a 100-byte call with a
/// one-entry access list where the type has one).
pub fn sample_unsigned(ty: TxType, nonce: u64) -> Transaction {
    let to = Address::repeat_byte(0x42);
    let input = Bytes::from((0..100u8).collect::<Vec<_>>());
    let access_list = vec![AccessListItem {
        address: to,
        storage_keys: vec![B256::repeat_byte(1), B256::repeat_byte(2)],
    }];
    let value = U256::from(1_000_000_000u64);
    match ty {
        TxType::Legacy => Transaction::Legacy(LegacyTx {
            chain_id: Some(SAMPLE_CHAIN_ID),
            nonce,
            gas_price: 20_000_000_000,
            gas_limit: 100_000,
            to: TxKind::Call(to),
            value,
            input,
        }),
        TxType::Eip2930 => Transaction::Eip2930(Eip2930Tx {
            chain_id: SAMPLE_CHAIN_ID,
            nonce,
            gas_price: 20_000_000_000,
            gas_limit: 100_000,
            to: TxKind::Call(to),
            value,
            input,
            access_list,
        }),
        TxType::Eip1559 => Transaction::Eip1559(Eip1559Tx {
            chain_id: SAMPLE_CHAIN_ID,
            nonce,
            max_priority_fee_per_gas: 1_000_000_000,
            max_fee_per_gas: 30_000_000_000,
            gas_limit: 100_000,
            to: TxKind::Call(to),
            value,
            input,
            access_list,
        }),
        TxType::Eip4844 => Transaction::Eip4844(Eip4844Tx {
            chain_id: SAMPLE_CHAIN_ID,
            nonce,
            max_priority_fee_per_gas: 1_000_000_000,
            max_fee_per_gas: 30_000_000_000,
            gas_limit: 100_000,
            to,
            value,
            input,
            access_list,
            max_fee_per_blob_gas: 1_000_000_000,
            blob_versioned_hashes: vec![kzg::versioned_hash(&[0xc0; 48])],
        }),
        TxType::Eip7702 => {
            let authority = Signer::from_seed(0xa0);
            Transaction::Eip7702(Eip7702Tx {
                chain_id: SAMPLE_CHAIN_ID,
                nonce,
                max_priority_fee_per_gas: 1_000_000_000,
                max_fee_per_gas: 30_000_000_000,
                gas_limit: 100_000,
                to,
                value,
                input,
                access_list,
                authorization_list: vec![Authorization::sign(
                    U256::from(SAMPLE_CHAIN_ID),
                    Address::repeat_byte(0x77),
                    0,
                    &authority,
                )],
            })
        }
    }
}

/// A signed sample of type `ty`.
pub fn sample_signed(ty: TxType, nonce: u64, signer: &Signer) -> SignedTransaction {
    SignedTransaction::sign(sample_unsigned(ty, nonce), signer)
}

/// A signed blob transaction with `blob_count` distinct valid blobs and a bundle of `version`.
pub fn sample_blob_tx(
    version: SidecarVersion,
    blob_count: usize,
    nonce: u64,
    signer: &Signer,
) -> PooledTransaction {
    let blobs = (0..blob_count)
        .map(|i| *kzg::sample_blob(nonce * 64 + i as u64))
        .collect();
    let bundle = BlobsBundle::build(version, blobs).expect("sample blobs are valid field elements");
    let Transaction::Eip4844(mut tx) = sample_unsigned(TxType::Eip4844, nonce) else {
        unreachable!("sample_unsigned(Eip4844) builds a blob transaction")
    };
    tx.blob_versioned_hashes = bundle.versioned_hashes();
    let signed = SignedTransaction::sign(Transaction::Eip4844(tx), signer);
    PooledTransaction::new(signed, Some(bundle))
}

/// [`sample_blob_tx`] for chain `chain_id`, paying a fee cap of `max_fee` and a tip of
/// `tip` (wei per gas), signed again: what a test sends to a node of that chain.
pub fn blob_tx_on_chain(
    version: SidecarVersion,
    blob_count: usize,
    nonce: u64,
    signer: &Signer,
    chain_id: u64,
    max_fee: u128,
    tip: u128,
) -> PooledTransaction {
    let (signed, sidecar) = sample_blob_tx(version, blob_count, nonce, signer).into_parts();
    let Transaction::Eip4844(mut tx) = signed.into_tx() else {
        unreachable!("sample_blob_tx builds a blob transaction")
    };
    tx.chain_id = chain_id;
    tx.max_fee_per_gas = max_fee;
    tx.max_priority_fee_per_gas = tip;
    PooledTransaction::new(
        SignedTransaction::sign(Transaction::Eip4844(tx), signer),
        sidecar,
    )
}
