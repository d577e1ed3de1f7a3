//! The state of recent blocks, read through the undo records, is exactly what the store
//! held when each of those blocks was the head.

use alloy_primitives::{Address, B256, U256};
use moat_blockchain::chain::{Chain, ChainError};
use moat_common::block::Block;
use moat_common::config::Genesis;
use moat_storage::{Account, Store};
use std::collections::BTreeMap;

mod common;

use common::testdata;

type Snapshot = (
    BTreeMap<Address, Account>,
    BTreeMap<Address, Vec<(B256, U256)>>,
);

fn snapshot(store: &Store) -> Snapshot {
    let accounts: BTreeMap<Address, Account> = store.accounts().unwrap().into_iter().collect();
    let storage = accounts
        .keys()
        .map(|a| (*a, store.storage_slots(a).unwrap()))
        .filter(|(_, s)| !s.is_empty())
        .collect();
    (accounts, storage)
}

#[test]
fn recent_states_match_what_the_head_held_back_then() {
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    let chain = Chain::init(Store::in_memory(), &genesis).unwrap();
    let blocks = Block::decode_all(&std::fs::read(testdata("chain.rlp")).unwrap()).unwrap();
    let mut snapshots = BTreeMap::new();
    snapshots.insert(0, snapshot(chain.store()));
    for block in blocks.iter().take(40) {
        chain.import(block).unwrap();
        if block.header.number >= 5 {
            snapshots.insert(block.header.number, snapshot(chain.store()));
        }
    }
    let (head, _) = chain.head().unwrap();
    let every_address: Vec<Address> = snapshots[&head].0.keys().copied().collect();
    for (number, (accounts, storage)) in &snapshots {
        let state = chain.state_at(*number).unwrap();
        for address in &every_address {
            assert_eq!(
                state.account(address).unwrap(),
                accounts.get(address).copied(),
                "account {address} at block {number}"
            );
        }
        // Every slot any of these blocks held, at every block.
        for (address, slots) in snapshots.values().flat_map(|(_, s)| s.iter()) {
            for (slot, _) in slots {
                let expected = storage
                    .get(address)
                    .and_then(|l| l.iter().find(|(k, _)| k == slot))
                    .map_or(U256::ZERO, |(_, v)| *v);
                assert_eq!(
                    state.storage(address, slot).unwrap(),
                    expected,
                    "slot {slot} of {address} at block {number}"
                );
            }
        }
    }
}

#[test]
fn state_older_than_the_undo_window_is_refused() {
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    let chain = Chain::init(Store::in_memory(), &genesis).unwrap();
    let blocks = Block::decode_all(&std::fs::read(testdata("chain.rlp")).unwrap()).unwrap();
    for block in blocks.iter().take(131) {
        chain.import(block).unwrap();
    }
    // No finalized block named: the last 128 blocks alone.
    assert_eq!(chain.undo_floor().unwrap(), 3);
    assert!(chain.state_at(3).is_ok(), "128 back is kept");
    assert!(matches!(
        chain.state_at(2),
        Err(ChainError::HistoryUnavailable {
            number: 2,
            head: 131,
            oldest: 3
        })
    ));
}
