//! State overrides of `eth_call` and `eth_estimateGas` (geth's third parameter): per
//! address a balance, a nonce, code, and either the whole storage (`state`) or some
//! slots (`stateDiff`), laid over a [`StateReader`] for one call and never stored.

use super::{AccountInfo, StateReader, VmError};
use alloy_primitives::{Address, B256, Bytes, U256, keccak256};
use revm::primitives::KECCAK_EMPTY;
use std::collections::HashMap;

/// What one address is made to hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccountOverride {
    /// The balance in wei the account is given.
    pub balance: Option<U256>,
    /// The nonce the account is given.
    pub nonce: Option<u64>,
    /// The code the account is given.
    pub code: Option<Bytes>,
    /// The whole storage: slots not listed read zero.
    pub state: Option<HashMap<B256, U256>>,
    /// Some slots; the others keep their values.
    pub state_diff: HashMap<B256, U256>,
}

/// Why overrides are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverrideError {
    /// An account's override sets both `state` and `stateDiff`.
    #[error("account {0} has both 'state' and 'stateDiff'")]
    StateAndDiff(Address),
}

/// A reader with overrides laid over it.
pub struct OverriddenState<'a> {
    inner: &'a dyn StateReader,
    accounts: HashMap<Address, AccountOverride>,
    codes: HashMap<B256, Bytes>,
}

impl<'a> OverriddenState<'a> {
    /// Lays `accounts` over `inner`; refused when one has both `state` and `stateDiff`.
    pub fn new(
        inner: &'a dyn StateReader,
        accounts: HashMap<Address, AccountOverride>,
    ) -> Result<Self, OverrideError> {
        let mut codes = HashMap::new();
        for (address, o) in &accounts {
            if o.state.is_some() && !o.state_diff.is_empty() {
                return Err(OverrideError::StateAndDiff(*address));
            }
            if let Some(code) = &o.code {
                codes.insert(keccak256(code), code.clone());
            }
        }
        Ok(Self {
            inner,
            accounts,
            codes,
        })
    }
}

impl StateReader for OverriddenState<'_> {
    fn account(&self, address: &Address) -> Result<Option<AccountInfo>, VmError> {
        let base = self.inner.account(address)?;
        let Some(o) = self.accounts.get(address) else {
            return Ok(base);
        };
        let mut info = base.unwrap_or(AccountInfo {
            nonce: 0,
            balance: U256::ZERO,
            code_hash: KECCAK_EMPTY,
        });
        if let Some(b) = o.balance {
            info.balance = b;
        }
        if let Some(n) = o.nonce {
            info.nonce = n;
        }
        if let Some(code) = &o.code {
            info.code_hash = if code.is_empty() {
                KECCAK_EMPTY
            } else {
                keccak256(code)
            };
        }
        Ok(Some(info))
    }

    fn storage(&self, address: &Address, slot: &B256) -> Result<U256, VmError> {
        if let Some(o) = self.accounts.get(address) {
            if let Some(state) = &o.state {
                return Ok(state.get(slot).copied().unwrap_or_default());
            }
            if let Some(v) = o.state_diff.get(slot) {
                return Ok(*v);
            }
        }
        self.inner.storage(address, slot)
    }

    fn code(&self, code_hash: &B256) -> Result<Option<Bytes>, VmError> {
        match self.codes.get(code_hash) {
            Some(code) => Ok(Some(code.clone())),
            None => self.inner.code(code_hash),
        }
    }

    fn block_hash(&self, number: u64) -> Result<B256, VmError> {
        self.inner.block_hash(number)
    }
}
