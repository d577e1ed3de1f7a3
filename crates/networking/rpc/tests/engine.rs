//! The engine API end to end: a Prague chain over an in-memory store, a pool and a
//! payload service over it, and JWT-authenticated requests over real HTTP.
//!
//! The flow a consensus client drives is tested as it drives it: forkchoiceUpdated with
//! attributes, getPayload, newPayload of what was built, forkchoiceUpdated to it.

use alloy_primitives::{Address, B256};
use moat_blockchain::chain::Chain;
use moat_blockchain::payload::PayloadService;
use moat_common::PooledTransaction;
use moat_common::block::Block;
use moat_common::config::Genesis;
use moat_common::transaction::SignedTransaction;
use moat_crypto::secp::Signer;
use moat_mempool::{Pool, PoolConfig, TxInput, TxOrigin};
use moat_rpc::engine::make_token;
use moat_rpc::{EngineConfig, EngineContext, EngineHandle, StoreStateView};
use moat_storage::Store;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

mod engine_common;
use engine_common::*;

/// All forks through Prague at genesis, one funded key, and the Prague system contracts
/// (taken from the ethtest genesis: block execution needs their code).
fn genesis(rich: Address) -> Genesis {
    genesis_at(rich, false)
}

/// The test chain, at Prague from genesis, or at Osaka when `osaka`.
fn genesis_at(rich: Address, osaka: bool) -> Genesis {
    let ethtest = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../../shared/testdata/ethtest/genesis.json"
    );
    let ethtest: Value =
        serde_json::from_str(&std::fs::read_to_string(ethtest).expect("ethtest genesis"))
            .expect("ethtest genesis is JSON");
    let mut alloc = serde_json::Map::new();
    for address in [
        "000f3df6d732807ef1319fb7b8bb8522d0beac02",
        "0000f90827f1c53a10cb7a02335b175320002935",
        "00000961ef480eb55e80d19ad83579a64c007002",
        "0000bbddc7ce488642fb579f8b00f3a590007251",
    ] {
        alloc.insert(address.into(), ethtest["alloc"][address].clone());
    }
    for funded in [rich, blob_sender().address()] {
        alloc.insert(
            format!("{funded:x}"),
            json!({ "balance": "0xde0b6b3a7640000" }),
        );
    }
    let mut genesis = json!({
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
    if osaka {
        genesis["config"]["osakaTime"] = json!(0);
    }
    Genesis::from_json(&genesis.to_string()).expect("test genesis parses")
}

/// A second funded key: a sender holds blob or plain txs, not both.
fn blob_sender() -> Signer {
    Signer::from_seed(2)
}

/// A blob tx (v0 sidecar with `blobs` blobs) for this chain.
fn blob_tx(signer: &Signer, nonce: u64, blobs: usize) -> PooledTransaction {
    moat_common::testing::blob_tx_on_chain(
        moat_common::transaction::SidecarVersion::V0,
        blobs,
        nonce,
        signer,
        CHAIN_ID,
        10_000_000_000,
        2_000_000_000,
    )
}

struct Node {
    handle: EngineHandle,
    chain: Chain,
    pool: Pool,
    ctx: EngineContext,
    rich: Signer,
}

async fn node() -> Node {
    node_with(None).await
}

async fn node_with(sync: Option<Arc<dyn moat_rpc::SyncService>>) -> Node {
    node_at(sync, false).await
}

async fn node_at(sync: Option<Arc<dyn moat_rpc::SyncService>>, osaka: bool) -> Node {
    let rich = Signer::from_seed(1);
    let store = Store::in_memory();
    let chain = Chain::init(store.clone(), &genesis_at(rich.address(), osaka)).expect("genesis");
    let view = StoreStateView::new(store, chain.config().clone());
    let pool = Pool::new(PoolConfig::new(chain.config().clone()), Arc::new(view));
    let chain = chain.with_sender_cache(pool.sender_cache().clone());
    let payloads = PayloadService::new(chain.clone(), pool.clone());
    let mut ctx = EngineContext::new(
        chain.clone(),
        pool.clone(),
        payloads,
        moat_blockchain::maintain::spawn(&chain, &pool),
    );
    if let Some(sync) = sync {
        ctx = ctx.with_sync(sync);
    }
    let config = EngineConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        ..EngineConfig::new(SECRET)
    };
    let handle = moat_rpc::start_engine(config, ctx.clone())
        .await
        .expect("engine starts");
    Node {
        handle,
        chain,
        pool,
        ctx,
        rich,
    }
}

fn attributes(timestamp: u64) -> Value {
    json!({
        "timestamp": format!("{timestamp:#x}"),
        "prevRandao": B256::repeat_byte(7),
        "suggestedFeeRecipient": Address::repeat_byte(0xfe),
        "withdrawals": [],
        "parentBeaconBlockRoot": B256::repeat_byte(9),
    })
}

/// engine_newPayloadV4 of `payload` with no blob hashes, the tests' beacon root and no
/// requests.
async fn new_payload(addr: SocketAddr, payload: impl serde::Serialize) -> Value {
    let root = B256::repeat_byte(9);
    result(addr, "engine_newPayloadV4", json!([payload, [], root, []])).await
}

/// A block as an `ExecutionPayloadV3`, for payloads the test alters.
fn payload_of(block: &Block) -> Value {
    let h = &block.header;
    let q = |n: u64| format!("{n:#x}");
    json!({
        "parentHash": h.parent_hash,
        "feeRecipient": h.beneficiary,
        "stateRoot": h.state_root,
        "receiptsRoot": h.receipts_root,
        "logsBloom": h.logs_bloom,
        "prevRandao": h.mix_hash,
        "blockNumber": q(h.number),
        "gasLimit": q(h.gas_limit),
        "gasUsed": q(h.gas_used),
        "timestamp": q(h.timestamp),
        "extraData": h.extra_data,
        "baseFeePerGas": q(h.base_fee_per_gas.unwrap()),
        "blockHash": block.hash,
        "transactions": block.transactions.iter()
            .map(|t| format!("0x{}", alloy_primitives::hex::encode(t.encoded_2718())))
            .collect::<Vec<_>>(),
        "withdrawals": [],
        "blobGasUsed": q(h.blob_gas_used.unwrap()),
        "excessBlobGas": q(h.excess_blob_gas.unwrap()),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_need_a_fresh_token_signed_with_the_secret() {
    let n = node().await;
    let addr = n.handle.local_addr();
    let caps = json!([["engine_newPayloadV4"]]);

    let (status, _) = post(addr, None, "engine_exchangeCapabilities", caps.clone()).await;
    assert_eq!(status, 401, "no token");
    let wrong = make_token(&[0x43; 32], now());
    let (status, _) = post(
        addr,
        Some(&wrong),
        "engine_exchangeCapabilities",
        caps.clone(),
    )
    .await;
    assert_eq!(status, 401, "wrong secret");
    let stale = make_token(&SECRET, now() - 120);
    let (status, _) = post(
        addr,
        Some(&stale),
        "engine_exchangeCapabilities",
        caps.clone(),
    )
    .await;
    assert_eq!(status, 401, "iat two minutes old");
    let (status, _) = post(
        addr,
        Some("not.a.jwt"),
        "engine_exchangeCapabilities",
        caps.clone(),
    )
    .await;
    assert_eq!(status, 401, "garbage");

    let listed = result(addr, "engine_exchangeCapabilities", caps).await;
    let listed: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for m in [
        "engine_newPayloadV4",
        "engine_forkchoiceUpdatedV3",
        "engine_getPayloadV4",
        "engine_getBlobsV1",
        "engine_getBlobsV3",
        "engine_hasBlobs",
    ] {
        assert!(listed.contains(&m), "{m} in {listed:?}");
    }
    let version = result(
        addr,
        "engine_getClientVersionV1",
        json!([{
            "code": "LH", "name": "lighthouse", "version": "v1", "commit": "0x01020304"
        }]),
    )
    .await;
    assert_eq!(version[0]["code"], "MO");
    assert_eq!(version[0]["name"], "moat");
    n.handle.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_tx_goes_through_fcu_getpayload_newpayload() {
    let n = node().await;
    let addr = n.handle.local_addr();
    let genesis = n.chain.head_header().unwrap();
    let genesis_hash = genesis.hash();
    let mut heads = n.ctx.maintainer.subscribe();

    let tx = transfer(&n.rich, 0);
    n.pool
        .add_transaction(TxInput::Raw(tx.encoded_2718().into()), TxOrigin::Local)
        .await
        .expect("pool admits the transfer");
    assert!(!n.ctx.synced.load(Ordering::Acquire));

    // Build on genesis.
    let fcu = result(
        addr,
        "engine_forkchoiceUpdatedV3",
        json!([fcu_state(genesis_hash), attributes(genesis.timestamp + 12)]),
    )
    .await;
    assert_eq!(fcu["payloadStatus"]["status"], "VALID", "{fcu}");
    assert_eq!(fcu["payloadStatus"]["latestValidHash"], json!(genesis_hash));
    assert!(
        n.ctx.synced.load(Ordering::Acquire),
        "a known head marks us synced"
    );
    let id = fcu["payloadId"].as_str().expect("a payload id").to_string();
    assert_eq!(id.len(), 18, "8 bytes of hex: {id}");

    let env = result(addr, "engine_getPayloadV4", json!([id])).await;
    let payload = env["executionPayload"].clone();
    let txs = payload["transactions"].as_array().unwrap();
    assert_eq!(txs.len(), 1, "{payload}");
    assert_eq!(
        txs[0].as_str().unwrap(),
        format!("0x{}", alloy_primitives::hex::encode(tx.encoded_2718()))
    );
    assert_eq!(payload["blockNumber"], "0x1");
    assert_eq!(env["executionRequests"], json!([]));
    assert_eq!(env["blobsBundle"]["blobs"], json!([]));
    assert_eq!(env["shouldOverrideBuilder"], false);
    // Tip 2 gwei × 21000 gas.
    assert_eq!(
        env["blockValue"],
        json!(format!("{:#x}", 42_000_000_000_000u64))
    );
    // V3 is for Cancun payloads only.
    assert_eq!(
        error_code(addr, "engine_getPayloadV3", json!([id])).await,
        i64::from(moat_rpc::engine::UNSUPPORTED_FORK)
    );

    let block_hash: B256 = payload["blockHash"].as_str().unwrap().parse().unwrap();
    let np_params = json!([payload, [], B256::repeat_byte(9), []]);
    let status = result(addr, "engine_newPayloadV4", np_params.clone()).await;
    assert_eq!(status["status"], "VALID", "{status}");
    assert_eq!(status["latestValidHash"], json!(block_hash));
    assert_eq!(n.chain.head().unwrap(), (1, block_hash));
    assert!(!n.pool.contains(&tx.hash()), "mined tx left the pool");
    assert_eq!(heads.borrow_and_update().hash, block_hash);

    // Known already: still VALID.
    let again = result(addr, "engine_newPayloadV4", np_params).await;
    assert_eq!(again["status"], "VALID");

    let fcu = forkchoice(addr, block_hash).await;
    assert_eq!(fcu["payloadStatus"]["status"], "VALID", "{fcu}");
    assert_eq!(fcu["payloadId"], Value::Null);
    // A canonical ancestor is acknowledged, the head stays.
    let fcu = forkchoice(addr, genesis_hash).await;
    assert_eq!(fcu["payloadStatus"]["status"], "VALID");
    assert_eq!(n.chain.head().unwrap().1, block_hash);
    n.handle.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_payloads_and_forkchoices_get_the_spec_answers() {
    let n = node().await;
    let addr = n.handle.local_addr();
    let genesis = n.chain.head_header().unwrap();
    let genesis_hash = genesis.hash();
    n.pool
        .add_transaction(
            TxInput::Raw(transfer(&n.rich, 0).encoded_2718().into()),
            TxOrigin::Local,
        )
        .await
        .unwrap();
    let fcu = result(
        addr,
        "engine_forkchoiceUpdatedV3",
        json!([fcu_state(genesis_hash), attributes(genesis.timestamp + 12)]),
    )
    .await;
    let env = result(addr, "engine_getPayloadV4", json!([fcu["payloadId"]])).await;
    let good = env["executionPayload"].clone();
    let root = B256::repeat_byte(9);

    // A block hash that is not the header's.
    let mut p = good.clone();
    p["blockHash"] = json!(B256::repeat_byte(0xbb));
    let s = new_payload(addr, p).await;
    assert_eq!(s["status"], "INVALID", "{s}");
    assert_eq!(s["latestValidHash"], Value::Null);
    assert!(
        s["validationError"]
            .as_str()
            .unwrap()
            .starts_with("blockhash mismatch")
    );

    // Versioned hashes that the block's txs do not carry.
    let s = result(
        addr,
        "engine_newPayloadV4",
        json!([good, [B256::repeat_byte(1)], root, []]),
    )
    .await;
    assert_eq!(s["status"], "INVALID", "{s}");

    // The built block, decoded back, with changes and a recomputed hash.
    let raw_txs: Vec<SignedTransaction> = good["transactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let hex = t.as_str().unwrap().trim_start_matches("0x");
            SignedTransaction::decode_2718(&alloy_primitives::hex::decode(hex).unwrap()).unwrap()
        })
        .collect();
    let built = {
        let mut b = Block {
            header: n.chain.head_header().unwrap(),
            hash: B256::ZERO,
            transactions: raw_txs,
            ommers: Vec::new(),
            withdrawals: Some(Vec::new()),
        };
        let h = &mut b.header;
        let field = |k: &str| good[k].as_str().unwrap().to_string();
        let num = |k: &str| u64::from_str_radix(field(k).trim_start_matches("0x"), 16).unwrap();
        h.parent_hash = field("parentHash").parse().unwrap();
        h.beneficiary = field("feeRecipient").parse().unwrap();
        h.state_root = field("stateRoot").parse().unwrap();
        h.receipts_root = field("receiptsRoot").parse().unwrap();
        h.logs_bloom = field("logsBloom").parse().unwrap();
        h.mix_hash = field("prevRandao").parse().unwrap();
        h.number = num("blockNumber");
        h.gas_limit = num("gasLimit");
        h.gas_used = num("gasUsed");
        h.timestamp = num("timestamp");
        h.extra_data = alloy_primitives::hex::decode(field("extraData").trim_start_matches("0x"))
            .unwrap()
            .into();
        h.base_fee_per_gas = Some(num("baseFeePerGas"));
        h.blob_gas_used = Some(num("blobGasUsed"));
        h.excess_blob_gas = Some(num("excessBlobGas"));
        h.parent_beacon_block_root = Some(root);
        h.requests_hash = Some(moat_blockchain::chain::requests_hash(&[]));
        b.header.transactions_root = b.transactions_root();
        b.header.withdrawals_root = b.withdrawals_root();
        b.hash = b.header.hash();
        assert_eq!(
            json!(b.hash),
            good["blockHash"],
            "the test rebuilds the header right"
        );
        b
    };

    // An unknown parent: SYNCING.
    let mut orphan = built.clone();
    orphan.header.parent_hash = B256::repeat_byte(0x77);
    orphan.hash = orphan.header.hash();
    let s = new_payload(addr, payload_of(&orphan)).await;
    assert_eq!(s["status"], "SYNCING", "{s}");

    // A wrong state root: INVALID, the parent is the latest valid block.
    let mut wrong = built.clone();
    wrong.header.state_root = B256::repeat_byte(0x55);
    wrong.hash = wrong.header.hash();
    let s = new_payload(addr, payload_of(&wrong)).await;
    assert_eq!(s["status"], "INVALID", "{s}");
    assert_eq!(s["latestValidHash"], json!(genesis_hash));
    // …and remembered.
    let fcu = forkchoice(addr, wrong.hash).await;
    assert_eq!(fcu["payloadStatus"]["status"], "INVALID", "{fcu}");
    assert_eq!(n.chain.head().unwrap().1, genesis_hash);
    // A payload on the rejected block, and one on that: INVALID without execution,
    // naming the rejected block's parent as the latest valid block.
    let mut parent = wrong.clone();
    for depth in 1..=2 {
        let mut child = parent.clone();
        child.header.parent_hash = parent.hash;
        child.header.number += 1;
        child.header.timestamp += 12;
        child.hash = child.header.hash();
        let s = new_payload(addr, payload_of(&child)).await;
        assert_eq!(s["status"], "INVALID", "depth {depth}: {s}");
        assert_eq!(s["latestValidHash"], json!(genesis_hash), "depth {depth}");
        assert_eq!(
            s["validationError"], "links to previously rejected block",
            "depth {depth}"
        );
        let fcu = forkchoice(addr, child.hash).await;
        assert_eq!(fcu["payloadStatus"]["status"], "INVALID", "{fcu}");
        parent = child;
    }

    // The good one still imports.
    let s = new_payload(addr, &good).await;
    assert_eq!(s["status"], "VALID", "{s}");

    // Forkchoice to a block we do not have: SYNCING, no payload.
    let fcu = result(
        addr,
        "engine_forkchoiceUpdatedV3",
        json!([fcu_state(B256::repeat_byte(0x66)), attributes(1000)]),
    )
    .await;
    assert_eq!(fcu["payloadStatus"]["status"], "SYNCING", "{fcu}");
    assert_eq!(fcu["payloadId"], Value::Null);

    // Attributes not after the head: -38003.
    let code = error_code(
        addr,
        "engine_forkchoiceUpdatedV3",
        json!([fcu_state(built.hash), attributes(built.header.timestamp)]),
    )
    .await;
    assert_eq!(
        code,
        i64::from(moat_rpc::engine::INVALID_PAYLOAD_ATTRIBUTES)
    );
    // A finalized block that is not ours: -38002.
    let code = error_code(
        addr,
        "engine_forkchoiceUpdatedV3",
        json!([{ "headBlockHash": built.hash, "safeBlockHash": built.hash,
                 "finalizedBlockHash": B256::repeat_byte(0x12) }, null]),
    )
    .await;
    assert_eq!(code, i64::from(moat_rpc::engine::INVALID_FORKCHOICE_STATE));

    // Unknown payload id: -38001; malformed: -32602.
    assert_eq!(
        error_code(addr, "engine_getPayloadV4", json!(["0x0102030405060708"])).await,
        i64::from(moat_rpc::engine::UNKNOWN_PAYLOAD)
    );
    assert_eq!(
        error_code(addr, "engine_getPayloadV4", json!(["0x01"])).await,
        -32602
    );
    // A Prague payload over V3: unsupported fork; a payload missing fields: -32602.
    assert_eq!(
        error_code(addr, "engine_newPayloadV3", json!([good, [], root])).await,
        i64::from(moat_rpc::engine::UNSUPPORTED_FORK)
    );
    let mut partial = good.clone();
    partial.as_object_mut().unwrap().remove("stateRoot");
    assert_eq!(
        error_code(addr, "engine_newPayloadV4", json!([partial, [], root, []])).await,
        -32602
    );

    // getBlobs: unknown hashes are null (V1) or a null answer (V2); too many: -38004.
    let unknown = B256::repeat_byte(0x01);
    assert_eq!(
        result(addr, "engine_getBlobsV1", json!([[unknown]])).await,
        json!([null])
    );
    assert_eq!(
        result(addr, "engine_getBlobsV2", json!([[unknown]])).await,
        Value::Null
    );
    let many = vec![unknown; 129];
    assert_eq!(
        error_code(addr, "engine_getBlobsV1", json!([many])).await,
        i64::from(moat_rpc::engine::TOO_LARGE_REQUEST)
    );
    // getBlobsV3 answers null before Osaka, as go-ethereum does.
    assert_eq!(
        result(addr, "engine_getBlobsV3", json!([[unknown]])).await,
        Value::Null
    );
    n.handle.stop();
}

/// At Osaka: a version-0 blob tx sent over RPC is pooled with cell proofs; getBlobsV3
/// answers in part (null where a blob is missing), getBlobsV2 not at all, hasBlobs says
/// which are there, getBlobsV1 serves no cell-proof sidecar.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_blobs_v3_answers_in_part_at_osaka() {
    let n = node_at(None, true).await;
    let addr = n.handle.local_addr();
    let tx = blob_tx(&blob_sender(), 0, 2);
    let added = n
        .pool
        .submit_local(TxInput::Raw(tx.encoded_2718().into()))
        .await
        .expect("a version-0 sidecar over RPC is taken at Osaka");
    assert_eq!(added.hash, tx.hash());
    let hashes = tx.tx().tx().blob_versioned_hashes();
    let unknown = B256::repeat_byte(0x01);
    let asked = json!([[hashes[0], unknown, hashes[1]]]);

    let v3 = result(addr, "engine_getBlobsV3", asked.clone()).await;
    let v3 = v3.as_array().expect("a list");
    assert_eq!(v3.len(), 3);
    assert!(v3[1].is_null(), "the missing blob is null in its place");
    let sidecar = tx.sidecar().unwrap();
    for (i, at) in [(0, 0), (1, 2)] {
        let entry = &v3[at];
        assert_eq!(
            entry["blob"],
            json!(format!(
                "0x{}",
                alloy_primitives::hex::encode(&sidecar.blobs[i].0[..])
            ))
        );
        assert_eq!(
            entry["proofs"].as_array().map(Vec::len),
            Some(128),
            "cell proofs"
        );
    }
    assert_eq!(
        result(addr, "engine_getBlobsV2", asked.clone()).await,
        Value::Null,
        "V2 answers all or nothing"
    );
    assert_eq!(
        result(addr, "engine_hasBlobs", asked.clone()).await,
        json!([true, false, true])
    );
    assert_eq!(
        result(addr, "engine_getBlobsV1", asked).await,
        json!([null, null, null]),
        "V1 serves version-0 proofs only"
    );
    let many = vec![unknown; 129];
    assert_eq!(
        error_code(addr, "engine_getBlobsV3", json!([many])).await,
        i64::from(moat_rpc::engine::TOO_LARGE_REQUEST)
    );

    // getBlobsV4: cells 0, 2 and 100 (bits LSB first) with their cell proofs; null
    // where the blob is missing.
    let mut bits = [0u8; 16];
    bits[0] = 0b101;
    bits[12] = 0b1_0000; // cell 100
    let bits = format!("0x{}", alloy_primitives::hex::encode(bits));
    let v4 = result(
        addr,
        "engine_getBlobsV4",
        json!([[hashes[0], unknown, hashes[1]], bits]),
    )
    .await;
    let v4 = v4.as_array().expect("a list");
    assert_eq!(v4.len(), 3);
    assert!(v4[1].is_null());
    let pooled = n.pool.get(&tx.hash()).unwrap();
    let bundle = pooled.tx.sidecar().unwrap();
    let cells = moat_crypto::kzg::compute_cells(&bundle.blobs[1]).unwrap();
    let entry = &v4[2];
    assert_eq!(entry["blob_cells"].as_array().map(Vec::len), Some(3));
    for (k, c) in [0usize, 2, 100].into_iter().enumerate() {
        assert_eq!(
            entry["blob_cells"][k],
            json!(format!("0x{}", alloy_primitives::hex::encode(cells[c])))
        );
        assert_eq!(
            entry["proofs"][k],
            json!(format!(
                "0x{}",
                alloy_primitives::hex::encode(bundle.proofs[128 + c])
            ))
        );
    }
    assert_eq!(
        error_code(addr, "engine_getBlobsV4", json!([[hashes[0]], "0x01"])).await,
        -32602
    );
    n.handle.stop();
}

/// go-ethereum's ethtest chain rebuilt from genesis through 601 newPayloadV2/V3/V4 calls
/// (pre-Cancun, Cancun and Prague payloads, base64 execution requests included), then the
/// suite's own forkchoiceUpdatedV3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ethtest_chain_replays_through_new_payload() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../../shared/testdata/ethtest/"
    );
    let genesis = Genesis::from_file(std::path::Path::new(&format!("{dir}genesis.json"))).unwrap();
    let store = Store::in_memory();
    let chain = Chain::init(store.clone(), &genesis).unwrap();
    let view = StoreStateView::new(store, chain.config().clone());
    let pool = Pool::new(PoolConfig::new(chain.config().clone()), Arc::new(view));
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

    let calls: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(format!("{dir}newpayload.json")).unwrap())
            .unwrap();
    // Block 0 is the genesis, a proof-of-work block (difficulty 0x20000) that no payload
    // can express: rebuilt from its payload fields it hashes to something else, and it is
    // INVALID, as go-ethereum answers it. Blocks 1..600 are VALID.
    let s = result(addr, "engine_newPayloadV2", calls[0]["params"].clone()).await;
    assert_eq!(s["status"], "INVALID", "{s}");
    assert!(
        s["validationError"]
            .as_str()
            .unwrap()
            .starts_with("blockhash mismatch"),
        "{s}"
    );
    for c in &calls[1..] {
        let method = c["method"].as_str().unwrap();
        let status = result(addr, method, c["params"].clone()).await;
        assert_eq!(status["status"], "VALID", "{}: {status}", c["id"]);
    }
    let fcu: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{dir}headfcu.json")).unwrap())
            .unwrap();
    let head: B256 = fcu["params"][0]["headBlockHash"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(chain.head().unwrap(), (600, head));
    let r = result(addr, "engine_forkchoiceUpdatedV3", fcu["params"].clone()).await;
    assert_eq!(r["payloadStatus"]["status"], "VALID", "{r}");
    altered_payloads_of_known_blocks_are_invalid(addr, &calls).await;
    // The chain did not move.
    assert_eq!(chain.head().unwrap(), (600, head));
    handle.stop();
}

/// One change to a payload: what it alters, and how.
type Alteration = (&'static str, fn(&mut Value));

/// A payload is believed only once it hashes to its `blockHash`: each field of a known
/// payload changed in turn gives INVALID with go-ethereum's message (latest valid hash
/// null), whether the claimed hash is one of our blocks or unknown. The rules checked, in
/// go-ethereum's order (`ExecutableDataToBlock`):
/// - every transaction decodes (`invalid transaction N: …`);
/// - the versioned hashes are the blob hashes of the transactions, in number
///   (`invalid number of versionedHashes`) and one by one (`invalid versionedHash at N`);
/// - the block rebuilt from every field, the beacon root and the requests hash included,
///   hashes to `blockHash` (`blockhash mismatch, want …, got …`).
///
/// Rules tested elsewhere in this file: an unknown parent is SYNCING, a block that fails
/// execution is INVALID with its parent as latest valid hash and is remembered (a
/// forkchoiceUpdated to it, and payloads built on it or on its descendants, are INVALID
/// "links to previously rejected block").
async fn altered_payloads_of_known_blocks_are_invalid(addr: SocketAddr, calls: &[Value]) {
    fn set(p: &mut Value, field: &str, v: Value) {
        p[0][field] = v;
    }
    fn bump(p: &mut Value, field: &str) {
        let n = p[0][field].as_str().unwrap().trim_start_matches("0x");
        let n = u64::from_str_radix(n, 16).unwrap() + 1;
        p[0][field] = json!(format!("{n:#x}"));
    }
    let one = json!(B256::repeat_byte(1));
    let alterations: [Alteration; 22] = [
        ("transactions (junk)", |p| {
            set(p, "transactions", json!(["0xdeadbeef"]))
        }),
        ("transactions (empty)", |p| {
            set(p, "transactions", json!([]))
        }),
        ("withdrawals", |p| {
            set(
                p,
                "withdrawals",
                json!([{ "index": "0x0", "validatorIndex": "0x1",
                         "address": Address::repeat_byte(2), "amount": "0x3" }]),
            )
        }),
        ("parentHash", |p| {
            set(p, "parentHash", json!(B256::repeat_byte(1)))
        }),
        ("feeRecipient", |p| {
            set(p, "feeRecipient", json!(Address::repeat_byte(1)))
        }),
        ("stateRoot", |p| {
            set(p, "stateRoot", json!(B256::repeat_byte(1)))
        }),
        ("receiptsRoot", |p| {
            set(p, "receiptsRoot", json!(B256::repeat_byte(1)))
        }),
        ("logsBloom", |p| {
            set(p, "logsBloom", json!(format!("0x{}", "ff".repeat(256))))
        }),
        ("prevRandao", |p| {
            set(p, "prevRandao", json!(B256::repeat_byte(1)))
        }),
        ("blockNumber", |p| bump(p, "blockNumber")),
        ("gasLimit", |p| bump(p, "gasLimit")),
        ("gasUsed", |p| bump(p, "gasUsed")),
        ("timestamp", |p| bump(p, "timestamp")),
        ("extraData", |p| set(p, "extraData", json!("0x01"))),
        ("baseFeePerGas", |p| bump(p, "baseFeePerGas")),
        ("blobGasUsed", |p| bump(p, "blobGasUsed")),
        ("excessBlobGas", |p| bump(p, "excessBlobGas")),
        ("versioned hashes (one too many)", |p| {
            p[1].as_array_mut()
                .unwrap()
                .push(json!(B256::repeat_byte(1)))
        }),
        ("versioned hashes (one changed)", |p| {
            if let Some(first) = p[1].as_array_mut().unwrap().first_mut() {
                *first = json!(B256::repeat_byte(1));
            } else {
                p[1] = json!([B256::repeat_byte(1)]);
            }
        }),
        ("parentBeaconBlockRoot", |p| {
            p[2] = json!(B256::repeat_byte(1))
        }),
        ("executionRequests (one more)", |p| {
            p[3].as_array_mut().unwrap().push(json!("0x02aa"))
        }),
        ("executionRequests (none)", |p| p[3] = json!([])),
    ];
    // Block 600 (no blob, no request), 23 (one blob tx), 13 (a deposit request).
    for index in [600, 23, 13] {
        let call = &calls[index];
        let method = call["method"].as_str().unwrap();
        let known = call["params"][0]["blockHash"].clone();
        for (what, alter) in &alterations {
            let mut params = call["params"].clone();
            alter(&mut params);
            if params == call["params"] {
                continue; // e.g. no requests to remove from block 600
            }
            for claimed in [known.clone(), one.clone()] {
                params[0]["blockHash"] = claimed.clone();
                let s = result(addr, method, params.clone()).await;
                let context = format!("block {index}, {what}, claimed {claimed}: {s}");
                assert_eq!(s["status"], "INVALID", "{context}");
                assert_eq!(s["latestValidHash"], Value::Null, "{context}");
                let error = s["validationError"].as_str().unwrap();
                let claimed: B256 = claimed.as_str().unwrap().parse().unwrap();
                // The blob hashes the altered transactions carry, against those claimed.
                let blob_hashes = match *what {
                    "transactions (empty)" => 0,
                    _ => call["params"][1].as_array().unwrap().len(),
                };
                let expected = if *what == "transactions (junk)" {
                    "invalid transaction 0: ".to_string()
                } else if params[1].as_array().unwrap().len() != blob_hashes {
                    "invalid number of versionedHashes: ".to_string()
                } else if what.starts_with("versioned hashes") {
                    "invalid versionedHash at 0: ".to_string()
                } else {
                    format!("blockhash mismatch, want {claimed:x}, got ")
                };
                assert!(error.starts_with(&expected), "{context}");
            }
        }
        // Unaltered, the known payload is still VALID.
        let s = result(addr, method, call["params"].clone()).await;
        assert_eq!(s["status"], "VALID", "block {index}: {s}");
    }
}

/// Builds a payload on `parent` through forkchoiceUpdated + getPayloadV4.
async fn build_on(addr: SocketAddr, parent: B256, attrs: Value) -> Value {
    let fcu = result(
        addr,
        "engine_forkchoiceUpdatedV3",
        json!([fcu_state(parent), attrs]),
    )
    .await;
    assert_eq!(fcu["payloadStatus"]["status"], "VALID", "{fcu}");
    let id = fcu["payloadId"].as_str().expect("a payload id").to_string();
    result(addr, "engine_getPayloadV4", json!([id])).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_tx_goes_through_the_flow_with_its_bundle() {
    let n = node().await;
    let addr = n.handle.local_addr();
    let genesis = n.chain.head_header().unwrap();
    let blob = blob_tx(&n.rich, 0, 2);
    n.pool
        .add_transaction(TxInput::Raw(blob.encoded_2718().into()), TxOrigin::Local)
        .await
        .expect("pool admits the blob tx");

    let env = build_on(addr, genesis.hash(), attributes(genesis.timestamp + 12)).await;
    let payload = env["executionPayload"].clone();
    assert_eq!(payload["transactions"].as_array().unwrap().len(), 1);
    assert_eq!(payload["blobGasUsed"], json!(format!("{:#x}", 2 * 131_072)));
    let bundle = &env["blobsBundle"];
    let sidecar = blob.sidecar().unwrap();
    assert_eq!(bundle["blobs"].as_array().unwrap().len(), 2);
    for i in 0..2 {
        assert_eq!(
            bundle["commitments"][i],
            json!(format!(
                "0x{}",
                alloy_primitives::hex::encode(sidecar.commitments[i])
            ))
        );
        assert_eq!(
            bundle["proofs"][i],
            json!(format!(
                "0x{}",
                alloy_primitives::hex::encode(sidecar.proofs[i])
            ))
        );
    }
    let hashes = sidecar.versioned_hashes();
    let status = result(
        addr,
        "engine_newPayloadV4",
        json!([payload, hashes, B256::repeat_byte(9), []]),
    )
    .await;
    assert_eq!(status["status"], "VALID", "{status}");
    let block_hash: B256 = payload["blockHash"].as_str().unwrap().parse().unwrap();
    let fcu = forkchoice(addr, block_hash).await;
    assert_eq!(fcu["payloadStatus"]["status"], "VALID");
    assert!(
        !n.pool.contains(&blob.hash()),
        "the mined blob tx left the pool"
    );
    n.handle.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forkchoice_to_a_side_block_reorgs_and_the_pool_takes_txs_back() {
    let n = node().await;
    let addr = n.handle.local_addr();
    let genesis = n.chain.head_header().unwrap();

    // B: built on genesis while the pool is empty (another fee recipient).
    let mut attrs_b = attributes(genesis.timestamp + 12);
    attrs_b["suggestedFeeRecipient"] = json!(Address::repeat_byte(0xbb));
    let env_b = build_on(addr, genesis.hash(), attrs_b).await;
    let payload_b = env_b["executionPayload"].clone();
    assert_eq!(payload_b["transactions"].as_array().unwrap().len(), 0);

    // A: built on genesis with a transfer and a blob tx, imported and made head.
    let tx = transfer(&n.rich, 0);
    let blob = blob_tx(&blob_sender(), 0, 1);
    for t in [&tx, &blob] {
        n.pool
            .add_transaction(TxInput::Raw(t.encoded_2718().into()), TxOrigin::Local)
            .await
            .unwrap();
    }
    let env_a = build_on(addr, genesis.hash(), attributes(genesis.timestamp + 12)).await;
    let payload_a = env_a["executionPayload"].clone();
    let hash_a: B256 = payload_a["blockHash"].as_str().unwrap().parse().unwrap();
    let hash_b: B256 = payload_b["blockHash"].as_str().unwrap().parse().unwrap();
    assert_eq!(payload_a["transactions"].as_array().unwrap().len(), 2);
    let a_hashes = json!(blob.sidecar().unwrap().versioned_hashes());
    let np = |p: &Value, vh: &Value| json!([p, vh, B256::repeat_byte(9), []]);
    assert_eq!(
        result(addr, "engine_newPayloadV4", np(&payload_a, &a_hashes)).await["status"],
        "VALID"
    );
    let fcu = forkchoice(addr, hash_a).await;
    assert_eq!(fcu["payloadStatus"]["status"], "VALID");
    assert!(!n.pool.contains(&tx.hash()));
    assert!(!n.pool.contains(&blob.hash()));

    // B arrives: off the head, so kept but not executed.
    let status = result(addr, "engine_newPayloadV4", np(&payload_b, &json!([]))).await;
    assert_eq!(status["status"], "ACCEPTED", "{status}");
    assert_eq!(n.chain.head().unwrap().1, hash_a);

    // The consensus client picks B: reorg, and A's transfer is pending again.
    let fcu = forkchoice(addr, hash_b).await;
    assert_eq!(fcu["payloadStatus"]["status"], "VALID", "{fcu}");
    assert_eq!(fcu["payloadStatus"]["latestValidHash"], json!(hash_b));
    assert_eq!(n.chain.head().unwrap(), (1, hash_b));
    assert!(
        n.pool.contains(&tx.hash()),
        "the reorged tx is back in the pool"
    );
    assert!(
        n.pool.contains(&blob.hash()),
        "the reorged blob tx is back, with the sidecar kept when it was mined"
    );
    let receiver = n
        .chain
        .store()
        .account(&Address::repeat_byte(0x11))
        .unwrap();
    assert!(receiver.is_none(), "A's transfer is undone");

    // And back to A, now a side block that was executed before.
    let status = result(addr, "engine_newPayloadV4", np(&payload_a, &a_hashes)).await;
    assert_eq!(status["status"], "VALID");
    let fcu = forkchoice(addr, hash_a).await;
    assert_eq!(fcu["payloadStatus"]["status"], "VALID");
    assert_eq!(n.chain.head().unwrap(), (1, hash_a));
    assert!(!n.pool.contains(&tx.hash()));
    n.handle.stop();
}

/// Records what the engine hands the syncer.
#[derive(Debug, Default)]
struct SyncRecorder(parking_lot::Mutex<Vec<B256>>);

impl moat_rpc::SyncService for SyncRecorder {
    fn sync_to(&self, head: B256) {
        self.0.lock().push(head);
    }
    fn status(&self) -> Option<moat_rpc::SyncStatus> {
        None
    }
}

#[tokio::test]
async fn syncing_answers_hand_the_missing_block_to_the_syncer() {
    let recorder = Arc::new(SyncRecorder::default());
    let n = node_with(Some(recorder.clone())).await;
    let addr = n.handle.local_addr();
    // Two blocks of the same chain built elsewhere: this node has neither.
    let blocks = foreign_blocks(n.rich.address());
    let root = B256::repeat_byte(9);

    // A payload whose parent is unknown: SYNCING, and the parent goes to the syncer.
    let s = result(
        addr,
        "engine_newPayloadV4",
        json!([payload_of(&blocks[1]), [], root, []]),
    )
    .await;
    assert_eq!(s["status"], "SYNCING", "{s}");
    assert_eq!(*recorder.0.lock(), vec![blocks[0].hash]);
    // A forkchoice to an unknown head: SYNCING, the head goes to the syncer, and the
    // node is not marked synced.
    let fcu = forkchoice(addr, blocks[1].hash).await;
    assert_eq!(fcu["payloadStatus"]["status"], "SYNCING", "{fcu}");
    assert_eq!(*recorder.0.lock(), vec![blocks[0].hash, blocks[1].hash]);
    assert!(!n.ctx.synced.load(Ordering::Acquire));

    // The syncer brings the blocks in: the same calls are VALID again.
    for b in &blocks {
        n.chain.import(b).unwrap();
    }
    let fcu = forkchoice(addr, blocks[1].hash).await;
    assert_eq!(fcu["payloadStatus"]["status"], "VALID", "{fcu}");
    assert!(n.ctx.synced.load(Ordering::Acquire));
    // The syncer hears of the known head too (an older target must not pull the chain
    // away from it).
    assert_eq!(recorder.0.lock().len(), 3);
    assert_eq!(recorder.0.lock()[2], blocks[1].hash);
    let s = result(
        addr,
        "engine_newPayloadV4",
        json!([payload_of(&blocks[1]), [], root, []]),
    )
    .await;
    assert_eq!(s["status"], "VALID", "{s}");
    assert_eq!(recorder.0.lock().len(), 3);
}

/// Two empty blocks on `rich`'s genesis, built on a chain of their own (a chain this
/// node does not hold, as peers would serve it).
fn foreign_blocks(rich: Address) -> Vec<Block> {
    let other = Chain::init(Store::in_memory(), &genesis(rich)).unwrap();
    let other_pool = Pool::new(
        PoolConfig::new(other.config().clone()),
        Arc::new(StoreStateView::new(
            other.store().clone(),
            other.config().clone(),
        )),
    );
    let mut blocks = Vec::new();
    for _ in 0..2 {
        let head = other.head_header().unwrap();
        let attrs = moat_blockchain::payload::PayloadAttributes {
            timestamp: head.timestamp + 12,
            prev_randao: B256::repeat_byte(7),
            suggested_fee_recipient: Address::repeat_byte(0xfe),
            withdrawals: Some(Vec::new()),
            parent_beacon_block_root: Some(B256::repeat_byte(9)),
        };
        let block = other
            .build_payload(&other_pool, head.hash(), &attrs)
            .unwrap()
            .block;
        other.import(&block).unwrap();
        blocks.push(block);
    }
    blocks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reorg_made_by_the_syncer_gives_the_undone_txs_back_to_the_pool() {
    let recorder = Arc::new(SyncRecorder::default());
    let n = node_with(Some(recorder.clone())).await;
    let addr = n.handle.local_addr();
    let g = n.chain.head_header().unwrap();

    // Our block A mines a pooled transfer and becomes head through the engine API.
    let tx = transfer(&n.rich, 0);
    n.pool
        .add_transaction(TxInput::Raw(tx.encoded_2718().into()), TxOrigin::Local)
        .await
        .unwrap();
    let env_a = build_on(addr, g.hash(), attributes(g.timestamp + 12)).await;
    let payload_a = env_a["executionPayload"].clone();
    let hash_a: B256 = payload_a["blockHash"].as_str().unwrap().parse().unwrap();
    let s = new_payload(addr, payload_a).await;
    assert_eq!(s["status"], "VALID", "{s}");
    let fcu = forkchoice(addr, hash_a).await;
    assert_eq!(fcu["payloadStatus"]["status"], "VALID", "{fcu}");
    assert!(!n.pool.contains(&tx.hash()));

    // The consensus client moves to another branch this node does not hold: SYNCING.
    let blocks = foreign_blocks(n.rich.address());
    let fcu = forkchoice(addr, blocks[1].hash).await;
    assert_eq!(fcu["payloadStatus"]["status"], "SYNCING", "{fcu}");
    assert_eq!(recorder.0.lock().last(), Some(&blocks[1].hash));

    // The syncer does its work as its importer does: the first block is off our head,
    // so it is stored and made head (undoing A), the next one imported on it.
    n.chain.store_side_block(&blocks[0]).unwrap();
    let change = n.chain.set_head(blocks[0].hash).unwrap();
    assert_eq!(change.removed.len(), 1);
    n.chain.import(&blocks[1]).unwrap();
    // The pool follows the chain whoever moved it: no engine call is needed.
    assert!(n.ctx.maintainer.caught_up().await);
    assert!(
        n.pool.contains(&tx.hash()),
        "the tx of the block the syncer undid is back in the pool"
    );

    // The next forkchoiceUpdated finds the head there; A's transfer is still pending.
    let fcu = forkchoice(addr, blocks[1].hash).await;
    assert_eq!(fcu["payloadStatus"]["status"], "VALID", "{fcu}");
    assert!(n.pool.contains(&tx.hash()));
    // Told once: the same head again changes nothing.
    let fcu = forkchoice(addr, blocks[1].hash).await;
    assert_eq!(fcu["payloadStatus"]["status"], "VALID", "{fcu}");
    assert!(n.pool.contains(&tx.hash()));
}

/// A syncer that found one chain invalid.
#[derive(Debug)]
struct RefusingSync {
    bad: B256,
    latest_valid: B256,
}

impl moat_rpc::SyncService for RefusingSync {
    fn sync_to(&self, _: B256) {}
    fn status(&self) -> Option<moat_rpc::SyncStatus> {
        None
    }
    fn invalid(&self, hash: B256) -> Option<(Option<B256>, String)> {
        (hash == self.bad).then(|| (Some(self.latest_valid), "bad state root".to_string()))
    }
}

#[tokio::test]
async fn a_chain_the_syncer_refused_is_invalid_with_its_latest_valid_hash() {
    let rich = Signer::from_seed(1);
    let blocks = foreign_blocks(rich.address());
    // The syncer refused the first block (say, after importing its parent, genesis).
    let g = Chain::init(Store::in_memory(), &genesis(rich.address()))
        .unwrap()
        .head_header()
        .unwrap()
        .hash();
    let n = node_with(Some(Arc::new(RefusingSync {
        bad: blocks[0].hash,
        latest_valid: g,
    })))
    .await;
    let addr = n.handle.local_addr();

    // forkchoiceUpdated to it: INVALID, not SYNCING, with the latest valid hash.
    let fcu = forkchoice(addr, blocks[0].hash).await;
    assert_eq!(fcu["payloadStatus"]["status"], "INVALID", "{fcu}");
    assert_eq!(fcu["payloadStatus"]["latestValidHash"], json!(g));
    assert_eq!(fcu["payloadStatus"]["validationError"], "bad state root");
    assert!(fcu["payloadId"].is_null());

    // A child of it: INVALID too, and remembered.
    let root = B256::repeat_byte(9);
    let s = result(
        addr,
        "engine_newPayloadV4",
        json!([payload_of(&blocks[1]), [], root, []]),
    )
    .await;
    assert_eq!(s["status"], "INVALID", "{s}");
    assert_eq!(s["latestValidHash"], json!(g));
    let fcu = forkchoice(addr, blocks[1].hash).await;
    assert_eq!(fcu["payloadStatus"]["status"], "INVALID", "{fcu}");
    assert_eq!(fcu["payloadStatus"]["latestValidHash"], json!(g));
    assert!(!n.ctx.synced.load(Ordering::Acquire));
}

/// `safe` and `finalized` are the blocks the consensus layer named in its last
/// forkchoiceUpdated, for every method that takes a block tag: before it names any they
/// are "not found" as in geth, a block off the chain is refused with -38002 and changes
/// nothing, and a zero hash leaves a mark as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn safe_and_finalized_are_the_blocks_the_forkchoice_named() {
    let n = node().await;
    let addr = n.handle.local_addr();
    let fcu = |head: B256, safe: B256, finalized: B256| json!({ "headBlockHash": head, "safeBlockHash": safe, "finalizedBlockHash": finalized });
    // Three blocks, each with a transfer of the rich key's (its balance differs at each)
    // and made head with zero safe and finalized hashes.
    let mut hashes = vec![n.chain.head_header().unwrap().hash()];
    for i in 0..3u64 {
        n.pool
            .add_transaction(
                TxInput::Raw(transfer(&n.rich, i).encoded_2718().into()),
                TxOrigin::Local,
            )
            .await
            .expect("pool admits the transfer");
        let parent = *hashes.last().unwrap();
        let ts = n.chain.head_header().unwrap().timestamp + 12;
        let r = result(
            addr,
            "engine_forkchoiceUpdatedV3",
            json!([fcu(parent, B256::ZERO, B256::ZERO), attributes(ts)]),
        )
        .await;
        let id = r["payloadId"].as_str().expect("a payload id").to_string();
        let env = result(addr, "engine_getPayloadV4", json!([id])).await;
        let payload = env["executionPayload"].clone();
        let status = result(
            addr,
            "engine_newPayloadV4",
            json!([payload, [], B256::repeat_byte(9), []]),
        )
        .await;
        assert_eq!(status["status"], "VALID", "block {i}: {status}");
        hashes.push(payload["blockHash"].as_str().unwrap().parse().unwrap());
    }
    let head = hashes[3];
    let r = result(
        addr,
        "engine_forkchoiceUpdatedV3",
        json!([fcu(head, B256::ZERO, B256::ZERO), null]),
    )
    .await;
    assert_eq!(r["payloadStatus"]["status"], "VALID", "{r}");

    // The eth methods, served over the same chain as a node serves them.
    let rpc = moat_rpc::start(
        moat_rpc::RpcConfig {
            http_addr: "127.0.0.1:0".parse().unwrap(),
            ..moat_rpc::RpcConfig::default()
        },
        moat_rpc::RpcContext::new(n.chain.clone(), n.pool.clone()),
    )
    .await
    .expect("rpc starts");
    let eth = rpc.http_addr().expect("http is on");
    let block = |tag: &'static str| async move {
        call(eth, "eth_getBlockByNumber", json!([tag, false])).await
    };
    for tag in ["safe", "finalized"] {
        let r = block(tag).await;
        assert_eq!(r["error"]["code"], -32000, "{tag}: {r}");
        assert_eq!(r["error"]["message"], format!("{tag} block not found"));
        let r = call(eth, "eth_getBalance", json!([Address::ZERO, tag])).await;
        assert_eq!(r["error"]["message"], format!("{tag} block not found"));
    }
    assert_eq!(block("latest").await["result"]["hash"], json!(head));

    // The CL names #2 safe and #1 finalized.
    let r = result(
        addr,
        "engine_forkchoiceUpdatedV3",
        json!([fcu(head, hashes[2], hashes[1]), null]),
    )
    .await;
    assert_eq!(r["payloadStatus"]["status"], "VALID", "{r}");
    assert_eq!(block("safe").await["result"]["hash"], json!(hashes[2]));
    assert_eq!(block("finalized").await["result"]["hash"], json!(hashes[1]));
    assert_eq!(block("latest").await["result"]["hash"], json!(head));
    // State, logs and fee history read the same blocks.
    let rich = n.rich.address();
    let at =
        |tag: &'static str| async move { result(eth, "eth_getBalance", json!([rich, tag])).await };
    assert_eq!(at("finalized").await, at("0x1").await);
    assert_eq!(at("safe").await, at("0x2").await);
    assert_ne!(at("finalized").await, at("safe").await);
    assert_ne!(at("safe").await, at("latest").await);
    let logs = call(
        eth,
        "eth_getLogs",
        json!([{ "fromBlock": "finalized", "toBlock": "safe" }]),
    )
    .await;
    assert_eq!(logs["result"], json!([]), "{logs}");
    let fees = result(eth, "eth_feeHistory", json!(["0x1", "finalized", []])).await;
    assert_eq!(fees["oldestBlock"], "0x1", "{fees}");

    // A finalized block that is not on the chain: -38002, the marks stay.
    let code = error_code(
        addr,
        "engine_forkchoiceUpdatedV3",
        json!([fcu(head, head, B256::repeat_byte(0x12)), null]),
    )
    .await;
    assert_eq!(code, i64::from(moat_rpc::engine::INVALID_FORKCHOICE_STATE));
    assert_eq!(block("safe").await["result"]["hash"], json!(hashes[2]));
    assert_eq!(block("finalized").await["result"]["hash"], json!(hashes[1]));
    // Zero keeps the finalized block; the safe one moves on.
    let r = result(
        addr,
        "engine_forkchoiceUpdatedV3",
        json!([fcu(head, head, B256::ZERO), null]),
    )
    .await;
    assert_eq!(r["payloadStatus"]["status"], "VALID", "{r}");
    assert_eq!(block("safe").await["result"]["hash"], json!(head));
    assert_eq!(block("finalized").await["result"]["hash"], json!(hashes[1]));
    rpc.stop();
    n.handle.stop();
}

/// What a consensus client asks the engine port besides engine_* (Prysm checks the
/// connection with eth_chainId before exchanging capabilities) and the bodies it rebuilds
/// blinded blocks from: getPayloadBodiesByHash/ByRange as geth answers them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_bodies_and_the_eth_namespace_are_served_on_the_engine_port() {
    let rich = Signer::from_seed(1);
    let store = Store::in_memory();
    let chain = Chain::init(store.clone(), &genesis(rich.address())).expect("genesis");
    let view = StoreStateView::new(store, chain.config().clone());
    let pool = Pool::new(PoolConfig::new(chain.config().clone()), Arc::new(view));
    let payloads = PayloadService::new(chain.clone(), pool.clone());
    let ctx = EngineContext::new(
        chain.clone(),
        pool.clone(),
        payloads,
        moat_blockchain::maintain::spawn(&chain, &pool),
    );
    let eth = moat_rpc::eth_methods(
        moat_rpc::RpcContext::new(chain.clone(), pool.clone()),
        "moat/test".into(),
    )
    .unwrap();
    assert!(eth.0.method_names().all(|m| m.starts_with("eth_")));
    let config = EngineConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        eth: Some(eth),
        ..EngineConfig::new(SECRET)
    };
    let handle = moat_rpc::start_engine(config, ctx).await.unwrap();
    let addr = handle.local_addr();

    // The eth namespace, behind the same JWT; nothing of the others.
    assert_eq!(
        result(addr, "eth_chainId", json!([])).await,
        json!(format!("{CHAIN_ID:#x}"))
    );
    assert_eq!(result(addr, "eth_blockNumber", json!([])).await, "0x0");
    assert_eq!(
        error_code(addr, "admin_nodeInfo", json!([])).await,
        -32601,
        "only eth_ beside engine_"
    );
    let caps = result(addr, "engine_exchangeCapabilities", json!([[]])).await;
    for m in [
        "engine_getPayloadBodiesByHashV1",
        "engine_getPayloadBodiesByRangeV1",
    ] {
        assert!(caps.as_array().unwrap().contains(&json!(m)), "{caps}");
    }

    // Two blocks, the first with a transfer.
    let tx = transfer(&rich, 0);
    pool.add_transaction(TxInput::Raw(tx.encoded_2718().into()), TxOrigin::Local)
        .await
        .unwrap();
    let mut parent = chain.head_header().unwrap();
    let mut hashes = Vec::new();
    for _ in 0..2 {
        let env = build_on(addr, parent.hash(), attributes(parent.timestamp + 12)).await;
        let payload = env["executionPayload"].clone();
        assert_eq!(new_payload(addr, &payload).await["status"], "VALID");
        let hash: B256 = payload["blockHash"].as_str().unwrap().parse().unwrap();
        assert_eq!(
            forkchoice(addr, hash).await["payloadStatus"]["status"],
            "VALID"
        );
        hashes.push(hash);
        parent = chain.head_header().unwrap();
    }
    let raw = format!("0x{}", alloy_primitives::hex::encode(tx.encoded_2718()));

    let unknown = B256::repeat_byte(0x77);
    let bodies = result(
        addr,
        "engine_getPayloadBodiesByHashV1",
        json!([[hashes[0], unknown, hashes[1]]]),
    )
    .await;
    assert_eq!(bodies[0]["transactions"], json!([raw]), "{bodies}");
    assert_eq!(bodies[0]["withdrawals"], json!([]));
    assert_eq!(bodies[1], Value::Null, "an unknown block is null");
    assert_eq!(bodies[2]["transactions"], json!([]));

    // A range past the head stops at the head: no trailing nulls.
    let range = result(
        addr,
        "engine_getPayloadBodiesByRangeV1",
        json!(["0x1", "0x10"]),
    )
    .await;
    assert_eq!(range.as_array().unwrap().len(), 2, "{range}");
    assert_eq!(range[0]["transactions"], json!([raw]));
    assert_eq!(
        result(
            addr,
            "engine_getPayloadBodiesByRangeV1",
            json!(["0x9", "0x1"])
        )
        .await,
        json!([])
    );
    // The spec's refusals.
    assert_eq!(
        error_code(
            addr,
            "engine_getPayloadBodiesByRangeV1",
            json!(["0x0", "0x1"])
        )
        .await,
        -32602
    );
    assert_eq!(
        error_code(
            addr,
            "engine_getPayloadBodiesByRangeV1",
            json!(["0x1", "0x401"])
        )
        .await,
        i64::from(moat_rpc::engine::TOO_LARGE_REQUEST)
    );
    let many: Vec<B256> = (0..1025u32).map(|_| unknown).collect();
    assert_eq!(
        error_code(addr, "engine_getPayloadBodiesByHashV1", json!([many])).await,
        i64::from(moat_rpc::engine::TOO_LARGE_REQUEST)
    );
    handle.stop();
}

/// engine_getInclusionListV1 (EIP-7805): no parameters, the pool's plain pending txs as
/// 2718 envelopes, never a blob tx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inclusion_list_holds_pending_plain_txs_and_no_blob_tx() {
    let n = node().await;
    let addr = n.handle.local_addr();
    let tx = transfer(&n.rich, 0);
    n.pool
        .submit_local(TxInput::Raw(tx.encoded_2718().into()))
        .await
        .unwrap();
    let blob = blob_tx(&blob_sender(), 0, 1);
    n.pool
        .submit_local(TxInput::Raw(blob.encoded_2718().into()))
        .await
        .unwrap();
    let list = result(addr, "engine_getInclusionListV1", json!([])).await;
    assert_eq!(
        list,
        json!([format!(
            "0x{}",
            alloy_primitives::hex::encode(tx.encoded_2718())
        )])
    );
    assert_eq!(
        error_code(addr, "engine_getInclusionListV1", json!(["0x01"])).await,
        -32602
    );
    let caps = result(addr, "engine_exchangeCapabilities", json!([[]])).await;
    assert!(
        caps.as_array()
            .unwrap()
            .contains(&json!("engine_getInclusionListV1"))
    );
    n.handle.stop();
}
