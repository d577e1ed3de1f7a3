//! `moat-pool-quality`: how much a block built from a pool is worth, against the most
//! valuable block the same stream of transactions allowed.
//!
//! A seeded stream comes from a genesis of the tool's own (the ethtest chain's config and
//! system contracts, a 30M gas limit, thousands of funded senders, one in ten poor):
//!
//! ```text
//!  per sender: nonces 0..k in order, tips skewed ─┬─ a held-back nonce sent last (gap + filler)
//!                                                 ├─ replacements at 0–100 % bumps, duplicates
//!                                                 └─ invalid classes: underpriced, unaffordable,
//!                                                    oversized, low gas, wrong chain
//!  senders interleaved at random, each delivered as local (RPC) or remote (a peer)
//! ```
//!
//! [`run_in_process`] feeds the stream through a moat pool over an in-memory chain, then
//! builds one payload; [`ideal_value`] is the exact optimum (a knapsack over each sender's
//! valid nonce prefix, solved by dynamic programming over the block's transfer count). The
//! binary also feeds the stream to any node over RPC and builds through its engine API.

use alloy_primitives::{Address, B256, Bytes, TxKind, U256, keccak256};
use moat_blockchain::chain::Chain;
use moat_blockchain::mempool::{Pool, PoolConfig, TxInput, TxOrigin};
use moat_blockchain::payload::{MinerConfig, PayloadAttributes};
use moat_common::config::{Genesis, GenesisAccount};
use moat_common::transaction::{Eip1559Tx, Transaction};
use moat_common::{PooledTransaction, SignedTransaction};
use moat_crypto::secp::Signer;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Gas of a plain transfer.
pub const TRANSFER_GAS: u64 = 21_000;
/// The tool genesis' block gas limit: a block holds 1,428 transfers.
pub const GAS_LIMIT: u64 = 30_000_000;
const ETHER: u128 = 1_000_000_000_000_000_000;
const GWEI: u128 = 1_000_000_000;

/// What a stream transaction is meant to exercise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    Valid,
    /// A nonce held back and sent last: until it arrives, its sender's later txs wait.
    GapFiller,
    Replacement,
    Duplicate,
    /// A tip under the least a remote tx must pay (0).
    Underpriced,
    /// A value above the sender's balance.
    Unaffordable,
    /// Input above the 128 KiB a pooled tx may carry.
    Oversized,
    /// Gas below the intrinsic 21,000.
    LowGas,
    WrongChain,
}

impl Class {
    pub const ALL: [Class; 9] = [
        Class::Valid,
        Class::GapFiller,
        Class::Replacement,
        Class::Duplicate,
        Class::Underpriced,
        Class::Unaffordable,
        Class::Oversized,
        Class::LowGas,
        Class::WrongChain,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Class::Valid => "valid",
            Class::GapFiller => "gap-filler",
            Class::Replacement => "replacement",
            Class::Duplicate => "duplicate",
            Class::Underpriced => "underpriced",
            Class::Unaffordable => "unaffordable",
            Class::Oversized => "oversized",
            Class::LowGas => "low-gas",
            Class::WrongChain => "wrong-chain",
        }
    }
}

/// One transaction of the stream.
#[derive(Debug, Clone)]
pub struct StreamTx {
    pub class: Class,
    pub sender: usize,
    pub nonce: u64,
    pub tip: u128,
    pub max_fee: u128,
    pub value: U256,
    pub raw: Bytes,
    pub hash: B256,
    /// Delivered by a peer (else over RPC, as a local tx).
    pub remote: bool,
    /// Valid against the chain (whatever a pool makes of it): a builder could include it.
    pub includable: bool,
}

/// The settings of a stream.
#[derive(Debug, Clone)]
pub struct StreamParams {
    pub seed: u64,
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
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
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

fn sign(signer: &Signer, tx: Eip1559Tx) -> (Bytes, B256) {
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
            if let Some((class, bad)) = invalid {
                let (raw, hash) = sign(signer, bad.clone());
                list.push(StreamTx {
                    class,
                    sender: i,
                    nonce,
                    tip: bad.max_priority_fee_per_gas,
                    max_fee: bad.max_fee_per_gas,
                    value: bad.value,
                    raw,
                    hash,
                    remote,
                    // A zero tip is valid on chain (a pool may refuse it from a peer);
                    // the other classes are not.
                    includable: class == Class::Underpriced && includable,
                });
            }
            if held == Some(nonce) {
                late.push(main.clone());
            } else {
                list.push(main.clone());
            }
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
                    raw,
                    hash,
                    remote,
                    includable: spent - cost + cost2 <= *balance,
                };
                if held == Some(nonce) {
                    late.push(entry);
                } else {
                    list.push(entry);
                }
            }
            if rng.chance(5) {
                list.push(StreamTx {
                    class: Class::Duplicate,
                    ..main.clone()
                });
            }
        }
        per_sender.push(list);
    }
    // Interleave the senders at random, each sender's own order kept; held nonces last.
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

/// The replacement rule every pool applies (geth's `--txpool.pricebump`): a later tx at a
/// sender's nonce takes the place of the one held only with 10 % more on both fees.
pub const PRICE_BUMP: u128 = 10;

/// The most valuable block the stream allows. Per sender and nonce, the tx that holds the
/// nonce once the stream is over: the first includable one (a remote one must pay a tip:
/// the least a pool takes from a peer), replaced in arrival order by any later one that
/// bumps both fees by [`PRICE_BUMP`] %. Per sender, those txs in an unbroken run from nonce
/// 0 that the sender can afford; the block takes a prefix of each run, at most
/// `gas_limit / 21,000` txs in all. Exact: a knapsack over the prefixes by dynamic
/// programming. Value: Σ effective tip × gas (the block value).
pub fn ideal_value(
    stream: &[StreamTx],
    senders: &[(Signer, U256)],
    base_fee: u128,
    gas_limit: u64,
) -> U256 {
    let cap = (gas_limit / TRANSFER_GAS) as usize;
    let bumped = |v: u128| v * (100 + PRICE_BUMP) / 100;
    let mut held: BTreeMap<(usize, u64), &StreamTx> = BTreeMap::new();
    for tx in stream
        .iter()
        .filter(|t| t.includable && (!t.remote || t.tip > 0))
    {
        let slot = held.entry((tx.sender, tx.nonce)).or_insert(tx);
        if tx.tip >= bumped(slot.tip) && tx.max_fee >= bumped(slot.max_fee) {
            *slot = tx;
        }
    }
    let mut dp = vec![0u128; cap + 1];
    for (i, (_, balance)) in senders.iter().enumerate() {
        let mut prefix = vec![0u128];
        let mut spent = U256::ZERO;
        for nonce in 0.. {
            let Some(tx) = held.get(&(i, nonce)) else {
                break;
            };
            if tx.max_fee < base_fee {
                break;
            }
            spent += U256::from(tx.max_fee) * U256::from(TRANSFER_GAS) + tx.value;
            if spent > *balance {
                break;
            }
            prefix.push(prefix.last().unwrap() + eff(tx, base_fee) * u128::from(TRANSFER_GAS));
        }
        if prefix.len() == 1 {
            continue;
        }
        let mut next = dp.clone();
        for used in 0..=cap {
            for (j, v) in prefix.iter().enumerate().skip(1) {
                if used + j > cap {
                    break;
                }
                next[used + j] = next[used + j].max(dp[used] + v);
            }
        }
        dp = next;
    }
    U256::from(dp.into_iter().max().unwrap_or(0))
}

fn eff(tx: &StreamTx, base_fee: u128) -> u128 {
    tx.tip.min(tx.max_fee.saturating_sub(base_fee))
}

/// What a pool made of a stream.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Per class: (accepted, refused).
    pub by_class: BTreeMap<Class, (usize, usize)>,
    /// Refusal reasons with counts.
    pub reasons: BTreeMap<String, usize>,
    /// Txs per subpool after the stream: pending, basefee, queued, blob.
    pub subpools: [usize; 4],
    pub payload_txs: usize,
    pub payload_value: U256,
}

/// Feeds `stream` through a moat pool over an in-memory chain on `genesis` (remote txs
/// as a peer's, local ones as RPC's), then builds one payload with geth's least tip of 0
/// (a stream's tips are all above it anyway) and returns what happened.
pub async fn run_in_process(
    genesis: &Genesis,
    stream: &[StreamTx],
    pool_cfg: impl FnOnce(&mut PoolConfig),
) -> Result<Outcome, String> {
    let store = moat_storage::Store::in_memory();
    let chain = Chain::init(store.clone(), genesis).map_err(|e| e.to_string())?;
    let mut cfg = PoolConfig::new(chain.config().clone());
    pool_cfg(&mut cfg);
    let view = moat_rpc::StoreStateView::new(store, chain.config().clone());
    let pool = Pool::new(cfg, Arc::new(view));
    let mut out = Outcome::default();
    for tx in stream {
        let origin = if tx.remote {
            TxOrigin::Peer(alloy_primitives::B512::repeat_byte(7))
        } else {
            TxOrigin::Local
        };
        let r = pool
            .add_transaction(TxInput::Raw(tx.raw.clone()), origin)
            .await;
        let e = out.by_class.entry(tx.class).or_default();
        match r {
            Ok(_) => e.0 += 1,
            Err(rej) => {
                e.1 += 1;
                *out.reasons.entry(rej.reason().to_string()).or_default() += 1;
            }
        }
    }
    let status = pool.status();
    out.subpools = [
        status.pending.txs,
        status.basefee.txs,
        status.queued.txs,
        status.blob.txs,
    ];
    let head = chain.head_header().map_err(|e| e.to_string())?;
    let attrs = PayloadAttributes {
        timestamp: head.timestamp.max(200) + 12,
        prev_randao: B256::repeat_byte(1),
        suggested_fee_recipient: Address::repeat_byte(0xfe),
        withdrawals: Some(Vec::new()),
        parent_beacon_block_root: Some(B256::repeat_byte(2)),
    };
    let miner = MinerConfig {
        min_tip: 0,
        ..MinerConfig::default()
    };
    let built = chain
        .build_payload_with(&pool, head.hash(), &attrs, &miner)
        .map_err(|e| e.to_string())?;
    out.payload_txs = built.block.transactions.len();
    out.payload_value = built.block_value;
    Ok(out)
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

    const ETHTEST_GENESIS: &str = include_str!("../../../../shared/testdata/ethtest/genesis.json");

    /// `make pool-quality` on a small stream (600 senders: more than a block holds): moat's
    /// payload is worth at least 99.9 % of the ideal, and the invalid classes are all
    /// refused.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_small_stream_builds_a_block_worth_the_ideal() {
        let senders = senders(600);
        let genesis = genesis(ETHTEST_GENESIS, &senders).unwrap();
        let base_fee = first_base_fee(&genesis);
        for seed in [1, 2] {
            let params = StreamParams {
                seed,
                senders: senders.len(),
                max_nonces: 20,
            };
            let s = stream(&params, genesis.config.chain_id, base_fee, &senders);
            let ideal = ideal_value(&s, &senders, base_fee, GAS_LIMIT);
            let out = run_in_process(&genesis, &s, |_| {}).await.unwrap();
            assert!(
                out.payload_value * U256::from(1000) >= ideal * U256::from(999),
                "seed {seed}: {} of an ideal {ideal}",
                out.payload_value
            );
            // (A zero tip is refused from peers only: local senders are exempt.)
            for class in [
                Class::Unaffordable,
                Class::Oversized,
                Class::LowGas,
                Class::WrongChain,
            ] {
                let (accepted, _) = out.by_class.get(&class).copied().unwrap_or_default();
                assert_eq!(accepted, 0, "seed {seed}: {} accepted", class.name());
            }
        }
    }

    #[test]
    fn the_ideal_respects_nonce_order_and_the_block_size() {
        let senders = senders(3);
        let tx = |sender, nonce, tip| StreamTx {
            class: Class::Valid,
            sender,
            nonce,
            tip,
            max_fee: 1_000 + tip,
            value: U256::ZERO,
            raw: Bytes::new(),
            hash: B256::ZERO,
            remote: false,
            includable: true,
        };
        // Sender 0: a cheap nonce 0 unlocks a rich nonce 1; sender 1: one middling tx.
        let s = vec![tx(0, 0, 1), tx(0, 1, 100), tx(1, 0, 60), tx(2, 1, 500)];
        let g = u128::from(TRANSFER_GAS);
        // Room for two: 1 + 100 beats 60 + 1 (sender 2's nonce 1 has no nonce 0).
        assert_eq!(
            ideal_value(&s, &senders, 1_000, 2 * TRANSFER_GAS),
            U256::from(101 * g)
        );
        assert_eq!(
            ideal_value(&s, &senders, 1_000, TRANSFER_GAS),
            U256::from(60 * g)
        );
    }
}
