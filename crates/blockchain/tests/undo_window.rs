//! The undo records kept: the last 128 blocks, and every block above the finalized one
//! under a ceiling; reorgs as deep as they reach, never below the finalized block; the
//! records finality leaves behind pruned a bounded number a commit; all of it through a
//! restart. A small ceiling and prune batch stand in for geth's 90,000 blocks.

use alloy_primitives::{Address, B256};
use moat_blockchain::chain::{Chain, ChainError, ExecutionMismatch};
use moat_blockchain::payload::PayloadAttributes;
use moat_blockchain::undo::{UNDO_DEPTH, UndoWindow};
use moat_common::block::Block;
use moat_common::config::Genesis;
use moat_mempool::{Pool, PoolConfig};
use moat_storage::Store;
use std::sync::Arc;

mod common;

use common::{HeadState, testdata};

const WINDOW: UndoWindow = UndoWindow {
    recent: UNDO_DEPTH,
    ceiling: 170,
    prune_batch: 16,
};

/// The canonical blocks (from 1 to the head) whose undo record is in the store, as the
/// first and last of one run; `None` when there is none. Panics on a gap.
fn records(chain: &Chain) -> Option<(u64, u64)> {
    let (head, _) = chain.head().unwrap();
    let kept: Vec<u64> = (1..=head)
        .filter(|&n| {
            let hash = chain.store().canonical_hash(n).unwrap().unwrap();
            chain.store().undo(&hash).unwrap().is_some()
        })
        .collect();
    let (first, last) = (*kept.first()?, *kept.last()?);
    assert_eq!(kept.len() as u64, last - first + 1, "one run: {kept:?}");
    Some((first, last))
}

/// A block on canonical block `parent` (block `parent + 1` with other extra data).
fn side_on(blocks: &[Block], parent: usize) -> Block {
    let mut side = blocks[parent].clone();
    side.header.extra_data = alloy_primitives::Bytes::from_static(b"side");
    side.hash = side.header.hash();
    side
}

#[test]
fn finality_bounds_the_undo_records_reorgs_and_state() {
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    let scratch = tempfile::Builder::new()
        .prefix("moat-undo-window-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let dir = scratch.path();
    let open = || {
        Chain::init(Store::open(dir, None).unwrap(), &genesis)
            .unwrap()
            .with_undo_window(WINDOW)
    };
    let chain = open();
    let blocks = Block::decode_all(&std::fs::read(testdata("chain.rlp")).unwrap()).unwrap();
    let hash_of = |chain: &Chain, n: u64| chain.store().canonical_hash(n).unwrap().unwrap();

    // Finality stalls at #5 while the chain grows to #180: the records reach back to it
    // but no further than the ceiling (170 behind the head), beyond the recent 128.
    for block in &blocks[..10] {
        chain.import(block).unwrap();
    }
    chain
        .set_marks(hash_of(&chain, 10), hash_of(&chain, 5))
        .unwrap();
    for block in &blocks[10..180] {
        chain.import(block).unwrap();
    }
    assert_eq!(records(&chain), Some((11, 180)));
    assert_eq!(chain.undo_floor().unwrap(), 10);
    assert_eq!(chain.oldest_undoable().unwrap(), 10);
    assert!(chain.state_at(10).is_ok());
    assert!(matches!(
        chain.state_at(9),
        Err(ChainError::HistoryUnavailable {
            number: 9,
            head: 180,
            oldest: 10
        })
    ));
    // Blob sidecars are kept for the last 128 blocks only.
    assert_eq!(chain.sidecar_floor().unwrap(), 52);

    // A restart keeps them.
    drop(chain);
    let chain = open();
    assert_eq!(records(&chain), Some((11, 180)));
    assert_eq!(chain.undo_floor().unwrap(), 10);

    // A fork point the records no longer reach is refused, naming the limit.
    let too_deep = side_on(&blocks, 5);
    chain.store_side_block(&too_deep).unwrap();
    assert!(matches!(
        chain.set_head(too_deep.hash),
        Err(ChainError::ReorgTooDeep {
            fork_point: 5,
            oldest: 10
        })
    ));
    assert_eq!(chain.head().unwrap(), (180, blocks[179].hash));

    // A reorg of 170 blocks (deeper than 128) to a branch on #10, and back.
    let side = side_on(&blocks, 10);
    chain.store_side_block(&side).unwrap();
    let change = chain.set_head(side.hash).unwrap();
    assert_eq!(change.removed.len(), 170);
    assert_eq!(chain.head().unwrap(), (11, side.hash));
    let change = chain.set_head(blocks[179].hash).unwrap();
    assert_eq!(change.added.len(), 170);
    assert_eq!(chain.head().unwrap(), (180, blocks[179].hash));
    assert_eq!(records(&chain), Some((11, 180)));

    // Finality moves to #20: the records at and below it go; a branch leaving the chain
    // below it is refused.
    chain
        .set_marks(hash_of(&chain, 180), hash_of(&chain, 20))
        .unwrap();
    assert_eq!(records(&chain), Some((21, 180)));
    assert!(matches!(
        chain.set_head(side.hash),
        Err(ChainError::BelowFinalized {
            fork_point: 10,
            finalized: 20
        })
    ));
    assert_eq!(chain.oldest_undoable().unwrap(), 20);

    // Finality jumps to #170: the records below the recent 128 (#21..#52) go, 16 a
    // commit, the imports after catching up.
    chain
        .set_marks(hash_of(&chain, 180), hash_of(&chain, 170))
        .unwrap();
    assert_eq!(records(&chain), Some((37, 180)));
    assert_eq!(
        chain.undo_floor().unwrap(),
        52,
        "the rule's floor, not the lag"
    );
    assert_eq!(chain.oldest_undoable().unwrap(), 170);
    assert_eq!(chain.sidecar_floor().unwrap(), 170);
    chain.import(&blocks[180]).unwrap();
    assert_eq!(records(&chain), Some((53, 181)));
    chain.import(&blocks[181]).unwrap();
    assert_eq!(records(&chain), Some((55, 182)));
    assert!(chain.state_at(54).is_ok());
    assert!(chain.state_at(53).is_err());
    drop(chain);

    // A restart with a smaller ceiling prunes down to it, a batch a commit.
    let chain = Chain::init(Store::open(dir, None).unwrap(), &genesis)
        .unwrap()
        .with_undo_window(UndoWindow {
            ceiling: 100,
            ..WINDOW
        });
    assert_eq!(chain.undo_floor().unwrap(), 82);
    chain.import(&blocks[182]).unwrap();
    assert_eq!(records(&chain), Some((71, 183)));
    chain.import(&blocks[183]).unwrap();
    assert_eq!(records(&chain), Some((85, 184)));
}

/// With no finalized block named, the recent window alone: the record 128 back goes at
/// each import, one a commit.
#[test]
fn without_finality_the_last_128_blocks_are_kept() {
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    let chain = Chain::init(Store::in_memory(), &genesis).unwrap();
    let blocks = Block::decode_all(&std::fs::read(testdata("chain.rlp")).unwrap()).unwrap();
    for block in &blocks[..140] {
        chain.import(block).unwrap();
    }
    assert_eq!(records(&chain), Some((13, 140)));
    assert_eq!(chain.undo_floor().unwrap(), 12);
    assert_eq!(chain.oldest_undoable().unwrap(), 12);
    let deep = side_on(&blocks, 11);
    chain.store_side_block(&deep).unwrap();
    assert!(matches!(
        chain.set_head(deep.hash),
        Err(ChainError::ReorgTooDeep {
            fork_point: 11,
            oldest: 12
        })
    ));
}

/// An empty block built on `chain`'s head and imported.
fn build_on_head(chain: &Chain) -> Block {
    let pool = Pool::new(
        PoolConfig::new(chain.config().clone()),
        Arc::new(HeadState(chain.clone())),
    );
    let head = chain.head_header().unwrap();
    let attrs = PayloadAttributes {
        timestamp: head.timestamp + 12,
        prev_randao: B256::repeat_byte(7),
        suggested_fee_recipient: Address::repeat_byte(0xbb),
        withdrawals: Some(Vec::new()),
        parent_beacon_block_root: Some(B256::repeat_byte(9)),
    };
    chain
        .build_payload(&pool, head.hash(), &attrs)
        .unwrap()
        .block
}

/// A reorg to a branch longer than the recent window (no finality) whose last block is
/// invalid: the branch's records are not pruned while it is imported, so the old branch
/// is put back.
#[tokio::test]
async fn a_failed_reorg_to_a_long_branch_puts_the_old_one_back() {
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    let blocks = Block::decode_all(&std::fs::read(testdata("chain.rlp")).unwrap()).unwrap();
    let window = UndoWindow {
        recent: 4,
        ceiling: 100,
        prune_batch: 16,
    };
    // The new branch, built on #10 on another chain: 8 blocks and an invalid ninth.
    let other = Chain::init(Store::in_memory(), &genesis).unwrap();
    for block in &blocks[..10] {
        other.import(block).unwrap();
    }
    let mut branch = Vec::new();
    for _ in 0..8 {
        let block = build_on_head(&other);
        other.import(&block).unwrap();
        branch.push(block);
    }
    let mut bad = build_on_head(&other);
    bad.header.state_root = B256::repeat_byte(0x66);
    bad.hash = bad.header.hash();

    let chain = Chain::init(Store::in_memory(), &genesis)
        .unwrap()
        .with_undo_window(window);
    for block in &blocks[..12] {
        chain.import(block).unwrap();
    }
    for block in branch.iter().chain([&bad]) {
        chain.store_side_block(block).unwrap();
    }
    assert!(matches!(
        chain.set_head(bad.hash),
        Err(ChainError::Mismatch {
            error: ExecutionMismatch::StateRoot { .. },
            ..
        })
    ));
    assert_eq!(chain.head().unwrap(), (12, blocks[11].hash));
    // (The records at and below the fork point went while the branch was tried.)
    assert_eq!(records(&chain), Some((11, 12)));
    // The branch up to its last valid block is fine: the window moves on.
    chain.set_head(branch[7].hash).unwrap();
    assert_eq!(chain.head().unwrap(), (18, branch[7].hash));
    chain.import(&build_on_head(&chain)).unwrap();
    assert_eq!(records(&chain), Some((16, 19)));
}
