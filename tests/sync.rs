//! Full sync between two `moat` processes on loopback: A imported the conformance chain,
//! B starts from genesis with A as its only peer, and the engine API's
//! forkchoiceUpdated to the chain's head sends B fetching and executing it. A B killed
//! with SIGKILL mid-sync restarts at a consistent head (short of where it was by at most
//! the blocks of the last second, 256 at most) and finishes from there without going
//! back.

mod common;

use common::{Moat, TempPath, enode, free_port, import_ethtest, rpc, testdata};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

const HEAD_HASH: &str = "0x44e3809c9a3cda717f00aea3a9da336d149612c8d5657fbc0028176ef8d94d2a";
const WAIT: Duration = Duration::from_secs(120);

/// A node on the conformance chain's genesis, full-syncing (snap, the default, is
/// tests/snap_sync.rs).
fn start(dir: &Path, p2p: u16, key: u8, extra: &[&str]) -> Moat {
    let args = [&["--syncmode", "full"], extra].concat();
    Moat::start(dir, &testdata("genesis.json"), p2p, key, &args, &[], WAIT)
}

trait FullSync {
    fn latest(&self) -> Value;
    fn syncing(&self) -> Value;
    fn forkchoice_to_head(&self) -> String;
}

impl FullSync for Moat {
    fn latest(&self) -> Value {
        self.call("eth_getBlockByNumber", r#"["latest", false]"#)
    }

    fn syncing(&self) -> Value {
        self.call("eth_syncing", "[]")
    }

    fn forkchoice_to_head(&self) -> String {
        self.forkchoice_status(&std::fs::read_to_string(testdata("headfcu.json")).unwrap())
    }
}

fn datadir(tag: &str) -> TempPath {
    common::temp_path(&format!("sync-{tag}"))
}

/// Node A, serving the imported conformance chain: its datadir (first, so that it is
/// dropped after the node), the node and its enode.
fn server(tag: &str) -> (TempPath, Moat, String) {
    let dir = datadir(&format!("{tag}-a"));
    import_ethtest(&dir);
    let port = free_port();
    let a = start(&dir, port, 0x51, &[]);
    assert_eq!(a.head(), Some(600));
    (dir, a, enode(0x51, port))
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
    let (_a_dir, a, a_enode) = server("fresh");
    let b_dir = datadir("fresh-b");
    let b = start(&b_dir, free_port(), 0x52, &["--bootnodes", &a_enode]);
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
}

#[test]
fn a_node_killed_mid_sync_resumes_from_its_head() {
    let (_a_dir, a, a_enode) = server("kill");
    let b_dir = datadir("kill-b");
    let port = free_port();
    let b = start(&b_dir, port, 0x53, &["--bootnodes", &a_enode]);
    b.wait("B to connect to A", || {
        (rpc(b.http, "net_peerCount", "[]")?["result"] == "0x1").then_some(())
    });
    assert_eq!(b.forkchoice_to_head(), "SYNCING");
    let at_kill = b.wait("B to pass #100", || b.head().filter(|n| *n > 100));
    b.kill9();

    let b = start(&b_dir, port, 0x53, &["--bootnodes", &a_enode]);
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
}
