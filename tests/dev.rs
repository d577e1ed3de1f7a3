//! The README's newcomer flow: `moat --dev`, a signed transfer sent with a plain HTTP
//! POST, and the transfer mined.

mod common;

use alloy_primitives::B256;
use common::{Node, free_port, rpc, wait_for};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The README's transaction: 1 ether from dev account 0 to dev account 1, nonce 0.
const RAW: &str = "0x02f87482053980843b9aca0084b2d05e008252089470997970c51812dc3a010c7d01b50e0d17dc79c8880de0b6b3a764000080c080a07674f79c67e16e3ea84d29454f69f5201069c013de3f1f07525d093cd96b32caa050908860fd3db570a082c4187766acb7b7b671f3dbd61fb14b93ecfd0358af80";
const HASH: &str = "0xb7c4117a2254fe53560d9f61261e8e00894ab1f9e82d4869dfaa1d57e37841a1";

#[test]
fn dev_node_mines_a_transaction_sent_over_http() {
    let (port, metrics_port) = (free_port(), free_port());
    let _node = Node::start(&[
        "--dev",
        "--dev.period",
        "0",
        "--http.api",
        "eth,net,web3,txpool",
        "--http.port",
        &port.to_string(),
        "--authrpc.port",
        &free_port().to_string(),
        "--metrics",
        "--metrics.port",
        &metrics_port.to_string(),
        "--rpc.gascap",
        "30000",
    ]);
    let chain_id = wait_for("the RPC server", || rpc(port, "eth_chainId", "[]"));
    assert_eq!(chain_id["result"], "0x539");
    // geth's rpc_modules: the namespaces --http.api serves, rpc itself, and evm on dev.
    let modules = rpc(port, "rpc_modules", "[]").unwrap();
    assert_eq!(
        modules["result"],
        serde_json::json!({"eth":"1.0","net":"1.0","web3":"1.0","txpool":"1.0","rpc":"1.0","evm":"1.0","anvil":"1.0","hardhat":"1.0","personal":"1.0"}),
        "{modules}"
    );
    // The dev accounts, and EIP-191 signatures with their keys.
    let accounts = rpc(port, "eth_accounts", "[]").unwrap();
    assert_eq!(
        accounts["result"].as_array().map(Vec::len),
        Some(5),
        "{accounts}"
    );
    assert_eq!(
        accounts["result"][0],
        "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266"
    );
    let signed = rpc(
        port,
        "eth_sign",
        r#"["0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","0x68656c6c6f20776f726c64"]"#,
    )
    .unwrap();
    let sig = signed["result"].as_str().unwrap_or_default();
    assert_eq!(sig.len(), 2 + 130, "{signed}");
    assert!(sig.ends_with("1b") || sig.ends_with("1c"), "{signed}");
    let stranger = rpc(
        port,
        "eth_sign",
        r#"["0x0000000000000000000000000000000000000001","0x00"]"#,
    )
    .unwrap();
    assert_eq!(
        stranger["error"]["message"], "unknown account",
        "{stranger}"
    );
    // The dev account is the etherbase.
    let coinbase = rpc(port, "eth_coinbase", "[]").unwrap();
    assert_eq!(
        coinbase["result"], "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266",
        "{coinbase}"
    );

    let sent = rpc(port, "eth_sendRawTransaction", &format!(r#"["{RAW}"]"#)).unwrap();
    assert_eq!(sent["result"], HASH, "{sent}");
    // Sending it again is what geth calls "already known".
    let again = rpc(port, "eth_sendRawTransaction", &format!(r#"["{RAW}"]"#)).unwrap();
    let message = again["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message == "already known" || message.starts_with("nonce too low"),
        "{again}"
    );

    let receipt = wait_for("the receipt", || {
        let r = rpc(port, "eth_getTransactionReceipt", &format!(r#"["{HASH}"]"#))?;
        (!r["result"].is_null()).then_some(r["result"].clone())
    });
    assert_eq!(receipt["status"], "0x1");
    let balance = rpc(
        port,
        "eth_getBalance",
        r#"["0x70997970C51812dc3A010C7d01b50e0d17dc79C8","latest"]"#,
    )
    .unwrap();
    assert_eq!(balance["result"], "0x21e27c1806e59a40000", "10001 ether");
    // eth_estimateGas and eth_call run on the head state.
    let transfer = r#"[{"from":"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","to":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","value":"0x1"}]"#;
    assert_eq!(
        rpc(port, "eth_estimateGas", transfer).unwrap()["result"],
        "0x5208"
    );
    assert_eq!(rpc(port, "eth_call", transfer).unwrap()["result"], "0x");
    // --rpc.gascap 30000: 2000 bytes of calldata need 53000 gas, more than allowed.
    let heavy = format!(
        r#"[{{"from":"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","to":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","data":"0x{}"}}]"#,
        "11".repeat(2000)
    );
    let capped = rpc(port, "eth_estimateGas", &heavy).unwrap();
    assert!(
        capped["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("exceeds allowance") || m.contains("gas")),
        "{capped}"
    );
    // EIP-2935's history contract holds the genesis hash once block 1 exists.
    let genesis =
        rpc(port, "eth_getBlockByNumber", r#"["0x0", false]"#).unwrap()["result"]["hash"].clone();
    let history = r#"[{"to":"0x0000F90827F1C53a10cb7A02335B175320002935","data":"0x0000000000000000000000000000000000000000000000000000000000000000"},"latest"]"#;
    assert_eq!(rpc(port, "eth_call", history).unwrap()["result"], genesis);
    // The beacon-roots contract reverts on a malformed input: geth's code 3.
    let bad = r#"[{"to":"0x000F3df6D732807Ef1319fB7B8bB8522d0Beac02","data":"0x01"}]"#;
    let reverted = rpc(port, "eth_call", bad).unwrap();
    assert_eq!(reverted["error"]["code"], 3, "{reverted}");
    assert!(
        reverted["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("execution reverted")
    );
    assert_eq!(
        rpc(port, "eth_estimateGas", bad).unwrap()["error"]["code"],
        3
    );

    let status = rpc(port, "txpool_status", "[]").unwrap();
    assert_eq!(status["result"]["pending"], "0x0");

    // Prometheus sees the pool's counters.
    let mut s = TcpStream::connect(("127.0.0.1", metrics_port)).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    assert!(body.contains("moat_pool_added_total 1"), "{body}");
    // The resend: "already known" if it came while the tx was pending, "nonce too low"
    // once mined (with --dev.period 0 the hash is answered once the tx is in a block).
    assert!(
        body.contains("moat_pool_rejections_total{reason=\"already_known\"} 1")
            || body.contains("moat_pool_rejections_total{reason=\"nonce_too_low\"} 1"),
        "{body}"
    );

    // eth_sendTransaction: the node fills nonce, gas and fees, signs with the dev key.
    let sent = rpc(
        port,
        "eth_sendTransaction",
        r#"[{"from":"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","to":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC","value":"0x7"}]"#,
    )
    .unwrap();
    let hash = sent["result"].as_str().unwrap_or_default().to_string();
    assert_eq!(hash.len(), 66, "{sent}");
    let receipt = wait_for("the sent transaction's receipt", || {
        let r = rpc(port, "eth_getTransactionReceipt", &format!(r#"["{hash}"]"#))?;
        (!r["result"].is_null()).then_some(r["result"].clone())
    });
    assert_eq!(receipt["status"], "0x1");
    assert_eq!(receipt["gasUsed"], "0x5208");
    let tx = rpc(port, "eth_getTransactionByHash", &format!(r#"["{hash}"]"#)).unwrap();
    assert_eq!(tx["result"]["nonce"], "0x1", "{tx}");
    assert_eq!(tx["result"]["chainId"], "0x539", "{tx}");
    // A sender whose key the node does not hold.
    let stranger = rpc(
        port,
        "eth_sendTransaction",
        r#"[{"from":"0x0000000000000000000000000000000000000001","to":"0x0000000000000000000000000000000000000002"}]"#,
    )
    .unwrap();
    assert_eq!(
        stranger["error"]["message"], "unknown account",
        "{stranger}"
    );

    // evm_mine seals a block at once, even an empty one.
    let before = rpc(port, "eth_blockNumber", "[]").unwrap();
    let mined = rpc(port, "evm_mine", "[]").unwrap();
    assert_eq!(mined["result"], "0x0", "{mined}");
    let after = rpc(port, "eth_blockNumber", "[]").unwrap();
    let n = |v: &serde_json::Value| {
        u64::from_str_radix(
            v["result"]
                .as_str()
                .unwrap_or("0x0")
                .trim_start_matches("0x"),
            16,
        )
        .unwrap_or(0)
    };
    assert_eq!(n(&after), n(&before) + 1, "{before} {after}");
}

/// A quantity field of a reply as u64.
fn quantity(v: &serde_json::Value) -> u64 {
    u64::from_str_radix(v.as_str().unwrap_or("0x0").trim_start_matches("0x"), 16).unwrap_or(0)
}

/// A dev node with automine (`--dev.period 0`) on `dir`, serving HTTP on `port`.
fn start_automine_node(dir: &std::path::Path, port: u16) -> Node {
    Node::start(&[
        "--dev",
        "--dev.period",
        "0",
        "--datadir",
        &dir.display().to_string(),
        "--http.port",
        &port.to_string(),
        "--authrpc.port",
        &free_port().to_string(),
    ])
}

/// The dev methods of anvil: state edits, snapshots and the clock. Each edit is a block,
/// and the state it leaves is the head's state root: a restart on the same datadir
/// checks the stored state against the head and opens it.
#[test]
fn dev_node_edits_state_snapshots_and_moves_its_clock() {
    let dir = common::temp_path("dev-edits");
    let port = free_port();
    let node = start_automine_node(&dir, port);
    wait_for("the RPC server", || rpc(port, "eth_chainId", "[]"));
    let modules = rpc(port, "rpc_modules", "[]").unwrap();
    assert_eq!(modules["result"]["anvil"], "1.0", "{modules}");
    let call = |method: &str, params: &str| {
        let r = rpc(port, method, params).unwrap();
        assert!(r["error"].is_null(), "{method} {params}: {r}");
        r["result"].clone()
    };
    let who = "0x00000000000000000000000000000000000000aa";
    let block0 = quantity(&call("eth_blockNumber", "[]"));

    // anvil_setBalance, setNonce, setCode, setStorageAt: each a block with the edit.
    assert!(call("anvil_setBalance", &format!(r#"["{who}","0x1234"]"#)).is_null());
    assert_eq!(
        call("eth_getBalance", &format!(r#"["{who}","latest"]"#)),
        "0x1234"
    );
    assert_eq!(quantity(&call("eth_blockNumber", "[]")), block0 + 1);
    // The block before the edit still shows the old balance.
    assert_eq!(
        call("eth_getBalance", &format!(r#"["{who}","{block0:#x}"]"#)),
        "0x0"
    );
    assert!(call("anvil_setNonce", &format!(r#"["{who}","0x5"]"#)).is_null());
    assert_eq!(
        call("eth_getTransactionCount", &format!(r#"["{who}","latest"]"#)),
        "0x5"
    );
    assert!(
        call(
            "anvil_setCode",
            &format!(r#"["{who}","0x600160005260206000f3"]"#)
        )
        .is_null()
    );
    assert_eq!(
        call("eth_getCode", &format!(r#"["{who}","latest"]"#)),
        "0x600160005260206000f3"
    );
    // The code runs: it returns the word 1.
    assert_eq!(
        call("eth_call", &format!(r#"[{{"to":"{who}"}},"latest"]"#)),
        format!("0x{}01", "00".repeat(31))
    );
    let word = format!("0x{}2a", "00".repeat(31));
    assert_eq!(
        call(
            "anvil_setStorageAt",
            &format!(r#"["{who}","0x3","{word}"]"#)
        ),
        true
    );
    assert_eq!(
        call("eth_getStorageAt", &format!(r#"["{who}","0x3","latest"]"#)),
        word
    );
    // The balance edit kept the nonce and code, and the code edit the balance.
    assert_eq!(
        call("eth_getBalance", &format!(r#"["{who}","latest"]"#)),
        "0x1234"
    );

    // evm_snapshot / evm_revert: a transfer and an edit after the snapshot are undone.
    let snap = call("evm_snapshot", "[]");
    let at_snapshot = quantity(&call("eth_blockNumber", "[]"));
    let hash = call(
        "eth_sendTransaction",
        &format!(
            r#"[{{"from":"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","to":"{who}","value":"0x10"}}]"#
        ),
    );
    wait_for("the transfer's receipt", || {
        let r = rpc(port, "eth_getTransactionReceipt", &format!(r#"[{hash}]"#))?;
        (!r["result"].is_null()).then_some(())
    });
    assert_eq!(
        call("eth_getBalance", &format!(r#"["{who}","latest"]"#)),
        "0x1244"
    );
    assert!(call("anvil_setBalance", &format!(r#"["{who}","0x1"]"#)).is_null());
    let later = call("evm_snapshot", "[]");
    assert_ne!(later, snap);
    assert_eq!(call("evm_revert", &format!("[{snap}]")), true);
    assert_eq!(quantity(&call("eth_blockNumber", "[]")), at_snapshot);
    assert_eq!(
        call("eth_getBalance", &format!(r#"["{who}","latest"]"#)),
        "0x1234"
    );
    assert!(call("eth_getTransactionReceipt", &format!("[{hash}]")).is_null());
    assert_eq!(
        call(
            "eth_getTransactionCount",
            r#"["0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","latest"]"#
        ),
        "0x0"
    );
    // A revert uses up its snapshot and the later ones.
    assert_eq!(call("evm_revert", &format!("[{snap}]")), false);
    assert_eq!(call("evm_revert", &format!("[{later}]")), false);
    // The sender's nonce is the snapshot's again: a new transfer gets nonce 0.
    let again = call(
        "eth_sendTransaction",
        r#"[{"from":"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","to":"0x00000000000000000000000000000000000000bb","value":"0x1"}]"#,
    );
    let tx = call("eth_getTransactionByHash", &format!("[{again}]"));
    assert_eq!(tx["nonce"], "0x0", "{tx}");
    // With --dev.period 0 the hash comes back once the tx is in a block (anvil's
    // automine): the receipt is there at once.
    let receipt = call("eth_getTransactionReceipt", &format!("[{again}]"));
    assert_eq!(receipt["status"], "0x1", "{receipt}");
    // An access list goes into the transaction (an EIP-1559 one, or EIP-2930 with a
    // gasPrice), and the estimate pays for it; blob and set-code fields are refused, not
    // dropped.
    let list = format!(r#"[{{"address":"{who}","storageKeys":["{word}"]}}]"#);
    for (fees, ty) in [("", "0x2"), (r#","gasPrice":"0x77359400""#, "0x1")] {
        let hash = call(
            "eth_sendTransaction",
            &format!(
                r#"[{{"from":"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","to":"0x00000000000000000000000000000000000000bb","accessList":{list}{fees}}}]"#
            ),
        );
        let tx = call("eth_getTransactionByHash", &format!("[{hash}]"));
        assert_eq!(tx["type"], ty, "{tx}");
        assert_eq!(tx["accessList"][0]["address"], who, "{tx}");
        assert_eq!(tx["accessList"][0]["storageKeys"][0], word, "{tx}");
        let receipt = call("eth_getTransactionReceipt", &format!("[{hash}]"));
        assert_eq!(receipt["status"], "0x1", "{receipt}");
        assert_eq!(
            quantity(&receipt["gasUsed"]),
            21_000 + 2_400 + 1_900,
            "{receipt}"
        );
    }
    for field in [r#""authorizationList":[]"#, r#""blobVersionedHashes":[]"#] {
        let r = rpc(
            port,
            "eth_sendTransaction",
            &format!(
                r#"[{{"from":"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","to":"{who}",{field}}}]"#
            ),
        )
        .unwrap();
        assert_eq!(r["error"]["code"], -32602, "{r}");
    }

    // evm_increaseTime shifts the next blocks; evm_setNextBlockTimestamp sets one.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(call("evm_increaseTime", "[3600]"), 3600);
    assert_eq!(call("evm_increaseTime", r#"["0xe10"]"#), 7200);
    call("evm_mine", "[]");
    let head = call("eth_getBlockByNumber", r#"["latest",false]"#);
    let ts = quantity(&head["timestamp"]);
    assert!(ts >= now + 7200 && ts < now + 7200 + 60, "{ts} {now}");
    let next = ts + 1_000;
    assert!(call("evm_setNextBlockTimestamp", &format!("[{next}]")).is_null());
    call("evm_mine", "[]");
    let head = call("eth_getBlockByNumber", r#"["latest",false]"#);
    assert_eq!(quantity(&head["timestamp"]), next);
    // evm_mine with a timestamp; anvil_mine with a count and an interval.
    let at = next + 500;
    call("evm_mine", &format!(r#"[{{"timestamp":{at}}}]"#));
    let head = call("eth_getBlockByNumber", r#"["latest",false]"#);
    assert_eq!(quantity(&head["timestamp"]), at);
    let before = quantity(&head["number"]);
    assert!(call("anvil_mine", r#"["0x3","0xa"]"#).is_null());
    let head = call("eth_getBlockByNumber", r#"["latest",false]"#);
    assert_eq!(quantity(&head["number"]), before + 3);
    assert_eq!(quantity(&head["timestamp"]), at + 30);
    let r = rpc(port, "anvil_mine", r#"["0xffffffff"]"#).unwrap();
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let next = at + 30;
    // hardhat's names for the setters.
    assert_eq!(
        call("hardhat_setBalance", &format!(r#"["{who}","0x1234"]"#)),
        true
    );
    // A time not after the head's is refused.
    let r = rpc(port, "evm_setNextBlockTimestamp", &format!("[{next}]")).unwrap();
    assert!(r["error"]["message"].is_string(), "{r}");

    // anvil_impersonateAccount: eth_sendTransaction from an address whose key no one
    // holds is mined as sent from it.
    let whale = "0x00000000000000000000000000000000000000cc";
    let send_from_whale = format!(
        r#"[{{"from":"{whale}","to":"0x00000000000000000000000000000000000000dd","value":"0x5"}}]"#
    );
    let refused = rpc(port, "eth_sendTransaction", &send_from_whale).unwrap();
    assert_eq!(refused["error"]["message"], "unknown account", "{refused}");
    call(
        "anvil_setBalance",
        &format!(r#"["{whale}","0xde0b6b3a7640000"]"#),
    );
    assert!(call("anvil_impersonateAccount", &format!(r#"["{whale}"]"#)).is_null());
    let hash = call("eth_sendTransaction", &send_from_whale);
    let receipt = wait_for("the impersonated transfer's receipt", || {
        let r = rpc(port, "eth_getTransactionReceipt", &format!("[{hash}]"))?;
        (!r["result"].is_null()).then_some(r["result"].clone())
    });
    assert_eq!(receipt["status"], "0x1", "{receipt}");
    assert_eq!(receipt["from"], whale, "{receipt}");
    assert_eq!(
        call("eth_getTransactionByHash", &format!("[{hash}]"))["from"],
        whale
    );
    assert_eq!(
        call(
            "eth_getBalance",
            r#"["0x00000000000000000000000000000000000000dd","latest"]"#
        ),
        "0x5"
    );
    assert_eq!(
        call(
            "eth_getTransactionCount",
            &format!(r#"["{whale}","latest"]"#)
        ),
        "0x1"
    );
    assert!(call("anvil_stopImpersonatingAccount", &format!(r#"["{whale}"]"#)).is_null());
    let refused = rpc(port, "eth_sendTransaction", &send_from_whale).unwrap();
    assert_eq!(refused["error"]["message"], "unknown account", "{refused}");
    // hardhat's names answer true and do the same.
    assert_eq!(
        call("hardhat_impersonateAccount", &format!(r#"["{whale}"]"#)),
        true
    );
    let hash = call("eth_sendTransaction", &send_from_whale);
    let tx = call("eth_getTransactionByHash", &format!("[{hash}]"));
    assert_eq!(tx["from"], whale, "{tx}");
    assert_eq!(
        call(
            "hardhat_stopImpersonatingAccount",
            &format!(r#"["{whale}"]"#)
        ),
        true
    );
    let refused = rpc(port, "eth_sendTransaction", &send_from_whale).unwrap();
    assert_eq!(refused["error"]["message"], "unknown account", "{refused}");

    // Bad input is a typed error.
    let r = rpc(port, "anvil_setBalance", r#"["0x12","0x1"]"#).unwrap();
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = rpc(
        port,
        "anvil_setBalance",
        r#"["0x00000000000000000000000000000000000000aa","zz"]"#,
    )
    .unwrap();
    assert_eq!(r["error"]["code"], -32602, "{r}");

    // The state survives a restart: the stored state is the head's (checked on open).
    // SIGTERM is a graceful stop, so the last block is durable too.
    let head_number = call("eth_blockNumber", "[]");
    let mut node = node;
    let status = std::process::Command::new("kill")
        .args(["-TERM", &node.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    wait_for("the node to stop", || node.0.try_wait().ok().flatten());
    drop(node);
    let port = free_port();
    let _node = start_automine_node(&dir, port);
    wait_for("the restarted RPC server", || {
        rpc(port, "eth_chainId", "[]")
    });
    assert_eq!(
        rpc(port, "eth_blockNumber", "[]").unwrap()["result"],
        head_number
    );
    assert_eq!(
        rpc(
            port,
            "eth_getStorageAt",
            &format!(r#"["{who}","0x3","latest"]"#)
        )
        .unwrap()["result"],
        word
    );
}

/// State edits are blocks committed as imports are (one batch, durable within a second):
/// a dev node killed with SIGKILL right after a run of edits reopens at a head whose
/// state is that head's (the edit of block n, and no later one, is there), and
/// rewinding from it works.
#[test]
fn a_dev_node_killed_after_state_edits_reopens_with_its_heads_state() {
    let dir = common::temp_path("dev-kill");
    let port = free_port();
    let node = start_automine_node(&dir, port);
    wait_for("the RPC server", || rpc(port, "eth_chainId", "[]"));
    let who = "0x00000000000000000000000000000000000000aa";
    let start = quantity(&rpc(port, "eth_blockNumber", "[]").unwrap()["result"]);
    // Edit k sets the balance to k: the balance at block start + k is k.
    for k in 1..=20u64 {
        let r = rpc(port, "anvil_setBalance", &format!(r#"["{who}","{k:#x}"]"#)).unwrap();
        assert!(r["error"].is_null(), "{r}");
    }
    drop(node); // SIGKILL

    let port = free_port();
    let _node = start_automine_node(&dir, port);
    wait_for("the reopened RPC server", || rpc(port, "eth_chainId", "[]"));
    let head = quantity(&rpc(port, "eth_blockNumber", "[]").unwrap()["result"]);
    assert!(head >= start && head <= start + 20, "{start} {head}");
    let balance = rpc(port, "eth_getBalance", &format!(r#"["{who}","latest"]"#)).unwrap();
    assert_eq!(quantity(&balance["result"]), head - start, "{balance}");
    // The undo records came through too: a snapshot, an edit, a revert.
    let snap = rpc(port, "evm_snapshot", "[]").unwrap()["result"].clone();
    rpc(port, "anvil_setBalance", &format!(r#"["{who}","0x99"]"#)).unwrap();
    let r = rpc(port, "evm_revert", &format!("[{snap}]")).unwrap();
    assert_eq!(r["result"], true, "{r}");
    let balance = rpc(port, "eth_getBalance", &format!(r#"["{who}","latest"]"#)).unwrap();
    assert_eq!(quantity(&balance["result"]), head - start, "{balance}");
}

/// With a period, blocks come on the dev node's clock however busy its RPC is: a client
/// sending a transaction every 100 ms must not keep putting the next block off, and its
/// answers do not wait for a block.
#[test]
fn a_dev_node_with_a_period_seals_blocks_while_transactions_stream_in() {
    let port = free_port();
    let _node = Node::start(&[
        "--dev",
        "--dev.period",
        "1",
        "--http.port",
        &port.to_string(),
        "--authrpc.port",
        &free_port().to_string(),
    ]);
    wait_for("the RPC server", || rpc(port, "eth_chainId", "[]"));
    let start = quantity(&rpc(port, "eth_blockNumber", "[]").unwrap()["result"]);
    let began = std::time::Instant::now();
    let mut sent = 0;
    while began.elapsed() < std::time::Duration::from_millis(3_500) {
        let r = rpc(
            port,
            "eth_sendTransaction",
            r#"[{"from":"0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266","to":"0x70997970c51812dc3a010c7d01b50e0d17dc79c8","value":"0x1"}]"#,
        )
        .unwrap();
        assert!(r["error"].is_null(), "{r}");
        sent += 1;
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let now = quantity(&rpc(port, "eth_blockNumber", "[]").unwrap()["result"]);
    assert!(
        now >= start + 2,
        "{sent} transactions over 3.5 s with a 1 s period sealed blocks {start}..{now}"
    );
}

/// The blob pool after Osaka, whole node: a version-0 blob tx (one blob proof a blob)
/// sent with eth_sendRawTransaction to an Osaka dev node is pooled with cell proofs and
/// mined.
#[test]
fn an_osaka_dev_node_mines_a_version_0_blob_tx_sent_over_rpc() {
    use moat_common::transaction::SidecarVersion;
    let port = free_port();
    let _node = Node::start(&[
        "--dev",
        "--dev.osaka",
        "--dev.period",
        "0",
        "--http.port",
        &port.to_string(),
        "--authrpc.port",
        &free_port().to_string(),
    ]);
    wait_for("the RPC server", || rpc(port, "eth_chainId", "[]"));
    let key: alloy_primitives::B256 = common::DEV_KEYS[1].parse().unwrap();
    let signer = moat_crypto::secp::Signer::from_bytes(&key).unwrap();
    let tx = moat_common::testing::blob_tx_on_chain(
        SidecarVersion::V0,
        2,
        0,
        &signer,
        1337,
        100_000_000_000,
        1_000_000_000,
    );
    let raw = alloy_primitives::hex::encode_prefixed(tx.encoded_2718());
    let sent = rpc(port, "eth_sendRawTransaction", &format!(r#"["{raw}"]"#)).unwrap();
    assert_eq!(sent["result"], format!("{}", tx.hash()), "{sent}");
    let receipt = wait_for("the blob tx mined", || {
        let r = rpc(
            port,
            "eth_getTransactionReceipt",
            &format!(r#"["{}"]"#, tx.hash()),
        )?;
        (!r["result"].is_null()).then(|| r["result"].clone())
    });
    assert_eq!(receipt["status"], "0x1", "{receipt}");
    assert_eq!(receipt["blobGasUsed"], "0x40000", "two blobs: {receipt}");
}

/// The gapped reorder buffer, whole node: a blob tx one nonce ahead of its sender's
/// next is answered with its hash but neither pooled nor mined; once the gap's tx comes,
/// both are mined. Another left ahead past `--blobpool.gappedlifetime` is dropped, and
/// filling its gap later mines only the filler.
#[test]
fn a_gapped_blob_tx_is_mined_once_its_gap_fills_and_dropped_after_its_lifetime() {
    use moat_common::transaction::SidecarVersion;
    let port = free_port();
    let _node = Node::start(&[
        "--dev",
        "--dev.osaka",
        "--dev.period",
        "0",
        "--blobpool.gappedlifetime",
        "6s",
        "--http.port",
        &port.to_string(),
        "--authrpc.port",
        &free_port().to_string(),
    ]);
    wait_for("the RPC server", || rpc(port, "eth_chainId", "[]"));
    let key: B256 = common::DEV_KEYS[2].parse().unwrap();
    let signer = moat_crypto::secp::Signer::from_bytes(&key).unwrap();
    let send = |raw: String| rpc(port, "eth_sendRawTransaction", &format!(r#"["{raw}"]"#)).unwrap();
    let mined = |hash: B256| {
        rpc(port, "eth_getTransactionReceipt", &format!(r#"["{hash}"]"#))
            .is_some_and(|r| !r["result"].is_null())
    };
    let known = |hash: B256| {
        rpc(port, "eth_getTransactionByHash", &format!(r#"["{hash}"]"#))
            .is_some_and(|r| !r["result"].is_null())
    };
    let blob = |nonce: u64| {
        let tx = moat_common::testing::blob_tx_on_chain(
            SidecarVersion::V1,
            1,
            nonce,
            &signer,
            1337,
            100_000_000_000,
            1_000_000_000,
        );
        (
            tx.hash(),
            alloy_primitives::hex::encode_prefixed(tx.encoded_2718()),
        )
    };
    // A fresh account may hold nothing ahead (log10(nonce + 1) txs): nine transfers
    // first, each mined at once.
    for nonce in 0..9 {
        let (hash, raw) = common::signed_transfer(&signer, 1337, nonce, 1);
        assert_eq!(send(raw)["result"], format!("{hash}"));
        wait_for("a transfer mined", || mined(hash).then_some(()));
    }

    // The first blob tx loads the KZG setup (seconds in a debug build): done before
    // any gapped tx's lifetime starts.
    let (warm, warm_raw) = blob(9);
    assert_eq!(send(warm_raw)["result"], format!("{warm}"));
    wait_for("a first blob tx mined", || mined(warm).then_some(()));

    let (ahead, ahead_raw) = blob(11);
    assert_eq!(
        send(ahead_raw)["result"],
        format!("{ahead}"),
        "held, not refused"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(!known(ahead) && !mined(ahead), "waiting for its gap");
    let (filler, filler_raw) = blob(10);
    assert_eq!(send(filler_raw)["result"], format!("{filler}"));
    wait_for("the filler mined", || mined(filler).then_some(()));
    wait_for("the gapped tx mined after it", || {
        mined(ahead).then_some(())
    });

    let (late, late_raw) = blob(13);
    assert_eq!(send(late_raw)["result"], format!("{late}"));
    // Its lifetime, and a look of the upkeep (every half lifetime).
    std::thread::sleep(Duration::from_secs(10));
    let (filler, filler_raw) = blob(12);
    assert_eq!(send(filler_raw)["result"], format!("{filler}"));
    wait_for("the second filler mined", || mined(filler).then_some(()));
    std::thread::sleep(Duration::from_secs(2));
    assert!(!mined(late) && !known(late), "dropped after its lifetime");
}

/// eth_sendRawTransactionSync (EIP-7966), as go-ethereum answers it: the receipt once
/// the tx is mined, or, past the wait the call asked for, code 4 with geth's message and
/// the hash as data (the tx stays pooled).
#[test]
fn send_raw_transaction_sync_answers_with_the_receipt_or_times_out() {
    let port = free_port();
    let _node = Node::start(&[
        "--dev",
        "--dev.period",
        "1",
        "--http.port",
        &port.to_string(),
        "--authrpc.port",
        &free_port().to_string(),
    ]);
    wait_for("the RPC server", || rpc(port, "eth_chainId", "[]"));
    let key: B256 = common::DEV_KEYS[3].parse().unwrap();
    let signer = moat_crypto::secp::Signer::from_bytes(&key).unwrap();
    let (hash, raw) = common::signed_transfer(&signer, 1337, 0, 5);
    let answer = rpc(port, "eth_sendRawTransactionSync", &format!(r#"["{raw}"]"#)).unwrap();
    let receipt = &answer["result"];
    assert_eq!(receipt["transactionHash"], format!("{hash}"), "{answer}");
    assert_eq!(receipt["status"], "0x1");
    assert!(receipt["blockNumber"].is_string());

    // Nonce 2 behind a gap: pooled, never mined.
    let (queued, raw) = common::signed_transfer(&signer, 1337, 2, 5);
    let started = std::time::Instant::now();
    let answer = rpc(
        port,
        "eth_sendRawTransactionSync",
        &format!(r#"["{raw}", 1500]"#),
    )
    .unwrap();
    let waited = started.elapsed();
    assert_eq!(answer["error"]["code"], 4, "{answer}");
    assert_eq!(
        answer["error"]["message"],
        "The transaction was added to the transaction pool but wasn't processed in 1.5s"
    );
    assert_eq!(answer["error"]["data"], format!("{queued}"));
    assert!(waited >= Duration::from_millis(1_500), "{waited:?}");
    let pooled = rpc(
        port,
        "eth_getTransactionByHash",
        &format!(r#"["{queued}"]"#),
    )
    .unwrap();
    assert!(!pooled["result"].is_null(), "still pooled");
}
