//! Tests: a streamed genesis parses as the node parses it and has the synthetic layout;
//! `root` runs on a datadir initialised from one.

use crate::genesis::{GenesisArgs, run};
use crate::root::{RootArgs, run as root};
use crate::{Layout, slot_key, slot_value, synthetic_address};
use alloy_primitives::{B256, U256};
use moat_blockchain::chain::Chain;
use moat_common::config::Genesis;
use moat_storage::Store;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn base() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/testdata/ethtest/genesis.json")
}

/// A scratch directory of the test's own, removed when dropped (also on a panic).
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("moat-state-bench-")
        .tempdir()
        .unwrap()
}

const LAYOUT: Layout = Layout {
    storage_every: 10,
    slots_per_contract: 4,
};

/// Writes a genesis of `accounts` synthetic accounts in `dir` and parses it as the node
/// does.
fn genesis(dir: &Path, accounts: u64) -> (PathBuf, Genesis) {
    let out = dir.join(format!("genesis-{accounts}.json"));
    let args = GenesisArgs {
        accounts,
        layout: LAYOUT,
        base: base(),
        out: out.clone(),
        json: true,
    };
    assert_eq!(run(&args), Ok(ExitCode::SUCCESS));
    let text = std::fs::read_to_string(&out).unwrap();
    (
        out,
        Genesis::from_json(&text).expect("moat parses the streamed genesis"),
    )
}

#[test]
fn the_streamed_genesis_is_the_base_plus_the_synthetic_layout() {
    let tmp = scratch();
    let (_, genesis) = genesis(tmp.path(), 25);
    let base = Genesis::from_file(&base()).unwrap();
    assert_eq!(genesis.alloc.len(), base.alloc.len() + 25);
    assert_eq!(genesis.timestamp, base.timestamp);
    assert_eq!(genesis.gas_limit, base.gas_limit);
    for (address, account) in &base.alloc {
        assert_eq!(genesis.alloc[address].balance, account.balance);
    }
    for i in 0..25 {
        let account = &genesis.alloc[&synthetic_address(i)];
        assert_eq!(account.balance, U256::from(10u64).pow(U256::from(18)));
        if i % 10 == 0 {
            assert_eq!(account.code.as_ref(), &[0x00]);
            assert_eq!(account.storage.len(), 4);
            for j in 0..4 {
                assert_eq!(account.storage[&slot_key(j)], B256::from(slot_value(i, j)));
            }
        } else {
            assert!(account.code.is_empty() && account.storage.is_empty());
        }
    }
}

#[test]
fn root_runs_on_a_datadir_initialised_from_it() {
    let tmp = scratch();
    let (_, genesis) = genesis(tmp.path(), 40);
    let datadir = tmp.path().join("datadir");
    drop(Chain::init(Store::open(&datadir, None).unwrap(), &genesis).unwrap());
    // 40 accounts: contracts 0, 10, 20, 30; 8 slots take two of them.
    let args = RootArgs {
        datadir: datadir.clone(),
        accounts: None,
        layout: LAYOUT,
        touch: 10,
        slots: 8,
        reps: 3,
        fresh: false,
        seed: 1,
        json: true,
        cache: 64,
        no_node_cache: false,
        workers: 2,
    };
    let outcome = root(&args);
    // More slots than the contracts hold is refused.
    let too_many = root(&RootArgs { slots: 20, ..args });
    assert_eq!(outcome, Ok(ExitCode::SUCCESS));
    assert!(too_many.unwrap_err().contains("contracts"));
}

/// alloy-trie's root over a synthetic genesis gives the genesis hash moat's own trie
/// gives; a key given twice is refused.
#[test]
fn hash_root_agrees_with_moats_genesis() {
    let tmp = scratch();
    let (out, genesis) = genesis(tmp.path(), 300);
    let chain = Chain::init(Store::in_memory(), &genesis).unwrap();
    let mut leaves = Vec::new();
    let mut add = |address, account| {
        leaves.push((
            alloy_primitives::keccak256(address),
            crate::hashroot::account_leaf(&account),
        ));
        Ok(())
    };
    let streamed =
        Genesis::stream_file(&out, moat_common::config::AllocEntries::Parse(&mut add)).unwrap();
    assert_eq!(leaves.len(), 300 + 27);
    let root = crate::hashroot::root_of(leaves.clone()).unwrap();
    assert_eq!(
        streamed.header_with_state_root(root).hash(),
        chain.genesis_hash()
    );
    let mut twice = leaves;
    twice.push(twice[5].clone());
    assert!(
        crate::hashroot::root_of(twice)
            .unwrap_err()
            .contains("twice")
    );
}
