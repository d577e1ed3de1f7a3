//! Blob sidecars in the network form of a blob transaction, and `validate_cheap`, the
//! structural check the p2p layer runs on every sidecar it receives.
//!
//! A blob is 128 KiB, too large for the fuzzer to grow one byte at a time, so the input
//! describes a sidecar (how many blobs, hashes, commitments and proofs, their bytes,
//! versions and flaws) and the target writes its wire bytes; the real decoder
//! (`PooledTransaction::decode_2718`) then reads them. What must come out is known from
//! the description: whether it decodes, the same bytes when encoded again, and the exact
//! verdict of `validate_cheap` under Cancun, Prague and Osaka rules.

#![no_main]

use alloy_primitives::{Address, B256, U256};
use alloy_rlp::{Encodable, Header};
use libfuzzer_sys::fuzz_target;
use moat_common::config::Fork;
use moat_common::transaction::Eip4844Tx;
use moat_common::transaction::{
    BlobRules, BlobsBundleError, PooledTransaction, SidecarVersion, Signature, SignedTransaction,
    Transaction,
};
use moat_crypto::kzg::{BYTES_PER_BLOB, Bytes48, CELLS_PER_EXT_BLOB, versioned_hash};
use moat_fuzz::Bytes;

/// Writes `payload` as an RLP string.
fn string(payload: &[u8], out: &mut Vec<u8>) {
    payload.encode(out);
}

fn list(items: &[u8], out: &mut Vec<u8>) {
    Header {
        list: true,
        payload_length: items.len(),
    }
    .encode(out);
    out.extend_from_slice(items);
}

/// A length a little off `good` now and then.
fn length(r: &mut Bytes<'_>, good: usize) -> usize {
    match r.u8() {
        0xff => good + 1,
        0xfe => good - 1,
        0xfd => 0,
        _ => good,
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Bytes(data);
    // The wrapper: none (version 0), or an explicit version byte.
    let version_item = match r.u8() % 4 {
        0 | 1 => None,
        2 => Some(1u8),
        _ => Some(r.u8()),
    };
    let version = match version_item {
        None => Some(SidecarVersion::V0),
        Some(1) => Some(SidecarVersion::V1),
        Some(_) => None,
    };
    let hashes_n = (r.u8() % 11) as usize;
    let blobs_n = if r.u8() < 0xf0 {
        hashes_n
    } else {
        (r.u8() % 11) as usize
    };
    let commitments_n = if r.u8() < 0xf0 {
        blobs_n
    } else {
        (r.u8() % 11) as usize
    };
    let per_blob = match version {
        Some(SidecarVersion::V1) => CELLS_PER_EXT_BLOB,
        _ => 1,
    };
    let proofs_n = match r.u8() {
        0xff => (r.u8() % 13) as usize,
        0xfe => blobs_n * per_blob + 1,
        _ => blobs_n * per_blob,
    };

    let mut well_formed = version.is_some();
    let mut blobs = Vec::new();
    for _ in 0..blobs_n {
        let len = length(&mut r, BYTES_PER_BLOB);
        well_formed &= len == BYTES_PER_BLOB;
        let mut blob = vec![0u8; len];
        let head = r.piece();
        let n = head.len().min(len);
        blob[..n].copy_from_slice(&head[..n]);
        blobs.push(blob);
    }
    let points = |count: usize, r: &mut Bytes<'_>, well_formed: &mut bool| {
        (0..count)
            .map(|_| {
                let len = length(r, 48);
                *well_formed &= len == 48;
                let mut p = vec![0u8; len];
                let bytes = r.array::<48>();
                let n = len.min(48);
                p[..n].copy_from_slice(&bytes[..n]);
                p
            })
            .collect::<Vec<_>>()
    };
    let commitments = points(commitments_n, &mut r, &mut well_formed);
    let proofs = points(proofs_n.min(64), &mut r, &mut well_formed);
    let proofs = if proofs_n > 64 {
        // Large V1 proof lists: the rest repeat the last one.
        let mut all = proofs;
        let last = all.last().cloned().unwrap_or_else(|| vec![0u8; 48]);
        all.resize(proofs_n, last);
        all
    } else {
        proofs
    };
    // Versioned hashes: the commitment's, or bytes of the input with a chosen version.
    let hashes: Vec<B256> = (0..hashes_n)
        .map(|i| {
            let c = commitments.get(i).filter(|c| c.len() == 48);
            match (r.u8(), c) {
                (0..=0xdf, Some(c)) => versioned_hash(&Bytes48::try_from(&c[..]).unwrap()),
                _ => B256::from(r.array::<32>()),
            }
        })
        .collect();
    let extra = r.u8() == 0xff;
    well_formed &= !extra;

    let tx = Transaction::Eip4844(Eip4844Tx {
        chain_id: 1,
        nonce: r.u64() % 4,
        max_priority_fee_per_gas: 1,
        max_fee_per_gas: 2,
        gas_limit: 21_000,
        to: Address::repeat_byte(0x11),
        value: U256::ZERO,
        input: Default::default(),
        access_list: Vec::new(),
        max_fee_per_blob_gas: 3,
        blob_versioned_hashes: hashes.clone(),
    });
    let signed = SignedTransaction::new(
        tx,
        Signature {
            y_parity: false,
            r: U256::from(1),
            s: U256::from(1),
        },
    );
    let canonical = signed.encoded_2718();

    let mut payload = canonical[1..].to_vec();
    if let Some(v) = version_item {
        v.encode(&mut payload);
    }
    let mut items = Vec::new();
    for b in &blobs {
        string(b, &mut items);
    }
    list(&items, &mut payload);
    for group in [&commitments, &proofs] {
        let mut items = Vec::new();
        for p in group.iter() {
            string(p, &mut items);
        }
        list(&items, &mut payload);
    }
    if extra {
        string(b"x", &mut payload);
    }
    let mut wire = vec![0x03];
    list(&payload, &mut wire);

    let decoded = PooledTransaction::decode_2718(&wire);
    let Ok(tx) = decoded else {
        assert!(
            !well_formed,
            "a well-formed sidecar was refused: {decoded:?}"
        );
        return;
    };
    assert!(well_formed, "a malformed sidecar decoded");
    let version = version.expect("decoded, so the version is known");
    assert_eq!(tx.encoded_2718(), wire, "sidecar re-encoding differs");
    assert_eq!(tx.hash(), signed.hash());
    assert_eq!(
        PooledTransaction::hash_of_envelope(&wire),
        Some(signed.hash())
    );
    let sidecar = tx.sidecar().expect("the network form has a sidecar");
    assert_eq!(sidecar.version, version);
    assert_eq!(sidecar.blobs.len(), blobs_n);
    assert_eq!(sidecar.commitments.len(), commitments_n);
    assert_eq!(sidecar.proofs.len(), proofs_n);

    for fork in [Fork::Cancun, Fork::Prague, Fork::Osaka] {
        let rules = BlobRules::for_fork(fork).expect("blob forks have rules");
        let expected = if hashes_n == 0 {
            Err(BlobsBundleError::NoBlobs)
        } else if hashes_n as u64 > rules.max_blobs_per_tx {
            Err(BlobsBundleError::TooManyBlobs {
                count: hashes_n,
                max: rules.max_blobs_per_tx,
            })
        } else if blobs_n != hashes_n || commitments_n != hashes_n {
            Err(BlobsBundleError::CountMismatch {
                hashes: hashes_n,
                blobs: blobs_n,
                commitments: commitments_n,
            })
        } else if proofs_n != hashes_n * version.proofs_per_blob() {
            Err(BlobsBundleError::ProofCountMismatch {
                expected: hashes_n * version.proofs_per_blob(),
                found: proofs_n,
            })
        } else if let Some((index, h)) = hashes
            .iter()
            .enumerate()
            .find(|(i, h)| h[0] != 0x01 || **h != sidecar_hash(&commitments[*i]))
        {
            if h[0] != 0x01 {
                Err(BlobsBundleError::BadHashVersion {
                    index,
                    version: h[0],
                })
            } else {
                Err(BlobsBundleError::HashMismatch { index })
            }
        } else if version != rules.sidecar_version() {
            Err(BlobsBundleError::VersionNotAllowed {
                version,
                fork: rules.fork,
            })
        } else {
            Ok(())
        };
        assert_eq!(tx.validate_cheap(&rules), expected, "at {fork:?}");
    }
});

fn sidecar_hash(commitment: &[u8]) -> B256 {
    versioned_hash(&Bytes48::try_from(commitment).expect("48 bytes"))
}
