//! Snap sync between two `moat` processes on loopback. A imported a generated chain
//! (a genesis of 20,000 funded accounts, then blocks that deploy contracts, write their
//! storage and create accounts); B starts from genesis with A as its only peer and the
//! default sync mode. The forkchoiceUpdated to A's head sends B downloading the state at
//! the pivot (64 below the head) by snap/1 and full-syncing the rest on top of it. B is
//! killed with SIGKILL while it downloads, restarts, says it resumed, and ends at A's head
//! with A's state root, reading accounts, code and storage as A does.

mod common;

use alloy_primitives::{Address, B256};
use common::{free_port, post, rpc};
use moat_chaingen::{Generator, Params};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SECRET_HEX: &str = "0x7365637265747365637265747365637265747365637265747365637265747365";
const WAIT: Duration = Duration::from_secs(90);
const SENDERS: usize = 20_000;
const BLOCKS: u64 = 80;

struct Moat {
    child: Child,
    log: PathBuf,
    http: u16,
    auth: u16,
}

impl Drop for Moat {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Moat {
    fn start(dir: &Path, genesis: &Path, p2p: u16, key: u8, extra: &[&str]) -> Moat {
        let secret_file = dir.with_extension("jwt");
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
            // Small snap answers: the download takes long enough to be interrupted.
            .env("MOAT_SNAP_RESPONSE_BYTES", "2048")
            .stdout(Stdio::from(file.try_clone().unwrap()))
            .stderr(file)
            .spawn()
            .expect("moat starts");
        let node = Moat {
            child,
            log,
            http,
            auth,
        };
        node.wait("the RPC server", || rpc(http, "eth_chainId", "[]"));
        node
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait<T>(&self, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + WAIT;
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

    fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    fn call(&self, method: &str, params: &str) -> Value {
        rpc(self.http, method, params).unwrap_or_default()["result"].clone()
    }

    fn head(&self) -> Option<u64> {
        let r = rpc(self.http, "eth_blockNumber", "[]")?;
        u64::from_str_radix(r["result"].as_str()?.trim_start_matches("0x"), 16).ok()
    }

    fn forkchoice(&self, head: &str) -> String {
        let secret = moat_rpc::engine::parse_jwt_secret(SECRET_HEX).unwrap();
        let bearer = format!(
            "Authorization: Bearer {}\r\n",
            moat_rpc::engine::make_token(&secret, moat_rpc::engine::unix_now())
        );
        let zero = B256::ZERO;
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"engine_forkchoiceUpdatedV3","params":[{{"headBlockHash":"{head}","safeBlockHash":"{zero}","finalizedBlockHash":"{zero}"}},null]}}"#
        );
        let (_, response) = post(self.auth, &bearer, &body).expect("the engine answers");
        response["result"]["payloadStatus"]["status"]
            .as_str()
            .unwrap_or_else(|| panic!("{response}"))
            .to_string()
    }

    fn peers(&self) -> Option<()> {
        (rpc(self.http, "net_peerCount", "[]")?["result"] == "0x1").then_some(())
    }
}

fn datadir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("moat-snap-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn enode(key: u8, port: u16) -> String {
    let secret = secp256k1::SecretKey::from_byte_array([key; 32]).unwrap();
    let id = moat_p2p::rlpx::peer_id(&secret.public_key(secp256k1::SECP256K1));
    format!(
        "enode://{}@127.0.0.1:{port}",
        alloy_primitives::hex::encode(id)
    )
}

/// The generated chain in `dir` (genesis.json, chain.rlp); the senders' addresses.
fn generate(dir: &Path) -> Vec<Address> {
    std::fs::create_dir_all(dir).unwrap();
    let mut g = Generator::new(Params {
        senders: SENDERS,
        txs_per_block: 40,
        deploy_percent: 25,
        call_percent: 35,
        fresh_percent: 60,
        ..Params::default()
    })
    .unwrap();
    let mut rlp = Vec::new();
    for _ in 0..BLOCKS {
        rlp.extend_from_slice(&g.next_block().unwrap().encode());
    }
    std::fs::write(
        dir.join("genesis.json"),
        serde_json::to_string(g.genesis()).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.join("chain.rlp"), rlp).unwrap();
    g.senders().iter().map(|s| s.address()).collect()
}

fn import(datadir: &Path, gen_dir: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_moat"))
        .arg("import")
        .arg(gen_dir.join("chain.rlp"))
        .arg("--network")
        .arg(gen_dir.join("genesis.json"))
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

/// Contracts the chain deployed (from A's receipts).
fn contracts(a: &Moat) -> Vec<String> {
    let mut out = Vec::new();
    for n in 1..=BLOCKS {
        let receipts = a.call("eth_getBlockReceipts", &format!(r#"["{n:#x}"]"#));
        for r in receipts.as_array().into_iter().flatten() {
            if let Some(c) = r["contractAddress"].as_str() {
                out.push(c.to_string());
            }
        }
    }
    out
}

#[test]
fn a_fresh_node_snap_syncs_a_large_state_and_resumes_after_kill_9() {
    let gen_dir = datadir("gen");
    let senders = generate(&gen_dir);
    let genesis = gen_dir.join("genesis.json");
    let a_dir = datadir("a");
    import(&a_dir, &gen_dir);
    let a_port = free_port();
    let a = Moat::start(&a_dir, &genesis, a_port, 0x61, &["--syncmode", "full"]);
    assert_eq!(a.head(), Some(BLOCKS));
    let head = a.call("eth_getBlockByNumber", r#"["latest", false]"#);
    let head_hash = head["hash"].as_str().unwrap().to_string();
    let a_enode = enode(0x61, a_port);

    // B: a fresh datadir, the default sync mode (snap).
    let b_dir = datadir("b");
    let b_port = free_port();
    let b = Moat::start(&b_dir, &genesis, b_port, 0x62, &["--bootnodes", &a_enode]);
    b.wait("B to connect to A", || b.peers());
    assert_eq!(b.forkchoice(&head_hash), "SYNCING");
    // Killed once eth_syncing shows accounts downloaded, before the state is complete.
    let accounts_before = b.wait("B to download some accounts", || {
        let s = b.call("eth_syncing", "[]");
        let n =
            u64::from_str_radix(s["syncedAccounts"].as_str()?.trim_start_matches("0x"), 16).ok()?;
        (n > 0).then_some(n)
    });
    assert_eq!(b.head(), Some(0), "still downloading when killed");
    b.kill9();

    let b = Moat::start(&b_dir, &genesis, b_port, 0x62, &["--bootnodes", &a_enode]);
    b.wait("B to reconnect to A", || b.peers());
    assert_eq!(b.forkchoice(&head_hash), "SYNCING");
    b.wait("B to reach A's head", || {
        (b.head()? == BLOCKS).then_some(())
    });
    let log = b.log();
    assert!(log.contains("snap sync resumed"), "{log}");
    assert!(log.contains("snap sync complete"), "{log}");
    eprintln!("killed after {accounts_before} accounts, resumed");

    let ours = b.call("eth_getBlockByNumber", r#"["latest", false]"#);
    assert_eq!(ours["hash"], head["hash"]);
    assert_eq!(ours["stateRoot"], head["stateRoot"]);
    // A sample of the senders (every 97th), and every contract's code and first slots.
    for s in senders.iter().step_by(97) {
        for method in ["eth_getBalance", "eth_getTransactionCount"] {
            let params = format!(r#"["{s}", "latest"]"#);
            assert_eq!(
                b.call(method, &params),
                a.call(method, &params),
                "{method} {s}"
            );
        }
    }
    let contracts = contracts(&a);
    assert!(contracts.len() > 50, "{} contracts", contracts.len());
    for c in &contracts {
        let params = format!(r#"["{c}", "latest"]"#);
        let code = a.call("eth_getCode", &params);
        assert_ne!(code, "0x");
        assert_eq!(b.call("eth_getCode", &params), code, "code of {c}");
        for slot in ["0x0", "0x1", "0x2"] {
            let params = format!(r#"["{c}", "{slot}", "latest"]"#);
            assert_eq!(
                b.call("eth_getStorageAt", &params),
                a.call("eth_getStorageAt", &params),
                "slot {slot} of {c}"
            );
        }
    }
    drop((a, b));
    for d in [gen_dir, a_dir, b_dir] {
        let _ = std::fs::remove_dir_all(&d);
        let _ = std::fs::remove_file(d.with_extension("jwt"));
    }
}
