//! A genesis state written in bounded commits: the same state, root and tries as one
//! big write, and the leftovers of an interrupted attempt cleared first.

use alloy_primitives::{Address, B256, Bytes, U256, keccak256};
use moat_blockchain::chain::{Chain, ChainError};
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

/// A scratch directory of this test's own (in cargo's scratch directory for integration
/// tests), removed when dropped: also when the test panics.
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("moat-genesis-{name}-"))
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

/// The ethtest genesis with `extra` synthetic accounts (every third with slots and
/// code) added to its allocation, as a file.
fn big_genesis(dir: &std::path::Path, extra: u64, extra_data: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(testdata("genesis.json")).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let alloc = json["alloc"].as_object_mut().unwrap();
    for i in 0..extra {
        let address = Address::from_slice(&keccak256(i.to_be_bytes())[12..]);
        let mut account = serde_json::json!({ "balance": format!("{:#x}", i + 1) });
        if i % 3 == 0 {
            account["code"] = serde_json::json!("0x6000");
            account["storage"] =
                serde_json::json!({ "0x01": format!("{:#x}", i + 5), "0x02": "0x00" });
        }
        alloc.insert(format!("{address:x}"), account);
    }
    json["extraData"] = serde_json::json!(extra_data);
    let path = dir.join("genesis.json");
    std::fs::write(&path, serde_json::to_vec(&json).unwrap()).unwrap();
    path
}

#[test]
fn a_streamed_genesis_gives_the_hash_and_tries_of_a_parsed_one() {
    let tmp = scratch("streamed");
    let dir = tmp.path();
    let path = big_genesis(dir, 3_000, "0x");
    let parsed = Chain::init(Store::in_memory(), &Genesis::from_file(&path).unwrap()).unwrap();
    let sort = dir.join("sort");
    let streamed = Chain::init_from_file(Store::in_memory(), &path, &sort).unwrap();
    assert_eq!(streamed.genesis_hash(), parsed.genesis_hash());
    assert_eq!(
        streamed.store().trie_nodes().unwrap(),
        parsed.store().trie_nodes().unwrap()
    );
    assert_tries_match_flat_state(&streamed);
    assert!(!sort.exists(), "the scratch directory is removed");
    assert_eq!(streamed.store().accounts().unwrap().len(), 3_000 + 27);

    // The ethtest genesis streamed hashes to the suite's value.
    let ethtest = Chain::init_from_file(Store::in_memory(), &testdata("genesis.json"), &sort);
    assert_eq!(
        ethtest.unwrap().genesis_hash(),
        Chain::init(
            Store::in_memory(),
            &Genesis::from_file(&testdata("genesis.json")).unwrap()
        )
        .unwrap()
        .genesis_hash()
    );

    // Reopened from the file: the stored genesis is checked, not rewritten; a file with
    // other header fields is another chain.
    let store = streamed.store().clone();
    drop(streamed);
    let reopened = Chain::init_from_file(store.clone(), &path, &sort).unwrap();
    assert_eq!(reopened.genesis_hash(), parsed.genesis_hash());
    let other = big_genesis(dir, 3_000, "0x01");
    assert!(matches!(
        Chain::init_from_file(store, &other, &sort),
        Err(ChainError::GenesisMismatch { .. })
    ));
}

#[test]
fn a_streamed_genesis_refuses_an_address_given_twice_and_a_bad_file() {
    let tmp = scratch("twice");
    let dir = tmp.path();
    let a = "0x00000000000000000000000000000000000000aa";
    let json = format!(
        r#"{{"config": {{"chainId": 1}}, "gasLimit": "0x1", "difficulty": "0x0",
            "alloc": {{"{a}": {{"balance": "0x1"}}, "{}": {{"balance": "0x2"}}}}}}"#,
        &a[2..]
    );
    let path = dir.join("genesis.json");
    std::fs::write(&path, json).unwrap();
    let err = Chain::init_from_file(Store::in_memory(), &path, &dir.join("sort")).unwrap_err();
    assert!(err.to_string().contains("twice"), "{err}");
    std::fs::write(&path, r#"{"config": {"chainId": 1}, "alloc": {"#).unwrap();
    let err = Chain::init_from_file(Store::in_memory(), &path, &dir.join("sort")).unwrap_err();
    assert!(matches!(err, ChainError::GenesisFile { .. }), "{err}");
}
