//! The node as hive drives it: the engine API rebuilds the conformance chain from
//! genesis with its 601 newPayload calls, and the suite's forkchoiceUpdated is accepted
//! with the suite's JWT secret — also on a datadir filled by `moat import`.

mod common;

use common::{
    ENGINE_SECRET_HEX, engine_post, import_ethtest, post, rpc, start_engine_node, testdata,
};

fn bearer(secret: &[u8; 32], iat: u64) -> String {
    format!(
        "Authorization: Bearer {}\r\n",
        moat_rpc::engine::make_token(secret, iat)
    )
}

fn engine_call(port: u16, body: &str) -> (u16, serde_json::Value) {
    engine_post(port, body).expect("the engine answers")
}

fn datadir(tag: &str) -> common::TempPath {
    common::temp_path(&format!("engine-{tag}"))
}

fn headfcu() -> String {
    std::fs::read_to_string(testdata("headfcu.json")).unwrap()
}

#[test]
fn newpayload_replay_rebuilds_the_chain_and_headfcu_is_accepted() {
    let dir = datadir("replay");
    let (_node, http, auth) = start_engine_node(&dir);

    // No token, a wrong secret, a stale token: refused before any handler runs.
    let caps = r#"{"jsonrpc":"2.0","id":1,"method":"engine_exchangeCapabilities","params":[[]]}"#;
    assert_eq!(post(auth, "", caps).unwrap().0, 401);
    let wrong = bearer(&[7u8; 32], moat_rpc::engine::unix_now());
    assert_eq!(post(auth, &wrong, caps).unwrap().0, 401);
    let secret = moat_rpc::engine::parse_jwt_secret(ENGINE_SECRET_HEX).unwrap();
    let stale = bearer(&secret, moat_rpc::engine::unix_now() - 120);
    assert_eq!(post(auth, &stale, caps).unwrap().0, 401);
    assert_eq!(engine_call(auth, caps).0, 200);

    let requests: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(testdata("newpayload.json")).unwrap())
            .unwrap();
    assert_eq!(requests.len(), 601);
    // The genesis payload cannot hash to the proof-of-work genesis: INVALID, as in geth.
    let (code, response) = engine_call(auth, &requests[0].to_string());
    assert_eq!(code, 200);
    assert_eq!(response["result"]["status"], "INVALID", "{response}");
    for r in &requests[1..] {
        let (code, response) = engine_call(auth, &r.to_string());
        assert_eq!(code, 200);
        assert_eq!(
            response["result"]["status"], "VALID",
            "{} -> {response}",
            r["id"]
        );
    }
    assert_eq!(
        rpc(http, "eth_blockNumber", "[]").unwrap()["result"],
        "0x258"
    );

    let (_, response) = engine_call(auth, &headfcu());
    assert_eq!(
        response["result"]["payloadStatus"]["status"], "VALID",
        "{response}"
    );
}

#[test]
fn headfcu_is_accepted_after_an_offline_import() {
    let dir = datadir("import");
    import_ethtest(&dir);
    let (_node, http, auth) = start_engine_node(&dir);
    assert_eq!(
        rpc(http, "eth_blockNumber", "[]").unwrap()["result"],
        "0x258"
    );
    let (_, response) = engine_call(auth, &headfcu());
    let status = &response["result"]["payloadStatus"];
    assert_eq!(status["status"], "VALID", "{response}");
    assert_eq!(
        status["latestValidHash"],
        "0x44e3809c9a3cda717f00aea3a9da336d149612c8d5657fbc0028176ef8d94d2a"
    );
    logs_agree_with_receipts(http);
    recent_state_is_served(http);
    proofs_verify_against_state_roots(http);
}

/// State of the last 128 blocks is served (through the undo records), older is not.
fn recent_state_is_served(http: u16) {
    // The newest block with a transaction (the last blocks of the chain are empty).
    let (number, from) = (473..=600u64)
        .rev()
        .find_map(|n| {
            let b = rpc(
                http,
                "eth_getBlockByNumber",
                &format!(r#"["{n:#x}", true]"#),
            )?;
            let from = b["result"]["transactions"][0]["from"].as_str()?.to_string();
            Some((n, from))
        })
        .expect("a recent block with a transaction");
    let nonce_at = |block: u64| {
        let v = rpc(
            http,
            "eth_getTransactionCount",
            &format!(r#"["{from}","{block:#x}"]"#),
        )
        .unwrap();
        let hex = v["result"]
            .as_str()
            .unwrap_or_else(|| panic!("{v}"))
            .to_string();
        u64::from_str_radix(hex.trim_start_matches("0x"), 16).unwrap()
    };
    assert!(
        nonce_at(number - 1) < nonce_at(number),
        "block {number} spent a nonce of {from}"
    );
    let old = rpc(http, "eth_getBalance", &format!(r#"["{from}","0x190"]"#)).unwrap();
    assert_eq!(old["error"]["message"], "historical state is not available");
}

/// eth_getLogs over the imported chain (blocks 1–10: block 11 alone answers with more
/// than the 10 MiB response cap): every log is the one its receipt holds at that
/// index, and an address + topic filter returns only matching logs.
fn logs_agree_with_receipts(http: u16) {
    let all = rpc(
        http,
        "eth_getLogs",
        r#"[{"fromBlock":"0x1","toBlock":"0xa"}]"#,
    )
    .unwrap();
    let logs = all["result"]
        .as_array()
        .unwrap_or_else(|| panic!("a list of logs: {all}"))
        .clone();
    assert!(!logs.is_empty(), "the chain's first blocks emit logs");
    for log in logs.iter().take(20) {
        let receipt = rpc(
            http,
            "eth_getTransactionReceipt",
            &format!(r#"["{}"]"#, log["transactionHash"].as_str().unwrap()),
        )
        .unwrap();
        let found = receipt["result"]["logs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["logIndex"] == log["logIndex"])
            .expect("the receipt holds the log");
        assert_eq!(found, log);
    }
    let first = &logs[0];
    let filter = format!(
        r#"[{{"fromBlock":"0x1","toBlock":"0xa","address":"{}","topics":[["{}"]]}}]"#,
        first["address"].as_str().unwrap(),
        first["topics"][0].as_str().unwrap()
    );
    let some = rpc(http, "eth_getLogs", &filter).unwrap()["result"].clone();
    let some = some.as_array().unwrap();
    assert!(!some.is_empty() && some.len() <= logs.len());
    for l in some {
        assert_eq!(l["address"], first["address"]);
        assert_eq!(l["topics"][0], first["topics"][0]);
    }
    let by_hash = format!(
        r#"[{{"blockHash":"{}"}}]"#,
        first["blockHash"].as_str().unwrap()
    );
    let in_block = rpc(http, "eth_getLogs", &by_hash).unwrap()["result"].clone();
    assert!(in_block.as_array().unwrap().contains(first));
    let bad = rpc(
        http,
        "eth_getLogs",
        r#"[{"blockHash":"0x01","fromBlock":"0x1"}]"#,
    )
    .unwrap();
    assert!(bad["error"].is_object());
}

/// eth_getProof at the head and ten blocks back: the account proof verifies against the
/// block's state root with the account's fields as the leaf, and each slot proof against
/// the account's storage hash (present slots, an absent slot, an absent account).
fn proofs_verify_against_state_roots(http: u16) {
    use alloy_primitives::{B256, Bytes, U256, keccak256};
    use alloy_trie::{Nibbles, TrieAccount, proof::verify_proof};
    let hex_u = |v: &serde_json::Value| {
        U256::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
    };
    let nodes = |v: &serde_json::Value| -> Vec<Bytes> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().parse().unwrap())
            .collect()
    };
    let targets = [
        // The EIP-2935 history contract (hundreds of slots), the beacon roots contract,
        // a funded key of the suite, and an account that does not exist.
        (
            "0x0000F90827F1C53a10cb7A02335B175320002935",
            vec!["0xb", "0xc", "0x1"],
        ),
        (
            "0x000F3df6D732807Ef1319fB7B8bB8522d0Beac02",
            vec!["0x3c", "0x999999"],
        ),
        ("0x0c2c51a0990aee1d73c1228de158688341557508", vec!["0x0"]),
        ("0x00000000000000000000000000000000000000aa", vec!["0x1"]),
    ];
    for block in ["0x258", "0x24e"] {
        let header = rpc(
            http,
            "eth_getBlockByNumber",
            &format!(r#"["{block}", false]"#),
        )
        .unwrap();
        let state_root: B256 = header["result"]["stateRoot"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        for (address, slots) in &targets {
            let keys = serde_json::to_string(slots).unwrap();
            let r = rpc(
                http,
                "eth_getProof",
                &format!(r#"["{address}", {keys}, "{block}"]"#),
            )
            .unwrap();
            let p = &r["result"];
            assert!(p.is_object(), "{r}");
            let address: alloy_primitives::Address = address.parse().unwrap();
            let storage_hash: B256 = p["storageHash"].as_str().unwrap().parse().unwrap();
            let code_hash: B256 = p["codeHash"].as_str().unwrap().parse().unwrap();
            // An absent account is all zeros, its hashes too (as geth answers).
            let exists = !code_hash.is_zero();
            let storage_hash = if exists {
                storage_hash
            } else {
                alloy_trie::EMPTY_ROOT_HASH
            };
            let leaf = exists.then(|| {
                alloy_rlp::encode(TrieAccount {
                    nonce: hex_u(&p["nonce"]).to::<u64>(),
                    balance: hex_u(&p["balance"]),
                    storage_root: storage_hash,
                    code_hash,
                })
            });
            verify_proof(
                state_root,
                Nibbles::unpack(keccak256(address)),
                leaf,
                nodes(&p["accountProof"]).iter(),
            )
            .unwrap_or_else(|e| panic!("account proof of {address} at {block}: {e:?}"));
            for (i, key) in slots.iter().enumerate() {
                let s = &p["storageProof"][i];
                assert_eq!(s["key"], *key);
                let value = hex_u(&s["value"]);
                let slot = B256::from(
                    U256::from_str_radix(key.trim_start_matches("0x"), 16)
                        .unwrap()
                        .to_be_bytes::<32>(),
                );
                let expected = (!value.is_zero()).then(|| alloy_rlp::encode(value));
                verify_proof(
                    storage_hash,
                    Nibbles::unpack(keccak256(slot)),
                    expected,
                    nodes(&s["proof"]).iter(),
                )
                .unwrap_or_else(|e| panic!("slot {key} of {address} at {block}: {e:?}"));
            }
        }
    }
    // The history contract holds slot 0xb at the head.
    let r = rpc(
        http,
        "eth_getProof",
        r#"["0x0000F90827F1C53a10cb7A02335B175320002935", ["0xb"], "latest"]"#,
    )
    .unwrap();
    assert_ne!(r["result"]["storageProof"][0]["value"], "0x0", "{r}");
}
