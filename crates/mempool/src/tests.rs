use super::*;
use alloy_primitives::{TxKind, U256};
use moat_common::SignedTransaction;
use moat_common::config::{ChainConfig, Fork};
use moat_common::testing::sample_blob_tx;
use moat_common::transaction::{
    Authorization, BlobsBundleError, Eip1559Tx, Eip4844Tx, Eip7702Tx, SidecarVersion,
    StatelessError, Transaction,
};
use moat_crypto::kzg::KzgError;
use moat_crypto::secp::Signer;

const BASE_FEE: u64 = 7;
const RICH: u128 = 1_000_000_000_000_000_000_000;

fn head() -> HeadInfo {
    HeadInfo {
        number: 100,
        timestamp: 1_000,
        base_fee: BASE_FEE,
        blob_base_fee: 1,
        gas_limit: 30_000_000,
    }
}

fn setup_with(f: impl FnOnce(&mut PoolConfig)) -> (Pool, Arc<InMemoryState>) {
    let state = Arc::new(InMemoryState::new(head()));
    let mut cfg = PoolConfig::new(ChainConfig::all_forks_at_genesis(1, Fork::Prague));
    f(&mut cfg);
    (Pool::new(cfg, state.clone()), state)
}

fn setup() -> (Pool, Arc<InMemoryState>) {
    setup_with(|_| {})
}

fn funded(state: &InMemoryState, seed: u64) -> Signer {
    let s = Signer::from_seed(seed);
    state.set_balance(s.address(), U256::from(RICH));
    s
}

fn tx1559(signer: &Signer, nonce: u64, tip: u128, cap: u128) -> PooledTransaction {
    let tx = Transaction::Eip1559(Eip1559Tx {
        chain_id: 1,
        nonce,
        max_priority_fee_per_gas: tip,
        max_fee_per_gas: cap,
        gas_limit: 21_000,
        to: TxKind::Call(Address::repeat_byte(9)),
        value: U256::from(1),
        ..Default::default()
    });
    PooledTransaction::new(SignedTransaction::sign(tx, signer), None)
}

fn raw(p: &PooledTransaction) -> TxInput {
    TxInput::Raw(p.encoded_2718().into())
}

fn peer(n: u8) -> TxOrigin {
    TxOrigin::Peer(B512::repeat_byte(n))
}

async fn add(pool: &Pool, p: &PooledTransaction) -> AddResult {
    pool.add_transaction(raw(p), peer(1)).await
}

#[tokio::test]
async fn plain_tx_goes_pending_and_a_duplicate_is_already_known() {
    let (pool, state) = setup();
    let a = funded(&state, 1);
    let tx = tx1559(&a, 0, 2, 100);
    let added = add(&pool, &tx).await.unwrap();
    assert_eq!(
        added,
        Added {
            hash: tx.hash(),
            subpool: SubPool::Pending,
            replaced: None,
            gapped: false,
        }
    );
    assert_eq!(add(&pool, &tx).await, Err(Rejection::AlreadyKnown));
    assert_eq!(pool.metrics().get(Counter::sender_recoveries), 1);
    assert_eq!(pool.metrics().rejections("already_known"), 1);
    assert_eq!(pool.sender_cache().get(&tx.hash()), Some(a.address()));
    assert_eq!(pool.get(&tx.hash()).unwrap().sender, a.address());
    assert_eq!(pool.pending_nonce(&a.address()), 1);
    pool.assert_consistent();
}

/// `--txpool.private`: a private sender's txs are pooled and pending like any, but the
/// pool never hands them to the network (`get_shareable`, `is_shareable`).
#[tokio::test]
async fn a_private_senders_txs_are_pooled_but_not_shareable() {
    let (pool, state) = setup_with(|cfg| {
        cfg.private.insert(Signer::from_seed(40).address());
    });
    let a = funded(&state, 40);
    let b = funded(&state, 41);
    let private = tx1559(&a, 0, 2, 100);
    let public = tx1559(&b, 0, 2, 100);
    for tx in [&private, &public] {
        let added = pool
            .add_transaction(raw(tx), TxOrigin::Local)
            .await
            .unwrap();
        assert_eq!(added.subpool, SubPool::Pending);
    }
    assert!(pool.get(&private.hash()).is_some());
    assert!(pool.get_shareable(&private.hash()).is_none());
    assert!(pool.get_shareable(&public.hash()).is_some());
    assert!(!pool.is_shareable(&pool.get(&private.hash()).unwrap()));
    // A peer's copy of it is no more shareable: the sender decides.
    let again = tx1559(&a, 1, 2, 100);
    pool.add_transaction(raw(&again), peer(1)).await.unwrap();
    assert!(pool.get_shareable(&again.hash()).is_none());
}

/// eth/73's announcements carry sender and nonce: the pool says which cannot be pooled
/// before anything is fetched.
#[tokio::test]
async fn hopeless_announcements_are_told_from_the_head_state() {
    let (pool, state) = setup();
    let rich = funded(&state, 60);
    state.set_nonce(rich.address(), 5);
    assert_eq!(pool.hopeless(&rich.address(), 4), Some("nonce_too_low"));
    assert_eq!(pool.hopeless(&rich.address(), 5), None);
    assert_eq!(
        pool.hopeless(&rich.address(), 50),
        None,
        "a gap is admission's call"
    );
    let broke = Signer::from_seed(61).address();
    assert_eq!(pool.hopeless(&broke, 0), Some("insufficient_funds"));
    let contract = funded(&state, 62).address();
    state.set_account(
        contract,
        AccountState {
            nonce: 0,
            balance: U256::from(RICH),
            code: CodeKind::Contract,
        },
    );
    assert_eq!(pool.hopeless(&contract, 0), Some("sender_has_code"));
}

#[tokio::test]
async fn nonce_gap_queues_and_filling_it_promotes() {
    let (pool, state) = setup();
    let a = funded(&state, 2);
    let mut events = pool.subscribe_pending();
    let t1 = tx1559(&a, 1, 2, 100);
    assert_eq!(add(&pool, &t1).await.unwrap().subpool, SubPool::Queued);
    let t0 = tx1559(&a, 0, 2, 100);
    assert_eq!(add(&pool, &t0).await.unwrap().subpool, SubPool::Pending);
    assert_eq!(pool.subpool_of(&t1.hash()), Some(SubPool::Pending));
    let got: Vec<B256> = (0..2).map(|_| events.try_recv().unwrap()).collect();
    assert_eq!(got, vec![t0.hash(), t1.hash()]);
    assert_eq!(pool.status().pending.txs, 2);
    pool.assert_consistent();
}

#[tokio::test]
async fn fee_cap_below_base_fee_goes_to_basefee_and_its_descendants_too() {
    let (pool, state) = setup();
    let a = funded(&state, 3);
    assert_eq!(
        add(&pool, &tx1559(&a, 0, 1, BASE_FEE as u128 - 1))
            .await
            .unwrap()
            .subpool,
        SubPool::BaseFee
    );
    assert_eq!(
        add(&pool, &tx1559(&a, 1, 2, 100)).await.unwrap().subpool,
        SubPool::BaseFee
    );
    pool.assert_consistent();
}

/// Every pooled tx's subpool, by hash.
fn subpools(pool: &Pool) -> Vec<(B256, SubPool)> {
    let mut all: Vec<(B256, SubPool)> = pool
        .content()
        .into_iter()
        .flat_map(|(_, txs)| txs.into_iter().map(|(t, sub)| (t.hash(), sub)))
        .collect();
    all.sort();
    all
}

/// A run may pass its sender's allowance while pending is under half full; once the pool
/// fills, each newcomer that needs room evicts that run's cheap top, one tx at a time.
/// That eviction updates the sender's classification from the cut (tails, counts,
/// pending tips, package key) instead of walking the run again: 50 evictions from a
/// run of 400 walk no more than the newcomers' own one-tx senders (before, 50 × 400).
#[tokio::test]
async fn evicting_the_top_of_a_long_run_does_not_walk_it() {
    let (pool, state) = setup_with(|c| c.pending = SubPoolLimit::new(1_000, 1 << 30));
    let a = funded(&state, 900);
    for nonce in 0..400 {
        let added = add(&pool, &tx1559(&a, nonce, 1, 100)).await.unwrap();
        assert_eq!(added.subpool, SubPool::Pending);
    }
    for i in 0..600 {
        add(&pool, &tx1559(&funded(&state, 1_000 + i), 0, 5, 100))
            .await
            .unwrap();
    }
    assert_eq!(pool.status().pending.txs, 1_000);
    pool.inner.pool.lock().walked = 0;
    for i in 0..50 {
        add(&pool, &tx1559(&funded(&state, 2_000 + i), 0, 6, 100))
            .await
            .unwrap();
    }
    assert_eq!(
        pool.sender_txs(&a.address()).len(),
        350,
        "one of a's per newcomer"
    );
    {
        let inner = pool.inner.pool.lock();
        assert!(inner.walked <= 50, "{} txs walked", inner.walked);
        inner.assert_invariants();
    }
    // A whole walk of every sender finds what the cuts left.
    let before = subpools(&pool);
    {
        let mut inner = pool.inner.pool.lock();
        inner.reclassify_all();
        inner.assert_invariants();
    }
    assert_eq!(subpools(&pool), before);
}

#[tokio::test]
async fn an_append_to_a_senders_run_is_classified_without_walking_it() {
    let (pool, state) = setup();
    let mut h = head();
    h.blob_base_fee = 100;
    state.set_head(h);
    pool.on_head_change(HeadUpdate {
        head: h,
        ..Default::default()
    })
    .await;
    let class = |p: &PooledTransaction| {
        let (pool, p) = (pool.clone(), p.clone());
        async move { add(&pool, &p).await.unwrap().subpool }
    };
    let (a, b, c) = (funded(&state, 12), funded(&state, 13), funded(&state, 14));
    // A long run: every tx past the first is an append.
    for nonce in 0..300 {
        assert_eq!(class(&tx1559(&a, nonce, 2, 100)).await, SubPool::Pending);
    }
    // A fee cap under the base fee: it waits for the fee, and so does what follows it.
    let low = BASE_FEE as u128 - 1;
    assert_eq!(class(&tx1559(&a, 300, 1, low)).await, SubPool::BaseFee);
    assert_eq!(class(&tx1559(&a, 301, 2, 100)).await, SubPool::BaseFee);
    // A gap: queued, and so is what follows it.
    assert_eq!(class(&tx1559(&a, 303, 2, 100)).await, SubPool::Queued);
    assert_eq!(class(&tx1559(&a, 304, 2, 100)).await, SubPool::Queued);
    // A run the base fee has overtaken: an append joins it in the base-fee subpool.
    for nonce in 0..5 {
        assert_eq!(class(&tx1559(&b, nonce, 2, 8)).await, SubPool::Pending);
    }
    h.number += 1;
    h.base_fee = 9;
    pool.on_head_change(HeadUpdate {
        head: h,
        ..Default::default()
    })
    .await;
    assert_eq!(class(&tx1559(&b, 5, 2, 100)).await, SubPool::BaseFee);
    // Blob txs: one under the blob base fee waits in the blob subpool; after it the
    // class below cannot be read from the subpool, so the whole run is walked.
    assert_eq!(class(&blob_tx(&c, 0, 5, 100, 200)).await, SubPool::Pending);
    assert_eq!(class(&blob_tx(&c, 1, 5, 100, 10)).await, SubPool::Blob);
    assert_eq!(class(&blob_tx(&c, 2, 5, 100, 200)).await, SubPool::Blob);

    // a: 299 + 4 appends; b: 4 + 1; c: 1 (its third tx was walked).
    let mut inner = pool.inner.pool.lock();
    assert_eq!(inner.appends_classified, 309);
    // A whole walk of every sender finds what the appends found.
    drop(inner);
    let before = subpools(&pool);
    inner = pool.inner.pool.lock();
    inner.reclassify_all();
    inner.assert_invariants();
    drop(inner);
    assert_eq!(subpools(&pool), before);
}

#[tokio::test]
async fn funds_are_checked_with_what_is_already_pooled() {
    let (pool, state) = setup();
    let a = Signer::from_seed(4);
    // Enough for exactly one transfer at fee cap 100.
    state.set_balance(a.address(), U256::from(21_000u64 * 100 + 1));
    let first = tx1559(&a, 0, 2, 100);
    add(&pool, &first).await.unwrap();
    let second = tx1559(&a, 1, 2, 100);
    assert!(matches!(
        add(&pool, &second).await,
        Err(Rejection::Overdraft { .. })
    ));
    let poor = Signer::from_seed(5);
    let r = add(&pool, &tx1559(&poor, 0, 2, 100)).await;
    assert!(matches!(r, Err(Rejection::InsufficientFunds { .. })));
    assert!(
        r.unwrap_err()
            .to_string()
            .starts_with("insufficient funds for gas * price + value")
    );
    // A funding failure is state-dependent: once funded, the same bytes go through.
    state.set_balance(poor.address(), U256::from(RICH));
    add(&pool, &tx1559(&poor, 0, 2, 100)).await.unwrap();
}

#[tokio::test]
async fn a_recently_failed_tx_costs_no_signature_recovery() {
    let (pool, state) = setup();
    let a = funded(&state, 6);
    state.set_nonce(a.address(), 5);
    let stale = tx1559(&a, 3, 2, 100);
    assert_eq!(
        add(&pool, &stale).await,
        Err(Rejection::NonceTooLow { state: 5, tx: 3 })
    );
    assert_eq!(pool.metrics().get(Counter::sender_recoveries), 1);
    for _ in 0..10 {
        assert_eq!(add(&pool, &stale).await, Err(Rejection::RecentlyFailed));
    }
    assert_eq!(
        pool.metrics().get(Counter::sender_recoveries),
        1,
        "no ECDSA for a known-bad hash"
    );
    assert_eq!(pool.metrics().get(Counter::failure_cache_hits), 10);

    // A stateless failure (wrong chain id) is remembered before ECDSA is ever run.
    let Transaction::Eip1559(mut t) = tx1559(&a, 5, 2, 100).tx().tx().clone() else {
        unreachable!()
    };
    t.chain_id = 2;
    let wrong_chain =
        PooledTransaction::new(SignedTransaction::sign(Transaction::Eip1559(t), &a), None);
    assert!(matches!(
        add(&pool, &wrong_chain).await,
        Err(Rejection::Stateless(StatelessError::ChainId { .. }))
    ));
    assert_eq!(
        add(&pool, &wrong_chain).await,
        Err(Rejection::RecentlyFailed)
    );
    assert_eq!(pool.metrics().get(Counter::sender_recoveries), 1);
}

#[tokio::test]
async fn replacement_needs_ten_percent_on_every_fee() {
    let (pool, state) = setup();
    let a = funded(&state, 7);
    let old = tx1559(&a, 0, 100, 1_000);
    add(&pool, &old).await.unwrap();
    assert_eq!(
        add(&pool, &tx1559(&a, 0, 109, 1_100)).await,
        Err(Rejection::ReplacementUnderpriced)
    );
    assert_eq!(
        add(&pool, &tx1559(&a, 0, 110, 1_099)).await,
        Err(Rejection::ReplacementUnderpriced)
    );
    let new = tx1559(&a, 0, 110, 1_100);
    let added = add(&pool, &new).await.unwrap();
    assert_eq!(added.replaced, Some(old.hash()));
    assert!(!pool.contains(&old.hash()));
    assert_eq!(pool.len(), 1);
    assert_eq!(
        Rejection::ReplacementUnderpriced.to_string(),
        "replacement transaction underpriced"
    );
    pool.assert_consistent();
}

fn blob_tx(signer: &Signer, nonce: u64, tip: u128, cap: u128, blob_cap: u128) -> PooledTransaction {
    blob_tx_n(signer, nonce, 1, tip, cap, blob_cap)
}

fn blob_tx_n(
    signer: &Signer,
    nonce: u64,
    blobs: usize,
    tip: u128,
    cap: u128,
    blob_cap: u128,
) -> PooledTransaction {
    let base = sample_blob_tx(SidecarVersion::V0, blobs, nonce, signer);
    let (signed, sidecar) = base.into_parts();
    let Transaction::Eip4844(mut t): Transaction = signed.into_tx() else {
        unreachable!()
    };
    t.max_priority_fee_per_gas = tip;
    t.max_fee_per_gas = cap;
    t.max_fee_per_blob_gas = blob_cap;
    let t: Eip4844Tx = t;
    PooledTransaction::new(
        SignedTransaction::sign(Transaction::Eip4844(t), signer),
        sidecar,
    )
}

#[tokio::test]
async fn blob_replacement_needs_double_fees_and_senders_hold_one_kind() {
    let (pool, state) = setup();
    let a = funded(&state, 8);
    add(&pool, &blob_tx(&a, 0, 100, 1_000, 10)).await.unwrap();
    assert_eq!(
        add(&pool, &blob_tx(&a, 0, 150, 1_500, 15)).await,
        Err(Rejection::ReplacementUnderpriced)
    );
    assert_eq!(
        add(&pool, &blob_tx(&a, 0, 200, 2_000, 19)).await,
        Err(Rejection::ReplacementUnderpriced)
    );
    assert!(
        add(&pool, &blob_tx(&a, 0, 200, 2_000, 20))
            .await
            .unwrap()
            .replaced
            .is_some()
    );
    assert_eq!(
        add(&pool, &tx1559(&a, 1, 2, 100)).await,
        Err(Rejection::AlreadyReserved)
    );
    let b = funded(&state, 9);
    add(&pool, &tx1559(&b, 0, 2, 100)).await.unwrap();
    assert_eq!(
        add(&pool, &blob_tx(&b, 1, 100, 1_000, 10)).await,
        Err(Rejection::AlreadyReserved)
    );
    pool.assert_consistent();
}

#[tokio::test]
async fn queued_txs_have_an_allowance_of_their_own_and_the_next_nonce_always_gets_in() {
    let (pool, state) = setup();
    let a = funded(&state, 10);
    // 64 txs behind a gap: geth's account queue.
    for nonce in 1..=64 {
        assert_eq!(
            add(&pool, &tx1559(&a, nonce, 2, 100))
                .await
                .unwrap()
                .subpool,
            SubPool::Queued
        );
    }
    assert_eq!(
        add(&pool, &tx1559(&a, 65, 2, 100)).await,
        Err(Rejection::AccountLimit { slots: 64 })
    );
    // The gap-filler is never refused for the count.
    assert_eq!(
        add(&pool, &tx1559(&a, 0, 2, 100)).await.unwrap().subpool,
        SubPool::Pending
    );
    assert_eq!(pool.status().pending.txs, 65);
    pool.assert_consistent();
}

#[tokio::test]
async fn a_gap_filler_displaces_the_senders_farthest_tx() {
    let (pool, state) = setup();
    let a = funded(&state, 12);
    // 16 executable, then a gap at 16, then 64 queued (17..=80): the sender is full.
    for nonce in (0..16).chain(17..=80) {
        add(&pool, &tx1559(&a, nonce, 2, 100)).await.unwrap();
    }
    assert_eq!(
        add(&pool, &tx1559(&a, 81, 2, 100)).await,
        Err(Rejection::AccountLimit { slots: 64 })
    );
    let farthest = tx1559(&a, 80, 2, 100).hash();
    let filler = tx1559(&a, 16, 2, 100);
    assert_eq!(add(&pool, &filler).await.unwrap().subpool, SubPool::Pending);
    assert!(!pool.contains(&farthest), "the farthest nonce made room");
    assert_eq!(pool.pending_nonce(&a.address()), 80);
    assert_eq!(pool.len(), 80);
    pool.assert_consistent();

    // Past the first gap, a lower nonce displaces the highest one.
    let b = funded(&state, 13);
    for nonce in (0..1).chain(2..41).chain(42..67) {
        add(&pool, &tx1559(&b, nonce, 2, 100)).await.unwrap();
    }
    assert_eq!(
        add(&pool, &tx1559(&b, 70, 2, 100)).await,
        Err(Rejection::AccountLimit { slots: 64 })
    );
    add(&pool, &tx1559(&b, 41, 2, 100)).await.unwrap();
    assert!(!pool.contains(&tx1559(&b, 66, 2, 100).hash()));
    pool.assert_consistent();
}

#[tokio::test]
async fn local_senders_get_a_larger_bounded_allowance() {
    let (pool, state) = setup_with(|c| {
        c.local_account_slots = 4;
        c.local_account_queue = 100;
    });
    let a = funded(&state, 14);
    for nonce in 1..=100 {
        pool.add_transaction(raw(&tx1559(&a, nonce, 2, 100)), TxOrigin::Local)
            .await
            .unwrap();
    }
    assert_eq!(
        pool.add_transaction(raw(&tx1559(&a, 101, 2, 100)), TxOrigin::Local)
            .await,
        Err(Rejection::AccountLimit { slots: 100 })
    );
    pool.assert_consistent();
}

#[tokio::test]
async fn an_unbroken_run_may_pass_the_slots_while_pending_has_room() {
    let (pool, state) = setup();
    let a = funded(&state, 10);
    for nonce in 0..40 {
        assert_eq!(
            add(&pool, &tx1559(&a, nonce, 2, 100))
                .await
                .unwrap()
                .subpool,
            SubPool::Pending,
            "nonce {nonce}"
        );
    }
    // A gap past the slots queues (the queue has an allowance of its own).
    assert_eq!(
        add(&pool, &tx1559(&a, 41, 2, 100)).await.unwrap().subpool,
        SubPool::Queued
    );

    // With pending half full, the run grows within the sender's whole allowance (slots
    // and queue: 16 + 4), and a later nonce is not taken where the next one is not.
    let (pool, state) = setup_with(|cfg| {
        cfg.pending.max_txs = 40;
        cfg.max_account_queue = 4;
    });
    let b = funded(&state, 10);
    let c = funded(&state, 11);
    for nonce in 0..16 {
        add(&pool, &tx1559(&c, nonce, 2, 100)).await.unwrap();
    }
    for nonce in 0..20 {
        add(&pool, &tx1559(&b, nonce, 2, 100)).await.unwrap();
    }
    assert!(pool.status().pending.txs >= 20, "pending is half full");
    assert_eq!(
        add(&pool, &tx1559(&b, 20, 2, 100)).await,
        Err(Rejection::AccountLimit { slots: 20 })
    );
    assert_eq!(
        add(&pool, &tx1559(&b, 21, 2, 100)).await,
        Err(Rejection::AccountLimit { slots: 20 })
    );
    pool.assert_consistent();
}

#[tokio::test]
async fn minimum_tip_applies_to_remote_txs_only() {
    let (pool, state) = setup_with(|c| c.min_tip = 5);
    let a = funded(&state, 11);
    let cheap = tx1559(&a, 0, 4, 100);
    assert!(matches!(
        add(&pool, &cheap).await,
        Err(Rejection::Stateless(StatelessError::TipBelowMinimum { .. }))
    ));
    let local = tx1559(&a, 0, 0, 100);
    pool.add_transaction(raw(&local), TxOrigin::Local)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_full_subpool_rejects_the_cheap_and_evicts_the_worst() {
    let (pool, state) = setup_with(|c| c.pending = SubPoolLimit::new(3, 1 << 20));
    let senders: Vec<Signer> = (20..24).map(|i| funded(&state, i)).collect();
    for (i, s) in senders[..3].iter().enumerate() {
        add(&pool, &tx1559(s, 0, 10 + i as u128, 100))
            .await
            .unwrap();
    }
    // Not better than the worst (tip 10): underpriced.
    assert_eq!(
        add(&pool, &tx1559(&senders[3], 0, 10, 100)).await,
        Err(Rejection::Underpriced)
    );
    let rich = tx1559(&senders[3], 0, 50, 100);
    add(&pool, &rich).await.unwrap();
    assert_eq!(pool.status().pending.txs, 3);
    assert!(
        pool.sender_txs(&senders[0].address()).is_empty(),
        "the cheapest sender was evicted"
    );
    assert_eq!(pool.metrics().get(Counter::evicted), 1);
    pool.assert_consistent();
}

#[tokio::test]
async fn eviction_takes_the_worst_senders_highest_nonces() {
    let (pool, state) = setup_with(|c| c.pending = SubPoolLimit::new(4, 1 << 20));
    let a = funded(&state, 30);
    let b = funded(&state, 31);
    for n in 0..3 {
        add(&pool, &tx1559(&a, n, 2, 100)).await.unwrap();
    }
    add(&pool, &tx1559(&b, 0, 20, 100)).await.unwrap();
    add(&pool, &tx1559(&b, 1, 20, 100)).await.unwrap();
    let left: Vec<u64> = pool
        .sender_txs(&a.address())
        .iter()
        .map(|t| t.nonce())
        .collect();
    assert_eq!(left, vec![0, 1], "a's highest nonce went, no gap was made");
    pool.assert_consistent();
}

/// Local senders' txs within their share of a subpool (here 2 of 4) are exempt: a full
/// pool evicts the worst remote tx instead, even a richer one.
#[tokio::test]
async fn locals_within_their_share_are_not_evicted() {
    let (pool, state) = setup_with(|c| {
        c.pending = SubPoolLimit::new(4, 1 << 20);
        c.local_share = 50;
    });
    let (a, b, c) = (funded(&state, 32), funded(&state, 33), funded(&state, 34));
    let locals: Vec<_> = (0..2).map(|n| tx1559(&a, n, 1, 100)).collect();
    for tx in &locals {
        pool.add_transaction(raw(tx), TxOrigin::Local)
            .await
            .unwrap();
    }
    for n in 0..2 {
        add(&pool, &tx1559(&b, n, 50, 100)).await.unwrap();
    }
    add(&pool, &tx1559(&c, 0, 90, 100)).await.unwrap();
    for tx in &locals {
        assert!(pool.contains(&tx.hash()), "a local within its share stays");
    }
    assert_eq!(pool.sender_txs(&b.address()).len(), 1, "b's top nonce went");
    // A remote tx worse than every remote one is refused, though locals pay less.
    assert_eq!(
        add(&pool, &tx1559(&funded(&state, 35), 0, 40, 100)).await,
        Err(Rejection::Underpriced)
    );
    pool.inner.pool.lock().assert_invariants();
}

/// Past their share, local txs are candidates like any other: the cheapest local tail
/// goes before richer remote txs, from its sender's top nonce (the run stays unbroken),
/// and only down to the share; then a full pool evicts remote txs again.
#[tokio::test]
async fn locals_past_their_share_are_evicted_before_richer_remote_txs() {
    let (pool, state) = setup_with(|c| {
        c.pending = SubPoolLimit::new(4, 1 << 20);
        c.local_share = 50;
    });
    let (a, b, c) = (funded(&state, 36), funded(&state, 37), funded(&state, 38));
    let locals: Vec<_> = (0..3).map(|n| tx1559(&a, n, 1, 100)).collect();
    for tx in &locals {
        pool.add_transaction(raw(tx), TxOrigin::Local)
            .await
            .unwrap();
    }
    add(&pool, &tx1559(&b, 0, 50, 100)).await.unwrap();
    add(&pool, &tx1559(&c, 0, 40, 100)).await.unwrap();
    let left: Vec<u64> = pool
        .sender_txs(&a.address())
        .iter()
        .map(|t| t.nonce())
        .collect();
    assert_eq!(
        left,
        vec![0, 1],
        "a's top nonce went, not a richer remote tx"
    );
    assert_eq!(pool.status().pending.txs, 4);
    // Locals at their share again: the next eviction takes the worst remote tx.
    assert_eq!(
        add(&pool, &tx1559(&funded(&state, 39), 0, 30, 100)).await,
        Err(Rejection::Underpriced)
    );
    add(&pool, &tx1559(&funded(&state, 40), 0, 45, 100))
        .await
        .unwrap();
    assert!(pool.sender_txs(&c.address()).is_empty());
    assert_eq!(pool.sender_txs(&a.address()).len(), 2);
    // A local tx past the share that is worse than everything is refused, not pooled.
    assert_eq!(
        pool.add_transaction(raw(&tx1559(&a, 2, 1, 100)), TxOrigin::Local)
            .await,
        Err(Rejection::Underpriced)
    );
    pool.inner.pool.lock().assert_invariants();
}

/// `local_share = 0` evicts local txs by price like remote ones (what geth 1.17's pool
/// does); 100 keeps the old exemption, bounded by the subpool's limit.
#[tokio::test]
async fn the_local_share_runs_from_none_to_the_whole_subpool() {
    for (share, local_kept) in [(0, false), (100, true)] {
        let (pool, state) = setup_with(|c| {
            c.pending = SubPoolLimit::new(2, 1 << 20);
            c.local_share = share;
        });
        let local = tx1559(&funded(&state, 41), 0, 1, 100);
        pool.add_transaction(raw(&local), TxOrigin::Local)
            .await
            .unwrap();
        add(&pool, &tx1559(&funded(&state, 42), 0, 50, 100))
            .await
            .unwrap();
        let r = add(&pool, &tx1559(&funded(&state, 43), 0, 40, 100)).await;
        assert_eq!(r.is_ok(), !local_kept, "share {share}");
        assert_eq!(pool.contains(&local.hash()), local_kept, "share {share}");
        pool.inner.pool.lock().assert_invariants();
    }
}

#[tokio::test]
async fn queued_txs_expire() {
    let (pool, state) = setup();
    let a = funded(&state, 34);
    add(&pool, &tx1559(&a, 0, 2, 100)).await.unwrap();
    add(&pool, &tx1559(&a, 5, 2, 100)).await.unwrap();
    assert_eq!(pool.remove_expired(Instant::now()), 0);
    let later = Instant::now() + pool.config().queued_lifetime + std::time::Duration::from_secs(1);
    assert_eq!(pool.remove_expired(later), 1);
    assert_eq!(pool.len(), 1, "pending txs do not expire");
}

#[tokio::test]
async fn head_change_removes_mined_promotes_demotes_and_reinjects() {
    let (pool, state) = setup();
    let a = funded(&state, 40);
    let b = funded(&state, 41);
    let a0 = tx1559(&a, 0, 2, 100);
    let a1 = tx1559(&a, 1, 2, 100);
    let b0 = tx1559(&b, 0, 1, 8);
    for t in [&a0, &a1, &b0] {
        add(&pool, t).await.unwrap();
    }
    assert_eq!(pool.subpool_of(&b0.hash()), Some(SubPool::Pending));

    // a0 is mined; the base fee rises above b0's cap.
    state.set_nonce(a.address(), 1);
    let mut h = head();
    h.number += 1;
    h.base_fee = 9;
    let out = pool
        .on_head_change(HeadUpdate {
            head: h,
            mined: vec![a0.hash()],
            ..Default::default()
        })
        .await;
    assert_eq!(out.removed, vec![a0.hash()]);
    assert_eq!(pool.subpool_of(&a1.hash()), Some(SubPool::Pending));
    assert_eq!(pool.subpool_of(&b0.hash()), Some(SubPool::BaseFee));

    // The base fee falls again: b0 is promoted back.
    h.number += 1;
    h.base_fee = 5;
    pool.on_head_change(HeadUpdate {
        head: h,
        ..Default::default()
    })
    .await;
    assert_eq!(pool.subpool_of(&b0.hash()), Some(SubPool::Pending));

    // A reorg takes the block with a0 away: a0 comes back, and a1 stays behind it.
    state.set_nonce(a.address(), 0);
    let out = pool
        .on_head_change(HeadUpdate {
            head: h,
            touched: vec![a.address()],
            reorged: vec![a0.clone()],
            ..Default::default()
        })
        .await;
    assert_eq!(out.reinjected, 1);
    assert_eq!(pool.subpool_of(&a0.hash()), Some(SubPool::Pending));
    assert_eq!(
        pool.metrics().get(Counter::sender_recoveries),
        3,
        "re-injection hit the sender cache"
    );
    pool.assert_consistent();
}

#[tokio::test]
async fn a_nonce_raised_by_a_block_drops_stale_txs() {
    let (pool, state) = setup();
    let a = funded(&state, 42);
    for n in 0..3 {
        add(&pool, &tx1559(&a, n, 2, 100)).await.unwrap();
    }
    state.set_nonce(a.address(), 2);
    let out = pool
        .on_head_change(HeadUpdate {
            head: head(),
            touched: vec![a.address()],
            ..Default::default()
        })
        .await;
    assert_eq!(out.removed.len(), 2);
    assert_eq!(pool.len(), 1);
    pool.assert_consistent();
}

fn budget() -> BlockBudget {
    BlockBudget {
        base_fee: BASE_FEE,
        blob_base_fee: 1,
        gas_limit: 30_000_000,
        max_blob_gas: 6 * 131_072,
        min_tip: 0,
    }
}

#[tokio::test]
async fn best_transactions_order_by_the_runs_worth_and_nonce() {
    let (pool, state) = setup();
    let (a, b, c) = (funded(&state, 50), funded(&state, 51), funded(&state, 54));
    // a: a cheap nonce 0 opens the way to a rich nonce 1 (3 then 30: 16.5 a tx on
    // average); b: one tx at 10; c: 3 then 12 (7.5 on average).
    let a0 = tx1559(&a, 0, 3, 100);
    let a1 = tx1559(&a, 1, 30, 100);
    let b0 = tx1559(&b, 0, 10, 100);
    let c0 = tx1559(&c, 0, 3, 100);
    let c1 = tx1559(&c, 1, 12, 100);
    for t in [&a0, &a1, &b0, &c0, &c1] {
        add(&pool, t).await.unwrap();
    }
    let order: Vec<B256> = pool.best_transactions(budget()).map(|t| t.hash()).collect();
    assert_eq!(
        order,
        vec![a0.hash(), a1.hash(), b0.hash(), c0.hash(), c1.hash()]
    );

    // Block gas: room for two transfers, and a's run is worth most (33 against 13).
    let order: Vec<B256> = pool
        .best_transactions(BlockBudget {
            gas_limit: 42_000,
            ..budget()
        })
        .map(|t| t.hash())
        .collect();
    assert_eq!(order, vec![a0.hash(), a1.hash()]);

    // A tx marked invalid takes its sender's later nonces with it.
    let mut best = pool.best_transactions(budget());
    let first = best.next().unwrap();
    assert_eq!(first.hash(), a0.hash());
    best.mark_invalid(&first.hash());
    let rest: Vec<B256> = best.map(|t| t.hash()).collect();
    assert_eq!(rest, vec![b0.hash(), c0.hash(), c1.hash()]);
}

/// The least tip (`--miner.gasprice`) applies to a sender's run as its key does: a tx
/// under it goes in ahead of the txs of its sender that pay for it (a local zero tip then
/// does not block its sender's later txs), never alone or at a run's end.
#[tokio::test]
async fn the_least_tip_lets_a_cheap_tx_in_when_its_run_pays_for_it() {
    let (pool, state) = setup();
    let (a, b, c, d) = (
        funded(&state, 55),
        funded(&state, 56),
        funded(&state, 57),
        funded(&state, 58),
    );
    // a: a local zero tip, then 30 (15 on average); b: 10; c: 3 then 12 (7.5); d: 20,
    // then a local zero tip.
    let a0 = tx1559(&a, 0, 0, 100);
    let a1 = tx1559(&a, 1, 30, 100);
    let b0 = tx1559(&b, 0, 10, 100);
    let c0 = tx1559(&c, 0, 3, 100);
    let c1 = tx1559(&c, 1, 12, 100);
    let d0 = tx1559(&d, 0, 20, 100);
    let d1 = tx1559(&d, 1, 0, 100);
    for t in [&a0, &a1, &b0, &c0, &c1, &d0, &d1] {
        pool.add_transaction(raw(t), TxOrigin::Local).await.unwrap();
    }
    let least_10 = BlockBudget {
        min_tip: 10,
        ..budget()
    };
    let order: Vec<B256> = pool.best_transactions(least_10).map(|t| t.hash()).collect();
    assert_eq!(order, vec![d0.hash(), a0.hash(), a1.hash(), b0.hash()]);
    // With no least tip, every tx goes in.
    assert_eq!(pool.best_transactions(budget()).count(), 7);
}

#[tokio::test]
async fn best_transactions_respect_blob_gas() {
    let (pool, state) = setup();
    let a = funded(&state, 52);
    let b = funded(&state, 53);
    add(&pool, &blob_tx(&a, 0, 5, 100, 10)).await.unwrap();
    add(&pool, &blob_tx(&b, 0, 4, 100, 10)).await.unwrap();
    let one_blob = BlockBudget {
        max_blob_gas: 131_072,
        ..budget()
    };
    assert_eq!(pool.best_transactions(one_blob).count(), 1);
    assert_eq!(pool.best_transactions(budget()).count(), 2);
}

#[tokio::test]
async fn best_transactions_choose_the_most_valuable_blobs() {
    let (pool, state) = setup();
    // Room for 3 blobs: a's 2-blob tx pays the best tip (100), but b, c and d's 1-blob
    // txs (90 each) are worth more together (270 against 190 with one of them).
    let a = funded(&state, 55);
    let a0 = blob_tx_n(&a, 0, 2, 100, 200, 10);
    add(&pool, &a0).await.unwrap();
    let mut ones = Vec::new();
    for (i, seed) in [56u64, 57, 58].into_iter().enumerate() {
        let s = funded(&state, seed);
        // Distinct blobs: sample blobs follow the nonce, so each sender starts higher.
        state.set_nonce(s.address(), 1 + i as u64);
        let t = blob_tx_n(&s, 1 + i as u64, 1, 90, 200, 10);
        add(&pool, &t).await.unwrap();
        ones.push(t.hash());
    }
    let three_blobs = BlockBudget {
        max_blob_gas: 3 * 131_072,
        ..budget()
    };
    let mut picked: Vec<B256> = pool
        .best_transactions(three_blobs)
        .map(|t| t.hash())
        .collect();
    picked.sort();
    ones.sort();
    assert_eq!(picked, ones);
    // With room for 4, a's tx and two of the others (280 against 270).
    let four_blobs = BlockBudget {
        max_blob_gas: 4 * 131_072,
        ..budget()
    };
    let picked: Vec<B256> = pool
        .best_transactions(four_blobs)
        .map(|t| t.hash())
        .collect();
    assert_eq!(picked.len(), 3);
    assert_eq!(picked[0], a0.hash());
}

#[tokio::test]
async fn blob_tx_is_indexed_by_versioned_hash() {
    let (pool, state) = setup();
    let a = funded(&state, 60);
    let tx = sample_blob_tx(SidecarVersion::V0, 2, 0, &a);
    assert_eq!(add(&pool, &tx).await.unwrap().subpool, SubPool::Pending);
    let vh = tx.tx().tx().blob_versioned_hashes()[1];
    let (bundle, index) = pool.blob_by_versioned_hash(&vh).unwrap();
    assert_eq!(index, 1);
    assert_eq!(bundle.blobs[1], tx.sidecar().unwrap().blobs[1]);
    assert_eq!(pool.metrics().get(Counter::kzg_verifications), 1);
    // A duplicate costs no KZG.
    assert_eq!(add(&pool, &tx).await, Err(Rejection::AlreadyKnown));
    assert_eq!(pool.metrics().get(Counter::kzg_verifications), 1);
}

#[tokio::test]
async fn blob_fee_cap_below_blob_base_fee_waits_in_the_blob_subpool() {
    let (pool, state) = setup();
    let mut h = head();
    h.blob_base_fee = 100;
    state.set_head(h);
    pool.on_head_change(HeadUpdate {
        head: h,
        ..Default::default()
    })
    .await;
    let a = funded(&state, 61);
    assert_eq!(
        add(&pool, &blob_tx(&a, 0, 5, 100, 10))
            .await
            .unwrap()
            .subpool,
        SubPool::Blob
    );
}

#[tokio::test]
async fn blob_txs_must_be_contiguous_and_pay_a_blob_fee() {
    let (pool, state) = setup();
    let a = funded(&state, 63);
    // A gap before a blob tx: refused before its KZG, and not remembered (the gap may fill).
    let gapped = blob_tx(&a, 1, 5, 100, 10);
    assert_eq!(
        add(&pool, &gapped).await,
        Err(Rejection::BlobNonceGap {
            expected: 0,
            found: 1
        })
    );
    assert_eq!(pool.metrics().get(Counter::kzg_verifications), 0);
    add(&pool, &blob_tx(&a, 0, 5, 100, 10)).await.unwrap();
    add(&pool, &gapped).await.unwrap();
    // A blob fee cap of zero can never be paid.
    let b = funded(&state, 64);
    let e = add(&pool, &blob_tx(&b, 0, 5, 100, 0)).await.unwrap_err();
    assert_eq!(e, Rejection::BlobFeeCapTooLow);
    assert!(e.is_hash_determined());
    pool.assert_consistent();
}

#[tokio::test]
async fn invalid_proofs_are_rejected_without_blocking_a_valid_copy() {
    let (pool, state) = setup();
    let a = funded(&state, 62);
    let good = sample_blob_tx(SidecarVersion::V0, 2, 0, &a);
    let (signed, sidecar) = good.clone().into_parts();
    let mut sidecar = sidecar.unwrap();
    sidecar.proofs.swap(0, 1);
    let bad = PooledTransaction::new(signed, Some(sidecar));
    assert_eq!(bad.hash(), good.hash());
    let e = add(&pool, &bad).await.unwrap_err();
    assert_eq!(
        e,
        Rejection::Sidecar(BlobsBundleError::Kzg(KzgError::InvalidProof))
    );
    assert!(e.is_peer_fault());
    assert!(!e.is_hash_determined());
    // The same bad bundle again (another identity of the same attacker, say): refused
    // as the same fault without a second KZG check.
    assert_eq!(add(&pool, &bad).await.unwrap_err(), e);
    assert_eq!(pool.metrics().get(Counter::kzg_verifications), 1);
    assert_eq!(pool.metrics().get(Counter::kzg_repeats_refused), 1);
    // Another bad bundle for the same tx is another sidecar: it gets its own check.
    let (signed, sidecar) = good.clone().into_parts();
    let mut other = sidecar.unwrap();
    other.proofs[0] = other.proofs[1];
    let other = PooledTransaction::new(signed, Some(other));
    assert_eq!(add(&pool, &other).await.unwrap_err(), e);
    assert_eq!(pool.metrics().get(Counter::kzg_verifications), 2);
    // The good sidecar of the same tx is not blocked by either.
    add(&pool, &good).await.unwrap();
    assert_eq!(pool.metrics().get(Counter::kzg_verifications), 3);
}

#[tokio::test]
async fn a_blob_tx_without_sidecar_is_a_peer_fault() {
    let (pool, state) = setup();
    let a = funded(&state, 63);
    let tx = sample_blob_tx(SidecarVersion::V0, 1, 0, &a);
    let canonical = tx.tx().encoded_2718();
    let e = pool
        .add_transaction(TxInput::Raw(canonical.into()), peer(2))
        .await
        .unwrap_err();
    assert_eq!(e, Rejection::Sidecar(BlobsBundleError::MissingSidecar));
    assert!(e.is_peer_fault());
    assert_eq!(
        pool.metrics().get(Counter::sender_recoveries),
        0,
        "rejected before ECDSA"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_peers_delivering_one_blob_tx_cost_one_kzg() {
    let (pool, state) = setup();
    let a = funded(&state, 64);
    let tx = sample_blob_tx(SidecarVersion::V0, 6, 0, &a);
    let bytes: Bytes = tx.encoded_2718().into();
    let barrier = Arc::new(tokio::sync::Barrier::new(32));
    let tasks: Vec<_> = (0..32u8)
        .map(|i| {
            let (pool, bytes, barrier) = (pool.clone(), bytes.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                pool.add_transaction(TxInput::Raw(bytes), peer(i)).await
            })
        })
        .collect();
    let mut added = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => added += 1,
            Err(e) => assert_eq!(e, Rejection::AlreadyKnown),
        }
    }
    assert_eq!(added, 1);
    assert_eq!(pool.metrics().get(Counter::kzg_verifications), 1);
}

#[tokio::test]
async fn concurrent_distinct_blob_txs_share_kzg_batches() {
    let (pool, state) = setup();
    let txs: Vec<PooledTransaction> = (70..76)
        .map(|i| sample_blob_tx(SidecarVersion::V0, 1, 0, &funded(&state, i)))
        .collect();
    let results = futures_join(txs.iter().map(|t| add(&pool, t))).await;
    assert!(results.iter().all(|r| r.is_ok()));
    assert_eq!(pool.metrics().get(Counter::kzg_verifications), 6);
    assert!(
        pool.metrics().get(Counter::kzg_batches) < 6,
        "some verifications were batched"
    );
}

/// Runs futures concurrently on the current task.
async fn futures_join<F: std::future::Future>(futs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut set = Vec::new();
    for f in futs {
        set.push(Box::pin(f));
    }
    let mut out: Vec<Option<F::Output>> = (0..set.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (i, f) in set.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => done = false,
                }
            }
        }
        if done {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    out.into_iter()
        .map(|o| o.expect("all futures completed"))
        .collect()
}

fn tx7702(signer: &Signer, nonce: u64, authority: &Signer) -> PooledTransaction {
    let tx = Transaction::Eip7702(Eip7702Tx {
        chain_id: 1,
        nonce,
        max_priority_fee_per_gas: 2,
        max_fee_per_gas: 100,
        gas_limit: 100_000,
        to: Address::repeat_byte(9),
        authorization_list: vec![Authorization::sign(
            U256::from(1),
            Address::repeat_byte(0x77),
            0,
            authority,
        )],
        ..Default::default()
    });
    PooledTransaction::new(SignedTransaction::sign(tx, signer), None)
}

#[tokio::test]
async fn delegated_senders_and_authorities_get_limited_slots() {
    let (pool, state) = setup();
    let delegated = funded(&state, 80);
    state.set_account(
        delegated.address(),
        AccountState {
            nonce: 0,
            balance: U256::from(RICH),
            code: CodeKind::Delegated(Address::repeat_byte(1)),
        },
    );
    add(&pool, &tx1559(&delegated, 0, 2, 100)).await.unwrap();
    assert_eq!(
        add(&pool, &tx1559(&delegated, 1, 2, 100)).await,
        Err(Rejection::InflightLimit)
    );

    // An authority named by a pooled authorization is held to one slot as well.
    let sponsor = funded(&state, 81);
    let authority = funded(&state, 82);
    add(&pool, &tx7702(&sponsor, 0, &authority)).await.unwrap();
    add(&pool, &tx1559(&authority, 0, 2, 100)).await.unwrap();
    assert_eq!(
        add(&pool, &tx1559(&authority, 1, 2, 100)).await,
        Err(Rejection::InflightLimit)
    );

    // An authorization naming an account with several pooled txs is refused.
    let busy = funded(&state, 83);
    for n in 0..2 {
        add(&pool, &tx1559(&busy, n, 2, 100)).await.unwrap();
    }
    assert_eq!(
        add(&pool, &tx7702(&sponsor, 1, &busy)).await,
        Err(Rejection::AuthorityReserved)
    );

    // Contracts cannot send.
    let contract = funded(&state, 84);
    state.set_account(
        contract.address(),
        AccountState {
            nonce: 0,
            balance: U256::from(RICH),
            code: CodeKind::Contract,
        },
    );
    assert_eq!(
        add(&pool, &tx1559(&contract, 0, 2, 100)).await,
        Err(Rejection::SenderHasCode)
    );
    pool.assert_consistent();
}

#[tokio::test]
async fn backpressure_refuses_before_decoding() {
    let (pool, _) = setup_with(|c| c.max_in_flight = 0);
    let r = pool
        .add_transaction(TxInput::Raw(Bytes::from_static(b"garbage")), peer(1))
        .await;
    assert_eq!(r, Err(Rejection::Busy));
}

#[tokio::test]
async fn oversized_and_malformed_input_is_rejected_as_a_peer_fault() {
    let (pool, _) = setup();
    let big = Bytes::from(vec![0x02; MAX_TX_SIZE + 1]);
    let e = pool
        .add_transaction(TxInput::Raw(big), peer(1))
        .await
        .unwrap_err();
    assert!(matches!(e, Rejection::Oversized { .. }) && !e.is_peer_fault());
    let e = pool
        .add_transaction(TxInput::Raw(Bytes::from_static(&[0x02, 0xc0])), peer(1))
        .await
        .unwrap_err();
    assert!(matches!(e, Rejection::Decode(_)) && e.is_peer_fault());
    assert_eq!(pool.metrics().rejections("decode"), 1);
}

/// A journal file of its own for each test, in a directory removed when this is dropped
/// (also when the test panics).
struct JournalPath {
    path: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for JournalPath {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.path
    }
}

impl AsRef<std::path::Path> for JournalPath {
    fn as_ref(&self) -> &std::path::Path {
        &self.path
    }
}

fn journal_path(tag: &str) -> JournalPath {
    let dir = tempfile::Builder::new()
        .prefix(&format!("moat-pool-journal-{tag}-"))
        .tempdir()
        .unwrap();
    JournalPath {
        path: dir.path().join("txpool.journal"),
        _dir: dir,
    }
}

/// A pool over `state` (a restart) with the journal at `path` reloaded into it.
async fn restart(
    path: &std::path::Path,
    state: &Arc<InMemoryState>,
    cfg: impl FnOnce(&mut PoolConfig),
) -> (Pool, JournalReload) {
    let mut config = PoolConfig::new(ChainConfig::all_forks_at_genesis(1, Fork::Prague));
    cfg(&mut config);
    let pool = Pool::new(config, state.clone());
    let (journal, contents) = Journal::open(path).unwrap();
    pool.attach_journal(journal);
    let reload = pool.reload_journal(contents).await;
    pool.assert_consistent();
    (pool, reload)
}

/// The records of the journal file now.
fn journal_entries(path: &std::path::Path) -> Vec<Vec<u8>> {
    let (journal, contents) = Journal::open(path).unwrap();
    journal.close();
    contents.entries
}

fn fates(reload: &JournalReload) -> Vec<(&'static str, usize)> {
    ReloadFate::ALL
        .iter()
        .filter(|f| reload.count(**f) > 0)
        .map(|f| (f.name(), reload.count(*f)))
        .collect()
}

#[tokio::test]
async fn local_txs_survive_a_restart_through_the_journal() {
    let path = journal_path("survive");
    let (pool, state) = setup();
    let (journal, _) = Journal::open(&path).unwrap();
    pool.attach_journal(journal.clone());
    // A long unbroken run from one sender: more than its slots, as live admission allows.
    let a = funded(&state, 90);
    let txs: Vec<_> = (0..40).map(|n| tx1559(&a, n, 2, 100)).collect();
    for tx in &txs {
        pool.add_transaction(raw(tx), TxOrigin::Local)
            .await
            .unwrap();
    }
    // Remote transactions are not journaled.
    add(&pool, &tx1559(&funded(&state, 91), 0, 2, 100))
        .await
        .unwrap();
    journal.close();
    assert_eq!(journal_entries(&path).len(), 40);

    let (restarted, reload) = restart(&path, &state, |_| {}).await;
    assert_eq!(fates(&reload), vec![("readmitted", 40)]);
    for tx in &txs {
        assert_eq!(restarted.subpool_of(&tx.hash()), Some(SubPool::Pending));
    }
    assert_eq!(restarted.len(), 40);
    // Rewritten at start: the same 40, once each.
    assert_eq!(journal_entries(&path).len(), 40);
}

/// The answer to a local submission promises the tx survives a crash: one whose
/// journal sync failed is refused (geth's words for a full disk, its own otherwise) and
/// leaves the pool, the sender's earlier tx stays, and once a rotation has rewritten the
/// journal the same tx is taken and kept.
#[tokio::test]
async fn a_local_tx_the_journal_could_not_keep_is_refused_and_leaves_the_pool() {
    let path = journal_path("failing");
    let (pool, state) = setup();
    let (journal, _) = Journal::open(&path).unwrap();
    pool.attach_journal(journal.clone());
    let a = funded(&state, 92);
    let (first, second) = (tx1559(&a, 0, 2, 100), tx1559(&a, 1, 2, 100));
    journal.fail_sync_of(1);
    pool.submit_local(raw(&first)).await.unwrap();
    let e = pool.submit_local(raw(&second)).await.unwrap_err();
    assert!(matches!(e, Rejection::JournalFailed(_)), "{e:?}");
    assert!(!e.is_peer_fault() && !e.is_hash_determined());
    assert!(
        e.to_string().starts_with("transaction not journaled"),
        "{e}"
    );
    assert!(pool.contains(&first.hash()) && !pool.contains(&second.hash()));
    assert_eq!(pool.metrics().rejections("journal_failed"), 1);
    pool.assert_consistent();
    // geth's words when the disk is full.
    let full = Rejection::JournalFailed(JournalFailure {
        kind: std::io::ErrorKind::StorageFull,
        message: "No space left on device (os error 28)".into(),
    });
    assert_eq!(full.to_string(), "no space left on device");

    assert!(journal.wants_rotation());
    pool.rotate_journal().await.unwrap();
    pool.submit_local(raw(&second)).await.unwrap();
    // A replacement the journal cannot keep: refused, and the tx it replaced (answered
    // and journaled before) is back in the pool.
    let replacement = tx1559(&a, 1, 5, 200);
    journal.fail_sync_of(3);
    let e = pool.submit_local(raw(&replacement)).await.unwrap_err();
    assert!(matches!(e, Rejection::JournalFailed(_)), "{e:?}");
    assert!(pool.contains(&second.hash()) && !pool.contains(&replacement.hash()));
    pool.assert_consistent();
    pool.rotate_journal().await.unwrap();
    journal.close();
    assert_eq!(
        journal_entries(&path),
        vec![
            first.encoded_2718().to_vec(),
            second.encoded_2718().to_vec()
        ]
    );
}

#[tokio::test]
async fn an_out_of_order_journal_is_readmitted_in_nonce_order() {
    let path = journal_path("order");
    let state = Arc::new(InMemoryState::new(head()));
    let (a, b) = (funded(&state, 92), funded(&state, 93));
    let (journal, _) = Journal::open(&path).unwrap();
    // Newest nonce first, two senders interleaved.
    for n in (0..30).rev() {
        journal
            .append(&tx1559(&a, n, 2, 100).encoded_2718())
            .await
            .unwrap();
        journal
            .append(&tx1559(&b, n, 2, 100).encoded_2718())
            .await
            .unwrap();
    }
    journal.close();
    let (pool, reload) = restart(&path, &state, |_| {}).await;
    assert_eq!(fates(&reload), vec![("readmitted", 60)]);
    assert_eq!(pool.status().pending.txs, 60);
}

#[tokio::test]
async fn entries_mined_while_down_leave_the_journal_and_the_rest_stays() {
    let path = journal_path("mined");
    let state = Arc::new(InMemoryState::new(head()));
    let a = funded(&state, 94);
    let (journal, _) = Journal::open(&path).unwrap();
    for n in 0..5 {
        journal
            .append(&tx1559(&a, n, 2, 100).encoded_2718())
            .await
            .unwrap();
    }
    journal.close();
    // Nonces 0 and 1 were mined while the node was down.
    state.set_nonce(a.address(), 2);
    let (pool, reload) = restart(&path, &state, |_| {}).await;
    assert_eq!(fates(&reload), vec![("readmitted", 3), ("mined", 2)]);
    assert_eq!(pool.pending_nonce(&a.address()), 5);
    let kept = journal_entries(&path);
    assert_eq!(kept.len(), 3);
    assert!(!kept.contains(&tx1559(&a, 0, 2, 100).encoded_2718()));
}

#[tokio::test]
async fn a_replaced_entry_gives_way_to_its_replacement() {
    let path = journal_path("replaced");
    let state = Arc::new(InMemoryState::new(head()));
    let a = funded(&state, 95);
    let (old, new) = (tx1559(&a, 0, 2, 100), tx1559(&a, 0, 20, 200));
    let (journal, _) = Journal::open(&path).unwrap();
    journal.append(&old.encoded_2718()).await.unwrap();
    journal.append(&new.encoded_2718()).await.unwrap();
    journal
        .append(&tx1559(&a, 1, 2, 100).encoded_2718())
        .await
        .unwrap();
    journal.close();
    let (pool, reload) = restart(&path, &state, |_| {}).await;
    assert_eq!(fates(&reload), vec![("readmitted", 2), ("replaced", 1)]);
    assert!(pool.contains(&new.hash()) && !pool.contains(&old.hash()));
    assert_eq!(journal_entries(&path).len(), 2);
}

#[tokio::test]
async fn a_truncated_final_record_costs_only_itself() {
    let path = journal_path("torn");
    let state = Arc::new(InMemoryState::new(head()));
    let a = funded(&state, 96);
    let (journal, _) = Journal::open(&path).unwrap();
    for n in 0..3 {
        journal
            .append(&tx1559(&a, n, 2, 100).encoded_2718())
            .await
            .unwrap();
    }
    journal.close();
    // A kill in the middle of the fourth record's write.
    let mut raw = std::fs::read(&path).unwrap();
    let whole = raw.len();
    raw.extend_from_slice(&[0x80, 0, 0, 0, 1, 2, 3]);
    std::fs::write(&path, &raw).unwrap();
    let (pool, reload) = restart(&path, &state, |_| {}).await;
    assert_eq!(fates(&reload), vec![("readmitted", 3)]);
    assert_eq!(reload.damaged_tail, 7);
    assert_eq!(pool.len(), 3);
    // The torn bytes are gone: after the three records, only zeroed free space.
    let raw = std::fs::read(&path).unwrap();
    assert!(raw[whole..].iter().all(|&b| b == 0));
    assert_eq!(journal_entries(&path).len(), 3);
}

#[tokio::test]
async fn refused_for_now_is_held_and_unaffordable_is_dropped() {
    let path = journal_path("held");
    let state = Arc::new(InMemoryState::new(head()));
    let (a, poor) = (funded(&state, 97), funded(&state, 98));
    let (journal, _) = Journal::open(&path).unwrap();
    for n in 0..4 {
        journal
            .append(&tx1559(&a, n, 2, 100).encoded_2718())
            .await
            .unwrap();
    }
    journal
        .append(&tx1559(&poor, 0, 2, 100).encoded_2718())
        .await
        .unwrap();
    journal.close();
    state.set_balance(poor.address(), U256::from(1));
    // A busy pool this time (no admission slot at all): every entry is held.
    let (pool, reload) = restart(&path, &state, |c| c.max_in_flight = 0).await;
    assert_eq!(fates(&reload), vec![("held", 5)]);
    assert!(pool.is_empty());
    assert_eq!(journal_entries(&path).len(), 5, "held entries stay");
    // The next start takes them, and drops the unaffordable one.
    let (pool, reload) = restart(&path, &state, |_| {}).await;
    assert_eq!(fates(&reload), vec![("readmitted", 4), ("unaffordable", 1)]);
    assert_eq!(pool.len(), 4);
    assert_eq!(journal_entries(&path).len(), 4);
}

#[tokio::test]
async fn the_journal_is_rewritten_from_the_pool() {
    let path = journal_path("rotate");
    let (pool, state) = setup();
    let (journal, _) = Journal::open(&path).unwrap();
    pool.attach_journal(journal.clone());
    let a = funded(&state, 99);
    let txs: Vec<_> = (0..4).map(|n| tx1559(&a, n, 2, 100)).collect();
    for tx in &txs {
        pool.add_transaction(raw(tx), TxOrigin::Local)
            .await
            .unwrap();
    }
    // Two mined: a rotation keeps the other two only.
    state.set_nonce(a.address(), 2);
    pool.on_head_change(HeadUpdate {
        head: head(),
        mined: vec![txs[0].hash(), txs[1].hash()],
        ..Default::default()
    })
    .await;
    assert_eq!(pool.rotate_journal().await.unwrap(), 2);
    pool.add_transaction(raw(&tx1559(&a, 4, 2, 100)), TxOrigin::Local)
        .await
        .unwrap();
    journal.close();
    assert_eq!(journal_entries(&path).len(), 3);
}

/// A local tx evicted for price leaves the pool but not the journal (a full pool is a
/// transient refusal, as at a reload): each rotation keeps it, and the next start offers
/// it again. A replacement submitted after the eviction wins over it at the reload.
#[tokio::test]
async fn an_evicted_local_tx_stays_in_the_journal() {
    let path = journal_path("evicted");
    let (pool, state) = setup_with(|c| {
        c.pending = SubPoolLimit::new(2, 1 << 20);
        c.local_share = 0;
    });
    let (journal, _) = Journal::open(&path).unwrap();
    pool.attach_journal(journal.clone());
    let (a, b) = (funded(&state, 60), funded(&state, 61));
    let cheap = tx1559(&a, 0, 1, 100);
    let kept = tx1559(&b, 0, 5, 100);
    pool.add_transaction(raw(&cheap), TxOrigin::Local)
        .await
        .unwrap();
    pool.add_transaction(raw(&kept), TxOrigin::Local)
        .await
        .unwrap();
    add(&pool, &tx1559(&funded(&state, 62), 0, 50, 100))
        .await
        .unwrap();
    assert!(
        !pool.contains(&cheap.hash()),
        "the cheapest local was evicted"
    );
    assert_eq!(journal.held(), 1);
    assert_eq!(pool.rotate_journal().await.unwrap(), 2, "held and pooled");
    journal.close();
    // A start with room takes it back.
    let (restarted, reload) = restart(&path, &state, |_| {}).await;
    assert_eq!(fates(&reload), vec![("readmitted", 2)]);
    assert!(restarted.contains(&cheap.hash()));
    restarted.journal().unwrap().close();

    // Evicted again, then replaced by its sender at a higher fee: the replacement is the
    // newer entry and the evicted one gives way to it at the reload.
    let (pool, _) = restart(&path, &state, |c| {
        c.pending = SubPoolLimit::new(2, 1 << 20);
        c.local_share = 0;
    })
    .await;
    add(&pool, &tx1559(&funded(&state, 63), 0, 50, 100))
        .await
        .unwrap();
    assert!(!pool.contains(&cheap.hash()));
    let better = tx1559(&a, 0, 60, 200);
    pool.add_transaction(raw(&better), TxOrigin::Local)
        .await
        .unwrap();
    pool.rotate_journal().await.unwrap();
    pool.journal().unwrap().close();
    let (restarted, reload) = restart(&path, &state, |_| {}).await;
    // b's tx, evicted for `better`, is readmitted too.
    assert_eq!(fates(&reload), vec![("readmitted", 2), ("replaced", 1)]);
    assert!(restarted.contains(&better.hash()));
    assert!(!restarted.contains(&cheap.hash()));
    restarted.journal().unwrap().close();
}

#[tokio::test]
async fn one_origin_cannot_take_every_admission_slot() {
    let (pool, state) = setup_with(|c| c.max_in_flight_per_origin = 0);
    let a = funded(&state, 95);
    assert_eq!(
        add(&pool, &tx1559(&a, 0, 2, 100)).await,
        Err(Rejection::OriginBusy)
    );
    assert_eq!(pool.metrics().rejections("origin_busy"), 1);
}

#[tokio::test]
async fn too_many_authorizations_are_refused_before_their_ecdsa() {
    let (pool, state) = setup_with(|c| c.max_authorizations = 1);
    let sponsor = funded(&state, 96);
    let Transaction::Eip7702(mut t) = tx7702(&sponsor, 0, &Signer::from_seed(97))
        .tx()
        .tx()
        .clone()
    else {
        unreachable!()
    };
    t.authorization_list.push(t.authorization_list[0].clone());
    let tx = PooledTransaction::new(
        SignedTransaction::sign(Transaction::Eip7702(t), &sponsor),
        None,
    );
    assert_eq!(
        add(&pool, &tx).await,
        Err(Rejection::TooManyAuthorizations { count: 2, max: 1 })
    );
    assert_eq!(pool.metrics().get(Counter::authority_recoveries), 0);
    assert_eq!(pool.metrics().get(Counter::sender_recoveries), 0);
    assert_eq!(add(&pool, &tx).await, Err(Rejection::RecentlyFailed));
}

#[tokio::test]
async fn blob_txs_wait_for_cancun() {
    let state = Arc::new(InMemoryState::new(head()));
    let pool = Pool::new(
        PoolConfig::new(ChainConfig::all_forks_at_genesis(1, Fork::Shanghai)),
        state.clone(),
    );
    let a = funded(&state, 98);
    let tx = sample_blob_tx(SidecarVersion::V0, 1, 0, &a);
    // On the wire a blob tx is simply too large before Cancun.
    assert!(matches!(
        add(&pool, &tx).await,
        Err(Rejection::Oversized { .. })
    ));
    // Already decoded (journal, reorg), it is refused as blobs not being active.
    let r = pool
        .add_transaction(TxInput::Decoded(Box::new(tx)), TxOrigin::Journal)
        .await;
    assert_eq!(r, Err(Rejection::BlobsNotActive));
    assert_eq!(pool.metrics().get(Counter::kzg_verifications), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warming_a_batch_recovers_in_parallel_but_behind_the_shields() {
    let (pool, state) = setup();
    let a = funded(&state, 71);
    let txs: Vec<PooledTransaction> = (0..40).map(|n| tx1559(&a, n, 2, 100)).collect();
    // One is pooled already, one recently failed (wrong chain id), one breaks the
    // stateless rules: none of them may cost a recovery.
    add(&pool, &txs[0]).await.unwrap();
    let wrong_chain = {
        let tx = Transaction::Eip1559(Eip1559Tx {
            chain_id: 999,
            nonce: 50,
            max_priority_fee_per_gas: 2,
            max_fee_per_gas: 100,
            gas_limit: 21_000,
            to: TxKind::Call(Address::repeat_byte(9)),
            value: U256::from(1),
            input: Bytes::new(),
            access_list: vec![],
        });
        PooledTransaction::new(SignedTransaction::sign(tx, &a), None)
    };
    assert!(add(&pool, &wrong_chain).await.is_err());
    let low_gas = {
        let tx = Transaction::Eip1559(Eip1559Tx {
            chain_id: 1,
            nonce: 51,
            max_priority_fee_per_gas: 2,
            max_fee_per_gas: 100,
            gas_limit: 20_000,
            to: TxKind::Call(Address::repeat_byte(9)),
            value: U256::from(1),
            input: Bytes::new(),
            access_list: vec![],
        });
        PooledTransaction::new(SignedTransaction::sign(tx, &a), None)
    };
    let before = pool.metrics().get(Counter::sender_recoveries);
    let mut batch: Vec<Bytes> = txs.iter().map(|t| Bytes::from(t.encoded_2718())).collect();
    batch.push(Bytes::from(wrong_chain.encoded_2718()));
    batch.push(Bytes::from(low_gas.encoded_2718()));
    // Copies of one tx in the batch (an attacker's cheap amplification) cost one recovery.
    let copy = batch[5].clone();
    batch.extend(std::iter::repeat_n(copy, 100));
    let mut meter = super::CpuMeter::start();
    pool.warm_senders(&batch, &mut meter).await;
    assert_eq!(
        pool.metrics().get(Counter::sender_recoveries) - before,
        39,
        "one recovery per new distinct tx that passes the shields"
    );
    // The workers' CPU is the meter's: 39 recoveries take well over a millisecond.
    assert!(meter.finish().cpu_us > 1_000);
    // Admission in order now finds every sender cached.
    for t in &txs[1..] {
        add(&pool, t).await.unwrap();
    }
    assert_eq!(pool.metrics().get(Counter::sender_recoveries) - before, 39);
    assert_eq!(pool.status().pending.txs, 40);
    pool.assert_consistent();
}

mod sender_rules {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn nonces(pool: &Pool, a: &Address) -> BTreeSet<u64> {
        pool.sender_txs(a).iter().map(|t| t.nonce()).collect()
    }

    fn run_end(set: &BTreeSet<u64>) -> u64 {
        (0..).find(|n| !set.contains(n)).unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Whatever arrives, in whatever order, from a few senders into a small pool:
        /// an executable run is never broken (a tx of the run leaves only with every
        /// later tx of its sender), txs leave a sender only from the top (so a gap-filler
        /// that makes room displaces the farthest tx), a tx inside a sender's first gap is
        /// never refused for the count, and the pool stays consistent.
        #[test]
        fn runs_are_never_broken_and_gap_fillers_always_get_in(
            ops in proptest::collection::vec((0usize..3, 0u64..24, 1u128..50), 1..120)
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            rt.block_on(async {
                let (pool, state) = setup_with(|c| {
                    c.max_account_slots = 3;
                    c.max_account_queue = 4;
                    c.pending.max_txs = 8;
                    c.queued.max_txs = 6;
                });
                let senders: Vec<Signer> = (0..3).map(|i| funded(&state, 200 + i)).collect();
                for (who, nonce, tip) in ops {
                    let s = &senders[who];
                    let before: Vec<BTreeSet<u64>> =
                        senders.iter().map(|x| nonces(&pool, &x.address())).collect();
                    let own = &before[who];
                    let run = run_end(own);
                    let first_queued = own.range(run..).next().copied();
                    let inside_gap = !own.contains(&nonce)
                        && nonce >= run
                        && first_queued.is_some_and(|q| nonce < q);
                    let r = add(&pool, &tx1559(s, nonce, tip, 100)).await;
                    if inside_gap {
                        prop_assert!(
                            !matches!(r, Err(Rejection::AccountLimit { .. })),
                            "a gap-filler was refused for the count: {r:?}"
                        );
                    }
                    pool.assert_consistent();
                    for (i, x) in senders.iter().enumerate() {
                        let after = nonces(&pool, &x.address());
                        // Displacement and eviction take a sender's txs from the top: what
                        // left (a replaced nonce aside) is above all that stayed.
                        let top_kept = after.last().copied();
                        for gone in before[i].difference(&after) {
                            if !(i == who && *gone == nonce) {
                                prop_assert!(
                                    top_kept.is_none_or(|t| *gone > t),
                                    "sender {i}: tx {gone} left below kept tx {top_kept:?}"
                                );
                            }
                        }
                        let run_before = run_end(&before[i]);
                        for gone in before[i].difference(&after) {
                            if *gone < run_before {
                                prop_assert!(
                                    after.range(gone..).next().is_none(),
                                    "sender {i}: run tx {gone} left while later ones stayed"
                                );
                            }
                        }
                    }
                }
                Ok(())
            })?;
        }
    }
}

mod blob_osaka;
mod blob_store;
mod inclusion;
mod let_go;
mod prop;
