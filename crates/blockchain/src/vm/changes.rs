//! revm's bundle of block transitions as our per-account changes.

use super::{AccountChange, AccountInfo, VmError};
use alloy_primitives::B256;
use revm::database::BundleState;
use revm::primitives::KECCAK_EMPTY;

/// One [`AccountChange`] per account whose info or storage the block altered, sorted
/// by address; storage sorted by slot.
///
/// A destroyed account reports its wipe plus the non-zero slots it holds afterwards
/// (what a re-creation wrote); otherwise only slots whose value differs from before the
/// block are reported.
pub(super) fn from_bundle(bundle: BundleState) -> Result<Vec<AccountChange>, VmError> {
    let mut out = Vec::with_capacity(bundle.state.len());
    for (address, account) in &bundle.state {
        let wiped = account.was_destroyed();
        // Created and gone again within the block, or touched while absent: the store
        // never saw it, so there is nothing to tell.
        if account.original_info.is_none() && account.info.is_none() {
            continue;
        }
        let mut storage: Vec<(B256, _)> = account
            .storage
            .iter()
            .filter(|(_, slot)| {
                if wiped {
                    !slot.present_value.is_zero()
                } else {
                    slot.is_changed()
                }
            })
            .map(|(key, slot)| (B256::from(*key), slot.present_value))
            .collect();
        if !wiped && storage.is_empty() && !account.is_info_changed() {
            continue;
        }
        storage.sort_unstable_by_key(|(key, _)| *key);

        let new_code = match &account.info {
            Some(info) if account.is_contract_changed() && info.code_hash != KECCAK_EMPTY => {
                let code = info
                    .code
                    .clone()
                    .or_else(|| bundle.contracts.get(&info.code_hash).cloned())
                    .ok_or_else(|| {
                        // revm keeps the code of every account it deployed or delegated;
                        // a missing one is a bug here, reported rather than panicked on.
                        VmError::State(format!("code {} of {address} not retained", info.code_hash))
                    })?;
                Some(code.original_bytes())
            }
            _ => None,
        };
        out.push(AccountChange {
            address: *address,
            info: account.info.as_ref().map(|i| AccountInfo {
                nonce: i.nonce,
                balance: i.balance,
                code_hash: i.code_hash,
            }),
            new_code,
            storage_wiped: wiped,
            storage,
        });
    }
    out.sort_unstable_by_key(|c| c.address);
    Ok(out)
}
