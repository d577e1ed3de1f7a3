//! Whether a block satisfies an inclusion list (EIP-7805, FOCIL).
//!
//! The rule, run on the block's post-state: for each tx of the list, in order, skip it if
//! the block carries it, if its gas exceeds the gas the block left, or if its sender's
//! nonce or balance in the post-state rules it out (the nonce must be the account's,
//! the balance must cover gas × fee cap + value, and blob gas × blob fee cap for a blob
//! tx). Any other tx could have been appended: the block does not satisfy the list. Txs
//! that do not decode, or whose signature does not recover, are skipped (a list may hold
//! anything). The pool's side, which txs this node proposes, is
//! `moat_mempool::inclusion`.

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
}
