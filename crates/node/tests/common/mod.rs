//! Helpers for the whole-node tests: run the binary, talk HTTP to it.
#![allow(dead_code)]

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
