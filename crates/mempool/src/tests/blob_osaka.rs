//! The blob pool after Osaka: version-0 sidecars from RPC converted to cell proofs, the
//! reorder buffer for blob txs whose nonce is ahead of their sender's, and the
//! announcement of blob txs held back while their fee caps are far below the fees.

use super::*;
use std::time::Duration;

fn osaka() -> (Pool, Arc<InMemoryState>) {
    let state = Arc::new(InMemoryState::new(head()));
    let cfg = PoolConfig::new(ChainConfig::all_forks_at_genesis(1, Fork::Osaka));
    (Pool::new(cfg, state.clone()), state)
}

/// Waits (bounded) until `cond` holds: promotion runs on a task of its own.
async fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

#[tokio::test]
async fn a_local_version_0_sidecar_after_osaka_is_converted_and_pooled_as_version_1() {
    let (pool, state) = osaka();
    let a = funded(&state, 90);
    let tx = sample_blob_tx(SidecarVersion::V0, 2, 0, &a);
    let added = pool.submit_local(raw(&tx)).await.unwrap();
    assert_eq!(added.hash, tx.hash(), "the hash does not cover the sidecar");
    let pooled = pool.get(&tx.hash()).unwrap();
    let bundle = pooled.tx.sidecar().unwrap();
    assert_eq!(bundle.version, SidecarVersion::V1);
    assert_eq!(bundle.commitments, tx.sidecar().unwrap().commitments);
    assert_eq!(pool.metrics().get(Counter::sidecars_converted), 1);
    assert_eq!(pool.metrics().get(Counter::kzg_verifications), 1);
    // getBlobsV2 finds it with its cell proofs.
    let vh = tx.tx().tx().blob_versioned_hashes()[0];
    let (found, _) = pool.blob_by_versioned_hash(&vh).unwrap();
    assert_eq!(found.version, SidecarVersion::V1);
}

#[tokio::test]
async fn a_peer_must_send_the_forks_sidecar_version() {
    let (pool, state) = osaka();
    let a = funded(&state, 91);
    let tx = sample_blob_tx(SidecarVersion::V0, 1, 0, &a);
    assert_eq!(
        add(&pool, &tx).await,
        Err(Rejection::Sidecar(BlobsBundleError::VersionNotAllowed {
            version: SidecarVersion::V0,
            fork: Fork::Osaka,
        }))
    );
    assert_eq!(pool.metrics().get(Counter::sidecars_converted), 0);
}

#[tokio::test]
async fn a_refused_local_tx_costs_no_conversion() {
    let (pool, _state) = osaka();
    // Unfunded sender: refused at the stateful checks, before any cell proof.
    let tx = sample_blob_tx(SidecarVersion::V0, 1, 0, &Signer::from_seed(92));
    assert!(pool.submit_local(raw(&tx)).await.is_err());
    assert_eq!(pool.metrics().get(Counter::sidecars_converted), 0);
}

#[tokio::test]
async fn a_gapped_blob_tx_waits_without_kzg_and_is_promoted_when_the_gap_fills() {
    let (pool, state) = setup();
    let a = funded(&state, 93);
    // Nonce 9 next: an account with history may hold one tx ahead (log10(10) = 1).
    state.set_nonce(a.address(), 9);
    let ahead = sample_blob_tx(SidecarVersion::V0, 1, 10, &a);
    let held = add(&pool, &ahead).await.unwrap();
    assert!(held.gapped);
    assert!(!pool.contains(&ahead.hash()), "not pooled yet");
    assert!(
        pool.is_known_or_importing(&ahead.hash()),
        "not fetched again"
    );
    assert_eq!(
        pool.metrics().get(Counter::kzg_verifications),
        0,
        "no KZG yet"
    );
    assert_eq!(add(&pool, &ahead).await, Err(Rejection::AlreadyKnown));
    // A second one ahead is past the sender's allowance.
    let further = sample_blob_tx(SidecarVersion::V0, 1, 11, &a);
    assert!(matches!(
        add(&pool, &further).await,
        Err(Rejection::BlobNonceGap { .. })
    ));

    let next = sample_blob_tx(SidecarVersion::V0, 1, 9, &a);
    assert!(!add(&pool, &next).await.unwrap().gapped);
    assert!(
        eventually(|| pool.contains(&ahead.hash())).await,
        "promoted"
    );
    assert_eq!(pool.metrics().get(Counter::kzg_verifications), 2);
    assert_eq!(pool.metrics().get(Counter::gapped_promoted), 1);
}

#[tokio::test]
async fn a_fresh_sender_may_not_leave_a_gap_and_a_gapped_tx_expires() {
    let (pool, state) = setup();
    let fresh = funded(&state, 94);
    let tx = sample_blob_tx(SidecarVersion::V0, 1, 1, &fresh);
    assert!(matches!(
        add(&pool, &tx).await,
        Err(Rejection::BlobNonceGap {
            expected: 0,
            found: 1
        })
    ));

    let old = funded(&state, 95);
    state.set_nonce(old.address(), 99);
    let ahead = sample_blob_tx(SidecarVersion::V0, 1, 100 + 1, &old);
    assert!(add(&pool, &ahead).await.unwrap().gapped);
    pool.remove_expired(Instant::now() + Duration::from_secs(59));
    assert!(pool.is_known_or_importing(&ahead.hash()));
    pool.remove_expired(Instant::now() + Duration::from_secs(61));
    assert!(
        !pool.is_known_or_importing(&ahead.hash()),
        "dropped after its lifetime"
    );
    assert_eq!(pool.metrics().get(Counter::gapped_expired), 1);
}

#[tokio::test]
async fn a_block_that_fills_the_gap_promotes_the_waiting_tx() {
    let (pool, state) = setup();
    let a = funded(&state, 96);
    state.set_nonce(a.address(), 9);
    let ahead = sample_blob_tx(SidecarVersion::V0, 1, 10, &a);
    assert!(add(&pool, &ahead).await.unwrap().gapped);
    // Nonce 9 was mined elsewhere: the state moves to 10.
    state.set_nonce(a.address(), 10);
    pool.on_head_change(HeadUpdate {
        head: head(),
        touched: vec![a.address()],
        ..Default::default()
    })
    .await;
    assert!(
        eventually(|| pool.contains(&ahead.hash())).await,
        "promoted"
    );
}

/// The hashes published for announcement since the last call.
fn announced(events: &mut tokio::sync::broadcast::Receiver<B256>) -> Vec<B256> {
    let mut out = Vec::new();
    while let Ok(h) = events.try_recv() {
        out.push(h);
    }
    out
}

#[tokio::test]
async fn blob_txs_far_below_the_fees_are_held_back_from_announcement() {
    let (pool, state) = setup();
    let mut h = head();
    h.number += 1;
    h.base_fee = 1_000;
    h.blob_base_fee = 1_000;
    pool.on_head_change(HeadUpdate {
        head: h,
        ..Default::default()
    })
    .await;
    let mut events = pool.subscribe_pending();
    let (a, b, c, d) = (
        funded(&state, 240),
        funded(&state, 241),
        funded(&state, 242),
        funded(&state, 243),
    );
    // One fee step below the base fee (1000 / 1.125 = 889): not pending, announced; the
    // sender's next, which pays, announced after it.
    let near = blob_tx(&a, 0, 1, 900, 1_000);
    let after_near = blob_tx(&a, 1, 1, 2_000, 1_000);
    // Half the base fee: held back, and its sender's next with it.
    let far = blob_tx(&b, 0, 1, 500, 1_000);
    let after_far = blob_tx(&b, 1, 1, 2_000, 1_000);
    // The blob fee: 800 × 1.17 < 1000 held back, 860 × 1.17 ≥ 1000 announced.
    let blob_far = blob_tx(&c, 0, 1, 2_000, 800);
    let blob_near = blob_tx(&d, 0, 1, 2_000, 860);
    for tx in [&near, &after_near, &far, &after_far, &blob_far, &blob_near] {
        add(&pool, tx).await.unwrap();
        assert_eq!(pool.subpool_of(&tx.hash()), Some(SubPool::Blob));
    }
    let first = announced(&mut events);
    assert_eq!(
        first,
        vec![near.hash(), after_near.hash(), blob_near.hash()],
        "near ones only, in nonce order"
    );

    // The base fee falls within a step of `far`'s cap (500 × 1.125 = 562): it and its
    // successor go out; nothing is announced twice.
    h.number += 1;
    h.base_fee = 560;
    pool.on_head_change(HeadUpdate {
        head: h,
        ..Default::default()
    })
    .await;
    let mut second = announced(&mut events);
    second.sort();
    let mut want = vec![far.hash(), after_far.hash()];
    want.sort();
    assert_eq!(second, want);
    assert_eq!(
        pool.subpool_of(&near.hash()),
        Some(SubPool::Pending),
        "pending now, and not announced again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_gapped_blob_tx_is_promoted_when_a_local_filler_comes() {
    let (pool, state) = osaka();
    let a = funded(&state, 250);
    state.set_nonce(a.address(), 10);
    let ahead = sample_blob_tx(SidecarVersion::V1, 1, 11, &a);
    assert!(pool.submit_local(raw(&ahead)).await.unwrap().gapped);
    let filler = sample_blob_tx(SidecarVersion::V1, 1, 10, &a);
    assert!(!pool.submit_local(raw(&filler)).await.unwrap().gapped);
    assert!(
        eventually(|| pool.contains(&ahead.hash())).await,
        "promoted: {:?}",
        pool.metrics()
    );
}

/// A body and `custody`'s cells of each of its blobs: what an eth/72 sampler pools.
fn sampled(tx: &PooledTransaction, custody: &[usize]) -> PooledTransaction {
    let whole = tx.sidecar().unwrap();
    let mut cells = Vec::new();
    for blob in 0..whole.commitments.len() {
        cells.extend(whole.cells(blob, custody).unwrap());
    }
    let body = PooledTransaction::decode_2718(&tx.encoded_2718_without_blobs()).unwrap();
    body.with_sampled_cells(
        moat_common::transaction::mask_of(custody.iter().copied()),
        cells,
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampled_blob_tx_is_pooled_on_its_cells_and_kept_out_of_blocks_and_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, state) = osaka();
    let (store, _) = crate::BlobStore::open(&dir.path().join("blobs.redb")).unwrap();
    pool.attach_blob_store(store.clone()).unwrap();
    let (a, b) = (funded(&state, 94), funded(&state, 95));
    // a: a sampled tx, then a whole one after it; b: a whole one.
    let first = sampled(&sample_blob_tx(SidecarVersion::V1, 2, 0, &a), &[5, 70]);
    let second = sample_blob_tx(SidecarVersion::V1, 1, 1, &a);
    let other = sample_blob_tx(SidecarVersion::V1, 1, 0, &b);
    // A sampled tx comes decoded from the network (its cells are not in its network form).
    let decoded = |tx: &PooledTransaction| TxInput::Decoded(Box::new(tx.clone()));
    pool.add_transaction(decoded(&first), peer(1))
        .await
        .unwrap();
    for tx in [&second, &other] {
        add(&pool, tx).await.unwrap();
    }
    assert_eq!(pool.metrics().get(Counter::kzg_verifications), 3);
    assert!(!pool.get(&first.hash()).unwrap().tx.has_whole_blobs());
    // A block takes neither the sampled tx nor its sender's later one.
    let best: Vec<B256> = pool
        .best_transactions(BlockBudget {
            base_fee: BASE_FEE,
            blob_base_fee: 1,
            gas_limit: 30_000_000,
            max_blob_gas: 9 * 131_072,
            min_tip: 0,
        })
        .map(|t| t.hash())
        .collect();
    assert_eq!(best, vec![other.hash()]);
    // getBlobs finds the sampled bundle; it gives its custody's cells and no blob.
    let vh = first.tx().tx().blob_versioned_hashes()[1];
    let (bundle, i) = pool.blob_by_versioned_hash(&vh).unwrap();
    assert_eq!(i, 1);
    assert!(bundle.blobs.is_empty());
    assert!(bundle.cells(i, &[70]).is_some() && bundle.cells(i, &[71]).is_none());
    // The store keeps the whole ones only.
    assert!(eventually(|| store.len() == 2).await, "{}", store.len());
    // Cells that fail their proofs are the sender's fault, not pooled.
    let c = funded(&state, 96);
    let mut bad = sampled(&sample_blob_tx(SidecarVersion::V1, 1, 0, &c), &[9]);
    let (tx, sidecar) = bad.clone().into_parts();
    let mut sidecar = sidecar.unwrap();
    sidecar.sampled.as_mut().unwrap().cells[0][100] ^= 1;
    bad = PooledTransaction::new(tx, Some(sidecar));
    let err = pool
        .add_transaction(decoded(&bad), peer(1))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Rejection::Sidecar(BlobsBundleError::Kzg(_))),
        "{err:?}"
    );
    pool.assert_consistent();
}
