//! The blob pool across restarts (its store on disk), and pooled version-0 sidecars
//! converted once the head reaches Osaka.

use super::*;
use std::time::Duration;

/// Waits (bounded) until `cond` holds: the store's writer and the conversion run on
/// threads and tasks of their own.
async fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..1_000 {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

/// Opens the store at `path` once the last process-local handle on it is gone (a
/// dropped pool's writer lets go of it within its period).
async fn reopen(path: &std::path::Path) -> (BlobStore, BlobStoreContents) {
    for _ in 0..500 {
        match BlobStore::open(path) {
            Ok(opened) => return opened,
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    BlobStore::open(path).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pooled_blob_tx_is_back_after_a_restart_without_kzg() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("blobpool").join("blobs.redb");
    let (pool, state) = setup();
    let (store, contents) = BlobStore::open(&path).unwrap();
    assert!(contents.txs.is_empty());
    pool.attach_blob_store(store.clone()).unwrap();
    let senders: Vec<Signer> = (0..3).map(|i| funded(&state, 200 + i)).collect();
    let mut hashes = Vec::new();
    for (i, s) in senders.iter().enumerate() {
        for nonce in 0..2 {
            let tx = sample_blob_tx(SidecarVersion::V0, 1 + i, nonce, s);
            add(&pool, &tx).await.unwrap();
            hashes.push(tx.hash());
        }
    }
    // A local one too: it is in both the journal and the store.
    let local = funded(&state, 210);
    let mine = sample_blob_tx(SidecarVersion::V0, 1, 0, &local);
    pool.submit_local(raw(&mine)).await.unwrap();
    hashes.push(mine.hash());
    assert_eq!(pool.metrics().get(Counter::kzg_verifications), 7);
    assert!(
        eventually(|| store.len() == 7).await,
        "all on disk: {}",
        store.len()
    );
    // One leaves the pool (as if evicted): its record goes too.
    pool.remove_with_descendants(&hashes[1]);
    assert!(eventually(|| store.len() == 6).await);
    // No close: the process is gone as after kill -9.
    drop((pool, store));

    let (pool, state2) = setup();
    for s in senders.iter().chain([&local]) {
        state2.set_balance(s.address(), U256::from(RICH));
    }
    let (store, contents) = reopen(&path).await;
    assert_eq!(contents.txs.len(), 6);
    let reload = pool.reload_blob_store(contents).await;
    assert_eq!(reload.readmitted, 6, "{reload:?}");
    assert_eq!(reload.kzg_skipped, 6);
    assert_eq!(
        pool.metrics().get(Counter::kzg_verifications),
        0,
        "no KZG for sidecars verified before the restart"
    );
    assert_eq!(
        pool.metrics().get(Counter::sender_recoveries),
        0,
        "nor ECDSA"
    );
    for h in hashes.iter().filter(|h| **h != hashes[1]) {
        assert!(pool.contains(h));
    }
    assert_eq!(pool.get(&mine.hash()).unwrap().origin, TxOrigin::Journal);
    assert_eq!(pool.get(&hashes[0]).unwrap().origin, TxOrigin::Stored);
    // A blob sent again now is verified as any: the reload's pass is used up.
    pool.attach_blob_store(store).unwrap();
    let again = sample_blob_tx(SidecarVersion::V0, 1, 2, &senders[1]);
    add(&pool, &again).await.unwrap();
    assert_eq!(pool.metrics().get(Counter::kzg_verifications), 1);
    assert!(pool.close_blob_store(Duration::from_secs(10)));
    assert_eq!(pool.blob_store().unwrap().len(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_tx_the_chain_moved_past_is_refused_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("blobs.redb");
    let (pool, state) = setup();
    let (store, _) = BlobStore::open(&path).unwrap();
    pool.attach_blob_store(store.clone()).unwrap();
    let a = funded(&state, 220);
    let tx = sample_blob_tx(SidecarVersion::V0, 1, 0, &a);
    add(&pool, &tx).await.unwrap();
    assert!(pool.close_blob_store(Duration::from_secs(10)));
    assert_eq!(store.len(), 1);
    drop((pool, store));

    // Mined while the node was down: the sender's nonce moved on.
    let (pool, state) = setup();
    let a2 = funded(&state, 220);
    state.set_nonce(a2.address(), 1);
    let (store, contents) = reopen(&path).await;
    let reload = pool.reload_blob_store(contents).await;
    assert_eq!((reload.readmitted, reload.refused), (0, 1));
    pool.attach_blob_store(store.clone()).unwrap();
    assert!(
        eventually(|| store.is_empty()).await,
        "deleted by the first round"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_version_0_sidecars_are_converted_when_osaka_activates() {
    let state = Arc::new(InMemoryState::new(head()));
    let mut config = ChainConfig::all_forks_at_genesis(1, Fork::Osaka);
    config.osaka_time = Some(2_000);
    let pool = Pool::new(PoolConfig::new(config), state.clone());
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = BlobStore::open(&dir.path().join("blobs.redb")).unwrap();
    pool.attach_blob_store(store.clone()).unwrap();
    let a = funded(&state, 230);
    let txs: Vec<_> = (0..2)
        .map(|n| sample_blob_tx(SidecarVersion::V0, 2, n, &a))
        .collect();
    for tx in &txs {
        add(&pool, tx).await.unwrap();
    }
    assert!(eventually(|| store.len() == 2).await);
    let classes: Vec<_> = txs.iter().map(|t| pool.subpool_of(&t.hash())).collect();
    let bytes_before = pool.status().pending.bytes + pool.status().blob.bytes;

    // The head reaches Osaka's time.
    let mut h = head();
    h.number += 1;
    h.timestamp = 2_000;
    pool.on_head_change(HeadUpdate {
        head: h,
        ..Default::default()
    })
    .await;
    let version = |p: &Pool, tx: &PooledTransaction| {
        p.get(&tx.hash()).map(|t| t.tx.sidecar().unwrap().version)
    };
    assert!(
        eventually(|| txs
            .iter()
            .all(|t| version(&pool, t) == Some(SidecarVersion::V1)))
        .await,
        "converted in the background"
    );
    assert_eq!(pool.metrics().get(Counter::sidecars_converted), 2);
    for tx in &txs {
        let pooled = pool.get(&tx.hash()).unwrap();
        let bundle = pooled.tx.sidecar().unwrap();
        assert_eq!(bundle.commitments, tx.sidecar().unwrap().commitments);
        bundle.verify_proofs().unwrap();
    }
    // Same txs, same classes; the sidecars grew by their cell proofs.
    let after: Vec<_> = txs.iter().map(|t| pool.subpool_of(&t.hash())).collect();
    assert_eq!(after, classes);
    let bytes_after = pool.status().pending.bytes + pool.status().blob.bytes;
    let proofs = 4 * (SidecarVersion::V1.proofs_per_blob() - 1) * 48;
    assert!(
        (proofs..proofs + 1_024).contains(&(bytes_after - bytes_before)),
        "the subpools' bytes follow the sidecars: {bytes_before} -> {bytes_after}"
    );
    // The store holds the converted sidecars after its next round.
    assert!(pool.close_blob_store(Duration::from_secs(10)));
    drop((pool, store));
    let (_, contents) = reopen(&dir.path().join("blobs.redb")).await;
    assert_eq!(contents.txs.len(), 2);
    assert!(
        contents
            .txs
            .iter()
            .all(|t| t.tx.sidecar().unwrap().version == SidecarVersion::V1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executable_blob_txs_count_against_the_blob_datacap_not_the_pending_bytes() {
    // A pending subpool of 1 MiB, a blob datacap of 8 MiB: ~30 executable one-blob txs
    // (each ~131 KiB) fit, and plain txs still get their room.
    let (pool, state) = setup_with(|c| {
        c.pending.max_bytes = 1 << 20;
        c.blob.max_bytes = 8 << 20;
    });
    let mut blobs = Vec::new();
    for i in 0..30 {
        let s = funded(&state, 300 + i);
        let tx = blob_tx(&s, 0, 10 + u128::from(i as u8), 1_000, 10);
        assert_eq!(add(&pool, &tx).await.unwrap().subpool, SubPool::Pending);
        blobs.push(tx);
    }
    let plain = funded(&state, 400);
    for n in 0..5 {
        add(&pool, &tx1559(&plain, n, 2, 100)).await.unwrap();
    }
    assert!(
        blobs.iter().all(|t| pool.contains(&t.hash())),
        "none evicted"
    );
    assert_eq!(pool.status().pending.txs, 35);

    // At the datacap the cheapest executable blob tx goes for a better one, and one
    // cheaper than all is refused.
    let (pool, state) = setup_with(|c| c.blob.max_bytes = 3 * 140_000);
    let mut held = Vec::new();
    for i in 0..3 {
        let s = funded(&state, 500 + i);
        let tx = blob_tx(&s, 0, 10 + u128::from(i as u8), 1_000, 10);
        add(&pool, &tx).await.unwrap();
        held.push(tx);
    }
    let better = blob_tx(&funded(&state, 510), 0, 50, 1_000, 10);
    add(&pool, &better).await.unwrap();
    assert!(!pool.contains(&held[0].hash()), "the cheapest made room");
    assert!(pool.contains(&better.hash()));
    let worse = blob_tx(&funded(&state, 511), 0, 1, 1_000, 10);
    assert_eq!(add(&pool, &worse).await, Err(Rejection::Underpriced));
    pool.assert_consistent();
}
