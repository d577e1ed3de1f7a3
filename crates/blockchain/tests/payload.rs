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

/// The conformance chain's first 30 blocks imported on `genesis`, and a pool on its head.
fn chain_and_pool(genesis: &Genesis) -> (Chain, Pool) {
    let chain = Chain::init(Store::in_memory(), genesis).unwrap();
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
    (chain, pool)
}

/// The suite's keys (accounts.json), in its order.
fn suite_signers() -> Vec<Signer> {
    let accounts: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("accounts.json")).unwrap()).unwrap();
    accounts
        .as_object()
        .unwrap()
        .values()
        .map(|e| Signer::from_bytes(&e["key"].as_str().unwrap().parse::<B256>().unwrap()).unwrap())
        .collect()
}

/// Payload attributes of a block at `timestamp`.
fn attrs_at(timestamp: u64) -> PayloadAttributes {
    PayloadAttributes {
        timestamp,
        prev_randao: B256::repeat_byte(7),
        suggested_fee_recipient: Address::repeat_byte(0xfe),
        withdrawals: Some(Vec::new()),
        parent_beacon_block_root: Some(B256::repeat_byte(9)),
    }
}

#[tokio::test]
async fn a_pooled_tx_is_built_into_a_block_the_chain_accepts() {
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    let (chain, pool) = chain_and_pool(&genesis);

    // A key from the suite's accounts.
    let signer = suite_signers().swap_remove(0);
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
    let attrs = attrs_at(head.timestamp + 12);
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
    let (chain, pool) = chain_and_pool(&genesis);
    let signer = suite_signers().swap_remove(1);
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
    let attrs = attrs_at;
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

/// EIP-7805's payload building: a block built to satisfy an inclusion list carries the
/// list's txs it can take — a tx the pool never had, and its sender's next one listed
/// before it — after the pool's, leaves out one whose nonce is used, and the chain
/// imports it; the list is then satisfied on the block's post-state.
#[tokio::test]
async fn a_payload_built_with_an_inclusion_list_carries_what_it_can_append() {
    use moat_blockchain::payload::MinerConfig;
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    let (chain, pool) = chain_and_pool(&genesis);
    let signers = suite_signers();
    let nonce_of = |s: &Signer| {
        chain
            .store()
            .account(&s.address())
            .unwrap()
            .map_or(0, |a| a.nonce)
    };
    let transfer = |s: &Signer, nonce: u64| {
        SignedTransaction::sign(
            Transaction::Eip1559(Eip1559Tx {
                chain_id: genesis.config.chain_id,
                nonce,
                max_priority_fee_per_gas: 2,
                max_fee_per_gas: 1_000_000_000,
                gas_limit: 21_000,
                to: TxKind::Call(Address::repeat_byte(0x12)),
                value: U256::from(7),
                ..Default::default()
            }),
            s,
        )
    };
    let (a, b) = (&signers[0], &signers[1]);
    // The pool has a's next tx; the list names b's next two (the later first) and an old
    // nonce of a's.
    let pooled = transfer(a, nonce_of(a));
    pool.add_transaction(TxInput::Raw(pooled.encoded_2718().into()), TxOrigin::Local)
        .await
        .unwrap();
    let (b0, b1) = (transfer(b, nonce_of(b)), transfer(b, nonce_of(b) + 1));
    let stale = transfer(a, nonce_of(a).saturating_sub(1));
    let list: Vec<alloy_primitives::Bytes> = [&b1, &b0, &stale]
        .iter()
        .map(|t| t.encoded_2718().into())
        .collect();
    let head = chain.head_header().unwrap();
    let attrs = attrs_at(head.timestamp + 12);
    let built = chain
        .build_payload_satisfying(&pool, head.hash(), &attrs, &MinerConfig::default(), &list)
        .unwrap();
    let hashes: Vec<B256> = built.block.transactions.iter().map(|t| t.hash()).collect();
    assert_eq!(hashes, vec![pooled.hash(), b0.hash(), b1.hash()]);
    // Without the list, the pool's tx alone.
    let plain = chain
        .build_payload_with(&pool, head.hash(), &attrs, &MinerConfig::default())
        .unwrap();
    assert_eq!(plain.block.transactions.len(), 1);
    assert!(matches!(
        chain.import(&built.block).unwrap(),
        ImportOutcome::Imported { .. }
    ));
    // newPayload's verdict on the imported block: satisfied; a list naming a's next
    // nonce, which the block could have appended, is not.
    assert_eq!(
        chain
            .inclusion_list_unsatisfied(&built.block, &list)
            .unwrap(),
        None
    );
    let next = transfer(a, nonce_of(a));
    let other: Vec<alloy_primitives::Bytes> = vec![next.encoded_2718().into()];
    assert_eq!(
        chain
            .inclusion_list_unsatisfied(&built.block, &other)
            .unwrap(),
        Some(next.hash())
    );
    // The plain block (without b's txs), had it been the one imported, would not have
    // satisfied the first list: checked on a second chain.
    let (chain2, _) = chain_and_pool(&genesis);
    chain2.import(&plain.block).unwrap();
    assert_eq!(
        chain2
            .inclusion_list_unsatisfied(&plain.block, &list)
            .unwrap(),
        Some(b0.hash())
    );
}
