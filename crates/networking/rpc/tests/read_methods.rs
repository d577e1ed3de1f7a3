//! The block, raw and trace methods over the conformance chain (imported into memory),
//! called through the method table: each answer is checked against what the chain
//! itself holds (hashes, roots, receipts, gas).

mod method_table;

use alloy_primitives::{B256, Bytes, keccak256};
use jsonrpsee::RpcModule;
use method_table::call;
use moat_blockchain::chain::Chain;
use moat_common::block::Block;
use moat_common::config::Genesis;
use moat_common::receipt::{self, Receipt};
use moat_mempool::{Pool, PoolConfig};
use moat_rpc::{RpcContext, StoreStateView};
use moat_storage::Store;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../../shared/testdata/ethtest")
        .join(name)
}

struct Fixture {
    module: RpcModule<RpcContext>,
    chain: Chain,
}

fn fixture() -> Fixture {
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    let store = Store::in_memory();
    let chain = Chain::init(store.clone(), &genesis).unwrap();
    let bytes = std::fs::read(testdata("chain.rlp")).unwrap();
    for block in Block::decode_all(&bytes).unwrap() {
        chain.import(&block).unwrap();
    }
    let view = StoreStateView::new(store, chain.config().clone());
    let pool = Pool::new(PoolConfig::new(chain.config().clone()), Arc::new(view));
    let module = moat_rpc::module(RpcContext::new(chain.clone(), pool), "test".into()).unwrap();
    Fixture { module, chain }
}

/// The newest block of the chain with at least one transaction.
fn busy_block(chain: &Chain) -> Block {
    let (head, _) = chain.head().unwrap();
    (0..=head)
        .rev()
        .filter_map(|n| chain.header_by_number(n).unwrap())
        .map(|h| chain.block(&h.hash()).unwrap().unwrap())
        .find(|b| !b.transactions.is_empty())
        .expect("the chain has transactions")
}

fn hex_bytes(v: &Value) -> Vec<u8> {
    serde_json::from_value::<Bytes>(v.clone()).unwrap().to_vec()
}

#[tokio::test(flavor = "multi_thread")]
async fn block_receipts_counts_and_raw_forms_match_the_chain() {
    let Fixture { module, chain } = fixture();
    let block = busy_block(&chain);
    let number = json!(format!("{:#x}", block.header.number));

    let receipts = call(&module, "eth_getBlockReceipts", json!([number])).await;
    let receipts = receipts["result"].as_array().unwrap().clone();
    assert_eq!(receipts.len(), block.transactions.len());
    for (i, tx) in block.transactions.iter().enumerate() {
        let one = call(&module, "eth_getTransactionReceipt", json!([tx.hash()])).await;
        assert_eq!(receipts[i], one["result"], "receipt {i}");
    }
    let by_hash = call(&module, "eth_getBlockReceipts", json!([block.hash])).await;
    assert_eq!(by_hash["result"], Value::Array(receipts));
    let unknown = call(
        &module,
        "eth_getBlockReceipts",
        json!([B256::repeat_byte(1)]),
    )
    .await;
    assert_eq!(unknown["result"], Value::Null);

    let count = call(
        &module,
        "eth_getBlockTransactionCountByHash",
        json!([block.hash]),
    )
    .await;
    assert_eq!(
        count["result"],
        json!(format!("{:#x}", block.transactions.len()))
    );
    let first = call(
        &module,
        "eth_getTransactionByBlockNumberAndIndex",
        json!([number, "0x0"]),
    )
    .await;
    assert_eq!(first["result"]["hash"], json!(block.transactions[0].hash()));
    assert_eq!(
        first["result"]["blockTimestamp"],
        json!(format!("{:#x}", block.header.timestamp))
    );

    let raw_block = call(&module, "debug_getRawBlock", json!([number])).await;
    let decoded = Block::decode(&mut &hex_bytes(&raw_block["result"])[..]).unwrap();
    assert_eq!(decoded.hash, block.hash);
    let raw_header = call(&module, "debug_getRawHeader", json!([number])).await;
    assert_eq!(keccak256(hex_bytes(&raw_header["result"])), block.hash);
    let raw_receipts = call(&module, "debug_getRawReceipts", json!([number])).await;
    let decoded: Vec<Receipt> = raw_receipts["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| Receipt::decode_2718(&hex_bytes(r)).unwrap())
        .collect();
    assert_eq!(receipt::receipts_root(&decoded), block.header.receipts_root);
    let raw_tx = call(
        &module,
        "debug_getRawTransaction",
        json!([block.transactions[0].hash()]),
    )
    .await;
    assert_eq!(
        keccak256(hex_bytes(&raw_tx["result"])),
        block.transactions[0].hash()
    );
    // A hash without its 0x prefix is refused, as geth refuses it.
    let bare = format!("{:x}", block.transactions[0].hash());
    let refused = call(&module, "debug_getRawTransaction", json!([bare])).await;
    assert_eq!(refused["error"]["code"], json!(-32602));

    let empty = call(&module, "eth_getStorageValues", json!([{}, "latest"])).await;
    assert_eq!(empty["error"]["code"], json!(-32602));
}

#[tokio::test(flavor = "multi_thread")]
async fn traces_agree_with_the_receipts() {
    let Fixture { module, chain } = fixture();
    let block = busy_block(&chain);
    let receipts = chain.receipts(&block.hash).unwrap().unwrap();
    let tx = &block.transactions[0];
    let gas_used = receipts[0].cumulative_gas_used;

    let logger = call(&module, "debug_traceTransaction", json!([tx.hash()])).await;
    assert_eq!(logger["result"]["gas"], json!(gas_used), "{logger}");
    assert_eq!(logger["result"]["failed"], json!(!receipts[0].success));
    assert!(logger["result"]["structLogs"].is_array());

    let calls = call(
        &module,
        "debug_traceTransaction",
        json!([tx.hash(), { "tracer": "callTracer" }]),
    )
    .await;
    let sender = tx.recover_sender().unwrap();
    assert_eq!(calls["result"]["from"], json!(sender), "{calls}");
    assert_eq!(calls["result"]["gasUsed"], json!(format!("{gas_used:#x}")));

    let pre = call(
        &module,
        "debug_traceTransaction",
        json!([tx.hash(), { "tracer": "prestateTracer" }]),
    )
    .await;
    assert!(pre["result"][format!("{sender:#x}")].is_object(), "{pre}");

    let all = call(&module, "debug_traceBlockByHash", json!([block.hash])).await;
    let all = all["result"].as_array().unwrap().clone();
    assert_eq!(all.len(), block.transactions.len());
    assert_eq!(all[0]["txHash"], json!(tx.hash()));
    assert_eq!(all[0]["result"], logger["result"]);

    let genesis = call(&module, "debug_traceBlockByNumber", json!(["0x0"])).await;
    assert_eq!(genesis["error"]["code"], json!(-32000));
    let unknown = call(
        &module,
        "debug_traceTransaction",
        json!([B256::repeat_byte(7)]),
    )
    .await;
    assert_eq!(unknown["error"]["code"], json!(-32000));
}

/// ethers fills an access list and asks for an estimate: the list's cost (2,400 an
/// address, 1,900 a key) must be in it, or the transaction is sent with too little gas.
#[tokio::test(flavor = "multi_thread")]
async fn estimates_and_access_lists_count_the_access_list() {
    let Fixture { module, .. } = fixture();
    let accounts: Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("accounts.json")).unwrap()).unwrap();
    let from = accounts.as_object().unwrap().keys().next().unwrap().clone();
    let to = format!("{:#x}", alloy_primitives::Address::repeat_byte(0x42));
    let list = json!([{ "address": to, "storageKeys": [B256::ZERO] }]);
    let plain = call(
        &module,
        "eth_estimateGas",
        json!([{ "from": from, "to": to, "value": "0x1" }]),
    )
    .await;
    assert_eq!(plain["result"], json!("0x5208"), "{plain}");
    let with_list = call(
        &module,
        "eth_estimateGas",
        json!([{ "from": from, "to": to, "value": "0x1", "accessList": list }]),
    )
    .await;
    assert_eq!(
        with_list["result"],
        json!(format!("{:#x}", 21_000 + 2_400 + 1_900))
    );
    // A plain transfer touches no storage: its own list is empty.
    let created = call(
        &module,
        "eth_createAccessList",
        json!([{ "from": from, "to": to, "value": "0x1" }]),
    )
    .await;
    assert_eq!(
        created["result"],
        json!({ "accessList": [], "gasUsed": "0x5208" })
    );
}

/// viem and ethers pass state overrides as eth_call's third parameter: code, balance and
/// storage laid over the block's state for the one call.
#[tokio::test(flavor = "multi_thread")]
async fn calls_take_state_overrides() {
    let Fixture { module, .. } = fixture();
    let target = format!("{:#x}", alloy_primitives::Address::repeat_byte(0x77));
    // SLOAD(0), returned as one word.
    let sload0 = "0x60005460005260206000f3";
    // SELFBALANCE, returned as one word.
    let self_balance = "0x4760005260206000f3";
    let word = |n: u64| format!("{:#066x}", n);
    let out = call(
        &module,
        "eth_call",
        json!([
            { "to": target },
            "latest",
            { target.clone(): { "code": sload0, "stateDiff": { word(0): word(42) } } }
        ]),
    )
    .await;
    assert_eq!(out["result"], json!(word(42)), "{out}");
    let out = call(
        &module,
        "eth_call",
        json!([
            { "to": target },
            "latest",
            { target.clone(): { "code": self_balance, "balance": "0x1234" } }
        ]),
    )
    .await;
    assert_eq!(out["result"], json!(word(0x1234)), "{out}");
    // Without overrides the address has no code: an empty answer.
    let out = call(&module, "eth_call", json!([{ "to": target }, "latest"])).await;
    assert_eq!(out["result"], json!("0x"));
    let both = call(
        &module,
        "eth_call",
        json!([
            { "to": target },
            "latest",
            { target.clone(): { "state": { word(0): word(1) }, "stateDiff": { word(0): word(2) } } }
        ]),
    )
    .await;
    assert_eq!(both["error"]["code"], json!(-32602), "{both}");
}

/// ethers' `contract.on` over HTTP polls a log filter; web3.py polls block filters.
#[tokio::test(flavor = "multi_thread")]
async fn filters_report_what_is_new_since_the_last_poll() {
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    let store = Store::in_memory();
    let chain = Chain::init(store.clone(), &genesis).unwrap();
    let blocks = Block::decode_all(&std::fs::read(testdata("chain.rlp")).unwrap()).unwrap();
    let (first, rest) = blocks.split_at(blocks.len() / 2);
    for b in first {
        chain.import(b).unwrap();
    }
    let view = StoreStateView::new(store, chain.config().clone());
    let pool = Pool::new(PoolConfig::new(chain.config().clone()), Arc::new(view));
    let module = moat_rpc::module(RpcContext::new(chain.clone(), pool), "test".into()).unwrap();

    let blocks_id = call(&module, "eth_newBlockFilter", json!([])).await["result"].clone();
    let logs_id = call(&module, "eth_newFilter", json!([{}])).await["result"].clone();
    let nothing = call(&module, "eth_getFilterChanges", json!([blocks_id])).await;
    assert_eq!(nothing["result"], json!([]));

    for b in rest {
        chain.import(b).unwrap();
    }
    let hashes = call(&module, "eth_getFilterChanges", json!([blocks_id])).await;
    let expected: Vec<Value> = rest.iter().map(|b| json!(b.hash)).collect();
    assert_eq!(hashes["result"], Value::Array(expected));
    let again = call(&module, "eth_getFilterChanges", json!([blocks_id])).await;
    assert_eq!(again["result"], json!([]));

    let range = json!([{
        "fromBlock": format!("{:#x}", rest[0].header.number),
        "toBlock": format!("{:#x}", rest.last().unwrap().header.number),
    }]);
    let direct = call(&module, "eth_getLogs", range).await;
    let polled = call(&module, "eth_getFilterChanges", json!([logs_id])).await;
    assert_eq!(polled["result"], direct["result"]);
    assert!(!direct["result"].as_array().unwrap().is_empty());

    let removed = call(&module, "eth_uninstallFilter", json!([blocks_id])).await;
    assert_eq!(removed["result"], json!(true));
    let again = call(&module, "eth_uninstallFilter", json!([blocks_id])).await;
    assert_eq!(again["result"], json!(false));
    let gone = call(&module, "eth_getFilterChanges", json!([blocks_id])).await;
    assert_eq!(gone["error"]["code"], json!(-32000));
}

/// ethers' `contract.on` over WebSocket subscribes to logs: each new head's matching
/// logs arrive, one message each.
#[tokio::test(flavor = "multi_thread")]
async fn logs_subscriptions_deliver_each_new_heads_logs() {
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    let store = Store::in_memory();
    let chain = Chain::init(store.clone(), &genesis).unwrap();
    let blocks = Block::decode_all(&std::fs::read(testdata("chain.rlp")).unwrap()).unwrap();
    let (first, rest) = blocks.split_at(blocks.len() / 2);
    for b in first {
        chain.import(b).unwrap();
    }
    let view = StoreStateView::new(store, chain.config().clone());
    let pool = Pool::new(PoolConfig::new(chain.config().clone()), Arc::new(view));
    let ctx = RpcContext::new(chain.clone(), pool);
    let heads = ctx.head_notifier();
    let module = moat_rpc::module(ctx, "test".into()).unwrap();

    let subscribe = |params: Value| {
        json!({ "jsonrpc": "2.0", "id": 1, "method": "eth_subscribe", "params": params })
            .to_string()
    };
    let (accepted, mut rx) = module
        .raw_json_request(&subscribe(json!(["logs", {}])), 1024)
        .await
        .unwrap();
    assert!(accepted.get().contains("\"result\""), "{}", accepted.get());
    let (refused, _) = module
        .raw_json_request(&subscribe(json!(["logs", { "fromBlock": "0x1" }])), 16)
        .await
        .unwrap();
    assert!(refused.get().contains("\"error\""), "{}", refused.get());

    let mut expected = Vec::new();
    for b in rest {
        chain.import(b).unwrap();
        heads.notify_new_head(&b.header);
        let logs = call(&module, "eth_getLogs", json!([{ "blockHash": b.hash }])).await;
        expected.extend(logs["result"].as_array().unwrap().clone());
    }
    assert!(!expected.is_empty());
    let mut got = Vec::new();
    while got.len() < expected.len() {
        let message = tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv())
            .await
            .expect("a log within 10 s")
            .expect("the subscription is open");
        let message: Value = serde_json::from_str(message.get()).unwrap();
        got.push(message["params"]["result"].clone());
    }
    assert_eq!(got, expected);
}

/// debug_traceCall runs the call as eth_call does, under the tracer asked for.
#[tokio::test(flavor = "multi_thread")]
async fn trace_call_runs_the_call_under_the_tracer() {
    let Fixture { module, .. } = fixture();
    let target = format!("{:#x}", alloy_primitives::Address::repeat_byte(0x42));
    let from = format!("{:#x}", alloy_primitives::Address::repeat_byte(0x01));
    let out = call(
        &module,
        "debug_traceCall",
        json!([{ "from": from, "to": target }, "latest", { "tracer": "callTracer" }]),
    )
    .await;
    assert_eq!(out["result"]["from"], json!(from), "{out}");
    assert_eq!(out["result"]["to"], json!(target));
    assert_eq!(out["result"]["type"], json!("CALL"));
    let logger = call(&module, "debug_traceCall", json!([{ "to": target }])).await;
    assert_eq!(logger["result"]["gas"], json!(21_000), "{logger}");
    assert_eq!(logger["result"]["structLogs"], json!([]));
}

/// viem passes block overrides as eth_call's fourth parameter.
#[tokio::test(flavor = "multi_thread")]
async fn calls_take_block_overrides() {
    let Fixture { module, .. } = fixture();
    let target = format!("{:#x}", alloy_primitives::Address::repeat_byte(0x78));
    // NUMBER, returned as one word.
    let number = "0x4360005260206000f3";
    let word = |n: u64| format!("{:#066x}", n);
    let code = json!({ target.clone(): { "code": number } });
    let out = call(
        &module,
        "eth_call",
        json!([{ "to": target }, "latest", code, { "number": "0x1234" }]),
    )
    .await;
    assert_eq!(out["result"], json!(word(0x1234)), "{out}");
    let refused = call(
        &module,
        "eth_call",
        json!([{ "to": target }, "latest", code, { "blobBaseFee": "0x1" }]),
    )
    .await;
    assert_eq!(refused["error"]["code"], json!(-32602), "{refused}");
}
