//! The soak's genesis, and the node under test as `moat-harness` starts it (loopback
//! ports, a fresh temporary directory, no discovery) with the soak's own flags.

use alloy_primitives::{Address, U256};
use moat_common::config::Genesis;

/// The soak chain's id.
pub(crate) const CHAIN_ID: u64 = 75_310;

/// Block gas limit of the genesis and of the clients' builders (`--miner.gaslimit`), so
/// neither moves it during the run.
pub(crate) const GAS_LIMIT: u64 = 60_000_000;

/// Each sender's genesis balance: 10,000 ether.
const BALANCE: u128 = 10_000 * 1_000_000_000_000_000_000;

/// The soak genesis (`moat_harness::genesis::osaka`): `senders` funded.
pub(crate) fn genesis(senders: &[Address], timestamp: u64) -> Genesis {
    moat_harness::genesis::osaka(
        CHAIN_ID,
        senders,
        U256::from(BALANCE),
        GAS_LIMIT,
        timestamp,
        b"moat soak",
    )
}
