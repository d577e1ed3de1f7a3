//! moat started with geth's command line as EXPB writes it for geth (loopback addresses
//! and a test genesis instead of 0.0.0.0 and `--mainnet`): it runs, the engine API
//! answers with the JWT from `--authrpc.jwtsecret` (V1 methods included), metrics are
//! served on geth's path `/debug/metrics/prometheus` with the newPayload histogram, logs
//! are JSON lines with `--log.format json`, and SIGTERM stops it with exit code 0.

mod common;

use common::{free_port, testdata, wait_for};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.starts_with("HTTP/1.1 200").then_some(out)
}

fn engine_call(
    port: u16,
    secret: &[u8; 32],
    method: &str,
    params: &str,
) -> Option<serde_json::Value> {
    let token = moat_rpc::engine::make_token(secret, moat_rpc::engine::unix_now());
    let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#);
    common::post(port, &format!("Authorization: Bearer {token}\r\n"), &body).map(|(_, v)| v)
}

#[test]
fn expbs_geth_command_line_runs_a_node() {
    let root = common::temp_dir("geth-flags");
    let dir = root.path();
    let jwt = dir.join("jwtsecret.hex");
    let secret = [0x5au8; 32];
    std::fs::write(&jwt, alloy_primitives::hex::encode(secret)).unwrap();
    let (http, engine, metrics, p2p) = (free_port(), free_port(), free_port(), free_port());
    let mut node = common::Node(
        Command::new(env!("CARGO_BIN_EXE_moat"))
            .args([
                format!("--datadir={}", dir.join("data").display()),
                format!("--port={p2p}"),
                "--http".into(),
                "--http.addr=127.0.0.1".into(),
                format!("--http.port={http}"),
                "--http.vhosts=*".into(),
                "--http.api=eth,net,web3,debug,admin".into(),
                "--authrpc.addr=127.0.0.1".into(),
                format!("--authrpc.port={engine}"),
                "--authrpc.vhosts=*".into(),
                format!("--authrpc.jwtsecret={}", jwt.display()),
                "--metrics".into(),
                format!("--metrics.port={metrics}"),
                "--metrics.addr=127.0.0.1".into(),
                "--ws".into(),
                "--ws.addr=127.0.0.1".into(),
                format!("--ws.port={http}"),
                "--ws.api=eth,web3,net,debug,admin".into(),
                "--nodiscover".into(),
                "--maxpeers=0".into(),
                format!("--network={}", testdata("genesis.json").display()),
                "--syncmode=full".into(),
                "--verbosity=3".into(),
                "--log.format=json".into(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        None,
    );
    let caps = wait_for("the engine API", || {
        engine_call(engine, &secret, "engine_exchangeCapabilities", "[[]]")
    });
    let caps = caps["result"].as_array().cloned().unwrap_or_default();
    assert!(
        caps.contains(&serde_json::json!("engine_newPayloadV1")),
        "{caps:?}"
    );
    // Block 1 of the conformance chain: executed, timed in the newPayload histogram.
    let calls: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(testdata("newpayload.json")).unwrap())
            .unwrap();
    let one = &calls[1];
    let status = engine_call(
        engine,
        &secret,
        one["method"].as_str().unwrap(),
        &one["params"].to_string(),
    )
    .unwrap();
    assert_eq!(status["result"]["status"], "VALID", "{status}");
    let chain_id = wait_for("JSON-RPC", || common::rpc(http, "eth_chainId", "[]"));
    assert!(chain_id["result"].is_string(), "{chain_id}");

    let page = wait_for("metrics", || get(metrics, "/debug/metrics/prometheus"));
    for metric in [
        "moat_rpc_calls_total",
        "moat_engine_new_payload_seconds_bucket{status=\"VALID\",le=\"0.005\"}",
        "moat_engine_new_payload_gas_per_second",
    ] {
        assert!(page.contains(metric), "{metric}: {page}");
    }

    // SIGTERM: a clean stop.
    let status = Command::new("kill")
        .args(["-TERM", &node.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(40);
    let status = loop {
        if let Some(s) = node.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "no stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");

    // Every log line is a JSON object with geth's keys.
    let mut lines = Vec::new();
    for pipe in [
        Box::new(node.0.stdout.take().unwrap()) as Box<dyn Read>,
        Box::new(node.0.stderr.take().unwrap()),
    ] {
        lines.extend(BufReader::new(pipe).lines().map_while(Result::ok));
    }
    let logs: Vec<serde_json::Value> = lines
        .iter()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(logs.len() >= 3, "{lines:?}");
    for log in &logs {
        for key in ["t", "lvl", "msg"] {
            assert!(log.get(key).is_some(), "{key} missing: {log}");
        }
    }
    assert!(
        logs.iter()
            .any(|l| l["msg"] == "engine API listening" && l["addr"].is_string()),
        "{logs:?}"
    );
    assert!(logs.iter().any(|l| l["msg"] == "stopped"), "{logs:?}");
}
