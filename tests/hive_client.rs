//! hive's client definition (`hive/moat`): its start script turns the environment of
//! hive's simulators into moat's genesis and flags, and, given the conformance chain as
//! hive mounts it, imports it and serves it. Needs bash and jq (the container has both);
//! without them the tests say so and check nothing.

mod common;

use common::{free_port, rpc, testdata, wait_for};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn script_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("hive/moat")
}

/// The hive start script runs under bash and reads its environment with jq: a machine
/// without them fails here, saying so, rather than passing without the check.
fn require_tools() {
    for tool in ["bash", "jq"] {
        let present = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            present,
            "{tool} is missing: the hive start script needs it (Debian: apt install {tool})"
        );
    }
}

/// The environment hive's devp2p `eth` suite (and rpc-compat) gives: the chain's
/// `forkenv.json`.
fn forkenv() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(testdata("forkenv.json")).unwrap();
    let v: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
    v.into_iter()
        .map(|(k, v)| (k, v.as_str().unwrap().to_string()))
        .collect()
}

/// A command running `moat.sh` on the ethtest files with `env`, into `datadir`.
fn script(env: &[(String, String)], datadir: &Path) -> Command {
    let mut c = Command::new("bash");
    c.arg(script_dir().join("moat.sh"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("MOAT_HIVE_ROOT", testdata(""))
        .env("MOAT_DATADIR", datadir)
        .env("MOAT_BIN", env!("CARGO_BIN_EXE_moat"))
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    c
}

/// Runs the script without starting anything: the genesis it wrote and its flags.
fn dry_run(env: &[(String, String)]) -> (Value, Vec<String>) {
    // One directory per run: the tests run side by side.
    let dir = common::temp_dir("hive-dry");
    let datadir = dir.path().join("db");
    let out = script(env, &datadir)
        .env("MOAT_HIVE_DRY_RUN", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let genesis_path = PathBuf::from(format!("{}-genesis.json", datadir.display()));
    let genesis = serde_json::from_str(&std::fs::read_to_string(&genesis_path).unwrap()).unwrap();
    let flags = stdout
        .lines()
        .last()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .map(String::from)
        .collect();
    (genesis, flags)
}

fn flag<'a>(flags: &'a [String], name: &str) -> Option<&'a str> {
    flags
        .iter()
        .position(|f| f == name)
        .and_then(|i| flags.get(i + 1))
        .map(String::as_str)
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn the_chain_environment_becomes_the_genesis_config_hive_meant() {
    require_tools();
    let (genesis, flags) = dry_run(&forkenv());
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("genesis.json")).unwrap()).unwrap();
    // Every key of the chain's own config comes out of the environment with its value.
    let (want, got) = (&expected["config"], &genesis["config"]);
    for (key, value) in want.as_object().unwrap() {
        if key == "blobSchedule" {
            for (fork, params) in value.as_object().unwrap() {
                assert_eq!(&got[key][fork], params, "blobSchedule.{fork}");
            }
        } else {
            assert_eq!(&got[key], value, "config.{key}");
        }
    }
    // The rest of the genesis is hive's, untouched.
    assert_eq!(genesis["alloc"], expected["alloc"]);
    assert_eq!(genesis["extraData"], expected["extraData"]);
    let network_id = forkenv()
        .into_iter()
        .find(|(k, _)| k == "HIVE_NETWORK_ID")
        .unwrap()
        .1;
    assert_eq!(flag(&flags, "--networkid"), Some(network_id.as_str()));
    assert!(flags.iter().any(|f| f == "--http"));
    assert_eq!(flag(&flags, "--http.port"), Some("8545"));
    assert_eq!(flag(&flags, "--ws.port"), Some("8546"));
    assert_eq!(flag(&flags, "--authrpc.port"), Some("8551"));
    assert!(
        flag(&flags, "--http.api")
            .unwrap()
            .split(',')
            .any(|a| a == "debug")
    );
    assert!(flag(&flags, "--bootnodes").is_none());
}

#[test]
fn the_devp2p_and_engine_environments_become_flags_and_forks() {
    require_tools();
    let enode = "enode://79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798483ada7726a3c4655da4fbfc0e1108a8fd17b448a68554199c47d08ffb10d4b8@10.0.0.2:30303";
    let mut devp2p = forkenv();
    devp2p.extend(env(&[
        ("HIVE_BOOTNODE", enode),
        ("HIVE_NETWORK_ID", "19763"),
        ("HIVE_LOGLEVEL", "5"),
    ]));
    let (_, flags) = dry_run(&devp2p);
    assert_eq!(flag(&flags, "--bootnodes"), Some(enode));
    assert_eq!(flag(&flags, "--networkid"), Some("19763"));
    assert_eq!(flag(&flags, "--verbosity"), Some("5"));

    // The engine simulators: merged at genesis, forks by time, hive's gas target.
    let engine = env(&[
        ("HIVE_CHAIN_ID", "7"),
        ("HIVE_FORK_HOMESTEAD", "0"),
        ("HIVE_FORK_LONDON", "0"),
        ("HIVE_TERMINAL_TOTAL_DIFFICULTY", "0"),
        ("HIVE_SHANGHAI_TIMESTAMP", "0"),
        ("HIVE_CANCUN_TIMESTAMP", "0"),
        ("HIVE_PRAGUE_TIMESTAMP", "30"),
        ("HIVE_PRAGUE_BLOB_MAX", "12"),
        ("HIVE_TARGET_GAS_LIMIT", "30000000"),
    ]);
    let (genesis, flags) = dry_run(&engine);
    let c = &genesis["config"];
    assert_eq!(c["chainId"], 7);
    assert_eq!(c["terminalTotalDifficulty"], 0);
    assert_eq!(c["shanghaiTime"], 0);
    assert_eq!(c["pragueTime"], 30);
    assert_eq!(c["blobSchedule"]["prague"]["max"], 12);
    assert_eq!(c["blobSchedule"]["prague"]["target"], 6);
    // Forks hive did not name are left out, not zeroed.
    assert!(c.get("osakaTime").is_none());
    assert!(c.get("daoForkBlock").is_none());
    assert_eq!(flag(&flags, "--networkid"), Some("1337"));
    assert_eq!(flag(&flags, "--miner.gaslimit"), Some("30000000"));
    let jwt = flag(&flags, "--authrpc.jwtsecret").unwrap();
    assert!(jwt.ends_with("-jwtsecret"));

    // A sync mode moat does not have stops the script.
    let dir = common::temp_dir("hive-snap");
    let out = script(&env(&[("HIVE_NODETYPE", "snap")]), &dir.path().join("db"))
        .env("MOAT_HIVE_DRY_RUN", "1")
        .output()
        .unwrap();
    assert!(!out.status.success());
}

/// Kills the node the script became (it `exec`s moat) on drop.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_script_imports_the_mounted_chain_and_serves_it() {
    require_tools();
    let dir = common::temp_dir("hive-run");
    let ports = [free_port(), free_port(), free_port(), free_port()];
    let mut environment = forkenv();
    // A bootnode on loopback that is not there: the node dials nothing else.
    environment.extend(env(&[(
        "HIVE_BOOTNODE",
        "enode://79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798483ada7726a3c4655da4fbfc0e1108a8fd17b448a68554199c47d08ffb10d4b8@127.0.0.1:9",
    )]));
    let node = Running(
        script(&environment, &dir.path().join("db"))
            .env("MOAT_HIVE_ADDR", "127.0.0.1")
            .env("MOAT_HIVE_PORTS", ports.map(|p| p.to_string()).join(" "))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let head: Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("headblock.json")).unwrap())
            .unwrap();
    let number = wait_for("the imported head over HTTP", || {
        rpc(ports[0], "eth_blockNumber", "[]").and_then(|v| v["result"].as_str().map(String::from))
    });
    assert_eq!(number, head["number"].as_str().unwrap());
    let block = rpc(ports[0], "eth_getBlockByNumber", r#"["latest",false]"#).unwrap();
    assert_eq!(block["result"]["hash"], head["hash"]);
    drop(node);
}
