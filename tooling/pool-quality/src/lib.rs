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
use moat_common::transaction::{BlobsBundle, Eip1559Tx, Eip4844Tx, SidecarVersion, Transaction};
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
    /// A blob tx behind a nonce gap (its sender's held nonce comes last): every pool
    /// refuses it (blob txs must be contiguous), so it never counts for the ideal.
    BlobGap,
    /// A blob tx with a max fee per blob gas of 0, under the least blob base fee (1 wei).
    ZeroBlobFee,
    /// A blob tx whose sidecar carries a blob that does not match its commitment.
    BadBlob,
    /// A plain tx at a blob sender's next nonce: a pool holds one kind per sender, so it
    /// is refused while the sender has blob txs pooled.
    PlainFromBlobSender,
}

impl Class {
    pub const ALL: [Class; 13] = [
        Class::Valid,
        Class::GapFiller,
        Class::Replacement,
        Class::Duplicate,
        Class::Underpriced,
        Class::Unaffordable,
        Class::Oversized,
        Class::LowGas,
        Class::WrongChain,
        Class::BlobGap,
        Class::ZeroBlobFee,
        Class::BadBlob,
        Class::PlainFromBlobSender,
    ];

    /// Whether a node may count the class against the peer that relays it as a fault of
    /// the tx's bytes (moat: 5 reputation points each, 20 drop the peer; a sidecar that
    /// fails its proofs drops it at once): the tool sends these over RPC even from remote
    /// senders, as no honest peer relays them.
    pub fn peer_fault(self) -> bool {
        matches!(
            self,
            Class::Oversized | Class::LowGas | Class::WrongChain | Class::BadBlob
        )
    }

    /// Whether txs of the class have a hash no other stream tx has: a duplicate is its
    /// original again, and a bad blob's tx is the valid one (the sidecar is not hashed).
    pub fn own_hash(self) -> bool {
        !matches!(self, Class::Duplicate | Class::BadBlob)
    }

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
            Class::BlobGap => "blob-gap",
            Class::ZeroBlobFee => "zero-blob-fee",
            Class::BadBlob => "bad-blob",
            Class::PlainFromBlobSender => "plain-after-blob",
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
    /// Blobs carried (0: not a blob tx) and the max fee per blob gas.
    pub blobs: u64,
    pub blob_fee: u128,
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

/// The tool's blob genesis: [`genesis`] with every fork from Shanghai to Osaka at 0 (the
/// ethtest chain's blob schedule: Prague's 6/9 holds in Osaka) and no difficulty, so blob
/// txs carry version-1 sidecars (cell proofs) from block 1 on.
pub fn osaka_genesis(ethtest_genesis: &str, senders: &[(Signer, U256)]) -> Result<Genesis, String> {
    let mut g = genesis(ethtest_genesis, senders)?;
    g.config.shanghai_time = Some(0);
    g.config.cancun_time = Some(0);
    g.config.prague_time = Some(0);
    g.config.osaka_time = Some(0);
    // Merged from block 0: geth's pool reads the merge off the head's difficulty and takes
    // no blob tx on a genesis head with one.
    g.difficulty = U256::ZERO;
    g.config.terminal_total_difficulty = Some(U256::ZERO);
    g.excess_blob_gas = Some(0);
    g.blob_gas_used = Some(0);
    Ok(g)
}

/// Single-blob version-1 bundles, computed once (128 cell proofs a blob cost about a
/// tenth of a second) and combined into the sidecars of a stream.
#[derive(Default)]
pub struct BlobCache {
    bundles: Vec<BlobsBundle>,
}

impl BlobCache {
    /// Makes sure blobs `0..n` exist, computing the missing ones on all cores.
    pub fn fill(&mut self, n: usize) -> Result<(), String> {
        let start = self.bundles.len();
        if n <= start {
            return Ok(());
        }
        let threads = std::thread::available_parallelism().map_or(2, |c| c.get());
        let ids: Vec<usize> = (start..n).collect();
        let chunk = ids.len().div_ceil(threads);
        let made: Vec<Result<Vec<BlobsBundle>, String>> = std::thread::scope(|scope| {
            let handles: Vec<_> = ids
                .chunks(chunk)
                .map(|part| {
                    scope.spawn(move || {
                        part.iter()
                            .map(|i| {
                                let blob = *moat_crypto::kzg::sample_blob(0xb10b_0000 + *i as u64);
                                BlobsBundle::build(SidecarVersion::V1, vec![blob])
                                    .map_err(|e| e.to_string())
                            })
                            .collect()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().map_err(|_| "a blob worker panicked".to_string())?)
                .collect()
        });
        for part in made {
            self.bundles.extend(part?);
        }
        Ok(())
    }

    /// The sidecar of blobs `ids` (all filled).
    fn bundle(&self, ids: &[usize]) -> BlobsBundle {
        let mut out = BlobsBundle {
            version: SidecarVersion::V1,
            blobs: Vec::with_capacity(ids.len()),
            commitments: Vec::with_capacity(ids.len()),
            proofs: Vec::new(),
        };
        for i in ids {
            let b = &self.bundles[*i];
            out.blobs.extend(b.blobs.iter().cloned());
            out.commitments.extend(b.commitments.iter().copied());
            out.proofs.extend(b.proofs.iter().copied());
        }
        out
    }
}

/// About how many blobs a blob stream of `params` uses (1–3 a tx, 1–`max_nonces` txs a
/// sender): what to [`BlobCache::fill`] ahead on all cores.
pub fn blob_stream_estimate(params: &StreamParams) -> usize {
    params.senders * (params.max_nonces as usize + 1)
}

/// The seeded blob stream: per sender, blob txs (1–3 blobs, version-1 sidecars) at nonces
/// 0..k in order with skewed tips; one sender in five holds a nonce back until the end (its
/// later blob txs arrive behind a gap: [`Class::BlobGap`]); replacements at 0–120 % bumps
/// of all three fees, duplicates, zero tips, zero blob fee caps, sidecars whose blob does
/// not match its commitment, and a plain tx from a blob sender at its next nonce. Senders
/// interleaved at random, each delivered as local or remote. Blobs missing from `cache`
/// are computed on the way.
pub fn blob_stream(
    params: &StreamParams,
    chain_id: u64,
    base_fee: u128,
    senders: &[(Signer, U256)],
    cache: &mut BlobCache,
) -> Result<Vec<StreamTx>, String> {
    let mut rng = Rng(params.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xb10b | 1);
    let mut next_blob = 0usize;
    let mut per_sender: Vec<Vec<StreamTx>> = Vec::with_capacity(senders.len());
    let mut late: Vec<StreamTx> = Vec::new();
    for (i, (signer, balance)) in senders.iter().enumerate() {
        let remote = i % 2 == 1;
        let k = 1 + rng.below(params.max_nonces);
        let held = rng.chance(20).then(|| rng.below(k));
        let mut list = Vec::new();
        let mut spent = U256::ZERO;
        let entry = |class, tx: &Eip4844Tx, sidecar: BlobsBundle, includable| {
            let p = PooledTransaction::new(
                SignedTransaction::sign(Transaction::Eip4844(tx.clone()), signer),
                Some(sidecar),
            );
            StreamTx {
                class,
                sender: i,
                nonce: tx.nonce,
                tip: tx.max_priority_fee_per_gas,
                max_fee: tx.max_fee_per_gas,
                value: tx.value,
                blobs: tx.blob_versioned_hashes.len() as u64,
                blob_fee: tx.max_fee_per_blob_gas,
                raw: p.encoded_2718().into(),
                hash: p.hash(),
                remote,
                includable,
            }
        };
        for nonce in 0..k {
            let r = rng.below(1000);
            let tip = GWEI / 10 + u128::from(r * r) * GWEI / 10_000;
            let max_fee = 2 * base_fee + tip;
            let blob_fee = u128::from(1 + rng.below(10)) * GWEI;
            let count = 1 + rng.below(3) as usize;
            let ids: Vec<usize> = (next_blob..next_blob + count).collect();
            next_blob += count;
            cache.fill(next_blob)?;
            let sidecar = cache.bundle(&ids);
            let tx = Eip4844Tx {
                chain_id,
                nonce,
                max_priority_fee_per_gas: tip,
                max_fee_per_gas: max_fee,
                gas_limit: TRANSFER_GAS,
                to: Address::from_slice(&keccak256(nonce.to_be_bytes())[..20]),
                value: U256::from(1 + rng.below(1000)) * U256::from(GWEI),
                input: Bytes::new(),
                access_list: Vec::new(),
                max_fee_per_blob_gas: blob_fee,
                blob_versioned_hashes: sidecar.versioned_hashes(),
            };
            let cost = |t: &Eip4844Tx| {
                U256::from(t.max_fee_per_gas) * U256::from(TRANSFER_GAS)
                    + t.value
                    + U256::from(t.max_fee_per_blob_gas) * U256::from(count as u64 * GAS_PER_BLOB)
            };
            spent += cost(&tx);
            let gapped = held.is_some_and(|h| h < nonce);
            let class = if held == Some(nonce) {
                Class::GapFiller
            } else if gapped {
                Class::BlobGap
            } else {
                Class::Valid
            };
            let affordable = spent <= *balance;
            let main = entry(class, &tx, sidecar.clone(), affordable && !gapped);
            // Invalid variants of this nonce, sent before the real one.
            let invalid = match rng.below(100) {
                0..=7 => Some((
                    Class::ZeroBlobFee,
                    Eip4844Tx {
                        max_fee_per_blob_gas: 0,
                        ..tx.clone()
                    },
                    sidecar.clone(),
                )),
                8..=15 => {
                    let mut bad = sidecar.clone();
                    bad.blobs[0] = *moat_crypto::kzg::sample_blob(0xbad0_0000 + nonce);
                    Some((Class::BadBlob, tx.clone(), bad))
                }
                16..=19 => Some((
                    Class::Underpriced,
                    Eip4844Tx {
                        max_priority_fee_per_gas: 0,
                        ..tx.clone()
                    },
                    sidecar.clone(),
                )),
                _ => None,
            };
            // A held nonce's every copy comes last, or an early one would fill the gap.
            let dest = if held == Some(nonce) {
                &mut late
            } else {
                &mut list
            };
            if let Some((class, bad, car)) = invalid {
                let includable = class == Class::Underpriced && affordable && !gapped;
                dest.push(entry(class, &bad, car, includable));
            }
            dest.push(main.clone());
            if rng.chance(25) {
                let bump = [0u128, 10, 50, 100, 120][rng.below(5) as usize];
                let up = |v: u128| v * (100 + bump) / 100;
                let tx2 = Eip4844Tx {
                    max_priority_fee_per_gas: up(tip),
                    max_fee_per_gas: up(max_fee),
                    max_fee_per_blob_gas: up(blob_fee),
                    ..tx.clone()
                };
                let fits = spent - cost(&tx) + cost(&tx2) <= *balance;
                dest.push(entry(
                    Class::Replacement,
                    &tx2,
                    sidecar.clone(),
                    fits && !gapped,
                ));
            }
            if rng.chance(10) {
                dest.push(StreamTx {
                    class: Class::Duplicate,
                    ..main.clone()
                });
            }
        }
        if rng.chance(30) {
            // A plain tx at the sender's next nonce: pools hold one kind per sender.
            let r = rng.below(1000);
            let tip = GWEI / 10 + u128::from(r * r) * GWEI / 10_000;
            let tx = Eip1559Tx {
                chain_id,
                nonce: k,
                max_priority_fee_per_gas: tip,
                max_fee_per_gas: 2 * base_fee + tip,
                gas_limit: TRANSFER_GAS,
                to: TxKind::Call(Address::repeat_byte(0x77)),
                value: U256::from(GWEI),
                input: Bytes::new(),
                access_list: Vec::new(),
            };
            let (raw, hash) = sign(signer, tx.clone());
            list.push(StreamTx {
                class: Class::PlainFromBlobSender,
                sender: i,
                nonce: k,
                tip,
                max_fee: tx.max_fee_per_gas,
                value: tx.value,
                blobs: 0,
                blob_fee: 0,
                raw,
                hash,
                remote,
                // Valid on chain; a pool takes it only while the sender holds no blob tx
                // (the ideal keeps a sender to the kind of the first tx a pool can hold).
                includable: true,
            });
        }
        per_sender.push(list);
    }
    Ok(interleave(&mut rng, per_sender, late))
}

/// Interleaves the senders' lists at random, each sender's own order kept; `late` last.
fn interleave(rng: &mut Rng, per_sender: Vec<Vec<StreamTx>>, late: Vec<StreamTx>) -> Vec<StreamTx> {
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
/// The same for blob txs (geth's `--blobpool.pricebump`), on all three fees.
pub const BLOB_PRICE_BUMP: u128 = 100;

/// What the first built block allows: its base fees and its gas and blob room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockLimits {
    pub base_fee: u128,
    pub blob_base_fee: u128,
    pub gas_limit: u64,
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

/// Per class: what happened to the stream's txs of that class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClassCount {
    pub sent: usize,
    /// Answered by the pool (in process: every tx; against a node: those sent over RPC).
    pub accepted: usize,
    pub refused: usize,
    /// In the pool once the stream is over (no block is imported, so none was mined); 0
    /// for the classes without a hash of their own ([`Class::own_hash`]).
    pub held: usize,
}

/// What a pool made of a stream.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub by_class: BTreeMap<Class, ClassCount>,
    /// Refusal reasons with counts.
    pub reasons: BTreeMap<String, usize>,
    /// Txs per subpool after the stream: pending, basefee, queued, blob.
    pub subpools: [usize; 4],
    pub payload_txs: usize,
    pub payload_blobs: usize,
    pub payload_value: U256,
    /// In process: per stream tx in order, `None` if accepted, else why it was refused
    /// (`reason code: message`).
    pub refusal_each: Vec<Option<String>>,
    /// In process: per stream tx in order, whether the pool held it at the end (so
    /// [`ideal_value`] over these alone tells what a perfect builder makes of the pool).
    pub held_each: Vec<bool>,
    /// In process: the least tip (wei) of a sender's last pending tx at the end (what
    /// eviction would take next), and how many pending txs tip less than that.
    pub pending_under_bar: (u128, usize),
}

impl Outcome {
    pub fn accepted(&self) -> usize {
        self.by_class.values().map(|c| c.accepted).sum()
    }
    pub fn refused(&self) -> usize {
        self.by_class.values().map(|c| c.refused).sum()
    }
}

/// Remote txs come from this many peers, a sender always from the same one (as each peer
/// relays in order what it has).
pub const PEERS: usize = 4;

/// The peer that delivers `sender`'s remote txs.
pub fn peer_of(sender: usize) -> usize {
    sender / 2 % PEERS
}

/// Feeds `stream` through a moat pool over an in-memory chain on `genesis` (remote txs
/// as [`PEERS`] peers', local ones as RPC's), then builds one payload at [`BLOCK_TIME`]
/// with geth's least tip of 0 (a stream's tips are all above it anyway) and returns what
/// happened.
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
            TxOrigin::Peer(alloy_primitives::B512::repeat_byte(
                1 + peer_of(tx.sender) as u8,
            ))
        } else {
            TxOrigin::Local
        };
        let r = pool
            .add_transaction(TxInput::Raw(tx.raw.clone()), origin)
            .await;
        let e = out.by_class.entry(tx.class).or_default();
        e.sent += 1;
        out.refusal_each
            .push(r.as_ref().err().map(|e| format!("{}: {e}", e.reason())));
        match r {
            Ok(_) => e.accepted += 1,
            Err(rej) => {
                e.refused += 1;
                *out.reasons.entry(rej.reason().to_string()).or_default() += 1;
            }
        }
    }
    out.held_each = stream.iter().map(|t| pool.contains(&t.hash)).collect();
    for tx in stream.iter().filter(|t| t.class.own_hash()) {
        if pool.contains(&tx.hash) {
            out.by_class.entry(tx.class).or_default().held += 1;
        }
    }
    // What holds the pending slots: the eviction bar is the least tip of a sender's last
    // pending tx (eviction takes tails); txs below it stay only under a richer tail.
    let base_fee = pool.head().base_fee;
    let runs: Vec<Vec<u128>> = pool
        .content()
        .into_iter()
        .map(|(_, txs)| {
            txs.iter()
                .take_while(|(_, sub)| *sub == moat_blockchain::mempool::SubPool::Pending)
                .map(|(t, _)| t.tx.tx().tx().effective_tip_per_gas(base_fee).unwrap_or(0))
                .collect::<Vec<u128>>()
        })
        .filter(|r| !r.is_empty())
        .collect();
    let bar = runs
        .iter()
        .filter_map(|r| r.last())
        .min()
        .copied()
        .unwrap_or(0);
    let under: usize = runs
        .iter()
        .map(|r| r.iter().filter(|t| **t < bar).count())
        .sum();
    out.pending_under_bar = (bar, under);
    let status = pool.status();
    out.subpools = [
        status.pending.txs,
        status.basefee.txs,
        status.queued.txs,
        status.blob.txs,
    ];
    let head = chain.head_header().map_err(|e| e.to_string())?;
    let attrs = PayloadAttributes {
        timestamp: head.timestamp.max(BLOCK_TIME - 12) + 12,
        prev_randao: B256::repeat_byte(1),
        suggested_fee_recipient: Address::repeat_byte(0xfe),
        withdrawals: Some(Vec::new()),
        parent_beacon_block_root: Some(B256::repeat_byte(2)),
    };
    let miner = MinerConfig {
        min_tip: 0,
        gas_limit: Some(MINER_GAS_LIMIT),
        ..MinerConfig::default()
    };
    let built = chain
        .build_payload_with(&pool, head.hash(), &attrs, &miner)
        .map_err(|e| e.to_string())?;
    out.payload_txs = built.block.transactions.len();
    out.payload_blobs = built
        .block
        .transactions
        .iter()
        .map(|t| t.tx().blob_versioned_hashes().len())
        .sum();
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
    use std::collections::{HashMap, HashSet};

    const ETHTEST_GENESIS: &str = include_str!("../../../../shared/testdata/ethtest/genesis.json");

    /// The rules' promise: an includable tx of the main line or a gap-filler is taken
    /// unless an earlier tx already holds its nonce (then it is a replacement attempt) or
    /// a replacement of an earlier nonce raised what the sender's txs cost past its balance
    /// (the stream's own funds check counts the main line only) or the sender holds txs of
    /// the other kind: never for the sender's slot count, the pool's room or a nonce gap.
    fn assert_executable_txs_taken(seed: u64, s: &[StreamTx], out: &Outcome) {
        let mut held: HashSet<(usize, u64)> = HashSet::new();
        let mut kind: HashMap<usize, bool> = HashMap::new();
        for (tx, refusal) in s.iter().zip(&out.refusal_each) {
            if matches!(tx.class, Class::Valid | Class::GapFiller)
                && tx.includable
                && !held.contains(&(tx.sender, tx.nonce))
                && kind.get(&tx.sender).is_none_or(|k| *k == (tx.blobs > 0))
            {
                let funds = refusal.as_deref().is_some_and(|r| {
                    r.starts_with("overdraft:") || r.starts_with("insufficient_funds:")
                });
                assert!(
                    refusal.is_none() || funds,
                    "seed {seed}: {} tx of sender {} nonce {} refused: {refusal:?}",
                    tx.class.name(),
                    tx.sender,
                    tx.nonce
                );
            }
            if refusal.is_none() {
                kind.entry(tx.sender).or_insert(tx.blobs > 0);
                held.insert((tx.sender, tx.nonce));
            }
        }
    }

    fn accepted(out: &Outcome, class: Class) -> usize {
        out.by_class.get(&class).map_or(0, |c| c.accepted)
    }

    /// `make pool-quality` on a small stream (600 senders: more than a block holds): moat's
    /// payload is worth at least 99.9 % of the ideal, the invalid classes and duplicates
    /// are all refused, zero tips are refused from peers, and no executable tx or
    /// gap-filler is refused.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_small_stream_builds_a_block_worth_the_ideal() {
        let senders = senders(600);
        let genesis = genesis(ETHTEST_GENESIS, &senders).unwrap();
        let limits = BlockLimits::first(&genesis);
        for seed in [1, 2] {
            let params = StreamParams {
                seed,
                senders: senders.len(),
                max_nonces: 20,
            };
            let s = stream(&params, genesis.config.chain_id, limits.base_fee, &senders);
            let ideal = ideal_value(&s, &senders, &limits);
            let out = run_in_process(&genesis, &s, |_| {}).await.unwrap();
            assert!(
                out.payload_value * U256::from(1000) >= ideal * U256::from(999),
                "seed {seed}: {} of an ideal {ideal}",
                out.payload_value
            );
            for class in [
                Class::Unaffordable,
                Class::Oversized,
                Class::LowGas,
                Class::WrongChain,
                Class::Duplicate,
            ] {
                assert_eq!(accepted(&out, class), 0, "seed {seed}: {}", class.name());
            }
            // A zero tip is refused from peers only: local senders are exempt.
            let local_zero_tips = s
                .iter()
                .filter(|t| t.class == Class::Underpriced && !t.remote)
                .count();
            assert!(accepted(&out, Class::Underpriced) <= local_zero_tips);
            assert!(out.by_class[&Class::GapFiller].accepted > 0);
            assert_executable_txs_taken(seed, &s, &out);
        }
    }

    /// The blob stream on the Osaka genesis: the payload is worth at least 99.9 % of the
    /// ideal (the blob knapsack included), gapped blob txs, zero blob fee caps and blobs
    /// that do not match their commitment are all refused, no executable blob tx is.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_small_blob_stream_builds_a_block_worth_the_ideal() {
        let senders = senders(6);
        let genesis = osaka_genesis(ETHTEST_GENESIS, &senders).unwrap();
        let limits = BlockLimits::first(&genesis);
        assert_eq!(limits.max_blobs, 9);
        let mut cache = BlobCache::default();
        for seed in [1, 3] {
            let params = StreamParams {
                seed,
                senders: senders.len(),
                max_nonces: 3,
            };
            let s = blob_stream(
                &params,
                genesis.config.chain_id,
                limits.base_fee,
                &senders,
                &mut cache,
            )
            .unwrap();
            let ideal = ideal_value(&s, &senders, &limits);
            let out = run_in_process(&genesis, &s, |_| {}).await.unwrap();
            assert!(out.payload_blobs > 0);
            assert!(
                out.payload_value * U256::from(1000) >= ideal * U256::from(999),
                "seed {seed}: {} of an ideal {ideal}",
                out.payload_value
            );
            for class in [
                Class::BlobGap,
                Class::ZeroBlobFee,
                Class::BadBlob,
                Class::Duplicate,
            ] {
                assert_eq!(accepted(&out, class), 0, "seed {seed}: {}", class.name());
            }
            assert_executable_txs_taken(seed, &s, &out);
        }
    }

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
