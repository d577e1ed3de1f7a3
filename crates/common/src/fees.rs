//! Fee arithmetic of EIP-1559, EIP-4844 and EIP-7918.

use crate::config::{BlobParams, Fork};
use crate::constants::GAS_PER_BLOB;

/// EIP-1559 elasticity: the gas target is half the limit.
pub const ELASTICITY_MULTIPLIER: u64 = 2;
/// EIP-1559: the base fee moves at most 1/8 per block.
pub const BASE_FEE_MAX_CHANGE_DENOMINATOR: u64 = 8;
/// EIP-4844: the least blob base fee.
pub const MIN_BLOB_BASE_FEE: u128 = 1;
/// EIP-7918: blob base fee floor as a multiple of the execution base fee.
pub const BLOB_BASE_COST: u64 = 1 << 13;

/// The base fee of the block after a parent with `gas_used` of `gas_limit` at `base_fee`.
pub fn next_base_fee(gas_used: u64, gas_limit: u64, base_fee: u64) -> u64 {
    let target = gas_limit / ELASTICITY_MULTIPLIER;
    if target == 0 || gas_used == target {
        return base_fee;
    }
    let base = u128::from(base_fee);
    if gas_used > target {
        let delta = base * u128::from(gas_used - target)
            / u128::from(target)
            / u128::from(BASE_FEE_MAX_CHANGE_DENOMINATOR);
        (base + delta.max(1)).min(u128::from(u64::MAX)) as u64
    } else {
        let delta = base * u128::from(target - gas_used)
            / u128::from(target)
            / u128::from(BASE_FEE_MAX_CHANGE_DENOMINATOR);
        (base - delta) as u64
    }
}

/// `factor × e^(numerator / denominator)`, the integer approximation of EIP-4844.
pub fn fake_exponential(factor: u128, numerator: u128, denominator: u128) -> u128 {
    if denominator == 0 {
        return factor;
    }
    let mut i = 1u128;
    let mut output = 0u128;
    let mut accum = factor.saturating_mul(denominator);
    while accum > 0 {
        output = output.saturating_add(accum);
        accum = accum.saturating_mul(numerator) / denominator.saturating_mul(i);
        i += 1;
    }
    output / denominator
}

/// Blob base fee for a block with `excess_blob_gas` under `params`.
pub fn blob_base_fee(excess_blob_gas: u64, params: &BlobParams) -> u128 {
    fake_exponential(
        MIN_BLOB_BASE_FEE,
        u128::from(excess_blob_gas),
        u128::from(params.base_fee_update_fraction),
    )
}

/// Excess blob gas of a block whose parent had `parent_excess` and used `parent_used`,
/// under the block's `fork` and `params`; from Osaka with the EIP-7918 reserve price.
pub fn next_excess_blob_gas(
    fork: Fork,
    params: &BlobParams,
    parent_excess: u64,
    parent_used: u64,
    parent_base_fee: u64,
) -> u64 {
    let target = params.target * GAS_PER_BLOB;
    let sum = parent_excess + parent_used;
    if sum < target {
        return 0;
    }
    if fork >= Fork::Osaka
        && u128::from(BLOB_BASE_COST) * u128::from(parent_base_fee)
            > u128::from(GAS_PER_BLOB) * blob_base_fee(parent_excess, params)
    {
        let max = params.max.max(1);
        return parent_excess + parent_used * (params.max - params.target) / max;
    }
    sum - target
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_fee_moves_an_eighth_at_most() {
        assert_eq!(next_base_fee(15_000_000, 30_000_000, 1_000), 1_000);
        assert_eq!(next_base_fee(30_000_000, 30_000_000, 1_000), 1_125);
        assert_eq!(next_base_fee(0, 30_000_000, 1_000), 875);
        assert_eq!(
            next_base_fee(15_000_001, 30_000_000, 7),
            8,
            "rises by at least 1"
        );
    }

    #[test]
    fn fake_exponential_matches_the_eip_table() {
        assert_eq!(fake_exponential(1, 0, 1), 1);
        assert_eq!(fake_exponential(38493, 0, 1000), 38493);
        assert_eq!(fake_exponential(1, 2, 1), 6);
        assert_eq!(fake_exponential(2, 5, 2), 23);
        assert_eq!(fake_exponential(1, 50000000, 2225652), 5709098764);
    }

    #[test]
    fn excess_blob_gas_accumulates_above_target() {
        let p = BlobParams::CANCUN;
        assert_eq!(
            next_excess_blob_gas(Fork::Cancun, &p, 0, 3 * GAS_PER_BLOB, 7),
            0
        );
        assert_eq!(
            next_excess_blob_gas(Fork::Cancun, &p, 0, 6 * GAS_PER_BLOB, 7),
            3 * GAS_PER_BLOB
        );
    }
}
