//! Header rules: what a block's header must say given its parent and its body, before
//! anything is executed, each broken rule a typed [`HeaderError`].
//!
//! Also the values the next block's header derives from its parent (base fee, excess
//! blob gas), which payload building and the pool share.

use alloy_primitives::{B256, U256};
use moat_common::block::{Block, Header};
use moat_common::config::{BlobParams, ChainConfig, Fork};
use moat_common::constants::{EMPTY_OMMERS_HASH, GAS_PER_BLOB};
use moat_common::fees;

use crate::premerge;
pub use crate::premerge::block_fork;

/// geth's `params.MaximumExtraDataSize`.
pub const MAX_EXTRA_DATA: usize = 32;
/// geth's `params.MinGasLimit`.
pub const MIN_GAS_LIMIT: u64 = 5_000;
/// The largest gas limit a header may carry (geth: `params.MaxGasLimit`, 2^63 − 1).
pub const MAX_GAS_LIMIT: u64 = i64::MAX as u64;

/// A header rule a block breaks. Messages name the rule, the value expected and the one
/// found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The number is not the parent's plus one.
    #[error("invalid number: expected {expected}, found {found}")]
    Number {
        /// The parent's number plus one.
        expected: u64,
        /// The header's number.
        found: u64,
    },
    /// The timestamp is not after the parent's.
    #[error("timestamp {found} not after the parent's {parent}")]
    Timestamp {
        /// The parent's timestamp (seconds).
        parent: u64,
        /// The header's timestamp (seconds).
        found: u64,
    },
    /// The extra data is longer than [`MAX_EXTRA_DATA`] bytes.
    #[error("extra data too long: {len} bytes, at most {MAX_EXTRA_DATA}")]
    ExtraData {
        /// The extra data's length in bytes.
        len: usize,
    },
    /// The header's gas used exceeds its gas limit.
    #[error("gas used {used} above the gas limit {limit}")]
    GasUsed {
        /// The header's `gasUsed`.
        used: u64,
        /// The header's `gasLimit`.
        limit: u64,
    },
    /// The gas limit moved by parent/1024 or more from the parent's, or is below
    /// [`MIN_GAS_LIMIT`].
    #[error(
        "invalid gas limit {found}: must differ from the parent's {parent} by less than {max_delta} and be at least {MIN_GAS_LIMIT}"
    )]
    GasLimit {
        /// The parent's gas limit (doubled at London's first block, EIP-1559's elasticity).
        parent: u64,
        /// The header's gas limit.
        found: u64,
        /// The parent's gas limit / 1024: the change must stay below it.
        max_delta: u64,
    },
    /// The gas limit is above [`MAX_GAS_LIMIT`].
    #[error("invalid gas limit {found}: above the maximum {MAX_GAS_LIMIT}")]
    GasLimitTooHigh {
        /// The header's gas limit.
        found: u64,
    },
    /// A proof-of-work header's difficulty is not what the difficulty rules give.
    #[error("invalid difficulty: expected {expected}, found {found}")]
    PowDifficulty {
        /// The difficulty the fork's rules compute from the parent.
        expected: U256,
        /// The header's difficulty.
        found: U256,
    },
    /// A block in the DAO fork's extra-data window lacks the `dao-hard-fork` extra data.
    #[error("extra data of a DAO fork block must be \"dao-hard-fork\"")]
    DaoExtraData,
    /// The ommers hash is not the hash of the block's ommer list.
    #[error("ommers hash mismatch: computed {expected}, header {found}")]
    OmmersHash {
        /// keccak256 of the RLP list of the block's ommers.
        expected: B256,
        /// The header's `sha3Uncles`.
        found: B256,
    },
    /// A post-merge header with a non-zero difficulty (EIP-3675).
    #[error("difficulty {found} after the merge, expected 0")]
    Difficulty {
        /// The header's difficulty.
        found: U256,
    },
    /// A post-merge header with a non-zero nonce (EIP-3675).
    #[error("nonce {found:?} after the merge, expected 0")]
    Nonce {
        /// The header's 8-byte nonce.
        found: [u8; 8],
    },
    /// A post-merge header whose ommers hash is not that of the empty list (EIP-3675).
    #[error("ommers after the merge (ommers hash {found})")]
    Ommers {
        /// The header's `sha3Uncles`.
        found: B256,
    },
    /// The base fee is not what EIP-1559 computes from the parent, or is present
    /// before London / absent from it.
    #[error("invalid base fee: expected {expected:?}, found {found:?}")]
    BaseFee {
        /// The base fee from the parent (wei per gas); `None` before London.
        expected: Option<u64>,
        /// The header's `baseFeePerGas`.
        found: Option<u64>,
    },
    /// The transactions root is not the root of the block's transactions.
    #[error("transactions root mismatch: computed {expected}, header {found}")]
    TransactionsRoot {
        /// The root of the trie of the block's transactions.
        expected: B256,
        /// The header's `transactionsRoot`.
        found: B256,
    },
    /// Withdrawals present before Shanghai or absent from it (EIP-4895).
    #[error("withdrawals {} at {fork}", presence(.present))]
    Withdrawals {
        /// The fork the block is in.
        fork: Fork,
        /// Whether the block has a withdrawals list.
        present: bool,
    },
    /// The withdrawals root is not the root of the block's withdrawals, or is present
    /// or absent against the body (EIP-4895).
    #[error("withdrawals root mismatch: computed {expected:?}, header {found:?}")]
    WithdrawalsRoot {
        /// The root of the trie of the block's withdrawals; `None` without a list.
        expected: Option<B256>,
        /// The header's `withdrawalsRoot`.
        found: Option<B256>,
    },
    /// `blobGasUsed` or `excessBlobGas` in a header before Cancun (EIP-4844).
    #[error("blob gas fields before Cancun (blobGasUsed {used:?}, excessBlobGas {excess:?})")]
    BlobFieldsBeforeCancun {
        /// The header's `blobGasUsed`.
        used: Option<u64>,
        /// The header's `excessBlobGas`.
        excess: Option<u64>,
    },
    /// The excess blob gas is not what EIP-4844 computes from the parent, or is missing.
    #[error("invalid excess blob gas: expected {expected:?}, found {found:?}")]
    ExcessBlobGas {
        /// The excess blob gas from the parent's.
        expected: Option<u64>,
        /// The header's `excessBlobGas`.
        found: Option<u64>,
    },
    /// The blob gas used is not the blob gas of the block's transactions (EIP-4844).
    #[error("invalid blob gas used: the transactions use {expected}, the header says {found:?}")]
    BlobGasUsed {
        /// The transactions' blobs times `GAS_PER_BLOB` (2^17).
        expected: u64,
        /// The header's `blobGasUsed`.
        found: Option<u64>,
    },
    /// The block's transactions carry more blobs than the fork's blob schedule allows.
    #[error("too many blobs: {found}, at most {max}")]
    TooManyBlobs {
        /// Blobs in the block's transactions.
        found: u64,
        /// The fork's maximum blobs per block.
        max: u64,
    },
    /// A Cancun header without `parentBeaconBlockRoot` (EIP-4788).
    #[error("parent beacon block root missing from Cancun on")]
    MissingBeaconRoot,
    /// A header before Cancun with `parentBeaconBlockRoot`.
    #[error("parent beacon block root before Cancun")]
    BeaconRootBeforeCancun,
    /// `requestsHash` present before Prague or absent from it (EIP-7685).
    #[error("requests hash {} at {fork}", presence(.present))]
    RequestsHash {
        /// The fork the block is in.
        fork: Fork,
        /// Whether the header has a `requestsHash`.
        present: bool,
    },
}

fn presence(present: &bool) -> &'static str {
    if *present { "present" } else { "absent" }
}

/// Base fee of the block after `parent` at `timestamp`; `None` before London.
pub fn next_block_base_fee(config: &ChainConfig, parent: &Header, timestamp: u64) -> Option<u64> {
    if !config.is_active(Fork::London, parent.number + 1, timestamp) {
        return None;
    }
    Some(match parent.base_fee_per_gas {
        Some(base_fee) if config.is_active(Fork::London, parent.number, parent.timestamp) => {
            fees::next_base_fee(parent.gas_used, parent.gas_limit, base_fee)
        }
        // The first London block.
        _ => moat_common::constants::INITIAL_BASE_FEE,
    })
}

/// Excess blob gas of the block after `parent` at `timestamp`; `None` before Cancun.
pub fn next_block_excess_blob_gas(
    config: &ChainConfig,
    parent: &Header,
    timestamp: u64,
) -> Option<u64> {
    let fork = config.fork_at(parent.number + 1, timestamp);
    if fork < Fork::Cancun {
        return None;
    }
    if !config.is_active(Fork::Cancun, parent.number, parent.timestamp) {
        return Some(0);
    }
    let params = config
        .blob_params_at(timestamp)
        .unwrap_or(BlobParams::CANCUN);
    Some(fees::next_excess_blob_gas(
        fork,
        &params,
        parent.excess_blob_gas.unwrap_or_default(),
        parent.blob_gas_used.unwrap_or_default(),
        parent.base_fee_per_gas.unwrap_or_default(),
    ))
}

/// The rules a header must keep on its parent alone, with no body: number, time, extra
/// data, gas limit and used, base fee, and before the merge the difficulty and the DAO
/// fork's extra data. Ommers are held to these too.
pub fn validate_header_on_parent(
    config: &ChainConfig,
    parent: &Header,
    h: &Header,
) -> Result<(), HeaderError> {
    if h.number != parent.number + 1 {
        return Err(HeaderError::Number {
            expected: parent.number + 1,
            found: h.number,
        });
    }
    if h.timestamp <= parent.timestamp {
        return Err(HeaderError::Timestamp {
            parent: parent.timestamp,
            found: h.timestamp,
        });
    }
    let fork = block_fork(config, h);
    if h.extra_data.len() > MAX_EXTRA_DATA {
        return Err(HeaderError::ExtraData {
            len: h.extra_data.len(),
        });
    }
    if h.gas_limit > MAX_GAS_LIMIT {
        return Err(HeaderError::GasLimitTooHigh { found: h.gas_limit });
    }
    if h.gas_used > h.gas_limit {
        return Err(HeaderError::GasUsed {
            used: h.gas_used,
            limit: h.gas_limit,
        });
    }
    // EIP-1559: the first London block doubles the parent's limit (elasticity) before
    // the bound is applied.
    let parent_limit = if config.is_active(Fork::London, h.number, h.timestamp)
        && !config.is_active(Fork::London, parent.number, parent.timestamp)
    {
        parent.gas_limit.saturating_mul(fees::ELASTICITY_MULTIPLIER)
    } else {
        parent.gas_limit
    };
    let max_delta = parent_limit / 1024;
    if h.gas_limit.abs_diff(parent_limit) >= max_delta.max(1) || h.gas_limit < MIN_GAS_LIMIT {
        return Err(HeaderError::GasLimit {
            parent: parent_limit,
            found: h.gas_limit,
            max_delta,
        });
    }
    if fork >= Fork::Paris {
        if !h.difficulty.is_zero() {
            return Err(HeaderError::Difficulty {
                found: h.difficulty,
            });
        }
        if h.nonce != [0u8; 8] {
            return Err(HeaderError::Nonce { found: h.nonce });
        }
        if h.ommers_hash != EMPTY_OMMERS_HASH {
            return Err(HeaderError::Ommers {
                found: h.ommers_hash,
            });
        }
    } else {
        let expected = premerge::calc_difficulty(config, h.timestamp, parent);
        if h.difficulty != expected {
            return Err(HeaderError::PowDifficulty {
                expected,
                found: h.difficulty,
            });
        }
        if config.dao_fork_support
            && let Some(dao) = config.dao_fork_block
            && (dao..dao + premerge::dao::FORK_EXTRA_RANGE).contains(&h.number)
            && h.extra_data.as_ref() != premerge::dao::FORK_BLOCK_EXTRA
        {
            return Err(HeaderError::DaoExtraData);
        }
    }
    let base_fee = next_block_base_fee(config, parent, h.timestamp);
    if h.base_fee_per_gas != base_fee {
        return Err(HeaderError::BaseFee {
            expected: base_fee,
            found: h.base_fee_per_gas,
        });
    }
    Ok(())
}

/// The keccak of the RLP list of `ommers`: what a header's ommers hash commits to.
pub fn ommers_hash(ommers: &[Header]) -> B256 {
    if ommers.is_empty() {
        return EMPTY_OMMERS_HASH;
    }
    let mut payload = Vec::new();
    for o in ommers {
        o.encode(&mut payload);
    }
    let mut out = Vec::with_capacity(payload.len() + 9);
    moat_common::rlp::encode_list_payload(&payload, &mut out);
    alloy_primitives::keccak256(out)
}

/// The header rules that need only the parent: number, time, gas, fees, blob gas, and
/// the body roots that need no execution.
pub fn validate_header(
    config: &ChainConfig,
    parent: &Header,
    block: &Block,
) -> Result<(), HeaderError> {
    let h = &block.header;
    validate_header_on_parent(config, parent, h)?;
    let fork = block_fork(config, h);
    let ommers = ommers_hash(&block.ommers);
    if ommers != h.ommers_hash {
        return Err(HeaderError::OmmersHash {
            expected: ommers,
            found: h.ommers_hash,
        });
    }
    let tx_root = block.transactions_root();
    if tx_root != h.transactions_root {
        return Err(HeaderError::TransactionsRoot {
            expected: tx_root,
            found: h.transactions_root,
        });
    }
    if (fork >= Fork::Shanghai) != block.withdrawals.is_some() {
        return Err(HeaderError::Withdrawals {
            fork,
            present: block.withdrawals.is_some(),
        });
    }
    if block.withdrawals_root() != h.withdrawals_root {
        return Err(HeaderError::WithdrawalsRoot {
            expected: block.withdrawals_root(),
            found: h.withdrawals_root,
        });
    }
    if fork >= Fork::Cancun {
        let params = config
            .blob_params_at(h.timestamp)
            .unwrap_or(BlobParams::CANCUN);
        let expected = next_block_excess_blob_gas(config, parent, h.timestamp);
        if h.excess_blob_gas != expected {
            return Err(HeaderError::ExcessBlobGas {
                expected,
                found: h.excess_blob_gas,
            });
        }
        let blobs: u64 = block
            .transactions
            .iter()
            .map(|t| t.tx().blob_versioned_hashes().len() as u64)
            .sum();
        if h.blob_gas_used != Some(blobs * GAS_PER_BLOB) {
            return Err(HeaderError::BlobGasUsed {
                expected: blobs * GAS_PER_BLOB,
                found: h.blob_gas_used,
            });
        }
        if blobs > params.max {
            return Err(HeaderError::TooManyBlobs {
                found: blobs,
                max: params.max,
            });
        }
        if h.parent_beacon_block_root.is_none() {
            return Err(HeaderError::MissingBeaconRoot);
        }
    } else {
        if h.blob_gas_used.is_some() || h.excess_blob_gas.is_some() {
            return Err(HeaderError::BlobFieldsBeforeCancun {
                used: h.blob_gas_used,
                excess: h.excess_blob_gas,
            });
        }
        if h.parent_beacon_block_root.is_some() {
            return Err(HeaderError::BeaconRootBeforeCancun);
        }
    }
    if (fork >= Fork::Prague) != h.requests_hash.is_some() {
        return Err(HeaderError::RequestsHash {
            fork,
            present: h.requests_hash.is_some(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use moat_common::config::ChainConfig;

    fn chain(last: Fork) -> ChainConfig {
        ChainConfig::all_forks_at_genesis(1, last)
    }

    /// A parent and a valid empty child under `config`.
    fn pair(config: &ChainConfig) -> (Header, Block) {
        let fork = config.fork_at(0, 0);
        let cancun = fork >= Fork::Cancun;
        let parent = Header {
            number: 0,
            timestamp: 0,
            gas_limit: 30_000_000,
            base_fee_per_gas: Some(1_000_000_000),
            withdrawals_root: Some(alloy_trie::EMPTY_ROOT_HASH),
            blob_gas_used: cancun.then_some(0),
            excess_blob_gas: cancun.then_some(0),
            parent_beacon_block_root: cancun.then_some(B256::ZERO),
            requests_hash: (fork >= Fork::Prague).then(|| crate::chain::requests_hash(&[])),
            ommers_hash: EMPTY_OMMERS_HASH,
            ..Header::default()
        };
        let mut child = Block {
            header: Header {
                parent_hash: parent.hash(),
                number: 1,
                timestamp: 12,
                ..parent.clone()
            },
            hash: B256::ZERO,
            transactions: Vec::new(),
            ommers: Vec::new(),
            withdrawals: Some(Vec::new()),
        };
        child.header.base_fee_per_gas = next_block_base_fee(config, &parent, 12);
        child.header.excess_blob_gas = next_block_excess_blob_gas(config, &parent, 12);
        child.header.transactions_root = child.transactions_root();
        child.hash = child.header.hash();
        (parent, child)
    }

    #[test]
    fn a_valid_child_passes_and_each_rule_has_its_error() {
        let config = chain(Fork::Prague);
        let (parent, good) = pair(&config);
        assert_eq!(validate_header(&config, &parent, &good), Ok(()));
        let broken = |f: &dyn Fn(&mut Block)| {
            let mut b = good.clone();
            f(&mut b);
            validate_header(&config, &parent, &b).unwrap_err()
        };
        assert_eq!(
            broken(&|b| b.header.number = 5),
            HeaderError::Number {
                expected: 1,
                found: 5
            }
        );
        assert!(matches!(
            broken(&|b| b.header.timestamp = 0),
            HeaderError::Timestamp { .. }
        ));
        assert!(matches!(
            broken(&|b| b.header.gas_limit = 31_000_000),
            HeaderError::GasLimit { .. }
        ));
        assert!(matches!(
            broken(&|b| b.header.excess_blob_gas = Some(1)),
            HeaderError::ExcessBlobGas { .. }
        ));
        assert!(matches!(
            broken(&|b| b.header.requests_hash = None),
            HeaderError::RequestsHash { present: false, .. }
        ));
    }

    #[test]
    fn a_gas_limit_above_2_pow_63_is_invalid() {
        let config = chain(Fork::Prague);
        let (mut parent, mut child) = pair(&config);
        parent.gas_limit = u64::MAX;
        child.header.gas_limit = u64::MAX;
        assert_eq!(
            validate_header(&config, &parent, &child),
            Err(HeaderError::GasLimitTooHigh { found: u64::MAX })
        );
    }

    #[test]
    fn blob_fields_before_cancun_are_invalid() {
        let config = chain(Fork::Shanghai);
        let (parent, good) = pair(&config);
        assert_eq!(validate_header(&config, &parent, &good), Ok(()));
        let mut b = good.clone();
        b.header.blob_gas_used = Some(0);
        assert!(matches!(
            validate_header(&config, &parent, &b),
            Err(HeaderError::BlobFieldsBeforeCancun { .. })
        ));
        let mut b = good.clone();
        b.header.excess_blob_gas = Some(0);
        assert!(matches!(
            validate_header(&config, &parent, &b),
            Err(HeaderError::BlobFieldsBeforeCancun { .. })
        ));
    }
}
