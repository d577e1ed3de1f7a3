//! Full sync between two `moat` processes on loopback: A imported the conformance chain,
//! B starts from genesis with A as its only peer, and the engine API's
//! forkchoiceUpdated to the chain's head sends B fetching and executing it. A B killed
//! with SIGKILL mid-sync restarts at a consistent head (short of where it was by at most
//! the blocks of the last second, 256 at most) and finishes from there without going
//! back.

mod common;

use common::{free_port, import_ethtest, post, rpc, testdata};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SECRET_HEX: &str = "0x7365637265747365637265747365637265747365637265747365637265747365";
const HEAD_HASH: &str = "0x44e3809c9a3cda717f00aea3a9da336d149612c8d5657fbc0028176ef8d94d2a";
const WAIT: Duration = Duration::from_secs(120);

/// A `moat` process whose log goes to a file (shown when a wait fails); killed on drop.
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
    fn start(dir: &Path, p2p: u16, key: u8, extra: &[&str]) -> Moat {
        let secret_file = dir.with_extension("jwt");
        std::fs::write(&secret_file, SECRET_HEX).unwrap();
        let (http, auth) = (free_port(), free_port());
        std::fs::create_dir_all(dir).unwrap();
        let log = dir.join(format!("test-{http}.log"));
        let key_hex = alloy_primitives::hex::encode([key; 32]);
        let child = Command::new(env!("CARGO_BIN_EXE_moat"))
            .arg("--network")
            .arg(testdata("genesis.json"))
            .arg("--datadir")
            .arg(dir)
            .args(["--http", "--http.port", &http.to_string()])
            .args(["--authrpc.port", &auth.to_string()])
            .arg("--authrpc.jwtsecret")
            .arg(&secret_file)
            .args(["--port", &p2p.to_string(), "--p2p.addr", "127.0.0.1"])
            .args(["--nodekeyhex", &key_hex, "--nodiscover"])
            // Full sync: every block executed (snap, the default, is tests/snap_sync.rs).
            .args(["--syncmode", "full"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
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

    fn wait<T>(&self, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(v) = f() {
                return v;
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                panic!("timed out waiting for {what}; log:\n{}", tail.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn kill9(mut self) {
        // std's kill is SIGKILL on Unix: no shutdown path runs.
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    fn head(&self) -> Option<u64> {
        let r = rpc(self.http, "eth_blockNumber", "[]")?;
        u64::from_str_radix(r["result"].as_str()?.trim_start_matches("0x"), 16).ok()
    }

    fn latest(&self) -> Value {
        rpc(self.http, "eth_getBlockByNumber", r#"["latest", false]"#).unwrap()["result"].clone()
    }

    fn syncing(&self) -> Value {
        rpc(self.http, "eth_syncing", "[]").unwrap()["result"].clone()
    }

    fn forkchoice_to_head(&self) -> String {
        let secret = moat_rpc::engine::parse_jwt_secret(SECRET_HEX).unwrap();
        let bearer = format!(
            "Authorization: Bearer {}\r\n",
            moat_rpc::engine::make_token(&secret, moat_rpc::engine::unix_now())
        );
        let fcu = std::fs::read_to_string(testdata("headfcu.json")).unwrap();
        let (_, response) = post(self.auth, &bearer, &fcu).expect("the engine answers");
        response["result"]["payloadStatus"]["status"]
            .as_str()
            .unwrap_or_else(|| panic!("{response}"))
            .to_string()
    }
}

fn datadir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("moat-sync-{tag}-{}", std::process::id()));
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

/// Node A, serving the imported conformance chain.
fn server(tag: &str) -> (Moat, String, PathBuf) {
    let dir = datadir(&format!("{tag}-a"));
    import_ethtest(&dir);
    let port = free_port();
    let a = Moat::start(&dir, port, 0x51, &[]);
    assert_eq!(a.head(), Some(600));
    (a, enode(0x51, port), dir)
}

fn check_syncing_object(s: &Value, starting: u64) {
    let n = |k: &str| {
        u64::from_str_radix(
            s[k].as_str()
                .unwrap_or_else(|| panic!("{s}"))
                .trim_start_matches("0x"),
            16,
        )
        .unwrap()
    };
    assert_eq!(n("startingBlock"), starting, "{s}");
    assert!(n("currentBlock") >= starting, "{s}");
    assert!(n("highestBlock") >= n("currentBlock"), "{s}");
    assert!(
        n("highestBlock") == 600 || n("highestBlock") == n("currentBlock"),
        "{s}"
    );
}

#[test]
fn a_fresh_node_syncs_the_chain_from_a_peer() {
    let (a, a_enode, a_dir) = server("fresh");
    let b_dir = datadir("fresh-b");
    let b = Moat::start(&b_dir, free_port(), 0x52, &["--bootnodes", &a_enode]);
    assert_eq!(b.syncing(), Value::Bool(false));
    b.wait("B to connect to A", || {
        (rpc(b.http, "net_peerCount", "[]")?["result"] == "0x1").then_some(())
    });

    assert_eq!(b.forkchoice_to_head(), "SYNCING");
    let mut objects = 0;
    b.wait("B to reach #600", || {
        let s = b.syncing();
        if s.is_object() {
            check_syncing_object(&s, 0);
            objects += 1;
        }
        (b.head()? == 600).then_some(())
    });
    b.wait("eth_syncing to answer false", || {
        (b.syncing() == Value::Bool(false)).then_some(())
    });
    let (ours, theirs) = (b.latest(), a.latest());
    assert_eq!(ours["hash"], HEAD_HASH);
    assert_eq!(ours["stateRoot"], theirs["stateRoot"]);
    assert_eq!(ours["receiptsRoot"], theirs["receiptsRoot"]);
    // At the head: the engine answers VALID again.
    assert_eq!(b.forkchoice_to_head(), "VALID");
    eprintln!("eth_syncing answered a progress object {objects} times");
    drop((a, b));
    let _ = std::fs::remove_dir_all(&a_dir);
    let _ = std::fs::remove_dir_all(&b_dir);
}

#[test]
fn a_node_killed_mid_sync_resumes_from_its_head() {
    let (a, a_enode, a_dir) = server("kill");
    let b_dir = datadir("kill-b");
    let port = free_port();
    let b = Moat::start(&b_dir, port, 0x53, &["--bootnodes", &a_enode]);
    b.wait("B to connect to A", || {
        (rpc(b.http, "net_peerCount", "[]")?["result"] == "0x1").then_some(())
    });
    assert_eq!(b.forkchoice_to_head(), "SYNCING");
    let at_kill = b.wait("B to pass #100", || b.head().filter(|n| *n > 100));
    b.kill9();

    let b = Moat::start(&b_dir, port, 0x53, &["--bootnodes", &a_enode]);
    // Imports commit relaxed: the store makes them durable within a second or 256
    // commits, whichever comes first, so the head after the crash is at most 256 blocks
    // short of the one seen before it.
    let restarted = b.head().unwrap();
    assert!(
        restarted > 0 && restarted + 256 >= at_kill,
        "head went back: {at_kill} before the kill, {restarted} after"
    );
    b.wait("B to reconnect to A", || {
        (rpc(b.http, "net_peerCount", "[]")?["result"] == "0x1").then_some(())
    });
    let status = b.forkchoice_to_head();
    assert!(
        status == "SYNCING" || (restarted == 600 && status == "VALID"),
        "{status}"
    );
    let mut last = restarted;
    b.wait("B to reach #600 again", || {
        let s = b.syncing();
        if s.is_object() {
            check_syncing_object(&s, restarted);
        }
        let n = b.head()?;
        assert!(n >= last, "head went back from {last} to {n}");
        last = n;
        (n == 600).then_some(())
    });
    assert_eq!(b.latest()["hash"], HEAD_HASH);
    assert_eq!(b.latest()["stateRoot"], a.latest()["stateRoot"]);
    eprintln!("killed at #{at_kill} (or later), restarted at #{restarted}");
    drop((a, b));
    let _ = std::fs::remove_dir_all(&a_dir);
    let _ = std::fs::remove_dir_all(&b_dir);
}
