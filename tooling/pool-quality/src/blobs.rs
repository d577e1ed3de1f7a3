//! Blob streams: the tool's Osaka genesis, single-blob sidecars computed once on all
//! cores ([`BlobCache`]), and the seeded blob stream (blob txs in nonce order, held-back
//! nonces, replacements of all three fees, and the blob cases a pool must refuse).

use crate::ideal::GAS_PER_BLOB;
use crate::stream::StreamParams;
use crate::stream::{Rng, genesis, interleave, sign};
use crate::tx::{Class, StreamTx};
use crate::{GWEI, TRANSFER_GAS};
use alloy_primitives::{Address, Bytes, TxKind, U256, keccak256};
use moat_common::config::Genesis;
use moat_common::transaction::{BlobsBundle, Eip1559Tx, Eip4844Tx, SidecarVersion, Transaction};
use moat_common::{PooledTransaction, SignedTransaction};
use moat_crypto::secp::Signer;

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
            sampled: None,
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
