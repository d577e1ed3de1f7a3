//! Helpers shared by the chain tests: the conformance chain's files and a minimal pool
//! view of the chain head.
#![allow(dead_code)]

use alloy_primitives::Address;
use moat_blockchain::chain::Chain;
use moat_blockchain::mempool::{AccountState, CodeKind, HeadInfo, StateView};
use std::path::PathBuf;

pub fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/testdata/ethtest")
        .join(name)
}

/// The pool's view of the chain head (just what this test needs).
pub struct HeadState(pub Chain);

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
