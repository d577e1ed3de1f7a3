//! The pool's window on chain state: a small trait the node implements over its store and
//! tests implement in memory.

use super::FastMap as HashMap;
use alloy_primitives::{Address, U256};
use parking_lot::RwLock;

/// What an account's code means for sending from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CodeKind {
    /// No code: a plain EOA.
    #[default]
    None,
    /// An EIP-7702 delegation designator: still an EOA, with limited in-flight slots.
    Delegated(Address),
    /// Contract code: the account cannot send transactions (EIP-3607).
    Contract,
}

/// What the pool reads of a sender's account in the head state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AccountState {
    /// The account's nonce: the nonce of its next transaction.
    pub nonce: u64,
    /// Balance, wei.
    pub balance: U256,
    /// What its code means for sending (EIP-3607, EIP-7702).
    pub code: CodeKind,
}

/// The head the pool validates against: the next block builds on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeadInfo {
    /// Number of the head block (the next block is `number + 1`).
    pub number: u64,
    /// Timestamp of the head block, Unix seconds.
    pub timestamp: u64,
    /// Base fee of the next block.
    pub base_fee: u64,
    /// Blob base fee of the next block.
    pub blob_base_fee: u128,
    /// Gas limit of the head block: no tx may use more (0: no cap).
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
    /// A state at `head` with no accounts (every account reads as default).
    pub fn new(head: HeadInfo) -> Self {
        Self {
            accounts: RwLock::new(HashMap::default()),
            head: RwLock::new(head),
        }
    }

    /// Sets `address`'s whole account.
    pub fn set_account(&self, address: Address, account: AccountState) {
        self.accounts.write().insert(address, account);
    }

    /// Sets `address`'s balance (wei), keeping its nonce and code.
    pub fn set_balance(&self, address: Address, balance: U256) {
        self.accounts.write().entry(address).or_default().balance = balance;
    }

    /// Sets `address`'s nonce, keeping its balance and code.
    pub fn set_nonce(&self, address: Address, nonce: u64) {
        self.accounts.write().entry(address).or_default().nonce = nonce;
    }

    /// Moves the head [`StateView::head`] returns.
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
