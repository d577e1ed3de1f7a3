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

pub(crate) fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/testdata/ethtest")
        .join(name)
}

/// `moat import` of the conformance chain into `datadir`; panics with moat's stderr if it
/// fails.
pub(crate) fn import_ethtest(datadir: &std::path::Path) {
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

/// The binary `bin` of the workspace package `package` (a tool that drives `moat`), built
/// now by the cargo running this test, in this test's profile: a no-op when it is up to
/// date, a rebuild when its sources changed. Cargo builds only this package's own binary
/// for its tests (`CARGO_BIN_EXE_moat`); another package's is built here so that no test
/// runs one an earlier build left in target/, nor finds it missing on a clean checkout.
/// The path is the one cargo reports for the executable.
pub(crate) fn workspace_bin(package: &str, bin: &str) -> PathBuf {
    let moat = PathBuf::from(env!("CARGO_BIN_EXE_moat"));
    // target/<profile dir>/moat: `debug` is the dev profile's directory.
    let profile = match moat
        .parent()
        .and_then(|d| d.file_name())
        .and_then(|n| n.to_str())
    {
        Some("debug") | None => "dev",
        Some(dir) => dir,
    };
    let out = Command::new(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["build", "--message-format=json-render-diagnostics"])
        .args(["--profile", profile, "-p", package, "--bin", bin])
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo build -p {package} --bin {bin} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == bin)
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo reported no executable for {bin}"))
}

/// A directory of its own for a test, named after `tag`, under cargo's scratch directory
/// for integration tests (inside target/, not the system temp dir): removed with all in
/// it when dropped, also when the test panics. Declare it before the nodes that use it,
/// so they are killed before it goes.
pub(crate) fn temp_dir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("moat-{tag}-"))
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("a temporary directory")
}

/// `data` in a [`temp_dir`] of its own: a datadir path not created yet (a node or an
/// import creates it), with room beside it for a `.jwt`, a genesis or a log; dropped, the
/// whole directory goes.
pub(crate) struct TempPath {
    path: PathBuf,
    _root: tempfile::TempDir,
}

pub(crate) fn temp_path(tag: &str) -> TempPath {
    let root = temp_dir(tag);
    TempPath {
        path: root.path().join("data"),
        _root: root,
    }
}

impl std::ops::Deref for TempPath {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.path
    }
}

impl AsRef<std::path::Path> for TempPath {
    fn as_ref(&self) -> &std::path::Path {
        &self.path
    }
}

impl AsRef<std::ffi::OsStr> for TempPath {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.path.as_os_str()
    }
}

/// A running `moat`, killed on drop; the directory it holds (a dev datadir, an engine
/// secret), if any, is removed after the kill.
pub(crate) struct Node(pub Child, pub Option<tempfile::TempDir>);

impl Node {
    /// Starts `moat` with `args`; unless they name a p2p port (or discv5's), the OS
    /// picks one, so nodes of parallel tests do not collide on 30303 (or 9200). A dev
    /// node not given a datadir gets one the `Node` removes (moat's own temporary one is
    /// left behind by a kill).
    pub(crate) fn start(args: &[&str]) -> Node {
        Node::start_holding(args, None)
    }

    /// [`Node::start`], the node holding `dir` (removed after the kill).
    pub(crate) fn start_holding(args: &[&str], dir: Option<tempfile::TempDir>) -> Node {
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
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_moat"));
        cmd.args(args).args(port).args(v5_port);
        let dir = match dev_datadir(args) {
            Some(datadir) => {
                cmd.arg("--datadir").arg(datadir.path());
                assert!(dir.is_none(), "one directory per node");
                Some(datadir)
            }
            None => dir,
        };
        // MOAT_TEST_LOGS=1 shows the nodes' logs beside the test's output.
        let logs = || {
            if std::env::var_os("MOAT_TEST_LOGS").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            }
        };
        let child = cmd
            .stdout(logs())
            .stderr(logs())
            .spawn()
            .expect("moat starts");
        Node(child, dir)
    }
}

/// A datadir for a dev node whose `args` name none (`--dev` without `--datadir`).
pub(crate) fn dev_datadir(args: &[&str]) -> Option<tempfile::TempDir> {
    let named = args
        .iter()
        .any(|a| *a == "--datadir" || a.starts_with("--datadir="));
    (args.contains(&"--dev") && !named).then(|| temp_dir("dev"))
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        // The held directory (the field) is dropped after this: the process is gone.
    }
}

pub(crate) fn free_port() -> u16 {
    // The OS may give the same free port to two binds in a row once the first is closed:
    // a node handed it for two of its listeners then fails to start. A port goes out once
    // per test process.
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// POSTs `body` with extra header lines; returns the HTTP status and the parsed body.
pub(crate) fn post(port: u16, headers: &str, body: &str) -> Option<(u16, serde_json::Value)> {
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
pub(crate) fn rpc(port: u16, method: &str, params: &str) -> Option<serde_json::Value> {
    let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#);
    post(port, "", &body).map(|(_, v)| v)
}

/// The engine API's JWT secret in the engine tests (hive's).
pub(crate) const ENGINE_SECRET_HEX: &str =
    "0x7365637265747365637265747365637265747365637265747365637265747365";

/// POSTs `body` to the engine port with a fresh token for [`ENGINE_SECRET_HEX`].
pub(crate) fn engine_post(port: u16, body: &str) -> Option<(u16, serde_json::Value)> {
    let secret = moat_rpc::engine::parse_jwt_secret(ENGINE_SECRET_HEX).unwrap();
    let token = moat_rpc::engine::make_token(&secret, moat_rpc::engine::unix_now());
    post(port, &format!("Authorization: Bearer {token}\r\n"), body)
}

/// `moat` on the conformance genesis in `datadir`, no peers, its engine API on
/// [`ENGINE_SECRET_HEX`] (written in a directory the node holds): the node, its HTTP port
/// and its engine port, once the RPC server answers.
pub(crate) fn start_engine_node(datadir: &std::path::Path) -> (Node, u16, u16) {
    let secrets = temp_dir("engine-jwt");
    let secret_file = secrets.path().join("secret.jwt");
    std::fs::write(&secret_file, ENGINE_SECRET_HEX).unwrap();
    let (http, auth) = (free_port(), free_port());
    let node = Node::start_holding(
        &[
            "--network",
            testdata("genesis.json").to_str().unwrap(),
            "--datadir",
            datadir.to_str().unwrap(),
            "--nodiscover",
            "--maxpeers",
            "0",
            "--http",
            "--http.port",
            &http.to_string(),
            "--authrpc.port",
            &auth.to_string(),
            "--authrpc.jwtsecret",
            secret_file.to_str().unwrap(),
        ],
        Some(secrets),
    );
    wait_for("the RPC server", || rpc(http, "eth_chainId", "[]"));
    (node, http, auth)
}

pub(crate) fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
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
pub(crate) const DEV_KEYS: [&str; 4] = [
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
];

/// Transfers on the dev chain (id 1337) from each of [`DEV_KEYS`], `nonces` per sender,
/// signed in nonce order: per sender, (hash, raw hex).
pub(crate) fn dev_transfers(nonces: u64) -> Vec<Vec<(B256, String)>> {
    DEV_KEYS
        .iter()
        .map(|k| {
            let signer = Signer::from_bytes(&k.parse::<B256>().unwrap()).unwrap();
            (0..nonces)
                .map(|nonce| signed_transfer(&signer, 1337, nonce, nonce + 1))
                .collect()
        })
        .collect()
}

/// A transfer of `value` wei from `signer` at `nonce` to 0x4242…, on chain `chain_id`
/// (1 gwei tip, 100 gwei fee cap): (hash, raw hex).
pub(crate) fn signed_transfer(
    signer: &Signer,
    chain_id: u64,
    nonce: u64,
    value: u64,
) -> (B256, String) {
    let tx = Transaction::Eip1559(Eip1559Tx {
        chain_id,
        nonce,
        max_priority_fee_per_gas: 1_000_000_000,
        max_fee_per_gas: 100_000_000_000,
        gas_limit: 21_000,
        to: TxKind::Call(Address::repeat_byte(0x42)),
        value: U256::from(value),
        input: Bytes::new(),
        access_list: Vec::new(),
    });
    let p = PooledTransaction::new(SignedTransaction::sign(tx, signer), None);
    (
        p.hash(),
        alloy_primitives::hex::encode_prefixed(p.encoded_2718()),
    )
}

/// The engine API's JWT secret of the nodes [`Moat`] starts.
pub(crate) const SECRET_HEX: &str =
    "0x7365637265747365637265747365637265747365637265747365637265747365";

/// A `moat` process on loopback without discovery (its p2p port and node key given),
/// its stdout and stderr in a log file in the datadir (the tail shown when a wait
/// fails); killed on drop, then its engine secret's directory removed.
pub(crate) struct Moat {
    pub child: Child,
    pub log: PathBuf,
    pub http: u16,
    pub auth: u16,
    /// How long [`Moat::wait`] waits.
    pub patience: Duration,
    /// The engine secret's file is in it; dropped after the kill.
    _secrets: tempfile::TempDir,
}

impl Drop for Moat {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Moat {
    /// Starts `moat` on `dir` and `genesis` with `extra` arguments and `env`, and waits
    /// (up to `patience`) for its RPC server and engine API.
    pub(crate) fn start(
        dir: &std::path::Path,
        genesis: &std::path::Path,
        p2p: u16,
        key: u8,
        extra: &[&str],
        env: &[(&str, &str)],
        patience: Duration,
    ) -> Moat {
        let secrets = temp_dir("jwt");
        let secret_file = secrets.path().join("secret.jwt");
        std::fs::write(&secret_file, SECRET_HEX).unwrap();
        let (http, auth) = (free_port(), free_port());
        std::fs::create_dir_all(dir).unwrap();
        let log = dir.join(format!("test-{http}.log"));
        let key_hex = alloy_primitives::hex::encode([key; 32]);
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_moat"))
            .arg("--network")
            .arg(genesis)
            .arg("--datadir")
            .arg(dir)
            .args(["--http", "--http.port", &http.to_string()])
            .args(["--authrpc.port", &auth.to_string()])
            .arg("--authrpc.jwtsecret")
            .arg(&secret_file)
            .args(["--port", &p2p.to_string(), "--p2p.addr", "127.0.0.1"])
            .args(["--nodekeyhex", &key_hex, "--nodiscover"])
            .args(extra)
            .envs(env.iter().copied())
            .stdout(Stdio::from(file.try_clone().unwrap()))
            .stderr(file)
            .spawn()
            .expect("moat starts");
        let node = Moat {
            child,
            log,
            http,
            auth,
            patience,
            _secrets: secrets,
        };
        node.wait("the RPC server", || rpc(http, "eth_chainId", "[]"));
        // The engine API listens a moment after the RPC server (and p2p before both).
        node.wait("the engine API", || {
            TcpStream::connect(("127.0.0.1", auth)).ok().map(drop)
        });
        node
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Polls `f` until it gives a value; past the patience, panics with the log's tail.
    pub(crate) fn wait<T>(&self, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + self.patience;
        loop {
            if let Some(v) = f() {
                return v;
            }
            if Instant::now() > deadline {
                let log = self.log();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                panic!("timed out waiting for {what}; log:\n{}", tail.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// std's kill is SIGKILL on Unix: no shutdown path runs.
    pub(crate) fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// The `result` of an RPC call (null when there is none).
    pub(crate) fn call(&self, method: &str, params: &str) -> serde_json::Value {
        rpc(self.http, method, params).unwrap_or_default()["result"].clone()
    }

    pub(crate) fn head(&self) -> Option<u64> {
        let r = rpc(self.http, "eth_blockNumber", "[]")?;
        u64::from_str_radix(r["result"].as_str()?.trim_start_matches("0x"), 16).ok()
    }

    /// forkchoiceUpdated to `head` (safe and finalized zero, no payload); the payload
    /// status of the answer.
    pub(crate) fn forkchoice(&self, head: &str) -> String {
        let zero = B256::ZERO;
        self.forkchoice_status(&format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"engine_forkchoiceUpdatedV3","params":[{{"headBlockHash":"{head}","safeBlockHash":"{zero}","finalizedBlockHash":"{zero}"}},null]}}"#
        ))
    }

    /// Calls `method` on the engine API with a fresh token; the answer's `result`
    /// (panics on an error answer).
    pub(crate) fn engine(&self, method: &str, params: serde_json::Value) -> serde_json::Value {
        let secret = moat_rpc::engine::parse_jwt_secret(SECRET_HEX).unwrap();
        let bearer = format!(
            "Authorization: Bearer {}\r\n",
            moat_rpc::engine::make_token(&secret, moat_rpc::engine::unix_now())
        );
        let body =
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let (_, response) =
            post(self.auth, &bearer, &body.to_string()).expect("the engine answers");
        assert!(response["error"].is_null(), "{method}: {response}");
        response["result"].clone()
    }

    /// One block on `parent` at `timestamp` (Osaka), from the pool: built
    /// (forkchoiceUpdated with attributes), fetched (getPayloadV5), imported
    /// (newPayloadV4) and made the head; its execution payload.
    pub(crate) fn build_block(&self, parent: &str, timestamp: u64) -> serde_json::Value {
        use serde_json::json;
        let zero = format!("0x{}", "00".repeat(32));
        let built = self.engine(
            "engine_forkchoiceUpdatedV3",
            json!([
                {"headBlockHash": parent, "safeBlockHash": zero, "finalizedBlockHash": zero},
                {
                    "timestamp": format!("{timestamp:#x}"),
                    "prevRandao": zero,
                    "suggestedFeeRecipient": format!("0x{}", "11".repeat(20)),
                    "withdrawals": [],
                    "parentBeaconBlockRoot": zero
                }
            ]),
        );
        let id = built["payloadId"]
            .as_str()
            .expect("a payload id")
            .to_string();
        let envelope = self.engine("engine_getPayloadV5", json!([id]));
        let payload = envelope["executionPayload"].clone();
        let status = self.engine(
            "engine_newPayloadV4",
            json!([payload, [], zero, envelope["executionRequests"]]),
        );
        assert_eq!(status["status"], "VALID", "{status}");
        assert_eq!(
            self.forkchoice(payload["blockHash"].as_str().unwrap()),
            "VALID"
        );
        payload
    }

    /// Posts forkchoiceUpdated `body` to the engine API with a fresh token; the payload
    /// status of the answer.
    pub(crate) fn forkchoice_status(&self, body: &str) -> String {
        let secret = moat_rpc::engine::parse_jwt_secret(SECRET_HEX).unwrap();
        let bearer = format!(
            "Authorization: Bearer {}\r\n",
            moat_rpc::engine::make_token(&secret, moat_rpc::engine::unix_now())
        );
        let (_, response) = post(self.auth, &bearer, body).expect("the engine answers");
        response["result"]["payloadStatus"]["status"]
            .as_str()
            .unwrap_or_else(|| panic!("{response}"))
            .to_string()
    }
}

/// The loopback enode of a node started with key `key` on `port`.
pub(crate) fn enode(key: u8, port: u16) -> String {
    let secret = secp256k1::SecretKey::from_byte_array([key; 32]).unwrap();
    let id = moat_p2p::rlpx::peer_id(&secret.public_key(secp256k1::SECP256K1));
    format!(
        "enode://{}@127.0.0.1:{port}",
        alloy_primitives::hex::encode(id)
    )
}

/// The head the datadir holds, after checking that its stored state is that head's: the
/// state trie's root is the head header's state root. `None` when a kill came before the
/// genesis commit (a loaded machine can take longer than the shortest wait to get there).
pub(crate) fn consistent_head(dir: &std::path::Path) -> Option<(u64, B256)> {
    let store = moat_storage::Store::open(dir, None).unwrap();
    let (number, hash) = store.head().unwrap()?;
    let rlp = store.header_rlp(&hash).unwrap().unwrap();
    let header = moat_common::block::Header::decode(&mut &rlp[..]).unwrap();
    assert_eq!(
        moat_blockchain::state_root::stored_state_root(&store).unwrap(),
        header.state_root,
        "the state at #{number} is its header's"
    );
    Some((number, hash))
}

/// A node's Prometheus text from its exporter on `port`.
pub(crate) fn scrape(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body)
}

/// The value of the series `name` (with its labels, if any, as written) on the exporter
/// on `port`.
pub(crate) fn metric(port: u16, name: &str) -> Option<f64> {
    scrape(port)?
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}
