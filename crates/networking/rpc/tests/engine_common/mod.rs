//! What the engine API tests share: the chain id and JWT secret of their test chains,
//! authenticated JSON-RPC calls over real HTTP, and the transactions and forkchoice
//! states they send.
#![allow(dead_code)] // each test binary uses its own part

use alloy_primitives::{Address, B256, Bytes, TxKind, U256};
use moat_common::PooledTransaction;
use moat_common::transaction::{Eip1559Tx, SignedTransaction, Transaction};
use moat_crypto::secp::Signer;
use moat_rpc::engine::make_token;
use serde_json::{Value, json};
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub(crate) const CHAIN_ID: u64 = 1337;
pub(crate) const SECRET: [u8; 32] = [0x42; 32];

pub(crate) fn now() -> u64 {
    moat_rpc::engine::unix_now()
}

/// POSTs a JSON-RPC call with `token` (if any); returns (HTTP status, body).
pub(crate) async fn post(
    addr: SocketAddr,
    token: Option<&str>,
    method: &str,
    params: Value,
) -> (u16, String) {
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params }).to_string();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let (headers, body) = text.split_once("\r\n\r\n").unwrap_or_default();
    let body = if headers
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    (status, body)
}

pub(crate) fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// A call with a fresh good token; the whole JSON-RPC response.
pub(crate) async fn call(addr: SocketAddr, method: &str, params: Value) -> Value {
    let (status, body) = post(addr, Some(&make_token(&SECRET, now())), method, params).await;
    assert_eq!(status, 200, "{method}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{method}: not JSON ({e}): {body}"))
}

pub(crate) async fn result(addr: SocketAddr, method: &str, params: Value) -> Value {
    let r = call(addr, method, params).await;
    r.get("result")
        .cloned()
        .unwrap_or_else(|| panic!("{method} failed: {r}"))
}

pub(crate) async fn error_code(addr: SocketAddr, method: &str, params: Value) -> i64 {
    let r = call(addr, method, params).await;
    r["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("{method} did not fail: {r}"))
}

pub(crate) fn transfer(signer: &Signer, nonce: u64) -> PooledTransaction {
    let tx = Transaction::Eip1559(Eip1559Tx {
        chain_id: CHAIN_ID,
        nonce,
        max_priority_fee_per_gas: 2_000_000_000,
        max_fee_per_gas: 10_000_000_000,
        gas_limit: 21_000,
        to: TxKind::Call(Address::repeat_byte(0x11)),
        value: U256::from(5),
        input: Bytes::new(),
        access_list: Vec::new(),
    });
    PooledTransaction::new(SignedTransaction::sign(tx, signer), None)
}

pub(crate) fn fcu_state(head: B256) -> Value {
    json!({ "headBlockHash": head, "safeBlockHash": head, "finalizedBlockHash": B256::ZERO })
}

/// engine_forkchoiceUpdatedV3 to `head` without attributes.
pub(crate) async fn forkchoice(addr: SocketAddr, head: B256) -> Value {
    result(
        addr,
        "engine_forkchoiceUpdatedV3",
        json!([fcu_state(head), null]),
    )
    .await
}
