//! A genesis both clients read: post-merge (terminal total difficulty 0, so blocks come
//! only through the engine API), every fork through Osaka at block 0, the system
//! contracts a post-Prague chain needs (EIP-4788, EIP-2935, EIP-7002, EIP-7251), and the
//! given accounts funded. Written as go-ethereum's `init` reads it.

use alloy_primitives::{Address, Bytes, U256};
use moat_common::config::{BlobParams, ChainConfig, Fork, Genesis, GenesisAccount};
use std::collections::BTreeMap;

/// The last fork active from genesis: Osaka (payloads through engine_getPayloadV5).
/// BPO1–5 only move blob parameters and are left out.
pub const LAST_FORK: Fork = Fork::Osaka;

/// The genesis of chain `chain_id` at `timestamp`, with `gas_limit` and each of `funded`
/// holding `balance` wei.
pub fn osaka(
    chain_id: u64,
    funded: &[Address],
    balance: U256,
    gas_limit: u64,
    timestamp: u64,
    extra_data: &'static [u8],
) -> Genesis {
    let mut config = ChainConfig::all_forks_at_genesis(chain_id, LAST_FORK);
    // geth wants a blobSchedule entry for every scheduled fork from Cancun on.
    config.blob_schedule.insert(Fork::Osaka, BlobParams::PRAGUE);
    config.deposit_contract_address = Some(Address::ZERO);
    let mut alloc = BTreeMap::new();
    for &a in funded {
        alloc.insert(
            a,
            GenesisAccount {
                balance,
                ..Default::default()
            },
        );
    }
    alloc.extend(moat_common::system_contracts::genesis_accounts());
    Genesis {
        config,
        timestamp,
        extra_data: Bytes::from_static(extra_data),
        gas_limit,
        alloc,
        base_fee_per_gas: Some(1_000_000_000),
        excess_blob_gas: Some(0),
        blob_gas_used: Some(0),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_genesis_is_post_merge_with_every_fork_through_osaka_at_block_0() {
        let g = osaka(
            7,
            &[Address::repeat_byte(1)],
            U256::from(1),
            30_000_000,
            1_700_000_000,
            b"x",
        );
        let c = &g.config;
        assert_eq!(c.terminal_total_difficulty, Some(U256::ZERO));
        for fork in [
            Fork::London,
            Fork::Shanghai,
            Fork::Cancun,
            Fork::Prague,
            Fork::Osaka,
        ] {
            assert!(c.is_active(fork, 0, g.timestamp), "{fork}");
        }
        assert!(!c.is_active(Fork::Bpo1, 0, u64::MAX));
        // Written as geth reads it, and read back the same.
        let json = serde_json::to_string(&g).unwrap();
        assert!(json.contains("\"osakaTime\":0"), "{json}");
        assert!(json.contains("\"osaka\":{"), "{json}");
        assert_eq!(Genesis::from_json(&json).unwrap(), g);
        assert_eq!(g.alloc.len(), 1 + moat_common::system_contracts::ALL.len());
    }
}
