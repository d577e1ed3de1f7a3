//! What only a development chain does: state edits sealed as blocks (anvil's
//! `anvil_setBalance` and kin) and rewinding the head (`evm_revert`).
//!
//! An edit is not written beside the chain: it is the post-state of a new block on the
//! head, an empty one (its system calls only) whose state root includes the edit. The
//! block goes through the same commit as an imported one, with its undo record, so the
//! head's state root and the stored trie stay one, history reads see the edit at its
//! block, and rewinding below it takes the edit back. Such a block is not what
//! executing it gives, so no other node would import it: the dev chain is private.

use super::{Chain, ChainError};
use crate::history::StateAtBlock;
use crate::payload::{MinerConfig, PayloadAttributes};
use crate::vm::{self, AccountChange, AccountInfo, StateReader, VmError};
use alloy_primitives::{Address, B256, Bytes, KECCAK256_EMPTY, U256, keccak256};
use moat_common::block::Block;

/// One change to an account's state, as anvil's methods ask for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateEdit {
    /// Sets the account's balance (wei).
    Balance(Address, U256),
    /// Sets the account's nonce.
    Nonce(Address, u64),
    /// The account's code (empty: no code).
    Code(Address, Bytes),
    /// One storage slot (zero deletes it).
    Storage(Address, B256, U256),
}

impl StateEdit {
    /// The account the edit changes.
    pub fn address(&self) -> Address {
        match self {
            StateEdit::Balance(a, _)
            | StateEdit::Nonce(a, _)
            | StateEdit::Code(a, _)
            | StateEdit::Storage(a, _, _) => *a,
        }
    }
}

fn state_err(e: VmError) -> ChainError {
    ChainError::State(e.to_string())
}

impl Chain {
    /// Seals on the head a block with no transactions whose post-state is the head's
    /// with `edits` applied (after the block's system calls), makes it the head, and
    /// returns it. The block's number, time and fee recipient come from `attrs` as for
    /// any built block.
    pub fn seal_state_edits(
        &self,
        attrs: &PayloadAttributes,
        miner: &MinerConfig,
        edits: &[StateEdit],
    ) -> Result<Block, ChainError> {
        let _writer = self.writer.lock();
        let _publish = super::PublishHead(self);
        let (_, head) = self.head()?;
        let mut block = self
            .build_payload_from_transactions(head, attrs, miner, Vec::new())?
            .block;
        let state = StateAtBlock::head(self.store.clone());
        let mut executed =
            vm::execute_block(&self.config, &block, &[], &state).map_err(state_err)?;
        for edit in edits {
            let address = edit.address();
            // The account as the block left it: its last change, else the head state.
            let current = match executed.changes.iter().rev().find(|c| c.address == address) {
                Some(change) => change.info,
                None => StateReader::account(&state, &address).map_err(state_err)?,
            };
            let mut info = current.unwrap_or(AccountInfo {
                nonce: 0,
                balance: U256::ZERO,
                code_hash: KECCAK256_EMPTY,
            });
            let mut change = AccountChange {
                address,
                ..Default::default()
            };
            match edit {
                StateEdit::Balance(_, balance) => info.balance = *balance,
                StateEdit::Nonce(_, nonce) => info.nonce = *nonce,
                StateEdit::Code(_, code) => {
                    info.code_hash = if code.is_empty() {
                        KECCAK256_EMPTY
                    } else {
                        keccak256(code)
                    };
                    change.new_code = (!code.is_empty()).then(|| code.clone());
                }
                StateEdit::Storage(_, slot, value) => change.storage = vec![(*slot, *value)],
            }
            change.info = Some(info);
            executed.changes.push(change);
        }
        let update = crate::state_root::state_update(&self.store, &executed.changes)?;
        block.header.state_root = update.root;
        block.hash = block.header.hash();
        self.commit_executed(&block, &executed.receipts, executed.changes, update)?;
        Ok(block)
    }

    /// Marks the head safe and the last multiple of 32 at or below it finalized, as
    /// go-ethereum's dev mode does: a dev chain has no consensus layer to name them.
    pub fn mark_dev_head(&self) -> Result<(), ChainError> {
        let (head, head_hash) = self.head()?;
        let finalized = dev_finalized_number(head);
        let finalized_hash = self.store.canonical_hash(finalized)?.ok_or_else(|| {
            ChainError::Corrupt(format!("no canonical block {finalized} below the head"))
        })?;
        self.set_marks(head_hash, finalized_hash)
    }

    /// Takes the canonical blocks above `number` back through their undo records (head
    /// first) and returns them oldest first; the block at `number` becomes the head. The
    /// chain goes back as far as the undo records reach ([`Chain::undo_floor`]), below
    /// the finalized block too (a dev chain's marks are named again).
    pub fn rewind_to(&self, number: u64) -> Result<Vec<Block>, ChainError> {
        let _writer = self.writer.lock();
        let _publish = super::PublishHead(self);
        let (head, _) = self.head()?;
        if number >= head {
            return Ok(Vec::new());
        }
        let oldest = self.undo_floor()?;
        if number < oldest {
            return Err(ChainError::ReorgTooDeep {
                fork_point: number,
                oldest,
            });
        }
        self.unwind_to(number)
    }
}

/// The block a dev chain at `head` calls finalized: the last multiple of 32 at or below
/// it, as go-ethereum's simulated beacon names it.
fn dev_finalized_number(head: u64) -> u64 {
    const EPOCH: u64 = 32;
    head / EPOCH * EPOCH
}

#[cfg(test)]
mod tests {
    use super::*;
    use moat_common::config::{ChainConfig, Fork, Genesis, GenesisAccount};
    use moat_storage::Store;

    fn chain() -> Chain {
        let store = Store::in_memory();
        let mut alloc = std::collections::BTreeMap::new();
        alloc.insert(
            Address::repeat_byte(1),
            GenesisAccount {
                balance: U256::from(5),
                ..Default::default()
            },
        );
        let genesis = Genesis {
            config: ChainConfig::all_forks_at_genesis(1337, Fork::Cancun),
            gas_limit: 30_000_000,
            alloc,
            base_fee_per_gas: Some(1_000_000_000),
            ..Default::default()
        };
        Chain::init(store, &genesis).unwrap()
    }

    fn attrs(timestamp: u64) -> PayloadAttributes {
        PayloadAttributes {
            timestamp,
            prev_randao: B256::ZERO,
            suggested_fee_recipient: Address::ZERO,
            withdrawals: Some(Vec::new()),
            parent_beacon_block_root: Some(B256::ZERO),
        }
    }

    fn account(chain: &Chain, a: Address) -> Option<AccountInfo> {
        StateReader::account(&StateAtBlock::head(chain.store().clone()), &a).unwrap()
    }

    #[test]
    fn a_dev_chain_finalizes_the_last_multiple_of_32() {
        let cases = [
            (0, 0),
            (1, 0),
            (31, 0),
            (32, 32),
            (33, 32),
            (63, 32),
            (64, 64),
        ];
        for (head, finalized) in cases {
            assert_eq!(dev_finalized_number(head), finalized, "head {head}");
        }
    }

    #[test]
    fn edits_are_a_block_whose_root_is_the_stored_trie_and_rewinding_takes_them_back() {
        let chain = chain();
        let genesis_root = chain.head_header().unwrap().state_root;
        let (a, b) = (Address::repeat_byte(1), Address::repeat_byte(2));
        let code = Bytes::from_static(&[0x60, 0x00]);
        let block = chain
            .seal_state_edits(
                &attrs(12),
                &MinerConfig::default(),
                &[
                    StateEdit::Balance(a, U256::from(7)),
                    StateEdit::Nonce(a, 3),
                    StateEdit::Code(b, code.clone()),
                    StateEdit::Storage(b, B256::with_last_byte(1), U256::from(9)),
                ],
            )
            .unwrap();
        assert_eq!(chain.head().unwrap(), (1, block.hash));
        assert_eq!(block.header.timestamp, 12);
        assert!(block.transactions.is_empty());
        // The head's root is what the stored state hashes to (what a restart checks).
        assert_eq!(
            crate::state_root::stored_state_root(chain.store()).unwrap(),
            block.header.state_root
        );
        assert_ne!(block.header.state_root, genesis_root);
        let info = account(&chain, a).unwrap();
        assert_eq!((info.balance, info.nonce), (U256::from(7), 3));
        let state = StateAtBlock::head(chain.store().clone());
        let b_info = account(&chain, b).unwrap();
        assert_eq!(b_info.code_hash, keccak256(&code));
        assert_eq!(state.code(&b_info.code_hash).unwrap(), Some(code));
        assert_eq!(
            state.storage(&b, &B256::with_last_byte(1)).unwrap(),
            U256::from(9)
        );

        // Back to genesis: the edits are gone and the root is genesis's again.
        let removed = chain.rewind_to(0).unwrap();
        assert_eq!(removed.len(), 1);
        assert_eq!(chain.head().unwrap().0, 0);
        assert_eq!(account(&chain, a).unwrap().balance, U256::from(5));
        assert_eq!(account(&chain, b), None);
        assert_eq!(
            crate::state_root::stored_state_root(chain.store()).unwrap(),
            genesis_root
        );
        // Rewinding to the head or above changes nothing.
        assert!(chain.rewind_to(0).unwrap().is_empty());
        assert!(chain.rewind_to(5).unwrap().is_empty());
    }
}
