//! go-ethereum's words for why a transaction or call cannot run, and why execution
//! halted: wallets and client libraries key on these strings (ethers and viem map
//! "insufficient funds" to `INSUFFICIENT_FUNDS`, "nonce too low" to `NONCE_EXPIRED`, and
//! so on), so every path that reports revm's refusals to a client speaks them.

use revm::context::result::{HaltReason, InvalidTransaction};

/// geth's message for revm's refusal of a transaction (core/error.go, with the details
/// geth's state transition adds where revm has them). The rule table: every variant.
pub fn invalid_tx_message(e: &InvalidTransaction) -> String {
    use InvalidTransaction as I;
    match e {
        I::PriorityFeeGreaterThanMaxFee => {
            "max priority fee per gas higher than max fee per gas".into()
        }
        I::GasPriceLessThanBasefee => "max fee per gas less than block base fee".into(),
        I::CallerGasLimitMoreThanBlock => "gas limit reached".into(),
        I::CallGasCostMoreThanGasLimit {
            initial_gas,
            gas_limit,
        } => format!("intrinsic gas too low: have {gas_limit}, want {initial_gas}"),
        I::GasFloorMoreThanGasLimit {
            gas_floor,
            gas_limit,
        } => {
            format!("insufficient gas for floor data gas cost: have {gas_limit}, want {gas_floor}")
        }
        I::RejectCallerWithCode => "sender not an eoa".into(),
        I::LackOfFundForMaxFee { fee, balance } => {
            format!("insufficient funds for gas * price + value: have {balance} want {fee}")
        }
        I::OverflowPaymentInTransaction => {
            "insufficient funds for gas * price + value: the cost overflows".into()
        }
        I::NonceOverflowInTransaction => "nonce has max value".into(),
        I::NonceTooHigh { tx, state } => format!("nonce too high: tx: {tx} state: {state}"),
        I::NonceTooLow { tx, state } => format!("nonce too low: tx: {tx} state: {state}"),
        I::CreateInitCodeSizeLimit => "max initcode size exceeded".into(),
        I::InvalidChainId | I::MissingChainId => "invalid chain id for signer".into(),
        I::TxGasLimitGreaterThanCap { gas_limit, cap } => {
            format!("transaction gas limit too high (cap: {cap}, tx: {gas_limit})")
        }
        I::AccessListNotSupported
        | I::MaxFeePerBlobGasNotSupported
        | I::BlobVersionedHashesNotSupported
        | I::AuthorizationListNotSupported
        | I::Eip2930NotSupported
        | I::Eip1559NotSupported
        | I::Eip4844NotSupported
        | I::Eip7702NotSupported
        | I::Eip7873NotSupported => "transaction type not supported".into(),
        I::BlobGasPriceGreaterThanMax {
            block_blob_gas_price,
            tx_max_fee_per_blob_gas,
        } => format!(
            "max fee per blob gas less than block blob gas fee: blobFeeCap: {tx_max_fee_per_blob_gas}, blobBaseFee: {block_blob_gas_price}"
        ),
        I::EmptyBlobs => "blob transaction missing blob hashes".into(),
        I::BlobCreateTransaction => "blob transaction of type create".into(),
        I::TooManyBlobs { max, have } => {
            format!("blob transaction has too many blobs: have {have}, max {max}")
        }
        I::BlobVersionNotSupported => "blob version not supported".into(),
        I::EmptyAuthorizationList => "EIP-7702 transaction with empty auth list".into(),
        I::AuthorizationListInvalidFields => "invalid EIP-7702 authorization list".into(),
        I::Eip7873MissingTarget => "EIP-7873 transaction without a target".into(),
        I::Str(s) => s.to_string(),
    }
}

/// geth's wording of why execution halted (its EVM errors). The rule table: every
/// variant.
pub fn halt_message(reason: &HaltReason) -> String {
    use HaltReason as H;
    match reason {
        H::OutOfGas(_) => "out of gas".into(),
        H::InvalidFEOpcode => "invalid opcode: INVALID".into(),
        H::OpcodeNotFound => "invalid opcode".into(),
        H::InvalidJump => "invalid jump destination".into(),
        H::StackUnderflow => "stack underflow".into(),
        H::StackOverflow => "stack limit reached 1024 (1023)".into(),
        H::OutOfFunds => "insufficient balance for transfer".into(),
        H::CallTooDeep => "max call depth exceeded".into(),
        H::CreateCollision => "contract address collision".into(),
        H::CreateContractSizeLimit => "max code size exceeded".into(),
        H::CreateContractStartingWithEF => "invalid code: must not begin with 0xef".into(),
        H::StateChangeDuringStaticCall | H::CallNotAllowedInsideStatic => "write protection".into(),
        H::PrecompileError => "precompiled contract failed".into(),
        H::PrecompileErrorWithContext(why) => why.clone(),
        H::OutOfOffset => "return data out of bounds".into(),
        H::NonceOverflow => "nonce uint64 overflow".into(),
        H::CreateInitCodeSizeLimit => "max initcode size exceeded".into(),
        H::NotActivated => "invalid opcode".into(),
        H::OverflowPayment => "gas uint64 overflow".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::U256;

    /// What client libraries match on, against geth's own strings (core/error.go).
    #[test]
    fn refusals_begin_with_geths_words() {
        use InvalidTransaction as I;
        let cases: Vec<(InvalidTransaction, &str)> = vec![
            (
                I::LackOfFundForMaxFee {
                    fee: Box::new(U256::from(1)),
                    balance: Box::new(U256::ZERO),
                },
                "insufficient funds for gas * price + value",
            ),
            (I::NonceTooLow { tx: 1, state: 2 }, "nonce too low"),
            (I::NonceTooHigh { tx: 3, state: 2 }, "nonce too high"),
            (
                I::CallGasCostMoreThanGasLimit {
                    initial_gas: 21_000,
                    gas_limit: 1,
                },
                "intrinsic gas too low",
            ),
            (
                I::GasPriceLessThanBasefee,
                "max fee per gas less than block base fee",
            ),
            (I::CallerGasLimitMoreThanBlock, "gas limit reached"),
            (
                I::PriorityFeeGreaterThanMaxFee,
                "max priority fee per gas higher than max fee per gas",
            ),
            (I::RejectCallerWithCode, "sender not an eoa"),
            (I::CreateInitCodeSizeLimit, "max initcode size exceeded"),
            (
                I::TxGasLimitGreaterThanCap {
                    gas_limit: 2,
                    cap: 1,
                },
                "transaction gas limit too high",
            ),
        ];
        for (e, geth) in cases {
            let ours = invalid_tx_message(&e);
            assert!(
                ours.starts_with(geth),
                "{e:?}: {ours:?} is not geth's {geth:?}"
            );
        }
    }
}
