use super::*;
use crate::config::{BlobParams, Fork};
use crate::testing::{sample_blob_tx, sample_signed, sample_unsigned};
use alloy_primitives::hex;
use proptest::prelude::*;

const ALL_TYPES: [TxType; 5] = [
    TxType::Legacy,
    TxType::Eip2930,
    TxType::Eip1559,
    TxType::Eip4844,
    TxType::Eip7702,
];

fn prague() -> BlobRules {
    BlobRules::new(Fork::Prague, BlobParams::PRAGUE)
}

fn osaka() -> BlobRules {
    BlobRules::new(Fork::Osaka, BlobParams::PRAGUE)
}

#[test]
fn eip155_example_vector() {
    // The example from the EIP-155 text: key 0x4646…46, nonce 9, 20 gwei, chain id 1.
    let raw = hex!(
        "f86c098504a817c800825208943535353535353535353535353535353535353535880de0b6b3a76400008025a028ef61340bd939bc2195fe537567866003e1a15d3c71ff63e1590620aa636276a067cbe9d8997f761aecb703304b3800ccf555c9f3dc64214b297fb1966a3b6d83"
    );
    let tx = SignedTransaction::decode_2718(&raw).unwrap();
    assert_eq!(tx.tx_type(), TxType::Legacy);
    assert_eq!(tx.tx().chain_id(), Some(1));
    assert_eq!(tx.tx().nonce(), 9);
    assert_eq!(tx.v(), 37);
    assert_eq!(
        tx.tx().signing_hash(),
        B256::from(hex!(
            "daf5a779ae972f972197303d7b574746c7ef83eadac0f2791ad23db92e4c8e53"
        ))
    );
    assert_eq!(
        tx.recover_sender().unwrap(),
        "0x9d8a62f656a8d1615c1294fd71e9cfb3e4855a4f"
            .parse::<Address>()
            .unwrap()
    );
    assert_eq!(tx.encoded_2718(), raw.to_vec());
    assert_eq!(tx.hash(), keccak256(raw));
    assert_eq!(tx.size(), raw.len());
}

#[test]
fn pre_eip155_legacy_has_no_chain_id() {
    let signer = Signer::from_seed(1);
    let mut unsigned = sample_unsigned(TxType::Legacy, 0);
    if let Transaction::Legacy(t) = &mut unsigned {
        t.chain_id = None;
    }
    let tx = SignedTransaction::sign(unsigned, &signer);
    assert!(tx.v() == 27 || tx.v() == 28);
    let back = SignedTransaction::decode_2718(&tx.encoded_2718()).unwrap();
    assert_eq!(back.tx().chain_id(), None);
    assert_eq!(back.recover_sender().unwrap(), signer.address());
}

#[test]
fn every_type_round_trips_and_recovers() {
    let signer = Signer::from_seed(2);
    for ty in ALL_TYPES {
        let tx = sample_signed(ty, 5, &signer);
        let enc = tx.encoded_2718();
        let back = SignedTransaction::decode_2718(&enc).unwrap();
        assert_eq!(back, tx, "{ty:?}");
        assert_eq!(back.hash(), keccak256(&enc));
        assert_eq!(back.recover_sender().unwrap(), signer.address());
        // Network element form (wrapped in a string for typed txs).
        let mut net = Vec::new();
        tx.encode_network(&mut net);
        assert_eq!(net.len(), tx.network_len());
        let mut slice = &net[..];
        assert_eq!(SignedTransaction::decode_network(&mut slice).unwrap(), tx);
        assert!(slice.is_empty());
    }
}

#[test]
fn eip7702_authorization_recovers_authority() {
    let signer = Signer::from_seed(3);
    let tx = sample_signed(TxType::Eip7702, 0, &signer);
    let auth = &tx.tx().authorization_list()[0];
    assert_eq!(
        auth.recover_authority(),
        Some(Signer::from_seed(0xa0).address())
    );
    // A parity above 1 voids the authorization without failing the decode.
    let mut bad = auth.clone();
    bad.y_parity = 2;
    assert_eq!(bad.recover_authority(), None);
    let Transaction::Eip7702(mut inner) = tx.tx().clone() else {
        unreachable!()
    };
    inner.authorization_list = vec![bad];
    let tx = SignedTransaction::sign(Transaction::Eip7702(inner), &signer);
    let back = SignedTransaction::decode_2718(&tx.encoded_2718()).unwrap();
    assert_eq!(back.tx().authorization_list()[0].recover_authority(), None);
}

/// Re-signs `tx`'s fields with a different signature and returns the envelope.
fn with_signature(tx: &SignedTransaction, sig: Signature) -> Vec<u8> {
    SignedTransaction::new(tx.tx().clone(), sig).encoded_2718()
}

#[test]
fn strict_decoding_rejects_malformed_input() {
    let signer = Signer::from_seed(4);
    let tx = sample_signed(TxType::Eip1559, 1, &signer);
    let enc = tx.encoded_2718();

    assert_eq!(SignedTransaction::decode_2718(&[]), Err(DecodeError::Empty));
    assert_eq!(
        SignedTransaction::decode_2718(&[0x05, 0xc0]),
        Err(DecodeError::UnknownType(5))
    );
    assert_eq!(
        SignedTransaction::decode_2718(&[0x00, 0xc0]),
        Err(DecodeError::UnknownType(0))
    );

    let mut trailing = enc.clone();
    trailing.push(0);
    assert_eq!(
        SignedTransaction::decode_2718(&trailing),
        Err(DecodeError::TrailingBytes { extra: 1 })
    );
    assert!(SignedTransaction::decode_2718(&enc[..enc.len() - 1]).is_err());

    // High s (n - s is the malleable twin of a valid signature).
    let sig = *tx.signature();
    let high = Signature {
        s: secp::SECP256K1N - sig.s,
        y_parity: !sig.y_parity,
        ..sig
    };
    assert_eq!(
        SignedTransaction::decode_2718(&with_signature(&tx, high)),
        Err(DecodeError::Signature(SignatureError::HighS))
    );
    let zero_r = Signature {
        r: U256::ZERO,
        ..sig
    };
    assert_eq!(
        SignedTransaction::decode_2718(&with_signature(&tx, zero_r)),
        Err(DecodeError::Signature(SignatureError::OutOfRange))
    );

    // yParity 2: patch the encoded parity byte (0x01 or 0x80 just before r's header 0xa0).
    let r_pos = enc.len() - 66;
    let mut bad_parity = enc.clone();
    bad_parity[r_pos - 1] = 0x02;
    assert_eq!(
        SignedTransaction::decode_2718(&bad_parity),
        Err(DecodeError::InvalidYParity(2))
    );

    // Legacy v = 29 is neither 27/28 nor EIP-155.
    let legacy = sample_signed(TxType::Legacy, 0, &signer);
    let mut raw = legacy.encoded_2718();
    let v_pos = raw.len() - 67;
    assert_eq!(raw[v_pos], 37 + legacy.signature().y_parity as u8);
    raw[v_pos] = 29;
    assert_eq!(
        SignedTransaction::decode_2718(&raw),
        Err(DecodeError::InvalidV(29))
    );

    // A nonce of 0x0001 has a leading zero.
    let mut unsigned = sample_unsigned(TxType::Legacy, 1);
    if let Transaction::Legacy(t) = &mut unsigned {
        t.chain_id = Some(1);
    }
    let ok = SignedTransaction::sign(unsigned, &signer).encoded_2718();
    // ok = [list hdr f8 len][nonce 0x01]...: replace 0x01 by 0x82 0x00 0x01 and fix the length.
    assert_eq!(ok[0], 0xf8);
    let mut padded = vec![0xf8, ok[1] + 2, 0x82, 0x00, 0x01];
    padded.extend_from_slice(&ok[3..]);
    assert_eq!(
        SignedTransaction::decode_2718(&padded),
        Err(DecodeError::Rlp(RlpError::LeadingZeros("nonce")))
    );
    // A 9-byte gas limit overflows u64.
    let mut huge = vec![0xf8, ok[1] + 9 + 1 - 4];
    huge.extend_from_slice(&ok[2..3]); // nonce
    huge.extend_from_slice(&ok[3..9]); // gas price (0x85 + 5 bytes)
    huge.extend_from_slice(&[0x89, 1, 0, 0, 0, 0, 0, 0, 0, 0]); // gas limit, 9 bytes
    huge.extend_from_slice(&ok[13..]); // skip the original 0x83 + 3 bytes
    assert!(matches!(
        SignedTransaction::decode_2718(&huge),
        Err(DecodeError::Rlp(RlpError::Overlong {
            field: "gasLimit",
            ..
        }))
    ));
}

#[test]
fn blob_tx_needs_a_to_address() {
    let signer = Signer::from_seed(5);
    let tx = sample_signed(TxType::Eip4844, 0, &signer);
    let enc = tx.encoded_2718();
    // Replace the 21-byte `to` (0x94 + 20 bytes) by an empty string.
    let to_pos = enc
        .windows(21)
        .position(|w| w[0] == 0x94 && w[1..] == [0x42; 20])
        .unwrap();
    let payload_start = {
        let mut b = &enc[1..];
        let h = alloy_rlp::Header::decode(&mut b).unwrap();
        enc.len() - h.payload_length
    };
    let mut payload = enc[payload_start..to_pos].to_vec();
    payload.push(0x80);
    payload.extend_from_slice(&enc[to_pos + 21..]);
    let mut bad = vec![0x03];
    rlp::encode_list_payload(&payload, &mut bad);
    assert!(matches!(
        SignedTransaction::decode_2718(&bad),
        Err(DecodeError::Rlp(RlpError::BadLength {
            field: "to",
            found: 0,
            ..
        }))
    ));
}

#[test]
fn pooled_blob_tx_round_trips_in_both_versions() {
    let signer = Signer::from_seed(6);
    for version in [SidecarVersion::V0, SidecarVersion::V1] {
        let pooled = sample_blob_tx(version, 2, 0, &signer);
        let enc = pooled.encoded_2718();
        assert_eq!(enc.len(), pooled.size());
        let back = PooledTransaction::decode_2718(&enc).unwrap();
        assert_eq!(back, pooled);
        assert_eq!(back.hash(), keccak256(pooled.tx().encoded_2718()));
        assert_eq!(back.tx().recover_sender().unwrap(), signer.address());
        let mut net = Vec::new();
        pooled.encode_network(&mut net);
        assert_eq!(
            PooledTransaction::decode_network(&mut &net[..]).unwrap(),
            pooled
        );
    }
}

/// eth/72's form: the sidecar without its blobs decodes to an empty blob list, passes
/// the body checks (not the whole-sidecar ones), states its size, and takes its blobs back.
#[test]
fn a_blob_tx_without_its_blobs_round_trips_and_takes_them_back() {
    let signer = Signer::from_seed(6);
    let pooled = sample_blob_tx(SidecarVersion::V1, 2, 0, &signer);
    let bare = pooled.encoded_2718_without_blobs();
    assert_eq!(bare.len(), pooled.size_without_blobs());
    assert!(bare.len() < pooled.size() - 2 * moat_crypto::kzg::BYTES_PER_BLOB);
    let back = PooledTransaction::decode_2718(&bare).unwrap();
    assert_eq!(back.hash(), pooled.hash());
    let sidecar = back.sidecar().unwrap();
    assert!(sidecar.blobs.is_empty());
    let hashes = pooled.tx().tx().blob_versioned_hashes();
    assert!(sidecar.validate_without_blobs(hashes, &osaka()).is_ok());
    assert!(
        back.validate_cheap(&osaka()).is_err(),
        "not a whole sidecar"
    );
    assert!(
        pooled
            .sidecar()
            .unwrap()
            .validate_without_blobs(hashes, &osaka())
            .is_err(),
        "a body with blobs is not eth/72's"
    );
    let whole = back
        .with_blobs(pooled.sidecar().unwrap().blobs.clone())
        .unwrap();
    assert_eq!(whole, pooled);
    // Other txs are the same either way.
    let plain = PooledTransaction::new(sample_signed(TxType::Eip1559, 0, &signer), None);
    assert_eq!(plain.encoded_2718_without_blobs(), plain.encoded_2718());
    assert_eq!(plain.size_without_blobs(), plain.size());
}

/// EIP-8070's sampled sidecar: a custody's cells of every blob, checked against their
/// cell proofs, served within the custody only, never a whole sidecar.
#[test]
fn a_sampled_sidecar_verifies_its_cells_and_gives_only_those() {
    use super::{ALL_CELLS, mask_of};
    let signer = Signer::from_seed(6);
    let pooled = sample_blob_tx(SidecarVersion::V1, 2, 0, &signer);
    let whole = pooled.sidecar().unwrap();
    let custody = mask_of([3, 64, 100]);
    let mut cells = Vec::new();
    for blob in 0..2 {
        cells.extend(whole.cells(blob, &[3, 64, 100]).unwrap());
    }
    let body = PooledTransaction::decode_2718(&pooled.encoded_2718_without_blobs()).unwrap();
    let sampled = body.with_sampled_cells(custody, cells.clone()).unwrap();
    let sidecar = sampled.sidecar().unwrap();
    assert!(sidecar.is_sampled() && !sampled.has_whole_blobs() && pooled.has_whole_blobs());
    assert_eq!(sidecar.held_cells(), custody);
    assert_eq!(whole.held_cells(), ALL_CELLS);
    // Its network form is the body without blobs; its size counts the cells it holds.
    assert_eq!(sampled.encoded_2718(), pooled.encoded_2718_without_blobs());
    assert_eq!(
        sampled.size(),
        pooled.size_without_blobs() + 6 * moat_crypto::kzg::BYTES_PER_CELL
    );
    assert!(sampled.validate(&osaka()).is_ok());
    // Cells within the custody, in the order asked; any other cell is not there.
    assert_eq!(
        sidecar.cells(1, &[100, 3]).unwrap(),
        vec![cells[5], cells[3]]
    );
    assert!(sidecar.cells(0, &[3, 4]).is_none());
    assert!(sidecar.cells(2, &[3]).is_none());
    // A cell that is not the blob's fails its proof.
    let mut bad = cells.clone();
    bad[4][7] ^= 1;
    let tampered = body.with_sampled_cells(custody, bad).unwrap();
    assert!(matches!(
        tampered.validate(&osaka()),
        Err(BlobsBundleError::Kzg(_))
    ));
    // A cell of another index than claimed fails too.
    let shifted = body
        .with_sampled_cells(mask_of([2, 64, 100]), cells.clone())
        .unwrap();
    assert!(shifted.validate(&osaka()).is_err());
    // Too few cells, or a custody of none, is a structural fault (no KZG).
    let short = body
        .with_sampled_cells(custody, cells[..5].to_vec())
        .unwrap();
    let err = short.validate_cheap(&osaka()).unwrap_err();
    assert!(matches!(
        err,
        BlobsBundleError::SampledCellCount {
            expected: 6,
            found: 5
        }
    ));
    assert!(err.is_peer_fault());
    let none = body.with_sampled_cells([0; 16], Vec::new()).unwrap();
    assert!(none.validate_cheap(&osaka()).is_err());
    // Batched with whole sidecars, each is checked alone.
    assert!(BlobsBundle::verify_proofs_batch(&[whole, sidecar]).is_ok());
    assert!(BlobsBundle::verify_proofs_batch(&[whole, tampered.sidecar().unwrap()]).is_err());
}

#[test]
fn unknown_sidecar_version_is_a_decode_error() {
    let pooled = sample_blob_tx(SidecarVersion::V1, 1, 0, &Signer::from_seed(7));
    let enc = pooled.encoded_2718();
    let canonical_len = pooled.tx().size() - 1;
    // Outer header is 0x03 0xba + 3 length bytes; the wrapper version follows the tx fields.
    let pos = 1 + 4 + canonical_len;
    assert_eq!(enc[pos], 0x01);
    let mut bad = enc.clone();
    bad[pos] = 0x02;
    assert_eq!(
        PooledTransaction::decode_2718(&bad),
        Err(DecodeError::UnknownSidecarVersion(2))
    );
}

#[test]
fn validate_cheap_accepts_valid_bundles() {
    let signer = Signer::from_seed(8);
    let v0 = sample_blob_tx(SidecarVersion::V0, 3, 0, &signer);
    v0.validate_cheap(&prague()).unwrap();
    v0.validate(&prague()).unwrap();
    let v1 = sample_blob_tx(SidecarVersion::V1, 2, 0, &signer);
    v1.validate_cheap(&osaka()).unwrap();
    v1.validate(&osaka()).unwrap();
    // Non-blob transactions pass trivially.
    let plain = PooledTransaction::new(sample_signed(TxType::Eip1559, 0, &signer), None);
    plain.validate_cheap(&osaka()).unwrap();
}

fn tamper(
    pooled: &PooledTransaction,
    f: impl FnOnce(&mut Eip4844Tx, &mut BlobsBundle),
) -> PooledTransaction {
    let (signed, sidecar) = pooled.clone().into_parts();
    let Transaction::Eip4844(mut tx) = signed.into_tx() else {
        unreachable!()
    };
    let mut sidecar = sidecar.unwrap();
    f(&mut tx, &mut sidecar);
    let signed = SignedTransaction::sign(Transaction::Eip4844(tx), &Signer::from_seed(9));
    PooledTransaction::new(signed, Some(sidecar))
}

#[test]
fn validate_cheap_rejects_structural_faults() {
    let signer = Signer::from_seed(9);
    for (version, rules) in [
        (SidecarVersion::V0, prague()),
        (SidecarVersion::V1, osaka()),
    ] {
        let good = sample_blob_tx(version, 2, 0, &signer);

        let empty = tamper(&good, |tx, s| {
            tx.blob_versioned_hashes.clear();
            s.blobs.clear();
            s.commitments.clear();
            s.proofs.clear();
        });
        assert_eq!(empty.validate_cheap(&rules), Err(BlobsBundleError::NoBlobs));

        let fewer_blobs = tamper(&good, |_, s| {
            s.blobs.pop();
        });
        assert!(matches!(
            fewer_blobs.validate_cheap(&rules),
            Err(BlobsBundleError::CountMismatch {
                hashes: 2,
                blobs: 1,
                commitments: 2
            })
        ));
        let fewer_proofs = tamper(&good, |_, s| {
            s.proofs.pop();
        });
        assert!(matches!(
            fewer_proofs.validate_cheap(&rules),
            Err(BlobsBundleError::ProofCountMismatch { .. })
        ));

        let wrong_hash = tamper(&good, |tx, _| tx.blob_versioned_hashes.swap(0, 1));
        assert_eq!(
            wrong_hash.validate_cheap(&rules),
            Err(BlobsBundleError::HashMismatch { index: 0 })
        );
        let wrong_version_byte = tamper(&good, |tx, _| tx.blob_versioned_hashes[1].0[0] = 0x02);
        assert_eq!(
            wrong_version_byte.validate_cheap(&rules),
            Err(BlobsBundleError::BadHashVersion {
                index: 1,
                version: 2
            })
        );

        let too_many = sample_blob_tx(version, 7, 1, &signer);
        assert!(matches!(
            too_many.validate_cheap(&BlobRules {
                max_blobs_per_tx: 6,
                ..rules
            }),
            Err(BlobsBundleError::TooManyBlobs { count: 7, max: 6 })
        ));

        for e in [
            empty.validate_cheap(&rules).unwrap_err(),
            wrong_hash.validate_cheap(&rules).unwrap_err(),
            fewer_blobs.validate_cheap(&rules).unwrap_err(),
        ] {
            assert!(e.is_peer_fault(), "{e}");
        }
    }
}

#[test]
fn sidecar_version_must_match_the_fork_but_is_no_peer_fault() {
    let signer = Signer::from_seed(10);
    let v0 = sample_blob_tx(SidecarVersion::V0, 1, 0, &signer);
    let v1 = sample_blob_tx(SidecarVersion::V1, 1, 0, &signer);
    let e = v0.validate_cheap(&osaka()).unwrap_err();
    assert_eq!(
        e,
        BlobsBundleError::VersionNotAllowed {
            version: SidecarVersion::V0,
            fork: Fork::Osaka
        }
    );
    assert!(!e.is_peer_fault());
    let e = v1.validate_cheap(&prague()).unwrap_err();
    assert!(matches!(
        e,
        BlobsBundleError::VersionNotAllowed {
            version: SidecarVersion::V1,
            ..
        }
    ));
    assert!(!e.is_peer_fault());
}

#[test]
fn invalid_proofs_pass_validate_cheap_but_not_validate() {
    let signer = Signer::from_seed(11);
    for (version, rules) in [
        (SidecarVersion::V0, prague()),
        (SidecarVersion::V1, osaka()),
    ] {
        let good = sample_blob_tx(version, 2, 0, &signer);
        // Swap the blobs' proofs: every count and hash still matches.
        let bad = tamper(&good, |_, s| {
            let per = s.proofs.len() / 2;
            let (a, b) = s.proofs.split_at_mut(per);
            a.swap_with_slice(b);
        });
        bad.validate_cheap(&rules).unwrap();
        let e = bad.validate(&rules).unwrap_err();
        assert_eq!(
            e,
            BlobsBundleError::Kzg(moat_crypto::kzg::KzgError::InvalidProof)
        );
        assert!(e.is_peer_fault());
    }
}

#[test]
fn blob_tx_without_sidecar_is_reported() {
    let signer = Signer::from_seed(12);
    let canonical = sample_signed(TxType::Eip4844, 0, &signer).encoded_2718();
    let pooled = PooledTransaction::decode_2718(&canonical).unwrap();
    assert!(pooled.sidecar().is_none());
    assert_eq!(
        pooled.validate_cheap(&prague()),
        Err(BlobsBundleError::MissingSidecar)
    );
    assert!(BlobsBundleError::MissingSidecar.is_peer_fault());
}

#[test]
fn intrinsic_gas_per_fork() {
    let signer = Signer::from_seed(13);
    // Plain transfer: 21000.
    let mut t = Eip1559Tx {
        gas_limit: 21_000,
        to: TxKind::Call(Address::ZERO),
        ..Default::default()
    };
    let tx = Transaction::Eip1559(t.clone());
    assert_eq!(
        intrinsic_gas(&tx, Fork::Prague),
        IntrinsicGas {
            gas: 21_000,
            floor: 21_000
        }
    );
    // Calldata: 2 zero + 2 non-zero bytes.
    t.input = Bytes::from_static(&[0, 0, 1, 2]);
    let tx = Transaction::Eip1559(t.clone());
    assert_eq!(
        intrinsic_gas(&tx, Fork::Cancun).gas,
        21_000 + 2 * 4 + 2 * 16
    );
    assert_eq!(intrinsic_gas(&tx, Fork::Cancun).floor, 0);
    assert_eq!(
        intrinsic_gas(&tx, Fork::Prague).floor,
        21_000 + 10 * (2 + 2 * 4)
    );
    assert_eq!(
        intrinsic_gas(&tx, Fork::Byzantium).gas,
        21_000 + 2 * 4 + 2 * 68
    );
    // Creation with 33 bytes of init code: 32000 + 2 words × 2 from Shanghai.
    t.to = TxKind::Create;
    t.input = Bytes::from(vec![1u8; 33]);
    let tx = Transaction::Eip1559(t.clone());
    assert_eq!(
        intrinsic_gas(&tx, Fork::Shanghai).gas,
        53_000 + 33 * 16 + 2 * 2
    );
    assert_eq!(intrinsic_gas(&tx, Fork::London).gas, 53_000 + 33 * 16);
    // Access list: one address, two keys.
    t.input = Bytes::new();
    t.to = TxKind::Call(Address::ZERO);
    t.access_list = vec![AccessListItem {
        address: Address::ZERO,
        storage_keys: vec![B256::ZERO; 2],
    }];
    assert_eq!(
        intrinsic_gas(&Transaction::Eip1559(t), Fork::Berlin).gas,
        21_000 + 2_400 + 2 * 1_900
    );
    // EIP-7702: 25000 per authorization.
    let tx = sample_signed(TxType::Eip7702, 0, &signer);
    let base = intrinsic_gas(tx.tx(), Fork::Prague).gas;
    let Transaction::Eip7702(mut inner) = tx.into_tx() else {
        unreachable!()
    };
    inner
        .authorization_list
        .push(inner.authorization_list[0].clone());
    assert_eq!(
        intrinsic_gas(&Transaction::Eip7702(inner), Fork::Prague).gas,
        base + 25_000
    );
}

#[test]
fn stateless_rules_are_listed() {
    let signer = Signer::from_seed(14);
    let ok = sample_signed(TxType::Eip1559, 0, &signer);
    let rules = StatelessRules {
        chain_id: Some(1),
        ..StatelessRules::new(Fork::Osaka)
    };
    assert_eq!(
        validate_stateless(&ok, &rules).map(|g| g.gas > 21_000),
        Ok(true)
    );

    let Transaction::Eip1559(mut t) = sample_unsigned(TxType::Eip1559, 0) else {
        unreachable!()
    };
    t.chain_id = 5;
    t.nonce = u64::MAX;
    t.gas_limit = 30_000_000;
    t.max_priority_fee_per_gas = t.max_fee_per_gas + 1;
    t.to = TxKind::Create;
    t.input = Bytes::from(vec![1u8; MAX_INIT_CODE_SIZE + 1]);
    let bad = SignedTransaction::sign(Transaction::Eip1559(t), &signer);
    let (_, errors) = check_stateless(
        &bad,
        &StatelessRules {
            block_gas_limit: Some(20_000_000),
            ..rules
        },
    );
    assert!(errors.contains(&StatelessError::ChainId { have: 5, want: 1 }));
    assert!(errors.contains(&StatelessError::NonceMax));
    assert!(
        errors
            .iter()
            .any(|e| matches!(e, StatelessError::InitCodeTooLarge { .. }))
    );
    assert!(errors.iter().any(|e| matches!(
        e,
        StatelessError::GasLimitAboveCap {
            cap: MAX_TX_GAS_OSAKA,
            ..
        }
    )));
    assert!(
        errors
            .iter()
            .any(|e| matches!(e, StatelessError::GasLimitAboveBlock { .. }))
    );
    assert!(
        errors
            .iter()
            .any(|e| matches!(e, StatelessError::TipAboveFeeCap { .. }))
    );
    // The EIP-7825 cap only applies from Osaka.
    let (_, prague_errors) = check_stateless(&bad, &StatelessRules::new(Fork::Prague));
    assert!(
        !prague_errors
            .iter()
            .any(|e| matches!(e, StatelessError::GasLimitAboveCap { .. }))
    );

    let Transaction::Eip1559(mut t) = sample_unsigned(TxType::Eip1559, 0) else {
        unreachable!()
    };
    t.gas_limit = 21_000; // below the 100-byte calldata cost
    let low = SignedTransaction::sign(Transaction::Eip1559(t), &signer);
    assert!(matches!(
        validate_stateless(&low, &rules),
        Err(StatelessError::IntrinsicGas { .. })
    ));

    // Data-heavy call whose gas covers intrinsic but not the EIP-7623 floor.
    let Transaction::Eip1559(mut t) = sample_unsigned(TxType::Eip1559, 0) else {
        unreachable!()
    };
    t.access_list.clear();
    t.input = Bytes::from(vec![1u8; 1000]);
    t.gas_limit = 21_000 + 16_000; // intrinsic 37000, floor 21000 + 40000
    let floor = SignedTransaction::sign(Transaction::Eip1559(t), &signer);
    assert_eq!(
        validate_stateless(&floor, &rules),
        Err(StatelessError::FloorDataGas {
            have: 37_000,
            need: 61_000
        })
    );

    let blob = sample_signed(TxType::Eip4844, 0, &signer);
    assert!(matches!(
        validate_stateless(&blob, &StatelessRules::new(Fork::Shanghai)),
        Err(StatelessError::TypeNotActive { .. })
    ));
    let set_code = sample_signed(TxType::Eip7702, 0, &signer);
    assert!(matches!(
        validate_stateless(&set_code, &StatelessRules::new(Fork::Cancun)),
        Err(StatelessError::TypeNotActive { .. })
    ));
}

fn arb_u256() -> impl Strategy<Value = U256> {
    any::<[u8; 32]>().prop_map(U256::from_be_bytes)
}

fn arb_kind() -> impl Strategy<Value = TxKind> {
    prop_oneof![
        Just(TxKind::Create),
        any::<[u8; 20]>().prop_map(|a| TxKind::Call(Address::from(a)))
    ]
}

fn arb_access_list() -> impl Strategy<Value = Vec<AccessListItem>> {
    prop::collection::vec(
        (
            any::<[u8; 20]>(),
            prop::collection::vec(any::<[u8; 32]>(), 0..3),
        )
            .prop_map(|(a, k)| AccessListItem {
                address: Address::from(a),
                storage_keys: k.into_iter().map(B256::from).collect(),
            }),
        0..3,
    )
}

fn arb_tx() -> impl Strategy<Value = Transaction> {
    let common = (
        any::<u64>(),
        any::<u64>(),
        any::<u128>(),
        any::<u128>(),
        any::<u64>(),
        arb_kind(),
        arb_u256(),
        prop::collection::vec(any::<u8>(), 0..64),
        arb_access_list(),
    );
    (
        common,
        0u8..5,
        prop::collection::vec(any::<[u8; 32]>(), 0..4),
        any::<u8>(),
    )
        .prop_map(
            |((chain, nonce, tip, cap, gas, to, value, input, al), ty, hashes, auth_parity)| {
                let input = Bytes::from(input);
                let addr = to.to().copied().unwrap_or_default();
                match ty {
                    0 => Transaction::Legacy(LegacyTx {
                        chain_id: (chain % 3 != 0).then_some(chain >> 2),
                        nonce,
                        gas_price: cap,
                        gas_limit: gas,
                        to,
                        value,
                        input,
                    }),
                    1 => Transaction::Eip2930(Eip2930Tx {
                        chain_id: chain,
                        nonce,
                        gas_price: cap,
                        gas_limit: gas,
                        to,
                        value,
                        input,
                        access_list: al,
                    }),
                    2 => Transaction::Eip1559(Eip1559Tx {
                        chain_id: chain,
                        nonce,
                        max_priority_fee_per_gas: tip,
                        max_fee_per_gas: cap,
                        gas_limit: gas,
                        to,
                        value,
                        input,
                        access_list: al,
                    }),
                    3 => Transaction::Eip4844(Eip4844Tx {
                        chain_id: chain,
                        nonce,
                        max_priority_fee_per_gas: tip,
                        max_fee_per_gas: cap,
                        gas_limit: gas,
                        to: addr,
                        value,
                        input,
                        access_list: al,
                        max_fee_per_blob_gas: tip ^ cap,
                        blob_versioned_hashes: hashes.into_iter().map(B256::from).collect(),
                    }),
                    _ => Transaction::Eip7702(Eip7702Tx {
                        chain_id: chain,
                        nonce,
                        max_priority_fee_per_gas: tip,
                        max_fee_per_gas: cap,
                        gas_limit: gas,
                        to: addr,
                        value,
                        input,
                        access_list: al,
                        authorization_list: vec![Authorization {
                            chain_id: value,
                            address: addr,
                            nonce,
                            y_parity: auth_parity,
                            r: value,
                            s: U256::from(tip),
                        }],
                    }),
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn prop_round_trip_every_type(tx in arb_tx(), seed in 1u64..1000) {
        let signed = SignedTransaction::sign(tx, &Signer::from_seed(seed));
        let enc = signed.encoded_2718();
        let back = SignedTransaction::decode_2718(&enc).unwrap();
        prop_assert_eq!(&back, &signed);
        prop_assert_eq!(&back.encoded_2718(), &enc);
        prop_assert_eq!(signing_hash_of_envelope(&enc, back.tx().chain_id()), Some(back.tx().signing_hash()));
        let pooled = PooledTransaction::decode_2718(&signed.encoded_2718()).unwrap();
        prop_assert_eq!(pooled.tx(), &signed);
    }

    #[test]
    fn prop_any_bytes_decode_or_error(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = SignedTransaction::decode_2718(&bytes);
        let _ = PooledTransaction::decode_2718(&bytes);
        let _ = SignedTransaction::decode_network(&mut &bytes[..]);
        let _ = crate::block::Block::decode(&mut &bytes[..]);
    }

    #[test]
    fn prop_typed_prefix_garbage_never_panics(ty in 0u8..6, bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let mut input = vec![ty];
        input.extend(bytes);
        let _ = SignedTransaction::decode_2718(&input);
        let _ = PooledTransaction::decode_2718(&input);
    }

    #[test]
    fn prop_mutated_valid_tx_never_panics(pos in any::<prop::sample::Index>(), byte in any::<u8>(), ty in 0usize..5) {
        let signed = sample_signed(ALL_TYPES[ty], 3, &Signer::from_seed(77));
        let mut enc = signed.encoded_2718();
        let i = pos.index(enc.len());
        enc[i] = byte;
        let _ = SignedTransaction::decode_2718(&enc);
        let _ = PooledTransaction::decode_2718(&enc);
    }
}

#[test]
fn hash_of_envelope_matches_the_decoded_hash() {
    let signer = Signer::from_seed(15);
    for ty in ALL_TYPES {
        let tx = sample_signed(ty, 0, &signer);
        assert_eq!(
            PooledTransaction::hash_of_envelope(&tx.encoded_2718()),
            Some(tx.hash())
        );
    }
    for version in [SidecarVersion::V0, SidecarVersion::V1] {
        let pooled = sample_blob_tx(version, 1, 0, &signer);
        assert_eq!(
            PooledTransaction::hash_of_envelope(&pooled.encoded_2718()),
            Some(pooled.hash())
        );
    }
    assert_eq!(PooledTransaction::hash_of_envelope(&[]), None);
    assert_eq!(PooledTransaction::hash_of_envelope(&[0x03, 0xff]), None);
}
