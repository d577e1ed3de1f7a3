//! Helpers for the whole-node tests: run the binary, talk HTTP to it.
#![allow(dead_code)]

use alloy_primitives::{Address, B256, Bytes, TxKind, U256};
use moat_common::PooledTransaction;
use moat_common::transaction::{Eip1559Tx, SignedTransaction, Transaction};
use moat_crypto::secp::Signer;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/testdata/ethtest")
        .join(name)
}

/// `moat import` of the conformance chain into `datadir`; panics with moat's stderr if it
/// fails.
pub fn import_ethtest(datadir: &std::path::Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_moat"))
        .arg("import")
        .arg(testdata("chain.rlp"))
        .arg("--network")
        .arg(testdata("genesis.json"))
        .arg("--datadir")
        .arg(datadir)
        .output()
        .expect("moat runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A running `moat`, killed on drop.
pub struct Node(pub Child);

impl Node {
    /// Starts `moat` with `args`; unless they name a p2p port (or discv5's), the OS
    /// picks one, so nodes of parallel tests do not collide on 30303 (or 9200).
    pub fn start(args: &[&str]) -> Node {
        let port: &[&str] = if args.contains(&"--port") {
            &[]
        } else {
            &["--port", "0"]
        };
        let v5_port: &[&str] = if args.contains(&"--discovery.v5.port") {
            &[]
        } else {
            &["--discovery.v5.port", "0"]
        };
        Node(
            Command::new(env!("CARGO_BIN_EXE_moat"))
                .args(args)
                .args(port)
                .args(v5_port)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("moat starts"),
        )
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// POSTs `body` with extra header lines; returns the HTTP status and the parsed body.
pub fn post(port: u16, headers: &str, body: &str) -> Option<(u16, serde_json::Value)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
    write!(
        s,
        "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut response = String::new();
    s.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let json = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    Some((
        status,
        serde_json::from_str(json).unwrap_or(serde_json::Value::Null),
    ))
}

/// A JSON-RPC call on the public port.
pub fn rpc(port: u16, method: &str, params: &str) -> Option<serde_json::Value> {
    let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#);
    post(port, "", &body).map(|(_, v)| v)
}

pub fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The first four well-known dev keys.
pub const DEV_KEYS: [&str; 4] = [
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
];

/// Transfers on the dev chain (id 1337) from each of [`DEV_KEYS`], `nonces` per sender,
/// signed in nonce order: per sender, (hash, raw hex).
pub fn dev_transfers(nonces: u64) -> Vec<Vec<(B256, String)>> {
    DEV_KEYS
        .iter()
        .map(|k| {
            let signer = Signer::from_bytes(&k.parse::<B256>().unwrap()).unwrap();
            (0..nonces)
                .map(|nonce| {
                    let tx = Transaction::Eip1559(Eip1559Tx {
                        chain_id: 1337,
                        nonce,
                        max_priority_fee_per_gas: 1_000_000_000,
                        max_fee_per_gas: 100_000_000_000,
                        gas_limit: 21_000,
                        to: TxKind::Call(Address::repeat_byte(0x42)),
                        value: U256::from(nonce + 1),
                        input: Bytes::new(),
                        access_list: Vec::new(),
                    });
                    let p = PooledTransaction::new(SignedTransaction::sign(tx, &signer), None);
                    (
                        p.hash(),
                        alloy_primitives::hex::encode_prefixed(p.encoded_2718()),
                    )
                })
                .collect()
        })
        .collect()
}
