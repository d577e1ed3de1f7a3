//! Intrinsic gas and the stateless rules a transaction must meet at a fork.
//!
//! These are the checks that need neither state nor signature recovery, so the pool runs
//! them before ECDSA (DESIGN §2 stage 6) and `moat tx decode` lists every one a tx breaks.

use super::{SignedTransaction, Transaction, TxType};
use crate::config::Fork;
use crate::constants::*;

/// Max size of a transaction's canonical encoding the pool accepts (4 × 32 KiB slots).
pub const MAX_TX_SIZE: usize = 128 * 1024;
/// EIP-3860: max init code size (2 × the EIP-170 code limit), from Shanghai.
pub const MAX_INIT_CODE_SIZE: usize = 2 * MAX_CODE_SIZE;
/// EIP-7825: max gas limit of one transaction, from Osaka.
pub const MAX_TX_GAS_OSAKA: u64 = 1 << 24;

/// Gas charged before execution, and the EIP-7623 calldata floor the gas limit must cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IntrinsicGas {
    /// Gas charged before execution: 21,000, calldata, creation, access list and
    /// authorizations.
    pub gas: u64,
    /// 0 before Prague.
    pub floor: u64,
}

impl IntrinsicGas {
    /// The least gas limit the transaction can have.
    pub fn min_gas_limit(&self) -> u64 {
        self.gas.max(self.floor)
    }
}

/// Intrinsic gas of `tx` under the rules of `fork`.
pub fn intrinsic_gas(tx: &Transaction, fork: Fork) -> IntrinsicGas {
    let input = tx.input();
    let zeros = input.iter().filter(|b| **b == 0).count() as u64;
    let non_zeros = input.len() as u64 - zeros;
    let non_zero_cost = if fork >= Fork::Istanbul {
        TX_DATA_NON_ZERO_GAS
    } else {
        TX_DATA_NON_ZERO_GAS_FRONTIER
    };

    let mut gas = TX_GAS;
    if tx.is_create() && fork >= Fork::Homestead {
        gas += TX_CREATE_GAS;
    }
    gas = gas
        .saturating_add(zeros * TX_DATA_ZERO_GAS)
        .saturating_add(non_zeros.saturating_mul(non_zero_cost));
    for item in tx.access_list() {
        gas = gas.saturating_add(ACCESS_LIST_ADDRESS_GAS).saturating_add(
            (item.storage_keys.len() as u64).saturating_mul(ACCESS_LIST_STORAGE_KEY_GAS),
        );
    }
    if tx.is_create() && fork >= Fork::Shanghai {
        let words = (input.len() as u64).div_ceil(32);
        gas = gas.saturating_add(words * INIT_CODE_WORD_GAS);
    }
    gas = gas.saturating_add(
        (tx.authorization_list().len() as u64).saturating_mul(PER_EMPTY_ACCOUNT_COST),
    );

    let floor = if fork >= Fork::Prague {
        let tokens = zeros + non_zeros * 4;
        TX_GAS.saturating_add(tokens.saturating_mul(TOTAL_COST_FLOOR_PER_TOKEN))
    } else {
        0
    };
    IntrinsicGas { gas, floor }
}

/// The context stateless checks run in. Unset limits are not checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatelessRules {
    /// The fork whose rules apply (the next block's).
    pub fork: Fork,
    /// The chain's id; unprotected (pre-EIP-155) legacy transactions pass this check.
    pub chain_id: Option<u64>,
    /// Max blobs per transaction at this fork.
    pub max_blobs_per_tx: Option<u64>,
    /// The block gas limit a transaction's gas limit may not exceed.
    pub block_gas_limit: Option<u64>,
    /// Least tip per gas the pool takes.
    pub min_tip: u128,
    /// Max canonical encoding size.
    pub max_tx_size: usize,
}

impl StatelessRules {
    /// The rules of `fork` with no chain id, blob or block limit and no minimum tip, and
    /// the pool's [`MAX_TX_SIZE`].
    pub fn new(fork: Fork) -> Self {
        Self {
            fork,
            chain_id: None,
            max_blobs_per_tx: None,
            block_gas_limit: None,
            min_tip: 0,
            max_tx_size: MAX_TX_SIZE,
        }
    }
}

/// A stateless rule a transaction breaks. Messages follow geth's wording where geth has one,
/// since wallets match on them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatelessError {
    /// The transaction is signed for another chain (EIP-155).
    #[error("invalid chain id: have {have}, want {want}")]
    ChainId {
        /// The transaction's chain id.
        have: u64,
        /// This chain's id.
        want: u64,
    },
    /// The transaction type is not active yet at the fork.
    #[error("transaction type not supported: {tx_type} is not active at {fork}")]
    TypeNotActive {
        /// The type's name (`eip4844`, ...).
        tx_type: &'static str,
        /// The fork the rules are at.
        fork: Fork,
    },
    /// The canonical encoding is above the size limit.
    #[error("oversized data: transaction size {size}, limit {max}")]
    TooLarge {
        /// Its size, in bytes.
        size: usize,
        /// The limit, in bytes.
        max: usize,
    },
    /// The gas limit does not cover the intrinsic gas.
    #[error("intrinsic gas too low: gas {have}, minimum needed {need}")]
    IntrinsicGas {
        /// The transaction's gas limit.
        have: u64,
        /// Its intrinsic gas.
        need: u64,
    },
    /// The gas limit does not cover the EIP-7623 calldata floor (from Prague).
    #[error("insufficient gas for floor data gas cost: gas {have}, minimum needed {need}")]
    FloorDataGas {
        /// The transaction's gas limit.
        have: u64,
        /// The floor, in gas.
        need: u64,
    },
    /// A creation whose init code is above the EIP-3860 limit (from Shanghai).
    #[error("max initcode size exceeded: code size {size}, limit {max}")]
    InitCodeTooLarge {
        /// The init code size, in bytes.
        size: usize,
        /// The limit, in bytes.
        max: usize,
    },
    /// The gas limit is above the EIP-7825 per-transaction cap (from Osaka).
    #[error("transaction gas limit too high (cap: {cap}, tx: {have})")]
    GasLimitAboveCap {
        /// The transaction's gas limit.
        have: u64,
        /// The cap, 2^24 gas.
        cap: u64,
    },
    /// The gas limit is above the block gas limit.
    #[error("exceeds block gas limit: gas {have}, block limit {limit}")]
    GasLimitAboveBlock {
        /// The transaction's gas limit.
        have: u64,
        /// The block gas limit.
        limit: u64,
    },
    /// The max priority fee is above the max fee (EIP-1559).
    #[error("max priority fee per gas higher than max fee per gas: tip {tip}, fee cap {fee_cap}")]
    TipAboveFeeCap {
        /// Max priority fee per gas, in wei.
        tip: u128,
        /// Max fee per gas, in wei.
        fee_cap: u128,
    },
    /// The tip is below the pool's minimum.
    #[error("transaction underpriced: tip {tip} below the minimum {min}")]
    TipBelowMinimum {
        /// Max priority fee per gas, in wei.
        tip: u128,
        /// The pool's minimum, in wei per gas.
        min: u128,
    },
    /// A blob transaction (EIP-4844) without blob hashes.
    #[error("blob transaction missing blob hashes")]
    NoBlobHashes,
    /// More blobs than a transaction may carry at the fork.
    #[error("too many blobs in transaction: have {count}, permitted {max}")]
    TooManyBlobs {
        /// Blobs the transaction carries.
        count: usize,
        /// Blobs a transaction may carry.
        max: u64,
    },
    /// A set-code transaction (EIP-7702) without authorizations.
    #[error("EIP-7702 transaction with empty auth list")]
    EmptyAuthorizationList,
    /// EIP-2681: a nonce of 2^64 − 1 could never be followed by another.
    #[error("nonce has max value")]
    NonceMax,
}

/// Every stateless rule `tx` breaks under `rules` (empty when it passes), with its
/// intrinsic gas. Allocates only when something is wrong.
pub fn check_stateless(
    tx: &SignedTransaction,
    rules: &StatelessRules,
) -> (IntrinsicGas, Vec<StatelessError>) {
    let mut errors = Vec::new();
    let fork = rules.fork;
    let inner = tx.tx();

    if let (Some(want), Some(have)) = (rules.chain_id, inner.chain_id())
        && have != want
    {
        errors.push(StatelessError::ChainId { have, want });
    }
    let activates = match tx.tx_type() {
        TxType::Legacy => Fork::Frontier,
        TxType::Eip2930 => Fork::Berlin,
        TxType::Eip1559 => Fork::London,
        TxType::Eip4844 => Fork::Cancun,
        TxType::Eip7702 => Fork::Prague,
    };
    if fork < activates {
        errors.push(StatelessError::TypeNotActive {
            tx_type: tx.tx_type().name(),
            fork,
        });
    }
    if tx.size() > rules.max_tx_size {
        errors.push(StatelessError::TooLarge {
            size: tx.size(),
            max: rules.max_tx_size,
        });
    }
    let intrinsic = intrinsic_gas(inner, fork);
    let gas = inner.gas_limit();
    if gas < intrinsic.gas {
        errors.push(StatelessError::IntrinsicGas {
            have: gas,
            need: intrinsic.gas,
        });
    } else if gas < intrinsic.floor {
        errors.push(StatelessError::FloorDataGas {
            have: gas,
            need: intrinsic.floor,
        });
    }
    if inner.is_create() && fork >= Fork::Shanghai && inner.input().len() > MAX_INIT_CODE_SIZE {
        errors.push(StatelessError::InitCodeTooLarge {
            size: inner.input().len(),
            max: MAX_INIT_CODE_SIZE,
        });
    }
    if fork >= Fork::Osaka && gas > MAX_TX_GAS_OSAKA {
        errors.push(StatelessError::GasLimitAboveCap {
            have: gas,
            cap: MAX_TX_GAS_OSAKA,
        });
    }
    if let Some(limit) = rules.block_gas_limit
        && gas > limit
    {
        errors.push(StatelessError::GasLimitAboveBlock { have: gas, limit });
    }
    let (tip, fee_cap) = (inner.max_priority_fee_per_gas(), inner.max_fee_per_gas());
    if tip > fee_cap {
        errors.push(StatelessError::TipAboveFeeCap { tip, fee_cap });
    }
    if tip < rules.min_tip {
        errors.push(StatelessError::TipBelowMinimum {
            tip,
            min: rules.min_tip,
        });
    }
    if tx.tx_type() == TxType::Eip4844 {
        let count = inner.blob_versioned_hashes().len();
        if count == 0 {
            errors.push(StatelessError::NoBlobHashes);
        }
        if let Some(max) = rules.max_blobs_per_tx
            && count as u64 > max
        {
            errors.push(StatelessError::TooManyBlobs { count, max });
        }
    }
    if tx.tx_type() == TxType::Eip7702 && inner.authorization_list().is_empty() {
        errors.push(StatelessError::EmptyAuthorizationList);
    }
    if inner.nonce() == u64::MAX {
        errors.push(StatelessError::NonceMax);
    }
    (intrinsic, errors)
}

/// The first stateless rule `tx` breaks, or its intrinsic gas: the pool's form.
pub fn validate_stateless(
    tx: &SignedTransaction,
    rules: &StatelessRules,
) -> Result<IntrinsicGas, StatelessError> {
    let (intrinsic, mut errors) = check_stateless(tx, rules);
    if errors.is_empty() {
        Ok(intrinsic)
    } else {
        Err(errors.swap_remove(0))
    }
}
