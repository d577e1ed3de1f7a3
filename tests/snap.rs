//! snap/1 against a running node on the conformance chain: a peer that offers snap gets
//! it, and the node's answers verify against the chain's state roots the way a syncing
//! node would check them (the range-proof verifier of moat-trie), at the head and 127
//! blocks back; a root it does not serve gets an empty answer and the peer stays.

mod common;

use alloy_primitives::{B256, Bytes, U256, keccak256};
use common::{Moat, Node, free_port, import_ethtest, rpc, testdata, wait_for};
use moat_common::config::Genesis;
use moat_p2p::Enode;
use moat_p2p::client::Client;
use moat_p2p::eth::{EthMessage, Status};
use moat_p2p::session::Incoming;
use moat_p2p::snap::{SnapMessage, full_account};
use moat_trie::range::verify_range_proof;
use std::time::Duration;

const MAX: B256 = B256::repeat_byte(0xff);
/// The beacon-roots contract: 1190 storage slots at the head.
const BEACON_ROOTS: &str = "0x000F3df6D732807Ef1319fB7B8bB8522d0Beac02";

fn block_root(http: u16, number: u64) -> B256 {
    let v = rpc(
        http,
        "eth_getBlockByNumber",
        &format!(r#"["{number:#x}",false]"#),
    )
    .unwrap();
    v["result"]["stateRoot"].as_str().unwrap().parse().unwrap()
}

async fn ask(peer: &mut Client, msg: SnapMessage) -> SnapMessage {
    peer.send_snap(&msg).await.unwrap();
    loop {
        match peer.recv(Duration::from_secs(20)).await {
            Ok(Some(Incoming::Snap(answer))) => return answer,
            Ok(Some(Incoming::Eth(_))) => continue,
            other => panic!("no snap answer to {}: {other:?}", msg.name()),
        }
    }
}

async fn accounts(
    peer: &mut Client,
    root: B256,
    origin: B256,
    bytes: u64,
) -> (Vec<(B256, Bytes)>, Vec<Bytes>) {
    match ask(
        peer,
        SnapMessage::GetAccountRange {
            request_id: 7,
            root,
            origin,
            limit: MAX,
            bytes,
        },
    )
    .await
    {
        SnapMessage::AccountRange {
            request_id: 7,
            accounts,
            proof,
        } => (accounts, proof),
        other => panic!("{other:?}"),
    }
}

/// Verifies an account range; returns whether more accounts follow.
fn verify_accounts(root: B256, origin: B256, accounts: &[(B256, Bytes)], proof: &[Bytes]) -> bool {
    let keys: Vec<B256> = accounts.iter().map(|(k, _)| *k).collect();
    let values: Vec<Vec<u8>> = accounts
        .iter()
        .map(|(_, slim)| full_account(slim).unwrap())
        .collect();
    verify_range_proof(root, &origin, &keys, &values, proof).unwrap()
}

/// The conformance chain's head (#600).
const HEAD_HASH: &str = "0x44e3809c9a3cda717f00aea3a9da336d149612c8d5657fbc0028176ef8d94d2a";

/// A Status at the conformance chain's head.
fn ethtest_status() -> Status {
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    let genesis_hash = genesis.header().hash();
    Status {
        version: 69,
        network_id: genesis.config.chain_id,
        genesis: genesis_hash,
        fork_id: genesis
            .config
            .fork_id(genesis_hash, genesis.timestamp, 600, 6000),
        total_difficulty: U256::ZERO,
        head: HEAD_HASH.parse().unwrap(),
        earliest: 0,
        latest: 600,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snap_answers_verify_against_recent_roots() {
    // Removed when the test ends, after the node (declared later) is stopped.
    let dir = common::temp_path("snap");
    import_ethtest(&dir);
    let (http, auth, p2p) = (free_port(), free_port(), free_port());
    let key = secp256k1::SecretKey::from_byte_array([0x42; 32]).unwrap();
    let key_hex = alloy_primitives::hex::encode(key.secret_bytes());
    let genesis_path = testdata("genesis.json");
    let (http_s, auth_s, p2p_s) = (http.to_string(), auth.to_string(), p2p.to_string());
    let _node = Node::start(&[
        "--network",
        genesis_path.to_str().unwrap(),
        "--datadir",
        dir.to_str().unwrap(),
        "--http",
        "--http.port",
        &http_s,
        "--authrpc.port",
        &auth_s,
        "--port",
        &p2p_s,
        "--p2p.addr",
        "127.0.0.1",
        "--nodekeyhex",
        &key_hex,
        "--nodiscover",
    ]);
    wait_for("the RPC server", || rpc(http, "eth_chainId", "[]"));
    let status = ethtest_status();
    let enode = Enode {
        id: moat_p2p::rlpx::peer_id(&key.public_key(secp256k1::SECP256K1)),
        addr: ([127, 0, 0, 1], p2p).into(),
    };
    let peer_key = secp256k1::SecretKey::from_byte_array([7; 32]).unwrap();
    let mut peer = Client::connect_snap(&enode, peer_key, &[69], status)
        .await
        .expect("handshake with moat");
    assert!(peer.snap(), "the node offers snap/1");

    // The whole head state in one answer: every account of the head dump, proven.
    let head_root = block_root(http, 600);
    let dump: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("headstate.json")).unwrap())
            .unwrap();
    let mut keys: Vec<B256> = dump["accounts"]
        .as_object()
        .unwrap()
        .values()
        .map(|a| a["key"].as_str().unwrap().parse().unwrap())
        .collect();
    keys.sort();
    let (all, proof) = accounts(&mut peer, head_root, B256::ZERO, 2 << 20).await;
    let served: Vec<B256> = all.iter().map(|(k, _)| *k).collect();
    assert_eq!(served, keys);
    assert!(!verify_accounts(head_root, B256::ZERO, &all, &proof));

    // Paged by 4000 bytes, as the conformance suite asks: 68 accounts, then the rest
    // from the next key on, each page proven, the last one saying nothing follows.
    let mut origin = B256::ZERO;
    let mut pages = 0;
    let mut paged = Vec::new();
    loop {
        let (page, proof) = accounts(&mut peer, head_root, origin, 4000).await;
        if pages == 0 {
            assert_eq!(page.len(), 68);
        }
        let more = verify_accounts(head_root, origin, &page, &proof);
        pages += 1;
        let last = page.last().unwrap().0;
        paged.extend(page.into_iter().map(|(k, _)| k));
        if !more {
            break;
        }
        origin = B256::from(U256::from_be_bytes(last.0) + U256::from(1));
    }
    assert_eq!(paged, keys);
    assert!(pages >= 3, "{pages} pages");

    // 127 blocks back: served from the undo records, proven against that root.
    let old_root = block_root(http, 600 - 127);
    assert_ne!(old_root, head_root);
    let (old, proof) = accounts(&mut peer, old_root, B256::ZERO, 2 << 20).await;
    assert!(!old.is_empty());
    assert!(!verify_accounts(old_root, B256::ZERO, &old, &proof));

    // Roots not served: genesis (600 blocks back) and an unknown one. Empty answers,
    // and the peer is still served afterwards.
    for root in [block_root(http, 0), B256::repeat_byte(0x13)] {
        let (none, proof) = accounts(&mut peer, root, B256::ZERO, 4000).await;
        assert!(none.is_empty() && proof.is_empty());
    }

    // The beacon-roots contract's storage, 2000 bytes at a time, each page proven
    // against its storage root.
    let address: alloy_primitives::Address = BEACON_ROOTS.parse().unwrap();
    let account_key = keccak256(address);
    let body = &all.iter().find(|(k, _)| *k == account_key).unwrap().1;
    let full = full_account(body).unwrap();
    let storage_root = B256::from_slice(&full[full.len() - 65..full.len() - 33]);
    let code_hash = B256::from_slice(&full[full.len() - 32..]);
    let mut origin = B256::ZERO;
    let mut slots = 0;
    loop {
        let (mut lists, proof) = match ask(
            &mut peer,
            SnapMessage::GetStorageRanges {
                request_id: 8,
                root: head_root,
                accounts: vec![account_key],
                origin,
                limit: MAX,
                bytes: 2000,
            },
        )
        .await
        {
            SnapMessage::StorageRanges { slots, proof, .. } => (slots, proof),
            other => panic!("{other:?}"),
        };
        assert_eq!(lists.len(), 1);
        let page = lists.remove(0);
        let keys: Vec<B256> = page.iter().map(|(k, _)| *k).collect();
        let values: Vec<&[u8]> = page.iter().map(|(_, v)| v.as_ref()).collect();
        let more = verify_range_proof(storage_root, &origin, &keys, &values, &proof).unwrap();
        slots += page.len();
        if !more {
            break;
        }
        origin = B256::from(U256::from_be_bytes(keys.last().unwrap().0) + U256::from(1));
    }
    assert_eq!(slots, 1190);

    // Its code by hash.
    match ask(
        &mut peer,
        SnapMessage::GetByteCodes {
            request_id: 9,
            hashes: vec![code_hash, B256::repeat_byte(1)],
            bytes: 10_000,
        },
    )
    .await
    {
        SnapMessage::ByteCodes { codes, .. } => {
            assert_eq!(codes.len(), 1);
            assert_eq!(keccak256(&codes[0]), code_hash);
        }
        other => panic!("{other:?}"),
    }

    // The root node of the state one block back, and of the contract's storage trie.
    let prev_root = block_root(http, 599);
    match ask(
        &mut peer,
        SnapMessage::GetTrieNodes {
            request_id: 10,
            root: prev_root,
            paths: vec![vec![Bytes::from(vec![0x00])]],
            bytes: 5000,
        },
    )
    .await
    {
        SnapMessage::TrieNodes { nodes, .. } => {
            assert_eq!(nodes.len(), 1);
            assert_eq!(keccak256(&nodes[0]), prev_root);
        }
        other => panic!("{other:?}"),
    }
    match ask(
        &mut peer,
        SnapMessage::GetTrieNodes {
            request_id: 11,
            root: head_root,
            paths: vec![vec![
                Bytes::from(account_key.to_vec()),
                Bytes::from(vec![0x00]),
            ]],
            bytes: 5000,
        },
    )
    .await
    {
        SnapMessage::TrieNodes { nodes, .. } => {
            assert_eq!(nodes.len(), 1);
            assert_eq!(keccak256(&nodes[0]), storage_root);
        }
        other => panic!("{other:?}"),
    }
}

/// The next answer of `from` (eth or snap), other messages skipped; `None` once it is
/// gone or after 30 s.
async fn answer_of(from: &mut Client) -> Option<Incoming> {
    loop {
        match from.recv(Duration::from_secs(30)).await {
            Ok(Some(m @ (Incoming::Snap(_) | Incoming::Eth(_)))) if is_answer(&m) => {
                return Some(m);
            }
            Ok(Some(Incoming::Disconnect(_))) | Ok(None) | Err(_) => return None,
            Ok(Some(_)) => {}
        }
    }
}

fn is_answer(m: &Incoming) -> bool {
    match m {
        Incoming::Eth(e) => matches!(
            e,
            EthMessage::BlockHeaders { .. }
                | EthMessage::BlockBodies { .. }
                | EthMessage::Receipts { .. }
        ),
        Incoming::Snap(s) => matches!(
            s,
            SnapMessage::AccountRange { .. }
                | SnapMessage::StorageRanges { .. }
                | SnapMessage::ByteCodes { .. }
                | SnapMessage::TrieNodes { .. }
        ),
        Incoming::Ping | Incoming::Pong | Incoming::Disconnect(_) => false,
    }
}

/// Relays `b`'s requests to `a` and `a`'s answers back, each account range spoiled: an
/// account out of its middle (the rest no longer matches the proof), or with fewer than
/// three the proof's last node. Ends when `b` drops the connection (or after 120 s);
/// returns how many ranges were spoiled, and whether `b` dropped it.
async fn lying_relay(mut a: Client, mut b: Client) -> (usize, bool) {
    let mut spoiled = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while tokio::time::Instant::now() < deadline {
        let request = match b.recv(Duration::from_secs(1)).await {
            Ok(Some(m)) => m,
            Ok(None) => continue,
            Err(_) => return (spoiled, true),
        };
        match &request {
            Incoming::Disconnect(_) => return (spoiled, true),
            Incoming::Eth(
                m @ (EthMessage::GetBlockHeaders { .. }
                | EthMessage::GetBlockBodies { .. }
                | EthMessage::GetReceipts { .. }),
            ) => a.send(m).await.unwrap(),
            Incoming::Snap(m) => a.send_snap(m).await.unwrap(),
            Incoming::Eth(_) | Incoming::Ping | Incoming::Pong => continue,
        }
        let sent = match answer_of(&mut a).await.expect("A answers") {
            Incoming::Snap(SnapMessage::AccountRange {
                request_id,
                mut accounts,
                mut proof,
            }) => {
                if accounts.len() >= 3 {
                    accounts.remove(accounts.len() / 2);
                } else {
                    proof.pop();
                }
                spoiled += 1;
                let m = SnapMessage::AccountRange {
                    request_id,
                    accounts,
                    proof,
                };
                b.send_snap(&m).await
            }
            Incoming::Snap(m) => b.send_snap(&m).await,
            Incoming::Eth(m) => b.send(&m).await,
            Incoming::Ping | Incoming::Pong | Incoming::Disconnect(_) => continue,
        };
        if sent.is_err() {
            return (spoiled, true);
        }
    }
    (spoiled, false)
}

/// Whether `b`'s `admin_peers` lists the peer `id` (hex).
fn lists(b: &Moat, id: &str) -> bool {
    let peers = rpc(b.http, "admin_peers", "[]").unwrap_or_default();
    peers["result"]
        .as_array()
        .is_some_and(|ps| ps.iter().any(|p| p["id"].as_str() == Some(id)))
}

/// A peer that sends an account range that does not match its proof is dropped, at the
/// network level, and nothing it sent is kept. A holds the conformance chain; B is a
/// fresh node (snap sync by default) whose only peer is this test: it relays B's
/// requests to A and A's answers back, but spoils every account range. B drops it (the
/// connection closes, `admin_peers` no longer lists it) with no account downloaded; then,
/// given A as a peer, B snap syncs to A's head and state root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_sending_a_bad_account_range_proof_is_dropped() {
    let wait = Duration::from_secs(90);
    let a_dir = common::temp_path("snap-liar-a");
    let b_dir = common::temp_path("snap-liar-b");
    import_ethtest(&a_dir);
    let genesis = testdata("genesis.json");
    let (a_port, b_port) = (free_port(), free_port());
    let a = Moat::start(
        &a_dir,
        &genesis,
        a_port,
        0x71,
        &["--syncmode", "full"],
        &[],
        wait,
    );
    let admin = ["--http.api", "eth,net,admin"];
    let b = Moat::start(&b_dir, &genesis, b_port, 0x72, &admin, &[], wait);
    let enode_of = |key: u8, port: u16| {
        let secret = secp256k1::SecretKey::from_byte_array([key; 32]).unwrap();
        Enode {
            id: moat_p2p::rlpx::peer_id(&secret.public_key(secp256k1::SECP256K1)),
            addr: ([127, 0, 0, 1], port).into(),
        }
    };
    let liar_key = secp256k1::SecretKey::from_byte_array([0x73; 32]).unwrap();
    // admin_peers names a peer by the keccak of its public key, as geth does.
    let liar_id = alloy_primitives::hex::encode(keccak256(moat_p2p::rlpx::peer_id(
        &liar_key.public_key(secp256k1::SECP256K1),
    )));
    let to_a = Client::connect_snap(&enode_of(0x71, a_port), liar_key, &[69], ethtest_status())
        .await
        .expect("handshake with A");
    let to_b = Client::connect_snap(&enode_of(0x72, b_port), liar_key, &[69], ethtest_status())
        .await
        .expect("handshake with B");
    assert!(to_a.snap() && to_b.snap());
    let relay = tokio::spawn(lying_relay(to_a, to_b));
    let id = liar_id.clone();
    let b = tokio::task::spawn_blocking(move || {
        let liar_id = id;
        b.wait("B to list the relay", || lists(&b, &liar_id).then_some(()));
        assert_eq!(b.forkchoice(HEAD_HASH), "SYNCING");
        b
    })
    .await
    .unwrap();

    let (spoiled, dropped) = tokio::time::timeout(Duration::from_secs(150), relay)
        .await
        .expect("the relay ends")
        .unwrap();
    assert!(dropped, "B closed the relay's connection");
    assert!(spoiled >= 1, "{spoiled} ranges spoiled");
    eprintln!("the relay spoiled {spoiled} account range(s) before B dropped it");
    let a_enode = common::enode(0x71, a_port);
    let b = tokio::task::spawn_blocking(move || {
        b.wait("B to drop the relay from its peers", || {
            (!lists(&b, &liar_id)).then_some(())
        });
        let log = b.log();
        assert!(log.contains("snap: bad answer, peer dropped"), "{log}");
        // Dropped by the network for the proof: a protocol fault, not a timeout's score.
        assert!(
            log.lines()
                .any(|l| l.contains("dropping peer for a protocol fault")
                    && l.contains("bad snap proof")),
            "{log}"
        );
        // Nothing of the spoiled ranges was written.
        let s = b.call("eth_syncing", "[]");
        assert!(
            s == serde_json::Value::Bool(false) || s["syncedAccounts"] == "0x0",
            "{s}"
        );
        assert_eq!(b.head(), Some(0));

        // An honest peer: B snap syncs from it to its head and state root.
        let added = rpc(b.http, "admin_addPeer", &format!(r#"["{a_enode}"]"#)).unwrap();
        assert_eq!(added["result"], true, "{added}");
        b.wait("B to reach A's head", || (b.head()? == 600).then_some(()));
        b
    })
    .await
    .unwrap();
    let ours = b.call("eth_getBlockByNumber", r#"["latest", false]"#);
    let theirs = a.call("eth_getBlockByNumber", r#"["latest", false]"#);
    assert_eq!(ours["hash"], theirs["hash"]);
    assert_eq!(ours["stateRoot"], theirs["stateRoot"]);
    let log = b.log();
    assert!(log.contains("snap sync complete"), "{log}");
    drop((a, b));
}
