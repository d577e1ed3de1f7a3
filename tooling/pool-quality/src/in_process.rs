//! A stream through moat's own pool over an in-memory chain: remote txs as from
//! [`PEERS`] peers, local ones as from RPC, then one payload built at [`BLOCK_TIME`];
//! the [`Outcome`] tells per class what was sent, taken, refused and held, and what the
//! payload is worth.

use crate::ideal::{BLOCK_TIME, MINER_GAS_LIMIT};
use crate::tx::{Class, StreamTx};
use alloy_primitives::{Address, B256, U256};
use moat_blockchain::chain::Chain;
use moat_blockchain::payload::{MinerConfig, PayloadAttributes};
use moat_common::config::Genesis;
use moat_mempool::{Pool, PoolConfig, TxInput, TxOrigin};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Per class: what happened to the stream's txs of that class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClassCount {
    /// Txs of the class the stream sent.
    pub sent: usize,
    /// Answered by the pool (in process: every tx; against a node: those sent over RPC).
    pub accepted: usize,
    /// Txs of the class the pool answered with a refusal.
    pub refused: usize,
    /// In the pool once the stream is over (no block is imported, so none was mined); 0
    /// for the classes without a hash of their own ([`Class::own_hash`]).
    pub held: usize,
}

/// What a pool made of a stream.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Counts per class of stream tx.
    pub by_class: BTreeMap<Class, ClassCount>,
    /// Refusal reasons with counts.
    pub reasons: BTreeMap<String, usize>,
    /// Txs per subpool after the stream: pending, basefee, queued, blob.
    pub subpools: [usize; 4],
    /// Transactions in the built payload.
    pub payload_txs: usize,
    /// Blobs in the built payload.
    pub payload_blobs: usize,
    /// The payload's value: Σ effective tip × gas used, wei (blob fees are burned).
    pub payload_value: U256,
    /// Over RPC: how long forkchoiceUpdated with attributes took to answer, and
    /// getPayload (asked `--payload-wait-ms` after it).
    pub build_times: Option<(std::time::Duration, std::time::Duration)>,
    /// In process: per stream tx in order, `None` if accepted, else why it was refused
    /// (`reason code: message`).
    pub refusal_each: Vec<Option<String>>,
    /// In process: per stream tx in order, whether the pool held it at the end (so
    /// [`ideal_value`](crate::ideal_value) over these alone tells what a perfect builder
    /// makes of the pool).
    pub held_each: Vec<bool>,
    /// In process: the least tip (wei) of a sender's last pending tx at the end (what
    /// eviction would take next), and how many pending txs tip less than that.
    pub pending_under_bar: (u128, usize),
}

impl Outcome {
    /// Txs the pool accepted, all classes together.
    pub fn accepted(&self) -> usize {
        self.by_class.values().map(|c| c.accepted).sum()
    }
    /// Txs the pool refused, all classes together.
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
                .take_while(|(_, sub)| *sub == moat_mempool::SubPool::Pending)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    use crate::blobs::{BlobCache, blob_stream, osaka_genesis};
    use crate::ideal::{BlockLimits, ideal_value};
    use crate::stream::{StreamParams, genesis, senders, stream};
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
}
