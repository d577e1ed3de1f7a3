//! A genesis state written in bounded commits: the same state, root and tries as one
//! big write, and the leftovers of an interrupted attempt cleared first.

use alloy_primitives::{Address, B256, Bytes, U256, keccak256};
use moat_blockchain::chain::Chain;
use moat_blockchain::state_root::{StateEntry, build_tries, write_state_in_chunks};
use moat_common::config::Genesis;
use moat_storage::{Account, Store, WriteBatch};

mod common;

use common::{assert_tries_match_flat_state, testdata};

/// 50 accounts, one in five a contract with slots.
fn state() -> Vec<StateEntry> {
    (0..50u64)
        .map(|i| {
            let address = Address::from_slice(&keccak256(i.to_be_bytes())[..20]);
            let (slots, code): (Vec<(B256, U256)>, Bytes) = if i % 5 == 0 {
                (
                    (1..=i % 7 + 1)
                        .map(|s| (B256::with_last_byte(s as u8), U256::from(i * 100 + s)))
                        .collect(),
                    Bytes::from(vec![0x60, i as u8]),
                )
            } else {
                (Vec::new(), Bytes::new())
            };
            let storage_root = alloy_trie::root::storage_root_unhashed(slots.iter().copied());
            let account = Account {
                nonce: i,
                balance: U256::from(i * 1_000),
                code_hash: keccak256(&code),
                storage_root,
            };
            (address, account, slots, code)
        })
        .collect()
}

#[test]
fn chunked_writes_give_the_state_of_one_write_and_clear_leftovers() {
    let store = Store::in_memory();
    // Leftovers of an interrupted attempt: an account and a trie node of another state.
    let mut junk = WriteBatch::new();
    junk.set_account(Address::repeat_byte(9), Some(Account::default()))
        .set_trie_node(B256::ZERO, vec![1, 2], Some(vec![0xc0]));
    store.commit(junk).unwrap();

    let root = write_state_in_chunks(&store, state(), 7).unwrap();
    let one = Store::in_memory();
    let mut batch = WriteBatch::new();
    let expected = build_tries(
        &one,
        state()
            .into_iter()
            .map(|(a, acc, slots, _)| (a, acc, slots)),
        &mut batch,
    )
    .unwrap();
    one.commit(batch).unwrap();
    assert_eq!(root, expected);
    assert_eq!(store.trie_nodes().unwrap(), one.trie_nodes().unwrap());
    assert_eq!(store.accounts().unwrap().len(), 50);
    assert!(store.account(&Address::repeat_byte(9)).unwrap().is_none());
    let (address, account, slots, code) = &state()[10];
    assert_eq!(store.storage(address, &slots[0].0).unwrap(), slots[0].1);
    assert_eq!(store.code(&account.code_hash).unwrap().unwrap(), *code);
}

#[test]
fn the_ethtest_genesis_opens_with_its_tries() {
    let genesis = Genesis::from_file(&testdata("genesis.json")).unwrap();
    let chain = Chain::init(Store::in_memory(), &genesis).unwrap();
    assert_tries_match_flat_state(&chain);
}
