//! Helpers shared by the chain tests: the conformance chain's files and a minimal pool
//! view of the chain head.
#![allow(dead_code)]

use alloy_primitives::Address;
use moat_blockchain::chain::Chain;
use moat_mempool::{AccountState, CodeKind, HeadInfo, StateView};
use std::path::PathBuf;

pub(crate) fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/testdata/ethtest")
        .join(name)
}

/// The pool's view of the chain head (just what this test needs).
pub(crate) struct HeadState(pub Chain);

impl StateView for HeadState {
    fn account(&self, address: &Address) -> AccountState {
        let a = self
            .0
            .store()
            .account(address)
            .ok()
            .flatten()
            .unwrap_or_default();
        AccountState {
            nonce: a.nonce,
            balance: a.balance,
            code: CodeKind::None,
        }
    }
    fn head(&self) -> HeadInfo {
        let h = self.0.head_header().expect("a head");
        let base_fee = moat_common::fees::next_base_fee(
            h.gas_used,
            h.gas_limit,
            h.base_fee_per_gas.unwrap_or_default(),
        );
        HeadInfo {
            number: h.number,
            timestamp: h.timestamp,
            base_fee,
            blob_base_fee: 1,
            gas_limit: h.gas_limit,
        }
    }
}

/// The stored tries are exactly the tries of the flat state: built from scratch over the
/// accounts and slots, they give the same nodes at the same paths (no stale node, none
/// missing), and the account trie's root is the head's state root.
pub(crate) fn assert_tries_match_flat_state(chain: &Chain) {
    use moat_blockchain::state_root::build_tries;
    let store = chain.store();
    let state: Vec<_> = store
        .accounts()
        .unwrap()
        .into_iter()
        .map(|(a, acc)| (a, acc, store.storage_slots(&a).unwrap()))
        .collect();
    let fresh = moat_storage::Store::in_memory();
    let mut batch = moat_storage::WriteBatch::new();
    let root = build_tries(&fresh, state, &mut batch).unwrap();
    fresh.commit(batch).unwrap();
    assert_eq!(root, chain.head_header().unwrap().state_root);
    let (stored, rebuilt) = (store.trie_nodes().unwrap(), fresh.trie_nodes().unwrap());
    assert_eq!(
        stored.len(),
        rebuilt.len(),
        "stored and rebuilt trie sizes differ"
    );
    assert!(stored == rebuilt, "stored trie nodes differ from a rebuild");
}
