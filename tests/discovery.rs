//! Discovery between `moat` processes on loopback: A is a bootnode with no bootnodes of
//! its own; B and C are given only A. B and C must find each other through A's table
//! and connect over RLPx, so each ends with two peers: once over discv4 (A given as an
//! enode), once over discv5 alone (discv4 off, A given as its discv5 record).
//!
//! Every node listens on 127.0.0.1 and is given only loopback bootnodes, and the genesis
//! file is the test chain's (built-in bootnodes exist only for `--network
//! mainnet|sepolia|hoodi`), so nothing here reaches a public address.

mod common;

use common::{free_port, rpc, testdata};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(90);

struct Moat {
    child: Child,
    log: PathBuf,
    http: u16,
}

impl Drop for Moat {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Moat {
    fn start(dir: &Path, key: u8, bootnodes: Option<&str>) -> (Moat, String) {
        Self::start_with(dir, key, bootnodes, &[])
    }

    fn start_with(dir: &Path, key: u8, bootnodes: Option<&str>, extra: &[&str]) -> (Moat, String) {
        std::fs::create_dir_all(dir).unwrap();
        let (http, auth, p2p) = (free_port(), free_port(), free_port());
        let log = dir.join("moat.log");
        let key_hex = alloy_primitives::hex::encode([key; 32]);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_moat"));
        cmd.arg("--network")
            .arg(testdata("genesis.json"))
            .arg("--datadir")
            .arg(dir)
            .args(http_flag())
            .args(["--http.port", &http.to_string()])
            .args(["--authrpc.port", &auth.to_string()])
            .args(["--port", &p2p.to_string(), "--p2p.addr", "127.0.0.1"])
            // discv5 on any free port: parallel tests must not meet on its default.
            .args(["--discovery.v5.port", "0"])
            .args(["--nodekeyhex", &key_hex])
            .args(extra);
        if let Some(b) = bootnodes {
            // An enode names its address; a record is one our own loopback node logged.
            assert!(
                b.contains("@127.0.0.1:") || b.starts_with("enr:"),
                "loopback bootnodes only"
            );
            cmd.args(["--bootnodes", b]);
        }
        let child = cmd
            // The log goes to stdout.
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(dir.join("moat.err")).unwrap())
            .spawn()
            .expect("moat starts");
        let node = Moat { child, log, http };
        node.wait("the RPC server", || rpc(http, "eth_chainId", "[]"));
        let id = secp256k1::SecretKey::from_byte_array([key; 32])
            .unwrap()
            .public_key(secp256k1::SECP256K1)
            .serialize_uncompressed();
        let enode = format!(
            "enode://{}@127.0.0.1:{p2p}",
            alloy_primitives::hex::encode(&id[1..])
        );
        (node, enode)
    }

    /// The discv5 record the node logged, once it listens on loopback.
    fn discv5_record(&self) -> String {
        self.wait("discv5 to listen", || {
            let log = std::fs::read_to_string(&self.log).ok()?;
            let line = log.lines().find(|l| l.contains("discv5 listening"))?;
            assert!(line.contains("127.0.0.1:"), "discv5 off loopback: {line}");
            let at = line.find("enr:")?;
            let record: String = line[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '-' | '_'))
                .collect();
            (record.len() > 10).then_some(record)
        })
    }

    fn peer_count(&self) -> Option<u64> {
        let v = rpc(self.http, "net_peerCount", "[]")?;
        u64::from_str_radix(v["result"].as_str()?.trim_start_matches("0x"), 16).ok()
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
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// `--http` where the build serves HTTP only when asked (builds without the flag serve
/// it always).
fn http_flag() -> &'static [&'static str] {
    static FLAG: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let asked = *FLAG.get_or_init(|| {
        let out = Command::new(env!("CARGO_BIN_EXE_moat"))
            .arg("--help")
            .output()
            .expect("moat runs");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.trim_start().starts_with("--http ") || l.trim() == "--http")
    });
    if asked { &["--http"] } else { &[] }
}

#[test]
fn nodes_given_one_bootnode_find_each_other() {
    let root = common::temp_dir("discovery");
    let tmp = root.path();
    let (a, a_enode) = Moat::start(&tmp.join("a"), 0x61, None);
    let (b, _) = Moat::start(&tmp.join("b"), 0x62, Some(&a_enode));
    let (c, _) = Moat::start(&tmp.join("c"), 0x63, Some(&a_enode));

    // B and C keep A connected (it is their bootnode); the second peer of each can only
    // be the other, found through discovery.
    for (name, node) in [("B", &b), ("C", &c)] {
        node.wait(&format!("{name} to find its second peer"), || {
            (node.peer_count()? >= 2).then_some(())
        });
    }
    a.wait("A to hold both", || (a.peer_count()? >= 2).then_some(()));
    drop((a, b, c));
}

#[test]
fn nodes_given_one_discv5_record_find_each_other_without_discv4() {
    let root = common::temp_dir("discovery-v5");
    let tmp = root.path();
    let v5_only = ["--discovery.v4=false"];
    let (a, _) = Moat::start_with(&tmp.join("a"), 0x71, None, &v5_only);
    let record = a.discv5_record();
    let (b, _) = Moat::start_with(&tmp.join("b"), 0x72, Some(&record), &v5_only);
    let (c, _) = Moat::start_with(&tmp.join("c"), 0x73, Some(&record), &v5_only);

    // With discv4 off and A known only by its record, every connection here comes from
    // discv5: B and C find A and each other in its table.
    for (name, node) in [("B", &b), ("C", &c)] {
        node.wait(&format!("{name} to find two peers over discv5"), || {
            (node.peer_count()? >= 2).then_some(())
        });
    }
    a.wait("A to hold both", || (a.peer_count()? >= 2).then_some(()));
    drop((a, b, c));
}
