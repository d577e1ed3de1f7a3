//! Chain requests against a peer played by the test: answers are matched by request id,
//! checked, and a peer that answers with garbage or lies is dropped; one that does not
//! answer times out and loses reputation (a chain request or a snap one); the per-peer
//! bound on requests in flight holds.

use alloy_primitives::{B256, Bytes};
use moat_blockchain::chain::Chain;
use moat_common::block::Block;
use moat_common::config::Genesis;
use moat_mempool::{InMemoryState, Pool, PoolConfig};
use moat_p2p::client::Client;
use moat_p2p::eth::{EthMessage, HashOrNumber};
use moat_p2p::p2p::DisconnectReason;
use moat_p2p::requests::MAX_IN_FLIGHT;
use moat_p2p::rlpx::{PeerId, peer_id};
use moat_p2p::session::Incoming;
use moat_p2p::snap::SnapMessage;
use moat_p2p::{Enode, HeadersRequest, Network, NetworkConfig, RequestError, SealedHeader};
use moat_storage::Store;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../../shared/testdata/ethtest")
        .join(name)
}

/// The first blocks of the conformance chain (not imported: the test's peer serves them).
fn blocks(n: usize) -> Vec<Block> {
    let raw = std::fs::read(testdata("chain.rlp")).unwrap();
    let mut all = Block::decode_all(&raw).unwrap();
    all.truncate(n);
    all
}

fn sealed(b: &Block) -> SealedHeader {
    SealedHeader::decode(Bytes::from(b.header.encoded())).unwrap()
}

struct Setup {
    net: Network,
    peer: Client,
    peer_id: PeerId,
}

async fn setup(timeout: Duration) -> Setup {
    setup_with(timeout, false).await
}

/// [`setup`], the test's peer offering snap/1 when `snap`.
async fn setup_with(timeout: Duration, snap: bool) -> Setup {
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    let chain = Chain::init(Store::in_memory(), &genesis).unwrap();
    let pool = Pool::new(
        PoolConfig::new(chain.config().clone()),
        Arc::new(InMemoryState::default()),
    );
    let key = secp256k1::SecretKey::from_byte_array([0x21; 32]).unwrap();
    let mut cfg = NetworkConfig::new(key, genesis.config.chain_id);
    cfg.listen = Some(([127, 0, 0, 1], 0).into());
    cfg.request_timeout = timeout;
    let net = Network::start(cfg, chain, pool, Arc::new(AtomicBool::new(false)))
        .await
        .unwrap();
    let enode = Enode {
        id: net.local_id(),
        addr: net.listen_addr().unwrap(),
    };
    let peer_key = secp256k1::SecretKey::from_byte_array([0x22; 32]).unwrap();
    let mut status = net.status_for(69);
    status.head = B256::repeat_byte(0xaa);
    status.latest = 600;
    let peer = if snap {
        Client::connect_snap(&enode, peer_key, &[69], status).await
    } else {
        Client::connect(&enode, peer_key, &[69], status).await
    }
    .unwrap();
    let peer_id = peer_id(&peer_key.public_key(secp256k1::SECP256K1));
    for _ in 0..100 {
        if net.sync_peers().iter().any(|p| p.id == peer_id) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Setup { net, peer, peer_id }
}

async fn header_request(peer: &mut Client) -> (u64, HashOrNumber, u64) {
    peer.wait_for(Duration::from_secs(5), |m| match m {
        EthMessage::GetBlockHeaders {
            request_id,
            origin,
            amount,
            ..
        } => Some((*request_id, *origin, *amount)),
        _ => None,
    })
    .await
    .expect("a GetBlockHeaders")
}

async fn body_request(peer: &mut Client) -> (u64, Vec<B256>) {
    peer.wait_for(Duration::from_secs(5), |m| match m {
        EthMessage::GetBlockBodies { request_id, hashes } => Some((*request_id, hashes.clone())),
        _ => None,
    })
    .await
    .expect("a GetBlockBodies")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn honest_answers_arrive_checked_and_peers_are_listed() {
    let Setup {
        net,
        mut peer,
        peer_id,
    } = setup(Duration::from_secs(5)).await;
    let listed = net.sync_peers();
    let me = listed.iter().find(|p| p.id == peer_id).unwrap();
    assert_eq!(me.head, B256::repeat_byte(0xaa));
    assert_eq!(me.range, Some((0, 600)));
    assert_eq!(me.in_flight, 0);

    let chain = blocks(10);
    let n = net.clone();
    let target = chain[9].hash;
    let ask = tokio::spawn(async move {
        n.get_headers(&peer_id, HeadersRequest::back_from(target, 5))
            .await
    });
    let (id, origin, amount) = header_request(&mut peer).await;
    assert_eq!((origin, amount), (HashOrNumber::Hash(target), 5));
    // A late answer to another id first: ignored, not a fault.
    peer.send(&EthMessage::BlockHeaders {
        request_id: id + 1000,
        headers: vec![],
    })
    .await
    .unwrap();
    let headers: Vec<Bytes> = chain[5..10]
        .iter()
        .rev()
        .map(|b| Bytes::from(b.header.encoded()))
        .collect();
    peer.send(&EthMessage::BlockHeaders {
        request_id: id,
        headers,
    })
    .await
    .unwrap();
    let got = ask.await.unwrap().unwrap();
    assert_eq!(
        got.iter().map(|h| h.number()).collect::<Vec<_>>(),
        vec![10, 9, 8, 7, 6]
    );
    assert_eq!(got[0].hash, target);

    // Bodies, one left out by the peer.
    let wanted: Vec<SealedHeader> = chain[0..4].iter().map(sealed).collect();
    let n = net.clone();
    let w = wanted.clone();
    let ask = tokio::spawn(async move { n.get_bodies(&peer_id, &w).await });
    let (id, hashes) = body_request(&mut peer).await;
    assert_eq!(hashes, wanted.iter().map(|h| h.hash).collect::<Vec<_>>());
    let bodies = [0, 1, 3]
        .iter()
        .map(|&i| Bytes::from(chain[i].encode_body()))
        .collect();
    peer.send(&EthMessage::BlockBodies {
        request_id: id,
        bodies,
    })
    .await
    .unwrap();
    let got = ask.await.unwrap().unwrap();
    assert_eq!(
        got.iter().map(|b| b.hash).collect::<Vec<_>>(),
        vec![chain[0].hash, chain[1].hash, chain[3].hash]
    );
    assert_eq!(got[2], chain[3]);

    // A range update moves what the peer is said to have.
    peer.send(&EthMessage::BlockRangeUpdate {
        earliest: 0,
        latest: 700,
        latest_hash: B256::repeat_byte(0xbb),
    })
    .await
    .unwrap();
    let mut seen = None;
    for _ in 0..100 {
        let p = net.sync_peers().into_iter().find(|p| p.id == peer_id);
        if let Some(p) = p.filter(|p| p.range == Some((0, 700))) {
            seen = Some(p);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen.expect("range updated").head, B256::repeat_byte(0xbb));
    assert_eq!(net.peer_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lying_headers_cost_the_peer_its_connection() {
    let Setup {
        net,
        mut peer,
        peer_id,
    } = setup(Duration::from_secs(5)).await;
    let chain = blocks(10);
    let n = net.clone();
    let target = chain[9].hash;
    let ask = tokio::spawn(async move {
        n.get_headers(&peer_id, HeadersRequest::back_from(target, 5))
            .await
    });
    let (id, _, _) = header_request(&mut peer).await;
    // Headers of the chain, but not starting at the hash asked for.
    let headers = chain[3..6]
        .iter()
        .rev()
        .map(|b| Bytes::from(b.header.encoded()))
        .collect();
    peer.send(&EthMessage::BlockHeaders {
        request_id: id,
        headers,
    })
    .await
    .unwrap();
    assert!(matches!(
        ask.await.unwrap(),
        Err(RequestError::BadAnswer(_))
    ));
    assert_eq!(
        peer.wait_disconnect(Duration::from_secs(5)).await,
        Some(Some(DisconnectReason::SubprotocolError))
    );
    for _ in 0..100 {
        if net.peer_count() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        net.get_headers(&peer_id, HeadersRequest::back_from(target, 1))
            .await,
        Err(RequestError::NotConnected)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_bodies_cost_the_peer_its_connection() {
    let Setup {
        net,
        mut peer,
        peer_id,
    } = setup(Duration::from_secs(5)).await;
    let chain = blocks(12);
    // Block 11 carries transactions: the body of block 10 (empty) does not fit it.
    let with_txs = chain
        .iter()
        .position(|b| !b.transactions.is_empty())
        .expect("a block with txs");
    let wanted = vec![sealed(&chain[with_txs])];
    let n = net.clone();
    let ask = tokio::spawn(async move { n.get_bodies(&peer_id, &wanted).await });
    let (id, _) = body_request(&mut peer).await;
    let other = if with_txs == 0 { 1 } else { 0 };
    peer.send(&EthMessage::BlockBodies {
        request_id: id,
        bodies: vec![Bytes::from(chain[other].encode_body())],
    })
    .await
    .unwrap();
    assert!(matches!(
        ask.await.unwrap(),
        Err(RequestError::BadAnswer(_))
    ));
    assert_eq!(
        peer.wait_disconnect(Duration::from_secs(5)).await,
        Some(Some(DisconnectReason::SubprotocolError))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silence_times_out_and_requests_in_flight_are_bounded() {
    let Setup { net, peer, peer_id } = setup(Duration::from_millis(700)).await;
    let target = B256::repeat_byte(1);
    let mut asks = Vec::new();
    for _ in 0..MAX_IN_FLIGHT {
        let n = net.clone();
        asks.push(tokio::spawn(async move {
            n.get_headers(&peer_id, HeadersRequest::back_from(target, 1))
                .await
        }));
    }
    let mut full = false;
    for _ in 0..100 {
        if net.sync_peers()[0].in_flight == MAX_IN_FLIGHT {
            full = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(full, "all slots taken");
    assert_eq!(
        net.get_headers(&peer_id, HeadersRequest::back_from(target, 1))
            .await,
        Err(RequestError::Busy)
    );
    assert_eq!(
        net.get_headers(&peer_id, HeadersRequest::back_from(target, 5000))
            .await,
        Err(RequestError::TooLarge(5000))
    );
    for a in asks {
        assert_eq!(a.await.unwrap(), Err(RequestError::Timeout));
    }
    let me = net.sync_peers().into_iter().next().unwrap();
    assert_eq!(me.in_flight, 0);
    assert!(me.reputation < 0, "timeouts cost reputation");
    drop(peer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_snap_request_times_out_and_costs_reputation() {
    let Setup {
        net,
        mut peer,
        peer_id,
    } = setup_with(Duration::from_millis(300), true).await;
    assert!(peer.snap(), "the test's peer offers snap/1");
    let ask = SnapMessage::GetAccountRange {
        request_id: 0,
        root: B256::repeat_byte(0x11),
        origin: B256::ZERO,
        limit: B256::repeat_byte(0xff),
        bytes: 4096,
    };
    for _ in 0..2 {
        let n = net.clone();
        let a = ask.clone();
        let asked = tokio::spawn(async move { n.snap_request(&peer_id, a).await });
        // Read and left unanswered.
        loop {
            match peer.recv(Duration::from_secs(5)).await {
                Ok(Some(Incoming::Snap(SnapMessage::GetAccountRange { .. }))) => break,
                Ok(Some(_)) => continue,
                other => panic!("no GetAccountRange: {other:?}"),
            }
        }
        assert!(matches!(asked.await.unwrap(), Err(RequestError::Timeout)));
    }
    let me = net.sync_peers().into_iter().next().unwrap();
    assert_eq!(me.in_flight, 0);
    assert_eq!(me.reputation, -20, "each timeout costs 10");
    drop(peer);
}
