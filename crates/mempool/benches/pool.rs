//! Pool benches: admission paths, eviction, block building and head changes.
//! Each also has a row in `make bench-table`, which reads the same workloads.

use criterion::{Criterion, criterion_main};
use moat_common::testing::sample_blob_tx;
use moat_common::transaction::SidecarVersion;
use moat_crypto::secp::Signer;
use moat_mempool::bench_support::*;
use moat_mempool::{Rejection, TxInput, TxOrigin};
use std::time::Duration;

const BASE: usize = 10_000;
const CHUNK: usize = 20_000;

/// Sums a workload over chunks of `CHUNK` transactions until `iters` were timed.
fn chunked(iters: u64, txs: &[Signed], mut run: impl FnMut(&[Signed]) -> Duration) -> Duration {
    let mut left = iters as usize;
    let mut total = Duration::ZERO;
    while left > 0 {
        let n = left.min(txs.len());
        total += run(&txs[..n]);
        left -= n;
    }
    total
}

fn bench_admission(c: &mut Criterion) {
    let base = signed_transfers(BASE, 10_000_000, 2);
    let fresh = signed_transfers(CHUNK, 20_000_000, 3);
    let mut g = c.benchmark_group("admission");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    g.bench_function("cached_sender_into_10k", |b| {
        b.iter_custom(|iters| chunked(iters, &fresh, |txs| admission(&base, txs, true)))
    });
    g.bench_function("fresh_sender_into_10k", |b| {
        b.iter_custom(|iters| chunked(iters, &fresh, |txs| admission(&base, txs, false)))
    });
    g.bench_function("insert_at_capacity_with_eviction", |b| {
        b.iter_custom(|iters| {
            chunked(iters, &fresh[..BASE], |txs| {
                admission_with_eviction(&base, txs)
            })
        })
    });
    g.finish();

    // A remote sender's stream refused at a full pool: the 500 after 4,000 of its nonces
    // were refused cost what the first 500 do.
    let stream = refused_stream(4_500);
    let mut g = c.benchmark_group("refused_at_capacity");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    for (name, before) in [
        ("first_500_of_a_sender", 0),
        ("500_after_4000_of_a_sender", 4_000),
    ] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters.div_ceil(500) {
                    total += time_refused(&stream, before, 500);
                }
                total * iters as u32 / (iters.div_ceil(500) * 500) as u32
            })
        });
    }
    g.finish();

    // Room made by evicting the top of one sender's 2,500-tx run, one tx per newcomer.
    let run = long_run(2_500, 500);
    let mut g = c.benchmark_group("evicting_a_long_run");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    g.bench_function("newcomer_evicting_the_top_of_2500", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters.div_ceil(500) {
                total += time_evicting_long_run(&run);
            }
            total * iters as u32 / (iters.div_ceil(500) * 500) as u32
        })
    });
    g.finish();

    // Rejections from raw bytes.
    let state = funded_state(&[&base[..1000]]);
    let pool = pool_with(roomy_config(), state.clone(), &base[..1000]);
    let dup = TxInput::Raw(base[0].raw.clone());
    let known_bad = signed_transfers(1, 30_000_000, 2).remove(0);
    state.set_nonce(known_bad.sender, 5);
    let first = block_on(pool.add_transaction(
        TxInput::Raw(known_bad.raw.clone()),
        TxOrigin::Peer(Default::default()),
    ));
    assert!(matches!(first, Err(Rejection::NonceTooLow { .. })));
    let bad = TxInput::Raw(known_bad.raw.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("rejection_from_raw_bytes");
    g.bench_function("recent_failure", |b| {
        b.iter(|| {
            let r =
                rt.block_on(pool.add_transaction(bad.clone(), TxOrigin::Peer(Default::default())));
            assert_eq!(r, Err(Rejection::RecentlyFailed));
        })
    });
    g.bench_function("duplicate", |b| {
        b.iter(|| {
            let r =
                rt.block_on(pool.add_transaction(dup.clone(), TxOrigin::Peer(Default::default())));
            assert_eq!(r, Err(Rejection::AlreadyKnown));
        })
    });
    g.finish();
}

fn bench_block_building_and_heads(c: &mut Criterion) {
    let pool = pending_pool(1_000, 10);
    let mut g = c.benchmark_group("pool_10k");
    g.sample_size(20);
    g.bench_function("best_tx_iteration", |b| {
        b.iter(|| assert_eq!(iterate_best(&pool), 10_000))
    });
    g.bench_function("head_change", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| head_change(&pending_pool(1_000, 10), 100))
                .sum()
        })
    });
    g.finish();
}

/// What a version-0 sidecar's conversion costs (Osaka, RPC only: 128 cell proofs a
/// blob), beside one verification of the version-1 sidecar it becomes; 6 blobs, Osaka's
/// most per transaction.
fn bench_sidecar_conversion(c: &mut Criterion) {
    let signer = Signer::from_seed(6);
    let v0 = sample_blob_tx(SidecarVersion::V0, 6, 0, &signer);
    let v1 = sample_blob_tx(SidecarVersion::V1, 6, 0, &signer);
    let blobs = &v0.sidecar().expect("a sidecar").blobs;
    let mut g = c.benchmark_group("sidecar_6_blobs");
    g.sample_size(10);
    g.bench_function("convert_v0_to_v1", |b| {
        b.iter(|| {
            for blob in blobs {
                moat_crypto::kzg::compute_cell_proofs(blob).expect("a valid blob");
            }
        })
    });
    g.bench_function("verify_v1", |b| {
        b.iter(|| {
            v1.sidecar()
                .expect("a sidecar")
                .verify_proofs()
                .expect("valid")
        })
    });
    g.finish();
}

fn bench_blob_peers(c: &mut Criterion) {
    let signer = Signer::from_seed(5);
    let tx = sample_blob_tx(SidecarVersion::V0, 6, 0, &signer);
    let mut g = c.benchmark_group("blob");
    g.sample_size(10);
    g.bench_function("one_tx_from_32_peers", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    let (wall, kzg) = blob_from_many_peers(&tx, signer.address(), 32);
                    assert_eq!(kzg, 1);
                    wall
                })
                .sum()
        })
    });
    g.finish();
}

/// Every group of pool benches, run with criterion's default settings and the command
/// line's filters.
fn benches() {
    let mut criterion: Criterion<_> = Criterion::default().configure_from_args();
    bench_admission(&mut criterion);
    bench_block_building_and_heads(&mut criterion);
    bench_blob_peers(&mut criterion);
    bench_sidecar_conversion(&mut criterion);
}
criterion_main!(benches);
