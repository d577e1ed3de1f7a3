//! The engine API's V1 methods on a Paris chain (the merge, no withdrawals yet), over
//! real HTTP with JWT: forkchoiceUpdatedV1 with attributes, getPayloadV1,
//! newPayloadV1 of what was built, forkchoiceUpdatedV1 to it; and the answers V1 gets
//! for what it cannot carry (withdrawals, a beacon root, a Shanghai payload).

use alloy_primitives::{Address, B256};
use moat_blockchain::chain::Chain;
use moat_blockchain::payload::PayloadService;
use moat_common::config::Genesis;
use moat_crypto::secp::Signer;
use moat_mempool::{Pool, PoolConfig, TxInput, TxOrigin};
use moat_rpc::{EngineConfig, EngineContext, StoreStateView};
use moat_storage::Store;
use serde_json::{Value, json};
use std::sync::Arc;

mod engine_common;
use engine_common::*;

/// Shanghai starts here: blocks before it are Paris blocks.
const SHANGHAI_TIME: u64 = 24;

/// Merged at genesis (total difficulty 0), Shanghai at [`SHANGHAI_TIME`].
fn genesis(rich: Address) -> Genesis {
    let genesis = json!({
        "config": {
            "chainId": CHAIN_ID, "homesteadBlock": 0, "eip150Block": 0, "eip155Block": 0,
            "eip158Block": 0, "byzantiumBlock": 0, "constantinopleBlock": 0,
            "petersburgBlock": 0, "istanbulBlock": 0, "berlinBlock": 0, "londonBlock": 0,
            "mergeNetsplitBlock": 0, "terminalTotalDifficulty": 0,
            "shanghaiTime": SHANGHAI_TIME,
        },
        "gasLimit": "0x1c9c380", "difficulty": "0x0", "timestamp": "0x0",
        "alloc": { format!("{rich:x}"): { "balance": "0xde0b6b3a7640000" } },
    });
    Genesis::from_json(&genesis.to_string()).expect("test genesis parses")
}

fn attributes_v1(timestamp: u64) -> Value {
    json!({
        "timestamp": format!("{timestamp:#x}"),
        "prevRandao": B256::repeat_byte(7),
        "suggestedFeeRecipient": Address::repeat_byte(0xfe),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paris_blocks_go_through_the_v1_methods() {
    let rich = Signer::from_seed(1);
    let store = Store::in_memory();
    let chain = Chain::init(store.clone(), &genesis(rich.address())).expect("genesis");
    let view = StoreStateView::new(store, chain.config().clone());
    let pool = Pool::new(PoolConfig::new(chain.config().clone()), Arc::new(view));
    let chain = chain.with_sender_cache(pool.sender_cache().clone());
    let payloads = PayloadService::new(chain.clone(), pool.clone());
    let ctx = EngineContext::new(
        chain.clone(),
        pool.clone(),
        payloads,
        moat_blockchain::maintain::spawn(&chain, &pool),
    );
    let config = EngineConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        ..EngineConfig::new(SECRET)
    };
    let handle = moat_rpc::start_engine(config, ctx).await.unwrap();
    let addr = handle.local_addr();

    let caps = result(addr, "engine_exchangeCapabilities", json!([[]])).await;
    for m in [
        "engine_newPayloadV1",
        "engine_forkchoiceUpdatedV1",
        "engine_getPayloadV1",
    ] {
        assert!(caps.as_array().unwrap().contains(&json!(m)), "{caps}");
    }

    let tx = transfer(&rich, 0);
    pool.add_transaction(TxInput::Raw(tx.encoded_2718().into()), TxOrigin::Local)
        .await
        .expect("pool admits the transfer");
    let genesis_hash = chain.head().unwrap().1;

    // V1 attributes carry no withdrawals and no beacon root.
    let mut with_withdrawals = attributes_v1(12);
    with_withdrawals["withdrawals"] = json!([]);
    assert_eq!(
        error_code(
            addr,
            "engine_forkchoiceUpdatedV1",
            json!([fcu_state(genesis_hash), with_withdrawals])
        )
        .await,
        -32602
    );
    // V1 cannot start a Shanghai payload.
    assert_eq!(
        error_code(
            addr,
            "engine_forkchoiceUpdatedV1",
            json!([fcu_state(genesis_hash), attributes_v1(SHANGHAI_TIME)])
        )
        .await,
        -32602
    );

    let fcu = result(
        addr,
        "engine_forkchoiceUpdatedV1",
        json!([fcu_state(genesis_hash), attributes_v1(12)]),
    )
    .await;
    assert_eq!(fcu["payloadStatus"]["status"], "VALID", "{fcu}");
    let id = fcu["payloadId"].as_str().expect("a payload id").to_string();

    // getPayloadV1 answers the bare ExecutionPayloadV1.
    let payload = result(addr, "engine_getPayloadV1", json!([id])).await;
    assert_eq!(payload["blockNumber"], "0x1", "{payload}");
    assert!(payload.get("withdrawals").is_none(), "{payload}");
    assert!(payload.get("executionPayload").is_none(), "{payload}");
    let txs = payload["transactions"].as_array().unwrap();
    assert_eq!(txs.len(), 1, "{payload}");
    let block_hash: B256 = payload["blockHash"].as_str().unwrap().parse().unwrap();

    // A V1 payload with a withdrawals list is refused as bad params.
    let mut bad = payload.clone();
    bad["withdrawals"] = json!([]);
    assert_eq!(
        error_code(addr, "engine_newPayloadV1", json!([bad])).await,
        -32602
    );
    // A changed field is caught by the block hash.
    let mut altered = payload.clone();
    altered["gasUsed"] = json!("0x5209");
    let s = result(addr, "engine_newPayloadV1", json!([altered])).await;
    assert_eq!(s["status"], "INVALID", "{s}");

    let s = result(addr, "engine_newPayloadV1", json!([payload.clone()])).await;
    assert_eq!(s["status"], "VALID", "{s}");
    assert_eq!(s["latestValidHash"], json!(block_hash));
    assert_eq!(chain.head().unwrap(), (1, block_hash));
    assert!(!pool.contains(&tx.hash()), "the mined tx left the pool");

    let fcu = result(
        addr,
        "engine_forkchoiceUpdatedV1",
        json!([fcu_state(block_hash), null]),
    )
    .await;
    assert_eq!(fcu["payloadStatus"]["status"], "VALID", "{fcu}");
    assert_eq!(fcu["payloadStatus"]["latestValidHash"], json!(block_hash));
    assert_eq!(fcu["payloadId"], Value::Null);

    // A Shanghai payload does not travel in V1: the same block moved to Shanghai time.
    let mut shanghai = payload;
    shanghai["timestamp"] = json!(format!("{SHANGHAI_TIME:#x}"));
    assert_eq!(
        error_code(addr, "engine_newPayloadV1", json!([shanghai])).await,
        i64::from(moat_rpc::engine::UNSUPPORTED_FORK)
    );
    handle.stop();
}
