//! SIGTERM, as systemd, docker and kubernetes stop a service, is a graceful shutdown like
//! Ctrl-C: exit code 0 within the grace period, and a datadir that reopens at a
//! consistent head with nothing acknowledged lost.
//!
//! - `moat import` stopped by SIGTERM mid-import: it reports the head it reached, and a
//!   second import over the same datadir finds exactly those blocks present and
//!   completes the chain (the chain's state is checked against the head's state root at
//!   open).
//! - A node importing a chain through the engine API (newPayload then forkchoiceUpdated
//!   for each block): SIGTERM part-way; on restart the chain goes on from the last block
//!   acknowledged VALID to the end, every answer VALID.
//! - A dev node sealing a block a second, under transaction load from four senders:
//!   SIGTERM part-way; on restart every tx the node acknowledged is found (pooled or
//!   mined) and the head is at least the last one the node reported.

mod common;

use alloy_primitives::B256;
use common::{Node, dev_transfers, free_port, rpc, wait_for};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The node's grace period plus slack: a stop that takes longer is a failure.
const STOP_LIMIT: Duration = Duration::from_secs(40);

fn datadir(tag: &str) -> common::TempPath {
    common::temp_path(&format!("shutdown-{tag}"))
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name}");
}

/// Waits for the process to end on its own, within [`STOP_LIMIT`].
fn wait_exit(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + STOP_LIMIT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("moat did not stop within {STOP_LIMIT:?} of the signal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Blocks of the generated chain: a few seconds of import in a debug build.
const BLOCKS: u64 = 150;

/// A seeded chain of [`BLOCKS`] blocks of 100 txs (transfers, deployments, storage
/// writes): `genesis.json` and `chain.rlp` in `dir`.
fn generate_chain(dir: &Path) -> Vec<(u64, B256, String, String)> {
    use std::io::Write;
    let params = moat_chaingen::Params {
        senders: 200,
        txs_per_block: 100,
        ..moat_chaingen::Params::default()
    };
    let mut generator = moat_chaingen::Generator::new(params).unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("genesis.json"),
        serde_json::to_string(generator.genesis()).unwrap(),
    )
    .unwrap();
    let mut rlp = std::fs::File::create(dir.join("chain.rlp")).unwrap();
    let mut requests = Vec::new();
    for _ in 0..BLOCKS {
        let block = generator.next_block().unwrap();
        rlp.write_all(&block.encode()).unwrap();
        let (payload, fcu) = moat_chaingen::expb_requests(&block).unwrap();
        requests.push((block.header.number, block.hash, payload, fcu));
    }
    requests
}

fn import_cmd(chain: &Path, dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_moat"));
    cmd.arg("import")
        .arg(chain.join("chain.rlp"))
        .arg("--network")
        .arg(chain.join("genesis.json"))
        .arg("--datadir")
        .arg(dir);
    cmd
}

/// "head #N" in an import progress line.
fn head_of(line: &str) -> Option<u64> {
    let rest = line.split("head #").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// "(N already present)" in an import progress line.
fn present_of(line: &str) -> Option<u64> {
    let rest = line.split(" blocks (").nth(1)?;
    rest.split(' ').next()?.parse().ok()
}

#[test]
fn sigterm_during_import_stops_cleanly_at_a_consistent_head() {
    let dir = datadir("import");
    let chain = datadir("import-chain");
    generate_chain(&chain);
    // The store and the genesis are written before the import starts: the signal below
    // lands among the blocks, not in the init.
    let init = Command::new(env!("CARGO_BIN_EXE_moat"))
        .arg("init")
        .arg("--network")
        .arg(chain.join("genesis.json"))
        .arg("--datadir")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(init.status.success(), "{init:?}");

    let mut child = import_cmd(&chain, &dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Blocks go in as soon as the process runs; a short pause puts the signal among
    // them (the whole chain takes a few seconds in a debug build).
    std::thread::sleep(Duration::from_millis(800));
    signal(&child, "TERM");
    let status = wait_exit(&mut child);
    let out: Vec<String> = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .collect();
    assert!(status.success(), "exit {status:?}: {out:?}");
    let stopped = out
        .iter()
        .find(|l| l.starts_with("import stopped by a signal"))
        .unwrap_or_else(|| panic!("the import finished before the signal: {out:?}"));
    let head: u64 = stopped.rsplit('#').next().unwrap().parse().unwrap();
    assert!(head < BLOCKS, "{out:?}");

    // The same import again: every block the first one reported is there, and the rest
    // of the chain goes on top of it.
    let again = import_cmd(&chain, &dir).output().unwrap();
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(again.status.success(), "{text}");
    let last = text.lines().last().unwrap();
    assert_eq!(present_of(last), Some(head), "{text}");
    assert_eq!(head_of(last), Some(BLOCKS), "{text}");
}

const NONCES: u64 = 150;

fn start_dev(dir: &Path, port: u16) -> Node {
    let node = Node::start(&[
        "--dev",
        "--dev.period",
        "1",
        "--datadir",
        dir.to_str().unwrap(),
        "--http.port",
        &port.to_string(),
        "--authrpc.port",
        &free_port().to_string(),
    ]);
    wait_for("the RPC server", || rpc(port, "eth_chainId", "[]"));
    node
}

fn block_number(port: u16) -> Option<u64> {
    let r = rpc(port, "eth_blockNumber", "[]")?;
    u64::from_str_radix(r["result"].as_str()?.trim_start_matches("0x"), 16).ok()
}

#[test]
fn sigterm_under_rpc_load_loses_nothing_acknowledged() {
    let txs = dev_transfers(NONCES);
    let dir = datadir("load");
    let port = free_port();
    let mut node = start_dev(&dir, port);
    let stop = AtomicBool::new(false);
    let acked = Mutex::new(Vec::new());
    let mut seen_head = 0;
    let mut status = None;
    std::thread::scope(|scope| {
        for sender in &txs {
            let (stop, acked) = (&stop, &acked);
            scope.spawn(move || {
                for (hash, raw) in sender {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let Some(answer) =
                        rpc(port, "eth_sendRawTransaction", &format!(r#"["{raw}"]"#))
                    else {
                        return; // the node has stopped listening
                    };
                    if answer["result"] == serde_json::json!(hash) {
                        acked.lock().unwrap().push(*hash);
                    } else {
                        return; // cut off mid-answer, or refused while stopping
                    }
                }
            });
        }
        // The signal once blocks are being sealed and a third of the txs are in.
        let deadline = Instant::now() + Duration::from_secs(120);
        while (acked.lock().unwrap().len() < txs.len() * NONCES as usize / 3
            || block_number(port).unwrap_or(0) < 2)
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        seen_head = block_number(port).unwrap();
        signal(&node.0, "TERM");
        status = Some(wait_exit(&mut node.0));
        stop.store(true, Ordering::Relaxed);
    });
    let status = status.unwrap();
    assert!(status.success(), "SIGTERM under load: exit {status:?}");
    let acked = acked.into_inner().unwrap();
    assert!(!acked.is_empty());

    drop(node);
    let _node = start_dev(&dir, port);
    let head = block_number(port).unwrap();
    assert!(
        head >= seen_head,
        "head {head} after restart, {seen_head} before"
    );
    let missing: Vec<&B256> = acked
        .iter()
        .filter(|h| {
            let r = rpc(port, "eth_getTransactionByHash", &format!(r#"["{h}"]"#)).unwrap();
            r["result"]["hash"] != serde_json::json!(h)
        })
        .collect();
    eprintln!(
        "acknowledged {}, head {seen_head} at the signal, {head} after restart",
        acked.len()
    );
    assert!(
        missing.is_empty(),
        "{} acknowledged txs lost",
        missing.len()
    );
}

/// Sends each block's newPayload and forkchoiceUpdated in turn until `stop` or an error;
/// returns the number and hash of the last block answered VALID by both.
fn drive_engine(
    port: u16,
    secret: &[u8; 32],
    requests: &[(u64, B256, String, String)],
    stop: &AtomicBool,
    acked: &Mutex<Option<(u64, B256)>>,
) {
    for (number, hash, payload, fcu) in requests {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        for (body, field) in [
            (payload, "/result/status"),
            (fcu, "/result/payloadStatus/status"),
        ] {
            let token = moat_rpc::engine::make_token(secret, moat_rpc::engine::unix_now());
            let auth = format!("Authorization: Bearer {token}\r\n");
            match common::post(port, &auth, body) {
                Some((200, v)) if v.pointer(field) == Some(&serde_json::json!("VALID")) => {}
                // The node stopped answering: cut off, refused or gone.
                _ => return,
            }
        }
        *acked.lock().unwrap() = Some((*number, *hash));
    }
}

/// Waits until the engine API answers an authenticated call.
fn wait_for_engine(port: u16, secret: &[u8; 32]) {
    wait_for("the engine API", || {
        let token = moat_rpc::engine::make_token(secret, moat_rpc::engine::unix_now());
        let body =
            r#"{"jsonrpc":"2.0","id":1,"method":"engine_exchangeCapabilities","params":[[]]}"#;
        common::post(port, &format!("Authorization: Bearer {token}\r\n"), body)
            .filter(|(code, v)| *code == 200 && v["result"].is_array())
    });
}

#[test]
fn sigterm_during_engine_import_keeps_every_acknowledged_block() {
    let chain = datadir("engine-chain");
    let requests = generate_chain(&chain);
    let dir = datadir("engine");
    let (http, engine) = (free_port(), free_port());
    let secret = [0x33u8; 32];
    let jwt = chain.join("jwt.hex");
    std::fs::write(&jwt, alloy_primitives::hex::encode(secret)).unwrap();
    let genesis = chain.join("genesis.json");
    let args = [
        "--network",
        genesis.to_str().unwrap(),
        "--datadir",
        dir.to_str().unwrap(),
        "--nodiscover",
        "--maxpeers",
        "0",
        "--http.port",
        &http.to_string(),
        "--authrpc.port",
        &engine.to_string(),
        "--authrpc.jwtsecret",
        jwt.to_str().unwrap(),
    ];
    let mut node = Node::start(&args);
    wait_for_engine(engine, &secret);
    let (stop, acked) = (AtomicBool::new(false), Mutex::new(None));
    let mut status = None;
    std::thread::scope(|scope| {
        scope.spawn(|| drive_engine(engine, &secret, &requests, &stop, &acked));
        // The signal with blocks going in: a third of the chain acknowledged.
        let deadline = Instant::now() + Duration::from_secs(120);
        while acked.lock().unwrap().is_none_or(|(n, _)| n < BLOCKS / 3) && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        signal(&node.0, "TERM");
        status = Some(wait_exit(&mut node.0));
        stop.store(true, Ordering::Relaxed);
    });
    let status = status.unwrap();
    assert!(
        status.success(),
        "SIGTERM during engine import: exit {status:?}"
    );
    let (number, hash) = acked.into_inner().unwrap().expect("blocks acknowledged");
    assert!(number < BLOCKS, "the chain was done before the signal");
    drop(node);

    // Reopened (the state is checked against the head's root at open): the last
    // acknowledged block is there with its state, so the chain goes on from it to the
    // end, every call VALID (the block in flight at the signal, if it was stored whole,
    // is answered VALID as known).
    let _node = Node::start(&args);
    wait_for_engine(engine, &secret);
    let index = usize::try_from(number).unwrap() - 1;
    assert_eq!(requests[index].1, hash);
    let again = Mutex::new(None);
    drive_engine(
        engine,
        &secret,
        &requests[index..],
        &AtomicBool::new(false),
        &again,
    );
    assert_eq!(
        again.into_inner().unwrap(),
        Some((BLOCKS, requests.last().unwrap().1)),
        "the chain did not go on from #{number} after the restart"
    );
    eprintln!("acknowledged #{number} at the signal; the chain went on to #{BLOCKS} after restart");
}

/// A dev node given no datadir runs on a temporary one of its own (under `TMPDIR`) and
/// removes it when stopped: a newcomer's `make run` and Ctrl-C leave nothing behind.
#[test]
fn a_dev_node_removes_its_temporary_datadir_when_stopped() {
    let tmp = common::temp_dir("shutdown-dev-tmp");
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_moat"))
        .args(["--dev", "--port", "0", "--discovery.v5.port", "0"])
        .args(["--http.port", &port.to_string()])
        .args(["--authrpc.port", &free_port().to_string()])
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("moat starts");
    // Killed on drop, should the test fail before the node stops.
    let mut node = Node(child, None);
    wait_for("the RPC server", || rpc(port, "eth_chainId", "[]"));
    let entries = |dir: &Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    let made = entries(tmp.path());
    assert!(
        made.iter().any(|n| n.starts_with("moat-dev-")),
        "no temporary datadir under TMPDIR: {made:?}"
    );
    signal(&node.0, "TERM");
    let status = wait_exit(&mut node.0);
    assert!(status.success(), "exit {status:?}");
    assert_eq!(entries(tmp.path()), Vec::<String>::new());
}
