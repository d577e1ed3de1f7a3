//! Scenario 4: proposals under a full pool. moat and geth each under a beacon node with
//! half the validators, a timing proxy in front of each engine API, and `--pending`
//! transfers from `--senders` senders kept in both pools (every sender's next ten nonces,
//! topped up each slot and sent to both). The figures: every `engine_getPayload*` call's
//! time per client (p50, p99, max), the slots without a block, and each block's tip value
//! beside the best block the txs sent by then could have made (the same senders' txs all
//! pay the same tip, so the best block takes the highest tips first, up to the gas limit).

use crate::Args;
use crate::cl::Kit;
use crate::net::{CHAIN_ID, Devnet};
use crate::proxy::{Proxy, percentile};
use crate::scenarios::Report;
use crate::txs::{self, Fees};
use alloy_primitives::{Address, U256};
use moat_crypto::secp::Signer;
use moat_harness::el::Kind;
use moat_harness::http::quantity;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Txs a batch request carries.
const BATCH: usize = 250;
const GWEI: u128 = 1_000_000_000;
/// Every tx's fee cap: far above the base fee full blocks drive up (12.5 % a block: past
/// 100 gwei within 40 blocks from 1 gwei), so only the tips decide what a block takes.
const FEE_CAP: u128 = 10_000 * GWEI;
/// Each sender's funding: 100 ether, ten txs at the cap with room to spare.
const FUNDING: u128 = 100 * 1_000_000_000_000_000_000;

fn tip_of(sender: usize) -> u128 {
    (1 + (sender % 10) as u128) * GWEI
}

/// Sends `raws` to `el` in batch requests; (accepted, first error).
fn send_all(
    net: &mut Devnet,
    el: usize,
    raws: &[alloy_primitives::Bytes],
) -> (usize, Option<String>) {
    let mut accepted = 0;
    let mut first = None;
    for chunk in raws.chunks(BATCH) {
        let params: Vec<Value> = chunk.iter().map(|r| json!([r])).collect();
        match net.els[el].rpc.batch("eth_sendRawTransaction", &params) {
            Ok(answers) => {
                for a in answers {
                    match a {
                        Ok(_) => accepted += 1,
                        Err(e) => {
                            first.get_or_insert_with(|| e.to_string());
                        }
                    }
                }
            }
            Err(e) => {
                first.get_or_insert_with(|| e.to_string());
            }
        }
    }
    (accepted, first)
}

/// Each sender's nonce at `tag` on `el`.
fn nonces(net: &mut Devnet, el: usize, senders: &[Address], tag: &str) -> Result<Vec<u64>, String> {
    let mut out = Vec::with_capacity(senders.len());
    for chunk in senders.chunks(BATCH) {
        let params: Vec<Value> = chunk.iter().map(|a| json!([a, tag])).collect();
        let answers = net.els[el]
            .rpc
            .batch("eth_getTransactionCount", &params)
            .map_err(|e| format!("nonces: {e}"))?;
        for a in answers {
            let v = a.map_err(|e| format!("nonce: {e}"))?;
            out.push(quantity(&v).ok_or("nonce not a quantity")?);
        }
    }
    Ok(out)
}

fn unix_f64() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

pub(crate) fn run(args: &Args, kit: Kit) -> Result<Report, String> {
    let mut report = Report {
        title: format!(
            "full-pool: {} pending from {} senders, moat and go-ethereum proposing under {}",
            args.pending,
            args.senders,
            kit.kind.name()
        ),
        ..Default::default()
    };
    let per_sender = (args.pending / args.senders.max(1)).max(1) as u64;
    let geth_bin = args.geth.as_ref().expect("checked in main");
    let mut net = Devnet::new(kit, args.slot_seconds, args.ports, args.log_dir.clone())?;
    // Pools large enough for the load in both clients.
    let slots = (args.pending * 2).to_string();
    let pool_flags = [
        "--txpool.globalslots",
        &slots,
        "--txpool.accountslots",
        "32",
    ];
    let moat = net.add_el("moat", Kind::Moat, &args.moat, &pool_flags)?;
    let geth = net.add_el("geth", Kind::Geth, geth_bin, &pool_flags)?;
    net.peer_els(moat, geth)?;
    let proxies = [
        Proxy::start(
            args.ports + 200,
            ([127, 0, 0, 1], net.els[moat].config.ports.auth).into(),
        )?,
        Proxy::start(
            args.ports + 201,
            ([127, 0, 0, 1], net.els[geth].config.ports.auth).into(),
        )?,
    ];
    net.set_genesis(20);
    let a = net.add_beacon_via("cl-moat", moat, Some((0, 3)), proxies[0].port)?;
    let b = net.add_beacon_via("cl-geth", geth, Some((4, 7)), proxies[1].port)?;
    net.peer_beacons(b, a)?;
    let epoch = Duration::from_secs(net.epoch_seconds());
    let first =
        crate::scenarios::until(epoch * 3, || net.els[moat].block_number().unwrap_or(0) >= 1);
    report.check(
        "the CLs drive both clients: a first block",
        first.is_some(),
        "",
    );
    if first.is_none() {
        return Ok(report);
    }

    // Fund the senders from the faucet (one transfer each, to both clients).
    let signers: Vec<Signer> = txs::senders(args.senders, 4);
    let addresses: Vec<Address> = signers.iter().map(Signer::address).collect();
    let faucet = txs::faucet();
    let start_nonce = net.els[moat].nonce(faucet.address(), "pending")?;
    let funding: Vec<_> = addresses
        .iter()
        .enumerate()
        .map(|(i, to)| {
            txs::transfer(
                CHAIN_ID,
                &faucet,
                start_nonce + i as u64,
                *to,
                U256::from(FUNDING),
                Fees {
                    tip: 2 * GWEI,
                    cap: FEE_CAP,
                },
            )
        })
        .collect();
    let raws: Vec<_> = funding.iter().map(|f| f.1.clone()).collect();
    net.note(format!("funding {} senders", raws.len()));
    let (ok_moat, e1) = send_all(&mut net, moat, &raws);
    let (ok_geth, e2) = send_all(&mut net, geth, &raws);
    net.note(format!(
        "funding accepted: moat {ok_moat} ({e1:?}), geth {ok_geth} ({e2:?})"
    ));
    let last = funding.last().map(|f| f.0).ok_or("no senders")?;
    let funded = crate::scenarios::until(epoch * 4, || {
        net.els[moat].receipt(last).ok().flatten().is_some()
    });
    report.check(
        "the senders are funded",
        funded.is_some(),
        format!("{funded:?}"),
    );
    if funded.is_none() {
        return Ok(report);
    }

    // The load: every slot, each sender's next `per_sender` nonces pending in both pools.
    let load_from = net.els[moat].block_number()?;
    let mut next: Vec<u64> = vec![0; signers.len()];
    // When each (sender, nonce) was sent, to judge what a block could have taken.
    let mut sent_at: HashMap<(usize, u64), f64> = HashMap::new();
    let t0 = Instant::now();
    let load_slots = args.epochs * crate::cl::ClKind::SLOTS_PER_EPOCH;
    let mut sent_total = 0usize;
    let mut refused = 0usize;
    let mut refusal = None;
    for _ in 0..load_slots {
        net.sleep_into_slot(0.5);
        if let Some(dead) = net.casualty() {
            return Err(dead);
        }
        let mined = nonces(&mut net, moat, &addresses, "latest")?;
        let mut raws = Vec::new();
        let now = unix_f64();
        for (i, s) in signers.iter().enumerate() {
            let from = next[i].max(mined[i]);
            for n in from..mined[i] + per_sender {
                let (_, raw) = txs::transfer(
                    CHAIN_ID,
                    s,
                    n,
                    addresses[(i + 1) % addresses.len()],
                    U256::from(1),
                    Fees {
                        tip: tip_of(i),
                        cap: FEE_CAP,
                    },
                );
                raws.push(raw);
                sent_at.insert((i, n), now);
            }
            next[i] = next[i].max(mined[i] + per_sender);
        }
        let (m, e) = send_all(&mut net, moat, &raws);
        let (g, f) = send_all(&mut net, geth, &raws);
        sent_total += raws.len();
        refused += 2 * raws.len() - m - g;
        if refusal.is_none() {
            refusal = e.or(f);
        }
        let pending = net.els[moat].call("txpool_status", json!([])).ok();
        net.note(format!(
            "slot {}: sent {} (moat took {m}, geth {g}); moat's pool {}",
            net.wall_slot(),
            raws.len(),
            pending.map_or("?".into(), |p| format!(
                "pending {} queued {}",
                p["pending"], p["queued"]
            ))
        ));
    }
    let load_to = net.els[moat].block_number()?;
    report.figures.push(format!(
        "load: {sent_total} txs sent to each client over {load_slots} slots ({:.0} s); refused {refused} in all{}",
        t0.elapsed().as_secs_f64(),
        refusal.map_or(String::new(), |r| format!(" (first: {r})"))
    ));

    // getPayload times per client.
    for (name, proxy) in [("moat", &proxies[0]), ("geth", &proxies[1])] {
        let calls = proxy.calls();
        let mut gp: Vec<Duration> = calls
            .iter()
            .filter(|c| c.method.starts_with("engine_getPayload"))
            .map(|c| c.took)
            .collect();
        let failed = calls
            .iter()
            .filter(|c| c.method.starts_with("engine_getPayload") && !c.ok)
            .count();
        let mut np: Vec<Duration> = calls
            .iter()
            .filter(|c| c.method.starts_with("engine_newPayload"))
            .map(|c| c.took)
            .collect();
        let ms = |d: Option<Duration>| {
            d.map_or("-".into(), |d| format!("{:.1} ms", d.as_secs_f64() * 1e3))
        };
        report.figures.push(format!(
            "{name}: engine_getPayload × {} ({failed} failed): p50 {} p99 {} max {}; engine_newPayload × {}: p50 {} p99 {}",
            gp.len(),
            ms(percentile(&mut gp, 50.0)),
            ms(percentile(&mut gp, 99.0)),
            ms(percentile(&mut gp, 100.0)),
            np.len(),
            ms(percentile(&mut np, 50.0)),
            ms(percentile(&mut np, 99.0)),
        ));
        report.check(
            &format!("{name}: every getPayload answered, within the slot"),
            !gp.is_empty()
                && failed == 0
                && percentile(&mut gp, 100.0)
                    .is_some_and(|d| d < Duration::from_secs(net.slot_seconds)),
            format!("{} calls, {failed} failed", gp.len()),
        );
    }

    // Each block of the load: its value beside the best the sent txs allowed.
    let index: HashMap<Address, usize> =
        addresses.iter().enumerate().map(|(i, a)| (*a, i)).collect();
    let mut per_client: HashMap<&str, (u64, f64, f64, usize)> = HashMap::new(); // blocks, sum ratio, min ratio, txs
    let mut empty_slots = 0u64;
    let mut prev_ts: Option<u64> = None;
    // Each sender's next unmined nonce, block by block from the start of the load.
    let mut at_parent = nonces(&mut net, moat, &addresses, &format!("{load_from:#x}"))?;
    for n in load_from + 1..=load_to {
        let block = net.els[moat].call("eth_getBlockByNumber", json!([format!("{n:#x}"), true]))?;
        let ts = quantity(&block["timestamp"]).unwrap_or(0);
        if let Some(p) = prev_ts {
            empty_slots += (ts.saturating_sub(p) / net.slot_seconds).saturating_sub(1);
        }
        prev_ts = Some(ts);
        let extra = block["extraData"].as_str().unwrap_or("");
        let client = if extra == "0x6d6f6174" {
            "moat"
        } else {
            "geth"
        };
        let gas_limit = quantity(&block["gasLimit"]).unwrap_or(0);
        let txs = block["transactions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let value: u128 = txs
            .iter()
            .filter_map(|t| t["maxPriorityFeePerGas"].as_str())
            .filter_map(|s| u128::from_str_radix(s.trim_start_matches("0x"), 16).ok())
            .map(|tip| tip * 21_000)
            .sum();
        // What was pending at the parent: each sender's txs from its nonce there on, sent
        // before the block's slot began.
        let mut available: Vec<u128> = Vec::new();
        for (i, from) in at_parent.iter().enumerate() {
            let mut k = *from;
            while sent_at.get(&(i, k)).is_some_and(|t| *t < ts as f64) {
                available.push(tip_of(i));
                k += 1;
            }
        }
        available.sort_unstable_by(|x, y| y.cmp(x));
        let room = (gas_limit / 21_000) as usize;
        let ideal: u128 = available.iter().take(room).map(|t| t * 21_000).sum();
        let ratio = if ideal == 0 {
            1.0
        } else {
            value as f64 / ideal as f64
        };
        let mut ours = 0;
        for t in &txs {
            let from = t["from"].as_str().and_then(|f| f.parse::<Address>().ok());
            if let (Some(&i), Some(nonce)) =
                (from.and_then(|f| index.get(&f)), quantity(&t["nonce"]))
            {
                ours += 1;
                at_parent[i] = at_parent[i].max(nonce + 1);
            }
        }
        let e = per_client
            .entry(client)
            .or_insert((0, 0.0, f64::INFINITY, 0));
        e.0 += 1;
        e.1 += ratio;
        e.2 = e.2.min(ratio);
        e.3 += ours;
        net.note(format!(
            "block #{n} by {client}: {} txs, value/best {ratio:.3}",
            txs.len()
        ));
    }
    for (client, (blocks, sum, min, txs)) in &per_client {
        report.figures.push(format!(
            "{client}: {blocks} blocks of the load, {txs} txs; value / best block: mean {:.3}, lowest {:.3}",
            sum / *blocks as f64,
            min
        ));
    }
    report.check(
        "no slot of the load went without a block",
        empty_slots == 0,
        format!(
            "{empty_slots} empty slots in blocks #{}..#{load_to}",
            load_from + 1
        ),
    );
    if let Some((blocks, sum, _, _)) = per_client.get("moat") {
        report.check(
            "moat's blocks are worth the best block of the pool (mean ≥ 0.99)",
            *blocks > 0 && sum / *blocks as f64 >= 0.99,
            format!("{blocks} blocks, mean {:.3}", sum / *blocks as f64),
        );
    } else {
        report.check("moat proposed blocks under the load", false, "none");
    }
    Ok(report)
}
