//! The chain's side of the pool's upkeep: the pool's window on the store
//! ([`StoreStateView`]), the head it admits against ([`head_info`], [`next_block_fees`]),
//! and [`Chain`] as the upkeep task reads it (`impl CanonChain`): blocks, the reorg floor,
//! the accounts a block changed (its undo record), and the mined blob transactions kept
//! with their sidecars while a reorg may bring them back.
//!
//! The task itself lives with the pool (`moat_mempool::maintain`): the chain publishes
//! each canonical head ([`Chain::subscribe_heads`]), the node spawns the task, and the
//! engine API, the syncer and dev mode only import blocks.

use crate::chain::Chain;
use crate::undo::Undo;
use alloy_primitives::{Address, B256, KECCAK256_EMPTY};
use moat_common::block::{Block, Header};
use moat_common::config::ChainConfig;
use moat_common::fees;
use moat_common::transaction::{PooledTransaction, TxType};
use moat_mempool::maintain::{CanonChain, Maintainer};
use moat_mempool::{AccountState, CodeKind, HeadInfo, Pool, StateView};
use moat_storage::{Store, WriteBatch};

/// EIP-7702: code `0xef0100 ‖ address` delegates an EOA to `address`.
const DELEGATION_PREFIX: [u8; 3] = [0xef, 0x01, 0x00];

/// Base fee and blob base fee of the block after `parent`.
///
/// The next block's timestamp is not known yet; like the pool, this assumes it is one
/// second after the parent, which only matters in the block where a fork activates.
pub fn next_block_fees(config: &ChainConfig, parent: &Header) -> (u64, u128) {
    let timestamp = parent.timestamp + 1;
    let base_fee = crate::chain::next_block_base_fee(config, parent, timestamp).unwrap_or(0);
    let blob_base_fee = match (
        crate::chain::next_block_excess_blob_gas(config, parent, timestamp),
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
    /// A view of `store`'s head state under the fork rules of `config`.
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

/// Starts the pool's upkeep task over `chain` on the current runtime: the pool follows
/// every head the chain publishes from now on (`moat_mempool::maintain`).
pub fn spawn(chain: &Chain, pool: &Pool) -> Maintainer {
    moat_mempool::maintain::spawn(
        pool.clone(),
        std::sync::Arc::new(chain.clone()),
        chain.subscribe_heads(),
    )
}

/// The chain as the pool's upkeep task reads it (`moat_mempool::maintain`).
impl CanonChain for Chain {
    fn canonical_hash(&self, number: u64) -> Option<B256> {
        self.store().canonical_hash(number).ok().flatten()
    }

    fn block(&self, hash: &B256) -> Option<Block> {
        if let Some(just) = self.just_imported(hash) {
            return Some(just.block.clone());
        }
        Chain::block(self, hash).ok().flatten()
    }

    fn block_number(&self, hash: &B256) -> Option<u64> {
        self.store().block_number(hash).ok().flatten()
    }

    fn reorg_floor(&self) -> u64 {
        // Unreadable: no walk back (the pool takes the new head alone).
        self.undo_floor().unwrap_or(u64::MAX)
    }

    fn head_info(&self, header: &Header) -> HeadInfo {
        head_info(self.config(), header)
    }

    fn changed_accounts(&self, block: &Block) -> Option<Vec<Address>> {
        if let Some(just) = self.just_imported(&block.hash) {
            return Some(just.changed.clone());
        }
        let record = self.store().undo(&block.hash).ok()??;
        Undo::decode_addresses(&record).ok()
    }

    fn keep_blob_txs(&self, block: &Block, pool: &Pool) {
        keep_blob_txs(self, pool, block)
    }

    fn kept_blob_tx(&self, hash: &B256) -> Option<PooledTransaction> {
        self.store()
            .sidecar(hash)
            .ok()
            .flatten()
            .and_then(|raw| PooledTransaction::decode_2718(&raw).ok())
            .filter(|p| p.hash() == *hash)
    }
}

/// Keeps the blob txs `block` mines, sidecar included, while a reorg may still take the
/// block back (the pool forgets them once mined; a block carries no sidecar), and drops
/// those of the blocks that have left that window: the blocks at or below
/// [`Chain::sidecar_floor`], which follows the undo records' reorg floor (a reorg that
/// can be undone can re-inject its blob txs) but keeps at most the last
/// [`SIDECAR_DEPTH`](crate::chain::SIDECAR_DEPTH) blocks' sidecars, as they are large.
/// Blocking (store reads and writes).
fn keep_blob_txs(chain: &Chain, pool: &Pool, block: &Block) {
    use crate::chain::SIDECAR_DEPTH;
    use std::sync::atomic::Ordering;
    let store = chain.store();
    let mut batch = WriteBatch::new();
    for tx in &block.transactions {
        if tx.tx_type() == TxType::Eip4844
            && let Some(pooled) = pool.get(&tx.hash())
        {
            batch.put_sidecar(tx.hash(), pooled.tx.encoded_2718());
        }
    }
    // Sidecars are kept only for blocks above the floor when they were mined, and the
    // floor is never below the head's last SIDECAR_DEPTH: the blocks from the cursor up
    // to SIDECAR_DEPTH + 2 above it hold all that may be left (after a restart, from
    // just under the head's window).
    let (Ok((head, _)), Ok(floor)) = (chain.head(), chain.sidecar_floor()) else {
        return;
    };
    let cursor = match chain.sidecar_cursor().load(Ordering::Relaxed) {
        crate::chain::UNKNOWN_CURSOR => head.saturating_sub(SIDECAR_DEPTH + 2),
        c => c,
    };
    let last = floor.min(cursor + SIDECAR_DEPTH + 2);
    for n in cursor + 1..=last {
        let expired = store
            .canonical_hash(n)
            .ok()
            .flatten()
            // A block that used no blob gas holds no blob tx: its body is not read.
            .filter(|h| {
                chain
                    .header(h)
                    .ok()
                    .flatten()
                    .is_some_and(|h| h.blob_gas_used.is_some_and(|used| used > 0))
            })
            .and_then(|h| chain.block(&h).ok().flatten());
        for tx in expired.iter().flat_map(|b| &b.transactions) {
            if tx.tx_type() == TxType::Eip4844 {
                batch.delete_sidecar(tx.hash());
            }
        }
    }
    if batch.is_empty() {
        chain
            .sidecar_cursor()
            .store(last.max(cursor), Ordering::Relaxed);
        return;
    }
    match store.commit(batch) {
        Ok(()) => chain
            .sidecar_cursor()
            .store(last.max(cursor), Ordering::Relaxed),
        Err(e) => tracing::warn!(error = %e, "could not keep mined blob txs for reorgs"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use moat_common::block::Withdrawal;
    use moat_common::config::Genesis;
    use moat_common::testing::sample_signed;
    use moat_crypto::secp::Signer;
    use moat_mempool::maintain::{block_update, reorg_update};
    use moat_mempool::{InMemoryState, PoolConfig};
    use std::sync::Arc;

    fn block(
        number: u64,
        beneficiary: u8,
        txs: Vec<moat_common::transaction::SignedTransaction>,
    ) -> Block {
        let header = Header {
            number,
            beneficiary: Address::repeat_byte(beneficiary),
            ..Header::default()
        };
        Block {
            hash: header.hash(),
            header,
            transactions: txs,
            ommers: Vec::new(),
            withdrawals: Some(vec![Withdrawal {
                index: 0,
                validator_index: 0,
                address: Address::repeat_byte(0xee),
                amount: 1,
            }]),
        }
    }

    #[test]
    fn a_reorg_mines_the_new_branch_and_gives_back_the_old_branchs_other_txs() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/testdata/ethtest/genesis.json");
        let genesis = Genesis::from_file(&path).unwrap();
        let chain = Chain::init(Store::in_memory(), &genesis).unwrap();
        let pool = Pool::new(
            PoolConfig::new(chain.config().clone()),
            Arc::new(InMemoryState::new(HeadInfo::default())),
        );
        let (a, b, c) = (
            Signer::from_seed(1),
            Signer::from_seed(2),
            Signer::from_seed(3),
        );
        let tx_a = sample_signed(TxType::Eip1559, 0, &a);
        let tx_b = sample_signed(TxType::Eip1559, 0, &b);
        let tx_c = sample_signed(TxType::Eip1559, 0, &c);
        let old = block(5, 0x01, vec![tx_a.clone(), tx_b.clone()]);
        let new = block(5, 0x02, vec![tx_b.clone(), tx_c.clone()]);

        let one = block_update(&chain, &pool, &new);
        assert_eq!(one.head.number, 5);
        assert_eq!(one.mined, vec![tx_b.hash(), tx_c.hash()]);
        assert!(one.reorged.is_empty());
        let mut want = vec![
            b.address(),
            c.address(),
            Address::repeat_byte(0x02),
            Address::repeat_byte(0xee),
        ];
        want.sort_unstable();
        assert_eq!(one.touched, want);

        let update = reorg_update(
            &chain,
            &pool,
            &[old],
            std::slice::from_ref(&new),
            &new.header,
        );
        assert_eq!(update.mined, vec![tx_b.hash(), tx_c.hash()]);
        // The old branch's tx the new one does not hold goes back; the shared one not.
        let back: Vec<B256> = update.reorged.iter().map(|p| p.hash()).collect();
        assert_eq!(back, vec![tx_a.hash()]);
        // Both branches' senders, beneficiaries and withdrawal recipients, once each.
        let mut want = vec![
            a.address(),
            b.address(),
            c.address(),
            Address::repeat_byte(0x01),
            Address::repeat_byte(0x02),
            Address::repeat_byte(0xee),
        ];
        want.sort_unstable();
        assert_eq!(update.touched, want);
    }
}
