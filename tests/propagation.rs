//! How transactions leave a node, between real `moat` processes: a private sender's
//! txs are mined by their node and never reach a peer; blob txs cross eth/72 as a body
//! without blobs and the blob's cells, whole to providers and a custody's cells to a
//! sampler.

mod common;

use alloy_primitives::B256;
use common::{Node, free_port, rpc, wait_for};
use moat_crypto::secp::Signer;

/// A dev node that takes peers on loopback: RPC on `http`, devp2p on `p2p`, a block
/// every `period` seconds.
fn dev_peer(http: u16, p2p: u16, period: &str, extra: &[&str]) -> Node {
    let (http_s, p2p_s, auth_s) = (http.to_string(), p2p.to_string(), free_port().to_string());
    let mut args = vec![
        "--dev",
        "--dev.period",
        period,
        "--http.api",
        "eth,net,web3,admin,txpool",
        "--http.port",
        &http_s,
        "--authrpc.port",
        &auth_s,
        "--maxpeers",
        "5",
        "--port",
        &p2p_s,
        "--p2p.addr",
        "127.0.0.1",
        "--nodiscover",
    ];
    args.extend_from_slice(extra);
    let node = Node::start(&args);
    wait_for("the RPC server", || rpc(http, "eth_chainId", "[]"));
    node
}

fn signer(i: usize) -> Signer {
    Signer::from_bytes(&common::DEV_KEYS[i].parse::<B256>().unwrap()).unwrap()
}

fn known(http: u16, hash: B256) -> bool {
    rpc(http, "eth_getTransactionByHash", &format!(r#"["{hash}"]"#))
        .is_some_and(|v| !v["result"].is_null())
}

/// The `enode://` URL of the node whose RPC is on `http`.
fn enode_of(http: u16) -> String {
    let info = rpc(http, "admin_nodeInfo", "[]").unwrap();
    info["result"]["enode"].as_str().unwrap().to_string()
}

/// Makes the node on `http` peer with the one on `to`.
fn add_peer(http: u16, to: u16) {
    let enode = enode_of(to);
    let added = rpc(http, "admin_addPeer", &format!(r#"["{enode}"]"#)).unwrap();
    assert_eq!(added["result"], true, "{added}");
}

/// A two-blob version-1 tx of the dev chain, sent to the node on `http`.
fn send_blob_tx(http: u16) -> moat_common::PooledTransaction {
    let tx = moat_common::testing::blob_tx_on_chain(
        moat_common::transaction::SidecarVersion::V1,
        2,
        0,
        &signer(1),
        1337,
        100_000_000_000,
        1_000_000_000,
    );
    let raw = alloy_primitives::hex::encode_prefixed(tx.encoded_2718());
    let sent = rpc(http, "eth_sendRawTransaction", &format!(r#"["{raw}"]"#)).unwrap();
    assert_eq!(sent["result"], format!("{}", tx.hash()), "{sent}");
    tx
}

/// `--txpool.private`: the node pools and mines its private sender's tx, and its peer
/// never hears of it (neither whole, nor announced, nor served), while a public tx sent
/// at the same moment reaches the peer.
#[test]
fn a_private_tx_is_mined_by_its_node_and_never_reaches_a_peer() {
    let private = signer(2);
    let public = signer(3);
    let (a_http, a_p2p, b_http, b_p2p) = (free_port(), free_port(), free_port(), free_port());
    let private_addr = format!("{}", private.address());
    let _a = dev_peer(a_http, a_p2p, "2", &["--txpool.private", &private_addr]);
    // The peer seals no block of its own during the test.
    let _b = dev_peer(b_http, b_p2p, "3600", &[]);
    add_peer(b_http, a_http);
    wait_for("the two nodes peered", || {
        let v = rpc(a_http, "net_peerCount", "[]")?;
        (v["result"] == "0x1").then_some(())
    });

    let (private_hash, private_raw) = common::signed_transfer(&private, 1337, 0, 7);
    let (public_hash, public_raw) = common::signed_transfer(&public, 1337, 0, 7);
    for raw in [&private_raw, &public_raw] {
        let sent = rpc(a_http, "eth_sendRawTransaction", &format!(r#"["{raw}"]"#)).unwrap();
        assert!(sent["result"].is_string(), "{sent}");
    }
    wait_for("the public tx at the peer", || {
        known(b_http, public_hash).then_some(())
    });
    let receipt = wait_for("the private tx mined by its node", || {
        let r = rpc(
            a_http,
            "eth_getTransactionReceipt",
            &format!(r#"["{private_hash}"]"#),
        )?;
        (!r["result"].is_null()).then(|| r["result"].clone())
    });
    assert_eq!(receipt["status"], "0x1", "{receipt}");
    // Two more of A's blocks: anything A would send has long arrived.
    let mined_at = u64::from_str_radix(
        receipt["blockNumber"]
            .as_str()
            .unwrap()
            .trim_start_matches("0x"),
        16,
    )
    .unwrap();
    wait_for("two more blocks", || {
        let v = rpc(a_http, "eth_blockNumber", "[]")?;
        let n = u64::from_str_radix(v["result"].as_str()?.trim_start_matches("0x"), 16).ok()?;
        (n >= mined_at + 2).then_some(())
    });
    assert!(
        !known(b_http, private_hash),
        "the private tx reached the peer"
    );
    let content = rpc(b_http, "txpool_content", "[]").unwrap();
    assert!(
        !content.to_string().contains(&format!("{private_hash}")),
        "{content}"
    );
}

/// eth/72's cells between two moat nodes (Osaka dev chains): they negotiate eth/73
/// (eth/72 with EIP-8077's senders and nonces), and a blob tx sent to one is pooled by
/// the other whole, fetched as its body without blobs
/// (`PooledTransactions`) and its data cells (`GetCells`: 64 cells a blob), then its
/// sidecar verified once.
#[test]
fn a_blob_tx_crosses_eth_72_as_a_body_and_its_cells() {
    let (a_http, a_p2p, b_http, b_p2p, b_metrics) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let b_metrics_s = b_metrics.to_string();
    let _a = dev_peer(a_http, a_p2p, "3600", &["--dev.osaka"]);
    let _b = dev_peer(
        b_http,
        b_p2p,
        "3600",
        &["--dev.osaka", "--metrics", "--metrics.port", &b_metrics_s],
    );
    add_peer(b_http, a_http);
    let peers = wait_for("the two nodes peered", || {
        let v = rpc(b_http, "admin_peers", "[]")?;
        let list = v["result"].as_array()?.clone();
        (!list.is_empty()).then_some(list)
    });
    assert_eq!(peers[0]["protocols"]["eth"]["version"], 73, "{peers:?}");

    let tx = send_blob_tx(a_http);
    wait_for("the blob tx at the peer", || {
        known(b_http, tx.hash()).then_some(())
    });
    // Two blobs' data cells came over GetCells; the sidecar was verified by the peer.
    assert_eq!(
        common::metric(b_metrics, "moat_p2p_cells_received_total"),
        Some(128.0)
    );
    assert_eq!(
        common::metric(b_metrics, "moat_p2p_cell_requests_total"),
        Some(1.0)
    );
    assert_eq!(
        common::metric(b_metrics, "moat_pool_kzg_verifications_total"),
        Some(1.0)
    );
}

/// EIP-8070's sampler between three moat nodes (Osaka dev chains): A and B hold blobs
/// whole (providers), C keeps 8 cells of each blob (`--blobpool.custody`) and fetches no
/// blob tx whole (`--blobpool.fetchprobability 0`). A blob tx sent to A and to B over RPC
/// is announced by both with every cell, and C pools it with its custody's cells only (16
/// for two blobs), verified once, and never as a whole blob. (Sent to both, not left to
/// travel from A to B: C waits 2 s for a second provider, and on a loaded machine B's
/// fetch and verification took longer.)
#[test]
fn a_sampler_pools_a_blob_tx_on_its_custody_cells_once_two_providers_have_it() {
    let ports: Vec<u16> = (0..7).map(|_| free_port()).collect();
    let (a_http, a_p2p, b_http, b_p2p, c_http, c_p2p, c_metrics) = (
        ports[0], ports[1], ports[2], ports[3], ports[4], ports[5], ports[6],
    );
    let c_metrics_s = c_metrics.to_string();
    let _a = dev_peer(a_http, a_p2p, "3600", &["--dev.osaka"]);
    let _b = dev_peer(b_http, b_p2p, "3600", &["--dev.osaka"]);
    // Cells 0, 9, 18, 27 and 64, 73, 82, 91.
    let custody = "0x01020408000000000102040800000000";
    let _c = dev_peer(
        c_http,
        c_p2p,
        "3600",
        &[
            "--dev.osaka",
            "--blobpool.custody",
            custody,
            "--blobpool.fetchprobability",
            "0",
            "--metrics",
            "--metrics.port",
            &c_metrics_s,
        ],
    );
    add_peer(b_http, a_http);
    add_peer(c_http, a_http);
    add_peer(c_http, b_http);
    wait_for("C peered with A and B, B with A", || {
        let c = rpc(c_http, "net_peerCount", "[]")?;
        let b = rpc(b_http, "net_peerCount", "[]")?;
        (c["result"] == "0x2" && b["result"] != "0x0").then_some(())
    });

    let tx = send_blob_tx(a_http);
    // The same tx to B (unless A's announcement got it there first).
    let raw = alloy_primitives::hex::encode_prefixed(tx.encoded_2718());
    let sent = rpc(b_http, "eth_sendRawTransaction", &format!(r#"["{raw}"]"#)).unwrap();
    assert!(
        sent["result"] == format!("{}", tx.hash())
            || sent["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("known")),
        "{sent}"
    );
    wait_for("the blob tx at B", || {
        known(b_http, tx.hash()).then_some(())
    });
    wait_for("the blob tx at C", || {
        known(c_http, tx.hash()).then_some(())
    });
    // Sampled: 8 cells of each of its 2 blobs, in one request, verified once.
    assert_eq!(
        common::metric(c_metrics, "moat_p2p_blob_txs_sampled_total"),
        Some(1.0)
    );
    assert_eq!(
        common::metric(c_metrics, "moat_p2p_cells_received_total"),
        Some(16.0)
    );
    assert_eq!(
        common::metric(c_metrics, "moat_pool_kzg_verifications_total"),
        Some(1.0)
    );
    // It did not wait out the availability timeout (two providers came first).
    assert_eq!(
        common::metric(c_metrics, "moat_p2p_blob_samples_unavailable_total").unwrap_or(0.0),
        0.0
    );
}

/// The chain id of [`OsakaNode`]'s genesis.
const OSAKA_CHAIN_ID: u64 = 7_272;

/// A moat node on a post-merge Osaka genesis of its own (`funded` rich), synced by a
/// forkchoiceUpdated to genesis so it takes peers' txs, for devp2p peers of the test's.
struct OsakaNode {
    moat: common::Moat,
    genesis: moat_common::config::Genesis,
    enode: moat_p2p::Enode,
    metrics: u16,
    _dir: tempfile::TempDir,
}

impl OsakaNode {
    fn start(tag: &str, funded: &[alloy_primitives::Address]) -> OsakaNode {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let genesis = moat_harness::genesis::osaka(
            OSAKA_CHAIN_ID,
            funded,
            alloy_primitives::U256::from(10u128.pow(24)),
            30_000_000,
            now,
            b"propagation",
        );
        let dir = common::temp_dir(tag);
        let genesis_path = dir.path().join("genesis.json");
        std::fs::write(&genesis_path, serde_json::to_string(&genesis).unwrap()).unwrap();
        let (p2p, metrics) = (free_port(), free_port());
        let metrics_s = metrics.to_string();
        let moat = common::Moat::start(
            &dir.path().join("moat"),
            &genesis_path,
            p2p,
            0x42,
            &[
                "--metrics",
                "--metrics.port",
                &metrics_s,
                "--http.api",
                "eth,net,web3,admin",
            ],
            &[],
            std::time::Duration::from_secs(60),
        );
        assert_eq!(
            moat.forkchoice(&format!("{}", genesis.header().hash())),
            "VALID"
        );
        let node_key = secp256k1::SecretKey::from_byte_array([0x42; 32]).unwrap();
        let enode = moat_p2p::Enode {
            id: moat_p2p::rlpx::peer_id(&node_key.public_key(secp256k1::SECP256K1)),
            addr: ([127, 0, 0, 1], p2p).into(),
        };
        OsakaNode {
            moat,
            genesis,
            enode,
            metrics,
            _dir: dir,
        }
    }

    /// A devp2p peer with key `n`, speaking eth/`version` only.
    async fn peer(&self, n: u8, version: u32) -> moat_p2p::client::Client {
        moat_p2p::client::Client::connect(
            &self.enode,
            secp256k1::SecretKey::from_byte_array([n; 32]).unwrap(),
            &[version],
            moat_p2p::eth::Status::at_genesis(&self.genesis, version),
        )
        .await
        .expect("handshake with moat")
    }
}

/// eth/72 against devp2p peers of the test's own, on a post-merge Osaka chain: a peer
/// whose cells fail their proofs is dropped as for a bad sidecar, and the tx comes from
/// an honest announcer instead (each sidecar verified once); a peer that announced every
/// cell and then leaves a tx out of its `Cells` is dropped too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eth_72_peers_with_bad_or_missing_cells_are_dropped_and_the_tx_comes_from_another() {
    use moat_common::transaction::SidecarVersion;
    use moat_p2p::client::Client;
    use moat_p2p::eth::{ALL_CELLS, Announcement, DATA_CELLS, EthMessage};
    use std::time::Duration;
    // Each step answers in well under a second on a quiet machine; a loaded one once
    // took the liar's body request past 20 s.
    let wait = Duration::from_secs(60);
    let sender = signer(1);
    let net = OsakaNode::start("eth72", &[sender.address()]);
    let (moat, metrics_port) = (&net.moat, net.metrics);
    let peer = |n: u8| net.peer(n, 72);
    // Its blobs follow from the nonce.
    let blob_tx = |nonce: u64, blobs: usize| {
        moat_common::testing::blob_tx_on_chain(
            SidecarVersion::V1,
            blobs,
            nonce,
            &sender,
            OSAKA_CHAIN_ID,
            100_000_000_000,
            1_000_000_000,
        )
    };
    let tx = blob_tx(0, 1);
    let other = blob_tx(1, 1); // another blob: cells that fail tx's proofs
    let announce = |tx: &moat_common::transaction::PooledTransaction| {
        EthMessage::NewPooledTransactionHashes(Announcement {
            types: vec![3],
            sizes: vec![tx.size_without_blobs() as u32],
            hashes: vec![tx.hash()],
            mask: Some(ALL_CELLS),
            origins: vec![],
        })
    };
    let data_cells =
        |tx: &moat_common::transaction::PooledTransaction| -> Vec<alloy_primitives::Bytes> {
            let s = tx.sidecar().unwrap();
            let data: Vec<usize> = (0..64).collect();
            (0..s.blobs.len())
                .flat_map(|b| s.cells(b, &data).unwrap())
                .map(|c| alloy_primitives::Bytes::copy_from_slice(&c))
                .collect()
        };
    // Waits until `client` is asked for a tx body; the request's id.
    async fn asked_for_body(client: &mut Client, wait: Duration) -> u64 {
        client
            .wait_for(wait, |m| match m {
                EthMessage::GetPooledTransactions { request_id, .. } => Some(*request_id),
                _ => None,
            })
            .await
            .expect("asked for the body")
    }
    // Serves `tx`'s body under request `id`, then answers GetCells with `cells`.
    async fn serve(
        client: &mut Client,
        id: u64,
        tx: &moat_common::transaction::PooledTransaction,
        cells: Option<Vec<alloy_primitives::Bytes>>,
        wait: Duration,
    ) {
        client
            .send(&EthMessage::PooledTransactions {
                request_id: id,
                txs: vec![tx.encoded_2718_without_blobs().into()],
            })
            .await
            .unwrap();
        let (id, mask) = client
            .wait_for(wait, |m| match m {
                EthMessage::GetCells {
                    request_id, mask, ..
                } => Some((*request_id, *mask)),
                _ => None,
            })
            .await
            .expect("asked for the cells");
        assert_eq!(mask, DATA_CELLS, "the data cells are asked for");
        let (hashes, cells) = match cells {
            Some(c) => (vec![tx.hash()], vec![c]),
            None => (vec![], vec![]),
        };
        client
            .send(&EthMessage::Cells {
                request_id: id,
                hashes,
                cells,
                mask,
            })
            .await
            .unwrap();
    }

    // The first announcer serves cells of other blobs; the second the right ones. All
    // connect first: a fault makes the node wary of new peers from the same address.
    let mut bad = peer(1).await;
    let mut honest = peer(2).await;
    let mut liar = peer(3).await;
    let mut late_bad = peer(4).await;
    let mut latecomer = peer(5).await;
    // The honest peer announces once the bad one is dropped: which announcer is asked
    // first is then not a race between two sessions on a loaded machine, and the bad
    // cells must not have made the tx itself unwelcome.
    bad.send(&announce(&tx)).await.unwrap();
    let id = asked_for_body(&mut bad, wait).await;
    serve(&mut bad, id, &tx, Some(data_cells(&other)), wait).await;
    assert!(
        bad.wait_disconnect(wait).await.is_some(),
        "bad cells drop the peer"
    );
    honest.send(&announce(&tx)).await.unwrap();
    let id = asked_for_body(&mut honest, wait).await;
    serve(&mut honest, id, &tx, Some(data_cells(&tx)), wait).await;
    wait_for("the blob tx pooled", || {
        moat.call("eth_getTransactionByHash", &format!(r#"["{}"]"#, tx.hash()))
            .is_object()
            .then_some(())
    });
    assert_eq!(
        common::metric(metrics_port, "moat_pool_kzg_verifications_total"),
        Some(2.0)
    );

    // A peer announces every cell of the next tx, delivers its body, then leaves it out
    // of its Cells: dropped.
    let next = blob_tx(1, 2);
    liar.send(&announce(&next)).await.unwrap();
    let id = asked_for_body(&mut liar, wait).await;
    serve(&mut liar, id, &next, None, wait).await;
    assert!(
        liar.wait_disconnect(wait).await.is_some(),
        "cells it cannot serve drop the peer"
    );
    assert!(
        moat.call(
            "eth_getTransactionByHash",
            &format!(r#"["{}"]"#, next.hash())
        )
        .is_null()
    );

    // An announcer that comes while a delivery's cells are being verified (the tx is
    // being admitted) is kept as the tx's next announcer: once those cells fail, it is
    // asked. Six blobs' cell proofs take tens of milliseconds to check; the announcement
    // goes out once the node's KZG count shows the check started (if the machine is
    // slow to show it, the announcement comes after the fault, which must work too).
    let six = blob_tx(1, 6);
    let wrong = blob_tx(2, 6);
    late_bad.send(&announce(&six)).await.unwrap();
    let id = asked_for_body(&mut late_bad, wait).await;
    serve(&mut late_bad, id, &six, Some(data_cells(&wrong)), wait).await;
    let started = std::time::Instant::now();
    while common::metric(metrics_port, "moat_pool_kzg_verifications_total") < Some(3.0) {
        assert!(started.elapsed() < wait, "the bad cells were never checked");
        std::thread::sleep(Duration::from_millis(1));
    }
    latecomer.send(&announce(&six)).await.unwrap();
    assert!(
        late_bad.wait_disconnect(wait).await.is_some(),
        "bad cells drop the peer"
    );
    let id = asked_for_body(&mut latecomer, wait).await;
    serve(&mut latecomer, id, &six, Some(data_cells(&six)), wait).await;
    wait_for("the six-blob tx pooled", || {
        moat.call(
            "eth_getTransactionByHash",
            &format!(r#"["{}"]"#, six.hash()),
        )
        .is_object()
        .then_some(())
    });
}

/// eth/73 (EIP-8077): an announcement names each tx's sender and nonce, so the node
/// fetches nothing its state already rules out (a used nonce, an empty account), fetches
/// the rest, and drops a peer whose delivered tx is not the one it announced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eth_73_hopeless_announcements_are_not_fetched_and_lies_drop_the_peer() {
    use moat_common::transaction::PooledTransaction;
    use moat_p2p::eth::{Announcement, EthMessage};
    use std::time::Duration;
    let rich = signer(2);
    let net = OsakaNode::start("eth73", &[rich.address()]);
    let mut peer = net.peer(5, 73).await;
    let mut liar = net.peer(6, 73).await;
    let tx = |signer: &Signer, nonce: u64| {
        let (_, raw) = common::signed_transfer(signer, OSAKA_CHAIN_ID, nonce, 1);
        let bytes = alloy_primitives::hex::decode(raw).unwrap();
        PooledTransaction::decode_2718(&bytes).unwrap()
    };
    let broke = signer(3); // not funded on this chain
    let good = tx(&rich, 0);
    let unfunded = tx(&broke, 0);
    let mut a = Announcement::default();
    for (t, s) in [(&unfunded, &broke), (&good, &rich)] {
        a.push_with_origin(
            2,
            t.size() as u32,
            t.hash(),
            s.address(),
            t.tx().tx().nonce(),
        );
    }
    peer.send(&EthMessage::NewPooledTransactionHashes(a))
        .await
        .unwrap();
    let (id, asked) = peer
        .wait_for(Duration::from_secs(20), |m| match m {
            EthMessage::GetPooledTransactions { request_id, hashes } => {
                Some((*request_id, hashes.clone()))
            }
            _ => None,
        })
        .await
        .expect("the node asks for what can be pooled");
    assert_eq!(
        asked,
        vec![good.hash()],
        "the unfunded sender's tx is not fetched"
    );
    peer.send(&EthMessage::PooledTransactions {
        request_id: id,
        txs: vec![good.encoded_2718().into()],
    })
    .await
    .unwrap();
    wait_for("the good tx pooled", || {
        net.moat
            .call(
                "eth_getTransactionByHash",
                &format!(r#"["{}"]"#, good.hash()),
            )
            .is_object()
            .then_some(())
    });
    assert_eq!(
        common::metric(
            net.metrics,
            "moat_p2p_announcements_hopeless_total{reason=\"insufficient_funds\"}"
        ),
        Some(1.0)
    );
    // The next tx announced at another nonce than it carries: a protocol violation.
    let next = tx(&rich, 1);
    let mut lie = Announcement::default();
    lie.push_with_origin(2, next.size() as u32, next.hash(), rich.address(), 2);
    liar.send(&EthMessage::NewPooledTransactionHashes(lie))
        .await
        .unwrap();
    let id = liar
        .wait_for(Duration::from_secs(20), |m| match m {
            EthMessage::GetPooledTransactions { request_id, .. } => Some(*request_id),
            _ => None,
        })
        .await
        .expect("asked for the tx");
    liar.send(&EthMessage::PooledTransactions {
        request_id: id,
        txs: vec![next.encoded_2718().into()],
    })
    .await
    .unwrap();
    assert!(
        liar.wait_disconnect(Duration::from_secs(20))
            .await
            .is_some(),
        "a tx that is not the one announced drops the peer"
    );
    assert!(
        net.moat
            .call(
                "eth_getTransactionByHash",
                &format!(r#"["{}"]"#, next.hash())
            )
            .is_null()
    );
}

/// The delivery tracker, whole node: a peer's tx that a block includes credits that peer
/// (admin_peers' `delivered.included`), and a peer that delivered nothing mined has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_whose_tx_is_mined_is_credited() {
    use moat_common::transaction::PooledTransaction;
    use moat_p2p::eth::EthMessage;
    let rich = signer(2);
    let net = OsakaNode::start("tracker", &[rich.address()]);
    let mut giver = net.peer(7, 69).await;
    let _idle = net.peer(8, 69).await;
    let (hash, raw) = common::signed_transfer(&rich, OSAKA_CHAIN_ID, 0, 1);
    let tx = PooledTransaction::decode_2718(&alloy_primitives::hex::decode(raw).unwrap()).unwrap();
    giver
        .send(&EthMessage::Transactions(vec![tx.encoded_2718().into()]))
        .await
        .unwrap();
    wait_for("the peer's tx pooled", || {
        net.moat
            .call("eth_getTransactionByHash", &format!(r#"["{hash}"]"#))
            .is_object()
            .then_some(())
    });
    let giver_id = common::enode(7, 0)
        .trim_start_matches("enode://")
        .split('@')
        .next()
        .unwrap()
        .to_string();
    let giver_of = |peers: &serde_json::Value| -> Option<serde_json::Value> {
        peers
            .as_array()?
            .iter()
            .find(|p| p["enode"].as_str().is_some_and(|e| e.contains(&giver_id)))
            .cloned()
    };
    // The admission is charged to the peer after its delivery is recorded: once it
    // shows, a block with the tx finds its deliverer (the pool shows it a moment before).
    wait_for("the giver's admission charged", || {
        let giver = giver_of(&net.moat.call("admin_peers", "[]"))?;
        (giver["admission"]["txsAdmitted"].as_u64()? > 0).then_some(())
    });
    // A block with it, built, imported and made the head over the engine API. Its time
    // is after the delivery (a tx delivered at or after its block's time credits no
    // one), however long a loaded machine took to start the node and deliver it.
    let head = format!("{}", net.genesis.header().hash());
    let now = moat_rpc::engine::unix_now();
    let payload = net
        .moat
        .build_block(&head, (net.genesis.timestamp + 12).max(now + 1));
    assert_eq!(payload["transactions"].as_array().map(Vec::len), Some(1));
    let credited = wait_for("the giver credited", || {
        let peers = net.moat.call("admin_peers", "[]");
        let included = giver_of(&peers)?["delivered"]["included"].as_f64()?;
        (included > 0.0).then(|| peers.as_array().cloned().unwrap_or_default())
    });
    let idle = credited
        .iter()
        .find(|p| !p["enode"].as_str().unwrap().contains(&giver_id))
        .expect("the idle peer");
    assert_eq!(idle["delivered"]["included"].as_f64(), Some(0.0), "{idle}");
}
