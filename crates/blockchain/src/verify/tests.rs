use super::*;
use crate::chain::Chain;
use moat_common::config::Genesis;
use moat_storage::WriteBatch;

/// A chain at genesis in a datadir: 40 plain accounts and 5 contracts with code and 3
/// slots each.
fn chain() -> (Chain, tempfile::TempDir, Vec<Address>, Vec<Address>) {
    let plain: Vec<Address> = (1..=40u8).map(Address::repeat_byte).collect();
    let contracts: Vec<Address> = (0xa0..0xa5u8).map(Address::repeat_byte).collect();
    let mut alloc = Vec::new();
    for a in &plain {
        alloc.push(format!(r#""{a}": {{ "balance": "0x1000" }}"#));
    }
    for (i, a) in contracts.iter().enumerate() {
        alloc.push(format!(
            r#""{a}": {{ "balance": "0x1", "code": "0x60{i:02x}6000", "storage": {{
                "0x01": "0x0{i}1", "0x02": "0x0{i}2", "0x03": "0x0{i}3" }} }}"#
        ));
    }
    let json = format!(
        r#"{{ "config": {{ "chainId": 1337, "homesteadBlock": 0, "eip150Block": 0,
            "eip155Block": 0, "eip158Block": 0, "byzantiumBlock": 0, "constantinopleBlock": 0,
            "petersburgBlock": 0, "istanbulBlock": 0, "berlinBlock": 0, "londonBlock": 0,
            "terminalTotalDifficulty": 0, "shanghaiTime": 0 }},
          "difficulty": "0x0", "gasLimit": "0x1c9c380", "timestamp": "0x0", "extraData": "0x",
          "nonce": "0x0", "mixHash": "0x{z32}", "coinbase": "0x{z20}",
          "alloc": {{ {} }} }}"#,
        alloc.join(","),
        z32 = "00".repeat(32),
        z20 = "00".repeat(20),
    );
    let genesis = Genesis::from_json(&json).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let chain = Chain::init(Store::open(dir.path(), None).unwrap(), &genesis).unwrap();
    (chain, dir, plain, contracts)
}

/// The datadir opened afresh (the node cache trusts what a commit wrote: damage made by
/// a commit is met only by a new process, as damage on disk is).
fn reopened(chain: Chain, dir: &tempfile::TempDir) -> Store {
    drop(chain);
    Store::open(dir.path(), None).unwrap()
}

fn check(store: &Store) -> VerifyReport {
    verify(store, &VerifyOptions::default(), |_| {}).unwrap()
}

#[test]
fn a_consistent_datadir_is_clean_and_counted() {
    let (chain, _dir, plain, contracts) = chain();
    let report = check(chain.store());
    assert!(report.is_clean(), "{:?}", report.findings);
    assert_eq!(report.blocks, 1);
    assert_eq!(report.accounts as usize, plain.len() + contracts.len());
    assert_eq!(report.slots, 15);
    assert_eq!(report.codes, 5);
}

#[test]
fn a_flat_account_that_differs_from_its_leaf_is_found() {
    let (chain, dir, plain, _) = chain();
    let store = chain.store();
    let mut account = store.account(&plain[3]).unwrap().unwrap();
    account.balance += U256::from(1);
    let mut batch = WriteBatch::new();
    batch.set_account(plain[3], Some(account));
    store.commit(batch).unwrap();
    let report = check(&reopened(chain, &dir));
    assert_eq!(report.problems, 1, "{:?}", report.findings);
    assert!(report.findings[0].message.contains(&plain[3].to_string()));
}

#[test]
fn a_flat_slot_a_missing_code_and_a_stray_account_are_found() {
    let (chain, dir, _, contracts) = chain();
    let store = chain.store();
    let code_hash = store.account(&contracts[1]).unwrap().unwrap().code_hash;
    let mut batch = WriteBatch::new();
    batch.set_storage(contracts[0], B256::with_last_byte(2), U256::from(99));
    batch.put_code(code_hash, alloy_primitives::Bytes::from_static(&[0x00]));
    batch.set_account(
        Address::repeat_byte(0xee),
        Some(Account {
            nonce: 0,
            balance: U256::from(5),
            code_hash: KECCAK256_EMPTY,
            storage_root: EMPTY_ROOT_HASH,
        }),
    );
    store.commit(batch).unwrap();
    let report = check(&reopened(chain, &dir));
    let areas: Vec<Area> = report.findings.iter().map(|f| f.area).collect();
    assert_eq!(report.problems, 3, "{:?}", report.findings);
    assert!(areas.contains(&Area::Code));
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.message.contains("flat value differs"))
    );
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.message.to_lowercase().contains("0xeeee"))
    );
}

#[test]
fn a_trie_node_that_does_not_hash_to_its_parents_reference_is_found() {
    let (chain, dir, _, contracts) = chain();
    let store = chain.store();
    // A node one level below the root of the account trie, one byte changed.
    let nodes = store.trie_nodes_of(&ACCOUNT_TRIE).unwrap();
    let (path, mut rlp) = nodes
        .into_iter()
        .find(|(path, rlp)| path.len() == 1 && rlp.len() > 40)
        .unwrap();
    let at = rlp.len() - 3;
    rlp[at] ^= 0x10;
    let mut batch = WriteBatch::new();
    batch.set_trie_node(ACCOUNT_TRIE, path, Some(rlp));
    // And a storage trie's root.
    let owner = hashed_address(&contracts[2]);
    let mut root = store.trie_node(&owner, &[]).unwrap().unwrap();
    root[4] ^= 0x01;
    batch.set_trie_node(owner, vec![], Some(root));
    store.commit(batch).unwrap();
    let report = check(&reopened(chain, &dir));
    assert!(!report.is_clean());
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.message.contains("does not hash to what its parent names")),
        "{:?}",
        report.findings
    );
    assert!(
        report.findings.iter().any(|f| f
            .message
            .contains(&format!("storage trie of account {}", contracts[2]))),
        "{:?}",
        report.findings
    );
}

#[test]
fn a_broken_canonical_index_is_found() {
    let (chain, dir, _, _) = chain();
    let store = chain.store();
    let mut batch = WriteBatch::new();
    batch.set_canonical(0, B256::repeat_byte(9));
    store.commit(batch).unwrap();
    let report = check(&reopened(chain, &dir));
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.area == Area::Chain && f.message.contains("not the canonical block")),
        "{:?}",
        report.findings
    );
}

#[test]
fn the_journal_records_are_decoded_and_a_torn_tail_is_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("txpool.journal");
    // One intact record that is not a transaction, then half a record.
    let payload = b"not a transaction";
    let mut raw = Vec::new();
    raw.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    raw.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    raw.extend_from_slice(payload);
    raw.extend_from_slice(&[7, 0, 0, 0, 1, 2]);
    std::fs::write(&path, &raw).unwrap();
    let (chain, _dir, _, _) = chain();
    let options = VerifyOptions {
        journal: Some(path),
        ..VerifyOptions::default()
    };
    let report = verify(chain.store(), &options, |_| {}).unwrap();
    assert_eq!(report.journal_records, 1);
    assert_eq!(report.problems, 1, "{:?}", report.findings);
    assert_eq!(report.findings[0].area, Area::Journal);
    assert_eq!(report.notes.len(), 1, "{:?}", report.notes);
}

#[test]
fn accounts_and_slots_in_the_downloaded_tables_are_checked_as_flat_state() {
    // As a snap sync leaves them: some accounts and slots under hashed keys only.
    let (chain, dir, plain, contracts) = chain();
    let store = chain.store();
    let (mut by_address, mut downloaded) = (WriteBatch::new(), WriteBatch::new());
    for address in [plain[0], contracts[0], contracts[3]] {
        let account = store.account(&address).unwrap().unwrap();
        let owner = hashed_address(&address);
        for (slot, value) in store.storage_slots(&address).unwrap() {
            downloaded.put_snap_slot(owner, hashed_slot(&slot), value);
        }
        downloaded.put_snap_account(owner, &account);
        by_address.wipe_storage(address);
        by_address.set_account(address, None);
    }
    // (A write by address retires the downloaded entry: two commits.) The trie is left
    // as it was: the state is unchanged.
    store.commit(by_address).unwrap();
    store.commit(downloaded).unwrap();
    let store = reopened(chain, &dir);
    let report = check(&store);
    assert!(report.is_clean(), "{:?}", report.findings);
    assert_eq!(report.slots, 15);

    // A downloaded slot that rotted is found like any other.
    let mut batch = WriteBatch::new();
    let owner = hashed_address(&contracts[3]);
    batch.put_snap_slot(owner, hashed_slot(&B256::with_last_byte(1)), U256::from(77));
    store.commit(batch).unwrap();
    let report = check(&store);
    assert_eq!(report.problems, 1, "{:?}", report.findings);
    assert!(report.findings[0].message.contains("flat value differs"));
}
