//! Payload building: fill a block from the pool's best transactions, execute it, and
//! seal its header; and a service that keeps improving a payload until it is fetched.
//!
//! Selection walks [`moat_mempool::BestTransactions`] under the block's gas, blob gas
//! and (from Osaka) RLP size budgets. The selection is then executed as a whole; a
//! transaction that fails drops out with its sender's later ones, and the rest is executed
//! again, so the sealed block never holds a failing transaction.

use crate::chain::{
    Chain, ChainError, next_block_base_fee, next_block_excess_blob_gas, requests_hash,
    state_root_after,
};
use crate::vm::{self, VmError};
use alloy_primitives::{Address, B256, Bloom, Bytes, U256, keccak256};
use alloy_trie::EMPTY_ROOT_HASH;
use moat_common::SignedTransaction;
use moat_common::block::{Block, Header, Withdrawal};
use moat_common::config::Fork;
use moat_common::constants::{EMPTY_OMMERS_HASH, GAS_PER_BLOB};
use moat_common::fees;
use moat_common::receipt;
use moat_common::transaction::{BlobsBundle, SidecarVersion};
use moat_mempool::{BlockBudget, Pool};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// EIP-7934: the largest RLP-encoded block from Osaka, less a margin for the header.
pub const MAX_BLOCK_BODY_SIZE_OSAKA: usize = 10 * 1024 * 1024 - 2 * 1024 * 1024;

/// What the consensus layer (or dev mode) asks a payload to carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadAttributes {
    /// The payload's timestamp (seconds).
    pub timestamp: u64,
    /// The header's `mixHash`/`prevRandao`: the beacon chain's RANDAO value (EIP-4399).
    pub prev_randao: B256,
    /// The header's `beneficiary`: where priority fees go.
    pub suggested_fee_recipient: Address,
    /// Withdrawals to include (EIP-4895); `None` before Shanghai.
    pub withdrawals: Option<Vec<Withdrawal>>,
    /// The beacon block root for the EIP-4788 system call; `None` before Cancun.
    pub parent_beacon_block_root: Option<B256>,
}

/// A sealed block with what the engine API returns beside it.
#[derive(Debug, Clone)]
pub struct BuiltPayload {
    /// The sealed block.
    pub block: Block,
    /// Tips paid to the fee recipient.
    pub block_value: U256,
    /// Sidecars of the blob transactions, in transaction order.
    pub sidecars: Vec<Arc<BlobsBundle>>,
    /// EIP-7685 requests, type byte first.
    pub requests: Vec<Bytes>,
}

/// How this node builds blocks: geth's `--miner.*` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MinerConfig {
    /// The gas limit built blocks move toward, by at most parent/1024 − 1 a block
    /// (geth's `--miner.gaslimit`); `None` keeps the parent's.
    pub gas_limit: Option<u64>,
    /// Least effective tip a transaction must pay to be included (`--miner.gasprice`).
    pub min_tip: u128,
    /// Extra data of built blocks (`--miner.extradata`, at most 32 bytes).
    pub extra_data: Bytes,
}

impl Default for MinerConfig {
    /// What a library caller gets: the parent's gas limit, every tip, "moat".
    fn default() -> Self {
        Self {
            gas_limit: None,
            min_tip: 0,
            extra_data: Bytes::from_static(b"moat"),
        }
    }
}

impl MinerConfig {
    /// geth's defaults: a 60M gas target and a 1 Mwei least tip.
    pub fn geth_defaults() -> Self {
        Self {
            gas_limit: Some(60_000_000),
            min_tip: 1_000_000,
            ..Self::default()
        }
    }
}

/// geth's `CalcGasLimit`: the parent's gas limit moved toward `desired` by at most
/// `parent / 1024 − 1`.
pub fn next_gas_limit(parent: u64, desired: u64) -> u64 {
    let delta = (parent / 1024).saturating_sub(1);
    let desired = desired.max(crate::header::MIN_GAS_LIMIT);
    if parent < desired {
        (parent + delta).min(desired)
    } else if parent > desired {
        parent.saturating_sub(delta).max(desired)
    } else {
        parent
    }
}

/// The header of the block after `parent` at `attrs`, roots still empty.
fn template(
    chain: &Chain,
    parent: &Header,
    attrs: &PayloadAttributes,
    miner: &MinerConfig,
) -> Header {
    let config = chain.config();
    let (number, timestamp) = (parent.number + 1, attrs.timestamp);
    let fork = config.fork_at(number, timestamp);
    let base_fee = next_block_base_fee(config, parent, timestamp);
    let excess_blob_gas = next_block_excess_blob_gas(config, parent, timestamp);
    Header {
        parent_hash: parent.hash(),
        ommers_hash: EMPTY_OMMERS_HASH,
        beneficiary: attrs.suggested_fee_recipient,
        state_root: B256::ZERO,
        transactions_root: EMPTY_ROOT_HASH,
        receipts_root: EMPTY_ROOT_HASH,
        logs_bloom: Bloom::ZERO,
        difficulty: U256::ZERO,
        number,
        gas_limit: miner.gas_limit.map_or(parent.gas_limit, |target| {
            next_gas_limit(parent.gas_limit, target)
        }),
        gas_used: 0,
        timestamp,
        extra_data: miner.extra_data.clone(),
        mix_hash: attrs.prev_randao,
        nonce: [0; 8],
        base_fee_per_gas: base_fee,
        withdrawals_root: None,
        blob_gas_used: excess_blob_gas.map(|_| 0),
        excess_blob_gas,
        parent_beacon_block_root: (fork >= Fork::Cancun)
            .then(|| attrs.parent_beacon_block_root.unwrap_or_default()),
        requests_hash: None,
    }
}

impl Chain {
    /// Builds and seals a block on `parent_hash` from `pool`'s best transactions, with
    /// the default [`MinerConfig`].
    pub fn build_payload(
        &self,
        pool: &Pool,
        parent_hash: B256,
        attrs: &PayloadAttributes,
    ) -> Result<BuiltPayload, ChainError> {
        self.build_payload_with(pool, parent_hash, attrs, &MinerConfig::default())
    }

    /// [`Chain::build_payload`] with `miner`'s gas limit target, least tip and extra data.
    pub fn build_payload_with(
        &self,
        pool: &Pool,
        parent_hash: B256,
        attrs: &PayloadAttributes,
        miner: &MinerConfig,
    ) -> Result<BuiltPayload, ChainError> {
        self.build_payload_satisfying(pool, parent_hash, attrs, miner, &[])
    }

    /// [`Chain::build_payload_with`] whose block satisfies `inclusion_list` (EIP-7805's
    /// payload building): after the pool's txs are executed, the list's txs the block can
    /// still take on its post-state (`inclusion::appendable`: not carried, within the gas
    /// left, nonce and funds right; no blob tx) are appended and the block executed
    /// again, until the rule newPayload checks (`inclusion::unsatisfied_by`) finds none.
    /// A listed tx that then fails to execute is left out (it could not be appended).
    pub fn build_payload_satisfying(
        &self,
        pool: &Pool,
        parent_hash: B256,
        attrs: &PayloadAttributes,
        miner: &MinerConfig,
        inclusion_list: &[Bytes],
    ) -> Result<BuiltPayload, ChainError> {
        let parent = self
            .header(&parent_hash)?
            .ok_or(ChainError::UnknownParent {
                number: 0,
                hash: B256::ZERO,
                parent: parent_hash,
            })?;
        let config = self.config();
        let mut header = template(self, &parent, attrs, miner);
        let fork = config.fork_at(header.number, header.timestamp);
        let blob_params = config.blob_params_at(header.timestamp);
        let budget = BlockBudget {
            base_fee: header.base_fee_per_gas.unwrap_or_default(),
            blob_base_fee: blob_params
                .map(|p| fees::blob_base_fee(header.excess_blob_gas.unwrap_or_default(), &p))
                .unwrap_or(u128::MAX),
            gas_limit: header.gas_limit,
            max_blob_gas: blob_params.map_or(0, |p| p.max * GAS_PER_BLOB),
            min_tip: miner.min_tip,
        };
        let max_size = if fork >= Fork::Osaka {
            MAX_BLOCK_BODY_SIZE_OSAKA
        } else {
            usize::MAX
        };

        let mut picked: Vec<(SignedTransaction, Address, Option<Arc<BlobsBundle>>)> = Vec::new();
        let mut size = 0usize;
        let mut best = pool.best_transactions(budget);
        // A block's blobs bundle carries the fork's sidecar version: a tx pooled with the
        // other one (version 0 across the Osaka boundary) waits for its conversion.
        let sidecar_version = if fork >= Fork::Osaka {
            SidecarVersion::V1
        } else {
            SidecarVersion::V0
        };
        while let Some(tx) = best.next() {
            if tx
                .tx
                .sidecar()
                .is_some_and(|b| b.version != sidecar_version)
            {
                best.mark_invalid(&tx.hash());
                continue;
            }
            if size + tx.tx.tx().size() > max_size {
                best.mark_invalid(&tx.hash());
                continue;
            }
            size += tx.tx.tx().size();
            picked.push((
                tx.tx.tx().clone(),
                tx.sender,
                tx.tx.sidecar_shared().cloned(),
            ));
        }

        let withdrawals =
            (fork >= Fork::Shanghai).then(|| attrs.withdrawals.clone().unwrap_or_default());
        // Listed txs that failed execution once: not appended again.
        let mut refused: std::collections::HashSet<B256> = Default::default();
        loop {
            let block = Block {
                header: header.clone(),
                hash: B256::ZERO,
                transactions: picked.iter().map(|p| p.0.clone()).collect(),
                ommers: Vec::new(),
                withdrawals: withdrawals.clone(),
            };
            let senders: Vec<Address> = picked.iter().map(|p| p.1).collect();
            match vm::execute_block(
                config,
                &block,
                &senders,
                &crate::history::StateAtBlock::head(self.store().clone()),
            ) {
                Ok(executed) => {
                    let extra = if inclusion_list.is_empty() {
                        Vec::new()
                    } else {
                        self.to_append(inclusion_list, &block, &executed, &refused)
                    };
                    if extra.is_empty() {
                        return self.seal(block, header, executed, picked);
                    }
                    picked.extend(extra.into_iter().map(|(tx, sender)| (tx, sender, None)));
                }
                Err(VmError::InvalidTransaction { index, .. }) if index < picked.len() => {
                    // Drop it and its sender's later transactions, then try again.
                    let sender = picked[index].1;
                    refused.insert(picked[index].0.hash());
                    let mut seen = 0;
                    picked.retain(|p| {
                        let keep = !(p.1 == sender && seen >= index);
                        seen += 1;
                        keep
                    });
                }
                Err(VmError::State(s)) => return Err(ChainError::State(s)),
                Err(e) => {
                    return Err(ChainError::Invalid {
                        number: header.number,
                        hash: B256::ZERO,
                        reason: e.to_string(),
                    });
                }
            }
            header.gas_used = 0;
        }
    }

    /// The txs of `list` the executed `block` could still append (see
    /// [`Chain::build_payload_satisfying`]), judged on its post-state.
    fn to_append(
        &self,
        list: &[Bytes],
        block: &Block,
        executed: &vm::ExecutedBlock,
        refused: &std::collections::HashSet<B256>,
    ) -> Vec<(SignedTransaction, Address)> {
        let mut skip: std::collections::HashSet<B256> =
            block.transactions.iter().map(|t| t.hash()).collect();
        skip.extend(refused.iter().copied());
        let gas_left = block.header.gas_limit.saturating_sub(executed.gas_used);
        let store = self.store();
        let account = |a: &Address| -> (u64, U256) {
            match executed
                .changes
                .binary_search_by(|c| c.address.cmp(a))
                .map(|i| &executed.changes[i])
            {
                Ok(change) => change
                    .info
                    .as_ref()
                    .map_or((0, U256::ZERO), |i| (i.nonce, i.balance)),
                Err(_) => store
                    .account(a)
                    .ok()
                    .flatten()
                    .map_or((0, U256::ZERO), |acc| (acc.nonce, acc.balance)),
            }
        };
        crate::inclusion::appendable(list, &skip, gas_left, account)
    }

    /// A block of exactly `txs` (in order, with their senders) on the head, as
    /// `testing_buildBlockV1` asks: a transaction that cannot run fails the build instead
    /// of being left out. Nothing is stored.
    pub fn build_payload_from_transactions(
        &self,
        parent_hash: B256,
        attrs: &PayloadAttributes,
        miner: &MinerConfig,
        txs: Vec<(SignedTransaction, Address)>,
    ) -> Result<BuiltPayload, ChainError> {
        let parent = self
            .header(&parent_hash)?
            .ok_or(ChainError::UnknownBlock(parent_hash))?;
        let (_, head) = self.head()?;
        if head != parent_hash {
            return Err(ChainError::NotOnHead {
                number: parent.number + 1,
                hash: B256::ZERO,
                head,
            });
        }
        let config = self.config();
        let header = template(self, &parent, attrs, miner);
        let fork = config.fork_at(header.number, header.timestamp);
        let withdrawals =
            (fork >= Fork::Shanghai).then(|| attrs.withdrawals.clone().unwrap_or_default());
        let block = Block {
            header: header.clone(),
            hash: B256::ZERO,
            transactions: txs.iter().map(|t| t.0.clone()).collect(),
            ommers: Vec::new(),
            withdrawals,
        };
        let senders: Vec<Address> = txs.iter().map(|t| t.1).collect();
        let executed = vm::execute_block(
            config,
            &block,
            &senders,
            &crate::history::StateAtBlock::head(self.store().clone()),
        )
        .map_err(|e| match e {
            VmError::State(s) => ChainError::State(s),
            other => ChainError::Invalid {
                number: header.number,
                hash: B256::ZERO,
                reason: other.to_string(),
            },
        })?;
        let picked = txs.into_iter().map(|(t, a)| (t, a, None)).collect();
        self.seal(block, header, executed, picked)
    }

    fn seal(
        &self,
        mut block: Block,
        mut header: Header,
        executed: vm::ExecutedBlock,
        picked: Vec<(SignedTransaction, Address, Option<Arc<BlobsBundle>>)>,
    ) -> Result<BuiltPayload, ChainError> {
        let (state_root, _) = state_root_after(self.store(), &executed.changes)?;
        header.state_root = state_root;
        header.transactions_root = block.transactions_root();
        header.withdrawals_root = block.withdrawals_root();
        header.receipts_root = receipt::receipts_root(&executed.receipts);
        header.logs_bloom = executed
            .receipts
            .iter()
            .fold(Bloom::ZERO, |acc, r| acc | r.bloom());
        header.gas_used = executed.gas_used;
        if header.blob_gas_used.is_some() {
            header.blob_gas_used = Some(executed.blob_gas_used);
        }
        let fork = self.config().fork_at(header.number, header.timestamp);
        if fork >= Fork::Prague {
            header.requests_hash = Some(requests_hash(&executed.requests));
        }
        let base_fee = header.base_fee_per_gas.unwrap_or_default();
        let mut block_value = U256::ZERO;
        let mut previous = 0;
        for (tx, r) in block.transactions.iter().zip(&executed.receipts) {
            let used = r.cumulative_gas_used - previous;
            previous = r.cumulative_gas_used;
            let tip = tx.tx().effective_tip_per_gas(base_fee).unwrap_or_default();
            block_value += U256::from(used) * U256::from(tip);
        }
        block.hash = header.hash();
        block.header = header;
        Ok(BuiltPayload {
            block,
            block_value,
            sidecars: picked.into_iter().filter_map(|p| p.2).collect(),
            requests: executed.requests,
        })
    }
}

/// A payload being improved until it is fetched.
struct Job {
    best: Option<BuiltPayload>,
    done: bool,
}

type SharedJob = Arc<Mutex<Job>>;

/// Builds payloads in the background and hands out the best one seen.
#[derive(Clone)]
pub struct PayloadService {
    chain: Chain,
    pool: Pool,
    miner: Arc<MinerConfig>,
    jobs: Arc<Mutex<HashMap<[u8; 8], SharedJob>>>,
}

impl std::fmt::Debug for PayloadService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PayloadService")
            .field("jobs", &self.jobs.lock().len())
            .finish()
    }
}

/// How often a payload is rebuilt while it waits to be fetched, and for how long at most.
const REBUILD_EVERY: Duration = Duration::from_millis(500);
const REBUILD_FOR: Duration = Duration::from_secs(12);

fn payload_id(parent: &B256, attrs: &PayloadAttributes) -> [u8; 8] {
    let mut material = parent.to_vec();
    material.extend_from_slice(&attrs.timestamp.to_be_bytes());
    material.extend_from_slice(attrs.prev_randao.as_slice());
    material.extend_from_slice(attrs.suggested_fee_recipient.as_slice());
    material.extend_from_slice(
        attrs
            .parent_beacon_block_root
            .unwrap_or_default()
            .as_slice(),
    );
    for w in attrs.withdrawals.iter().flatten() {
        w.encode(&mut material);
    }
    keccak256(material)[..8]
        .try_into()
        .expect("a keccak hash has 32 bytes")
}

impl PayloadService {
    /// A service building on `chain`'s head from the transactions in `pool`.
    pub fn new(chain: Chain, pool: Pool) -> Self {
        Self {
            chain,
            pool,
            miner: Arc::new(MinerConfig::default()),
            jobs: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Builds with `miner`'s settings from now on.
    pub fn with_miner(mut self, miner: MinerConfig) -> Self {
        self.miner = Arc::new(miner);
        self
    }

    /// Starts building on `parent` with `attrs`; the first payload is built before this
    /// returns, so a `get` right after always has one.
    pub fn start(&self, parent: B256, attrs: PayloadAttributes) -> Result<[u8; 8], ChainError> {
        let id = payload_id(&parent, &attrs);
        if self.jobs.lock().contains_key(&id) {
            return Ok(id);
        }
        let first = self
            .chain
            .build_payload_with(&self.pool, parent, &attrs, &self.miner)?;
        let job = Arc::new(Mutex::new(Job {
            best: Some(first),
            done: false,
        }));
        {
            let mut jobs = self.jobs.lock();
            // Old jobs are dropped: a consensus client asks for a handful at most.
            if jobs.len() >= 16 {
                jobs.clear();
            }
            jobs.insert(id, Arc::clone(&job));
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (chain, pool, miner) = (self.chain.clone(), self.pool.clone(), self.miner.clone());
            runtime.spawn(async move {
                let started = tokio::time::Instant::now();
                while started.elapsed() < REBUILD_FOR {
                    tokio::time::sleep(REBUILD_EVERY).await;
                    if job.lock().done {
                        return;
                    }
                    let (c, p, a, m) = (chain.clone(), pool.clone(), attrs.clone(), miner.clone());
                    let Ok(Ok(built)) = tokio::task::spawn_blocking(move || {
                        c.build_payload_with(&p, parent, &a, &m)
                    })
                    .await
                    else {
                        continue;
                    };
                    let mut j = job.lock();
                    if j.done {
                        return;
                    }
                    if j.best
                        .as_ref()
                        .is_none_or(|b| built.block_value > b.block_value)
                    {
                        j.best = Some(built);
                    }
                }
            });
        }
        Ok(id)
    }

    /// The best payload built for `id`; it stops improving.
    pub async fn get(&self, id: [u8; 8]) -> Option<BuiltPayload> {
        let job = self.jobs.lock().get(&id).cloned()?;
        let mut j = job.lock();
        j.done = true;
        j.best.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::next_gas_limit;

    #[test]
    fn the_gas_limit_moves_toward_the_target_as_geth_moves_it() {
        // 30M toward 60M: up by 30M/1024 − 1 = 29,295 a block.
        assert_eq!(next_gas_limit(30_000_000, 60_000_000), 30_029_295);
        assert_eq!(next_gas_limit(59_990_000, 60_000_000), 60_000_000);
        assert_eq!(next_gas_limit(60_000_000, 30_000_000), 59_941_408);
        assert_eq!(next_gas_limit(36_000_000, 36_000_000), 36_000_000);
        assert_eq!(next_gas_limit(6_000, 1), 5_996);
    }
}
