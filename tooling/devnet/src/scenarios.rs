//! The four scenarios (see the crate overview), each a sequence of bounded waits over one
//! [`Devnet`], and the report of checks they fill.

use crate::Args;
use crate::cl::{ClKind, Kit};
use crate::el::El;
use crate::net::{CHAIN_ID, Devnet, PairWatch};
use crate::proxy::Proxy;
use crate::txs::{self, Fees};
use alloy_primitives::{Address, B256, Bytes, U256};
use moat_common::transaction::SidecarVersion;
use moat_harness::el::Kind;
use std::time::{Duration, Instant};

/// The checks of a run: (what, passed, the figures behind it).
#[derive(Default)]
pub(crate) struct Report {
    pub title: String,
    pub checks: Vec<(String, bool, String)>,
    pub figures: Vec<String>,
}

impl Report {
    pub(crate) fn check(&mut self, what: &str, ok: bool, detail: impl Into<String>) {
        let detail = detail.into();
        println!(
            "  check: {what}: {} — {detail}",
            if ok { "ok" } else { "FAILED" }
        );
        self.checks.push((what.to_string(), ok, detail));
    }

    /// Prints the summary; true when every check passed.
    pub(crate) fn print(&self) -> bool {
        println!("================ {} ================", self.title);
        for f in &self.figures {
            println!("{f}");
        }
        for (what, ok, detail) in &self.checks {
            println!("[{}] {what}: {detail}", if *ok { " ok " } else { "FAIL" });
        }
        let good = !self.checks.is_empty() && self.checks.iter().all(|c| c.1);
        println!("RESULT: {}", if good { "PASS" } else { "FAIL" });
        good
    }
}

fn sidecar_version(kind: ClKind) -> SidecarVersion {
    match kind {
        // The Lodestar kit's chain stops at Cancun; the Prysm kit's runs Osaka.
        ClKind::Lodestar => SidecarVersion::V0,
        ClKind::Prysm => SidecarVersion::V1,
    }
}

fn genesis_delay(kind: ClKind) -> u64 {
    match kind {
        ClKind::Lodestar => 15,
        ClKind::Prysm => 25,
    }
}

/// Polls every pair each `every` until `done` says so or `limit` passes; returns whether
/// `done` did. A process that dies ends the wait.
fn watch(
    net: &mut Devnet,
    watches: &mut [PairWatch],
    limit: Duration,
    every: Duration,
    mut done: impl FnMut(&mut Devnet, &[PairWatch]) -> bool,
) -> Result<bool, String> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let t = Instant::now();
        if let Some(dead) = net.casualty() {
            return Err(dead);
        }
        for line in net.poll(watches) {
            net.note(line);
        }
        if done(net, watches) {
            return Ok(true);
        }
        std::thread::sleep(every.saturating_sub(t.elapsed()));
    }
    Ok(false)
}

fn finalized_epoch(w: &PairWatch) -> u64 {
    w.last.as_ref().map_or(0, |v| v.finalized_epoch)
}

/// Waits for a tx's receipt on `el`: (block, status).
fn mined(el: &mut El, hash: B256, limit: Duration) -> Option<(u64, u64)> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(Some(r)) = el.receipt(hash) {
            return Some(r);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    None
}

/// Waits until `cond` holds (polled every 250 ms, `limit` at most).
pub(crate) fn until(limit: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if cond() {
            return Some(t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    None
}

/// The tags-agree check of a set of watches.
fn tags_check(report: &mut Report, net: &Devnet, watches: &[PairWatch], phase: &str) {
    for (b, w) in watches.iter().enumerate() {
        let name = format!("{}/{}", net.beacons[b].name, net.els[net.driven[b]].name);
        let epochs: Vec<String> = w
            .checkpoints
            .iter()
            .map(|(e, n, _)| format!("ep{e}=#{n}"))
            .collect();
        report.check(
            &format!("{phase}: {name} safe/finalized equal to the CL's at every poll"),
            w.persistent.is_empty() && w.polls > 0,
            format!(
                "{} polls, {} matching, {} one-poll lags, {} persistent mismatches{}; finalized checkpoints matched: {}",
                w.polls,
                w.matches,
                w.transient,
                w.persistent.len(),
                w.persistent
                    .first()
                    .map_or(String::new(), |m| format!(" (first: {m})")),
                epochs.join(" ")
            ),
        );
    }
}

/// Sends `raws` to `target` over devp2p as one `Transactions` message from a fresh peer
/// at the genesis block, then leaves.
fn send_over_devp2p(
    enode: &str,
    genesis_json: &std::path::Path,
    raws: Vec<Bytes>,
) -> Result<(), String> {
    use moat_p2p::client::Client;
    use moat_p2p::eth::{EthMessage, Status};
    let text = std::fs::read_to_string(genesis_json).map_err(|e| e.to_string())?;
    let genesis = moat_common::config::Genesis::from_json(&text).map_err(|e| e.to_string())?;
    let status = Status::at_genesis(&genesis, 70);
    let target: moat_p2p::Enode = enode.parse().map_err(|e| format!("{enode}: {e:?}"))?;
    let key = secp256k1::SecretKey::from_byte_array(crate::net::random32()?)
        .map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let mut c = tokio::time::timeout(
            Duration::from_secs(10),
            Client::connect(&target, key, &[70, 69], status),
        )
        .await
        .map_err(|_| "devp2p handshake timed out".to_string())?
        .map_err(|e| format!("devp2p handshake: {e}"))?;
        c.send(&EthMessage::Transactions(raws))
            .await
            .map_err(|e| format!("devp2p send: {e}"))?;
        // Let the node read it before the connection goes.
        let _ = c.recv(Duration::from_secs(1)).await;
        c.disconnect(moat_p2p::p2p::DisconnectReason::ClientQuitting)
            .await;
        Ok(())
    })
}

/// The faucet's next nonce as `el` counts pending txs.
fn next_nonce(el: &mut El) -> Result<u64, String> {
    el.nonce(txs::faucet().address(), "pending")
}

/// Scenario 1: moat alone under the CL.
pub(crate) fn finality(args: &Args, kit: Kit) -> Result<Report, String> {
    let kind = kit.kind;
    let mut report = Report {
        title: format!("finality: moat under {}", kind.name()),
        ..Default::default()
    };
    let mut net = Devnet::new(kit, args.slot_seconds, args.ports, args.log_dir.clone())?;
    let moat = net.add_el("moat", Kind::Moat, &args.moat, &[])?;
    // Before any consensus client: no safe or finalized block.
    let pre = net.tags(moat);
    let none_yet =
        |t: &crate::el::Tagged| t.as_ref().err().is_some_and(|e| e.contains("not found"));
    report.check(
        "before any CL: safe and finalized are \"not found\"",
        none_yet(&pre.safe) && none_yet(&pre.finalized),
        format!("safe {:?}, finalized {:?}", pre.safe, pre.finalized),
    );
    net.set_genesis(genesis_delay(kind));
    net.add_beacon("cl", moat, Some((0, crate::cl::TOTAL_VALIDATORS - 1)))?;
    let mut watches = vec![PairWatch::default()];
    let every = Duration::from_millis(1500);
    let epoch = Duration::from_secs(net.epoch_seconds());

    // The first block, then the txs: three transfers over JSON-RPC, two over devp2p, a
    // blob tx over JSON-RPC.
    let first = watch(&mut net, &mut watches, epoch * 3, every, |net, _| {
        net.els[moat].block_number().unwrap_or(0) >= 1
    })?;
    report.check("the CL drives moat: a first block", first, "");
    if !first {
        return Ok(report);
    }
    let faucet = txs::faucet();
    let mut nonce = next_nonce(&mut net.els[moat])?;
    let mut sent = Vec::new();
    let mut transfer = |to: u8, value: u64| {
        let tx = txs::transfer(
            CHAIN_ID,
            &faucet,
            nonce,
            Address::repeat_byte(to),
            U256::from(value),
            Fees::DEFAULT,
        );
        nonce += 1;
        tx
    };
    for i in 0..3u8 {
        let (h, raw) = transfer(0xa0 + i, 1_000 + i as u64);
        net.els[moat].send_raw(&raw)?;
        sent.push(("json-rpc transfer", h));
    }
    let mut over_p2p = Vec::new();
    for i in 0..2u8 {
        let (h, raw) = transfer(0xd0 + i, 7 + i as u64);
        over_p2p.push(raw);
        sent.push(("devp2p transfer", h));
    }
    let enode = net.els[moat].enode()?;
    send_over_devp2p(&enode, &net.kit.el_genesis(), over_p2p)?;
    // A sender's blob txs and other txs do not share a pool (as geth): the blob tx goes
    // once the transfers are mined.
    let last_transfer = sent.last().expect("five transfers").1;
    let transfers = mined(&mut net.els[moat], last_transfer, epoch * 2);
    report.check(
        "the transfers are mined before the blob tx is sent",
        transfers.is_some(),
        format!("the last devp2p transfer {last_transfer}: {transfers:?}"),
    );
    if transfers.is_none() {
        // A blob tx behind unmined txs of its sender is refused (a gap): no point.
        return Ok(report);
    }
    let blob = txs::blob_tx(CHAIN_ID, &faucet, nonce, sidecar_version(kind), 2, 1)?;
    net.els[moat].send_raw(&blob.raw)?;
    sent.push(("blob tx", blob.hash));

    // Finality, with the txs mined on the way.
    let target = args.epochs;
    let reached = watch(
        &mut net,
        &mut watches,
        epoch * (target as u32 + 4),
        every,
        |_, w| finalized_epoch(&w[0]) >= target,
    )?;
    report.check(
        &format!("the CL finalizes epoch {target}"),
        reached,
        format!("finalized epoch {}", finalized_epoch(&watches[0])),
    );
    for (what, h) in &sent {
        let r = net.els[moat].receipt(*h)?;
        report.check(
            &format!("{what} mined"),
            r.is_some_and(|r| r.1 == 1),
            format!("{h}: {r:?}"),
        );
    }
    tags_check(&mut report, &net, &watches, "before the crash");

    // kill -9 mid-epoch, just after a block.
    while net.wall_slot() % crate::cl::ClKind::SLOTS_PER_EPOCH != 4 {
        std::thread::sleep(Duration::from_millis(200));
    }
    net.sleep_into_slot(1.5);
    let before = net.tags(moat);
    net.note(format!(
        "kill -9 moat (latest {:?}, finalized {:?})",
        before.latest, before.finalized
    ));
    net.els[moat].kill9();
    net.els[moat].restart_unreachable(args.ports + 99)?;
    let probe = net.tags(moat);
    let kept = matches!((&probe.finalized, &before.finalized), (Ok(a), Ok(b)) if a == b);
    report.check(
        "the finalized block survives kill -9 (read before any forkchoiceUpdated)",
        kept,
        format!("before {:?}, after {:?}", before.finalized, probe.finalized),
    );
    net.els[moat].kill9();
    net.els[moat].restart()?;
    let restarted_at = probe.latest.as_ref().map_or(0, |t| t.1);
    let from = finalized_epoch(&watches[0]);
    let mut after = vec![PairWatch::default()];
    let restart_target = from + args.restart_epochs;
    let went_on = watch(
        &mut net,
        &mut after,
        epoch * (args.restart_epochs as u32 + 3),
        every,
        |net, w| {
            finalized_epoch(&w[0]) >= restart_target
                && net.els[moat].block_number().unwrap_or(0) > restarted_at
        },
    )?;
    report.check(
        &format!("after the restart the chain goes on and epoch {restart_target} is finalized"),
        went_on,
        format!(
            "moat at #{} (was #{restarted_at}), finalized epoch {}",
            net.els[moat].block_number().unwrap_or(0),
            finalized_epoch(&after[0])
        ),
    );
    tags_check(&mut report, &net, &after, "after the restart");
    Ok(report)
}

/// Scenario 2, both ways: moat under the proposing beacon node, then geth.
pub(crate) fn pair(args: &Args, kit: Kit) -> Result<Report, String> {
    let mut report = Report {
        title: format!("pair: moat and go-ethereum under {}", kit.kind.name()),
        ..Default::default()
    };
    for moat_proposes in [true, false] {
        pair_once(args, kit.clone(), moat_proposes, &mut report)?;
    }
    Ok(report)
}

fn pair_once(
    args: &Args,
    kit: Kit,
    moat_proposes: bool,
    report: &mut Report,
) -> Result<(), String> {
    let kind = kit.kind;
    let geth = args.geth.as_ref().expect("checked in main");
    let mut net = Devnet::new(
        kit,
        args.slot_seconds,
        args.ports,
        args.log_dir.as_ref().map(|d| {
            d.join(if moat_proposes {
                "moat-proposes"
            } else {
                "geth-proposes"
            })
        }),
    )?;
    let moat = net.add_el("moat", Kind::Moat, &args.moat, &[])?;
    let geth = net.add_el("geth", Kind::Geth, geth, &[])?;
    net.peer_els(moat, geth)?;
    let (proposer, other) = if moat_proposes {
        (moat, geth)
    } else {
        (geth, moat)
    };
    let who = if moat_proposes {
        "moat proposes"
    } else {
        "geth proposes"
    };
    net.note(format!("---- {who}"));
    net.set_genesis(genesis_delay(kind));
    // Each beacon node reaches its EL through a proxy that records the methods it calls.
    let proxy_of = |net: &Devnet, el: usize, at: u16| {
        Proxy::start(
            args.ports + at,
            ([127, 0, 0, 1], net.els[el].config.ports.auth).into(),
        )
    };
    let proxies = [proxy_of(&net, proposer, 200)?, proxy_of(&net, other, 201)?];
    let a = net.add_beacon_via(
        "cl-validators",
        proposer,
        Some((0, crate::cl::TOTAL_VALIDATORS - 1)),
        proxies[0].port,
    )?;
    let b = net.add_beacon_via("cl-follower", other, None, proxies[1].port)?;
    net.peer_beacons(b, a)?;
    let mut watches = vec![PairWatch::default(), PairWatch::default()];
    let every = Duration::from_millis(1000);
    let epoch = Duration::from_secs(net.epoch_seconds());

    // Heads compared every poll; a difference that outlasts three polls is a failure.
    let mut heads = (0u64, 0u64, 0u64, 0u32); // polls, equal, persistent, run
    let mut head_poll = |net: &mut Devnet| {
        let (x, y) = (net.els[moat].tag("latest"), net.els[geth].tag("latest"));
        heads.0 += 1;
        if x.is_ok() && x == y {
            heads.1 += 1;
            heads.3 = 0;
        } else {
            heads.3 += 1;
            if heads.3 == 4 {
                heads.2 += 1;
                net.note(format!("heads differ for 4 polls: moat {x:?}, geth {y:?}"));
            }
        }
    };
    let first = watch(&mut net, &mut watches, epoch * 3, every, |net, _| {
        head_poll(net);
        net.els[other].block_number().unwrap_or(0) >= 2
    })?;
    report.check(
        &format!("{who}: the follower's EL imports the proposer's blocks"),
        first,
        "",
    );
    if !first {
        return Ok(());
    }
    // A transfer to the non-proposing EL: it must gossip to the proposer's and be mined.
    let faucet = txs::faucet();
    let mut nonce = next_nonce(&mut net.els[other])?;
    let (h, raw) = txs::transfer(
        CHAIN_ID,
        &faucet,
        nonce,
        Address::repeat_byte(0xee),
        U256::from(5),
        Fees::DEFAULT,
    );
    nonce += 1;
    net.els[other].send_raw(&raw)?;
    let r = mined(&mut net.els[proposer], h, epoch);
    // The follower imports the block a moment later.
    let r2 = mined(
        &mut net.els[other],
        h,
        Duration::from_secs(net.slot_seconds * 2),
    );
    report.check(
        &format!(
            "{who}: a transfer sent to the non-proposing EL ({}) is gossiped and mined",
            net.els[other].name
        ),
        r.is_some_and(|r| r.1 == 1) && r2 == r,
        format!("{h}: proposer's receipt {r:?}, follower's {r2:?}"),
    );
    // A blob tx sent to each EL in turn. go-ethereum 02b73d4 pools only version-1
    // (cell-proof) sidecars, on any fork (core/txpool/validation.go), so on the Lodestar
    // kit's Cancun chain no blob tx can reach a block it builds: there the blob txs go to
    // moat and are checked where moat builds.
    let geth_takes_blobs = sidecar_version(kind) == SidecarVersion::V1;
    if !geth_takes_blobs {
        report.figures.push(format!(
            "{who}: go-ethereum 02b73d4 refuses version-0 sidecars on any fork (a Cancun chain): blob txs sent to moat only, checked where moat proposes"
        ));
    }
    for (i, to) in [proposer, other].into_iter().enumerate() {
        if !geth_takes_blobs
            && (net.els[to].config.kind == Kind::Geth
                || net.els[proposer].config.kind == Kind::Geth)
        {
            continue;
        }
        let blob = txs::blob_tx(
            CHAIN_ID,
            &faucet,
            nonce,
            sidecar_version(kind),
            2,
            10 + i as u64,
        )?;
        nonce += 1;
        let name = net.els[to].name.clone();
        net.els[to].send_raw(&blob.raw)?;
        let v2 = sidecar_version(kind) == SidecarVersion::V1;
        let served = net.els[to].get_blobs(&blob.versioned_hashes, v2)?;
        let same = served.len() == blob.bundle.blobs.len()
            && served
                .iter()
                .zip(&blob.bundle.blobs)
                .all(|(s, b)| s.as_ref().map(|s| &s[..]) == Some(&b.0[..]));
        report.check(
            &format!(
                "{who}: engine_getBlobs{} on {name} serves the blobs of a blob tx it pooled",
                if v2 { "V2" } else { "V1" }
            ),
            same,
            format!(
                "{} of {} blobs",
                served.iter().filter(|s| s.is_some()).count(),
                blob.bundle.blobs.len()
            ),
        );
        let r = mined(&mut net.els[proposer], blob.hash, epoch);
        report.check(
            &format!("{who}: a blob tx sent to {name} is mined"),
            r.is_some_and(|r| r.1 == 1),
            format!("{}: {r:?}", blob.hash),
        );
    }
    let target = args.epochs;
    let reached = watch(
        &mut net,
        &mut watches,
        epoch * (target as u32 + 4),
        every,
        |net, w| {
            head_poll(net);
            finalized_epoch(&w[0]) >= target && finalized_epoch(&w[1]) >= target
        },
    )?;
    report.check(
        &format!("{who}: both beacon nodes finalize epoch {target}"),
        reached,
        format!(
            "{} / {}",
            finalized_epoch(&watches[0]),
            finalized_epoch(&watches[1])
        ),
    );
    report.check(
        &format!("{who}: moat and geth at the same head"),
        heads.2 == 0 && heads.0 > 0,
        format!(
            "{} polls, {} with equal heads, {} differences outlasting 4 polls",
            heads.0, heads.1, heads.2
        ),
    );
    tags_check(report, &net, &watches, who);
    for (proxy, el) in proxies.iter().zip([proposer, other]) {
        let mut counts = std::collections::BTreeMap::new();
        for c in proxy.calls() {
            let e = counts.entry(c.method).or_insert((0u32, 0u32));
            e.0 += 1;
            e.1 += u32::from(!c.ok);
        }
        let calls: Vec<String> = counts
            .iter()
            .map(|(m, (n, failed))| match failed {
                0 => format!("{m} ×{n}"),
                f => format!("{m} ×{n} ({f} failed)"),
            })
            .collect();
        report.figures.push(format!(
            "{who}: the CL called on {}: {}",
            net.els[el].name,
            calls.join(", ")
        ));
    }
    Ok(())
}

/// Scenario 3 (Lodestar): faults with moat under the minority beacon node.
pub(crate) fn faults(args: &Args, kit: Kit) -> Result<Report, String> {
    let mut report = Report {
        title: format!(
            "faults: moat (3 validators) beside go-ethereum (5) under {}",
            kit.kind.name()
        ),
        ..Default::default()
    };
    if kit.kind != ClKind::Lodestar {
        report.check(
            "faults need Lodestar (its REST API partitions the beacon nodes)",
            false,
            "",
        );
        return Ok(report);
    }
    let geth_bin = args.geth.as_ref().expect("checked in main");
    let mut net = Devnet::new(kit, args.slot_seconds, args.ports, args.log_dir.clone())?;
    let geth = net.add_el("geth", Kind::Geth, geth_bin, &[])?;
    let moat = net.add_el("moat", Kind::Moat, &args.moat, &[])?;
    net.peer_els(moat, geth)?;
    net.set_genesis(genesis_delay(ClKind::Lodestar));
    let a = net.add_beacon("cl-majority", geth, Some((0, 4)))?;
    let b = net.add_beacon("cl-minority", moat, Some((5, 7)))?;
    net.peer_beacons(b, a)?;
    let mut watches = vec![PairWatch::default(), PairWatch::default()];
    let every = Duration::from_millis(1500);
    let epoch = Duration::from_secs(net.epoch_seconds());
    let reached = watch(&mut net, &mut watches, epoch * 6, every, |_, w| {
        finalized_epoch(&w[1]) >= 2
    })?;
    report.check(
        "before the faults: epoch 2 finalized",
        reached,
        format!("{}", finalized_epoch(&watches[1])),
    );
    tags_check(&mut report, &net, &watches, "before the faults");
    if !reached {
        return Ok(report);
    }
    let same_head = |net: &mut Devnet| {
        let (x, y) = (net.els[moat].tag("latest"), net.els[geth].tag("latest"));
        x.is_ok() && x == y
    };

    // 1. kill -9 mid-epoch.
    while net.wall_slot() % ClKind::SLOTS_PER_EPOCH != 3 {
        std::thread::sleep(Duration::from_millis(200));
    }
    net.sleep_into_slot(2.0);
    net.note("kill -9 moat mid-epoch; restart");
    net.els[moat].kill9();
    net.els[moat].restart()?;
    let _ = net.peer_els(moat, geth);
    let caught = until(epoch * 2, || same_head(&mut net));
    report.check(
        "kill -9 mid-epoch: moat restarts and is back at geth's head",
        caught.is_some(),
        format!("{caught:?} after the restart"),
    );

    // 2. Stopped for three epochs, then caught up through the CL's forkchoice.
    let stopped_at = net.els[moat].block_number()?;
    net.note("stopping moat for three epochs");
    net.els[moat].stop();
    std::thread::sleep(epoch * 3);
    let geth_at = net.els[geth].block_number()?;
    net.els[moat].restart()?;
    let t = Instant::now();
    let _ = net.peer_els(moat, geth);
    let caught = until(epoch * 4, || same_head(&mut net));
    report.check(
        "stopped three epochs: moat catches up to geth's head (devp2p sync under the CL's forkchoice)",
        caught.is_some(),
        format!(
            "moat stopped at #{stopped_at}, geth at #{geth_at} at the restart; caught up in {:.1} s",
            caught.map_or(f64::NAN, |_| t.elapsed().as_secs_f64())
        ),
    );
    let mut after = vec![PairWatch::default(), PairWatch::default()];
    let from = finalized_epoch(&watches[1]);
    let went_on = watch(&mut net, &mut after, epoch * 5, every, |_, w| {
        finalized_epoch(&w[1]) > from
    })?;
    report.check(
        "after the outage, finality goes on",
        went_on,
        format!("finalized epoch {}", finalized_epoch(&after[1])),
    );

    // 3. A partition: each half builds its own branch; moat's (3 validators) loses.
    net.note("partition: beacon nodes and execution clients disconnected");
    net.unpeer_els(moat, geth)?;
    let id_a = net.beacons[a].identity()?;
    let id_b = net.beacons[b].identity()?;
    net.beacons[b].disconnect(&id_a.0)?;
    net.beacons[a].disconnect(&id_b.0)?;
    let apart = until(Duration::from_secs(10), || {
        net.beacons[a].peer_count().unwrap_or(1) == 0
            && net.beacons[b].peer_count().unwrap_or(1) == 0
    });
    report.check(
        "partition: the beacon nodes disconnect",
        apart.is_some(),
        "",
    );
    let faucet = txs::faucet();
    let nonce = next_nonce(&mut net.els[moat])?;
    let (h, raw) = txs::transfer(
        CHAIN_ID,
        &faucet,
        nonce,
        Address::repeat_byte(0x0f),
        U256::from(99),
        Fees::DEFAULT,
    );
    net.els[moat].send_raw(&raw)?;
    let on_branch = mined(&mut net.els[moat], h, epoch * 2);
    let geth_knows = net.els[geth].call("eth_getTransactionByHash", serde_json::json!([h]))?;
    report.check(
        "partition: a tx sent to moat is mined on moat's branch only",
        on_branch.is_some() && geth_knows.is_null(),
        format!(
            "moat's receipt {on_branch:?}; geth knows it: {}",
            !geth_knows.is_null()
        ),
    );
    std::thread::sleep(epoch);
    let branch_head = net.els[moat].tag("latest");
    net.note(format!(
        "joining the halves again (moat's branch head {branch_head:?})"
    ));
    net.beacons[b].connect(&id_a)?;
    let joined = until(epoch * 3, || same_head(&mut net));
    let repooled = net.els[moat].pending(h).unwrap_or(false);
    report.check(
        "join: moat reorgs onto the majority's chain",
        joined.is_some(),
        format!("same head as geth after {joined:?}; moat's branch head was {branch_head:?}"),
    );
    report.check(
        "join: the tx mined only on the lost branch is back in moat's pool",
        repooled,
        format!("{h} pending in moat: {repooled}"),
    );
    net.peer_els(moat, geth)?;
    let remined = mined(&mut net.els[geth], h, epoch * 2);
    let moat_sees = net.els[moat].receipt(h)?;
    report.check(
        "join: that tx gossips to geth and is mined on the winning chain",
        remined.is_some_and(|r| r.1 == 1) && moat_sees == remined,
        format!("geth's receipt {remined:?}, moat's {moat_sees:?}"),
    );
    let mut last = vec![PairWatch::default(), PairWatch::default()];
    let from = finalized_epoch(&after[1]);
    let went_on = watch(&mut net, &mut last, epoch * 5, every, |_, w| {
        finalized_epoch(&w[1]) > from + 1
    })?;
    report.check(
        "after the partition, finality goes on",
        went_on,
        format!("finalized epoch {}", finalized_epoch(&last[1])),
    );
    tags_check(&mut report, &net, &last, "after the faults");
    Ok(report)
}

/// Scenario 4: proposals under a full pool.
pub(crate) fn full_pool(args: &Args, kit: Kit) -> Result<Report, String> {
    crate::full_pool::run(args, kit)
}
