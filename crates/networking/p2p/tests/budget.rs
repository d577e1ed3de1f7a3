//! Admission CPU budgets over real RLPx: a peer flooding transactions that buy nothing is
//! slowed and then dropped, with most of its flood never admitted, while an honest peer
//! connected beside it keeps being served and shows in `peers()` with its account; a peer
//! sending one transaction again and again has it admitted once, and pays for reading
//! the rest until it is dropped.

use alloy_primitives::{Address, Bytes, TxKind, U256};
use moat_blockchain::chain::Chain;
use moat_common::config::Genesis;
use moat_common::transaction::{Eip1559Tx, SignedTransaction, Transaction};
use moat_crypto::secp::Signer;
use moat_mempool::{BudgetState, HeadInfo, InMemoryState, Pool, PoolConfig};
use moat_p2p::client::Client;
use moat_p2p::eth::EthMessage;
use moat_p2p::p2p::DisconnectReason;
use moat_p2p::session::Incoming;
use moat_p2p::{Enode, Network, NetworkConfig};
use moat_storage::Store;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../../shared/testdata/ethtest")
        .join(name)
}

fn transfer(chain_id: u64, signer: &Signer, nonce: u64) -> Bytes {
    let tx = Transaction::Eip1559(Eip1559Tx {
        chain_id,
        nonce,
        max_priority_fee_per_gas: 2_000_000_000,
        max_fee_per_gas: 10_000_000_000,
        gas_limit: 21_000,
        to: TxKind::Call(Address::repeat_byte(0x66)),
        value: U256::from(1),
        input: Bytes::new(),
        access_list: vec![],
    });
    SignedTransaction::sign(tx, signer).encoded_2718().into()
}

/// A node listening on loopback, its pool with tight admission budgets: 20 ms of CPU a
/// second per peer, judged after 30 ms. `setup` funds accounts and adjusts the rest of
/// the pool's config. Returns the chain id, the node, its pool and its enode.
async fn start_node(
    node_key: u8,
    setup: impl FnOnce(&InMemoryState, &mut PoolConfig),
) -> (u64, Network, Pool, Enode) {
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    let chain_id = genesis.config.chain_id;
    let chain = Chain::init(Store::in_memory(), &genesis).unwrap();
    let state = InMemoryState::new(HeadInfo {
        number: 0,
        timestamp: genesis.timestamp,
        base_fee: 1_000_000_000,
        blob_base_fee: 1,
        gas_limit: 30_000_000,
    });
    let mut cfg = PoolConfig::new(chain.config().clone());
    cfg.budget.peer_rate_us = 20_000;
    cfg.budget.peer_burst_us = 10_000;
    cfg.budget.useless_min_cpu_us = 30_000;
    setup(&state, &mut cfg);
    let pool = Pool::new(cfg, Arc::new(state));
    let key = secp256k1::SecretKey::from_byte_array([node_key; 32]).unwrap();
    let mut net_cfg = NetworkConfig::new(key, chain_id);
    net_cfg.listen = Some(([127, 0, 0, 1], 0).into());
    let net = Network::start(
        net_cfg,
        chain,
        pool.clone(),
        Arc::new(AtomicBool::new(true)),
    )
    .await
    .unwrap();
    let enode = Enode {
        id: net.local_id(),
        addr: net.listen_addr().unwrap(),
    };
    (chain_id, net, pool, enode)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_peer_is_slowed_and_dropped_while_an_honest_one_is_served() {
    let honest_signer = Signer::from_seed(0x40_0e57);
    let (chain_id, net, pool, enode) = start_node(0x31, |state, cfg| {
        state.set_balance(honest_signer.address(), U256::from(10u128.pow(21)));
        cfg.max_account_slots = 1_000;
    })
    .await;
    let status = net.status_for(70);

    // The attacker: 2,048 transfers from keys that own nothing, 128 a message.
    const FLOOD: usize = 2_048;
    let flood: Vec<Bytes> = (0..FLOOD as u64)
        .map(|i| transfer(chain_id, &Signer::from_seed(0x000f_100d_0000 + i), 0))
        .collect();
    let attacker_key = secp256k1::SecretKey::from_byte_array([0x41; 32]).unwrap();
    let mut attacker = Client::connect(&enode, attacker_key, &[70], status.clone())
        .await
        .unwrap();
    let mut honest = Client::connect(
        &enode,
        secp256k1::SecretKey::from_byte_array([0x42; 32]).unwrap(),
        &[70],
        status,
    )
    .await
    .unwrap();
    let attack = tokio::spawn(async move {
        for chunk in flood.chunks(128) {
            let sent = tokio::time::timeout(
                Duration::from_secs(5),
                attacker.send(&EthMessage::Transactions(chunk.to_vec())),
            )
            .await;
            if !matches!(sent, Ok(Ok(()))) {
                break;
            }
        }
        // What the node says last, once it has had enough.
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            match attacker.recv(Duration::from_secs(1)).await {
                Ok(Some(Incoming::Disconnect(reason))) => return reason,
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    });

    // The honest peer: 200 valid transfers of a funded sender, 20 a message, while the
    // flood runs.
    for nonce in (0..200u64).step_by(20) {
        let txs = (nonce..nonce + 20)
            .map(|n| transfer(chain_id, &honest_signer, n))
            .collect();
        honest.send(&EthMessage::Transactions(txs)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let reason = tokio::time::timeout(Duration::from_secs(40), attack)
        .await
        .expect("the attacker is answered in time")
        .unwrap();
    assert_eq!(reason, Some(DisconnectReason::UselessPeer));
    // The node stopped working for it long before its flood ran out.
    let rejected = pool.metrics().rejections("insufficient_funds");
    assert!(
        rejected < FLOOD as u64 / 2,
        "the node did the work of {rejected} of {FLOOD} flood txs"
    );

    // Every honest tx is pooled, and the honest peer is still connected, in good standing.
    let deadline = Instant::now() + Duration::from_secs(20);
    while pool.sender_txs(&honest_signer.address()).len() < 200 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(pool.sender_txs(&honest_signer.address()).len(), 200);
    let secp = secp256k1::Secp256k1::new();
    let id_of = |k: [u8; 32]| {
        let sk = secp256k1::SecretKey::from_byte_array(k).unwrap();
        moat_p2p::rlpx::peer_id(&secp256k1::PublicKey::from_secret_key(&secp, &sk))
    };
    let (honest_id, attacker_id) = (id_of([0x42; 32]), id_of([0x41; 32]));
    let honest_budget = || {
        net.peers()
            .into_iter()
            .find(|p| p.id == honest_id)
            .expect("the honest peer is still connected")
            .budget
            .expect("an account")
    };
    // Its own burst of 200 may have drawn its bucket down for a moment (a loaded machine
    // makes each tx cost more CPU): it is back in good standing once the bucket refills.
    let deadline = Instant::now() + Duration::from_secs(5);
    while honest_budget().state != BudgetState::Ok && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let budget = honest_budget();
    assert_eq!(budget.admitted, 200);
    assert_eq!(budget.rejected, 0);
    assert!(budget.cpu_us > 0);
    assert_eq!(budget.state, BudgetState::Ok);
    // The attacker heard its Disconnect; the node forgets it right after.
    let deadline = Instant::now() + Duration::from_secs(5);
    while net.peers().iter().any(|p| p.id == attacker_id) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(net.peers().iter().all(|p| p.id != attacker_id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_repeating_one_tx_has_it_admitted_once_and_is_dropped_for_the_reading() {
    let (chain_id, net, pool, enode) = start_node(0x32, |_, _| {}).await;
    let mut attacker = Client::connect(
        &enode,
        secp256k1::SecretKey::from_byte_array([0x43; 32]).unwrap(),
        &[70],
        net.status_for(70),
    )
    .await
    .unwrap();
    // One transfer from a key that owns nothing (a state-dependent failure, which the
    // pool's recent-failure set does not hold), one copy a message.
    let tx = transfer(chain_id, &Signer::from_seed(0x0e_9ea7), 0);
    let mut sent = 0u64;
    let deadline = Instant::now() + Duration::from_secs(30);
    while sent < 200_000 && Instant::now() < deadline {
        let msg = EthMessage::Transactions(vec![tx.clone()]);
        match tokio::time::timeout(Duration::from_secs(5), attacker.send(&msg)).await {
            Ok(Ok(())) => sent += 1,
            _ => break,
        }
    }
    let mut reason = None;
    while Instant::now() < deadline + Duration::from_secs(10) {
        match attacker.recv(Duration::from_secs(1)).await {
            Ok(Some(Incoming::Disconnect(r))) => {
                reason = r;
                break;
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    assert_eq!(
        reason,
        Some(DisconnectReason::UselessPeer),
        "after {sent} copies"
    );
    assert!(sent > 10, "only {sent} copies were taken before the drop");
    // The pool saw the tx once: every later copy was turned away by the peer's own
    // record of what it sent.
    assert_eq!(pool.metrics().rejections("insufficient_funds"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peers_lane_follows_its_standing() {
    use moat_mempool::{Lane, Standing};
    let honest_signer = Signer::from_seed(0x1a_7e5);
    let (chain_id, net, pool, enode) = start_node(0x33, |state, _| {
        state.set_balance(honest_signer.address(), U256::from(10u128.pow(21)));
    })
    .await;
    let secp = secp256k1::Secp256k1::new();
    let connect = |k: u8| {
        let (enode, status) = (enode.clone(), net.status_for(70));
        async move {
            let sk = secp256k1::SecretKey::from_byte_array([k; 32]).unwrap();
            Client::connect(&enode, sk, &[70], status).await.unwrap()
        }
    };
    let id_of = |k: u8| {
        let sk = secp256k1::SecretKey::from_byte_array([k; 32]).unwrap();
        moat_p2p::rlpx::peer_id(&secp256k1::PublicKey::from_secret_key(&secp, &sk))
    };
    let standing = |k: u8| pool.budgets().standing(&id_of(k), Instant::now());
    let lane = |k: u8| pool.budgets().lane(&id_of(k), Instant::now());
    let mut honest = connect(0x44).await;
    let mut flooder = connect(0x45).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while net.peer_count() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Both new: untrusted.
    assert_eq!(standing(0x44), Standing::PeerNew);
    assert_eq!(lane(0x45), Lane::Untrusted);
    // The honest peer's transfers are admitted (in the untrusted lane: it is new); with
    // a record of 8 it is proven and trusted.
    let txs = (0..8)
        .map(|n| transfer(chain_id, &honest_signer, n))
        .collect();
    honest.send(&EthMessage::Transactions(txs)).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pool.sender_txs(&honest_signer.address()).len() < 8 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(pool.sender_txs(&honest_signer.address()).len(), 8);
    // The record is credited once each admission has returned to the peer's reader: the
    // last one may still be on its way when the pool already shows the tx.
    let deadline = Instant::now() + Duration::from_secs(5);
    while standing(0x44) != Standing::PeerProven && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(standing(0x44), Standing::PeerProven);
    assert_eq!(lane(0x44), Lane::Trusted);
    // The flooder's unfunded transfers are all refused: a poor record, untrusted (or
    // over budget first: untrusted too).
    let flood = (0..128u64)
        .map(|i| transfer(chain_id, &Signer::from_seed(0x1a7e_0000 + i), 0))
        .collect();
    flooder
        .send(&EthMessage::Transactions(flood))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while standing(0x45) == Standing::PeerNew && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        matches!(
            standing(0x45),
            Standing::PeerPoor | Standing::PeerOverBudget
        ),
        "{:?}",
        standing(0x45)
    );
    assert_eq!(lane(0x45), Lane::Untrusted);
    assert_eq!(lane(0x44), Lane::Trusted, "the honest peer keeps its lane");
}
