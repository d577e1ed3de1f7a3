//! The transactions a scenario sends: transfers and blob txs signed by the kits' prefunded
//! key (`0x…01`) or by senders it funds, raw (EIP-2718) for `eth_sendRawTransaction` or a
//! devp2p `Transactions` message.

use alloy_primitives::{Address, B256, Bytes, TxKind, U256};
use moat_common::transaction::{
    BlobsBundle, Eip1559Tx, Eip4844Tx, PooledTransaction, SidecarVersion, SignedTransaction,
    Transaction,
};
use moat_crypto::secp::Signer;

/// The prefunded key of both kits' EL genesis: 0x…01 (address 0x7e5f…5bdf).
pub(crate) fn faucet() -> Signer {
    let mut k = [0u8; 32];
    k[31] = 1;
    Signer::from_bytes(&B256::from(k)).expect("0x…01 is a valid key")
}

/// Fees every tx of a scenario offers: the tip, and a cap far above the devnets' base fee
/// (7 wei at genesis, rising at most 12.5 % a full block).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fees {
    pub tip: u128,
    pub cap: u128,
}

impl Fees {
    pub(crate) const DEFAULT: Fees = Fees {
        tip: 1_000_000_000,
        cap: 50_000_000_000,
    };
}

/// A transfer of `value` wei to `to`, signed: (hash, raw 2718 bytes).
pub(crate) fn transfer(
    chain_id: u64,
    from: &Signer,
    nonce: u64,
    to: Address,
    value: U256,
    fees: Fees,
) -> (B256, Bytes) {
    let tx = Transaction::Eip1559(Eip1559Tx {
        chain_id,
        nonce,
        max_priority_fee_per_gas: fees.tip,
        max_fee_per_gas: fees.cap,
        gas_limit: 21_000,
        to: TxKind::Call(to),
        value,
        input: Bytes::new(),
        access_list: Vec::new(),
    });
    let signed = SignedTransaction::sign(tx, from);
    (signed.hash(), signed.encoded_2718().into())
}

/// A blob tx carrying `blobs` sample blobs (seeded by `seed`) with a sidecar of `version`
/// (0 before Osaka, 1 from Osaka on): (hash, raw network form with the sidecar, the
/// versioned hashes, the blobs).
pub(crate) struct BlobTx {
    pub hash: B256,
    pub raw: Bytes,
    pub versioned_hashes: Vec<B256>,
    pub bundle: BlobsBundle,
}

pub(crate) fn blob_tx(
    chain_id: u64,
    from: &Signer,
    nonce: u64,
    version: SidecarVersion,
    blobs: usize,
    seed: u64,
) -> Result<BlobTx, String> {
    let blobs: Vec<_> = (0..blobs as u64)
        .map(|i| *moat_crypto::kzg::sample_blob(seed.wrapping_mul(64) + i))
        .collect();
    let bundle = BlobsBundle::build(version, blobs).map_err(|e| format!("blobs: {e}"))?;
    let hashes = bundle.versioned_hashes();
    let tx = Transaction::Eip4844(Eip4844Tx {
        chain_id,
        nonce,
        max_priority_fee_per_gas: Fees::DEFAULT.tip,
        max_fee_per_gas: Fees::DEFAULT.cap,
        gas_limit: 21_000,
        to: Address::repeat_byte(0xb1),
        value: U256::ZERO,
        input: Bytes::new(),
        access_list: vec![],
        max_fee_per_blob_gas: 10_000_000_000,
        blob_versioned_hashes: hashes.clone(),
    });
    let pooled = PooledTransaction::new(SignedTransaction::sign(tx, from), Some(bundle.clone()));
    Ok(BlobTx {
        hash: pooled.hash(),
        raw: pooled.encoded_2718().into(),
        versioned_hashes: hashes,
        bundle,
    })
}

/// `count` deterministic senders of a scenario (distinct from the faucet).
pub(crate) fn senders(count: usize, salt: u64) -> Vec<Signer> {
    (0..count as u64)
        .map(|i| Signer::from_seed(0xde70_0000_0000 + salt * 1_000_000 + i))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_faucet_is_the_kits_prefunded_account() {
        assert_eq!(
            faucet().address(),
            "0x7e5f4552091a69125d5dfcb7b8c2659029395bdf"
                .parse::<Address>()
                .unwrap()
        );
    }

    #[test]
    fn a_blob_tx_carries_its_sidecar_and_names_its_blobs() {
        let b = blob_tx(1337, &faucet(), 0, SidecarVersion::V0, 2, 7).unwrap();
        assert_eq!(b.versioned_hashes.len(), 2);
        assert_eq!(b.bundle.blobs.len(), 2);
        // Network form: type 3 wrapped with the sidecar, much larger than the tx.
        assert_eq!(b.raw[0], 3);
        assert!(b.raw.len() > 2 * 131_072);
    }
}
