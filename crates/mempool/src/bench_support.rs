//! Workloads shared by the criterion benches and `make bench-table`, so both measure the
//! same thing: pre-signed transfers from distinct senders, pools filled to a size, and
//! timed loops over the admission paths.

use super::*;
use alloy_primitives::{TxKind, U256};
use moat_common::SignedTransaction;
use moat_common::config::ChainConfig;
use moat_common::testing::SAMPLE_CHAIN_ID;
use moat_common::transaction::{Eip1559Tx, Transaction};
use moat_crypto::secp::Signer;
use std::time::Duration;

/// The head every workload runs at: Prague rules, base fee 7 wei.
pub fn head() -> HeadInfo {
    HeadInfo {
        number: 100,
        timestamp: 1_000,
        base_fee: 7,
        blob_base_fee: 1,
        gas_limit: 30_000_000,
    }
}

/// Limits high enough that only the workloads that want eviction see it.
pub fn roomy_config() -> PoolConfig {
    let mut cfg = PoolConfig::new(ChainConfig::all_forks_at_genesis(
        SAMPLE_CHAIN_ID,
        Fork::Prague,
    ));
    let big = SubPoolLimit::new(1_000_000, 1 << 30);
    cfg.pending = big;
    cfg.basefee = big;
    cfg.queued = big;
    cfg.max_in_flight = 1 << 20;
    cfg.max_in_flight_per_origin = 1 << 20;
    cfg.sender_cache_capacity = 1 << 20;
    cfg
}

/// A plain EIP-1559 transfer.
pub fn transfer(signer: &Signer, nonce: u64, tip: u128, fee_cap: u128) -> PooledTransaction {
    let tx = Transaction::Eip1559(Eip1559Tx {
        chain_id: SAMPLE_CHAIN_ID,
        nonce,
        max_priority_fee_per_gas: tip,
        max_fee_per_gas: fee_cap,
        gas_limit: 21_000,
        to: TxKind::Call(Address::repeat_byte(9)),
        value: U256::from(1),
        ..Default::default()
    });
    PooledTransaction::new(SignedTransaction::sign(tx, signer), None)
}

/// A pre-signed transaction with the facts admission will derive from it.
#[derive(Clone)]
pub struct Signed {
    /// The signed EIP-2718 envelope, as RPC or a peer delivers it.
    pub raw: Bytes,
    /// The transaction hash admission will compute.
    pub hash: B256,
    /// The signer's address admission will recover.
    pub sender: Address,
}

/// `count` transfers, nonce 0, one per sender (seeds from `seed`), at `tip`.
pub fn signed_transfers(count: usize, seed: u64, tip: u128) -> Vec<Signed> {
    (0..count as u64)
        .map(|i| {
            let signer = Signer::from_seed(seed + i);
            let tx = transfer(&signer, 0, tip, 1_000);
            Signed {
                raw: tx.encoded_2718().into(),
                hash: tx.hash(),
                sender: signer.address(),
            }
        })
        .collect()
}

/// A state where every sender of `txs` can pay.
pub fn funded_state(txs: &[&[Signed]]) -> Arc<InMemoryState> {
    let state = Arc::new(InMemoryState::new(head()));
    for s in txs.iter().flat_map(|t| t.iter()) {
        state.set_balance(s.sender, U256::from(10u128.pow(21)));
    }
    state
}

/// Runs a future to completion on a fresh current-thread runtime.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime builds")
        .block_on(f)
}

/// A pool holding `base` (all admitted), with `cfg`.
pub fn pool_with(cfg: PoolConfig, state: Arc<InMemoryState>, base: &[Signed]) -> Pool {
    let pool = Pool::new(cfg, state);
    for s in base {
        pool.sender_cache().insert(s.hash, s.sender);
    }
    block_on(async {
        for s in base {
            pool.add_transaction(TxInput::Raw(s.raw.clone()), TxOrigin::Local)
                .await
                .expect("base txs are valid");
        }
    });
    pool
}

/// Times the admission of every tx in `txs` into `pool`, one after another.
pub fn time_admissions(pool: &Pool, txs: &[Signed], origin: TxOrigin) -> (Duration, usize) {
    block_on(async {
        let start = Instant::now();
        let mut ok = 0;
        for s in txs {
            ok += pool
                .add_transaction(TxInput::Raw(s.raw.clone()), origin)
                .await
                .is_ok() as usize;
        }
        (start.elapsed(), ok)
    })
}

/// Admission of `txs` into a pool holding `base`, the sender cache warm (`cached`) or cold.
pub fn admission(base: &[Signed], txs: &[Signed], cached: bool) -> Duration {
    let state = funded_state(&[base, txs]);
    let pool = pool_with(roomy_config(), state, base);
    if cached {
        for s in txs {
            pool.sender_cache().insert(s.hash, s.sender);
        }
    }
    let (elapsed, ok) = time_admissions(&pool, txs, TxOrigin::Peer(B512::ZERO));
    assert_eq!(ok, txs.len(), "every tx was admitted");
    elapsed
}

/// Each admission of `txs` into a pool whose pending subpool is full of cheaper ones
/// evicts one of them (so `txs` may be at most as many as `base`).
pub fn admission_with_eviction(base: &[Signed], txs: &[Signed]) -> Duration {
    assert!(
        txs.len() <= base.len(),
        "each newcomer needs a cheaper tx to evict"
    );
    // The base is admitted as remote: [`pool_with`] admits it as local, which is exempt
    // from eviction within the local share.
    let state = funded_state(&[base, txs]);
    let mut cfg = roomy_config();
    cfg.pending = SubPoolLimit::new(base.len(), 1 << 30);
    let pool = Pool::new(cfg, state);
    for s in base.iter().chain(txs) {
        pool.sender_cache().insert(s.hash, s.sender);
    }
    time_admissions(&pool, base, TxOrigin::Peer(B512::ZERO));
    let (elapsed, ok) = time_admissions(&pool, txs, TxOrigin::Peer(B512::ZERO));
    assert_eq!(ok, txs.len(), "every better tx got in");
    assert_eq!(pool.status().pending.txs, base.len());
    elapsed
}

/// A pool with `cfg` holding `fill` (each group admitted in full from a peer, in turn),
/// every sender of `fill` and `later` funded and its signatures cached.
fn filled_pool(cfg: PoolConfig, fill: &[&[Signed]], later: &[Signed]) -> Pool {
    let mut all: Vec<&[Signed]> = fill.to_vec();
    all.push(later);
    let pool = Pool::new(cfg, funded_state(&all));
    for s in all.iter().flat_map(|g| g.iter()) {
        pool.sender_cache().insert(s.hash, s.sender);
    }
    for group in fill {
        let (_, ok) = time_admissions(&pool, group, TxOrigin::Peer(B512::ZERO));
        assert_eq!(ok, group.len(), "what fills the pool is admitted");
    }
    pool
}

/// One remote sender's consecutive nonces at the lowest tip, with what fills a pool's
/// pending and queued subpools (1,000 each) with better txs from other senders.
pub struct RefusedStream {
    pending: Vec<Signed>,
    queued: Vec<Signed>,
    stream: Vec<Signed>,
}

/// Signs the material of [`time_refused`]: a stream of `len` nonces (not timed).
pub fn refused_stream(len: usize) -> RefusedStream {
    let signed = |signer: &Signer, nonce: u64, tip: u128| {
        let tx = transfer(signer, nonce, tip, 1_000);
        Signed {
            raw: tx.encoded_2718().into(),
            hash: tx.hash(),
            sender: signer.address(),
        }
    };
    let attacker = Signer::from_seed(40_000_000);
    RefusedStream {
        pending: signed_transfers(1_000, 41_000_000, 5),
        // Nonce 1 of fresh senders: gapped, so queued.
        queued: (0..1_000)
            .map(|i| signed(&Signer::from_seed(42_000_000 + i), 1, 5))
            .collect(),
        stream: (0..len as u64).map(|n| signed(&attacker, n, 1)).collect(),
    }
}

/// Fills a pool's pending and queued subpools (1,000 txs each, tip 5, remote), sends the
/// stream's first `before` nonces (tip 1: each would be the first evicted, so each is
/// refused as underpriced and remembered for a later package), then times the next
/// `timed`. Signatures are cached, so the figure is the pool's own work per refusal,
/// which should not grow with the refusals before it.
pub fn time_refused(m: &RefusedStream, before: usize, timed: usize) -> Duration {
    assert!(
        before + timed <= m.stream.len(),
        "the stream is long enough"
    );
    let mut cfg = roomy_config();
    cfg.pending = SubPoolLimit::new(m.pending.len(), 1 << 30);
    cfg.queued = SubPoolLimit::new(m.queued.len(), 1 << 30);
    let pool = filled_pool(cfg, &[&m.pending, &m.queued], &m.stream);
    let peer = TxOrigin::Peer(B512::ZERO);
    let (_, ok) = time_admissions(&pool, &m.stream[..before], peer);
    assert_eq!(ok, 0, "the stream is refused");
    let (elapsed, ok) = time_admissions(&pool, &m.stream[before..before + timed], peer);
    assert_eq!(ok, 0, "the stream is refused");
    elapsed
}

/// One sender's run of cheap txs (tip 1) that passed its allowance while pending was
/// under half full, the txs that then filled pending (tip 5, one per sender), and
/// newcomers (tip 6, one per sender) that each need room.
pub struct LongRun {
    run: Vec<Signed>,
    fill: Vec<Signed>,
    newcomers: Vec<Signed>,
}

/// Signs the material of [`time_evicting_long_run`]: a run of `run` txs, pending filled
/// to `2 × run + 120`, and `newcomers` (not timed).
pub fn long_run(run: usize, newcomers: usize) -> LongRun {
    let signer = Signer::from_seed(43_000_000);
    LongRun {
        run: (0..run as u64)
            .map(|n| {
                let tx = transfer(&signer, n, 1, 1_000);
                Signed {
                    raw: tx.encoded_2718().into(),
                    hash: tx.hash(),
                    sender: signer.address(),
                }
            })
            .collect(),
        fill: signed_transfers(run + 120, 44_000_000, 5),
        newcomers: signed_transfers(newcomers, 45_000_000, 6),
    }
}

/// Admits the run (remote, while pending is under half full), fills pending, then times
/// the newcomers' admissions: each evicts the run's top tx. Signatures are cached.
pub fn time_evicting_long_run(m: &LongRun) -> Duration {
    let mut cfg = roomy_config();
    cfg.pending = SubPoolLimit::new(m.run.len() + m.fill.len(), 1 << 30);
    let pool = filled_pool(cfg, &[&m.run, &m.fill], &m.newcomers);
    let peer = TxOrigin::Peer(B512::ZERO);
    let (elapsed, ok) = time_admissions(&pool, &m.newcomers, peer);
    assert_eq!(ok, m.newcomers.len(), "every newcomer got in");
    assert_eq!(
        pool.sender_txs(&m.run[0].sender).len(),
        m.run.len() - m.newcomers.len(),
        "each took the run's top"
    );
    elapsed
}

/// A pool with `senders` × `per_sender` pending transfers at varied tips.
pub fn pending_pool(senders: usize, per_sender: u64) -> Pool {
    let state = Arc::new(InMemoryState::new(head()));
    let pool = Pool::new(roomy_config(), state.clone());
    block_on(async {
        for i in 0..senders as u64 {
            let signer = Signer::from_seed(1_000_000 + i);
            state.set_balance(signer.address(), U256::from(10u128.pow(21)));
            for n in 0..per_sender {
                let tx = transfer(&signer, n, 1 + (i * 7 + n) as u128 % 50, 1_000);
                pool.add_transaction(TxInput::Decoded(Box::new(tx)), TxOrigin::Local)
                    .await
                    .expect("valid");
            }
        }
    });
    pool
}

/// Drains the best-transactions iterator of `pool` at the bench head's fees.
pub fn iterate_best(pool: &Pool) -> usize {
    let h = head();
    pool.best_transactions(BlockBudget {
        base_fee: h.base_fee,
        blob_base_fee: h.blob_base_fee,
        gas_limit: u64::MAX,
        max_blob_gas: 0,
        min_tip: 0,
    })
    .count()
}

/// A head change over `pool` that moves the base fee (every sender is reclassified) and
/// mines one transaction of each of the first `mined` senders.
pub fn head_change(pool: &Pool, mined: usize) -> Duration {
    let content = pool.content();
    let hashes: Vec<B256> = content
        .iter()
        .take(mined)
        .map(|(_, txs)| txs[0].0.hash())
        .collect();
    let mut h = head();
    h.number += 1;
    h.base_fee = 8;
    let start = Instant::now();
    block_on(pool.on_head_change(HeadUpdate {
        head: h,
        mined: hashes,
        ..Default::default()
    }));
    start.elapsed()
}

/// `peers` tasks deliver the same blob tx at once; returns the wall time and the KZG count.
pub fn blob_from_many_peers(
    tx: &PooledTransaction,
    sender_balance_of: Address,
    peers: u8,
) -> (Duration, u64) {
    let state = Arc::new(InMemoryState::new(head()));
    state.set_balance(sender_balance_of, U256::from(10u128.pow(21)));
    let pool = Pool::new(roomy_config(), state);
    let bytes: Bytes = tx.encoded_2718().into();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("a runtime builds");
    let elapsed = rt.block_on(async {
        let start = Instant::now();
        let tasks: Vec<_> = (0..peers)
            .map(|i| {
                let (pool, bytes) = (pool.clone(), bytes.clone());
                tokio::spawn(async move {
                    pool.add_transaction(TxInput::Raw(bytes), TxOrigin::Peer(B512::repeat_byte(i)))
                        .await
                })
            })
            .collect();
        for t in tasks {
            let _ = t.await;
        }
        start.elapsed()
    });
    (elapsed, pool.metrics().get(Counter::kzg_verifications))
}

/// Two threads admit `txs` (split between them, fresh senders) into one pool holding 10k;
/// returns the p50 and p99 latency of one admission in nanoseconds.
pub fn latency_two_threads(txs: &[Signed]) -> (f64, f64) {
    let base = signed_transfers(0, 0, 2);
    let state = funded_state(&[txs]);
    let pool = pool_with(roomy_config(), state, &base);
    let halves: Vec<Vec<Signed>> = txs
        .chunks(txs.len().div_ceil(2))
        .map(|c| c.to_vec())
        .collect();
    let mut latencies: Vec<u64> = std::thread::scope(|scope| {
        let handles: Vec<_> = halves
            .iter()
            .enumerate()
            .map(|(i, half)| {
                let pool = pool.clone();
                scope.spawn(move || {
                    block_on(async {
                        let mut out = Vec::with_capacity(half.len());
                        for s in half {
                            let start = Instant::now();
                            let r = pool
                                .add_transaction(
                                    TxInput::Raw(s.raw.clone()),
                                    TxOrigin::Peer(B512::repeat_byte(i as u8)),
                                )
                                .await;
                            out.push(start.elapsed().as_nanos() as u64);
                            assert!(r.is_ok(), "{r:?}");
                        }
                        out
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a submitter thread finished"))
            .collect()
    });
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize] as f64;
    (at(0.50), at(0.99))
}
