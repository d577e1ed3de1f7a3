//! Payload building on the conformance chain: a pooled transaction goes into a sealed
//! block that the chain then imports, and the pool lets go of it.

use alloy_primitives::{Address, B256, TxKind, U256};
use moat_blockchain::chain::{Chain, ImportOutcome};
use moat_blockchain::payload::{PayloadAttributes, PayloadService};
use moat_common::block::Block;
use moat_common::config::Genesis;
use moat_common::transaction::{Eip1559Tx, SidecarVersion, Transaction};
use moat_common::{PooledTransaction, SignedTransaction};
use moat_crypto::secp::Signer;
use moat_mempool::{HeadUpdate, Pool, PoolConfig, StateView, TxInput, TxOrigin};
use moat_storage::Store;
use std::sync::Arc;

mod common;

use common::{HeadState, testdata};

#[tokio::test]
async fn a_pooled_tx_is_built_into_a_block_the_chain_accepts() {
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    let chain = Chain::init(Store::in_memory(), &genesis).unwrap();
    let bytes = std::fs::read(testdata("chain.rlp")).unwrap();
    for block in Block::decode_all(&bytes).unwrap().iter().take(30) {
        assert!(matches!(
            chain.import(block).unwrap(),
            ImportOutcome::Imported { .. }
        ));
    }
    let pool = Pool::new(
        PoolConfig::new(genesis.config.clone()),
        Arc::new(HeadState(chain.clone())),
    );

    // A key from the suite's accounts.
    let accounts: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("accounts.json")).unwrap()).unwrap();
    let (_, entry) = accounts.as_object().unwrap().iter().next().unwrap();
    let key: B256 = entry["key"].as_str().unwrap().parse().unwrap();
    let signer = Signer::from_bytes(&key).unwrap();
    let nonce = chain
        .store()
        .account(&signer.address())
        .unwrap()
        .map_or(0, |a| a.nonce);
    let tx = Transaction::Eip1559(Eip1559Tx {
        chain_id: genesis.config.chain_id,
        nonce,
        max_priority_fee_per_gas: 2,
        max_fee_per_gas: 1_000_000_000,
        gas_limit: 21_000,
        to: TxKind::Call(Address::repeat_byte(0x11)),
        value: U256::from(5),
        ..Default::default()
    });
    let tx = PooledTransaction::new(SignedTransaction::sign(tx, &signer), None);
    pool.add_transaction(TxInput::Raw(tx.encoded_2718().into()), TxOrigin::Local)
        .await
        .unwrap();

    let head = chain.head_header().unwrap();
    let attrs = PayloadAttributes {
        timestamp: head.timestamp + 12,
        prev_randao: B256::repeat_byte(7),
        suggested_fee_recipient: Address::repeat_byte(0xfe),
        withdrawals: Some(Vec::new()),
        parent_beacon_block_root: Some(B256::repeat_byte(9)),
    };
    let payloads = PayloadService::new(chain.clone(), pool.clone());
    let id = payloads.start(head.hash(), attrs).unwrap();
    let built = payloads.get(id).await.unwrap();
    assert_eq!(built.block.transactions.len(), 1);
    assert_eq!(built.block.transactions[0].hash(), tx.hash());
    assert_eq!(built.block_value, U256::from(2 * 21_000u64));

    assert!(matches!(
        chain.import(&built.block).unwrap(),
        ImportOutcome::Imported { .. }
    ));
    assert_eq!(chain.head().unwrap().1, built.block.hash);
    let balance = chain
        .store()
        .account(&Address::repeat_byte(0x11))
        .unwrap()
        .unwrap()
        .balance;
    assert_eq!(balance, U256::from(5));

    let out = pool
        .on_head_change(HeadUpdate {
            head: HeadState(chain.clone()).head(),
            mined: vec![tx.hash()],
            ..Default::default()
        })
        .await;
    assert_eq!(out.removed, vec![tx.hash()]);
    assert!(pool.is_empty());
}

/// Across the Osaka boundary: a blob tx pooled with a version-0 sidecar before the fork is
/// left out of an Osaka payload (its blobs bundle must carry cell proofs), and built into a
/// Prague one as before.
#[tokio::test]
async fn a_version_0_sidecar_stays_out_of_an_osaka_payload() {
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("genesis.json")).unwrap()).unwrap();
    // The suite's chain, with Osaka scheduled after its block 30.
    let bytes = std::fs::read(testdata("chain.rlp")).unwrap();
    let blocks = Block::decode_all(&bytes).unwrap();
    let osaka = blocks[29].header.timestamp + 100;
    json["config"]["osakaTime"] = serde_json::json!(osaka);
    let genesis = Genesis::from_json(&json.to_string()).unwrap();
    let chain = Chain::init(Store::in_memory(), &genesis).unwrap();
    for block in blocks.iter().take(30) {
        chain.import(block).unwrap();
    }
    let pool = Pool::new(
        PoolConfig::new(genesis.config.clone()),
        Arc::new(HeadState(chain.clone())),
    );
    let accounts: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("accounts.json")).unwrap()).unwrap();
    let (_, entry) = accounts.as_object().unwrap().iter().nth(1).unwrap();
    let signer = Signer::from_bytes(&entry["key"].as_str().unwrap().parse().unwrap()).unwrap();
    let nonce = chain
        .store()
        .account(&signer.address())
        .unwrap()
        .map_or(0, |a| a.nonce);
    let tx = moat_common::testing::blob_tx_on_chain(
        SidecarVersion::V0,
        1,
        nonce,
        &signer,
        genesis.config.chain_id,
        1_000_000_000_000,
        2,
    );
    pool.add_transaction(TxInput::Raw(tx.encoded_2718().into()), TxOrigin::Local)
        .await
        .expect("a version-0 sidecar before Osaka");

    let head = chain.head_header().unwrap();
    let attrs = |timestamp| PayloadAttributes {
        timestamp,
        prev_randao: B256::repeat_byte(7),
        suggested_fee_recipient: Address::repeat_byte(0xfe),
        withdrawals: Some(Vec::new()),
        parent_beacon_block_root: Some(B256::repeat_byte(9)),
    };
    let payloads = PayloadService::new(chain.clone(), pool.clone());
    let id = payloads.start(head.hash(), attrs(osaka)).unwrap();
    let at_osaka = payloads.get(id).await.unwrap();
    assert!(
        at_osaka.block.transactions.is_empty(),
        "no version-0 sidecar at Osaka"
    );
    assert!(at_osaka.sidecars.is_empty());
    let id = payloads.start(head.hash(), attrs(osaka - 1)).unwrap();
    let before = payloads.get(id).await.unwrap();
    assert_eq!(before.block.transactions.len(), 1, "built before the fork");
    assert_eq!(before.sidecars.len(), 1);
}
