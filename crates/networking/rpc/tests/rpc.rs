//! The server end to end: a chain over an in-memory store from a small genesis, a pool
//! over it, and requests over real HTTP and WebSocket connections.
//!
//! The client is a few lines of raw HTTP/1.1 and WebSocket framing, so malformed, oversized
//! and half-sent requests (to hold the server's request slots) can be sent as bytes.

use alloy_primitives::{Address, Bytes, TxKind, U256};
use moat_blockchain::chain::Chain;
use moat_common::config::Genesis;
use moat_common::transaction::{Eip1559Tx, SignedTransaction, Transaction};
use moat_crypto::secp::Signer;
use moat_mempool::{Pool, PoolConfig};
use moat_rpc::{RpcConfig, RpcContext, RpcHandle, StoreStateView};
use moat_storage::Store;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CHAIN_ID: u64 = 1337;
const RICH: u64 = 1_000_000_000_000_000_000; // 1 ether
const POOR: u64 = 1_000;

fn genesis(rich: Address, poor: Address) -> Genesis {
    let json = format!(
        r#"{{
        "config": {{
            "chainId": {CHAIN_ID}, "homesteadBlock": 0, "eip150Block": 0, "eip155Block": 0,
            "eip158Block": 0, "byzantiumBlock": 0, "constantinopleBlock": 0, "petersburgBlock": 0,
            "istanbulBlock": 0, "berlinBlock": 0, "londonBlock": 0, "mergeNetsplitBlock": 0,
            "terminalTotalDifficulty": 0, "shanghaiTime": 0, "cancunTime": 0, "pragueTime": 0
        }},
        "gasLimit": "0x1c9c380", "difficulty": "0x0", "timestamp": "0x0",
        "alloc": {{
            "{rich:x}": {{ "balance": "{RICH:#x}", "nonce": "0x1" }},
            "{poor:x}": {{ "balance": "{POOR:#x}" }}
        }}
    }}"#
    );
    Genesis::from_json(&json).expect("test genesis parses")
}

struct Node {
    handle: RpcHandle,
    store: Store,
    genesis_hash: alloy_primitives::B256,
    rich: Signer,
    poor: Signer,
}

async fn node() -> Node {
    node_with(RpcConfig::default()).await
}

/// A node whose server takes `config`'s limits (its addresses are replaced).
async fn node_with(config: RpcConfig) -> Node {
    let (rich, poor) = (Signer::from_seed(1), Signer::from_seed(2));
    let genesis = genesis(rich.address(), poor.address());
    let store = Store::in_memory();
    let chain = Chain::init(store.clone(), &genesis).expect("genesis initialises");
    let view = StoreStateView::new(store.clone(), chain.config().clone());
    let pool = Pool::new(PoolConfig::new(chain.config().clone()), Arc::new(view));
    let genesis_hash = chain.genesis_hash();
    // These tests call every namespace.
    let config = RpcConfig {
        http_addr: "127.0.0.1:0".parse().unwrap(),
        ws_addr: Some("127.0.0.1:0".parse().unwrap()),
        http_api: moat_rpc::Namespaces::all(),
        ws_api: moat_rpc::Namespaces::all(),
        ..config
    };
    let handle = moat_rpc::start(config, RpcContext::new(chain, pool))
        .await
        .expect("server starts");
    Node {
        handle,
        store,
        genesis_hash,
        rich,
        poor,
    }
}

/// POSTs `body` and returns (status code, response body).
async fn post_raw(addr: SocketAddr, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    // The server may answer (413) before reading an oversized body; a failed write is fine.
    let _ = s.write_all(body).await;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// Parses a response body that may be chunked.
fn parse_body(body: &str) -> Value {
    if let Ok(v) = serde_json::from_str(body) {
        return v;
    }
    // Chunked: size line, data, ... — join the data lines.
    let mut joined = String::new();
    let mut lines = body.split("\r\n");
    while let Some(size) = lines.next() {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 {
            break;
        }
        joined.push_str(lines.next().unwrap_or_default());
    }
    serde_json::from_str(&joined).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

async fn call(addr: SocketAddr, method: &str, params: Value) -> Value {
    let req = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    let (status, body) = post_raw(addr, req.to_string().as_bytes()).await;
    assert_eq!(status, 200, "{method}: {body}");
    parse_body(&body)
}

async fn result(addr: SocketAddr, method: &str, params: Value) -> Value {
    let r = call(addr, method, params).await;
    r.get("result")
        .cloned()
        .unwrap_or_else(|| panic!("{method} failed: {r}"))
}

async fn error(addr: SocketAddr, method: &str, params: Value) -> (i64, String) {
    let r = call(addr, method, params).await;
    let e = r
        .get("error")
        .unwrap_or_else(|| panic!("{method} succeeded: {r}"));
    (
        e["code"].as_i64().unwrap(),
        e["message"].as_str().unwrap().to_string(),
    )
}

fn signed_1559(
    signer: &Signer,
    nonce: u64,
    tip: u128,
    to: TxKind,
    value: u64,
) -> SignedTransaction {
    let tx = Transaction::Eip1559(Eip1559Tx {
        chain_id: CHAIN_ID,
        nonce,
        max_priority_fee_per_gas: tip,
        max_fee_per_gas: 10_000_000_000,
        gas_limit: 100_000,
        to,
        value: U256::from(value),
        input: Bytes::new(),
        access_list: Vec::new(),
    });
    SignedTransaction::sign(tx, signer)
}

fn transfer(signer: &Signer, nonce: u64, tip: u128, value: u64) -> String {
    let signed = signed_1559(
        signer,
        nonce,
        tip,
        TxKind::Call(Address::repeat_byte(0x42)),
        value,
    );
    format!("0x{}", alloy_primitives::hex::encode(signed.encoded_2718()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_methods_and_pool_submission() {
    let n = node().await;
    let addr = n.handle.http_addr().unwrap();
    let rich = n.rich.address();

    assert_eq!(result(addr, "eth_chainId", json!([])).await, json!("0x539"));
    assert_eq!(result(addr, "net_version", json!([])).await, json!("1337"));
    assert_eq!(
        result(addr, "eth_blockNumber", json!([])).await,
        json!("0x0")
    );
    assert!(
        result(addr, "web3_clientVersion", json!([]))
            .await
            .as_str()
            .unwrap()
            .starts_with("moat/")
    );
    assert_eq!(
        result(addr, "eth_getBalance", json!([rich, "latest"])).await,
        json!(format!("{RICH:#x}"))
    );
    assert_eq!(
        result(addr, "eth_getBalance", json!([rich, "0x0"])).await,
        json!(format!("{RICH:#x}"))
    );
    assert_eq!(
        result(addr, "eth_getTransactionCount", json!([rich, "latest"])).await,
        json!("0x1")
    );
    assert_eq!(
        result(addr, "eth_getCode", json!([rich, "latest"])).await,
        json!("0x")
    );
    assert_eq!(
        error(addr, "eth_getBalance", json!([rich, "0x5"])).await,
        (-32000, "header not found".to_string())
    );

    let block = result(addr, "eth_getBlockByNumber", json!(["0x0", false])).await;
    assert_eq!(block["hash"], json!(n.genesis_hash));
    assert_eq!(block["number"], json!("0x0"));
    assert_eq!(block["transactions"], json!([]));
    assert_eq!(block["withdrawals"], json!([]));
    assert_eq!(block["baseFeePerGas"], json!("0x3b9aca00"));
    assert!(block.get("requestsHash").is_some() && block.get("parentBeaconBlockRoot").is_some());
    let by_hash = result(addr, "eth_getBlockByHash", json!([n.genesis_hash, true])).await;
    assert_eq!(by_hash["hash"], block["hash"]);
    assert_eq!(
        result(addr, "eth_getBlockByNumber", json!(["0x9", false])).await,
        Value::Null
    );

    // Submit a transfer.
    let raw = transfer(&n.rich, 1, 1_000_000_000, 1);
    let hash = result(addr, "eth_sendRawTransaction", json!([raw])).await;
    assert_eq!(hash.as_str().unwrap().len(), 66);
    assert_eq!(
        result(addr, "txpool_status", json!([])).await,
        json!({ "pending": "0x1", "queued": "0x0" })
    );
    let content = result(addr, "txpool_content", json!([])).await;
    let key = rich.to_checksum(None);
    assert_eq!(content["pending"][&key]["1"]["hash"], hash, "{content}");
    let from = result(addr, "txpool_contentFrom", json!([rich])).await;
    assert_eq!(from["pending"]["1"]["hash"], hash);
    let inspect = result(addr, "txpool_inspect", json!([])).await;
    assert!(
        inspect["pending"][&key]["1"]
            .as_str()
            .unwrap()
            .contains("1 wei + 100000 gas × 10000000000 wei")
    );
    assert_eq!(
        result(addr, "eth_getTransactionCount", json!([rich, "pending"])).await,
        json!("0x2")
    );

    let tx = result(addr, "eth_getTransactionByHash", json!([hash])).await;
    assert_eq!(tx["blockHash"], Value::Null);
    assert_eq!(tx["from"], json!(rich));
    assert_eq!(tx["nonce"], json!("0x1"));
    assert_eq!(tx["type"], json!("0x2"));
    assert_eq!(
        result(addr, "eth_getTransactionReceipt", json!([hash])).await,
        Value::Null
    );

    // geth's messages for the classic rejections.
    assert_eq!(
        error(addr, "eth_sendRawTransaction", json!([raw])).await,
        (-32000, "already known".into())
    );
    let (code, msg) = error(
        addr,
        "eth_sendRawTransaction",
        json!([transfer(&n.rich, 0, 1_000_000_000, 1)]),
    )
    .await;
    assert_eq!(code, -32000);
    assert!(msg.starts_with("nonce too low"), "{msg}");
    let (_, msg) = error(
        addr,
        "eth_sendRawTransaction",
        json!([transfer(&n.rich, 1, 1_000_000_000, 2)]),
    )
    .await;
    assert_eq!(msg, "replacement transaction underpriced");
    let (_, msg) = error(
        addr,
        "eth_sendRawTransaction",
        json!([transfer(&n.poor, 0, 1_000_000_000, 1)]),
    )
    .await;
    assert!(
        msg.starts_with("insufficient funds for gas * price + value"),
        "{msg}"
    );
    let (code, _) = error(addr, "eth_sendRawTransaction", json!(["0x02ff"])).await;
    assert_eq!(code, -32000);
    let (code, _) = error(addr, "eth_sendRawTransaction", json!(["not hex"])).await;
    assert_eq!(code, -32602);

    // Fees.
    let base_next = 875_000_000u64; // genesis used no gas: the base fee falls by 1/8
    assert_eq!(
        result(addr, "eth_maxPriorityFeePerGas", json!([])).await,
        json!("0x3b9aca00")
    );
    assert_eq!(
        result(addr, "eth_gasPrice", json!([])).await,
        json!(format!("{:#x}", 1_000_000_000 + base_next))
    );
    assert_eq!(
        result(addr, "eth_blobBaseFee", json!([])).await,
        json!("0x1")
    );
    let fh = result(
        addr,
        "eth_feeHistory",
        json!(["0x4", "latest", [25.0, 75.0]]),
    )
    .await;
    assert_eq!(fh["oldestBlock"], json!("0x0"));
    assert_eq!(
        fh["baseFeePerGas"],
        json!(["0x3b9aca00", format!("{base_next:#x}")])
    );
    assert_eq!(fh["reward"], json!([["0x0", "0x0"]]));
    assert_eq!(fh["gasUsedRatio"], json!([0.0]));
    assert_eq!(fh["baseFeePerBlobGas"], json!(["0x1", "0x1"]));
    let (code, _) = error(
        addr,
        "eth_feeHistory",
        json!(["0x4", "latest", [75.0, 25.0]]),
    )
    .await;
    assert_eq!(code, -32602);

    n.handle.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_modules_and_coinbase_answer_as_geth() {
    // Every namespace served: each is listed, with `rpc` itself.
    let n = node().await;
    let addr = n.handle.http_addr().unwrap();
    let modules = result(addr, "rpc_modules", json!([])).await;
    for ns in ["eth", "net", "web3", "txpool", "admin", "debug", "rpc"] {
        assert_eq!(modules[ns], "1.0", "{ns} in {modules}");
    }
    // No etherbase set: geth's error.
    assert_eq!(
        error(addr, "eth_coinbase", json!([])).await,
        (-32000, "etherbase must be explicitly specified".to_string())
    );
    // No keys held off the dev node: no accounts, and signing is geth's "unknown account".
    assert_eq!(result(addr, "eth_accounts", json!([])).await, json!([]));
    assert_eq!(
        error(
            addr,
            "eth_sign",
            json!([format!("{:#x}", n.rich.address()), "0x00"])
        )
        .await,
        (-32000, "unknown account".to_string())
    );
    assert_eq!(error(addr, "eth_sign", json!(["0x12"])).await.0, -32602);
    // evm_mine exists only on the dev node.
    assert_eq!(error(addr, "evm_mine", json!([])).await.0, -32601);
    // So do the other dev methods, even with every namespace served.
    let rich = n.rich.address();
    let rich_hex = format!("{rich:#x}");
    for (method, params) in [
        ("evm_snapshot", json!([])),
        ("evm_revert", json!(["0x0"])),
        ("evm_increaseTime", json!([60])),
        ("evm_setNextBlockTimestamp", json!([4_000_000_000u64])),
        ("anvil_setBalance", json!([rich_hex, "0x1"])),
        ("anvil_setNonce", json!([rich_hex, "0x1"])),
        ("anvil_setCode", json!([rich_hex, "0x00"])),
        ("anvil_setStorageAt", json!([rich_hex, "0x0", "0x0"])),
        ("anvil_impersonateAccount", json!([rich_hex])),
        ("anvil_stopImpersonatingAccount", json!([rich_hex])),
        ("anvil_mine", json!([])),
        ("hardhat_mine", json!([])),
        ("hardhat_setBalance", json!([rich_hex, "0x1"])),
        ("hardhat_impersonateAccount", json!([rich_hex])),
        // Arguments that would be refused on the dev node: still "method not found".
        ("evm_mine", json!(["zz"])),
        ("anvil_mine", json!(["0xffffffffffffffffffff"])),
        ("evm_revert", json!([])),
        ("evm_increaseTime", json!([-1])),
        ("evm_setNextBlockTimestamp", json!([])),
        ("anvil_setBalance", json!(["0x12", "zz"])),
        ("hardhat_setStorageAt", json!([])),
        ("anvil_impersonateAccount", json!(["0x12"])),
        ("personal_sign", json!([])),
        ("eth_signTypedData_v4", json!([rich_hex, 1])),
    ] {
        assert_eq!(error(addr, method, params).await.0, -32601, "{method}");
    }
    // Named as called (anvil's wording).
    for method in [
        "hardhat_impersonateAccount",
        "hardhat_stopImpersonatingAccount",
        "hardhat_setNonce",
    ] {
        assert_eq!(
            error(addr, method, json!([rich_hex])).await,
            (
                -32601,
                format!("the method {method} does not exist/is not available")
            )
        );
    }
    // geth has neither personal_sign nor eth_signTypedData_v4; only the dev node serves
    // them.
    for (method, params) in [
        ("personal_sign", json!(["0x00", rich_hex])),
        (
            "eth_signTypedData_v4",
            json!([rich_hex, {"types": {}, "primaryType": "EIP712Domain", "domain": {}}]),
        ),
    ] {
        assert_eq!(error(addr, method, params).await.0, -32601, "{method}");
    }
    // A transaction with the placeholder signature the dev node gives an impersonated
    // sender is not taken as sent from that sender here: its signature recovers to some
    // other (unfunded) address, or to none.
    let placeholder = SignedTransaction::new(
        signed_1559(&n.rich, 1, 1, TxKind::Call(Address::repeat_byte(0x42)), 1).into_tx(),
        moat_rpc::impersonated_signature(&rich),
    );
    let raw = format!(
        "0x{}",
        alloy_primitives::hex::encode(placeholder.encoded_2718())
    );
    let (code, message) = error(addr, "eth_sendRawTransaction", json!([raw])).await;
    assert_eq!(code, -32000, "{message}");
    assert!(
        message.starts_with("insufficient funds") || message.contains("sender"),
        "{message}"
    );
    assert_eq!(
        error(
            addr,
            "eth_sendTransaction",
            json!([{"from": format!("{:#x}", n.rich.address()), "to": format!("{:#x}", n.poor.address())}])
        )
        .await,
        (-32000, "unknown account".to_string())
    );
    n.handle.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_get_errors() {
    let n = node().await;
    let addr = n.handle.http_addr().unwrap();

    let (status, body) = post_raw(addr, b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":").await;
    assert_eq!(status, 200);
    assert_eq!(parse_body(&body)["error"]["code"], json!(-32700));

    let r = call(addr, "eth_noSuchMethod", json!([])).await;
    assert_eq!(r["error"]["code"], json!(-32601));

    for params in [
        json!(["0x1234"]),
        json!([42, "latest"]),
        json!({"a": 1}),
        json!([Value::Null, "nope"]),
    ] {
        let r = call(addr, "eth_getBalance", params.clone()).await;
        assert!(r.get("error").is_some(), "{params}: {r}");
    }
    let r = call(
        addr,
        "eth_getStorageAt",
        json!([
            "0x0000000000000000000000000000000000000000",
            "0x0",
            "latest"
        ]),
    )
    .await;
    assert_eq!(r["result"], json!(format!("0x{}", "00".repeat(32))));

    // Over the body limit: refused before parsing.
    let big = vec![b' '; 6 << 20];
    let (status, _) = post_raw(addr, &big).await;
    assert_eq!(status, 413);

    // Over the batch limit (geth's default, 1000 calls).
    let batch: Vec<Value> = (0..1001)
        .map(|i| json!({"jsonrpc":"2.0","id":i,"method":"eth_chainId"}))
        .collect();
    let (status, body) = post_raw(addr, Value::Array(batch).to_string().as_bytes()).await;
    assert_eq!(status, 200);
    assert_eq!(
        parse_body(&body),
        json!([{"jsonrpc":"2.0","id":0,"error":{"code":-32600,"message":"batch too large"}}])
    );

    // The server still serves.
    assert_eq!(result(addr, "eth_chainId", json!([])).await, json!("0x539"));
    n.handle.stop();
}

/// A bare-bones WebSocket client: text frames only.
struct Ws(TcpStream);

impl Ws {
    async fn connect(addr: SocketAddr) -> Ws {
        let mut s = TcpStream::connect(addr).await.unwrap();
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
        assert!(
            head.starts_with(b"HTTP/1.1 101"),
            "{}",
            String::from_utf8_lossy(&head)
        );
        Ws(s)
    }

    async fn send(&mut self, v: &Value) {
        let payload = v.to_string().into_bytes();
        let mut frame = vec![0x81u8];
        match payload.len() {
            n if n < 126 => frame.push(0x80 | n as u8),
            n if n < 65_536 => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        // A zero mask: client frames must be masked, any key will do.
        frame.extend_from_slice(&[0, 0, 0, 0]);
        frame.extend_from_slice(&payload);
        self.0.write_all(&frame).await.unwrap();
    }

    async fn recv(&mut self) -> Value {
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
                return serde_json::from_slice(&payload).unwrap();
            }
        }
    }

    async fn recv_timeout(&mut self) -> Value {
        tokio::time::timeout(Duration::from_secs(10), self.recv())
            .await
            .expect("a message within 10 s")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_subscriptions() {
    let n = node().await;
    let mut ws = Ws::connect(n.handle.ws_addr().unwrap()).await;

    ws.send(&json!({"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newPendingTransactions"]})).await;
    let sub = ws.recv_timeout().await;
    let pending_id = sub["result"]
        .as_str()
        .unwrap_or_else(|| panic!("{sub}"))
        .to_string();
    assert!(
        pending_id.starts_with("0x") && pending_id.len() == 34,
        "{pending_id}"
    );

    ws.send(&json!({"jsonrpc":"2.0","id":2,"method":"eth_subscribe","params":["newHeads"]}))
        .await;
    let heads_id = ws.recv_timeout().await["result"]
        .as_str()
        .unwrap()
        .to_string();

    ws.send(&json!({"jsonrpc":"2.0","id":3,"method":"eth_subscribe","params":["bogus"]}))
        .await;
    assert_eq!(ws.recv_timeout().await["error"]["code"], json!(-32602));

    let hash = result(
        n.handle.http_addr().unwrap(),
        "eth_sendRawTransaction",
        json!([transfer(&n.rich, 1, 1_000_000_000, 1)]),
    )
    .await;
    let note = ws.recv_timeout().await;
    assert_eq!(note["method"], json!("eth_subscription"));
    assert_eq!(note["params"]["subscription"], json!(pending_id));
    assert_eq!(note["params"]["result"], hash);

    let header = moat_common::block::Header {
        number: 7,
        ..Default::default()
    };
    n.handle.notify_new_head(&header);
    let note = ws.recv_timeout().await;
    assert_eq!(note["params"]["subscription"], json!(heads_id));
    assert_eq!(note["params"]["result"]["number"], json!("0x7"));
    assert_eq!(note["params"]["result"]["hash"], json!(header.hash()));

    ws.send(&json!({"jsonrpc":"2.0","id":4,"method":"eth_unsubscribe","params":[pending_id]}))
        .await;
    assert_eq!(ws.recv_timeout().await["result"], json!(true));
    n.handle.stop();
}

/// Writes block 1 straight into the store (no execution: the RPC reads what import wrote)
/// and checks the mined views: transaction, receipt, block, fee history, tip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mined_transactions_and_receipts() {
    use alloy_primitives::{Log, LogData};
    use moat_common::block::{Block, Header};
    use moat_common::receipt::{self, Receipt};
    use moat_storage::{TxLocation, WriteBatch};

    let n = node().await;
    let addr = n.handle.http_addr().unwrap();
    let rich = n.rich.address();
    let genesis =
        Header::decode(&mut &n.store.header_rlp(&n.genesis_hash).unwrap().unwrap()[..]).unwrap();
    let tip = 1_000_000_000u128;
    let call = signed_1559(&n.rich, 1, tip, TxKind::Call(Address::repeat_byte(0x42)), 5);
    let create = signed_1559(&n.rich, 2, tip, TxKind::Create, 0);
    let log = |i: u8| Log {
        address: Address::repeat_byte(i),
        data: LogData::new_unchecked(
            vec![alloy_primitives::B256::repeat_byte(i)],
            Bytes::from(vec![i]),
        ),
    };
    let receipts = vec![
        Receipt {
            tx_type: call.tx_type(),
            success: true,
            post_state: None,
            cumulative_gas_used: 21_000,
            logs: vec![log(1)],
        },
        Receipt {
            tx_type: create.tx_type(),
            success: false,
            post_state: None,
            cumulative_gas_used: 74_000,
            logs: vec![log(2)],
        },
    ];
    let base_fee = 875_000_000u64;
    let header = Header {
        parent_hash: n.genesis_hash,
        number: 1,
        gas_limit: genesis.gas_limit,
        gas_used: 74_000,
        timestamp: 12,
        base_fee_per_gas: Some(base_fee),
        logs_bloom: receipts
            .iter()
            .fold(Default::default(), |b, r| b | r.bloom()),
        ..genesis.clone()
    };
    let block = Block {
        hash: header.hash(),
        header,
        transactions: vec![call.clone(), create.clone()],
        ommers: vec![],
        withdrawals: Some(vec![]),
    };
    let mut batch = WriteBatch::new();
    batch
        .put_header(block.hash, 1, block.header.encoded())
        .put_body(block.hash, block.encode_body())
        .put_receipts(block.hash, receipt::encode_receipts(&receipts))
        .set_canonical(1, block.hash)
        .set_head(1, block.hash);
    for (i, tx) in block.transactions.iter().enumerate() {
        batch.put_tx_location(
            tx.hash(),
            TxLocation {
                block_hash: block.hash,
                block_number: 1,
                index: i as u64,
            },
        );
    }
    n.store.commit(batch).unwrap();

    assert_eq!(
        result(addr, "eth_blockNumber", json!([])).await,
        json!("0x1")
    );
    let (code, msg) = error(addr, "eth_getBalance", json!([rich, "0x0"])).await;
    assert_eq!(
        (code, msg.as_str()),
        (-32000, "historical state is not available")
    );

    let tx = result(addr, "eth_getTransactionByHash", json!([call.hash()])).await;
    assert_eq!(tx["blockHash"], json!(block.hash));
    assert_eq!(tx["blockNumber"], json!("0x1"));
    assert_eq!(tx["transactionIndex"], json!("0x0"));
    assert_eq!(tx["from"], json!(rich));
    assert_eq!(
        tx["gasPrice"],
        json!(format!("{:#x}", u128::from(base_fee) + tip))
    );

    let r = result(addr, "eth_getTransactionReceipt", json!([create.hash()])).await;
    assert_eq!(r["status"], json!("0x0"));
    assert_eq!(r["gasUsed"], json!(format!("{:#x}", 53_000)));
    assert_eq!(r["cumulativeGasUsed"], json!(format!("{:#x}", 74_000)));
    assert_eq!(r["contractAddress"], json!(rich.create(2)));
    assert_eq!(r["to"], Value::Null);
    assert_eq!(r["transactionIndex"], json!("0x1"));
    assert_eq!(r["logs"][0]["logIndex"], json!("0x1"));
    assert_eq!(r["logs"][0]["blockHash"], json!(block.hash));
    assert_eq!(r["logs"][0]["transactionHash"], json!(create.hash()));
    assert_eq!(
        r["effectiveGasPrice"],
        json!(format!("{:#x}", u128::from(base_fee) + tip))
    );
    assert_eq!(r["type"], json!("0x2"));
    let r0 = result(addr, "eth_getTransactionReceipt", json!([call.hash()])).await;
    assert_eq!(
        (r0["gasUsed"].clone(), r0["contractAddress"].clone()),
        (json!("0x5208"), Value::Null)
    );

    let b = result(addr, "eth_getBlockByNumber", json!(["latest", true])).await;
    assert_eq!(b["hash"], json!(block.hash));
    assert_eq!(b["transactions"][1]["hash"], json!(create.hash()));
    assert_eq!(b["size"], json!(format!("{:#x}", block.encode().len())));

    assert_eq!(
        result(addr, "eth_maxPriorityFeePerGas", json!([])).await,
        json!(format!("{tip:#x}"))
    );
    let fh = result(addr, "eth_feeHistory", json!([2, "latest", [10.0, 90.0]])).await;
    assert_eq!(fh["oldestBlock"], json!("0x0"));
    assert_eq!(
        fh["reward"][1],
        json!([format!("{tip:#x}"), format!("{tip:#x}")])
    );
    assert_eq!(fh["baseFeePerGas"].as_array().unwrap().len(), 3);
    assert_eq!(
        fh["gasUsedRatio"][1],
        json!(74_000.0 / genesis.gas_limit as f64)
    );
    n.handle.stop();
}

/// A batch of `eth_chainId` calls with the ids given.
fn chain_id_batch(ids: impl IntoIterator<Item = Value>) -> Vec<Value> {
    ids.into_iter()
        .map(|id| json!({"jsonrpc":"2.0","id":id,"method":"eth_chainId"}))
        .collect()
}

async fn post_batch(addr: SocketAddr, batch: &[Value]) -> Value {
    let body = Value::Array(batch.to_vec()).to_string();
    let (status, body) =
        tokio::time::timeout(Duration::from_secs(30), post_raw(addr, body.as_bytes()))
            .await
            .expect("an answer within 30 s");
    assert_eq!(status, 200, "{body}");
    parse_body(&body)
}

async fn pending_count(addr: SocketAddr) -> Value {
    result(addr, "txpool_status", json!([])).await["pending"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_request_limit_gives_geths_error() {
    let n = node_with(RpcConfig {
        batch_request_limit: 3,
        ..RpcConfig::default()
    })
    .await;
    let addr = n.handle.http_addr().unwrap();

    // At the limit: every call answered, in order.
    let answer = post_batch(addr, &chain_id_batch([json!(10), json!(11), json!(12)])).await;
    assert_eq!(
        answer,
        json!([
            {"jsonrpc":"2.0","id":10,"result":"0x539"},
            {"jsonrpc":"2.0","id":11,"result":"0x539"},
            {"jsonrpc":"2.0","id":12,"result":"0x539"},
        ])
    );

    // One more (a notification counts too): geth's single error, carrying the id of the
    // first call, and none of the calls runs (the transaction does not reach the pool).
    let mut batch = vec![json!({"jsonrpc":"2.0","method":"eth_chainId"})];
    batch.extend(chain_id_batch([json!("first"), json!(2)]));
    batch.push(
        json!({"jsonrpc":"2.0","id":3,"method":"eth_sendRawTransaction",
        "params":[transfer(&n.rich, 1, 1_000_000_000, 1)]}),
    );
    assert_eq!(
        post_batch(addr, &batch).await,
        json!([{"jsonrpc":"2.0","id":"first","error":{"code":-32600,"message":"batch too large"}}])
    );
    assert_eq!(pending_count(addr).await, json!("0x0"));

    // Over WebSocket, jsonrpsee's own check (also before the calls are parsed) answers.
    let mut ws = Ws::connect(n.handle.ws_addr().unwrap()).await;
    ws.send(&Value::Array(chain_id_batch([
        json!(1),
        json!(2),
        json!(3),
    ])))
    .await;
    assert_eq!(ws.recv_timeout().await.as_array().map(Vec::len), Some(3));
    ws.send(&Value::Array(chain_id_batch((1..=4).map(|i| json!(i)))))
        .await;
    let refused = ws.recv_timeout().await;
    assert_eq!(refused["error"]["code"], json!(-32010), "{refused}");
    assert_eq!(
        refused["error"]["message"],
        json!("The batch request was too large"),
        "{refused}"
    );

    assert_eq!(result(addr, "eth_chainId", json!([])).await, json!("0x539"));
    n.handle.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_response_cap_answers_response_too_large() {
    const CAP: usize = 200;
    let n = node_with(RpcConfig {
        batch_response_max_size: CAP,
        ..RpcConfig::default()
    })
    .await;
    let addr = n.handle.http_addr().unwrap();

    // Each answer, `{"jsonrpc":"2.0","id":N,"result":"0x539"}`, is 41 bytes, 42 with its
    // separator: the fifth passes 200 bytes (210) and is the last one served. The calls after
    // it get geth's -32003, the transaction at the end included: it never reaches the pool.
    let mut batch = chain_id_batch((0..8).map(|i| json!(i)));
    batch.push(
        json!({"jsonrpc":"2.0","id":8,"method":"eth_sendRawTransaction",
        "params":[transfer(&n.rich, 1, 1_000_000_000, 1)]}),
    );
    let answer = post_batch(addr, &batch).await;
    let answers = answer.as_array().unwrap_or_else(|| panic!("{answer}"));
    assert_eq!(answers.len(), 9, "{answer}");
    let served = answers
        .iter()
        .take_while(|a| a.get("result").is_some())
        .count();
    assert_eq!(served, 5, "{answer}");
    // The cap is passed by the last response served, not before.
    let sizes: Vec<usize> = answers[..served]
        .iter()
        .map(|a| a.to_string().len() + 1)
        .collect();
    assert!(
        sizes[..served - 1].iter().sum::<usize>() <= CAP,
        "{sizes:?}"
    );
    assert!(sizes.iter().sum::<usize>() > CAP, "{sizes:?}");
    for (i, a) in answers.iter().enumerate() {
        if i < served {
            assert_eq!(a["result"], json!("0x539"), "{a}");
        } else {
            assert_eq!(
                *a,
                json!({"jsonrpc":"2.0","id":i,"error":{"code":-32003,"message":"response too large"}})
            );
        }
    }
    assert_eq!(pending_count(addr).await, json!("0x0"));

    // One response bigger than the cap is served, alone or first in a batch; what follows it
    // in the batch is not.
    let block =
        json!({"jsonrpc":"2.0","id":"b","method":"eth_getBlockByNumber","params":["0x0", true]});
    assert!(
        result(addr, "eth_getBlockByNumber", json!(["0x0", true]))
            .await
            .to_string()
            .len()
            > CAP
    );
    let answer = post_batch(addr, &[block, chain_id_batch([json!("c")]).remove(0)]).await;
    assert_eq!(
        answer[0]["result"]["hash"],
        json!(n.genesis_hash),
        "{answer}"
    );
    assert_eq!(answer[1]["error"]["code"], json!(-32003), "{answer}");
    assert_eq!(answer[1]["id"], json!("c"), "{answer}");

    // Under the cap, all served; the same cap holds over WebSocket.
    let answer = post_batch(addr, &chain_id_batch((0..4).map(|i| json!(i)))).await;
    assert!(
        answer
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["result"] == json!("0x539")),
        "{answer}"
    );
    let mut ws = Ws::connect(n.handle.ws_addr().unwrap()).await;
    ws.send(&Value::Array(chain_id_batch((0..8).map(|i| json!(i)))))
        .await;
    let answer = ws.recv_timeout().await;
    let codes: Vec<Value> = answer
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"))
        .iter()
        .map(|a| a["error"]["code"].clone())
        .collect();
    assert_eq!(codes[..5], vec![Value::Null; 5][..], "{answer}");
    assert_eq!(codes[5..], vec![json!(-32003); 3][..], "{answer}");
    n.handle.stop();
}

/// An HTTP request whose headers and half of whose body have been sent: the server has it
/// in progress until the rest arrives.
struct HeldRequest {
    stream: TcpStream,
    rest: Vec<u8>,
}

impl HeldRequest {
    async fn open(addr: SocketAddr) -> HeldRequest {
        let body = json!({"jsonrpc":"2.0","id":1,"method":"eth_chainId"})
            .to_string()
            .into_bytes();
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        let (first, rest) = body.split_at(body.len() / 2);
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(first).await.unwrap();
        HeldRequest {
            stream,
            rest: rest.to_vec(),
        }
    }

    /// Sends the rest of the body; returns (status, body).
    async fn finish(mut self) -> (u16, Value) {
        self.stream.write_all(&self.rest).await.unwrap();
        let (status, _, body) = read_answer(&mut self.stream).await;
        (status, parse_body(&body))
    }
}

/// Reads one HTTP response (headers, then a Content-Length body): (status, head lines
/// lowercased, body). Panics after 30 s.
async fn read_answer(s: &mut TcpStream) -> (u16, String, String) {
    let read = async {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&buf).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let head = head.to_ascii_lowercase();
                let len = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok());
                if len.is_some_and(|n| body.len() >= n) {
                    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok());
                    return (status.unwrap_or(0), head, body.to_string());
                }
            }
            let n = s.read(&mut chunk).await.unwrap();
            assert!(n > 0, "connection closed mid-answer: {text}");
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("an answer within 30 s")
}

/// POSTs `body` and returns (status, head lines lowercased, body).
async fn post_with_head(addr: SocketAddr, body: &[u8]) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    read_answer(&mut s).await
}

/// Sends `eth_chainId` until it is served (at most 100 tries, 20 ms apart): the server
/// learns of the clients that left at its own pace.
async fn until_served(addr: SocketAddr) {
    let probe = json!({"jsonrpc":"2.0","id":8,"method":"eth_chainId"}).to_string();
    for _ in 0..100 {
        let (status, head, body) = post_with_head(addr, probe.as_bytes()).await;
        if status == 200 {
            assert_eq!(parse_body(&body)["result"], json!("0x539"), "{body}");
            return;
        }
        assert_eq!(status, 429, "{head}\n{body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the server never served again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_hold_no_request_slot_and_are_dropped_after_the_read_timeout() {
    let n = node_with(RpcConfig {
        max_concurrent_requests: 2,
        timeouts: moat_rpc::HttpTimeouts {
            read: Duration::from_secs(2),
            read_header: Duration::from_secs(2),
            ..moat_rpc::HttpTimeouts::default()
        },
        ..RpcConfig::default()
    })
    .await;
    let addr = n.handle.http_addr().unwrap();
    assert_eq!(result(addr, "eth_chainId", json!([])).await, json!("0x539"));

    // Ten requests stop mid-body, five times the requests allowed to execute: only
    // requests whose bodies are in count, so others are served at once.
    let mut held = Vec::new();
    for _ in 0..10 {
        held.push(HeldRequest::open(addr).await);
    }
    let call = json!({"jsonrpc":"2.0","id":1,"method":"eth_chainId"}).to_string();
    for _ in 0..3 {
        let (status, head, body) = post_with_head(addr, call.as_bytes()).await;
        assert_eq!(status, 200, "{head}\n{body}");
    }
    // A held request whose rest comes in time is answered.
    let (status, body) = held.pop().unwrap().finish().await;
    assert_eq!((status, &body["result"]), (200, &json!("0x539")), "{body}");

    // The others get 408 at the read timeout, and their connections are closed.
    let started = std::time::Instant::now();
    for mut h in held {
        let (status, head, body) = read_answer(&mut h.stream).await;
        assert_eq!(status, 408, "{head}\n{body}");
        assert!(head.contains("\r\nconnection: close"), "{head}");
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), h.stream.read_to_end(&mut rest))
            .await
            .expect("the server closes the connection");
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    until_served(addr).await;
    n.handle.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_and_idle_connections_are_closed() {
    let n = node_with(RpcConfig {
        timeouts: moat_rpc::HttpTimeouts {
            read: Duration::from_secs(1),
            read_header: Duration::from_secs(1),
            idle: Duration::from_secs(2),
            ..moat_rpc::HttpTimeouts::default()
        },
        ..RpcConfig::default()
    })
    .await;
    let addr = n.handle.http_addr().unwrap();
    let closed_within = |mut s: TcpStream, secs: u64| async move {
        let mut buf = Vec::new();
        tokio::time::timeout(Duration::from_secs(secs), s.read_to_end(&mut buf))
            .await
            .is_ok()
    };
    // Silent after connecting, or half a request line: closed at the header timeout.
    let silent = TcpStream::connect(addr).await.unwrap();
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(b"POST / HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    assert!(
        closed_within(silent, 5).await,
        "a silent connection stays open"
    );
    assert!(
        closed_within(half, 5).await,
        "slow headers keep a connection open"
    );
    // A kept-alive connection is closed once idle for the idle timeout, not before.
    let mut kept = TcpStream::connect(addr).await.unwrap();
    let body = json!({"jsonrpc":"2.0","id":1,"method":"eth_chainId"}).to_string();
    let head = format!(
        "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    kept.write_all(head.as_bytes()).await.unwrap();
    let (status, _, _) = read_answer(&mut kept).await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    kept.write_all(head.as_bytes()).await.unwrap();
    let (status, _, _) = read_answer(&mut kept).await;
    assert_eq!(status, 200, "closed before the idle timeout");
    assert!(
        closed_within(kept, 6).await,
        "an idle connection stays open"
    );
    n.handle.stop();
}

/// A plain `eth_sendRawTransaction` call is answered on its own path, before jsonrpsee;
/// the same call in a form left to jsonrpsee (an escape in the id or in the parameter)
/// gets the same answer, byte for byte and with the same content type, accepted and
/// refused alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_raw_transaction_calls_answer_as_jsonrpsee_does() {
    let n = node().await;
    let addr = n.handle.http_addr().unwrap();
    let call = |id: &str, raw: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"eth_sendRawTransaction","params":["{raw}"]}}"#
        )
    };
    let hash_of = |raw: &str| {
        let bytes = alloy_primitives::hex::decode(raw.trim_start_matches("0x")).unwrap();
        format!("{:?}", alloy_primitives::keccak256(bytes))
    };
    let content_type = |head: &str| {
        head.lines()
            .find(|l| l.starts_with("content-type:"))
            .map(str::to_string)
    };
    let (a, b) = (
        transfer(&n.rich, 1, 1_000_000_000, 1),
        transfer(&n.rich, 2, 1_000_000_000, 1),
    );

    // Accepted: the id "ab" plainly (own path), and as "a\u0062" (jsonrpsee's).
    let (s1, head1, own) = post_with_head(addr, call(r#""ab""#, &a).as_bytes()).await;
    let (s2, head2, general) = post_with_head(addr, call(r#""a\u0062""#, &b).as_bytes()).await;
    assert_eq!((s1, s2), (200, 200));
    assert_eq!(
        own,
        format!(
            r#"{{"jsonrpc":"2.0","id":"ab","result":"{}"}}"#,
            hash_of(&a)
        )
    );
    assert_eq!(
        general,
        format!(
            r#"{{"jsonrpc":"2.0","id":"ab","result":"{}"}}"#,
            hash_of(&b)
        )
    );
    assert_eq!(content_type(&head1), content_type(&head2));
    assert!(content_type(&head1).is_some(), "{head1}");
    assert_eq!(
        result(addr, "txpool_status", json!([])).await,
        json!({ "pending": "0x2", "queued": "0x0" })
    );

    // Refused: the same tx again, its "0" plain (own path) and escaped (jsonrpsee's).
    let escaped = format!("\\u0030{}", &a[1..]);
    let (_, _, own) = post_with_head(addr, call("7", &a).as_bytes()).await;
    let (_, _, general) = post_with_head(addr, call("7", &escaped).as_bytes()).await;
    assert_eq!(own, general);
    assert_eq!(
        own,
        r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32000,"message":"already known"}}"#
    );
}
