//! The seeded plain stream: the funded senders, the tool's genesis, and per sender
//! transfers at nonces in order with skewed tips, held-back nonces, replacements,
//! duplicates and the invalid classes, the senders interleaved at random. Also the
//! seeded generator and the interleaving the blob stream shares.

use crate::tx::{Class, StreamTx};
use crate::{ETHER, GAS_LIMIT, GWEI, TRANSFER_GAS};
use alloy_primitives::{Address, B256, Bytes, TxKind, U256, keccak256};
use moat_common::config::{Genesis, GenesisAccount};
use moat_common::transaction::{Eip1559Tx, Transaction};
use moat_common::{PooledTransaction, SignedTransaction};
use moat_crypto::secp::Signer;

/// The settings of a stream.
#[derive(Debug, Clone)]
pub struct StreamParams {
    /// Seeds the stream's choices (the keys are fixed): same seed, same stream.
    pub seed: u64,
    /// Funded senders the stream comes from (the length of [`senders`]' list).
    pub senders: usize,
    /// Nonces per sender at most (each gets 1..=this).
    pub max_nonces: u64,
}

impl Default for StreamParams {
    fn default() -> Self {
        Self {
            seed: 1,
            senders: 200,
            max_nonces: 20,
        }
    }
}

/// A small xorshift, so streams are the same on every machine.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The funded senders: deterministic keys; one in ten is poor (0.0002 ether: a few txs).
pub fn senders(n: usize) -> Vec<(Signer, U256)> {
    (0..n)
        .map(|i| {
            let signer = Signer::from_seed(10_000 + i as u64);
            let balance = if i % 10 == 9 {
                U256::from(ETHER / 5_000)
            } else {
                U256::from(100 * ETHER)
            };
            (signer, balance)
        })
        .collect()
}

/// The tool's genesis: the ethtest chain's config and alloc (its system contracts), the
/// senders funded, a 30M gas limit.
pub fn genesis(ethtest_genesis: &str, senders: &[(Signer, U256)]) -> Result<Genesis, String> {
    let mut g = Genesis::from_json(ethtest_genesis).map_err(|e| e.to_string())?;
    g.gas_limit = GAS_LIMIT;
    for (s, balance) in senders {
        g.alloc.insert(
            s.address(),
            GenesisAccount {
                balance: *balance,
                ..Default::default()
            },
        );
    }
    Ok(g)
}

pub(crate) fn sign(signer: &Signer, tx: Eip1559Tx) -> (Bytes, B256) {
    let p = PooledTransaction::new(
        SignedTransaction::sign(Transaction::Eip1559(tx), signer),
        None,
    );
    (p.encoded_2718().into(), p.hash())
}

/// The seeded stream for `chain_id`, valid fee caps being above `base_fee`.
pub fn stream(
    params: &StreamParams,
    chain_id: u64,
    base_fee: u128,
    senders: &[(Signer, U256)],
) -> Vec<StreamTx> {
    let mut rng = Rng(params.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut per_sender: Vec<Vec<StreamTx>> = Vec::with_capacity(senders.len());
    let mut late: Vec<StreamTx> = Vec::new();
    for (i, (signer, balance)) in senders.iter().enumerate() {
        let remote = i % 2 == 1;
        let k = 1 + rng.below(params.max_nonces);
        let held = rng.chance(20).then(|| rng.below(k));
        let mut list = Vec::new();
        let mut spent = U256::ZERO;
        for nonce in 0..k {
            // Skewed tips: most low, a few high.
            let r = rng.below(1000);
            let tip = GWEI / 10 + u128::from(r * r) * GWEI / 10_000;
            let max_fee = 2 * base_fee + tip;
            let value = U256::from(1 + rng.below(1000)) * U256::from(GWEI);
            let tx = Eip1559Tx {
                chain_id,
                nonce,
                max_priority_fee_per_gas: tip,
                max_fee_per_gas: max_fee,
                gas_limit: TRANSFER_GAS,
                to: TxKind::Call(Address::from_slice(&keccak256(nonce.to_be_bytes())[..20])),
                value,
                input: Bytes::new(),
                access_list: Vec::new(),
            };
            let cost = U256::from(max_fee) * U256::from(TRANSFER_GAS) + value;
            spent += cost;
            let (raw, hash) = sign(signer, tx.clone());
            let includable = spent <= *balance;
            let main = StreamTx {
                class: if held == Some(nonce) {
                    Class::GapFiller
                } else {
                    Class::Valid
                },
                sender: i,
                nonce,
                tip,
                max_fee,
                value,
                blobs: 0,
                blob_fee: 0,
                raw,
                hash,
                remote,
                includable,
            };
            // Invalid variants of this nonce, sent before the real one.
            let invalid = match rng.below(100) {
                0..=2 => Some((
                    Class::Underpriced,
                    Eip1559Tx {
                        max_priority_fee_per_gas: 0,
                        ..tx.clone()
                    },
                )),
                3..=5 => Some((
                    Class::Unaffordable,
                    Eip1559Tx {
                        value: *balance + U256::from(1),
                        ..tx.clone()
                    },
                )),
                6 => Some((
                    Class::Oversized,
                    Eip1559Tx {
                        input: Bytes::from(vec![1u8; 130 * 1024]),
                        gas_limit: 3_000_000,
                        ..tx.clone()
                    },
                )),
                7..=8 => Some((
                    Class::LowGas,
                    Eip1559Tx {
                        gas_limit: 20_000,
                        ..tx.clone()
                    },
                )),
                9..=10 => Some((
                    Class::WrongChain,
                    Eip1559Tx {
                        chain_id: chain_id + 1,
                        ..tx.clone()
                    },
                )),
                _ => None,
            };
            // A held nonce's every copy comes last, or an early one would fill the gap.
            let dest = if held == Some(nonce) {
                &mut late
            } else {
                &mut list
            };
            if let Some((class, bad)) = invalid {
                let (raw, hash) = sign(signer, bad.clone());
                dest.push(StreamTx {
                    class,
                    sender: i,
                    nonce,
                    tip: bad.max_priority_fee_per_gas,
                    max_fee: bad.max_fee_per_gas,
                    value: bad.value,
                    blobs: 0,
                    blob_fee: 0,
                    raw,
                    hash,
                    remote,
                    // A zero tip is valid on chain (a pool may refuse it from a peer);
                    // the other classes are not.
                    includable: class == Class::Underpriced && includable,
                });
            }
            dest.push(main.clone());
            if rng.chance(10) {
                // A replacement at a bump of 0–100 %.
                let bump = [0u128, 5, 10, 12, 50, 100][rng.below(6) as usize];
                let tip2 = main.tip * (100 + bump) / 100;
                let fee2 = main.max_fee * (100 + bump) / 100;
                let tx2 = Eip1559Tx {
                    max_priority_fee_per_gas: tip2,
                    max_fee_per_gas: fee2,
                    ..tx.clone()
                };
                let cost2 = U256::from(fee2) * U256::from(TRANSFER_GAS) + value;
                let (raw, hash) = sign(signer, tx2);
                let entry = StreamTx {
                    class: Class::Replacement,
                    sender: i,
                    nonce,
                    tip: tip2,
                    max_fee: fee2,
                    value,
                    blobs: 0,
                    blob_fee: 0,
                    raw,
                    hash,
                    remote,
                    includable: spent - cost + cost2 <= *balance,
                };
                dest.push(entry);
            }
            if rng.chance(5) {
                dest.push(StreamTx {
                    class: Class::Duplicate,
                    ..main.clone()
                });
            }
        }
        per_sender.push(list);
    }
    // Interleave the senders at random, each sender's own order kept; held nonces last.
    interleave(&mut rng, per_sender, late)
}

/// Interleaves the senders' lists at random, each sender's own order kept; `late` last.
pub(crate) fn interleave(
    rng: &mut Rng,
    per_sender: Vec<Vec<StreamTx>>,
    late: Vec<StreamTx>,
) -> Vec<StreamTx> {
    let mut cursors: Vec<usize> = vec![0; per_sender.len()];
    let mut left: usize = per_sender.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(left + late.len());
    while left > 0 {
        let s = rng.below(per_sender.len() as u64) as usize;
        if cursors[s] < per_sender[s].len() {
            out.push(per_sender[s][cursors[s]].clone());
            cursors[s] += 1;
            left -= 1;
        }
    }
    out.extend(late);
    out
}
