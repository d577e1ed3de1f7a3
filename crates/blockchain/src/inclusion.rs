//! Whether a block satisfies an inclusion list (EIP-7805, FOCIL).
//!
//! The rule, run on the block's post-state: for each tx of the list, in order, skip it if
//! the block carries it, if its gas exceeds the gas the block left, or if its sender's
//! nonce or balance in the post-state rules it out (the nonce must be the account's,
//! the balance must cover gas × fee cap + value, and blob gas × blob fee cap for a blob
//! tx). Any other tx could have been appended: the block does not satisfy the list. Txs
//! that do not decode, or whose signature does not recover, are skipped (a list may hold
//! anything). [`appendable`] is the builder's side: what to append to satisfy a list
//! (`Chain::build_payload_satisfying`). The pool's side, which txs this node proposes,
//! is `moat_mempool::inclusion`.

use alloy_primitives::{Address, B256, Bytes, U256};
use moat_common::SignedTransaction;
use std::collections::HashSet;

/// The first tx of `list` the block could have appended but did not: `None` when the
/// block satisfies the list. `in_block` holds the block's tx hashes, `gas_left` the gas
/// it left unused, and `account` answers (nonce, balance) on the block's post-state.
pub fn unsatisfied_by(
    list: &[Bytes],
    in_block: &HashSet<B256>,
    gas_left: u64,
    account: impl Fn(&Address) -> (u64, U256),
) -> Option<B256> {
    for envelope in list {
        let Ok(tx) = SignedTransaction::decode_2718(envelope) else {
            continue;
        };
        let hash = tx.hash();
        if in_block.contains(&hash) || tx.tx().gas_limit() > gas_left {
            continue;
        }
        let Ok(sender) = tx.recover_sender() else {
            continue;
        };
        let (nonce, balance) = account(&sender);
        if tx.tx().nonce() == nonce && balance >= tx.tx().max_cost() {
            return Some(hash);
        }
    }
    None
}

/// The txs of `list` a block could still append, in list order, with their senders:
/// each one the block does not carry (nor `skip`), that fits the gas left, and whose
/// nonce and balance are right on the state so far — the post-state `account` answers,
/// then each appended tx's nonce, gas and maximal cost taken into account for the next.
/// What a builder appends to satisfy the list; after them, [`unsatisfied_by`] finds
/// nothing on the same figures. Blob txs are not appended (their sidecars do not travel
/// with a list).
pub fn appendable(
    list: &[Bytes],
    skip: &HashSet<B256>,
    mut gas_left: u64,
    account: impl Fn(&Address) -> (u64, U256),
) -> Vec<(SignedTransaction, Address)> {
    // Decoded and recovered once (a list is at most 8 KiB, but passes repeat).
    let mut candidates: Vec<Option<(SignedTransaction, Address)>> = list
        .iter()
        .filter_map(|envelope| SignedTransaction::decode_2718(envelope).ok())
        .filter(|tx| !skip.contains(&tx.hash()) && tx.tx_type() != moat_common::TxType::Eip4844)
        .filter_map(|tx| {
            let sender = tx.recover_sender().ok()?;
            Some(Some((tx, sender)))
        })
        .collect();
    let mut out = Vec::new();
    let mut state: std::collections::HashMap<Address, (u64, U256)> = Default::default();
    // A tx appended lets the list's next nonce of its sender in: go again until none.
    loop {
        let before = out.len();
        for slot in candidates.iter_mut() {
            let Some((tx, sender)) = slot.as_ref() else {
                continue;
            };
            if tx.tx().gas_limit() > gas_left {
                continue;
            }
            let (nonce, balance) = *state.entry(*sender).or_insert_with(|| account(sender));
            let cost = tx.tx().max_cost();
            if tx.tx().nonce() != nonce || balance < cost {
                continue;
            }
            gas_left -= tx.tx().gas_limit();
            state.insert(*sender, (nonce + 1, balance - cost));
            if let Some(taken) = slot.take() {
                out.push(taken);
            }
        }
        if out.len() == before {
            return out;
        }
    }
}

impl crate::chain::Chain {
    /// What newPayload's `inclusionListSatisfied` (EIP-7805, execution-apis `bogota.md`)
    /// says of canonical block `block` and `list`: the first listed tx it could have
    /// appended, judged on its post-state ([`unsatisfied_by`]), or `None` when it
    /// satisfies the list. A block off the canonical chain, or past the kept history, is
    /// an error.
    pub fn inclusion_list_unsatisfied(
        &self,
        block: &moat_common::block::Block,
        list: &[Bytes],
    ) -> Result<Option<B256>, crate::chain::ChainError> {
        if self.store().canonical_hash(block.header.number)? != Some(block.hash) {
            return Err(crate::chain::ChainError::UnknownBlock(block.hash));
        }
        let state = self.state_at(block.header.number)?;
        let carried: HashSet<B256> = block.transactions.iter().map(|t| t.hash()).collect();
        let gas_left = block.header.gas_limit.saturating_sub(block.header.gas_used);
        Ok(unsatisfied_by(list, &carried, gas_left, |a| {
            state
                .account(a)
                .ok()
                .flatten()
                .map_or((0, U256::ZERO), |acc| (acc.nonce, acc.balance))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::TxKind;
    use moat_common::transaction::{Eip1559Tx, Transaction};
    use moat_crypto::secp::Signer;

    fn tx(signer: &Signer, nonce: u64, gas: u64) -> SignedTransaction {
        SignedTransaction::sign(
            Transaction::Eip1559(Eip1559Tx {
                chain_id: 1,
                nonce,
                max_priority_fee_per_gas: 1,
                max_fee_per_gas: 10,
                gas_limit: gas,
                to: TxKind::Call(Address::repeat_byte(1)),
                value: U256::from(5),
                ..Default::default()
            }),
            signer,
        )
    }

    #[test]
    fn a_block_satisfies_a_list_unless_it_left_out_a_tx_it_could_have_appended() {
        let a = Signer::from_seed(1);
        let t = tx(&a, 3, 21_000);
        let list = vec![
            Bytes::from(t.encoded_2718()),
            Bytes::from_static(b"\x02junk"),
        ];
        let rich = |_: &Address| (3, U256::from(1_000_000));
        // Left out, with room, nonce and funds: unsatisfied.
        assert_eq!(
            unsatisfied_by(&list, &HashSet::new(), 30_000, rich),
            Some(t.hash())
        );
        // Carried by the block.
        let carried: HashSet<B256> = [t.hash()].into();
        assert_eq!(unsatisfied_by(&list, &carried, 30_000, rich), None);
        // No room left for its gas.
        assert_eq!(unsatisfied_by(&list, &HashSet::new(), 20_999, rich), None);
        // Its nonce is not the account's (used in the block, or ahead).
        assert_eq!(
            unsatisfied_by(&list, &HashSet::new(), 30_000, |_| (
                4,
                U256::from(1_000_000)
            )),
            None
        );
        // The account cannot pay gas × fee cap + value (210,005 wei).
        assert_eq!(
            unsatisfied_by(&list, &HashSet::new(), 30_000, |_| (3, U256::from(210_004))),
            None
        );
        assert_eq!(
            unsatisfied_by(&list, &HashSet::new(), 30_000, |_| (3, U256::from(210_005))),
            Some(t.hash())
        );
    }

    #[test]
    fn what_a_builder_appends_leaves_the_list_satisfied() {
        let (a, b) = (Signer::from_seed(1), Signer::from_seed(2));
        // a's nonces 4 then 3 (listed out of order), b's 0 too big for the gas, a junk item.
        let (a3, a4, big) = (tx(&a, 3, 21_000), tx(&a, 4, 21_000), tx(&b, 0, 50_000));
        let list: Vec<Bytes> = [&a4, &a3, &big]
            .iter()
            .map(|t| Bytes::from(t.encoded_2718()))
            .chain([Bytes::from_static(b"\x02junk")])
            .collect();
        let account = |addr: &Address| {
            if *addr == a.address() {
                (3, U256::from(1_000_000))
            } else {
                (0, U256::from(1_000_000))
            }
        };
        let got = appendable(&list, &HashSet::new(), 45_000, account);
        let hashes: Vec<B256> = got.iter().map(|(t, _)| t.hash()).collect();
        assert_eq!(hashes, vec![a3.hash(), a4.hash()]);
        assert!(got.iter().all(|(_, s)| *s == a.address()));
        // With them carried, the list is satisfied on the block's figures.
        let carried: HashSet<B256> = hashes.into_iter().collect();
        let after = |addr: &Address| {
            if *addr == a.address() {
                (5, U256::from(1_000_000 - 2 * 210_005))
            } else {
                (0, U256::from(1_000_000))
            }
        };
        assert_eq!(unsatisfied_by(&list, &carried, 3_000, after), None);
        // Funds for one only: the second is not appended.
        let poor = |_: &Address| (3, U256::from(300_000));
        assert_eq!(appendable(&list, &HashSet::new(), 100_000, poor).len(), 1);
    }
}
