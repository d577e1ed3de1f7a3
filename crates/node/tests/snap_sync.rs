//! Snap sync between two `moat` processes on loopback. A imported a generated chain
//! (a genesis of 20,000 funded accounts, then blocks that deploy contracts, write their
//! storage and create accounts); B starts from genesis with A as its only peer and the
//! default sync mode. The forkchoiceUpdated to A's head sends B downloading the state at
//! the pivot (64 below the head) by snap/1 and full-syncing the rest on top of it. B is
//! killed with SIGKILL while it downloads, restarts, says it resumed, and ends at A's head
//! with A's state root, reading accounts, code and storage as A does.

mod common;

use alloy_primitives::{Address, B256};
use common::{Moat, enode, free_port, rpc};
use moat_chaingen::{Generator, Params};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(90);
const SENDERS: usize = 20_000;
const BLOCKS: u64 = 80;

/// A node on `genesis`; small snap answers, so that the download takes long enough to
/// be interrupted.
fn start(dir: &Path, genesis: &Path, p2p: u16, key: u8, extra: &[&str]) -> Moat {
    let extra = [extra, &["--snap.responsebytes", "2048"]].concat();
    Moat::start(dir, genesis, p2p, key, &extra, &[], WAIT)
}

fn forkchoice(node: &Moat, head: &str) -> String {
    let zero = B256::ZERO;
    node.forkchoice_status(&format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"engine_forkchoiceUpdatedV3","params":[{{"headBlockHash":"{head}","safeBlockHash":"{zero}","finalizedBlockHash":"{zero}"}},null]}}"#
    ))
}

fn one_peer(node: &Moat) -> Option<()> {
    (rpc(node.http, "net_peerCount", "[]")?["result"] == "0x1").then_some(())
}

fn datadir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("moat-snap-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
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
    let a = start(&a_dir, &genesis, a_port, 0x61, &["--syncmode", "full"]);
    assert_eq!(a.head(), Some(BLOCKS));
    let head = a.call("eth_getBlockByNumber", r#"["latest", false]"#);
    let head_hash = head["hash"].as_str().unwrap().to_string();
    let a_enode = enode(0x61, a_port);

    // B: a fresh datadir, the default sync mode (snap).
    let b_dir = datadir("b");
    let b_port = free_port();
    let b = start(&b_dir, &genesis, b_port, 0x62, &["--bootnodes", &a_enode]);
    b.wait("B to connect to A", || one_peer(&b));
    assert_eq!(forkchoice(&b, &head_hash), "SYNCING");
    // Killed once eth_syncing shows accounts downloaded, before the state is complete.
    let accounts_before = b.wait("B to download some accounts", || {
        let s = b.call("eth_syncing", "[]");
        let n =
            u64::from_str_radix(s["syncedAccounts"].as_str()?.trim_start_matches("0x"), 16).ok()?;
        (n > 0).then_some(n)
    });
    // geth's healing fields, zero without a pivot move.
    let s = b.call("eth_syncing", "[]");
    for field in [
        "healedTrienodes",
        "healedTrienodeBytes",
        "healedBytecodes",
        "healingTrienodes",
        "healingBytecode",
    ] {
        assert_eq!(s[field], "0x0", "{field}: {s}");
    }
    assert_eq!(b.head(), Some(0), "still downloading when killed");
    b.kill9();

    let b = start(&b_dir, &genesis, b_port, 0x62, &["--bootnodes", &a_enode]);
    b.wait("B to reconnect to A", || one_peer(&b));
    assert_eq!(forkchoice(&b, &head_hash), "SYNCING");
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
