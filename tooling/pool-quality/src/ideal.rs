//! The yardstick: what the first built block allows ([`BlockLimits`]: base fees, gas and
//! blob room) and the most valuable block a stream allows under the pools' rules
//! ([`ideal_value`], [`ideal_block`]): an exact knapsack over each sender's includable
//! nonce run, by dynamic programming over the block's transfers and blobs.

use crate::TRANSFER_GAS;
use crate::tx::StreamTx;
use alloy_primitives::U256;
use moat_common::config::Genesis;
use moat_crypto::secp::Signer;
use std::collections::BTreeMap;

/// The replacement rule every pool applies (geth's `--txpool.pricebump`): a later tx at a
/// sender's nonce takes the place of the one held only with 10 % more on both fees.
pub const PRICE_BUMP: u128 = 10;
/// The same for blob txs (geth's `--blobpool.pricebump`), on all three fees.
pub const BLOB_PRICE_BUMP: u128 = 100;

/// What the first built block allows: its base fees and its gas and blob room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockLimits {
    /// Base fee per gas of the block, wei.
    pub base_fee: u128,
    /// Blob base fee per blob gas of the block, wei (0 before blobs are active).
    pub blob_base_fee: u128,
    /// Gas limit of the block, moving from the genesis' toward [`MINER_GAS_LIMIT`].
    pub gas_limit: u64,
    /// Blobs the block may carry (the fork's blob schedule maximum).
    pub max_blobs: u64,
}

impl BlockLimits {
    /// The limits of block 1 on `genesis`, built at [`BLOCK_TIME`] toward geth's default
    /// gas limit target ([`MINER_GAS_LIMIT`]), as both nodes build it.
    pub fn first(genesis: &Genesis) -> Self {
        let params = genesis.config.blob_params_at(BLOCK_TIME);
        Self {
            base_fee: first_base_fee(genesis),
            blob_base_fee: params.map_or(0, |p| {
                moat_common::fees::blob_base_fee(genesis.excess_blob_gas.unwrap_or(0), &p)
            }),
            gas_limit: moat_blockchain::payload::next_gas_limit(genesis.gas_limit, MINER_GAS_LIMIT),
            max_blobs: params.map_or(0, |p| p.max),
        }
    }
}

/// geth's default `--miner.gaslimit` (moat's too): block 1 of the tool's 30M genesis has
/// 30,029,295 gas, room for 1,429 transfers.
pub const MINER_GAS_LIMIT: u64 = 60_000_000;

/// The timestamp of the built block: past the ethtest chain's Prague (120).
pub const BLOCK_TIME: u64 = 212;

/// The most valuable block the stream allows. Per sender and nonce, the tx that holds the
/// nonce once the stream is over: the first includable one (a remote one must pay a tip:
/// the least a pool takes from a peer), replaced in arrival order by any later one that
/// bumps every fee by [`PRICE_BUMP`] % ([`BLOB_PRICE_BUMP`] % for blob txs), of the kind
/// (blob or not) of the sender's first such tx, as pools hold one kind per sender. Per sender,
/// those txs in an unbroken run from nonce 0 that the sender can afford and that pay the
/// block's base fees; the block takes a prefix of each run, at most `gas_limit / 21,000`
/// txs and `max_blobs` blobs in all. Exact: a knapsack over the prefixes by dynamic
/// programming over (txs, blobs). Value: Σ effective tip × gas (the block value; blob fees
/// are burned).
pub fn ideal_value(stream: &[StreamTx], senders: &[(Signer, U256)], block: &BlockLimits) -> U256 {
    ideal_block(stream, senders, block).0
}

/// [`ideal_value`] with the block itself: per sender (index) the length of the prefix of
/// its run that the most valuable block takes (senders it takes nothing of are left out).
pub fn ideal_block(
    stream: &[StreamTx],
    senders: &[(Signer, U256)],
    block: &BlockLimits,
) -> (U256, BTreeMap<usize, usize>) {
    let base_fee = block.base_fee;
    let cap = (block.gas_limit / TRANSFER_GAS) as usize;
    let blob_cap = if stream.iter().any(|t| t.blobs > 0) {
        block.max_blobs as usize
    } else {
        0
    };
    let width = blob_cap + 1;
    let replaces = |new: &StreamTx, old: &StreamTx| {
        let bump = if old.blobs > 0 {
            BLOB_PRICE_BUMP
        } else {
            PRICE_BUMP
        };
        let bumped = |v: u128| v * (100 + bump) / 100;
        new.tip >= bumped(old.tip)
            && new.max_fee >= bumped(old.max_fee)
            && new.blob_fee >= bumped(old.blob_fee)
    };
    let poolable = |t: &&StreamTx| t.includable && (!t.remote || t.tip > 0);
    // A pool holds one kind of tx per sender: the kind of the first it can hold.
    let mut blob_sender: BTreeMap<usize, bool> = BTreeMap::new();
    for tx in stream.iter().filter(poolable) {
        blob_sender.entry(tx.sender).or_insert(tx.blobs > 0);
    }
    let mut held: BTreeMap<(usize, u64), &StreamTx> = BTreeMap::new();
    for tx in stream
        .iter()
        .filter(poolable)
        .filter(|t| blob_sender.get(&t.sender) == Some(&(t.blobs > 0)))
    {
        let slot = held.entry((tx.sender, tx.nonce)).or_insert(tx);
        if replaces(tx, slot) {
            *slot = tx;
        }
    }
    // dp[txs * width + blobs]: the best value with exactly that many txs and blobs.
    let mut dp = vec![None::<u128>; (cap + 1) * width];
    dp[0] = Some(0);
    // Per sender with a run: the prefix (txs, blobs) taken to reach each cell, for the
    // walk back.
    let mut taken: Vec<(usize, Vec<(u16, u16)>)> = Vec::new();
    for (i, (_, balance)) in senders.iter().enumerate() {
        // (txs, blobs, value) of each prefix of the sender's run.
        let mut prefix = vec![(0usize, 0usize, 0u128)];
        let mut spent = U256::ZERO;
        for nonce in 0.. {
            let Some(tx) = held.get(&(i, nonce)) else {
                break;
            };
            if tx.max_fee < base_fee || (tx.blobs > 0 && tx.blob_fee < block.blob_base_fee) {
                break;
            }
            spent += U256::from(tx.max_fee) * U256::from(TRANSFER_GAS)
                + tx.value
                + U256::from(tx.blob_fee) * U256::from(tx.blobs * GAS_PER_BLOB);
            if spent > *balance {
                break;
            }
            let (n, b, v) = *prefix.last().expect("starts with the empty prefix");
            prefix.push((
                n + 1,
                b + tx.blobs as usize,
                v + eff(tx, base_fee) * u128::from(TRANSFER_GAS),
            ));
        }
        if prefix.len() == 1 {
            continue;
        }
        let mut next = dp.clone();
        let mut choice = vec![(0u16, 0u16); (cap + 1) * width];
        for used in 0..=cap {
            for blobs in 0..width {
                let Some(have) = dp[used * width + blobs] else {
                    continue;
                };
                for &(n, b, v) in &prefix[1..] {
                    if used + n > cap || blobs + b > blob_cap {
                        break;
                    }
                    let at = (used + n) * width + blobs + b;
                    if next[at].is_none_or(|c| have + v > c) {
                        next[at] = Some(have + v);
                        choice[at] = (n as u16, b as u16);
                    }
                }
            }
        }
        dp = next;
        taken.push((i, choice));
    }
    let best = (0..dp.len()).max_by_key(|at| dp[*at]).unwrap_or(0);
    let value = dp[best].unwrap_or(0);
    let mut chosen = BTreeMap::new();
    let mut at = best;
    for (i, choice) in taken.iter().rev() {
        let (n, b) = choice[at];
        if n > 0 {
            chosen.insert(*i, n as usize);
            at -= n as usize * width + b as usize;
        }
    }
    (U256::from(value), chosen)
}

/// Blob gas of one blob.
pub const GAS_PER_BLOB: u64 = 131_072;

fn eff(tx: &StreamTx, base_fee: u128) -> u128 {
    tx.tip.min(tx.max_fee.saturating_sub(base_fee))
}

/// The base fee of block 1 on `genesis` (its first built block).
pub fn first_base_fee(genesis: &Genesis) -> u128 {
    let h = genesis.header();
    u128::from(moat_common::fees::next_base_fee(
        h.gas_used,
        h.gas_limit,
        h.base_fee_per_gas.unwrap_or_default(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GAS_LIMIT;
    use crate::stream::senders;
    use crate::tx::Class;
    use alloy_primitives::{B256, Bytes};

    fn tx(sender: usize, nonce: u64, tip: u128, blobs: u64) -> StreamTx {
        StreamTx {
            class: Class::Valid,
            sender,
            nonce,
            tip,
            max_fee: 1_000 + tip,
            value: U256::ZERO,
            blobs,
            blob_fee: u128::from(blobs > 0),
            raw: Bytes::new(),
            hash: B256::ZERO,
            remote: false,
            includable: true,
        }
    }

    fn limits(gas_limit: u64, max_blobs: u64) -> BlockLimits {
        BlockLimits {
            base_fee: 1_000,
            blob_base_fee: 1,
            gas_limit,
            max_blobs,
        }
    }

    #[test]
    fn the_ideal_respects_nonce_order_and_the_block_size() {
        let senders = senders(3);
        // Sender 0: a cheap nonce 0 unlocks a rich nonce 1; sender 1: one middling tx.
        let s = vec![
            tx(0, 0, 1, 0),
            tx(0, 1, 100, 0),
            tx(1, 0, 60, 0),
            tx(2, 1, 500, 0),
        ];
        let g = u128::from(TRANSFER_GAS);
        // Room for two: 1 + 100 beats 60 + 1 (sender 2's nonce 1 has no nonce 0).
        assert_eq!(
            ideal_value(&s, &senders, &limits(2 * TRANSFER_GAS, 0)),
            U256::from(101 * g)
        );
        assert_eq!(
            ideal_value(&s, &senders, &limits(TRANSFER_GAS, 0)),
            U256::from(60 * g)
        );
        // The block itself: per sender the prefix of its run it takes.
        let (_, runs) = ideal_block(&s, &senders, &limits(2 * TRANSFER_GAS, 0));
        assert_eq!(runs, BTreeMap::from([(0, 2)]));
        let (_, runs) = ideal_block(&s, &senders, &limits(3 * TRANSFER_GAS, 0));
        assert_eq!(runs, BTreeMap::from([(0, 2), (1, 1)]));
    }

    #[test]
    fn the_ideal_packs_the_blobs() {
        let senders = senders(4);
        let g = u128::from(TRANSFER_GAS);
        // Room for 3 blobs: three 1-blob txs at 90 beat a 2-blob one at 100 and one at 90.
        let s = vec![
            tx(0, 0, 100, 2),
            tx(1, 0, 90, 1),
            tx(2, 0, 90, 1),
            tx(3, 0, 90, 1),
        ];
        assert_eq!(
            ideal_value(&s, &senders, &limits(GAS_LIMIT, 3)),
            U256::from(270 * g)
        );
        // A blob replacement needs 100 % on every fee: 150 % of the tip alone is not one.
        let mut r = tx(1, 0, 180, 1);
        r.max_fee = 1_000 + 90;
        let s = vec![tx(1, 0, 90, 1), r];
        assert_eq!(
            ideal_value(&s, &senders, &limits(GAS_LIMIT, 3)),
            U256::from(90 * g)
        );
    }
}
