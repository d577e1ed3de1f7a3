//! `moat import` replays the devp2p conformance chain the way hive prepares a client, and
//! resumes after being killed half-way.

mod common;

use alloy_primitives::{Address, B256, U256};
use moat_storage::Store;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/testdata/ethtest")
        .join(name)
}

fn datadir(tag: &str) -> common::TempPath {
    common::temp_path(&format!("import-{tag}"))
}

fn import(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_moat"));
    cmd.arg("import")
        .arg(testdata("chain.rlp"))
        .arg("--network")
        .arg(testdata("genesis.json"))
        .arg("--datadir")
        .arg(dir);
    cmd
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("moat runs");
    assert!(
        out.status.success(),
        "moat failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

const HEAD: &str = "0x44e3809c9a3cda717f00aea3a9da336d149612c8d5657fbc0028176ef8d94d2a";

fn assert_head_state(dir: &Path) {
    let store = Store::open(dir, None).unwrap();
    let (number, hash) = store.head().unwrap().unwrap();
    assert_eq!(number, 600);
    assert_eq!(hash, HEAD.parse::<B256>().unwrap());

    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("headstate.json")).unwrap())
            .unwrap();
    let header_rlp = store.header_rlp(&hash).unwrap().unwrap();
    let header = moat_common::block::Header::decode(&mut &header_rlp[..]).unwrap();
    let root: B256 = format!(
        "0x{}",
        state["root"].as_str().unwrap().trim_start_matches("0x")
    )
    .parse()
    .unwrap();
    assert_eq!(header.state_root, root);
    let accounts = state["accounts"].as_object().unwrap();
    assert_eq!(store.accounts().unwrap().len(), accounts.len());
    for (address, want) in accounts {
        let address: Address = address.parse().unwrap();
        let got = store
            .account(&address)
            .unwrap()
            .unwrap_or_else(|| panic!("{address} exists"));
        assert_eq!(
            got.balance,
            U256::from_str_radix(want["balance"].as_str().unwrap(), 10).unwrap(),
            "{address}"
        );
        assert_eq!(got.nonce, want["nonce"].as_u64().unwrap(), "{address}");
        assert_eq!(
            got.storage_root,
            want["root"].as_str().unwrap().parse::<B256>().unwrap(),
            "{address}"
        );
    }
}

#[test]
fn imports_the_ethtest_chain_and_a_second_import_is_a_no_op() {
    let dir = datadir("full");
    let out = run(&mut import(&dir));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("head #600"), "{stdout}");
    assert_head_state(&dir);

    let again = run(&mut import(&dir));
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert!(
        stdout.contains("imported 0 blocks (600 already present)"),
        "{stdout}"
    );
}

/// `kill -9` at moments spread over the import (five kills on one datadir): each time the
/// datadir reopens at a head whose stored state matches its header, and the next run
/// resumes from there, ending at the chain's head with the right state.
#[test]
fn a_killed_import_resumes_at_the_same_head() {
    let dir = datadir("killed");
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
        | 1;
    let mut last: Option<u64> = None;
    for trial in 0..5 {
        let mut child = import(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let wait = Duration::from_millis(40 + seed % 1_200);
        std::thread::sleep(wait);
        let _ = child.kill();
        let _ = child.wait();
        match common::consistent_head(&dir) {
            Some((number, _)) => {
                eprintln!("trial {trial}: killed after {wait:?}, reopened at #{number}");
                assert!(number >= last.unwrap_or(0), "the head never goes back");
                last = Some(number);
            }
            None => {
                eprintln!("trial {trial}: killed after {wait:?}, before the genesis commit");
                assert_eq!(last, None, "a datadir that had a head keeps one");
            }
        }
    }
    run(&mut import(&dir));
    assert_head_state(&dir);
    assert_eq!(common::consistent_head(&dir).map(|(n, _)| n), Some(600));
}

#[test]
fn another_chains_datadir_is_refused() {
    let dir = datadir("other");
    run(Command::new(env!("CARGO_BIN_EXE_moat"))
        .args(["init", "--network"])
        .arg(testdata("genesis.json"))
        .arg("--datadir")
        .arg(&dir));
    let other = dir.join("other-genesis.json");
    let mut genesis: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("genesis.json")).unwrap()).unwrap();
    genesis["extraData"] = serde_json::Value::String("0x01".into());
    std::fs::write(&other, genesis.to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_moat"))
        .args(["init", "--network"])
        .arg(&other)
        .arg("--datadir")
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("genesis"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `moat init --network <name>` writes the built-in network's block 0, the one its clients
/// publish, and a second init of the same datadir is a no-op.
#[test]
fn init_writes_the_builtin_networks_genesis() {
    for (name, hash) in [
        (
            "mainnet",
            "0xd4e56740f876aef8c010b86a40d5f56745a118d0906a34e69aec8c0db1cb8fa3",
        ),
        (
            "sepolia",
            "0x25a5cc106eea7138acab33231d7160d69cb777ee0c2c553fcddf5138993e6dd9",
        ),
        (
            "hoodi",
            "0xbbe312868b376a3001692a646dd2d7d1e4406380dfd86b98aa8a34d1557c971b",
        ),
    ] {
        let dir = datadir(name);
        for _ in 0..2 {
            let out = run(Command::new(env!("CARGO_BIN_EXE_moat"))
                .args(["init", "--network", name, "--datadir"])
                .arg(&dir));
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                stdout.contains(&format!("genesis {hash}")) && stdout.contains("head #0"),
                "{name}: {stdout}"
            );
        }
    }
}
