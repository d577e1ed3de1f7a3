//! Txs let go for room and brought back as a package (`pool/revive.rs`).

use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// A full pending subpool of three senders at tips 10, 11 and 12 (remote); the cheap
/// tx of `a` (nonce 0, tip 2) was evicted for them.
async fn full_pool_with_a_evicted() -> (Pool, Signer, Vec<Signer>) {
    let (pool, state) = setup_with(|c| c.pending = SubPoolLimit::new(3, 1 << 20));
    let a = funded(&state, 700);
    add(&pool, &tx1559(&a, 0, 2, 100)).await.unwrap();
    let others: Vec<Signer> = (0..3).map(|i| funded(&state, 701 + i)).collect();
    for (i, s) in others.iter().enumerate() {
        add(&pool, &tx1559(s, 0, 10 + i as u128, 100))
            .await
            .unwrap();
    }
    assert!(
        pool.sender_txs(&a.address()).is_empty(),
        "a's tx was evicted"
    );
    assert_eq!(pool.inner.pool.lock().let_go_usage().txs, 1);
    (pool, a, others)
}

/// The package (tip 2, then tip 100: 51 on average) beats the two tails eviction takes
/// for its room (10 and 11): the evicted tx comes back and both are pending.
#[tokio::test]
async fn a_rich_later_nonce_brings_its_evicted_parent_back() {
    let (pool, a, others) = full_pool_with_a_evicted().await;
    let rich = tx1559(&a, 1, 100, 200);
    let added = add(&pool, &rich).await.unwrap();
    assert_eq!(added.subpool, SubPool::Pending);
    let held: Vec<(u64, SubPool)> = pool
        .sender_txs(&a.address())
        .iter()
        .map(|t| (t.nonce(), pool.subpool_of(&t.hash()).unwrap()))
        .collect();
    assert_eq!(held, vec![(0, SubPool::Pending), (1, SubPool::Pending)]);
    assert!(pool.sender_txs(&others[0].address()).is_empty());
    assert!(pool.sender_txs(&others[1].address()).is_empty());
    assert_eq!(pool.sender_txs(&others[2].address()).len(), 1);
    let inner = pool.inner.pool.lock();
    inner.assert_invariants();
    inner.assert_let_go();
}

/// A package worth less than what it would push out (tips 2 and 12: 7 on average,
/// against 11) does not come back: the newcomer waits behind the gap, as before.
#[tokio::test]
async fn a_package_not_worth_its_room_stays_behind_its_gap() {
    let (pool, a, _) = full_pool_with_a_evicted().await;
    let added = add(&pool, &tx1559(&a, 1, 12, 200)).await.unwrap();
    assert_eq!(added.subpool, SubPool::Queued);
    assert_eq!(pool.sender_txs(&a.address()).len(), 1);
    assert_eq!(pool.status().pending.txs, 3);
    let inner = pool.inner.pool.lock();
    inner.assert_invariants();
    inner.assert_let_go();
}

/// With the memory off (`let_go` of 0 txs), nothing is remembered nor brought back.
#[tokio::test]
async fn no_memory_no_package() {
    let (pool, state) = setup_with(|c| {
        c.pending = SubPoolLimit::new(3, 1 << 20);
        c.let_go = SubPoolLimit::new(0, 0);
    });
    let a = funded(&state, 710);
    add(&pool, &tx1559(&a, 0, 2, 100)).await.unwrap();
    for i in 0..3 {
        let s = funded(&state, 711 + i);
        add(&pool, &tx1559(&s, 0, 10 + i as u128, 100))
            .await
            .unwrap();
    }
    let added = add(&pool, &tx1559(&a, 1, 100, 200)).await.unwrap();
    assert_eq!(added.subpool, SubPool::Queued);
    assert_eq!(pool.inner.pool.lock().let_go_usage().txs, 0);
}

/// What is remembered stays within its count and its bytes, the oldest forgotten
/// first: of five evicted txs a memory of two keeps the last two.
#[tokio::test]
async fn what_is_let_go_is_bounded_in_count_and_bytes() {
    // The size of one of these transfers (they differ by a byte at most).
    let one = tx1559(&Signer::from_seed(1), 0, 10, 100).size();
    for (limit, kept) in [
        (SubPoolLimit::new(2, 1 << 20), 2),
        // Room for three txs' bytes, not four.
        (SubPoolLimit::new(100, 3 * one + one / 2), 3),
    ] {
        let (pool, state) = setup_with(|c| {
            c.pending = SubPoolLimit::new(1, 1 << 20);
            c.let_go = limit;
        });
        let mut txs = Vec::new();
        for i in 0..6u64 {
            let s = funded(&state, 720 + i);
            let tx = tx1559(&s, 0, 10 + u128::from(i), 100);
            add(&pool, &tx).await.unwrap();
            txs.push(tx);
        }
        let inner = pool.inner.pool.lock();
        let usage = inner.let_go_usage();
        assert_eq!(usage.txs, kept, "{limit:?}");
        assert!(usage.bytes <= limit.max_bytes);
        inner.assert_let_go();
        // The newest evicted (the fifth tx) is remembered, the first is not.
        assert!(inner.let_go_holds(&txs[4].hash()));
        assert!(!inner.let_go_holds(&txs[0].hash()));
    }
}

/// A tx refused as underpriced (it would be the first evicted) is remembered, local or
/// remote: a later nonce of its sender may make it worth its room.
#[tokio::test]
async fn a_tx_refused_as_underpriced_is_remembered() {
    let (pool, state) = setup_with(|c| {
        c.pending = SubPoolLimit::new(1, 1 << 20);
        c.local_share = 0;
    });
    let s = funded(&state, 730);
    add(&pool, &tx1559(&s, 0, 50, 100)).await.unwrap();
    let local = tx1559(&funded(&state, 731), 0, 5, 100);
    assert_eq!(
        pool.add_transaction(raw(&local), TxOrigin::Local).await,
        Err(Rejection::Underpriced)
    );
    let remote = tx1559(&funded(&state, 732), 0, 5, 100);
    assert_eq!(add(&pool, &remote).await, Err(Rejection::Underpriced));
    let inner = pool.inner.pool.lock();
    assert!(inner.let_go_holds(&local.hash()));
    assert!(inner.let_go_holds(&remote.hash()));
}

/// Eviction of a sender's pending tail takes the queued txs above it too (a run loses
/// txs only from its top); they are remembered with it, and the gap-filler that arrives
/// later brings the whole run back when it is worth its room.
#[tokio::test]
async fn a_gap_filler_brings_back_the_run_evicted_with_its_tail() {
    let (pool, state) = setup_with(|c| c.pending = SubPoolLimit::new(3, 1 << 20));
    let a = funded(&state, 750);
    add(&pool, &tx1559(&a, 0, 5, 200)).await.unwrap();
    for n in 2..5 {
        let added = add(&pool, &tx1559(&a, n, 90, 200)).await.unwrap();
        assert_eq!(added.subpool, SubPool::Queued);
    }
    for i in 0..3 {
        let s = funded(&state, 751 + i);
        add(&pool, &tx1559(&s, 0, 10 + i as u128, 100))
            .await
            .unwrap();
    }
    assert!(
        pool.sender_txs(&a.address()).is_empty(),
        "a's run went whole"
    );
    // The filler: tips 5, 60, 90, 90, 90 make 67 on average, against the 10 to 12 of
    // the tails that leave for them.
    let added = add(&pool, &tx1559(&a, 1, 60, 200)).await.unwrap();
    assert_eq!(added.subpool, SubPool::Pending);
    let pending: Vec<u64> = pool
        .sender_txs(&a.address())
        .iter()
        .filter(|t| pool.subpool_of(&t.hash()) == Some(SubPool::Pending))
        .map(|t| t.nonce())
        .collect();
    // Pending holds three: the run's top two leave again, worst tail first.
    assert_eq!(pending, vec![0, 1, 2]);
    let inner = pool.inner.pool.lock();
    inner.assert_invariants();
    inner.assert_let_go();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Senders sending their nonces in order at random tips into a small full pool with a
    /// small memory, evicting by single tail or by package: after every add the
    /// invariants hold, the memory is within its bounds and holds nothing the pool holds
    /// at that nonce, and a sender loses txs only from its top (neither a package coming
    /// back nor a package evicted breaks a run).
    #[test]
    fn packages_coming_back_keep_the_pools_rules(
        ops in proptest::collection::vec((0usize..5, 1u128..100), 1..120),
        by_package in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let (pool, state) = setup_with(|c| {
                c.max_account_slots = 3;
                c.max_account_queue = 3;
                c.pending.max_txs = 5;
                c.queued.max_txs = 4;
                c.let_go = SubPoolLimit::new(4, 1 << 20);
                c.evict_by_package = by_package;
            });
            let senders: Vec<Signer> = (0..5).map(|i| funded(&state, 740 + i)).collect();
            let mut next = [0u64; 5];
            for (who, tip) in ops {
                let s = &senders[who];
                let before: Vec<BTreeMap<u64, B256>> =
                    senders.iter().map(|o| by_nonce(&pool, o)).collect();
                let _ = add(&pool, &tx1559(s, next[who], tip, 200)).await;
                next[who] += 1;
                let inner = pool.inner.pool.lock();
                inner.assert_invariants();
                inner.assert_let_go();
                drop(inner);
                for (i, o) in senders.iter().enumerate() {
                    let after = by_nonce(&pool, o);
                    let top_kept = after.keys().next_back().copied();
                    for (n, h) in &before[i] {
                        if after.get(n) != Some(h) {
                            prop_assert!(
                                top_kept.is_none_or(|t| *n > t),
                                "sender {i}: tx {n} left below kept tx {top_kept:?}"
                            );
                        }
                    }
                }
            }
            Ok(())
        })?;
    }
}

/// A sender's pooled txs: nonce → hash.
fn by_nonce(pool: &Pool, s: &Signer) -> BTreeMap<u64, B256> {
    pool.sender_txs(&s.address())
        .iter()
        .map(|t| (t.nonce(), t.hash()))
        .collect()
}

/// Eviction by package (`evict_by_package`, the default): the victim is the sender whose
/// pending suffix has the least average tip. A cheap run under one rich tail (tips 1, 1,
/// 1, 90: 23 on average) loses its tail, then its cheap txs, before a lone tx at 50,
/// which eviction by the least single tail takes instead.
#[tokio::test]
async fn eviction_by_package_takes_the_cheapest_suffix_not_the_cheapest_tail() {
    for by_package in [false, true] {
        let (pool, state) = setup_with(|c| {
            c.pending = SubPoolLimit::new(5, 1 << 20);
            c.evict_by_package = by_package;
        });
        let a = funded(&state, 760);
        for (n, tip) in [1, 1, 1, 90].into_iter().enumerate() {
            add(&pool, &tx1559(&a, n as u64, tip, 200)).await.unwrap();
        }
        let b = funded(&state, 761);
        add(&pool, &tx1559(&b, 0, 50, 200)).await.unwrap();
        let c = funded(&state, 762);
        add(&pool, &tx1559(&c, 0, 60, 200)).await.unwrap();
        let left = |s: &Signer| pool.sender_txs(&s.address()).len();
        if by_package {
            assert_eq!((left(&a), left(&b)), (3, 1), "a's rich tail went");
        } else {
            assert_eq!((left(&a), left(&b)), (4, 0), "b's tail went");
        }
        // By package, a tx at 40 (cheaper than every other sender's) still gets in: a's
        // cheap run goes on shrinking from its top. By tail it is the worst: refused.
        let d = funded(&state, 763);
        let r = add(&pool, &tx1559(&d, 0, 40, 200)).await;
        if by_package {
            assert!(r.is_ok(), "{r:?}");
            assert_eq!((left(&a), left(&b)), (2, 1), "a's top went again");
        } else {
            assert_eq!(r, Err(Rejection::Underpriced));
        }
        pool.inner.pool.lock().assert_invariants();
    }
}

/// A package is at most its sender's allowance (slots + queue): one sender's nonces
/// streamed at a full pool at the lowest tip are each refused as underpriced and
/// remembered, and judging the next one's package looks at no more than the allowance's
/// worth of them (before, each newcomer walked every nonce refused before it, under the
/// pool's lock: 600 µs a refusal after 8,000 of them). Past the allowance the newcomer
/// waits behind its gap, as it would with no package.
#[tokio::test]
async fn judging_a_package_looks_at_most_at_the_senders_allowance() {
    let (pool, state) = setup_with(|c| {
        c.pending = SubPoolLimit::new(2, 1 << 20);
        c.queued = SubPoolLimit::new(1, 1 << 20);
        c.max_account_slots = 2;
        c.max_account_queue = 3;
    });
    for i in 0..2 {
        add(&pool, &tx1559(&funded(&state, 770 + i), 0, 10, 100))
            .await
            .unwrap();
    }
    // Queued: a fresh sender's nonce 1 (gapped).
    add(&pool, &tx1559(&funded(&state, 772), 1, 10, 100))
        .await
        .unwrap();
    let a = funded(&state, 773);
    let mut most = 0;
    for nonce in 0..40 {
        pool.inner.pool.lock().package_links.set(0);
        assert_eq!(
            add(&pool, &tx1559(&a, nonce, 1, 100)).await,
            Err(Rejection::Underpriced),
            "nonce {nonce}"
        );
        most = most.max(pool.inner.pool.lock().package_links.get());
    }
    assert!(most <= 5, "a newcomer looked at {most} links");
    let inner = pool.inner.pool.lock();
    assert_eq!(
        inner.let_go_usage().txs,
        40,
        "every refused nonce is remembered"
    );
    inner.assert_invariants();
    inner.assert_let_go();
}
