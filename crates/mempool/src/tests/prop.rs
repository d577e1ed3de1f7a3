//! The pool under random sequences of everything that happens to it: adds (new nonces,
//! gaps, replacements at random tips, underpriced and unaffordable ones), head changes
//! (base fee up and down, txs mined, a sender's nonce raised, a balance cut, a reorg
//! giving txs back), expiry of old queued txs, and eviction under small limits. After
//! every step the pool's invariants hold: indices and accounting
//! (`assert_consistent`), subpool classification, nonce contiguity of the pending run,
//! and the count and byte limits of every subpool (`assert_invariants`).

use super::*;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Add {
        who: usize,
        nonce: u64,
        tip: u128,
        cap: u128,
    },
    BaseFee(u64),
    Mine {
        who: usize,
    },
    CutBalance {
        who: usize,
    },
    Reorg {
        who: usize,
    },
    Expire,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0usize..4, 0u64..8, 1u128..40, 1u128..120)
            .prop_map(|(who, nonce, tip, cap)| Op::Add { who, nonce, tip, cap }),
        1 => (1u64..80).prop_map(Op::BaseFee),
        1 => (0usize..4).prop_map(|who| Op::Mine { who }),
        1 => (0usize..4).prop_map(|who| Op::CutBalance { who }),
        1 => (0usize..4).prop_map(|who| Op::Reorg { who }),
        1 => Just(Op::Expire),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn invariants_hold_after_every_step(ops in proptest::collection::vec(op(), 1..150)) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let (pool, state) = setup_with(|c| {
                c.max_account_slots = 3;
                c.max_account_queue = 3;
                c.pending.max_txs = 7;
                c.basefee.max_txs = 4;
                c.queued.max_txs = 5;
                c.queued_lifetime = std::time::Duration::ZERO;
            });
            let senders: Vec<Signer> = (0..4).map(|i| funded(&state, 300 + i)).collect();
            let mut h = head();
            // Txs taken out by `Mine`, per sender, that a `Reorg` gives back.
            let mut mined: Vec<Vec<PooledTransaction>> = vec![Vec::new(); senders.len()];
            for op in ops {
                match op {
                    Op::Add { who, nonce, tip, cap } => {
                        let tip = tip.min(cap);
                        let _ = add(&pool, &tx1559(&senders[who], nonce, tip, cap)).await;
                    }
                    Op::BaseFee(fee) => {
                        h.number += 1;
                        h.base_fee = fee;
                        pool.on_head_change(HeadUpdate { head: h, ..Default::default() }).await;
                    }
                    Op::Mine { who } => {
                        // The sender's lowest pooled tx is mined: its nonce moves past it.
                        let s = &senders[who];
                        let mut txs = pool.sender_txs(&s.address());
                        txs.sort_by_key(|t| t.nonce());
                        let Some(first) = txs.first() else { continue };
                        state.set_nonce(s.address(), first.nonce() + 1);
                        mined[who].push(first.tx.clone());
                        h.number += 1;
                        pool.on_head_change(HeadUpdate {
                            head: h,
                            mined: vec![first.hash()],
                            touched: vec![s.address()],
                            ..Default::default()
                        })
                        .await;
                    }
                    Op::CutBalance { who } => {
                        // Enough for a handful of transfers at most.
                        let s = &senders[who];
                        state.set_balance(s.address(), U256::from(3 * 21_000 * 120u64));
                        h.number += 1;
                        pool.on_head_change(HeadUpdate {
                            head: h,
                            touched: vec![s.address()],
                            ..Default::default()
                        })
                        .await;
                    }
                    Op::Reorg { who } => {
                        // The block with the sender's last mined tx goes away.
                        let s = &senders[who];
                        let Some(tx) = mined[who].pop() else { continue };
                        state.set_nonce(s.address(), tx.tx().tx().nonce());
                        pool.on_head_change(HeadUpdate {
                            head: h,
                            touched: vec![s.address()],
                            reorged: vec![tx],
                            ..Default::default()
                        })
                        .await;
                    }
                    Op::Expire => {
                        pool.remove_expired(std::time::Instant::now());
                    }
                }
                pool.inner.pool.lock().assert_invariants();
            }
            Ok::<(), TestCaseError>(())
        })?;
    }
}

/// A rising base fee moves pending txs into the base-fee subpool: the pool holds that
/// subpool to its limit then, as it does on insertion.
#[tokio::test]
async fn a_base_fee_rise_keeps_the_base_fee_subpool_within_its_limit() {
    let (pool, state) = setup_with(|c| {
        c.pending.max_txs = 8;
        c.basefee.max_txs = 2;
    });
    for i in 0..3 {
        let s = funded(&state, 400 + i);
        for n in 0..2 {
            add(&pool, &tx1559(&s, n, 1, 50)).await.unwrap();
        }
    }
    assert_eq!(pool.status().pending.txs, 6);
    let mut h = head();
    h.number += 1;
    h.base_fee = 60;
    let out = pool
        .on_head_change(HeadUpdate {
            head: h,
            ..Default::default()
        })
        .await;
    assert_eq!(pool.status().basefee.txs, 2);
    assert_eq!(out.removed.len(), 4, "the worst senders' txs are evicted");
    pool.inner.pool.lock().assert_invariants();
}

mod local_share {
    use super::*;
    use std::collections::BTreeMap;

    /// A sender's pooled txs: nonce → (hash, subpool).
    fn held(pool: &Pool, a: &Address) -> BTreeMap<u64, (B256, SubPool)> {
        pool.sender_txs(a)
            .iter()
            .map(|t| (t.nonce(), (t.hash(), pool.subpool_of(&t.hash()).unwrap())))
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Two local and two remote senders into a small pool whose locals may hold half
        /// of each subpool exempt (3 of 6 pending, 2 of 4 base-fee, 2 of 4 queued):
        /// - another sender's add evicts a local tx only while locals pass their share,
        ///   so afterwards locals still hold at least their share of the subpool the
        ///   eviction started in;
        /// - every sender, local or remote, loses txs only from the top: a run is never
        ///   broken;
        /// - the invariants hold (every subpool within its limits: the exemption never
        ///   holds one over them).
        #[test]
        fn locals_are_evicted_only_past_their_share(
            ops in proptest::collection::vec((0usize..4, 0u64..7, 1u128..60, 1u128..120), 1..150)
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            rt.block_on(async {
                let (pool, state) = setup_with(|c| {
                    c.max_account_slots = 2;
                    c.max_account_queue = 2;
                    c.local_account_slots = 5;
                    c.local_account_queue = 3;
                    c.pending.max_txs = 6;
                    c.basefee.max_txs = 4;
                    c.queued.max_txs = 4;
                    c.local_share = 50;
                });
                let share = |sub: SubPool| match sub {
                    SubPool::Pending => 3,
                    SubPool::BaseFee | SubPool::Queued => 2,
                    SubPool::Blob => 500,
                };
                let senders: Vec<Signer> = (0..4).map(|i| funded(&state, 500 + i)).collect();
                for (who, nonce, tip, cap) in ops {
                    let before: Vec<_> =
                        senders.iter().map(|s| held(&pool, &s.address())).collect();
                    let origin = if who < 2 { TxOrigin::Local } else { peer(1) };
                    let tx = tx1559(&senders[who], nonce, tip.min(cap), cap);
                    let _ = pool.add_transaction(raw(&tx), origin).await;
                    let afters: Vec<_> =
                        senders.iter().map(|s| held(&pool, &s.address())).collect();
                    let inner = pool.inner.pool.lock();
                    inner.assert_invariants();
                    for (i, after) in afters.iter().enumerate() {
                        let gone: Vec<u64> = before[i]
                            .iter()
                            .filter(|(n, (h, _))| after.get(n).is_none_or(|(h2, _)| h2 != h))
                            .map(|(n, _)| *n)
                            .filter(|n| !(i == who && *n == nonce))
                            .collect();
                        let top_kept = after.keys().next_back().copied();
                        for n in &gone {
                            prop_assert!(
                                top_kept.is_none_or(|t| *n > t),
                                "sender {i}: tx {n} left below kept tx {top_kept:?}"
                            );
                        }
                        if i < 2 && i != who && let Some(first) = gone.first() {
                            let sub = before[i][first].1;
                            prop_assert!(
                                inner.local_usage(sub).txs >= share(sub),
                                "a local tx left {sub:?} with locals under their share: {:?}",
                                inner.local_usage(sub)
                            );
                        }
                    }
                }
                Ok(())
            })?;
        }
    }
}
