//! The pool's window on chain state: a small trait the node implements over its store and
//! tests implement in memory.

use super::FastMap as HashMap;
use alloy_primitives::{Address, U256};
use parking_lot::RwLock;

/// What an account's code means for sending from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CodeKind {
    #[default]
    None,
    /// An EIP-7702 delegation designator: still an EOA, with limited in-flight slots.
    Delegated(Address),
    /// Contract code: the account cannot send transactions (EIP-3607).
    Contract,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AccountState {
    pub nonce: u64,
    pub balance: U256,
    pub code: CodeKind,
}

/// The head the pool validates against: the next block builds on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeadInfo {
    pub number: u64,
    pub timestamp: u64,
    /// Base fee of the next block.
    pub base_fee: u64,
    /// Blob base fee of the next block.
    pub blob_base_fee: u128,
    pub gas_limit: u64,
}

/// State reads the pool needs. Implementations must be cheap to call: admission reads the
/// sender's account once per transaction from a new sender.
pub trait StateView: Send + Sync + 'static {
    /// The account at the head; absent accounts read as default.
    fn account(&self, address: &Address) -> AccountState;
    /// The current head.
    fn head(&self) -> HeadInfo;
}

/// A [`StateView`] held in memory, for tests, benches and tools.
#[derive(Debug, Default)]
pub struct InMemoryState {
    accounts: RwLock<HashMap<Address, AccountState>>,
    head: RwLock<HeadInfo>,
}

impl InMemoryState {
    pub fn new(head: HeadInfo) -> Self {
        Self {
            accounts: RwLock::new(HashMap::default()),
            head: RwLock::new(head),
        }
    }

    pub fn set_account(&self, address: Address, account: AccountState) {
        self.accounts.write().insert(address, account);
    }

    pub fn set_balance(&self, address: Address, balance: U256) {
        self.accounts.write().entry(address).or_default().balance = balance;
    }

    pub fn set_nonce(&self, address: Address, nonce: u64) {
        self.accounts.write().entry(address).or_default().nonce = nonce;
    }

    pub fn set_head(&self, head: HeadInfo) {
        *self.head.write() = head;
    }
}

impl StateView for InMemoryState {
    fn account(&self, address: &Address) -> AccountState {
        self.accounts
            .read()
            .get(address)
            .copied()
            .unwrap_or_default()
    }

    fn head(&self) -> HeadInfo {
        *self.head.read()
    }
}
