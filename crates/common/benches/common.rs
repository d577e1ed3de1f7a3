//! Decode + hash per transaction type, sender recovery, and the two blob checks.

use criterion::{BatchSize, Criterion, black_box, criterion_main};
use moat_common::config::{BlobParams, Fork};
use moat_common::testing::{sample_blob_tx, sample_signed};
use moat_common::transaction::{BlobRules, PooledTransaction, SidecarVersion};
use moat_common::{SignedTransaction, TxType};
use moat_crypto::secp::Signer;

fn bench_decode(c: &mut Criterion) {
    let signer = Signer::from_seed(1);
    let mut g = c.benchmark_group("decode_and_hash");
    for ty in [
        TxType::Legacy,
        TxType::Eip2930,
        TxType::Eip1559,
        TxType::Eip4844,
        TxType::Eip7702,
    ] {
        let raw = sample_signed(ty, 1, &signer).encoded_2718();
        g.bench_function(ty.name(), |b| {
            b.iter(|| {
                SignedTransaction::decode_2718(black_box(&raw))
                    .unwrap()
                    .hash()
            })
        });
    }
    g.finish();
}

fn bench_recover(c: &mut Criterion) {
    let tx = sample_signed(TxType::Eip1559, 1, &Signer::from_seed(2));
    c.bench_function("sender_recovery/eip1559", |b| {
        b.iter(|| black_box(&tx).recover_sender().unwrap())
    });
}

fn bench_blobs(c: &mut Criterion) {
    let signer = Signer::from_seed(3);
    let prague = BlobRules::new(Fork::Prague, BlobParams::PRAGUE);
    let osaka = BlobRules::new(Fork::Osaka, BlobParams::PRAGUE);
    let v0 = sample_blob_tx(SidecarVersion::V0, 6, 0, &signer);
    let v1 = sample_blob_tx(SidecarVersion::V1, 6, 0, &signer);
    c.bench_function("validate_cheap/6_blobs", |b| {
        b.iter(|| black_box(&v0).validate_cheap(&prague).unwrap())
    });
    let raw = v0.encoded_2718();
    c.bench_function("decode_pooled/6_blobs", |b| {
        b.iter_batched(
            || (),
            |_| PooledTransaction::decode_2718(black_box(&raw)).unwrap(),
            BatchSize::SmallInput,
        )
    });
    let mut g = c.benchmark_group("validate");
    g.sample_size(20);
    g.bench_function("v0/6_blobs", |b| b.iter(|| v0.validate(&prague).unwrap()));
    g.bench_function("v1/6_blobs", |b| b.iter(|| v1.validate(&osaka).unwrap()));
    g.finish();
}

/// Runs every benchmark of this file with criterion's command-line configuration (what
/// `criterion_group!` would generate, written out so it can carry this doc).
fn benches() {
    let mut criterion = Criterion::default().configure_from_args();
    bench_decode(&mut criterion);
    bench_recover(&mut criterion);
    bench_blobs(&mut criterion);
}
criterion_main!(benches);
