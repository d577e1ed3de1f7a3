//! The pool's window on the store ([`StoreStateView`]) and the fees of the next block,
//! which both the pool and the fee methods need.

use alloy_primitives::{Address, B256, KECCAK256_EMPTY};
use moat_blockchain::mempool::{AccountState, CodeKind, HeadInfo, StateView};
use moat_common::block::Header;
use moat_common::config::ChainConfig;
use moat_common::fees;
use moat_storage::Store;

/// EIP-7702: code `0xef0100 ‖ address` delegates an EOA to `address`.
const DELEGATION_PREFIX: [u8; 3] = [0xef, 0x01, 0x00];

/// Base fee and blob base fee of the block after `parent`.
///
/// The next block's timestamp is not known yet; like the pool, this assumes it is one
/// second after the parent, which only matters in the block where a fork activates.
pub fn next_block_fees(config: &ChainConfig, parent: &Header) -> (u64, u128) {
    let timestamp = parent.timestamp + 1;
    let base_fee =
        moat_blockchain::chain::next_block_base_fee(config, parent, timestamp).unwrap_or(0);
    let blob_base_fee = match (
        moat_blockchain::chain::next_block_excess_blob_gas(config, parent, timestamp),
        config.blob_params_at(timestamp),
    ) {
        (Some(excess), Some(params)) => fees::blob_base_fee(excess, &params),
        _ => 0,
    };
    (base_fee, blob_base_fee)
}

/// The blob base fee a block itself paid (from its own excess blob gas).
pub fn block_blob_base_fee(config: &ChainConfig, header: &Header) -> Option<u128> {
    let excess = header.excess_blob_gas?;
    let params = config.blob_params_at(header.timestamp)?;
    Some(fees::blob_base_fee(excess, &params))
}

/// Reads the head header from the store; `None` when the store has no head or the
/// header does not decode (a corrupt store is reported by the chain, not here).
pub fn head_header(store: &Store) -> Option<(B256, Header)> {
    let (_, hash) = store.head().ok()??;
    let rlp = store.header_rlp(&hash).ok()??;
    Header::decode(&mut &rlp[..]).ok().map(|h| (hash, h))
}

/// A [`StateView`] over the store's head state, for the pool.
///
/// Store errors read as an empty account / default head: the pool's interface cannot
/// fail, and an account that reads as empty makes admission reject, never accept.
#[derive(Debug, Clone)]
pub struct StoreStateView {
    store: Store,
    config: ChainConfig,
}

impl StoreStateView {
    pub fn new(store: Store, config: ChainConfig) -> Self {
        Self { store, config }
    }

    fn code_kind(&self, code_hash: &B256) -> CodeKind {
        if *code_hash == KECCAK256_EMPTY || code_hash.is_zero() {
            return CodeKind::None;
        }
        match self.store.code(code_hash) {
            Ok(Some(code)) if code.len() == 23 && code.starts_with(&DELEGATION_PREFIX) => {
                CodeKind::Delegated(Address::from_slice(&code[3..]))
            }
            Ok(Some(code)) if code.is_empty() => CodeKind::None,
            // Unreadable code is treated as code: refusing a sender is the safe side.
            _ => CodeKind::Contract,
        }
    }
}

impl StateView for StoreStateView {
    fn account(&self, address: &Address) -> AccountState {
        match self.store.account(address) {
            Ok(Some(a)) => AccountState {
                nonce: a.nonce,
                balance: a.balance,
                code: self.code_kind(&a.code_hash),
            },
            _ => AccountState::default(),
        }
    }

    fn head(&self) -> HeadInfo {
        let Some((_, header)) = head_header(&self.store) else {
            return HeadInfo::default();
        };
        head_info(&self.config, &header)
    }
}

/// The pool's view of the block after `header`: its number and time, and the fees and
/// gas limit the next block will have.
pub fn head_info(config: &ChainConfig, header: &Header) -> HeadInfo {
    let (base_fee, blob_base_fee) = next_block_fees(config, header);
    HeadInfo {
        number: header.number,
        timestamp: header.timestamp,
        base_fee,
        blob_base_fee,
        gas_limit: header.gas_limit,
    }
}
