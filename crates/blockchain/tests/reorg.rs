//! Reorgs on the conformance chain: competing blocks built on one parent, the chain
//! switching branches back and forth with its state following, and an invalid branch
//! that leaves the chain where it was.

use alloy_primitives::{Address, B256, TxKind, U256};
use moat_blockchain::chain::{Chain, ChainError, ExecutionMismatch, ImportOutcome, Mark};
use moat_blockchain::payload::PayloadAttributes;
use moat_common::block::Block;
use moat_common::config::Genesis;
use moat_common::transaction::{Eip1559Tx, Transaction};
use moat_common::{PooledTransaction, SignedTransaction};
use moat_crypto::secp::Signer;
use moat_mempool::{Pool, PoolConfig, TxInput, TxOrigin};
use moat_storage::Store;
use std::sync::Arc;

mod common;

use common::{HeadState, assert_tries_match_flat_state, testdata};

fn key() -> Signer {
    let accounts: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("accounts.json")).unwrap()).unwrap();
    let (_, entry) = accounts.as_object().unwrap().iter().next().unwrap();
    let key: B256 = entry["key"].as_str().unwrap().parse().unwrap();
    Signer::from_bytes(&key).unwrap()
}

fn balance(chain: &Chain, a: Address) -> U256 {
    chain
        .store()
        .account(&a)
        .unwrap()
        .map_or(U256::ZERO, |a| a.balance)
}

fn nonce(chain: &Chain, a: Address) -> u64 {
    chain.store().account(&a).unwrap().map_or(0, |a| a.nonce)
}

/// A block on the current head with `txs`, paying `recipient`.
async fn build(chain: &Chain, txs: &[PooledTransaction], recipient: u8) -> Block {
    let pool = Pool::new(
        PoolConfig::new(chain.config().clone()),
        Arc::new(HeadState(chain.clone())),
    );
    for tx in txs {
        pool.add_transaction(TxInput::Raw(tx.encoded_2718().into()), TxOrigin::Local)
            .await
            .unwrap();
    }
    let head = chain.head_header().unwrap();
    let attrs = PayloadAttributes {
        timestamp: head.timestamp + 12,
        prev_randao: B256::repeat_byte(7),
        suggested_fee_recipient: Address::repeat_byte(recipient),
        withdrawals: Some(Vec::new()),
        parent_beacon_block_root: Some(B256::repeat_byte(9)),
    };
    let built = chain.build_payload(&pool, head.hash(), &attrs).unwrap();
    assert_eq!(built.block.transactions.len(), txs.len());
    built.block
}

fn transfer(chain_id: u64, signer: &Signer, nonce: u64, to: u8, value: u64) -> PooledTransaction {
    let tx = Transaction::Eip1559(Eip1559Tx {
        chain_id,
        nonce,
        max_priority_fee_per_gas: 2,
        max_fee_per_gas: 1_000_000_000,
        gas_limit: 21_000,
        to: TxKind::Call(Address::repeat_byte(to)),
        value: U256::from(value),
        ..Default::default()
    });
    PooledTransaction::new(SignedTransaction::sign(tx, signer), None)
}

#[tokio::test]
async fn the_chain_switches_branches_and_its_state_follows() {
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    let chain = chain_at_30(&genesis);
    let id = genesis.config.chain_id;
    let x = key();
    let n = nonce(&chain, x.address());
    let fork_head = chain.head_header().unwrap();

    // Two children of #30: A1 pays 0x11, B1 is empty with another fee recipient.
    let tx_a = transfer(id, &x, n, 0x11, 5);
    let a1 = build(&chain, std::slice::from_ref(&tx_a), 0xaa).await;
    let b1 = build(&chain, &[], 0xbb).await;
    assert_ne!(a1.hash, b1.hash);
    assert!(matches!(
        chain.import(&a1).unwrap(),
        ImportOutcome::Imported { .. }
    ));
    assert_eq!(balance(&chain, Address::repeat_byte(0x11)), U256::from(5));
    assert!(matches!(
        chain.import(&b1),
        Err(ChainError::NotOnHead { .. })
    ));
    chain.store_side_block(&b1).unwrap();
    assert!(!chain.is_canonical(&b1.hash).unwrap());

    // To B1: A1 is taken back.
    let change = chain.set_head(b1.hash).unwrap();
    assert_eq!(
        change.removed.iter().map(|b| b.hash).collect::<Vec<_>>(),
        vec![a1.hash]
    );
    assert_eq!(
        change.added.iter().map(|b| b.hash).collect::<Vec<_>>(),
        vec![b1.hash]
    );
    assert_eq!(chain.head().unwrap(), (31, b1.hash));
    assert_eq!(balance(&chain, Address::repeat_byte(0x11)), U256::ZERO);
    assert_eq!(nonce(&chain, x.address()), n);
    assert!(chain.store().tx_location(&tx_a.hash()).unwrap().is_none());
    assert!(chain.is_canonical(&b1.hash).unwrap() && !chain.is_canonical(&a1.hash).unwrap());
    assert_tries_match_flat_state(&chain);

    // B2 on B1 spends the same nonce elsewhere.
    let tx_b = transfer(id, &x, n, 0x22, 7);
    let b2 = build(&chain, std::slice::from_ref(&tx_b), 0xbb).await;
    chain.import(&b2).unwrap();
    assert_eq!(balance(&chain, Address::repeat_byte(0x22)), U256::from(7));

    // Back to the shorter A branch (the consensus client decides, not length).
    let change = chain.set_head(a1.hash).unwrap();
    assert_eq!(change.removed.len(), 2);
    assert_eq!(change.added.len(), 1);
    assert_eq!(chain.head().unwrap(), (31, a1.hash));
    assert_eq!(balance(&chain, Address::repeat_byte(0x11)), U256::from(5));
    assert_eq!(balance(&chain, Address::repeat_byte(0x22)), U256::ZERO);
    assert_eq!(chain.store().canonical_hash(32).unwrap(), None);
    assert_tries_match_flat_state(&chain);
    assert_eq!(
        chain
            .store()
            .tx_location(&tx_a.hash())
            .unwrap()
            .unwrap()
            .block_hash,
        a1.hash
    );
    // A canonical ancestor as target changes nothing.
    assert!(chain.set_head(fork_head.hash()).unwrap().added.is_empty());
    assert_eq!(chain.head().unwrap().1, a1.hash);

    // A branch whose block lies about its state root: tried, refused, A1 stays.
    let mut bad = b1.clone();
    bad.header.state_root = B256::repeat_byte(0x66);
    bad.hash = bad.header.hash();
    chain.store_side_block(&bad).unwrap();
    assert!(matches!(
        chain.set_head(bad.hash),
        Err(ChainError::Mismatch {
            error: ExecutionMismatch::StateRoot { .. },
            ..
        })
    ));
    assert_eq!(chain.head().unwrap(), (31, a1.hash));
    assert_eq!(balance(&chain, Address::repeat_byte(0x11)), U256::from(5));
    assert_eq!(nonce(&chain, x.address()), n + 1);
    assert_tries_match_flat_state(&chain);
    // An unknown target is an error, not a panic.
    assert!(matches!(
        chain.set_head(B256::repeat_byte(0x77)),
        Err(ChainError::UnknownBlock(_))
    ));
}

/// The consensus layer's safe and finalized blocks: kept only for canonical blocks, a
/// zero hash leaves a mark as it was, a reorg may take the safe block off the chain but
/// never cut below the finalized one, and the marks survive reopening the store.
#[tokio::test]
async fn safe_and_finalized_follow_the_consensus_layer_and_bound_reorgs() {
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    // Removed when dropped (after the chain, declared later), also on a panic.
    let scratch = tempfile::Builder::new()
        .prefix("moat-marks-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let dir = scratch.path();
    let store = Store::open(dir, None).unwrap();
    let chain = Chain::init(store, &genesis).unwrap();
    let blocks = Block::decode_all(&std::fs::read(testdata("chain.rlp")).unwrap()).unwrap();
    for block in blocks.iter().take(20) {
        chain.import(block).unwrap();
    }
    // Before the consensus layer names any, there are none.
    assert_eq!(chain.mark(Mark::Safe).unwrap(), None);
    assert_eq!(chain.mark(Mark::Finalized).unwrap(), None);
    chain.set_marks(B256::ZERO, B256::ZERO).unwrap();
    assert_eq!(chain.mark(Mark::Finalized).unwrap(), None);

    let hash_of = |n: u64| chain.store().canonical_hash(n).unwrap().unwrap();
    chain.set_marks(hash_of(18), hash_of(10)).unwrap();
    assert_eq!(chain.mark(Mark::Safe).unwrap(), Some((18, hash_of(18))));
    assert_eq!(
        chain.mark(Mark::Finalized).unwrap(),
        Some((10, hash_of(10)))
    );
    // Zero keeps what was named before.
    chain.set_marks(hash_of(19), B256::ZERO).unwrap();
    assert_eq!(chain.mark(Mark::Safe).unwrap(), Some((19, hash_of(19))));
    assert_eq!(
        chain.mark(Mark::Finalized).unwrap(),
        Some((10, hash_of(10)))
    );
    // An unknown or non-canonical block is refused and nothing changes.
    assert!(matches!(
        chain.set_marks(hash_of(19), B256::repeat_byte(0x55)),
        Err(ChainError::NotCanonical {
            what: "finalized",
            ..
        })
    ));
    assert_eq!(
        chain.mark(Mark::Finalized).unwrap(),
        Some((10, hash_of(10)))
    );

    // A side branch from #17: the reorg takes the safe block #19 off the chain.
    let x = key();
    let id = genesis.config.chain_id;
    let removed = chain.rewind_to(17).unwrap();
    let side = build(
        &chain,
        &[transfer(id, &x, nonce(&chain, x.address()), 0x33, 1)],
        0xcc,
    )
    .await;
    for block in &removed {
        chain.import(block).unwrap();
    }
    chain.store_side_block(&side).unwrap();
    chain.set_head(side.hash).unwrap();
    assert_eq!(chain.head().unwrap(), (18, side.hash));
    assert_eq!(
        chain.mark(Mark::Safe).unwrap(),
        None,
        "a reorged-out safe block"
    );
    assert_eq!(
        chain.mark(Mark::Finalized).unwrap(),
        Some((10, hash_of(10)))
    );

    // A branch leaving the chain below the finalized block is refused.
    chain.set_marks(side.hash, hash_of(18)).unwrap();
    let back = removed.last().unwrap().hash;
    assert!(matches!(
        chain.set_head(back),
        Err(ChainError::BelowFinalized {
            fork_point: 17,
            finalized: 18
        })
    ));
    assert_eq!(chain.head().unwrap(), (18, side.hash));

    // The marks are in the store: a reopened chain has them.
    drop(chain);
    let chain = Chain::init(Store::open(dir, None).unwrap(), &genesis).unwrap();
    assert_eq!(chain.mark(Mark::Safe).unwrap(), Some((18, side.hash)));
    assert_eq!(chain.mark(Mark::Finalized).unwrap(), Some((18, side.hash)));
    drop(chain);
}

/// The whole conformance chain imported through the stored tries (deployments, storage
/// writes and clears, system contracts): every block's root checked on import, and the
/// stored tries at the head equal to tries rebuilt from the flat state. Then the last 100
/// blocks are taken back and imported again, and the tries still match.
#[test]
fn the_stored_tries_follow_the_ethtest_chain_and_its_unwinding() {
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    let chain = Chain::init(Store::in_memory(), &genesis).unwrap();
    let blocks = Block::decode_all(&std::fs::read(testdata("chain.rlp")).unwrap()).unwrap();
    for block in &blocks {
        chain.import(block).unwrap();
    }
    assert_eq!(chain.head().unwrap().0, 600);
    assert_tries_match_flat_state(&chain);
    // A side block on #500 (another extra data) made head: #501..#600 are unwound
    // through their undo records; then back to #600, the old branch executed again.
    let mut side = blocks[500].clone();
    side.header.extra_data = alloy_primitives::Bytes::from_static(b"side");
    side.hash = side.header.hash();
    chain.store_side_block(&side).unwrap();
    let change = chain.set_head(side.hash).unwrap();
    assert_eq!(change.removed.len(), 100);
    assert_eq!(chain.head().unwrap(), (501, side.hash));
    assert_tries_match_flat_state(&chain);
    let change = chain.set_head(blocks[599].hash).unwrap();
    assert_eq!(change.added.len(), 100);
    assert_eq!(chain.head().unwrap(), (600, blocks[599].hash));
    assert_tries_match_flat_state(&chain);
}

/// A chain on the conformance chain's first 30 blocks.
fn chain_at_30(genesis: &Genesis) -> Chain {
    let chain = Chain::init(Store::in_memory(), genesis).unwrap();
    let bytes = std::fs::read(testdata("chain.rlp")).unwrap();
    for block in Block::decode_all(&bytes).unwrap().iter().take(30) {
        chain.import(block).unwrap();
    }
    chain
}

/// A block of `PARALLEL_MIN_SENDERS` + 16 transfers of 1 wei to 0x33..33 from `key()`,
/// built on #30 by another chain; a chain at #30 that never saw its txs; the sender's
/// nonce before the block, and the count.
async fn a_big_block_and_a_chain_that_never_saw_its_txs() -> (Block, Chain, u64, u64) {
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    let (builder, importer) = (chain_at_30(&genesis), chain_at_30(&genesis));
    let x = key();
    let n = nonce(&builder, x.address());
    let count = moat_blockchain::chain::PARALLEL_MIN_SENDERS as u64 + 16;
    let txs: Vec<_> = (0..count)
        .map(|i| transfer(genesis.config.chain_id, &x, n + i, 0x33, 1))
        .collect();
    (build(&builder, &txs, 0xaa).await, importer, n, count)
}

/// A block of more txs than `PARALLEL_MIN_SENDERS` has its senders recovered on every
/// core: a chain that never saw its txs imports it with every sender right.
#[tokio::test]
async fn a_block_of_many_txs_recovers_its_senders_on_every_core() {
    let (block, importer, n, count) = a_big_block_and_a_chain_that_never_saw_its_txs().await;
    let x = key();
    assert!(matches!(
        importer.import(&block).unwrap(),
        ImportOutcome::Imported { .. }
    ));
    assert_eq!(nonce(&importer, x.address()), n + count);
    assert_eq!(
        balance(&importer, Address::repeat_byte(0x33)),
        U256::from(count)
    );
    assert_eq!(importer.head().unwrap(), (31, block.hash));
}

/// Senders are recovered while the block runs: a signature that does not recover, deep in
/// a block of many txs, makes the block invalid at that tx, and the chain stays where it
/// was (the same block with the tx intact imports afterwards).
#[tokio::test]
async fn a_bad_signature_deep_in_a_big_block_makes_it_invalid_at_that_tx() {
    let (good, importer, n, count) = a_big_block_and_a_chain_that_never_saw_its_txs().await;
    let x = key();
    let at_30 = importer.head().unwrap();
    assert_eq!(at_30.0, 30);
    let bad_index = count as usize - 10;
    let mut bad = good.clone();
    let tx = &bad.transactions[bad_index];
    let mut signature = *tx.signature();
    signature.r = U256::ZERO;
    bad.transactions[bad_index] = SignedTransaction::new(tx.tx().clone(), signature);
    bad.header.transactions_root = bad.transactions_root();
    bad.hash = bad.header.hash();

    match importer.import(&bad) {
        Err(ChainError::Invalid { reason, hash, .. }) => {
            assert_eq!(hash, bad.hash);
            assert!(
                reason.contains(&format!("transaction {bad_index} "))
                    && reason.contains("invalid signature"),
                "{reason}"
            );
        }
        other => panic!("expected an invalid block, got {other:?}"),
    }
    assert_eq!(importer.head().unwrap(), at_30);
    assert_eq!(nonce(&importer, x.address()), n);
    assert!(matches!(
        importer.import(&good).unwrap(),
        ImportOutcome::Imported { .. }
    ));
    assert_eq!(nonce(&importer, x.address()), n + count);
}

/// The pool's upkeep after an import is handed the block and the accounts it wrote from
/// memory: exactly what the store holds for it (the body, the undo record's accounts),
/// and once another block is imported, the store's copy again.
#[tokio::test]
async fn the_pool_s_upkeep_gets_the_imported_block_as_stored() {
    use moat_mempool::maintain::CanonChain;
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    let chain = chain_at_30(&genesis);
    let x = key();
    let n = nonce(&chain, x.address());
    let txs: Vec<_> = (0..3)
        .map(|i| transfer(genesis.config.chain_id, &x, n + i, 0x50 + i as u8, 7))
        .collect();
    let block = build(&chain, &txs, 0xaa).await;
    chain.import(&block).unwrap();
    let stored_changes = || {
        moat_blockchain::undo::Undo::decode_addresses(
            &chain.store().undo(&block.hash).unwrap().unwrap(),
        )
        .unwrap()
    };
    let just = chain
        .just_imported(&block.hash)
        .expect("the block imported last");
    assert_eq!(just.block, chain.block(&block.hash).unwrap().unwrap());
    assert_eq!(just.changed, stored_changes());
    assert!(just.changed.contains(&x.address()));
    assert_eq!(CanonChain::block(&chain, &block.hash), Some(block.clone()));
    assert_eq!(
        CanonChain::changed_accounts(&chain, &block),
        Some(stored_changes())
    );

    let next = build(&chain, &[], 0xbb).await;
    chain.import(&next).unwrap();
    assert!(chain.just_imported(&block.hash).is_none());
    assert_eq!(CanonChain::block(&chain, &block.hash), Some(block.clone()));
    assert_eq!(
        CanonChain::changed_accounts(&chain, &block),
        Some(stored_changes())
    );
}

/// The pool's catch-up: after an import it finds the pool's head canonical by its number
/// and takes the new block's txs as mined; after a reorg it walks back over the undone
/// block and gives its txs back.
#[tokio::test]
async fn the_pool_s_catch_up_follows_an_import_and_then_a_reorg() {
    use moat_mempool::maintain::{CanonHead, catch_up};
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    let chain = chain_at_30(&genesis);
    let pool = Pool::new(
        PoolConfig::new(chain.config().clone()),
        Arc::new(HeadState(chain.clone())),
    );
    let x = key();
    let tx_a = transfer(
        genesis.config.chain_id,
        &x,
        nonce(&chain, x.address()),
        0x11,
        5,
    );
    let parent = chain.head_header().unwrap().hash();
    let a1 = build(&chain, std::slice::from_ref(&tx_a), 0xaa).await;
    let b1 = build(&chain, &[], 0xbb).await;
    chain.import(&a1).unwrap();

    let head = |seq, block: &Block| CanonHead {
        seq,
        number: block.header.number,
        hash: block.hash,
    };
    let update = catch_up(&chain, &pool, parent, head(1, &a1)).unwrap();
    assert_eq!(update.mined, vec![tx_a.hash()]);
    assert!(update.reorged.is_empty());

    chain.store_side_block(&b1).unwrap();
    chain.set_head(b1.hash).unwrap();
    let update = catch_up(&chain, &pool, a1.hash, head(2, &b1)).unwrap();
    assert!(update.mined.is_empty());
    assert_eq!(
        update.reorged.iter().map(|t| t.hash()).collect::<Vec<_>>(),
        vec![tx_a.hash()]
    );
}
