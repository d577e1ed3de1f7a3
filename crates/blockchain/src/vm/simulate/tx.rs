//! A call as the transaction the block includes and the message revm runs, with geth's
//! nonce checks and its words for a refused call.

use crate::vm::db::ReaderDb;
use crate::vm::env;
use crate::vm::{VmError, evm_error};
use alloy_primitives::{Address, B256, TxKind};
use moat_common::SignedTransaction;
use moat_common::block::Header;
use moat_common::config::ChainConfig;
use moat_common::transaction::{
    AccessListItem, Eip1559Tx, Eip4844Tx, Eip7702Tx, LegacyTx, Transaction,
};
use revm::Database;
use revm::context::TxEnv;
use revm::context::result::{EVMError, InvalidTransaction};
use revm::context_interface::transaction::AccessList as RevmAccessList;
use revm::context_interface::transaction::AccessListItem as RevmAccessListItem;
use revm::database::State;

use super::{SimCall, SimError, SimTxErrorKind};

/// geth's encoding of an unsigned legacy transaction: `v`, `r` and `s` all zero.
pub(super) fn unsigned_legacy(tx: &LegacyTx) -> Vec<u8> {
    use alloy_rlp::Encodable;
    let mut payload = Vec::new();
    tx.nonce.encode(&mut payload);
    tx.gas_price.encode(&mut payload);
    tx.gas_limit.encode(&mut payload);
    match tx.to {
        TxKind::Call(to) => to.encode(&mut payload),
        TxKind::Create => payload.push(alloy_rlp::EMPTY_STRING_CODE),
    }
    tx.value.encode(&mut payload);
    tx.input.encode(&mut payload);
    payload.extend([alloy_rlp::EMPTY_STRING_CODE; 3]);
    let mut out = Vec::with_capacity(payload.len() + 9);
    alloy_rlp::Header {
        list: true,
        payload_length: payload.len(),
    }
    .encode(&mut out);
    out.extend(payload);
    out
}

/// A simulated transaction's envelope as geth encodes it.
pub(super) fn envelope(tx: &SignedTransaction) -> Vec<u8> {
    match tx.tx() {
        Transaction::Legacy(legacy) => unsigned_legacy(legacy),
        _ => tx.encoded_2718(),
    }
}

pub(super) fn access_items(list: &[(Address, Vec<B256>)]) -> Vec<AccessListItem> {
    list.iter()
        .map(|(address, keys)| AccessListItem {
            address: *address,
            storage_keys: keys.clone(),
        })
        .collect()
}

/// The transaction a call becomes in the block (geth's `ToTransaction` with the
/// dynamic-fee type by default) and the message revm runs (geth's `ToMessage`).
pub(super) fn build_tx(
    config: &ChainConfig,
    header: &Header,
    call: &SimCall,
    from: Address,
    nonce: u64,
    gas: u64,
) -> Result<(Transaction, TxEnv), SimError> {
    let req = &call.req;
    if req.gas_price.is_some()
        && (req.max_fee_per_gas.is_some() || req.max_priority_fee_per_gas.is_some())
    {
        return Err(SimError::InvalidParams(
            "both gasPrice and (maxFeePerGas or maxPriorityFeePerGas) specified".into(),
        ));
    }
    let chain_id = config.chain_id;
    if let Some(have) = call.chain_id
        && have != chain_id
    {
        return Err(SimError::InvalidParams(format!(
            "chainId does not match node's (have={have}, want={chain_id})"
        )));
    }
    let value = req.value.unwrap_or_default();
    let kind = req.to.map_or(TxKind::Create, TxKind::Call);
    let access_list = access_items(&req.access_list);
    // Before London a call always pays a gas price (zero unless given).
    let gas_price = match header.base_fee_per_gas {
        None => Some(req.gas_price.unwrap_or_default()),
        Some(_) => req.gas_price,
    };
    let max_fee = req.max_fee_per_gas.unwrap_or_default();
    let tip = req.max_priority_fee_per_gas.unwrap_or_default();
    let tx = match (&call.blob_hashes, gas_price) {
        // An authorization list makes a set-code transaction whatever else is given.
        _ if call.authorization_list.is_some() => {
            let Some(to) = req.to else {
                return Err(SimError::InvalidParams(
                    "a set-code transaction needs a recipient".into(),
                ));
            };
            Transaction::Eip7702(Eip7702Tx {
                chain_id,
                nonce,
                max_priority_fee_per_gas: tip,
                max_fee_per_gas: max_fee,
                gas_limit: gas,
                to,
                value,
                input: req.input.clone(),
                access_list,
                authorization_list: call.authorization_list.clone().unwrap_or_default(),
            })
        }
        // A given gas price makes a legacy transaction, as in geth.
        (_, Some(price)) => Transaction::Legacy(LegacyTx {
            chain_id: None,
            nonce,
            gas_price: price,
            gas_limit: gas,
            to: kind,
            value,
            input: req.input.clone(),
        }),
        (Some(hashes), None) => Transaction::Eip4844(Eip4844Tx {
            chain_id,
            nonce,
            max_priority_fee_per_gas: tip,
            max_fee_per_gas: max_fee,
            gas_limit: gas,
            to: req.to.unwrap_or_default(),
            value,
            input: req.input.clone(),
            access_list,
            max_fee_per_blob_gas: call.max_fee_per_blob_gas.unwrap_or_default(),
            blob_versioned_hashes: hashes.clone(),
        }),
        (None, None) => Transaction::Eip1559(Eip1559Tx {
            chain_id,
            nonce,
            max_priority_fee_per_gas: tip,
            max_fee_per_gas: max_fee,
            gas_limit: gas,
            to: kind,
            value,
            input: req.input.clone(),
            access_list,
        }),
    };
    let revm_list = RevmAccessList(
        req.access_list
            .iter()
            .map(|(address, keys)| RevmAccessListItem {
                address: *address,
                storage_keys: keys.clone(),
            })
            .collect(),
    );
    let (tx_type, price, priority) = match (&tx, gas_price) {
        (Transaction::Eip4844(_), _) => (3, max_fee, Some(tip)),
        (Transaction::Eip7702(_), _) => (4, max_fee, Some(tip)),
        // The access list of a priced call still applies: an EIP-2930 message.
        (_, Some(price)) => (if req.access_list.is_empty() { 0 } else { 1 }, price, None),
        _ => (2, max_fee, Some(tip)),
    };
    let env = TxEnv {
        tx_type,
        caller: from,
        gas_limit: gas,
        gas_price: price,
        kind,
        value,
        data: req.input.clone(),
        nonce,
        chain_id: Some(chain_id),
        access_list: revm_list,
        gas_priority_fee: priority,
        blob_hashes: call.blob_hashes.clone().unwrap_or_default(),
        max_fee_per_blob_gas: call.max_fee_per_blob_gas.unwrap_or_default(),
        authorization_list: tx
            .authorization_list()
            .iter()
            .map(env::recovered_authorization)
            .collect(),
    };
    Ok((tx, env))
}

/// geth's unchecked nonce bump past the last nonce wraps to zero; revm's stops at it.
pub(super) fn wrap_nonce(db: &mut State<ReaderDb<'_>>, from: Address) -> Result<(), SimError> {
    use revm::DatabaseCommit;
    let Some(mut info) = db.basic(from).map_err(|e| VmError::State(e.to_string()))? else {
        return Ok(());
    };
    if info.nonce != u64::MAX {
        return Ok(());
    }
    info.nonce = 0;
    let mut account = revm::state::Account::from(info);
    account.mark_touch();
    db.commit(std::iter::once((from, account)).collect());
    Ok(())
}

/// geth's nonce checks, made before any other (revm makes them after the fee checks).
pub(super) fn nonce_check(tx: u64, state: u64, from: Address, gas: u64) -> Result<(), SimError> {
    let (kind, message) = match tx.cmp(&state) {
        std::cmp::Ordering::Less => (
            SimTxErrorKind::NonceTooLow,
            format!("nonce too low: address {from}, tx: {tx} state: {state}"),
        ),
        std::cmp::Ordering::Greater => (
            SimTxErrorKind::NonceTooHigh,
            format!("nonce too high: address {from}, tx: {tx} state: {state}"),
        ),
        std::cmp::Ordering::Equal if state == u64::MAX => (
            SimTxErrorKind::Other,
            format!("nonce has max value: address {from}, nonce: {state}"),
        ),
        std::cmp::Ordering::Equal => return Ok(()),
    };
    Err(SimError::InvalidTransaction { kind, message, gas })
}

/// revm's refusal of a call as geth sorts it.
pub(super) fn tx_error<E: std::fmt::Display>(e: EVMError<E>, gas: u64) -> SimError {
    match e {
        EVMError::Transaction(t) => {
            let kind = match &t {
                InvalidTransaction::NonceTooLow { .. } => SimTxErrorKind::NonceTooLow,
                InvalidTransaction::NonceTooHigh { .. } => SimTxErrorKind::NonceTooHigh,
                InvalidTransaction::GasPriceLessThanBasefee => SimTxErrorKind::FeeCapBelowBaseFee,
                InvalidTransaction::CallGasCostMoreThanGasLimit { .. }
                | InvalidTransaction::GasFloorMoreThanGasLimit { .. } => {
                    SimTxErrorKind::IntrinsicGas
                }
                InvalidTransaction::LackOfFundForMaxFee { .. }
                | InvalidTransaction::OverflowPaymentInTransaction => {
                    SimTxErrorKind::InsufficientFunds
                }
                InvalidTransaction::RejectCallerWithCode => SimTxErrorKind::SenderNotEoa,
                InvalidTransaction::CreateInitCodeSizeLimit => SimTxErrorKind::InitCodeTooLarge,
                InvalidTransaction::PriorityFeeGreaterThanMaxFee => SimTxErrorKind::InvalidFees,
                _ => SimTxErrorKind::Other,
            };
            SimError::InvalidTransaction {
                kind,
                message: crate::vm::geth_words::invalid_tx_message(&t),
                gas,
            }
        }
        other => SimError::Vm(evm_error(other, Some(0))),
    }
}
