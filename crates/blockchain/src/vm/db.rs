//! The caller's [`StateReader`] as a revm [`Database`].

use super::{StateReader, VmError};
use alloy_primitives::{Address, B256, U256};
use revm::Database;
use revm::bytecode::Bytecode;
use revm::database_interface::DBErrorMarker;
use revm::primitives::KECCAK_EMPTY;
use revm::state::AccountInfo as RevmAccountInfo;

/// A state read failure carried through revm, which wants its own error trait.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct DbError(String);

impl DBErrorMarker for DbError {}

impl From<VmError> for DbError {
    fn from(e: VmError) -> Self {
        match e {
            // Keep the reader's message as is: the executor wraps it in `VmError::State`
            // again on the way out.
            VmError::State(msg) => DbError(msg),
            other => DbError(other.to_string()),
        }
    }
}

/// Reads go straight to the caller's reader; revm's `State` in front of this caches
/// every account, slot and code it loads, so each is asked for at most once per block.
pub(super) struct ReaderDb<'a> {
    reader: &'a dyn StateReader,
}

impl<'a> ReaderDb<'a> {
    pub(super) fn new(reader: &'a dyn StateReader) -> Self {
        ReaderDb { reader }
    }
}

/// Code as revm runs it. Bytes that merely start like an EIP-7702 delegation but are not
/// one (possible in a genesis alloc) run as legacy code, where 0xef is an invalid opcode,
/// as in geth.
pub(super) fn bytecode(code: alloy_primitives::Bytes) -> Bytecode {
    Bytecode::new_raw_checked(code.clone()).unwrap_or_else(|_| Bytecode::new_legacy(code))
}

/// The same reads by shared reference (tracers read the pre-state through it).
impl revm::DatabaseRef for ReaderDb<'_> {
    type Error = DbError;

    fn basic_ref(&self, address: Address) -> Result<Option<RevmAccountInfo>, DbError> {
        Ok(self.reader.account(&address)?.map(|a| RevmAccountInfo {
            balance: a.balance,
            nonce: a.nonce,
            code_hash: a.code_hash,
            code: None,
            ..Default::default()
        }))
    }

    fn code_by_hash_ref(&self, code_hash: B256) -> Result<Bytecode, DbError> {
        if code_hash == KECCAK_EMPTY || code_hash == B256::ZERO {
            return Ok(Bytecode::default());
        }
        match self.reader.code(&code_hash)? {
            Some(code) => Ok(bytecode(code)),
            None => Err(DbError(format!("code {code_hash} missing from the state"))),
        }
    }

    fn storage_ref(&self, address: Address, index: U256) -> Result<U256, DbError> {
        Ok(self.reader.storage(&address, &B256::from(index))?)
    }

    fn block_hash_ref(&self, number: u64) -> Result<B256, DbError> {
        Ok(self.reader.block_hash(number)?)
    }
}

impl Database for ReaderDb<'_> {
    type Error = DbError;

    fn basic(&mut self, address: Address) -> Result<Option<RevmAccountInfo>, DbError> {
        Ok(self.reader.account(&address)?.map(|a| RevmAccountInfo {
            balance: a.balance,
            nonce: a.nonce,
            code_hash: a.code_hash,
            // Loaded lazily through `code_by_hash`: most accounts touched are never run.
            code: None,
            ..Default::default()
        }))
    }

    fn code_by_hash(&mut self, code_hash: B256) -> Result<Bytecode, DbError> {
        if code_hash == KECCAK_EMPTY || code_hash == B256::ZERO {
            return Ok(Bytecode::default());
        }
        match self.reader.code(&code_hash)? {
            Some(code) => Ok(bytecode(code)),
            None => Err(DbError(format!("code {code_hash} missing from the state"))),
        }
    }

    fn storage(&mut self, address: Address, index: U256) -> Result<U256, DbError> {
        Ok(self.reader.storage(&address, &B256::from(index))?)
    }

    fn block_hash(&mut self, number: u64) -> Result<B256, DbError> {
        Ok(self.reader.block_hash(number)?)
    }
}
