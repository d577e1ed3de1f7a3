//! A damaged datadir under block import: a flat value or a trie node that rotted is
//! reported as damage (an error, latched in `Store::damage`), never turned into a
//! verdict on a valid block nor into a wrong state root.

mod common;

use alloy_primitives::{B256, U256};
use moat_blockchain::chain::{Chain, ChainError};
use moat_common::block::Block;
use moat_common::config::Genesis;
use moat_storage::{Store, StoreError, WriteBatch};

use common::testdata;

/// The conformance chain's first `n` blocks imported into a datadir, the datadir closed,
/// and the block after them.
fn imported(n: usize) -> (tempfile::TempDir, Block) {
    let dir = tempfile::tempdir().unwrap();
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    let chain = Chain::init(Store::open(dir.path(), None).unwrap(), &genesis).unwrap();
    let blocks = Block::decode_all(&std::fs::read(testdata("chain.rlp")).unwrap()).unwrap();
    for block in &blocks[..n] {
        chain.import(block).unwrap();
    }
    (dir, blocks[n].clone())
}

/// The datadir opened afresh: its caches hold nothing written before.
fn reopen(dir: &tempfile::TempDir) -> Chain {
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    Chain::init(Store::open(dir.path(), None).unwrap(), &genesis).unwrap()
}

fn is_damage(e: &ChainError) -> bool {
    matches!(e, ChainError::Store(StoreError::Corrupt(_)))
}

#[test]
fn a_rotted_flat_balance_is_damage_not_an_invalid_block() {
    // Block 11 of the conformance chain carries transactions; its first sender's flat
    // balance is changed under the trie, as a flipped bit on disk would.
    let (dir, next) = imported(10);
    assert!(!next.transactions.is_empty());
    let sender = next.transactions[0].recover_sender().unwrap();
    {
        let chain = reopen(&dir);
        let mut account = chain.store().account(&sender).unwrap().unwrap();
        account.balance ^= U256::from(1) << 100;
        let mut batch = WriteBatch::new();
        batch.set_account(sender, Some(account));
        chain.store().commit(batch).unwrap();
    }
    let chain = reopen(&dir);
    let err = chain.import(&next).unwrap_err();
    assert!(is_damage(&err), "{err}");
    assert!(err.to_string().contains("flat state differs"), "{err}");
    assert!(chain.store().damage().is_some());
}

#[test]
fn a_rotted_trie_node_is_damage_and_the_intact_copy_imports() {
    let (dir, next) = imported(10);
    let copy = tempfile::tempdir().unwrap();
    std::fs::copy(
        dir.path().join(moat_storage::DB_FILE),
        copy.path().join(moat_storage::DB_FILE),
    )
    .unwrap();
    {
        let chain = reopen(&dir);
        let store = chain.store();
        // Every account-trie node one level below the root, a byte changed in each.
        let mut batch = WriteBatch::new();
        for (path, mut rlp) in store.trie_nodes_of(&B256::ZERO).unwrap() {
            if path.len() == 1 && rlp.len() > 40 {
                let at = rlp.len() - 2;
                rlp[at] ^= 0x01;
                batch.set_trie_node(B256::ZERO, path, Some(rlp));
            }
        }
        store.commit(batch).unwrap();
    }
    let chain = reopen(&dir);
    let err = chain.import(&next).unwrap_err();
    assert!(is_damage(&err), "{err}");
    assert!(chain.store().damage().is_some());

    let intact = reopen(&copy);
    intact.import(&next).unwrap();
    assert!(intact.store().damage().is_none());
}
