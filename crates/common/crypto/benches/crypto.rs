//! Physical references: raw libsecp256k1 recovery, keccak, c-kzg batch verification; and
//! the two KZG libraries side by side on the same blobs (`kzg-backends`): c-kzg (what
//! `moat_crypto::kzg` uses) against crate-crypto's `rust_eth_kzg` (single-threaded).

use alloy_primitives::keccak256;
use criterion::{Criterion, black_box, criterion_main};
use moat_crypto::{kzg, secp};

fn bench_secp(c: &mut Criterion) {
    let signer = secp::Signer::from_seed(1);
    let digest = keccak256(b"bench");
    let sig = signer.sign(&digest);
    c.bench_function("secp256k1/recover_signer", |b| {
        b.iter(|| secp::recover_signer(black_box(&digest), sig.r, sig.s, sig.y_parity).unwrap())
    });
    let data = [7u8; 200];
    c.bench_function("keccak256/200B", |b| b.iter(|| keccak256(black_box(&data))));
}

fn bench_kzg(c: &mut Criterion) {
    kzg::warm_up();
    let blobs: Vec<kzg::Blob> = (0..6).map(|i| *kzg::sample_blob(i)).collect();
    let commitments: Vec<_> = blobs
        .iter()
        .map(|b| kzg::blob_to_commitment(b).unwrap())
        .collect();
    let proofs: Vec<_> = blobs
        .iter()
        .zip(&commitments)
        .map(|(b, c)| kzg::compute_blob_proof(b, c).unwrap())
        .collect();
    let mut g = c.benchmark_group("kzg");
    g.sample_size(20);
    g.bench_function("verify_blob_proofs/6", |b| {
        b.iter(|| kzg::verify_blob_proofs(&blobs, &commitments, &proofs).unwrap())
    });
    let cell_proofs: Vec<_> = blobs
        .iter()
        .flat_map(|b| kzg::compute_cell_proofs(b).unwrap())
        .collect();
    g.bench_function("verify_cell_proofs/6", |b| {
        b.iter(|| kzg::verify_cell_proofs(&blobs, &commitments, &cell_proofs).unwrap())
    });
    g.finish();
}

/// c-kzg against rust_eth_kzg, each operation on the same six blobs.
fn bench_kzg_backends(c: &mut Criterion) {
    kzg::warm_up();
    let ckzg = c_kzg::ethereum_kzg_settings(0);
    let ekzg = rust_eth_kzg::DASContext::default();
    let blobs: Vec<kzg::Blob> = (0..6).map(|i| *kzg::sample_blob(i)).collect();
    let cblobs: Vec<c_kzg::Blob> = blobs.iter().map(|b| c_kzg::Blob::new(b.0)).collect();
    let commitments: Vec<kzg::Bytes48> = blobs
        .iter()
        .map(|b| kzg::blob_to_commitment(b).unwrap())
        .collect();
    let proofs: Vec<kzg::Bytes48> = blobs
        .iter()
        .zip(&commitments)
        .map(|(b, c)| kzg::compute_blob_proof(b, c).unwrap())
        .collect();
    let cell_proofs: Vec<kzg::Bytes48> = blobs
        .iter()
        .flat_map(|b| kzg::compute_cell_proofs(b).unwrap())
        .collect();
    let n = kzg::CELLS_PER_EXT_BLOB;
    let indices: Vec<u64> = (0..blobs.len()).flat_map(|_| 0..n as u64).collect();
    let c48 = |v: &[kzg::Bytes48]| -> Vec<c_kzg::Bytes48> {
        v.iter().map(|x| c_kzg::Bytes48::new(*x)).collect()
    };
    let cell_commitments: Vec<kzg::Bytes48> = commitments
        .iter()
        .flat_map(|c| std::iter::repeat_n(*c, n))
        .collect();
    let ccells: Vec<c_kzg::Cell> = cblobs
        .iter()
        .flat_map(|b| ckzg.compute_cells(b).unwrap().to_vec())
        .collect();
    let ecells: Vec<[u8; kzg::BYTES_PER_CELL]> = blobs
        .iter()
        .flat_map(|b| ekzg.compute_cells(&b.0).unwrap().map(|c| *c))
        .collect();
    // The same cells from both.
    assert!(ccells.iter().zip(&ecells).all(|(a, b)| a.to_bytes() == *b));

    let mut g = c.benchmark_group("kzg-backends");
    g.sample_size(10);
    g.bench_function("v0 batch verify/6/c-kzg", |b| {
        let (cc, cp) = (c48(&commitments), c48(&proofs));
        b.iter(|| assert!(ckzg.verify_blob_kzg_proof_batch(&cblobs, &cc, &cp).unwrap()))
    });
    g.bench_function("v0 batch verify/6/rust_eth_kzg", |b| {
        b.iter(|| {
            ekzg.verify_blob_kzg_proof_batch(
                blobs.iter().map(|b| &b.0).collect(),
                commitments.iter().collect(),
                proofs.iter().collect(),
            )
            .unwrap()
        })
    });
    g.bench_function("compute cells/6/c-kzg", |b| {
        b.iter(|| {
            for blob in &cblobs {
                black_box(ckzg.compute_cells(blob).unwrap());
            }
        })
    });
    g.bench_function("compute cells/6/rust_eth_kzg", |b| {
        b.iter(|| {
            for blob in &blobs {
                black_box(ekzg.compute_cells(&blob.0).unwrap());
            }
        })
    });
    g.bench_function("cell batch verify/6/c-kzg", |b| {
        let (cc, cp) = (c48(&cell_commitments), c48(&cell_proofs));
        b.iter(|| {
            assert!(
                ckzg.verify_cell_kzg_proof_batch(&cc, &indices, &ccells, &cp)
                    .unwrap()
            )
        })
    });
    g.bench_function("cell batch verify/6/rust_eth_kzg", |b| {
        b.iter(|| {
            ekzg.verify_cell_kzg_proof_batch(
                cell_commitments.iter().collect(),
                &indices,
                ecells.iter().collect(),
                cell_proofs.iter().collect(),
            )
            .unwrap()
        })
    });
    g.finish();
}

/// Runs every benchmark of this file with criterion's command-line configuration (what
/// `criterion_group!` would generate, written out so it can carry this doc).
fn benches() {
    let mut criterion = Criterion::default().configure_from_args();
    bench_secp(&mut criterion);
    bench_kzg(&mut criterion);
    bench_kzg_backends(&mut criterion);
}

criterion_main!(benches);
