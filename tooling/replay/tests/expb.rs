//! moat-replay over EXPB's file format against a live engine endpoint: a small chain
//! from moat-chaingen written as `payloads.jsonl` / `fcus.jsonl`, its first blocks sent
//! in the JSON-array form, the rest streamed from the JSONL files with `--skip`,
//! `--warmup` and `--amount`; and a payload that is not VALID makes the replay fail.

use moat_blockchain::chain::Chain;
use moat_blockchain::payload::PayloadService;
use moat_mempool::{Pool, PoolConfig};
use moat_rpc::{EngineConfig, EngineContext, StoreStateView};
use moat_storage::Store;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

const SECRET: &str = "0x4242424242424242424242424242424242424242424242424242424242424242";
const BLOCKS: usize = 16;

struct Files {
    /// Removed when dropped, also when the test panics.
    dir: tempfile::TempDir,
    payloads: Vec<String>,
    fcus: Vec<String>,
}

/// A seeded chain of [`BLOCKS`] blocks and its EXPB request lines.
fn generate(tag: &str) -> (moat_common::config::Genesis, Files) {
    let params = moat_chaingen::Params {
        senders: 20,
        txs_per_block: 10,
        ..moat_chaingen::Params::default()
    };
    let mut generator = moat_chaingen::Generator::new(params).unwrap();
    let (mut payloads, mut fcus) = (Vec::new(), Vec::new());
    for _ in 0..BLOCKS {
        let block = generator.next_block().unwrap();
        let (p, f) = moat_chaingen::expb_requests(&block).unwrap();
        payloads.push(p);
        fcus.push(f);
    }
    let dir = tempfile::Builder::new()
        .prefix(&format!("moat-replay-{tag}-"))
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    (
        generator.genesis().clone(),
        Files {
            dir,
            payloads,
            fcus,
        },
    )
}

fn write_lines(path: &Path, lines: &[String]) {
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

/// An engine endpoint over a fresh chain from `genesis`, on its own runtime.
fn engine(genesis: &moat_common::config::Genesis) -> (tokio::runtime::Runtime, Chain, String) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // The pool's upkeep task is spawned on this runtime.
    let _entered = runtime.enter();
    let store = Store::in_memory();
    let chain = Chain::init(store.clone(), genesis).unwrap();
    let view = StoreStateView::new(store, chain.config().clone());
    let pool = Pool::new(PoolConfig::new(chain.config().clone()), Arc::new(view));
    let payloads = PayloadService::new(chain.clone(), pool.clone());
    let ctx = EngineContext::new(
        chain.clone(),
        pool.clone(),
        payloads,
        moat_blockchain::maintain::spawn(&chain, &pool),
    );
    let secret = moat_rpc::engine::parse_jwt_secret(SECRET).unwrap();
    let config = EngineConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        ..EngineConfig::new(secret)
    };
    let handle = runtime
        .block_on(moat_rpc::start_engine(config, ctx))
        .unwrap();
    let addr = handle.local_addr().to_string();
    // The server lives as long as the runtime.
    std::mem::forget(handle);
    (runtime, chain, addr)
}

fn replay(addr: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_moat-replay"))
        .args(["--engine", addr, "--jwtsecret", SECRET])
        .args(args)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn expb_jsonl_files_replay_with_skip_warmup_and_amount() {
    let (genesis, files) = generate("ok");
    let (_runtime, chain, addr) = engine(&genesis);

    // Blocks 1 and 2 in the JSON-array form, each followed by a forkchoiceUpdated.
    let array: Vec<Value> = files.payloads[..2]
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let array_path = files.dir.path().join("first.json");
    std::fs::write(&array_path, serde_json::to_string(&array).unwrap()).unwrap();
    let out = replay(&addr, &["--file", array_path.to_str().unwrap(), "--fcu"]);
    assert!(out.status.success(), "{}", stdout(&out));
    assert_eq!(chain.head().unwrap().0, 2);

    // The rest from EXPB's files: skip the two the node has, warm up on three, measure
    // ten, leave the last one.
    let payloads = files.dir.path().join("payloads.jsonl");
    let fcus = files.dir.path().join("fcus.jsonl");
    write_lines(&payloads, &files.payloads);
    write_lines(&fcus, &files.fcus);
    let out = replay(
        &addr,
        &[
            "--file",
            payloads.to_str().unwrap(),
            "--fcus",
            fcus.to_str().unwrap(),
            "--skip",
            "2",
            "--warmup",
            "3",
            "--amount",
            "10",
            "--slowest",
            "3",
        ],
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("blocks        10 measured (2 skipped, 3 warm-up)"),
        "{text}"
    );
    assert!(text.contains("newPayload    VALID: 10"), "{text}");
    assert!(text.contains("fcu           VALID: 10"), "{text}");
    for needle in ["p50", "p90", "p99", "max", "Mgas/s", "slowest"] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    // Three slowest blocks listed, each with its number.
    assert_eq!(
        text.lines()
            .filter(|l| l.trim_start().starts_with('#'))
            .count(),
        3
    );
    assert_eq!(chain.head().unwrap().0, 15);
}

#[test]
fn a_payload_that_is_not_valid_fails_the_replay() {
    let (genesis, files) = generate("bad");
    let (_runtime, chain, addr) = engine(&genesis);
    // Block 2's payload with a changed gas used no longer hashes to its block hash.
    let mut bad: Value = serde_json::from_str(&files.payloads[1]).unwrap();
    bad["params"][0]["gasUsed"] = Value::String("0x1".into());
    let mut lines = files.payloads[..3].to_vec();
    lines[1] = bad.to_string();
    let payloads = files.dir.path().join("payloads.jsonl");
    let fcus = files.dir.path().join("fcus.jsonl");
    write_lines(&payloads, &lines);
    write_lines(&fcus, &files.fcus[..3]);
    let out = replay(
        &addr,
        &[
            "--file",
            payloads.to_str().unwrap(),
            "--fcus",
            fcus.to_str().unwrap(),
        ],
    );
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("newPayload    INVALID: 1"), "{text}");
    assert!(text.contains("failures"), "{text}");
    // Block 1 went in; the bad block 2 did not, nor block 3 on top of it.
    assert_eq!(chain.head().unwrap().0, 1);
    // A fcus file shorter than the payloads is an error, not a silent stop.
    write_lines(&fcus, &files.fcus[..1]);
    let out = replay(
        &addr,
        &[
            "--file",
            payloads.to_str().unwrap(),
            "--fcus",
            fcus.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
}
