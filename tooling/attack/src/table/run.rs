//! A whole run: the node and keys prepared, the attack material signed, the honest
//! clients started on their own runtime, the reference phase, then per scenario the
//! attack beside the honest traffic, the recovery after it, and the table's row.

use crate::args::{Args, Scenario};
use crate::attack::{AttackCtx, BlobStats, attack};
use crate::honest::{Honest, percentile, slowest, window};
use crate::material::{
    FEE_CAP, TIP, blob_sets, fund_storm, material, signer, storm_material, transfer,
};
use crate::node::{
    Rpc, cpu_seconds, describe_head_changes, engine_call, head_changes, result_u64, scrape,
};
use crate::peer::{connect_from, node_status};
use alloy_primitives::{B256, Bytes, TxKind, U256, hex};
use moat_common::transaction::{
    Eip1559Tx, PooledTransaction, SidecarVersion, SignedTransaction, Transaction,
};
use moat_crypto::secp::Signer;
use moat_p2p::eth::{EthMessage, Status};
use moat_p2p::session::Incoming;
use parking_lot::Mutex;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub(crate) async fn run(args: Args, hrt: tokio::runtime::Handle) -> Result<bool, String> {
    if let (Some(fcu), Some(engine), Some(secret)) = (&args.fcu, args.engine, &args.jwt_secret) {
        let body = std::fs::read_to_string(fcu).map_err(|e| format!("{}: {e}", fcu.display()))?;
        let secret =
            std::fs::read_to_string(secret).map_err(|e| format!("{}: {e}", secret.display()))?;
        engine_call(engine, &secret, &body).await?;
        eprintln!("forkchoice updated from {}", fcu.display());
    }
    let mut rpc = Rpc::connect(args.rpc)
        .await
        .map_err(|e| format!("rpc {}: {e}", args.rpc))?;
    let chain_id = rpc
        .call("eth_chainId", "[]")
        .await
        .ok()
        .and_then(|v| result_u64(&v))
        .ok_or("eth_chainId failed")?;
    let peer_signer = signer(&args.peer_key)?;
    let rpc_signer = signer(&args.rpc_key)?;
    let mut nonces = [0u64; 2];
    for (i, a) in [peer_signer.address(), rpc_signer.address()]
        .iter()
        .enumerate()
    {
        let v = rpc
            .call("eth_getTransactionCount", &format!(r#"["{a}","pending"]"#))
            .await
            .map_err(|e| e.to_string())?;
        nonces[i] = result_u64(&v).ok_or("eth_getTransactionCount failed")?;
    }
    let scenarios: Vec<Scenario> = args
        .scenarios
        .iter()
        .copied()
        .filter(|s| args.target.is_some() || !s.gossip())
        .collect();
    eprintln!("signing attack transactions…");
    let mut mat = material(chain_id, args.attackers, 20_000);
    let blob_versions: Vec<SidecarVersion> =
        scenarios.iter().filter_map(|s| s.blob_version()).collect();
    if !blob_versions.is_empty() && !args.blob_keys.is_empty() {
        let mut keys = Vec::new();
        for k in &args.blob_keys {
            let signer = signer(k)?;
            let v = rpc
                .call(
                    "eth_getTransactionCount",
                    &format!(r#"["{}","pending"]"#, signer.address()),
                )
                .await
                .map_err(|e| e.to_string())?;
            let nonce = result_u64(&v).ok_or("eth_getTransactionCount failed")?;
            keys.push((signer, nonce));
        }
        for v in blob_versions {
            eprintln!("building blob txs ({v:?} sidecars)…");
            mat.blobs
                .insert(v, blob_sets(v, chain_id, args.attackers, &keys)?);
        }
    }
    let mut storm_funder = None;
    if let Some(k) = &args.storm_key
        && scenarios.contains(&Scenario::Invalidation)
    {
        let funder = signer(k)?;
        let v = rpc
            .call(
                "eth_getTransactionCount",
                &format!(r#"["{}","pending"]"#, funder.address()),
            )
            .await
            .map_err(|e| e.to_string())?;
        let nonce = result_u64(&v).ok_or("eth_getTransactionCount failed")?;
        eprintln!(
            "signing the invalidation storm ({} senders)…",
            args.storm_senders
        );
        let (funding, storm) =
            storm_material(chain_id, &funder, nonce, args.storm_senders, args.attackers);
        mat.storm_funding = funding;
        mat.storm = storm;
        storm_funder = Some(funder.address());
    }
    let scenarios: Vec<Scenario> = scenarios
        .into_iter()
        .filter(|s| s.blob_version().is_none_or(|v| mat.blobs.contains_key(&v)))
        .filter(|s| *s != Scenario::Invalidation || storm_funder.is_some())
        .collect();
    let mat = Arc::new(mat);

    // The honest peer's senders: its own key, or fresh keys it funds first.
    let mut peer_senders = vec![(peer_signer.clone(), nonces[0])];
    if args.peer_senders > 1 && args.target.is_some() {
        let keys: Vec<Signer> = (0..args.peer_senders as u64)
            .map(|i| Signer::from_seed(0x4011_e570_0000 + i))
            .collect();
        // Each for 2,000 transfers at the most they may pay.
        let value = U256::from(2_000 * (21_000 * FEE_CAP + 1));
        let funding: Vec<Bytes> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let tx = Transaction::Eip1559(Eip1559Tx {
                    chain_id,
                    nonce: nonces[0] + i as u64,
                    max_priority_fee_per_gas: TIP,
                    max_fee_per_gas: FEE_CAP,
                    gas_limit: 21_000,
                    to: TxKind::Call(k.address()),
                    value,
                    input: Bytes::new(),
                    access_list: vec![],
                });
                SignedTransaction::sign(tx, &peer_signer)
                    .encoded_2718()
                    .into()
            })
            .collect();
        eprintln!("funding {} honest peer senders…", keys.len());
        fund_storm(args.rpc, peer_signer.address(), &funding).await?;
        peer_senders = keys.into_iter().map(|k| (k, 0)).collect();
    }

    let stop = Arc::new(AtomicBool::new(false));
    let honest = Arc::new(Honest::default());
    let mut tasks = Vec::new();
    // The honest clients (RPC client, peer, observer) run on their own runtime (`hrt`),
    // their sockets registered with its driver: on the attackers' runtime an honest send
    // or receipt waited behind attacker tasks for milliseconds, and that wait was counted
    // as the node's latency.

    // Honest RPC client.
    {
        let (stop, honest, addr) = (stop.clone(), honest.clone(), args.rpc);
        let (rate, mut nonce) = (args.rpc_rate.max(1), nonces[1]);
        tasks.push(hrt.spawn(async move {
            let Ok(mut rpc) = Rpc::connect(addr).await else {
                return;
            };
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let raw = transfer(chain_id, &rpc_signer, nonce, FEE_CAP, TIP);
                let params = format!(r#"["0x{}"]"#, hex::encode(&raw));
                let t0 = Instant::now();
                match rpc.call("eth_sendRawTransaction", &params).await {
                    Ok(v) if v.get("result").is_some() => {
                        honest.rpc_done.lock().push((Instant::now(), t0.elapsed()));
                        nonce += 1;
                    }
                    Ok(_) => {}
                    Err(_) => match Rpc::connect(addr).await {
                        Ok(r) => rpc = r,
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    },
                }
            }
        }));
    }
    // Honest peer and observer.
    let status = match (&args.target, &args.network) {
        (Some(_), Some(path)) => {
            let g = moat_common::config::Genesis::from_file(path).map_err(|e| e.to_string())?;
            let hash = g.header().hash();
            Some(Status {
                version: 69,
                network_id: g.config.chain_id,
                genesis: hash,
                fork_id: g.config.fork_id(hash, g.timestamp, 0, g.timestamp),
                total_difficulty: g.difficulty,
                head: hash,
                earliest: 0,
                latest: 0,
            })
        }
        (Some(t), None) => Some(node_status(t).await?),
        (None, _) => None,
    };
    if let (Some(target), Some(status)) = (&args.target, &status) {
        let connect = |seed: u64| {
            let (target, status) = (target.clone(), status.clone());
            hrt.spawn(async move { connect_from(&target, seed, &status, None).await })
        };
        let mut observer = connect(0x0b5e)
            .await
            .ok()
            .flatten()
            .ok_or("observer could not connect")?;
        let mut peer = connect(0x0401_1e57)
            .await
            .ok()
            .flatten()
            .ok_or("honest peer could not connect")?;
        let (stop2, honest2) = (stop.clone(), honest.clone());
        tasks.push(hrt.spawn(async move {
            while !stop2.load(Ordering::Relaxed) {
                let hashes: Vec<B256> = match observer.recv(Duration::from_millis(200)).await {
                    Ok(Some(Incoming::Eth(EthMessage::NewPooledTransactionHashes(a)))) => a.hashes,
                    Ok(Some(Incoming::Eth(EthMessage::Transactions(txs)))) => txs
                        .iter()
                        .filter_map(|t| PooledTransaction::hash_of_envelope(t))
                        .collect(),
                    Ok(_) => continue,
                    Err(_) => break,
                };
                let now = Instant::now();
                let mut sent = honest2.sent.lock();
                let mut done = honest2.peer_done.lock();
                for h in hashes {
                    if let Some(t) = sent.remove(&h) {
                        done.push((now, now - t));
                    }
                }
            }
        }));
        let (stop3, honest3) = (stop.clone(), honest.clone());
        let per_tick = (args.peer_rate / 50).max(1);
        let mut senders = peer_senders;
        let mut turn = 0;
        tasks.push(hrt.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(20));
            while !stop3.load(Ordering::Relaxed) {
                tick.tick().await;
                let txs: Vec<Bytes> = (0..per_tick)
                    .map(|_| {
                        let n = senders.len();
                        let (key, nonce) = &mut senders[turn % n];
                        turn += 1;
                        *nonce += 1;
                        transfer(chain_id, key, *nonce - 1, FEE_CAP, TIP)
                    })
                    .collect();
                let now = Instant::now();
                {
                    let mut sent = honest3.sent.lock();
                    for t in &txs {
                        if let Some(h) = PooledTransaction::hash_of_envelope(t) {
                            sent.insert(h, now);
                        }
                    }
                }
                if peer.send(&EthMessage::Transactions(txs)).await.is_err() {
                    eprintln!("honest peer dropped");
                    break;
                }
            }
        }));
    }

    let phase = Duration::from_secs(args.seconds);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let pid = args.pid;
    // Reference: honest traffic alone (after a second of warm-up).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let hc0 = head_changes(args.metrics).await;
    let (r0, c0) = (Instant::now(), cpu_seconds(pid));
    tokio::time::sleep(phase).await;
    let (r1, c1) = (Instant::now(), cpu_seconds(pid));
    let hc1 = head_changes(args.metrics).await;
    let secs = |a: Instant, b: Instant| (b - a).as_secs_f64();
    let base_peer = window(&honest.peer_done, r0, r1).len() as f64 / secs(r0, r1);
    let base_rpc = window(&honest.rpc_done, r0, r1).len() as f64 / secs(r0, r1);
    let base_cpu = (c1 - c0) / secs(r0, r1);
    slowest(&honest, r0, r1);
    // The reference latencies: what the machine gives honest traffic with no attack.
    let (mut bpl, mut brl) = (
        window(&honest.peer_done, r0, r1),
        window(&honest.rpc_done, r0, r1),
    );
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "\n{}: honest alone: peer {base_peer:.0} tx/s (p50 / p99 {:.2} / {:.2} ms), RPC {base_rpc:.0} tx/s ({:.2} / {:.2} ms), node CPU {:.0} %{}\n",
        args.label,
        ms(percentile(&mut bpl, 0.5)),
        ms(percentile(&mut bpl, 0.99)),
        ms(percentile(&mut brl, 0.5)),
        ms(percentile(&mut brl, 0.99)),
        base_cpu * 100.0,
        describe_head_changes(hc0, hc1),
    );
    println!(
        "| scenario | honest peer tx/s (vs alone) | honest RPC tx/s (vs alone) | peer p50 / p99 | RPC p50 / p99 | attackers' CPU (of machine) | recovery | ok |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|");
    let mut all_ok = true;
    for s in scenarios {
        let attack_stop = Arc::new(AtomicBool::new(false));
        let reconnects = Arc::new(AtomicU64::new(0));
        let blob_stats = Arc::new(BlobStats::default());
        if s == Scenario::Invalidation
            && let Some(funder) = storm_funder
        {
            eprintln!("funding {} storm senders…", mat.storm_funding.len());
            fund_storm(args.rpc, funder, &mat.storm_funding).await?;
            // Let the blocks that carried the funding pass.
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        let storm_hc0 = head_changes(args.metrics).await;
        let kzg_name = "moat_pool_kzg_verifications_total";
        let repeat_name = "moat_pool_kzg_repeats_refused_total";
        let kzg_before = match args.metrics {
            Some(m) if s.blob_version().is_some() => {
                (scrape(m, kzg_name).await, scrape(m, repeat_name).await)
            }
            _ => (None, None),
        };
        let mut attackers = Vec::new();
        for a in 0..args.attackers {
            let ctx = AttackCtx {
                s,
                index: a,
                target: args.target.clone(),
                status: status.clone(),
                rpc_addr: args.rpc,
                local: (!args.same_ip).then(|| Ipv4Addr::new(127, 0, 0, 10 + a as u8)),
                mat: mat.clone(),
                stop: attack_stop.clone(),
                reconnects: reconnects.clone(),
                blob_stats: blob_stats.clone(),
            };
            attackers.push(tokio::spawn(attack(ctx)));
        }
        let (a0, ca0) = (Instant::now(), cpu_seconds(pid));
        tokio::time::sleep(phase).await;
        let (a1, ca1) = (Instant::now(), cpu_seconds(pid));
        attack_stop.store(true, Ordering::Relaxed);
        // An attacker blocked on a node that stopped reading it is cut off.
        tokio::time::sleep(Duration::from_millis(200)).await;
        for t in &attackers {
            t.abort();
        }
        for t in attackers {
            let _ = t.await;
        }
        let stopped = Instant::now();
        // Recovery: the first half second whose honest throughput is ≥ 90 % of alone.
        let mut recovered = None;
        let mut from = stopped;
        while from - stopped < Duration::from_secs(15) {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let to = Instant::now();
            let rate = |d: &Mutex<Vec<(Instant, Duration)>>| {
                window(d, from, to).len() as f64 / secs(from, to)
            };
            let peer_ok = base_peer == 0.0 || rate(&honest.peer_done) >= 0.9 * base_peer;
            let rpc_ok = base_rpc == 0.0 || rate(&honest.rpc_done) >= 0.9 * base_rpc;
            if peer_ok && rpc_ok {
                recovered = Some(to - stopped);
                break;
            }
            from = to;
        }
        slowest(&honest, a0, a1);
        let mut pl = window(&honest.peer_done, a0, a1);
        let mut rl = window(&honest.rpc_done, a0, a1);
        let peer_rate = pl.len() as f64 / secs(a0, a1);
        let rpc_rate = rl.len() as f64 / secs(a0, a1);
        let cpu = (ca1 - ca0) / secs(a0, a1);
        // The attack's extra node CPU, as a share of the machine (what budgets divide).
        let share = ((cpu - base_cpu) / cores).max(0.0);
        let (pp50, pp99) = (percentile(&mut pl, 0.5), percentile(&mut pl, 0.99));
        let (rp50, rp99) = (percentile(&mut rl, 0.5), percentile(&mut rl, 0.99));
        let frac = |r: f64, b: f64| if b > 0.0 { r / b } else { 1.0 };
        let thr_ok = (base_peer == 0.0 || frac(peer_rate, base_peer) >= 0.5)
            && frac(rpc_rate, base_rpc) >= 0.5;
        let p99_ok = (base_peer == 0.0 || pp99 <= Duration::from_millis(2))
            && rp99 <= Duration::from_millis(2);
        let rec_ok = recovered.is_some_and(|r| r <= Duration::from_secs(5));
        let share_ok = share <= args.budget_share + 0.05;
        let ok = thr_ok && p99_ok && rec_ok && share_ok;
        all_ok &= ok;
        let peer_cols = if base_peer > 0.0 {
            (
                format!(
                    "{peer_rate:.0} ({:.0} %)",
                    100.0 * frac(peer_rate, base_peer)
                ),
                format!("{:.2} / {:.2} ms", ms(pp50), ms(pp99)),
            )
        } else {
            ("–".to_string(), "–".to_string())
        };
        let mut why = Vec::new();
        if !thr_ok {
            why.push("throughput");
        }
        if !p99_ok {
            why.push("p99");
        }
        if !rec_ok {
            why.push("recovery");
        }
        if !share_ok {
            why.push("CPU share");
        }
        println!(
            "| {} | {} | {rpc_rate:.0} ({:.0} %) | {} | {:.2} / {:.2} ms | {:.0} % | {} | {} |",
            s.name(),
            peer_cols.0,
            100.0 * frac(rpc_rate, base_rpc),
            peer_cols.1,
            ms(rp50),
            ms(rp99),
            share * 100.0,
            recovered.map_or("> 15 s".to_string(), |r| format!(
                "{:.1} s",
                r.as_secs_f64()
            )),
            if ok {
                "ok".to_string()
            } else {
                format!("NO ({})", why.join(", "))
            },
        );
        eprintln!(
            "  ({}: attackers reconnected {} times)",
            s.name(),
            reconnects.load(Ordering::Relaxed)
        );
        if s == Scenario::Invalidation {
            eprintln!(
                "  ({}: {} txs gossiped from {} senders{})",
                s.name(),
                mat.storm.iter().map(Vec::len).sum::<usize>(),
                args.storm_senders,
                describe_head_changes(storm_hc0, head_changes(args.metrics).await),
            );
        }
        if s.blob_version().is_some() {
            let after = match args.metrics {
                Some(m) => (scrape(m, kzg_name).await, scrape(m, repeat_name).await),
                None => (None, None),
            };
            let diff = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) => format!("{:.0}", b - a),
                _ => "?".to_string(),
            };
            eprintln!(
                "  ({}: {} deliveries of {} unique blob txs; node KZG checks {}, repeats refused without KZG {})",
                s.name(),
                blob_stats.deliveries.load(Ordering::Relaxed),
                blob_stats.unique.lock().len(),
                diff(kzg_before.0, after.0),
                diff(kzg_before.1, after.1),
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
    }
    Ok(all_ok)
}
