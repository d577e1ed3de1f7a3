//! The Grafana dashboard (etc/grafana/dashboards/moat.json) against a running node:
//! every metric a panel queries is one the node exports, after a little of each kind of
//! work (an RPC tx, a refused one, a payload built, fetched and imported over the engine
//! API, the head moved).

mod common;

use common::{Moat, free_port, rpc};
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::Duration;

/// Every `moat_…` metric name in the dashboard's queries, histogram and summary suffixes
/// taken off.
fn dashboard_metrics() -> BTreeSet<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/etc/grafana/dashboards/moat.json"
    );
    let dash: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut names = BTreeSet::new();
    for panel in dash["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            let mut rest = expr;
            while let Some(i) = rest.find("moat_") {
                let tail = &rest[i..];
                let end = tail
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(tail.len());
                let name = &tail[..end];
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s))
                    .unwrap_or(name);
                names.insert(base.to_string());
                rest = &tail[end..];
            }
        }
    }
    names
}

#[test]
fn every_metric_the_dashboard_queries_is_exported() {
    let wanted = dashboard_metrics();
    assert!(wanted.len() >= 25, "{wanted:?}");
    let key = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
    let signer =
        moat_crypto::secp::Signer::from_bytes(&key.parse::<alloy_primitives::B256>().unwrap())
            .unwrap();
    const CHAIN_ID: u64 = 7_373;
    let genesis = moat_harness::genesis::osaka(
        CHAIN_ID,
        &[signer.address()],
        alloy_primitives::U256::from(10u128.pow(24)),
        30_000_000,
        1_700_000_000,
        b"dashboard",
    );
    let dir = common::temp_dir("dashboard");
    let genesis_path = dir.path().join("genesis.json");
    std::fs::write(&genesis_path, serde_json::to_string(&genesis).unwrap()).unwrap();
    let metrics = free_port();
    let metrics_s = metrics.to_string();
    let moat = Moat::start(
        &dir.path().join("moat"),
        &genesis_path,
        free_port(),
        0x42,
        &["--metrics", "--metrics.port", &metrics_s],
        &[],
        Duration::from_secs(60),
    );
    // The head named: the node takes txs; an RPC tx pooled (journaled), one refused.
    let head = format!("{}", genesis.header().hash());
    assert_eq!(moat.forkchoice(&head), "VALID");
    let (_, raw) = common::signed_transfer(&signer, CHAIN_ID, 0, 1);
    let sent = rpc(
        moat.http,
        "eth_sendRawTransaction",
        &format!(r#"["{raw}"]"#),
    )
    .unwrap();
    assert!(sent["result"].is_string(), "{sent}");
    let refused = rpc(moat.http, "eth_sendRawTransaction", r#"["0x02c0"]"#).unwrap();
    assert!(refused["error"].is_object(), "{refused}");
    // A payload built with the tx, fetched, imported and made the head.
    let payload = moat.build_block(&head, genesis.timestamp + 12);
    assert_eq!(payload["transactions"].as_array().map(Vec::len), Some(1));
    // The pool follows the head; the exporter renders its summaries periodically.
    let body = moat.wait("every dashboard metric exported", || {
        std::thread::sleep(Duration::from_millis(500));
        let body = common::scrape(metrics).expect("the exporter answers");
        let exported: BTreeSet<&str> = body
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(['{', ' ']).next())
            .collect();
        let missing: Vec<&String> = wanted
            .iter()
            .filter(|w| {
                !["", "_bucket", "_sum", "_count"]
                    .iter()
                    .any(|s| exported.contains(format!("{w}{s}").as_str()))
            })
            .collect();
        if missing.is_empty() {
            Some(body)
        } else {
            eprintln!("not yet exported: {missing:?}");
            None
        }
    });
    assert!(body.contains("moat_engine_new_payload_seconds_bucket"));
}
