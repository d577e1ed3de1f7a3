//! Physical references: raw libsecp256k1 recovery, keccak, c-kzg batch verification.

use alloy_primitives::keccak256;
use criterion::{Criterion, black_box, criterion_group, criterion_main};
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

criterion_group!(benches, bench_secp, bench_kzg);
criterion_main!(benches);
