//! Acknowledged local transactions survive every restart: a dev node (no block for ten
//! minutes, so txs stay pooled) takes transfers from four senders at once, sixty nonces
//! each, over HTTP; it is killed with SIGKILL at a moment picked at random during the
//! submission (several trials), or stopped gracefully with SIGINT once all are in; on
//! restart over the same datadir every tx whose hash the node returned is found again.

mod common;

use alloy_primitives::B256;
use common::{Node, dev_transfers, free_port, rpc, wait_for};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const NONCES: u64 = 60;
const TOTAL: usize = common::DEV_KEYS.len() * NONCES as usize;

fn start(datadir: &Path, port: u16) -> Node {
    let node = Node::start(&[
        "--dev",
        "--dev.period",
        "600",
        "--datadir",
        datadir.to_str().unwrap(),
        "--http.api",
        "eth,net,web3,txpool",
        "--http.port",
        &port.to_string(),
        "--authrpc.port",
        &free_port().to_string(),
    ]);
    wait_for("the RPC server", || rpc(port, "eth_chainId", "[]"));
    node
}

/// Sends every sender's txs in nonce order, the senders concurrently, until done or
/// `stop`; the hashes the node acknowledged go to `acked` as they come.
fn submit(port: u16, txs: &[Vec<(B256, String)>], stop: &AtomicBool, acked: &Mutex<Vec<B256>>) {
    std::thread::scope(|scope| {
        for sender in txs {
            scope.spawn(move || {
                for (hash, raw) in sender {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let params = format!(r#"["{raw}"]"#);
                    let Some(answer) = rpc(port, "eth_sendRawTransaction", &params) else {
                        return; // the node is gone
                    };
                    if answer["result"] == serde_json::json!(hash) {
                        acked.lock().unwrap().push(*hash);
                    } else if answer.is_null() {
                        return; // cut off mid-answer
                    } else {
                        panic!("a valid tx refused: {answer}");
                    }
                }
            });
        }
    });
}

/// How many of `hashes` the node at `port` knows (pooled or mined).
fn found(port: u16, hashes: &[B256]) -> usize {
    hashes
        .iter()
        .filter(|h| {
            let r = rpc(port, "eth_getTransactionByHash", &format!(r#"["{h}"]"#)).unwrap();
            r["result"]["hash"] == serde_json::json!(h)
        })
        .count()
}

fn datadir(tag: &str) -> common::TempPath {
    common::temp_path(&format!("journal-{tag}"))
}

/// A small xorshift over the clock: the kill points differ from run to run (the seed is
/// printed so a failing run can be repeated by reading it).
fn kill_points(trials: usize) -> Vec<usize> {
    let mut x = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("kill point seed {x}");
    (0..trials)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Spread over the run: early, middle and late.
            let band = TOTAL / trials;
            (band * i + (x as usize % band)).clamp(1, TOTAL - 1)
        })
        .collect()
}

#[test]
fn acknowledged_txs_survive_kill_9_at_random_moments() {
    let txs = dev_transfers(NONCES);
    for (trial, kill_at) in kill_points(5).into_iter().enumerate() {
        let dir = datadir(&format!("kill{trial}"));
        let port = free_port();
        let mut node = start(&dir, port);
        let (stop, acked) = (AtomicBool::new(false), Mutex::new(Vec::new()));
        std::thread::scope(|scope| {
            let submission = scope.spawn(|| submit(port, &txs, &stop, &acked));
            // SIGKILL once `kill_at` txs are acknowledged, with more in flight.
            let deadline = Instant::now() + Duration::from_secs(120);
            while !submission.is_finished()
                && acked.lock().unwrap().len() < kill_at
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            node.0.kill().unwrap();
            node.0.wait().unwrap();
            stop.store(true, Ordering::Relaxed);
        });
        let acked = acked.into_inner().unwrap();
        let node = start(&dir, port);
        let back = found(port, &acked);
        eprintln!(
            "trial {trial}: SIGKILL at {kill_at} acknowledgements; acknowledged {}, found after restart {back}",
            acked.len()
        );
        assert!(acked.len() >= kill_at.min(TOTAL));
        assert_eq!(back, acked.len(), "trial {trial}: acknowledged txs lost");
        drop(node);
    }
}

#[test]
fn acknowledged_txs_survive_a_graceful_stop() {
    let txs = dev_transfers(NONCES);
    let dir = datadir("graceful");
    let port = free_port();
    let node = start(&dir, port);
    let acked = Mutex::new(Vec::new());
    submit(port, &txs, &AtomicBool::new(false), &acked);
    let acked = acked.into_inner().unwrap();
    assert_eq!(acked.len(), TOTAL);
    // SIGINT, as Ctrl-C: the node stops on its own.
    let status = std::process::Command::new("kill")
        .args(["-INT", &node.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut node = node;
    while node.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the node did not stop on SIGINT");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _node = start(&dir, port);
    assert_eq!(found(port, &acked), TOTAL);
    let pool = rpc(port, "txpool_status", "[]").unwrap();
    assert_eq!(pool["result"]["pending"], "0xf0", "{pool}");
}
