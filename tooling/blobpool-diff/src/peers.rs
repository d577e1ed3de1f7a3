//! `--peers`: the two clients peered over devp2p instead of the answer stream: which eth
//! version they agree on, and a blob tx sent to each reaching the other (on eth/72, as
//! its body without blobs and its cells), with the bytes a node pulled per blob tx
//! beside what eth/70's full pull would cost.

use super::{BLOBS, Blob, CHAIN_ID, PAYING, Sender, sign};
use moat_common::transaction::{PooledTransaction, SidecarVersion};
use moat_crypto::kzg::BYTES_PER_CELL;
use moat_harness::el::Node;
use moat_harness::http::RpcClient;
use serde_json::json;
use std::time::{Duration, Instant};

/// Polls `f` every 100 ms for up to `secs` seconds.
fn wait<T>(secs: u64, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether the node holds `tx`: by hash, or in its pool's content (go-ethereum answers
/// `eth_getTransactionByHash` with "transaction indexing is in progress" for a while
/// after it starts).
fn has_tx(rpc: &mut RpcClient, tx: &PooledTransaction) -> bool {
    match rpc.call("eth_getTransactionByHash", json!([tx.hash()])) {
        Ok(v) => !v.is_null(),
        Err(_) => rpc
            .call("txpool_content", json!([]))
            .is_ok_and(|v| v.to_string().contains(&format!("{}", tx.hash()))),
    }
}

/// moat's counter `name` from its Prometheus endpoint on `port`.
fn moat_metric(port: u16, name: &str) -> f64 {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return f64::NAN;
    };
    let _ = write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    );
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The eth version `rpc`'s node agreed with its one peer.
fn eth_version(rpc: &mut RpcClient) -> Option<u64> {
    let peers = rpc.call("admin_peers", json!([])).ok()?;
    let first = peers.as_array()?.first()?.clone();
    first["protocols"]["eth"]["version"].as_u64()
}

/// Marks every node synced (forkchoiceUpdated to its genesis head: none takes peers'
/// txs before). `engines` are their engine APIs, in the order of `nodes`.
pub(super) fn synced(
    nodes: &mut [(Node, RpcClient)],
    engines: &mut [RpcClient],
) -> Result<(), String> {
    for (i, engine) in engines.iter_mut().enumerate() {
        let head = nodes[i]
            .1
            .call("eth_getBlockByNumber", json!(["latest", false]))
            .map_err(|e| format!("head: {e}"))?;
        let hash = head["hash"].clone();
        let zero = format!("0x{}", "00".repeat(32));
        let answer = engine
            .call(
                "engine_forkchoiceUpdatedV3",
                json!([{"headBlockHash": hash, "safeBlockHash": zero, "finalizedBlockHash": zero}, null]),
            )
            .map_err(|e| format!("forkchoiceUpdated: {e}"))?;
        if answer["payloadStatus"]["status"] != "VALID" {
            return Err(format!("forkchoiceUpdated: {answer}"));
        }
    }
    Ok(())
}

/// The enode of `rpc`'s node.
fn enode_of(rpc: &mut RpcClient, name: &str) -> Result<String, String> {
    let info = rpc
        .call("admin_nodeInfo", json!([]))
        .map_err(|e| format!("{name} admin_nodeInfo: {e}"))?;
    info["enode"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("{name} gave no enode"))
}

/// Peers the two nodes (moat dials geth), then sends a two-blob tx to each and waits
/// for the other to pool it.
pub(super) fn check(
    nodes: &mut [(Node, RpcClient)],
    senders: &[Sender],
    blobs: &[Blob],
    moat_metrics: u16,
) -> Result<(), String> {
    let enode = enode_of(&mut nodes[1].1, "geth")?;
    nodes[0]
        .1
        .call("admin_addPeer", json!([enode]))
        .map_err(|e| format!("moat admin_addPeer: {e}"))?;
    let versions = wait(30, || {
        let m = eth_version(&mut nodes[0].1)?;
        let g = eth_version(&mut nodes[1].1)?;
        Some((m, g))
    })
    .ok_or_else(|| {
        format!(
            "the nodes did not peer within 30 s (geth's enode {enode})\nmoat:\n{}\ngeth:\n{}",
            nodes[0].0.log_tail(15),
            nodes[1].0.log_tail(15)
        )
    })?;
    println!(
        "peered: moat sees eth/{}, geth sees eth/{}",
        versions.0, versions.1
    );
    let pick: Vec<&Blob> = (0..2).map(|i| &blobs[i % BLOBS]).collect();
    let fresh: Vec<&Sender> = senders.iter().filter(|s| s.next == 0).take(2).collect();
    if fresh.len() < 2 {
        return Err("two senders at nonce 0 needed".into());
    }
    let to_moat = sign(
        &fresh[0].signer,
        CHAIN_ID,
        0,
        PAYING,
        &pick,
        SidecarVersion::V1,
        None,
    );
    let to_geth = sign(
        &fresh[1].signer,
        CHAIN_ID,
        0,
        PAYING,
        &pick,
        SidecarVersion::V1,
        None,
    );
    // (sender node, receiver node, label, moat's counter of the cells it moved)
    let crossings = [
        (
            1,
            0,
            "geth → moat",
            &to_moat,
            "moat_p2p_cells_received_total",
            "received",
        ),
        (
            0,
            1,
            "moat → geth",
            &to_geth,
            "moat_p2p_cells_served_total",
            "served",
        ),
    ];
    for (from, to, what, tx, counter, verb) in crossings {
        let before = moat_metric(moat_metrics, counter);
        let raw = alloy_primitives::hex::encode_prefixed(tx.encoded_2718());
        let started = Instant::now();
        nodes[from]
            .1
            .call("eth_sendRawTransaction", json!([raw]))
            .map_err(|e| format!("{what}: the sender refused the tx: {e}"))?;
        let took = wait(30, || {
            has_tx(&mut nodes[to].1, tx).then(|| started.elapsed())
        });
        let blobs = tx.sidecar().map_or(0, |s| s.blobs.len());
        let v72 = tx.size_without_blobs() + blobs * 64 * (BYTES_PER_CELL + 3);
        match took {
            Some(t) => println!(
                "{what}: pooled after {:.2} s; pulled over eth/72 ≈ {v72} bytes (body {} + {} cells), over eth/70 {} bytes",
                t.as_secs_f64(),
                tx.size_without_blobs(),
                blobs * 64,
                tx.size()
            ),
            None => println!("{what}: NOT pooled within 30 s"),
        }
        println!(
            "  moat {verb} {} cells over GetCells",
            moat_metric(moat_metrics, counter) - before
        );
    }
    Ok(())
}

/// `--sampler`: moat (nodes[0], a custody of 8 cells, no blob tx fetched whole) peers
/// both geth nodes, the second geth peers the first; a two-blob tx sent to the first
/// geth (and to the second too, with `both`) reaches the second whole, and moat, once
/// both announced it with every cell, pools it from its body and the custody's cells
/// (16), fetched with `GetCells`; if the second announces past moat's 2 s wait, moat
/// fetches it whole.
pub(super) fn sample(
    nodes: &mut [(Node, RpcClient)],
    senders: &[Sender],
    blobs: &[Blob],
    moat_metrics: u16,
    both: bool,
) -> Result<(), String> {
    let (first, second) = (
        enode_of(&mut nodes[1].1, "geth")?,
        enode_of(&mut nodes[2].1, "second geth")?,
    );
    for (at, enode) in [(2, &first), (0, &first), (0, &second)] {
        nodes[at]
            .1
            .call("admin_addPeer", json!([enode]))
            .map_err(|e| format!("admin_addPeer: {e}"))?;
    }
    let peered = wait(30, || {
        let peers = nodes[0].1.call("admin_peers", json!([])).ok()?;
        let list = peers.as_array()?;
        let versions: Vec<u64> = list
            .iter()
            .filter_map(|p| p["protocols"]["eth"]["version"].as_u64())
            .collect();
        (versions.len() == 2).then_some(versions)
    })
    .ok_or_else(|| {
        format!(
            "moat did not peer both geth nodes within 30 s\nmoat:\n{}",
            nodes[0].0.log_tail(15)
        )
    })?;
    println!("moat (sampler) peered both geth nodes: eth/{peered:?}");
    let pick: Vec<&Blob> = (0..2).map(|i| &blobs[i % BLOBS]).collect();
    let sender = senders
        .iter()
        .find(|s| s.next == 0)
        .ok_or("a sender at nonce 0 needed")?;
    let tx = sign(
        &sender.signer,
        CHAIN_ID,
        0,
        PAYING,
        &pick,
        SidecarVersion::V1,
        None,
    );
    let raw = alloy_primitives::hex::encode_prefixed(tx.encoded_2718());
    let started = Instant::now();
    nodes[1]
        .1
        .call("eth_sendRawTransaction", json!([raw]))
        .map_err(|e| format!("geth refused the tx: {e}"))?;
    if both {
        // geth → geth takes 1.5 s or so, near the sampler's 2 s wait for a second
        // provider: the tx goes to both at once.
        let _ = nodes[2].1.call("eth_sendRawTransaction", json!([raw]));
    }
    let at_second = wait(30, || {
        has_tx(&mut nodes[2].1, &tx).then(|| started.elapsed())
    });
    let at_moat = wait(30, || {
        has_tx(&mut nodes[0].1, &tx).then(|| started.elapsed())
    });
    let n_blobs = tx.sidecar().map_or(0, |s| s.blobs.len());
    let cells = moat_metric(moat_metrics, "moat_p2p_cells_received_total");
    let sampled = moat_metric(moat_metrics, "moat_p2p_blob_txs_sampled_total");
    let whole = moat_metric(moat_metrics, "moat_p2p_blob_samples_unavailable_total");
    match at_second {
        Some(t) => println!("second geth pooled it after {:.2} s", t.as_secs_f64()),
        None => println!("second geth: NOT pooled within 30 s"),
    }
    match at_moat {
        Some(t) => {
            let pulled = tx.size_without_blobs() + cells as usize * (BYTES_PER_CELL + 3);
            println!(
                "moat pooled it after {:.2} s: sampled {sampled} tx(s), {cells} cells over GetCells \
                 ({} a blob), fetched whole after the availability wait {whole}; pulled ≈ {pulled} \
                 bytes (body {} + cells), against {} over eth/72 as a provider and {} over eth/70",
                t.as_secs_f64(),
                cells / n_blobs as f64,
                tx.size_without_blobs(),
                tx.size_without_blobs() + n_blobs * 64 * (BYTES_PER_CELL + 3),
                tx.size()
            );
        }
        None => println!("moat: NOT pooled within 30 s\n{}", nodes[0].0.log_tail(20)),
    }
    Ok(())
}
