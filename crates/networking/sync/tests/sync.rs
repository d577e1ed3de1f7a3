//! Full sync between two in-process nodes over real RLPx on loopback: one holds the
//! conformance chain, the other starts from genesis (or from a branch of its own) and
//! catches up to the head it is given, executing every block.

use alloy_primitives::{Address, B256};
use moat_blockchain::chain::Chain;
use moat_blockchain::payload::PayloadAttributes;
use moat_common::block::Block;
use moat_common::config::Genesis;
use moat_mempool::{InMemoryState, Pool, PoolConfig, SenderCache};
use moat_p2p::{Enode, Network, NetworkConfig};
use moat_storage::Store;
use moat_sync::{SyncConfig, SyncHandle, SyncProgress};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../../shared/testdata/ethtest")
        .join(name)
}

fn genesis() -> Genesis {
    Genesis::from_file(&testdata("genesis.json")).unwrap()
}

fn blocks() -> &'static [Block] {
    static BLOCKS: OnceLock<Vec<Block>> = OnceLock::new();
    BLOCKS.get_or_init(|| {
        let raw = std::fs::read(testdata("chain.rlp")).unwrap();
        Block::decode_all(&raw).unwrap()
    })
}

/// A chain in memory with the first `n` conformance blocks imported.
fn chain_with(n: usize) -> Chain {
    let chain = Chain::init(Store::in_memory(), &genesis()).unwrap();
    for b in &blocks()[..n] {
        chain.import(b).unwrap();
    }
    chain
}

fn pool(chain: &Chain) -> Pool {
    Pool::new(
        PoolConfig::new(chain.config().clone()),
        Arc::new(InMemoryState::default()),
    )
}

async fn network(chain: &Chain, key: u8, peers: &[Enode]) -> Network {
    let secret = secp256k1::SecretKey::from_byte_array([key; 32]).unwrap();
    let mut cfg = NetworkConfig::new(secret, chain.config().chain_id);
    cfg.listen = Some(([127, 0, 0, 1], 0).into());
    cfg.static_peers = peers.to_vec();
    Network::start(
        cfg,
        chain.clone(),
        pool(chain),
        Arc::new(AtomicBool::new(false)),
    )
    .await
    .unwrap()
}

fn enode(net: &Network) -> Enode {
    Enode {
        id: net.local_id(),
        addr: net.listen_addr().unwrap(),
    }
}

/// A server holding the whole chain, and a client node of `chain` connected to it with
/// a syncer.
async fn pair(chain: Chain) -> (Network, Network, SyncHandle, Arc<AtomicBool>) {
    pair_with(chain, None).await
}

/// [`pair`], the syncer recovering senders into `senders` ahead of the importer.
async fn pair_with(
    chain: Chain,
    senders: Option<SenderCache>,
) -> (Network, Network, SyncHandle, Arc<AtomicBool>) {
    let server = network(&chain_with(blocks().len()), 0x31, &[]).await;
    let client = network(&chain, 0x32, &[enode(&server)]).await;
    let synced = Arc::new(AtomicBool::new(false));
    let cfg = SyncConfig {
        // Small batches: several requests and importer batches even on this short chain.
        header_batch: 64,
        body_batch: 16,
        senders,
        ..SyncConfig::default()
    };
    let handle = moat_sync::spawn(chain, Arc::new(client.clone()), synced.clone(), cfg);
    (server, client, handle, synced)
}

/// Waits until `hash` is `chain`'s head, checking each progress report seen on the way.
async fn reach(chain: &Chain, sync: &SyncHandle, hash: B256) -> Vec<SyncProgress> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen = Vec::new();
    loop {
        if let Some(p) = sync.progress() {
            assert!(p.starting_block <= p.current_block, "{p:?}");
            assert!(p.current_block <= p.highest_block, "{p:?}");
            seen.push(p);
        }
        if chain.head().unwrap().1 == hash {
            return seen;
        }
        assert!(Instant::now() < deadline, "sync to {hash} timed out");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn settled(sync: &SyncHandle) {
    for _ in 0..100 {
        if sync.progress().is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("progress still reported after the target was reached");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_node_catches_up_and_follows_new_targets() {
    let chain = chain_with(0);
    let (_server, _client, sync, synced) = pair(chain.clone()).await;
    assert!(sync.progress().is_none());

    // A first target halfway, then a move of the head the consensus client makes.
    let mid = blocks()[299].hash;
    sync.set_target(mid);
    let seen = reach(&chain, &sync, mid).await;
    settled(&sync).await;
    assert!(synced.load(Ordering::Acquire));
    assert!(
        seen.iter()
            .all(|p| p.starting_block == 0 && p.highest_block <= 300)
    );

    // Two targets in a row: the second replaces the first.
    sync.set_target(blocks()[449].hash);
    let head = blocks().last().unwrap();
    sync.set_target(head.hash);
    let seen = reach(&chain, &sync, head.hash).await;
    settled(&sync).await;
    assert!(synced.load(Ordering::Acquire));
    assert!(seen.iter().all(|p| p.starting_block >= 300));
    assert!(seen.iter().any(|p| p.highest_block == 600) || seen.is_empty());
    let ours = chain.head_header().unwrap();
    assert_eq!(ours.state_root, head.header.state_root);
    assert_eq!(ours.number, 600);
    // A target already canonical changes nothing.
    sync.set_target(blocks()[10].hash);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(chain.head().unwrap().1, head.hash);
    assert!(sync.progress().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn senders_are_recovered_before_the_importer_needs_them() {
    let cache = SenderCache::new(1 << 16);
    let chain = chain_with(0).with_sender_cache(cache.clone());
    let (_server, _client, sync, _) = pair_with(chain.clone(), Some(cache.clone())).await;
    let head = blocks().last().unwrap();
    sync.set_target(head.hash);
    reach(&chain, &sync, head.hash).await;
    assert_eq!(
        chain.head_header().unwrap().state_root,
        head.header.state_root
    );
    // The importer looked up every transaction's sender and found each one there: the
    // recovery stage had put it in before the block reached the importer.
    let txs: usize = blocks().iter().map(|b| b.transactions.len()).sum();
    assert!(txs > 0);
    assert_eq!(cache.misses(), 0);
    assert_eq!(cache.hits(), txs as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_on_another_branch_reorgs_onto_the_target() {
    // 290 blocks of the chain, then three of our own on top.
    let chain = chain_with(290);
    let p = pool(&chain);
    for i in 0..3u8 {
        let head = chain.head_header().unwrap();
        let attrs = PayloadAttributes {
            timestamp: head.timestamp + 1,
            prev_randao: B256::repeat_byte(7),
            suggested_fee_recipient: Address::repeat_byte(0x60 + i),
            withdrawals: Some(Vec::new()),
            parent_beacon_block_root: Some(B256::repeat_byte(9)),
        };
        let built = chain.build_payload(&p, head.hash(), &attrs).unwrap();
        chain.import(&built.block).unwrap();
    }
    let (ours, _) = chain.head().unwrap();
    assert_eq!(ours, 293);
    assert!(!chain.is_canonical(&blocks()[292].hash).unwrap());

    let (_server, _client, sync, _) = pair(chain.clone()).await;
    let head = blocks().last().unwrap();
    sync.set_target(head.hash);
    reach(&chain, &sync, head.hash).await;
    assert_eq!(
        chain.head_header().unwrap().state_root,
        head.header.state_root
    );
    assert!(chain.is_canonical(&blocks()[292].hash).unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_peers_that_have_it_the_target_waits() {
    let chain = chain_with(5);
    let (_server, _client, sync, synced) = pair(chain.clone()).await;
    // Nobody has this block: the sync reports itself running and stays where it is.
    sync.set_target(B256::repeat_byte(0x55));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let p = sync.progress().expect("a sync in progress");
    assert_eq!(p.starting_block, 5);
    assert_eq!(p.current_block, 5);
    assert!(!synced.load(Ordering::Acquire));
    // Then the consensus client names a head the peer has.
    let head = blocks()[20].hash;
    sync.set_target(head);
    reach(&chain, &sync, head).await;
    settled(&sync).await;
    assert!(synced.load(Ordering::Acquire));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_chain_is_refused_with_its_latest_valid_block() {
    // The server holds 20 good blocks and, as a side block on top, a 21st whose state
    // root is wrong (stored unexecuted, as a node keeps blocks off its chain).
    let server_chain = chain_with(20);
    let good = &blocks()[20];
    let mut header = good.header.clone();
    header.state_root = B256::repeat_byte(0xee);
    let bad = Block {
        hash: header.hash(),
        header,
        ..good.clone()
    };
    server_chain.store_side_block(&bad).unwrap();
    let server = network(&server_chain, 0x33, &[]).await;

    let chain = chain_with(10);
    let client = network(&chain, 0x34, &[enode(&server)]).await;
    let synced = Arc::new(AtomicBool::new(false));
    let sync = moat_sync::spawn(
        chain.clone(),
        Arc::new(client.clone()),
        synced.clone(),
        SyncConfig::default(),
    );
    assert_eq!(sync.invalid(&bad.hash), None);
    sync.set_target(bad.hash);

    // The good blocks are imported, the bad one refused, and the verdict names the
    // last good block (the engine API's latestValidHash).
    let deadline = Instant::now() + Duration::from_secs(60);
    let verdict = loop {
        if let Some(v) = sync.invalid(&bad.hash) {
            break v;
        }
        assert!(Instant::now() < deadline, "the bad block was never refused");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(verdict.latest_valid, Some(blocks()[19].hash));
    assert!(!verdict.why.is_empty());
    assert_eq!(chain.head().unwrap(), (20, blocks()[19].hash));
    assert!(!synced.load(Ordering::Acquire));
    settled(&sync).await;

    // Asked again, the bad target is ignored; a good one is followed.
    sync.set_target(bad.hash);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(chain.head().unwrap().0, 20);
    assert!(sync.progress().is_none());
}
