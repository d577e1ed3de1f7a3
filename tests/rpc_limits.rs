//! The JSON-RPC request-limit flags reach the server: `moat --help` lists them, and a dev
//! node started with `--rpc.batch-request-limit 2` refuses a 3-call batch over HTTP.

mod common;

use common::{Node, free_port, post, rpc, wait_for};
use serde_json::json;
use std::process::Command;

#[test]
fn help_lists_the_rpc_limit_flags_with_their_defaults() {
    let out = Command::new(env!("CARGO_BIN_EXE_moat"))
        .arg("--help")
        .output()
        .expect("moat runs");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for (flag, default) in [
        ("--rpc.batch-request-limit", "[default: 1000]"),
        ("--rpc.batch-response-max-size", "[default: 25000000]"),
        ("--rpc.http-body-limit", "[default: 5]"),
        ("--rpc.max-concurrent-requests", "[default: 256]"),
    ] {
        // The flag's line and its description, up to the next flag.
        let mut lines = help
            .lines()
            .skip_while(|l| !l.trim_start().starts_with(flag));
        let first = lines
            .next()
            .unwrap_or_else(|| panic!("{flag} missing:\n{help}"));
        let rest: Vec<&str> = lines
            .take_while(|l| !l.trim_start().starts_with('-'))
            .collect();
        let entry = format!("{first}\n{}", rest.join("\n"));
        assert!(entry.contains(default), "{flag}: {entry}");
    }
}

#[test]
fn batch_request_limit_flag_is_applied() {
    let port = free_port();
    let _node = Node::start(&[
        "--dev",
        "--http.port",
        &port.to_string(),
        "--authrpc.port",
        &free_port().to_string(),
        "--rpc.batch-request-limit",
        "2",
        "--rpc.max-concurrent-requests",
        "8",
    ]);
    wait_for("the RPC server", || rpc(port, "eth_chainId", "[]"));
    let call = |id: u64| json!({"jsonrpc":"2.0","id":id,"method":"eth_chainId"});

    let (status, two) = post(port, "", &json!([call(1), call(2)]).to_string()).unwrap();
    assert_eq!(status, 200);
    assert_eq!(two[0]["result"], "0x539", "{two}");
    assert_eq!(two[1]["result"], "0x539", "{two}");

    let (status, three) = post(port, "", &json!([call(1), call(2), call(3)]).to_string()).unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        three,
        json!([{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"batch too large"}}])
    );
}
