//! A reorg that undoes a block whose logs a log filter reported: the next poll sends
//! those logs again with `removed: true`, as geth does. The chain is driven through the
//! engine API (newPayload, forkchoiceUpdated), the filter polled over the public HTTP
//! server.

use alloy_primitives::{Address, B256, Bytes, TxKind, U256};
use moat_blockchain::chain::Chain;
use moat_blockchain::payload::PayloadService;
use moat_common::PooledTransaction;
use moat_common::config::Genesis;
use moat_common::transaction::{Eip1559Tx, SignedTransaction, Transaction};
use moat_crypto::secp::Signer;
use moat_mempool::{Pool, PoolConfig, TxInput, TxOrigin};
use moat_rpc::{EngineConfig, EngineContext, RpcConfig, RpcContext, StoreStateView};
use moat_storage::Store;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;

mod engine_common;
use engine_common::*;

/// `PUSH1 0x2a PUSH1 0 PUSH1 0 LOG1 STOP`: one log with topic 0x2a, no data.
const LOGGER_CODE: &str = "0x602a60006000a100";
const LOGGER: Address = Address::repeat_byte(0x10);

fn genesis(rich: Address) -> Genesis {
    let ethtest = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../../shared/testdata/ethtest/genesis.json"
    );
    let ethtest: Value = serde_json::from_str(&std::fs::read_to_string(ethtest).unwrap()).unwrap();
    let mut alloc = serde_json::Map::new();
    // The Prague system contracts: block execution calls them.
    for address in [
        "000f3df6d732807ef1319fb7b8bb8522d0beac02",
        "0000f90827f1c53a10cb7a02335b175320002935",
        "00000961ef480eb55e80d19ad83579a64c007002",
        "0000bbddc7ce488642fb579f8b00f3a590007251",
    ] {
        alloc.insert(address.into(), ethtest["alloc"][address].clone());
    }
    alloc.insert(
        format!("{rich:x}"),
        json!({ "balance": "0xde0b6b3a7640000" }),
    );
    alloc.insert(
        format!("{LOGGER:x}"),
        json!({ "balance": "0x0", "code": LOGGER_CODE }),
    );
    let genesis = json!({
        "config": {
            "chainId": CHAIN_ID, "homesteadBlock": 0, "eip150Block": 0, "eip155Block": 0,
            "eip158Block": 0, "byzantiumBlock": 0, "constantinopleBlock": 0,
            "petersburgBlock": 0, "istanbulBlock": 0, "berlinBlock": 0, "londonBlock": 0,
            "mergeNetsplitBlock": 0, "terminalTotalDifficulty": 0, "shanghaiTime": 0,
            "cancunTime": 0, "pragueTime": 0,
            "depositContractAddress": "0x0000000000000000000000000000000000000000"
        },
        "gasLimit": "0x1c9c380", "difficulty": "0x0", "timestamp": "0x0",
        "alloc": alloc,
    });
    Genesis::from_json(&genesis.to_string()).unwrap()
}

fn call_logger(signer: &Signer) -> PooledTransaction {
    let tx = Transaction::Eip1559(Eip1559Tx {
        chain_id: CHAIN_ID,
        nonce: 0,
        max_priority_fee_per_gas: 2_000_000_000,
        max_fee_per_gas: 10_000_000_000,
        gas_limit: 100_000,
        to: TxKind::Call(LOGGER),
        value: U256::ZERO,
        input: Bytes::new(),
        access_list: Vec::new(),
    });
    PooledTransaction::new(SignedTransaction::sign(tx, signer), None)
}

fn attributes(timestamp: u64, fee_recipient: u8) -> Value {
    json!({
        "timestamp": format!("{timestamp:#x}"),
        "prevRandao": B256::repeat_byte(7),
        "suggestedFeeRecipient": Address::repeat_byte(fee_recipient),
        "withdrawals": [],
        "parentBeaconBlockRoot": B256::repeat_byte(9),
    })
}

/// Builds a payload on `parent` (forkchoiceUpdated with attributes, getPayload).
async fn build(engine: SocketAddr, parent: B256, attrs: Value) -> Value {
    let fcu = result(
        engine,
        "engine_forkchoiceUpdatedV3",
        json!([fcu_state(parent), attrs]),
    )
    .await;
    let id = fcu["payloadId"]
        .as_str()
        .unwrap_or_else(|| panic!("{fcu}"))
        .to_string();
    result(engine, "engine_getPayloadV4", json!([id])).await["executionPayload"].clone()
}

/// newPayload of `payload`; its hash.
async fn import(engine: SocketAddr, payload: &Value) -> B256 {
    let status = result(
        engine,
        "engine_newPayloadV4",
        json!([payload, [], B256::repeat_byte(9), []]),
    )
    .await;
    assert!(
        matches!(status["status"].as_str(), Some("VALID" | "ACCEPTED")),
        "{status}"
    );
    payload["blockHash"].as_str().unwrap().parse().unwrap()
}

async fn public(addr: SocketAddr, method: &str, params: Value) -> Value {
    let (status, body) = post(addr, None, method, params).await;
    assert_eq!(status, 200, "{method}: {body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v.get("result")
        .cloned()
        .unwrap_or_else(|| panic!("{method} failed: {v}"))
}

struct Node {
    engine: moat_rpc::EngineHandle,
    rpc: moat_rpc::RpcHandle,
    chain: Chain,
    pool: Pool,
    rich: Signer,
}

/// A Prague chain with the logger, its engine API and its public server (HTTP and
/// WebSocket) on loopback.
async fn node() -> Node {
    let rich = Signer::from_seed(1);
    let store = Store::in_memory();
    let chain = Chain::init(store.clone(), &genesis(rich.address())).unwrap();
    let view = StoreStateView::new(store, chain.config().clone());
    let pool = Pool::new(PoolConfig::new(chain.config().clone()), Arc::new(view));
    let chain = chain.with_sender_cache(pool.sender_cache().clone());
    let payloads = PayloadService::new(chain.clone(), pool.clone());
    let engine_ctx = EngineContext::new(
        chain.clone(),
        pool.clone(),
        payloads,
        moat_blockchain::maintain::spawn(&chain, &pool),
    );
    let mut heads = engine_ctx.maintainer.subscribe();
    let engine = moat_rpc::start_engine(
        EngineConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            ..EngineConfig::new(SECRET)
        },
        engine_ctx,
    )
    .await
    .unwrap();
    let ctx = RpcContext::new(chain.clone(), pool.clone());
    let rpc = moat_rpc::start(
        RpcConfig {
            http_addr: "127.0.0.1:0".parse().unwrap(),
            ws_addr: Some("127.0.0.1:0".parse().unwrap()),
            ..RpcConfig::default()
        },
        ctx.clone(),
    )
    .await
    .unwrap();
    // Heads the engine sets reach subscribers, as the node wires them.
    let heads_chain = chain.clone();
    tokio::spawn(async move {
        while heads.changed().await.is_ok() {
            let hash = heads.borrow_and_update().hash;
            if let Ok(Some(header)) = heads_chain.header(&hash) {
                ctx.notify_new_head(&header);
            }
        }
    });
    Node {
        engine,
        rpc,
        chain,
        pool,
        rich,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_filter_gets_the_logs_of_undone_blocks_again_as_removed() {
    let n = node().await;
    let (e, p) = (n.engine.local_addr(), n.rpc.http_addr().unwrap());
    let (chain, pool, rich) = (&n.chain, &n.pool, &n.rich);
    let genesis = chain.head_header().unwrap();

    let filter = public(p, "eth_newFilter", json!([{ "address": LOGGER }])).await;

    // B: an empty block on genesis, built while the pool is empty.
    let payload_b = build(e, genesis.hash(), attributes(12, 0xbb)).await;
    // A: the logger called, imported and made head.
    pool.add_transaction(
        TxInput::Raw(call_logger(rich).encoded_2718().into()),
        TxOrigin::Local,
    )
    .await
    .unwrap();
    let payload_a = build(e, genesis.hash(), attributes(12, 0xaa)).await;
    let hash_a = import(e, &payload_a).await;
    assert_eq!(
        forkchoice(e, hash_a).await["payloadStatus"]["status"],
        "VALID"
    );

    let changes = public(p, "eth_getFilterChanges", json!([filter])).await;
    let logs = changes.as_array().unwrap();
    assert_eq!(logs.len(), 1, "{changes}");
    assert_eq!(logs[0]["blockHash"], json!(hash_a));
    assert_eq!(logs[0]["removed"], false);
    assert_eq!(logs[0]["topics"][0], json!(B256::with_last_byte(0x2a)));

    // The consensus client picks B: A's log comes back, removed.
    let hash_b = import(e, &payload_b).await;
    assert_eq!(
        forkchoice(e, hash_b).await["payloadStatus"]["status"],
        "VALID"
    );
    assert_eq!(chain.head().unwrap(), (1, hash_b));
    let changes = public(p, "eth_getFilterChanges", json!([filter])).await;
    let logs = changes.as_array().unwrap();
    assert_eq!(logs.len(), 1, "{changes}");
    assert_eq!(logs[0]["blockHash"], json!(hash_a));
    assert_eq!(logs[0]["removed"], true);
    // Nothing more until the head moves again.
    let changes = public(p, "eth_getFilterChanges", json!([filter])).await;
    assert_eq!(changes, json!([]));

    // Back to A: its log is new again.
    assert_eq!(
        forkchoice(e, hash_a).await["payloadStatus"]["status"],
        "VALID"
    );
    let changes = public(p, "eth_getFilterChanges", json!([filter])).await;
    let logs = changes.as_array().unwrap();
    assert_eq!(logs.len(), 1, "{changes}");
    assert_eq!(logs[0]["removed"], false);
    n.rpc.stop();
    n.engine.stop();
}

/// A bare-bones WebSocket client: text frames only.
struct Ws(tokio::net::TcpStream);

impl Ws {
    async fn connect(addr: SocketAddr) -> Ws {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!(
            "GET / HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut b = [0u8; 1];
            s.read_exact(&mut b).await.unwrap();
            head.push(b[0]);
        }
        assert!(head.starts_with(b"HTTP/1.1 101"));
        Ws(s)
    }

    async fn send(&mut self, v: &Value) {
        use tokio::io::AsyncWriteExt;
        let payload = v.to_string().into_bytes();
        assert!(payload.len() < 126, "short messages only");
        let mut frame = vec![0x81u8, 0x80 | payload.len() as u8, 0, 0, 0, 0];
        frame.extend_from_slice(&payload);
        self.0.write_all(&frame).await.unwrap();
    }

    async fn recv(&mut self) -> Value {
        use tokio::io::AsyncReadExt;
        let next = async {
            loop {
                let mut h = [0u8; 2];
                self.0.read_exact(&mut h).await.unwrap();
                let len = match h[1] & 0x7f {
                    126 => {
                        let mut b = [0u8; 2];
                        self.0.read_exact(&mut b).await.unwrap();
                        u16::from_be_bytes(b) as usize
                    }
                    127 => {
                        let mut b = [0u8; 8];
                        self.0.read_exact(&mut b).await.unwrap();
                        u64::from_be_bytes(b) as usize
                    }
                    n => n as usize,
                };
                let mut payload = vec![0u8; len];
                self.0.read_exact(&mut payload).await.unwrap();
                if h[0] & 0x0f == 1 {
                    return serde_json::from_slice::<Value>(&payload).unwrap();
                }
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), next)
            .await
            .expect("a message within 10 s")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_logs_subscription_gets_the_logs_of_undone_blocks_again_as_removed() {
    let n = node().await;
    let e = n.engine.local_addr();
    let mut ws = Ws::connect(n.rpc.ws_addr().unwrap()).await;
    ws.send(&json!({"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["logs",{"address":LOGGER}]}))
        .await;
    let sub = ws.recv().await;
    assert!(sub["result"].is_string(), "{sub}");
    let genesis = n.chain.head_header().unwrap();

    let payload_b = build(e, genesis.hash(), attributes(12, 0xbb)).await;
    n.pool
        .add_transaction(
            TxInput::Raw(call_logger(&n.rich).encoded_2718().into()),
            TxOrigin::Local,
        )
        .await
        .unwrap();
    let payload_a = build(e, genesis.hash(), attributes(12, 0xaa)).await;
    let hash_a = import(e, &payload_a).await;
    forkchoice(e, hash_a).await;
    let log = ws.recv().await["params"]["result"].clone();
    assert_eq!(log["blockHash"], json!(hash_a));
    assert_eq!(log["removed"], false);

    // The reorg to B: A's log again, removed (B has none of its own).
    let hash_b = import(e, &payload_b).await;
    forkchoice(e, hash_b).await;
    let log = ws.recv().await["params"]["result"].clone();
    assert_eq!(log["blockHash"], json!(hash_a));
    assert_eq!(log["removed"], true);

    // And back to A.
    forkchoice(e, hash_a).await;
    let log = ws.recv().await["params"]["result"].clone();
    assert_eq!(log["blockHash"], json!(hash_a));
    assert_eq!(log["removed"], false);
    n.rpc.stop();
    n.engine.stop();
}
