//! Per-transaction cost of the p2p layer on the gossip path: what a peer's
//! `Transactions` / `PooledTransactions` costs before the pool sees it.
//!
//! - `decode_transactions_200`: snappy + message decode of 200 transfers (split into
//!   envelopes, no tx decoding: the pool decodes after its hash-based shields).
//! - `hash_of_envelope`: the hash the fetcher and the shields key on.
//! - `validate_requested_256`: announce, schedule and check a 256-tx reply.
//! - `blob_decode_and_validate_cheap_6`: a fetched 6-blob tx, decoded with its sidecar
//!   and structurally checked (no KZG).

use alloy_primitives::{B512, Bytes};
use criterion::{Criterion, Throughput, criterion_main};
use moat_common::TxType;
use moat_common::config::{BlobParams, Fork};
use moat_common::testing::{sample_blob_tx, sample_signed};
use moat_common::transaction::{BlobRules, PooledTransaction, SidecarVersion};
use moat_crypto::secp::Signer;
use moat_p2p::eth::{EthMessage, TRANSACTIONS};
use moat_p2p::fetcher::{Delivered, Fetcher, FetcherConfig, Meta};
use moat_p2p::p2p;
use std::time::Instant;

fn transfers(n: usize) -> Vec<Bytes> {
    let signer = Signer::from_seed(7);
    (0..n as u64)
        .map(|i| Bytes::from(sample_signed(TxType::Eip1559, i, &signer).encoded_2718()))
        .collect()
}

fn bench(c: &mut Criterion) {
    let txs = transfers(256);
    let mut g = c.benchmark_group("p2p");

    let msg = EthMessage::Transactions(txs[..200].to_vec()).encode(70);
    let framed = p2p::frame(0x12, &msg, true);
    g.throughput(Throughput::Elements(200));
    g.bench_function("decode_transactions_200", |b| {
        b.iter(|| {
            let (id, body) = p2p::unframe(&framed, true).unwrap();
            EthMessage::decode(id - 0x10, 70, &body).unwrap()
        })
    });
    assert_eq!(TRANSACTIONS, 0x02);

    g.throughput(Throughput::Elements(1));
    g.bench_function("hash_of_envelope", |b| {
        b.iter(|| PooledTransaction::hash_of_envelope(&txs[0]))
    });

    let hashes: Vec<_> = txs
        .iter()
        .map(|t| PooledTransaction::hash_of_envelope(t).unwrap())
        .collect();
    let delivered: Vec<Delivered> = hashes
        .iter()
        .zip(&txs)
        .map(|(h, t)| Delivered {
            hash: *h,
            ty: 2,
            size: t.len(),
        })
        .collect();
    let peer = B512::repeat_byte(1);
    g.throughput(Throughput::Elements(256));
    g.bench_function("validate_requested_256", |b| {
        b.iter_custom(|iters| {
            let mut total = std::time::Duration::ZERO;
            for _ in 0..iters {
                let mut f = Fetcher::new(FetcherConfig::default());
                let start = Instant::now();
                f.announce(
                    peer,
                    hashes.iter().zip(&txs).map(|(h, t)| {
                        (
                            *h,
                            Meta {
                                ty: 2,
                                size: t.len() as u32,
                                origin: None,
                            },
                        )
                    }),
                );
                let req = f.schedule(start);
                f.deliver(peer, req[0].request_id, &delivered).unwrap();
                total += start.elapsed();
            }
            total
        })
    });

    let blob = sample_blob_tx(SidecarVersion::V0, 6, 0, &Signer::from_seed(9)).encoded_2718();
    let rules = BlobRules::new(
        Fork::Prague,
        BlobParams {
            target: 6,
            max: 9,
            base_fee_update_fraction: 5_007_716,
        },
    );
    g.throughput(Throughput::Elements(1));
    g.bench_function("blob_decode_and_validate_cheap_6", |b| {
        b.iter(|| {
            let tx = PooledTransaction::decode_2718(&blob).unwrap();
            tx.validate_cheap(&rules).unwrap();
            tx
        })
    });
    g.finish();
}

/// Runs this file's benchmark with criterion's command-line configuration (what
/// `criterion_group!` would generate, written out so it can carry this doc).
fn benches() {
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
}
criterion_main!(benches);
