//! The soak's genesis, and the node under test as `moat-harness` starts it (loopback
//! ports, a fresh temporary directory, no discovery) with the soak's own flags.

use alloy_primitives::{Address, Bytes, U256};
use moat_common::config::{BlobParams, ChainConfig, Fork, Genesis, GenesisAccount};
use std::collections::BTreeMap;

/// The soak chain's id.
pub(crate) const CHAIN_ID: u64 = 75_310;

/// The last fork active from genesis: Osaka (payloads through engine_getPayloadV5). Both
/// clients take every fork through it at block 0; BPO1–5 only move blob parameters and
/// are left out (the load carries no blobs).
pub(crate) const LAST_FORK: Fork = Fork::Osaka;

/// Block gas limit of the genesis and of the clients' builders (`--miner.gaslimit`), so
/// neither moves it during the run.
pub(crate) const GAS_LIMIT: u64 = 60_000_000;

/// Each sender's genesis balance: 10,000 ether.
const BALANCE: u128 = 10_000 * 1_000_000_000_000_000_000;

/// The soak genesis: every fork through [`LAST_FORK`] at block 0 (post-merge: terminal
/// total difficulty 0, so blocks come only through the engine API), the system contracts,
/// and `senders` funded.
pub(crate) fn genesis(senders: &[Address], timestamp: u64) -> Genesis {
    let mut config = ChainConfig::all_forks_at_genesis(CHAIN_ID, LAST_FORK);
    // geth wants a blobSchedule entry for every scheduled fork from Cancun on.
    config.blob_schedule.insert(Fork::Osaka, BlobParams::PRAGUE);
    config.deposit_contract_address = Some(Address::ZERO);
    let mut alloc = BTreeMap::new();
    for &a in senders {
        alloc.insert(
            a,
            GenesisAccount {
                balance: U256::from(BALANCE),
                ..Default::default()
            },
        );
    }
    // The system contracts a post-Prague chain needs at genesis (EIP-4788, EIP-2935,
    // EIP-7002, EIP-7251), as the dev chain has them.
    alloc.extend(moat_common::system_contracts::genesis_accounts());
    Genesis {
        config,
        timestamp,
        extra_data: Bytes::from_static(b"moat soak"),
        gas_limit: GAS_LIMIT,
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
        let g = genesis(&[Address::repeat_byte(1)], 1_700_000_000);
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
