//! Snap sync between two `moat` processes on loopback. A imported a generated chain
//! (a genesis of 20,000 funded accounts, then blocks that deploy contracts, write their
//! storage and create accounts); B starts from genesis with A as its only peer and the
//! default sync mode. The forkchoiceUpdated to A's head sends B downloading the state at
//! the pivot (64 below the head) by snap/1 and full-syncing the rest on top of it. B is
//! killed with SIGKILL while it downloads, restarts, says it resumed, and ends at A's head
//! with A's state root, reading every sender's account, and the contracts' code and
//! storage, as A does. The other tests kill B in the later stages: while healing after
//! a pivot move, in the codes and tries stages, and in the full sync from the pivot to
//! the head.

mod common;

use alloy_primitives::{Address, B256};
use common::{Moat, TempPath, enode, free_port, rpc, signed_transfer};
use moat_chaingen::{Generator, Params};
use moat_crypto::secp::Signer;
use std::path::Path;
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

/// The source: `gen_dir`'s chain imported into datadir `tag`, started in full sync mode
/// with node key `key` and checked at block `head`; (its datadir, the node, the head's
/// hash, its enode).
fn source(gen_dir: &Path, tag: &str, key: u8, head: u64) -> (TempPath, Moat, String, String) {
    let dir = datadir(tag);
    import(&dir, gen_dir);
    let port = free_port();
    let node = start(
        &dir,
        &gen_dir.join("genesis.json"),
        port,
        key,
        &["--syncmode", "full"],
    );
    assert_eq!(node.head(), Some(head));
    let latest = node.call("eth_getBlockByNumber", r#"["latest", false]"#);
    let hash = latest["hash"].as_str().unwrap().to_string();
    (dir, node, hash, enode(key, port))
}

fn one_peer(node: &Moat) -> Option<()> {
    (rpc(node.http, "net_peerCount", "[]")?["result"] == "0x1").then_some(())
}

fn datadir(tag: &str) -> TempPath {
    common::temp_path(&format!("snap-{tag}"))
}

/// The generated chain in `dir` (genesis.json, chain.rlp); the senders' keys.
fn generate(dir: &Path) -> Vec<Signer> {
    generate_signers(dir, SENDERS, &[("chain.rlp", BLOCKS)])
}

/// A chain generated over `senders` funded accounts: genesis.json, and for each
/// `(file, blocks)` of `parts` the chain from block 1 up to `blocks`.
fn generate_parts(dir: &Path, senders: usize, parts: &[(&str, u64)]) -> Vec<Address> {
    generate_signers(dir, senders, parts)
        .iter()
        .map(|s| s.address())
        .collect()
}

/// [`generate_parts`], with the senders' keys.
fn generate_signers(dir: &Path, senders: usize, parts: &[(&str, u64)]) -> Vec<Signer> {
    generate_with(dir, params(senders), parts)
}

/// The chain of these tests over `senders` funded accounts.
fn params(senders: usize) -> Params {
    Params {
        senders,
        txs_per_block: 40,
        deploy_percent: 25,
        call_percent: 35,
        fresh_percent: 60,
        ..Params::default()
    }
}

/// [`generate_signers`] with `params`.
fn generate_with(dir: &Path, params: Params, parts: &[(&str, u64)]) -> Vec<Signer> {
    std::fs::create_dir_all(dir).unwrap();
    let mut g = Generator::new(params).unwrap();
    let (mut rlp, mut made) = (Vec::new(), 0);
    for (file, blocks) in parts {
        for _ in made..*blocks {
            rlp.extend_from_slice(&g.next_block().unwrap().encode());
        }
        made = *blocks;
        std::fs::write(dir.join(file), &rlp).unwrap();
    }
    std::fs::write(
        dir.join("genesis.json"),
        serde_json::to_string(g.genesis()).unwrap(),
    )
    .unwrap();
    g.senders().to_vec()
}

fn import(datadir: &Path, gen_dir: &Path) {
    import_file(datadir, gen_dir, "chain.rlp");
}

/// Imports `file` of `gen_dir` (blocks already held are skipped).
fn import_file(datadir: &Path, gen_dir: &Path, file: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_moat"))
        .arg("import")
        .arg(gen_dir.join(file))
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

/// Contracts the chain deployed up to `head` (from A's receipts).
fn contracts(a: &Moat, head: u64) -> Vec<String> {
    let mut out = Vec::new();
    for n in 1..=head {
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
    let signers = generate(&gen_dir);
    let genesis = gen_dir.join("genesis.json");
    let senders: Vec<Address> = signers.iter().map(|s| s.address()).collect();
    let (_a_dir, a, head_hash, a_enode) = source(&gen_dir, "a", 0x61, BLOCKS);

    // B: a fresh datadir, the default sync mode (snap).
    let b_dir = datadir("b");
    let b_port = free_port();
    let b = start(&b_dir, &genesis, b_port, 0x62, &["--bootnodes", &a_enode]);
    b.wait("B to connect to A", || one_peer(&b));
    assert_eq!(b.forkchoice(&head_hash), "SYNCING");
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
    assert_eq!(b.forkchoice(&head_hash), "SYNCING");
    b.wait("B to reach A's head", || {
        (b.head()? == BLOCKS).then_some(())
    });
    let log = b.log();
    assert!(log.contains("snap sync resumed"), "{log}");
    assert!(log.contains("snap sync complete"), "{log}");
    eprintln!("killed after {accounts_before} accounts, resumed");

    let contracts = contracts(&a, BLOCKS);
    assert!(contracts.len() > 50, "{} contracts", contracts.len());
    assert_same_state(&a, &b, &senders, &contracts);

    // Then as after a full sync: eth_syncing says false, the engine answers VALID at the
    // head, and the pool takes a transaction checked against the downloaded state.
    b.wait("eth_syncing to answer false", || {
        (b.call("eth_syncing", "[]") == serde_json::Value::Bool(false)).then_some(())
    });
    assert_eq!(b.forkchoice(&head_hash), "VALID");
    // A sender that has sent in the chain: its nonce at the head is past 0.
    let (signer, nonce) = signers
        .iter()
        .find_map(|s| Some((s, nonce_of(&a, s)?)).filter(|(_, n)| *n > 0))
        .expect("a sender with a transaction in the chain");
    assert_eq!(nonce_of(&b, signer), Some(nonce));
    let (hash, raw) = transfer_at(&a, signer, nonce);
    let sent = rpc(b.http, "eth_sendRawTransaction", &format!(r#"["{raw}"]"#)).unwrap();
    assert_eq!(sent["result"], serde_json::json!(hash), "{sent}");
    let pending = b.call("eth_getTransactionByHash", &format!(r#"["{hash}"]"#));
    assert_eq!(pending["hash"], serde_json::json!(hash), "{pending}");
    // A nonce the downloaded state has already used is refused.
    let (_, stale) = transfer_at(&a, signer, nonce - 1);
    let refused = rpc(b.http, "eth_sendRawTransaction", &format!(r#"["{stale}"]"#)).unwrap();
    assert!(refused["error"].is_object(), "{refused}");

    drop((a, b));
}

/// B at A's head with A's state: the head's hash and state root, every sender's balance
/// and nonce (500 senders a batch), and each of `contracts`' code and first slots.
fn assert_same_state(a: &Moat, b: &Moat, senders: &[Address], contracts: &[String]) {
    let head = a.call("eth_getBlockByNumber", r#"["latest", false]"#);
    let ours = b.call("eth_getBlockByNumber", r#"["latest", false]"#);
    assert_eq!(ours["hash"], head["hash"]);
    assert_eq!(ours["stateRoot"], head["stateRoot"]);
    for chunk in senders.chunks(500) {
        let calls: Vec<String> = chunk
            .iter()
            .flat_map(|s| {
                ["eth_getBalance", "eth_getTransactionCount"].map(|method| {
                    format!(
                        r#"{{"jsonrpc":"2.0","id":"{method} {s}","method":"{method}","params":["{s}","latest"]}}"#
                    )
                })
            })
            .collect();
        let body = format!("[{}]", calls.join(","));
        let (ours, theirs) = (batch(b, &body), batch(a, &body));
        assert_eq!(ours.len(), 2 * chunk.len());
        assert_eq!(ours, theirs);
    }
    for c in contracts {
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
}

/// Whether a line of `log` holds `message` and the field `stage` equal to `stage`.
fn logged_at(log: &str, message: &str, stage: &str) -> bool {
    line_at(log, message, stage).is_some()
}

/// The first line of `log` with `message` and the field `stage` equal to `stage`.
fn line_at(log: &str, message: &str, stage: &str) -> Option<String> {
    let quoted = format!("stage=\"{stage}\"");
    log.lines()
        .map(plain)
        .find(|l| l.contains(message) && l.contains(&quoted))
}

/// The number in field `field` of [`line_at`]'s line.
fn count_at(log: &str, message: &str, stage: &str, field: &str) -> u64 {
    line_at(log, message, stage)
        .and_then(|l| {
            let n = l.split(&format!(" {field}=")).nth(1)?.split(' ').next()?;
            n.parse().ok()
        })
        .unwrap_or_else(|| panic!("{field} of \"{message}\" at {stage}: {log}"))
}

/// A log line without its terminal colours.
fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // CSI: ESC [ parameters, ending at a letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Kills `node` with SIGKILL; its whole log.
fn kill9_log(node: Moat) -> String {
    let path = node.log.clone();
    node.kill9();
    std::fs::read_to_string(path).unwrap_or_default()
}

/// A node killed with SIGKILL in each later stage of a snap sync resumes there: in the
/// bytecodes stage, in the tries stage, and in the full sync from the pivot to the head
/// once the state is complete. The genesis holds 3,000 contracts, each with code of its
/// own and 16 slots, so that the codes and tries stages last long enough to be killed
/// in, and blocks deploy contracts of distinct code, 2 KiB each. After each restart B says where it resumed and never that a snap sync started
/// (the accounts are not downloaded again); at the end it holds A's head hash and state
/// root, and reads every sender's account, and contracts' code and storage, as A does.
#[test]
fn a_node_killed_in_the_codes_tries_and_last_stretch_resumes_each_time() {
    const CONTRACTS: usize = 3_000;
    // The pivot at #80: about 20 deployments a block before it, 1,600 codes.
    const HEAD: u64 = 144;
    let gen_dir = datadir("stages-gen");
    let params = Params {
        deploy_percent: 50,
        call_percent: 30,
        code_bytes: 2_048,
        genesis_contracts: CONTRACTS,
        genesis_slots: 16,
        ..params(6_000)
    };
    let signers = generate_with(&gen_dir, params, &[("chain.rlp", HEAD)]);
    let senders: Vec<Address> = signers.iter().map(|s| s.address()).collect();
    let genesis = gen_dir.join("genesis.json");
    let (_a_dir, a, hash, a_enode) = source(&gen_dir, "stages-a", 0x65, HEAD);
    let b_dir = datadir("stages-b");
    let b_port = free_port();
    let start_b = || {
        let b = start(&b_dir, &genesis, b_port, 0x66, &["--bootnodes", &a_enode]);
        b.wait("B to connect to A", || one_peer(&b));
        assert_eq!(b.forkchoice(&hash), "SYNCING");
        b
    };

    // The codes stage: killed with some codes fetched, not all.
    let b = start_b();
    let codes = b.wait("B to fetch some codes", || {
        let n = syncing_field(&b, "syncedBytecodes");
        (n > 0).then_some(n)
    });
    let log = kill9_log(b);
    assert!(logged_at(&log, "stage done", "storage"), "{log}");
    assert!(
        !logged_at(&log, "stage done", "codes"),
        "killed in the codes stage: {log}"
    );
    let accounts = count_at(&log, "stage done", "accounts", "accounts");
    assert!(accounts > 9_000, "{accounts} accounts");

    // Resumed in the codes stage; killed in the tries stage, as soon as it starts.
    let b = start_b();
    b.wait("B to finish the codes stage", || {
        logged_at(&b.log(), "stage done", "codes").then_some(())
    });
    let log = kill9_log(b);
    assert!(logged_at(&log, "snap sync resumed", "codes"), "{log}");
    assert!(
        !log.contains("tries built"),
        "killed before the tries were built: {log}"
    );
    // Resumed with every account held (none asked again), and no download started.
    assert_eq!(
        count_at(&log, "snap sync resumed", "codes", "accounts"),
        accounts
    );
    assert!(!log.contains("snap sync started"), "{log}");
    // The codes stage fetched one code a deployment, those before the kill counted from
    // the record.
    let total = count_at(&log, "stage done", "codes", "codes");
    assert!(
        total > 1_000 && codes < total,
        "{codes} of {total} codes when killed"
    );

    // Resumed in the tries stage; killed in the full sync from the pivot to the head,
    // once it has imported a block past the pivot.
    let pivot = HEAD - 64;
    let b = start_b();
    b.wait("B to complete the state", || {
        b.log().contains("snap sync complete").then_some(())
    });
    let at = b.wait("B to import past the pivot", || {
        b.head().filter(|&n| n > pivot)
    });
    let log = kill9_log(b);
    assert_eq!(
        count_at(&log, "snap sync resumed", "tries", "accounts"),
        accounts
    );
    assert!(!log.contains("snap sync started"), "{log}");
    assert!(at < HEAD, "killed short of the head (at #{at})");

    // Restarted past the pivot: the last stretch goes on by full sync, no snap sync.
    let b = start_b();
    let restart = b.head().unwrap();
    assert!(
        restart >= pivot,
        "restarted at #{restart}, the pivot #{pivot}"
    );
    b.wait("B to reach A's head", || (b.head()? == HEAD).then_some(()));
    let log = b.log();
    assert!(!log.contains("snap sync"), "no snap sync again: {log}");
    eprintln!(
        "killed after {codes} codes, in the tries stage, and at #{at}; restarted at #{restart}"
    );

    let mut contracts = contracts(&a, HEAD);
    contracts.extend(
        [0, CONTRACTS as u64 / 2, CONTRACTS as u64 - 1]
            .map(|i| moat_chaingen::genesis_contract(i, 0).0.to_string()),
    );
    assert_same_state(&a, &b, &senders, &contracts);
    drop((a, b));
}

/// A batch's answers, each with its id and result, ordered by id (a batch's answers
/// may come in any order).
fn batch(node: &Moat, body: &str) -> Vec<(String, serde_json::Value)> {
    let (status, answers) = common::post(node.http, "", body).expect("the batch is answered");
    assert_eq!(status, 200);
    let mut out: Vec<(String, serde_json::Value)> = answers
        .as_array()
        .expect("a batch answer")
        .iter()
        .map(|a| {
            assert!(a["result"].is_string(), "{a}");
            (a["id"].as_str().unwrap().to_string(), a["result"].clone())
        })
        .collect();
    out.sort_by(|x, y| x.0.cmp(&y.0));
    out
}

/// `signer`'s nonce at `node`'s head.
fn nonce_of(node: &Moat, signer: &Signer) -> Option<u64> {
    let count = node.call(
        "eth_getTransactionCount",
        &format!(r#"["{}", "latest"]"#, signer.address()),
    );
    u64::from_str_radix(count.as_str()?.trim_start_matches("0x"), 16).ok()
}

/// A transfer from `signer` at `nonce`, on `node`'s chain: (hash, raw hex).
fn transfer_at(node: &Moat, signer: &Signer, nonce: u64) -> (B256, String) {
    let id = node.call("eth_chainId", "[]");
    let chain_id = u64::from_str_radix(id.as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
    signed_transfer(signer, chain_id, nonce, 1)
}

/// A field of `eth_syncing` as a number (0 when absent).
fn syncing_field(node: &Moat, field: &str) -> u64 {
    let s = node.call("eth_syncing", "[]");
    s[field]
        .as_str()
        .and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0)
}

/// A node killed with SIGKILL while healing resumes from healing's record. B's first
/// download (pivot #6 of A's 70 blocks) is cut halfway; A then imports 70 more blocks,
/// so that pivot is past the 128 states A serves: B, restarted towards A's new head,
/// finds it stale, moves to pivot #76, downloads the rest there and heals what it held
/// from the old pivot. Killed while healing, B restarts, resumes healing from its record
/// without building the tries again, and ends at A's head with A's state root and
/// balances. B asks 1 byte an answer (one account or trie node each), so that both the
/// download and healing last long enough to be killed in.
#[test]
fn a_node_killed_while_healing_resumes_from_its_record() {
    const FIRST: u64 = 70;
    const ALL: u64 = 140;
    let gen_dir = datadir("heal-gen");
    let senders = generate_parts(&gen_dir, 6_000, &[("first.rlp", FIRST), ("all.rlp", ALL)]);
    let genesis = gen_dir.join("genesis.json");
    let a_dir = datadir("heal-a");
    import_file(&a_dir, &gen_dir, "first.rlp");
    let a_port = free_port();
    let a_enode = enode(0x63, a_port);
    let a = start(&a_dir, &genesis, a_port, 0x63, &["--syncmode", "full"]);
    let first_head = a.call("eth_getBlockByNumber", r#"["latest", false]"#);
    assert_eq!(a.head(), Some(FIRST));

    // B's download at the first pivot, cut halfway (the store's relaxed commits are
    // durable within a second: what B held a second before the kill stays).
    let b_dir = datadir("heal-b");
    let b_port = free_port();
    let b_args = ["--bootnodes", &a_enode, "--snap.responsebytes", "1"];
    let start_b = || Moat::start(&b_dir, &genesis, b_port, 0x64, &b_args, &[], WAIT);
    let b = start_b();
    b.wait("B to connect to A", || one_peer(&b));
    let hash = first_head["hash"].as_str().unwrap();
    assert_eq!(b.forkchoice(hash), "SYNCING");
    b.wait("B to download 3,000 accounts", || {
        (syncing_field(&b, "syncedAccounts") > 3_000).then_some(())
    });
    assert_eq!(b.head(), Some(0), "still downloading when killed");
    b.kill9();

    // A moves on past the 128 states it serves from B's pivot.
    drop(a);
    import_file(&a_dir, &gen_dir, "all.rlp");
    let a = start(&a_dir, &genesis, a_port, 0x63, &["--syncmode", "full"]);
    assert_eq!(a.head(), Some(ALL));
    let head = a.call("eth_getBlockByNumber", r#"["latest", false]"#);
    let hash = head["hash"].as_str().unwrap().to_string();

    // B: the old pivot stale, a new one, then healing, killed while it heals, once
    // more answers came than one commit of healing's record takes (the figures are
    // published after each answer's commit).
    let b = start_b();
    b.wait("B to reconnect to A", || one_peer(&b));
    assert_eq!(b.forkchoice(&hash), "SYNCING");
    let committed = 2 * moat_sync::snap::HEAL_COMMIT_EVERY as u64;
    let healed = b.wait("B to heal some trie nodes", || {
        let n = syncing_field(&b, "healedTrienodes");
        (n > committed).then_some(n)
    });
    let left = syncing_field(&b, "healingTrienodes");
    assert_eq!(b.head(), Some(0), "still healing when killed");
    let log = b.log();
    assert!(log.contains("the download goes on and is healed"), "{log}");
    b.kill9();

    let b = start_b();
    b.wait("B to reconnect to A", || one_peer(&b));
    assert_eq!(b.forkchoice(&hash), "SYNCING");
    b.wait("B to reach A's head", || (b.head()? == ALL).then_some(()));
    let log = b.log();
    assert!(log.contains("healing resumed from its record"), "{log}");
    assert!(
        !log.contains("tries of the download built"),
        "the tries are not built again: {log}"
    );
    assert!(log.contains("snap sync complete"), "{log}");
    eprintln!("killed after {healed} healed trie nodes ({left} known left), resumed");

    let ours = b.call("eth_getBlockByNumber", r#"["latest", false]"#);
    assert_eq!(ours["hash"], head["hash"]);
    assert_eq!(ours["stateRoot"], head["stateRoot"]);
    for s in senders.iter().step_by(61) {
        let params = format!(r#"["{s}", "latest"]"#);
        for method in ["eth_getBalance", "eth_getTransactionCount"] {
            assert_eq!(
                b.call(method, &params),
                a.call(method, &params),
                "{method} {s}"
            );
        }
    }
    drop((a, b));
}
