//! What client libraries put in `eth_call` and `eth_estimateGas` beyond the plain fields,
//! and the read methods they call, over a small Prague chain held in memory and called
//! through the method table. Each test fails if the field or method is ignored:
//!
//! - `nonce`: parsed (a malformed one refused) and, as in geth, not used: calls skip
//!   nonce checks and a creation's address comes from the state's nonce;
//! - `authorizationList`: an EIP-7702 call runs the delegated code (and pays 25,000 a
//!   tuple);
//! - `blobVersionedHashes`: BLOBHASH sees them;
//! - state and block overrides as eth_estimateGas's third and fourth parameters;
//! - the block, ommer and header lookups ethers, web3.py and viem call.

mod method_table;

use alloy_primitives::{Address, B256, U256};
use jsonrpsee::RpcModule;
use method_table::call;
use moat_blockchain::chain::Chain;
use moat_common::Authorization;
use moat_common::config::{ChainConfig, Fork, Genesis, GenesisAccount};
use moat_crypto::secp::Signer;
use moat_mempool::{Pool, PoolConfig};
use moat_rpc::{RpcContext, StoreStateView};
use moat_storage::Store;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

const FROM: Address = Address::repeat_byte(0xf0);
/// Returns the word 42.
const FORTY_TWO: Address = Address::repeat_byte(0x42);
/// Stops if BLOBHASH(0) is set, reverts if not.
const NEEDS_BLOB: Address = Address::repeat_byte(0xb1);
/// `PUSH1 0 BLOBHASH PUSH1 10 JUMPI PUSH1 0 DUP1 REVERT JUMPDEST STOP`.
const NEEDS_BLOB_CODE: &str = "0x600049600a57600080fd5b00";
/// `NUMBER PUSH2 0x1234 EQ PUSH1 12 JUMPI PUSH1 0 DUP1 REVERT JUMPDEST STOP`: stops only
/// in block 0x1234.
const NEEDS_BLOCK_1234: &str = "0x4361123414600c57600080fd5b00";

fn module() -> RpcModule<RpcContext> {
    let mut alloc = BTreeMap::new();
    alloc.insert(
        FROM,
        GenesisAccount {
            balance: U256::from(10u128.pow(20)),
            ..Default::default()
        },
    );
    alloc.insert(
        FORTY_TWO,
        GenesisAccount {
            code: "0x602a60005260206000f3".parse().unwrap(),
            ..Default::default()
        },
    );
    alloc.insert(
        NEEDS_BLOB,
        GenesisAccount {
            code: NEEDS_BLOB_CODE.parse().unwrap(),
            ..Default::default()
        },
    );
    let genesis = Genesis {
        config: ChainConfig::all_forks_at_genesis(1337, Fork::Prague),
        gas_limit: 30_000_000,
        alloc,
        base_fee_per_gas: Some(1_000_000_000),
        excess_blob_gas: Some(0),
        blob_gas_used: Some(0),
        ..Default::default()
    };
    let store = Store::in_memory();
    let chain = Chain::init(store.clone(), &genesis).unwrap();
    let view = StoreStateView::new(store, chain.config().clone());
    let pool = Pool::new(PoolConfig::new(chain.config().clone()), Arc::new(view));
    moat_rpc::module(RpcContext::new(chain, pool), "test".into()).unwrap()
}

fn quantity(v: &Value) -> u64 {
    u64::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

/// geth takes a call's `nonce` but skips nonce checks, and a creation's address comes
/// from the state's nonce (go-ethereum 1.16 answers the same for nonce 5 as without
/// one): the field is parsed (a malformed one is refused) and changes nothing else.
#[tokio::test(flavor = "multi_thread")]
async fn calls_and_estimates_take_the_nonce_as_geth() {
    let m = module();
    // Init code `ADDRESS PUSH1 0 MSTORE PUSH1 32 PUSH1 0 RETURN`: the new address.
    let create = |nonce: Option<&str>| {
        let mut o = json!({ "from": FROM, "data": "0x3060005260206000f3" });
        if let Some(n) = nonce {
            o["nonce"] = json!(n);
        }
        o
    };
    let expected = json!(format!("{:#x}", FROM.create(0).into_word()));
    for nonce in [None, Some("0x5")] {
        let out = call(&m, "eth_call", json!([create(nonce), "latest"])).await;
        assert_eq!(out["result"], expected, "nonce {nonce:?}: {out}");
        let est = call(&m, "eth_estimateGas", json!([create(nonce)])).await;
        assert!(quantity(&est["result"]) > 53_000, "nonce {nonce:?}: {est}");
    }
    for method in ["eth_call", "eth_estimateGas"] {
        let bad = call(&m, method, json!([create(Some("0xzz")), "latest"])).await;
        assert_eq!(bad["error"]["code"], json!(-32602), "{method}: {bad}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_and_estimates_take_an_authorization_list() {
    let m = module();
    let authority = Signer::from_bytes(&B256::repeat_byte(0x11)).unwrap();
    let auth = Authorization::sign(U256::from(1337), FORTY_TWO, 0, &authority);
    let tuple = json!({
        "chainId": format!("{:#x}", auth.chain_id),
        "address": auth.address,
        "nonce": "0x0",
        "yParity": format!("{:#x}", auth.y_parity),
        "r": format!("{:#x}", auth.r),
        "s": format!("{:#x}", auth.s),
    });
    let req = json!({ "from": FROM, "to": authority.address(), "authorizationList": [tuple] });
    let out = call(&m, "eth_call", json!([req, "latest"])).await;
    assert_eq!(out["result"], json!(format!("{:#066x}", 42)), "{out}");
    let plain = json!({ "from": FROM, "to": authority.address() });
    let out = call(&m, "eth_call", json!([plain, "latest"])).await;
    assert_eq!(out["result"], json!("0x"), "no code without the delegation");
    let est = call(&m, "eth_estimateGas", json!([req])).await;
    assert!(quantity(&est["result"]) >= 21_000 + 25_000, "{est}");
    let est = call(&m, "eth_estimateGas", json!([plain])).await;
    assert_eq!(est["result"], json!("0x5208"));
    let bad = json!({ "from": FROM, "to": authority.address(), "authorizationList": [{}] });
    let refused = call(&m, "eth_call", json!([bad, "latest"])).await;
    assert_eq!(refused["error"]["code"], json!(-32602), "{refused}");
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_and_estimates_take_blob_fields() {
    let m = module();
    let mut hash = B256::repeat_byte(0xab);
    hash.0[0] = 0x01;
    let with_blob = json!({ "from": FROM, "to": NEEDS_BLOB, "blobVersionedHashes": [hash] });
    let out = call(&m, "eth_call", json!([with_blob, "latest"])).await;
    assert_eq!(out["result"], json!("0x"), "{out}");
    let est = call(&m, "eth_estimateGas", json!([with_blob])).await;
    assert!(quantity(&est["result"]) >= 21_000, "{est}");
    // With a blob fee cap too (ethers and viem fill one).
    let mut capped = with_blob.clone();
    capped["maxFeePerBlobGas"] = json!("0x10");
    capped["maxFeePerGas"] = json!("0x77359400");
    let out = call(&m, "eth_call", json!([capped, "latest"])).await;
    assert_eq!(out["result"], json!("0x"), "{out}");
    // Without the hashes BLOBHASH(0) is zero and the code reverts.
    let plain = json!({ "from": FROM, "to": NEEDS_BLOB });
    let out = call(&m, "eth_call", json!([plain, "latest"])).await;
    assert_eq!(out["error"]["code"], json!(3), "{out}");
    let est = call(&m, "eth_estimateGas", json!([plain])).await;
    assert_eq!(est["error"]["code"], json!(3), "{est}");
}

#[tokio::test(flavor = "multi_thread")]
async fn estimates_take_state_and_block_overrides() {
    let m = module();
    let target = Address::repeat_byte(0x77);
    let req = json!({ "from": FROM, "to": target });
    let code = json!({ target.to_string(): { "code": NEEDS_BLOCK_1234 } });
    // No code there: a plain transfer.
    let plain = call(&m, "eth_estimateGas", json!([req])).await;
    assert_eq!(plain["result"], json!("0x5208"), "{plain}");
    // The state override's code runs, and reverts outside block 0x1234.
    let reverts = call(&m, "eth_estimateGas", json!([req, "latest", code])).await;
    assert_eq!(reverts["error"]["code"], json!(3), "{reverts}");
    let ok = call(
        &m,
        "eth_estimateGas",
        json!([req, "latest", code, { "number": "0x1234" }]),
    )
    .await;
    assert!(quantity(&ok["result"]) > 21_000, "{ok}");
}

#[tokio::test(flavor = "multi_thread")]
async fn block_ommer_and_header_lookups_answer() {
    let m = module();
    let block = call(&m, "eth_getBlockByNumber", json!(["0x0", false])).await["result"].clone();
    let hash = block["hash"].clone();
    for (method, params, expected) in [
        (
            "eth_getBlockTransactionCountByNumber",
            json!(["0x0"]),
            json!("0x0"),
        ),
        (
            "eth_getBlockTransactionCountByHash",
            json!([hash]),
            json!("0x0"),
        ),
        (
            "eth_getUncleCountByBlockNumber",
            json!(["0x0"]),
            json!("0x0"),
        ),
        ("eth_getUncleCountByBlockHash", json!([hash]), json!("0x0")),
        (
            "eth_getUncleByBlockNumberAndIndex",
            json!(["0x0", "0x0"]),
            Value::Null,
        ),
        (
            "eth_getUncleByBlockHashAndIndex",
            json!([hash, "0x0"]),
            Value::Null,
        ),
        (
            "eth_getTransactionByBlockNumberAndIndex",
            json!(["0x0", "0x0"]),
            Value::Null,
        ),
        (
            "eth_getTransactionByBlockHashAndIndex",
            json!([hash, "0x0"]),
            Value::Null,
        ),
        // Unknown blocks: null, as geth.
        (
            "eth_getBlockTransactionCountByNumber",
            json!(["0x9"]),
            Value::Null,
        ),
        ("eth_getHeaderByNumber", json!(["0x9"]), Value::Null),
    ] {
        let out = call(&m, method, params.clone()).await;
        assert_eq!(out["result"], expected, "{method} {params}: {out}");
        assert!(out["error"].is_null(), "{method}: {out}");
    }
    // A header is the block without its body.
    for (method, params) in [
        ("eth_getHeaderByNumber", json!(["0x0"])),
        ("eth_getHeaderByHash", json!([hash])),
    ] {
        let header = call(&m, method, params).await["result"].clone();
        assert_eq!(header["hash"], hash, "{method}: {header}");
        assert_eq!(header["stateRoot"], block["stateRoot"], "{method}");
        assert!(header.get("transactions").is_none(), "{method}: {header}");
    }
}

/// web3.py and viem subscribe to "syncing" (and "logs", whose delivery
/// read_methods.rs's logs_subscriptions_deliver_each_new_heads_logs checks): both are
/// taken. A node that is not syncing sends nothing until a sync starts.
#[tokio::test(flavor = "multi_thread")]
async fn syncing_and_logs_subscriptions_are_taken() {
    let m = module();
    for params in [json!(["syncing"]), json!(["logs", { "address": FROM }])] {
        let request =
            json!({ "jsonrpc": "2.0", "id": 1, "method": "eth_subscribe", "params": params });
        let (answer, _rx) = m.raw_json_request(&request.to_string(), 16).await.unwrap();
        let answer: Value = serde_json::from_str(answer.get()).unwrap();
        // A subscription id (the server's are hex strings; the bare method table's numbers).
        assert!(
            answer["error"].is_null() && !answer["result"].is_null(),
            "{params}: {answer}"
        );
    }
    let request =
        json!({ "jsonrpc": "2.0", "id": 1, "method": "eth_subscribe", "params": ["nope"] });
    let (answer, _) = m.raw_json_request(&request.to_string(), 16).await.unwrap();
    let answer: Value = serde_json::from_str(answer.get()).unwrap();
    assert!(answer["error"].is_object(), "{answer}");
}

/// An access list is paid for in eth_call too (2,400 an address): 21,000 gas is enough
/// for a plain transfer and too little with a list. (eth_estimateGas counting it, 25,300
/// for an address and a key, is read_methods.rs's
/// estimates_and_access_lists_count_the_access_list.)
#[tokio::test(flavor = "multi_thread")]
async fn calls_pay_for_the_access_list() {
    let m = module();
    let to = Address::repeat_byte(0x99);
    let plain = json!({ "from": FROM, "to": to, "gas": "0x5208" });
    let out = call(&m, "eth_call", json!([plain, "latest"])).await;
    assert_eq!(out["result"], json!("0x"), "{out}");
    let mut listed = plain.clone();
    listed["accessList"] = json!([{ "address": to, "storageKeys": [] }]);
    let out = call(&m, "eth_call", json!([listed, "latest"])).await;
    let message = out["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("23400"), "{out}");
    listed["gas"] = json!(format!("{:#x}", 21_000 + 2_400));
    let out = call(&m, "eth_call", json!([listed, "latest"])).await;
    assert_eq!(out["result"], json!("0x"), "{out}");
}

/// Blob and set-code calls that no transaction could be are errors (as geth's state
/// transition refuses them), never a panic or a result: a blob call that creates, more
/// blobs than a block holds, a hash that is not a version-1 commitment, a set-code call
/// that creates. A tuple for chain 2^256 − 1 is skipped, as in a block.
#[tokio::test(flavor = "multi_thread")]
async fn impossible_blob_and_set_code_calls_are_errors() {
    let m = module();
    let mut hash = B256::repeat_byte(0xab);
    hash.0[0] = 0x01;
    let authority = Signer::from_bytes(&B256::repeat_byte(0x11)).unwrap();
    let auth = Authorization::sign(U256::from(1337), FORTY_TWO, 0, &authority);
    let tuple = |chain_id: U256| {
        json!({
            "chainId": format!("{chain_id:#x}"),
            "address": auth.address,
            "nonce": "0x0",
            "yParity": format!("{:#x}", auth.y_parity),
            "r": format!("{:#x}", auth.r),
            "s": format!("{:#x}", auth.s),
        })
    };
    let cases = [
        (
            json!({ "from": FROM, "data": "0x00", "blobVersionedHashes": [hash] }),
            "blob transaction of type create",
        ),
        (
            json!({ "from": FROM, "to": NEEDS_BLOB, "blobVersionedHashes": vec![hash; 1000] }),
            "blob transaction has too many blobs",
        ),
        (
            json!({ "from": FROM, "to": NEEDS_BLOB, "blobVersionedHashes": [B256::repeat_byte(0xab)] }),
            "blob version not supported",
        ),
        (
            json!({ "from": FROM, "data": "0x00", "authorizationList": [tuple(auth.chain_id)] }),
            "set code transaction of type create",
        ),
    ];
    for (req, message) in cases {
        for method in ["eth_call", "eth_estimateGas"] {
            let out = call(&m, method, json!([req, "latest"])).await;
            assert_eq!(out["error"]["code"], json!(-32000), "{method} {req}: {out}");
            let text = out["error"]["message"].as_str().unwrap_or_default();
            assert!(text.starts_with(message), "{method} {req}: {out}");
        }
    }
    let other_chain =
        json!({ "from": FROM, "to": authority.address(), "authorizationList": [tuple(U256::MAX)] });
    let out = call(&m, "eth_call", json!([other_chain, "latest"])).await;
    assert_eq!(out["result"], json!("0x"), "no delegation: {out}");
}
