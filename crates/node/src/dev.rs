//! Dev mode: a built-in chain with well-known prefunded keys, and a block producer that
//! seals a block from the pool every period (or on every transaction with period 0).

use alloy_primitives::{Address, B256, Bytes, U256, keccak256};
use moat_blockchain::chain::{Chain, ImportOutcome, StateEdit};
use moat_blockchain::payload::{MinerConfig, PayloadAttributes};
use moat_common::config::{ChainConfig, Fork, Genesis, GenesisAccount};
use moat_common::system_contracts as sys;
use moat_common::transaction::PooledTransaction;
use moat_crypto::secp::Signer;
use moat_mempool::maintain::Maintainer;
use moat_mempool::{Pool, TxInput};
use moat_rpc::{DevRequest, MineTime, RpcContext};
use std::collections::BTreeMap;
use std::time::Duration;

/// The dev chain's id (as anvil and geth's dev mode use).
pub(crate) const DEV_CHAIN_ID: u64 = 1337;

/// The well-known development keys (the "test test … junk" mnemonic's first accounts), so
/// tools configured for anvil or hardhat work unchanged.
pub(crate) const DEV_KEYS: [&str; 5] = [
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
    "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a",
];

/// 10,000 ether per dev account.
const DEV_BALANCE: u128 = 10_000 * 1_000_000_000_000_000_000;

pub(crate) fn dev_signers() -> Vec<Signer> {
    DEV_KEYS
        .iter()
        .map(|k| {
            Signer::from_bytes(&k.parse::<B256>().expect("dev keys are valid hex"))
                .expect("dev keys are valid")
        })
        .collect()
}

/// The dev genesis: every fork through Prague at block 0 (Osaka too if asked), the
/// system contracts deployed, the dev accounts funded.
pub(crate) fn dev_genesis(osaka: bool) -> Genesis {
    let last = if osaka { Fork::Osaka } else { Fork::Prague };
    let config = ChainConfig::all_forks_at_genesis(DEV_CHAIN_ID, last);
    let mut alloc = BTreeMap::new();
    for s in dev_signers() {
        alloc.insert(
            s.address(),
            GenesisAccount {
                balance: U256::from(DEV_BALANCE),
                ..Default::default()
            },
        );
    }
    alloc.extend(sys::genesis_accounts());
    Genesis {
        config,
        extra_data: Bytes::from_static(b"moat dev"),
        gas_limit: 30_000_000,
        alloc,
        base_fee_per_gas: Some(1_000_000_000),
        ..Default::default()
    }
}

/// The dev clock: the shift `evm_increaseTime` asked for, and the next block's time if
/// `evm_setNextBlockTimestamp` set one.
#[derive(Debug, Default)]
struct DevClock {
    shift: u64,
    next: Option<u64>,
}

impl DevClock {
    /// The next block's timestamp on `head`: the one set, else now plus the shift; always
    /// later than the head's. A head at the last timestamp there is (which
    /// `evm_setNextBlockTimestamp` can ask for) has no next block.
    fn next_timestamp(&mut self, head: &moat_common::block::Header) -> Result<u64, String> {
        let earliest = head.timestamp.checked_add(1).ok_or_else(|| {
            format!(
                "the head's timestamp is {}: no later block can be sealed",
                head.timestamp
            )
        })?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Ok(self
            .next
            .take()
            .unwrap_or_else(|| now.saturating_add(self.shift))
            .max(earliest))
    }

    /// The next block's timestamp is `ts`, which must be later than the head's.
    fn set_next(&mut self, chain: &Chain, ts: u64) -> Result<(), String> {
        let head = chain.head_header().map_err(|e| e.to_string())?;
        if ts <= head.timestamp {
            return Err(format!(
                "timestamp {ts} is not later than the head's ({})",
                head.timestamp
            ));
        }
        self.next = Some(ts);
        Ok(())
    }
}

/// What `evm_snapshot` remembers: the head and the pool's transactions.
#[derive(Debug)]
struct Snapshot {
    id: u64,
    number: u64,
    hash: B256,
    /// Each with the sender the pool had for it.
    pool: Vec<(PooledTransaction, Address)>,
}

/// The attributes of the dev block built on `head` at `timestamp`.
fn dev_attrs(
    rpc: &RpcContext,
    head: &moat_common::block::Header,
    timestamp: u64,
) -> PayloadAttributes {
    PayloadAttributes {
        timestamp,
        prev_randao: keccak256(head.hash()),
        suggested_fee_recipient: rpc.coinbase.unwrap_or(Address::ZERO),
        withdrawals: Some(Vec::new()),
        parent_beacon_block_root: Some(B256::ZERO),
    }
}

/// Names the dev chain's safe and finalized blocks after a head change
/// ([`Chain::mark_dev_head`]); a failure is logged, and the head change stands.
fn mark_dev_head(chain: &Chain) {
    if let Err(e) = chain.mark_dev_head() {
        tracing::warn!(error = %e, "dev chain: safe and finalized blocks not marked");
    }
}

/// Seals one block from the pool on the head and makes it the new head.
async fn produce_block(
    chain: &Chain,
    pool: &Pool,
    maintainer: &Maintainer,
    rpc: &RpcContext,
    miner: &MinerConfig,
    clock: &mut DevClock,
) -> Result<Option<(u64, usize)>, String> {
    let head = chain.head_header().map_err(|e| e.to_string())?;
    let attrs = dev_attrs(rpc, &head, clock.next_timestamp(&head)?);
    let (c, p, m) = (chain.clone(), pool.clone(), miner.clone());
    let parent = head.hash();
    let built = tokio::task::spawn_blocking(move || c.build_payload_with(&p, parent, &attrs, &m))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let block = built.block;
    // Import reads senders from the sender cache before recovering them. The block was
    // built with the pool's senders, and an impersonated sender's placeholder signature
    // does not recover to it: its entry must be there even if the bounded cache let it
    // go since the submission, or the import would execute the tx as someone else's.
    let cache = pool.sender_cache();
    for tx in &block.transactions {
        if let Some(pooled) = pool.get(&tx.hash()) {
            cache.insert(tx.hash(), pooled.sender);
        }
    }
    let (c, b) = (chain.clone(), block.clone());
    match tokio::task::spawn_blocking(move || c.import(&b))
        .await
        .map_err(|e| e.to_string())?
    {
        Ok(ImportOutcome::Imported { number, .. }) => {
            let c = chain.clone();
            tokio::task::spawn_blocking(move || mark_dev_head(&c))
                .await
                .map_err(|e| e.to_string())?;
            // The pool follows the new head (its upkeep task, as for any import): the
            // next block is built from a pool without this one's transactions.
            maintainer.caught_up().await;
            Ok(Some((number, block.transactions.len())))
        }
        Ok(ImportOutcome::AlreadyKnown) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Seals a block carrying `edits` (see [`Chain::seal_state_edits`]) and tells the pool.
async fn seal_edits(
    chain: &Chain,
    maintainer: &Maintainer,
    rpc: &RpcContext,
    miner: &MinerConfig,
    clock: &mut DevClock,
    edits: Vec<StateEdit>,
) -> Result<(), String> {
    let head = chain.head_header().map_err(|e| e.to_string())?;
    let attrs = dev_attrs(rpc, &head, clock.next_timestamp(&head)?);
    let (c, m) = (chain.clone(), miner.clone());
    let block = tokio::task::spawn_blocking(move || c.seal_state_edits(&attrs, &m, &edits))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    tracing::info!(number = block.header.number, "sealed a state edit");
    mark_dev_head(chain);
    // The edited accounts are in the block's undo record: the pool's upkeep reads them
    // again with the block's other changes.
    maintainer.caught_up().await;
    Ok(())
}

/// The pool's transactions and their senders, oldest nonce first per sender.
fn pool_transactions(pool: &Pool) -> Vec<(PooledTransaction, Address)> {
    pool.content()
        .into_iter()
        .flat_map(|(_, txs)| txs.into_iter().map(|(tx, _)| (tx.tx.clone(), tx.sender)))
        .collect()
}

/// `evm_revert`: the head goes back to the snapshot's block (the undo records take the
/// later blocks' state back), and the pool holds again what it held then.
async fn revert(
    chain: &Chain,
    pool: &Pool,
    maintainer: &Maintainer,
    snapshots: &mut Vec<Snapshot>,
    id: u64,
) -> Result<bool, String> {
    let Some(at) = snapshots.iter().position(|s| s.id == id) else {
        return Ok(false);
    };
    let err = |e: moat_blockchain::chain::ChainError| e.to_string();
    let (number, hash) = (snapshots[at].number, snapshots[at].hash);
    if chain
        .header_by_number(number)
        .map_err(err)?
        .map(|h| h.hash())
        != Some(hash)
    {
        snapshots.truncate(at);
        return Ok(false);
    }
    // A rewind that fails (past the undo records' depth) keeps the snapshots.
    let c = chain.clone();
    tokio::task::spawn_blocking(move || c.rewind_to(number))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("snapshot {id} (block {number}) cannot be restored: {e}"))?;
    // This snapshot and every later one are used up, as in anvil.
    let taken: Vec<Snapshot> = snapshots.drain(at..).collect();
    mark_dev_head(chain);
    // The pool follows the rewind first (its upkeep task gives it the undone blocks'
    // transactions), then holds exactly what it held at the snapshot.
    maintainer.caught_up().await;
    let snap = &taken[0];
    for (_, txs) in pool.content() {
        if let Some((first, _)) = txs.first() {
            pool.remove_with_descendants(&first.hash());
        }
    }
    for (tx, sender) in snap.pool.iter().cloned() {
        // The sender the pool had: an impersonated one's placeholder signature does not
        // recover to it, and the cache may have dropped it since the snapshot.
        pool.sender_cache().insert(tx.hash(), sender);
        // A transaction the snapshot's state no longer takes is left out.
        let _ = pool.submit_local(TxInput::Decoded(Box::new(tx))).await;
    }
    Ok(true)
}

fn log_block(result: &Result<Option<(u64, usize)>, String>) {
    match result {
        Ok(Some((number, txs))) => tracing::info!(number, txs, "sealed block"),
        Ok(None) => {}
        Err(e) => tracing::error!(error = %e, "block production failed"),
    }
}

/// Produces blocks forever: every `period`, or, with a zero period, whenever a
/// transaction becomes pending; and at once for each `evm_mine` request. The dev
/// methods' other requests (state edits, snapshots, the clock) are served here too, one
/// at a time between blocks.
pub(crate) async fn run_producer(
    chain: Chain,
    pool: Pool,
    maintainer: Maintainer,
    rpc: RpcContext,
    period: Duration,
    miner: MinerConfig,
    mut requests: tokio::sync::mpsc::Receiver<DevRequest>,
) {
    // A fresh dev chain's genesis is safe and final; later blocks are marked as sealed.
    mark_dev_head(&chain);
    let mut pending = pool.subscribe_pending();
    let mut requests_open = true;
    let mut clock = DevClock::default();
    let mut snapshots: Vec<Snapshot> = Vec::new();
    let mut next_id = 0u64;
    // The next periodic block is due at a fixed time, whatever requests come between:
    // an RPC client's stream of transactions (each one an automine request) must not
    // keep putting the block off.
    let mut due = tokio::time::Instant::now() + period;
    loop {
        let timer = async {
            if period.is_zero() {
                if pending.recv().await.is_err() {
                    return false;
                }
                // Let a burst of transactions land in one block.
                tokio::time::sleep(Duration::from_millis(50)).await;
                while pending.try_recv().is_ok() {}
            } else {
                tokio::time::sleep_until(due).await;
            }
            true
        };
        let asked = tokio::select! {
            r = requests.recv(), if requests_open => match r {
                Some(request) => Some(request),
                None => {
                    requests_open = false;
                    continue;
                }
            },
            go = timer => {
                if !go {
                    continue;
                }
                None
            }
        };
        let reply = match asked {
            None => None,
            Some(DevRequest::Mine(at, reply)) => {
                let at = match at {
                    MineTime::Clock => Ok(()),
                    MineTime::At(ts) => clock.set_next(&chain, ts),
                    MineTime::AfterHead(secs) => chain
                        .head_header()
                        .map_err(|e| e.to_string())
                        .and_then(|h| clock.set_next(&chain, h.timestamp.saturating_add(secs))),
                };
                if let Err(e) = at {
                    let _ = reply.send(Err(e));
                    continue;
                }
                Some(reply)
            }
            Some(DevRequest::Automine(reply)) => {
                // With period 0 the submitted tx goes into a block now (unless a block
                // already took it), and its pending notice is spent.
                if period.is_zero() && pool.status().pending.txs > 0 {
                    let result =
                        produce_block(&chain, &pool, &maintainer, &rpc, &miner, &mut clock).await;
                    log_block(&result);
                    while pending.try_recv().is_ok() {}
                }
                let _ = reply.send(Ok(()));
                continue;
            }
            Some(DevRequest::Edit(edits, reply)) => {
                let r = seal_edits(&chain, &maintainer, &rpc, &miner, &mut clock, edits).await;
                let _ = reply.send(r);
                continue;
            }
            Some(DevRequest::Snapshot(reply)) => {
                let r = chain.head_header().map_err(|e| e.to_string()).map(|head| {
                    let id = next_id;
                    next_id += 1;
                    snapshots.push(Snapshot {
                        id,
                        number: head.number,
                        hash: head.hash(),
                        pool: pool_transactions(&pool),
                    });
                    id
                });
                let _ = reply.send(r);
                continue;
            }
            Some(DevRequest::Revert(id, reply)) => {
                let r = revert(&chain, &pool, &maintainer, &mut snapshots, id).await;
                let _ = reply.send(r);
                continue;
            }
            Some(DevRequest::IncreaseTime(secs, reply)) => {
                clock.shift = clock.shift.saturating_add(secs);
                let _ = reply.send(Ok(clock.shift));
                continue;
            }
            Some(DevRequest::SetNextTimestamp(ts, reply)) => {
                let _ = reply.send(clock.set_next(&chain, ts));
                continue;
            }
        };
        let result = produce_block(&chain, &pool, &maintainer, &rpc, &miner, &mut clock).await;
        log_block(&result);
        due = tokio::time::Instant::now() + period;
        if let Some(reply) = reply {
            let _ = reply.send(result.map(|r| r.map(|(number, _)| number)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use moat_blockchain::history::StateAtBlock;
    use moat_blockchain::vm::StateReader;
    use moat_common::transaction::{Eip1559Tx, SignedTransaction, Transaction};
    use moat_mempool::PoolConfig;
    use moat_rpc::StoreStateView;
    use moat_storage::Store;
    use std::sync::Arc;

    /// A dev chain, its pool (with a sender cache of `cache` entries) and RPC context.
    fn dev_node(cache: usize) -> (Chain, Pool, RpcContext, Maintainer) {
        let store = Store::in_memory();
        let chain = Chain::init(store.clone(), &dev_genesis(false)).unwrap();
        let mut config = PoolConfig::new(chain.config().clone());
        config.sender_cache_capacity = cache;
        let view = StoreStateView::new(store, chain.config().clone());
        let pool = Pool::new(config, Arc::new(view));
        let chain = chain.with_sender_cache(pool.sender_cache().clone());
        let rpc = RpcContext::new(chain.clone(), pool.clone());
        let maintainer = moat_blockchain::maintain::spawn(&chain, &pool);
        (chain, pool, rpc, maintainer)
    }

    fn account(chain: &Chain, a: Address) -> (U256, u64) {
        let state = StateAtBlock::head(chain.store().clone());
        StateReader::account(&state, &a)
            .unwrap()
            .map_or((U256::ZERO, 0), |i| (i.balance, i.nonce))
    }

    /// Other transactions' senders, each read again (as admission and import read them),
    /// push `hash`'s entry out of the pool's bounded sender cache.
    fn push_out_of_sender_cache(pool: &Pool, hash: B256) {
        for i in 0..10_000u64 {
            let other = B256::from(U256::from(i));
            pool.sender_cache().insert(other, Address::ZERO);
            for _ in 0..3 {
                pool.sender_cache().get(&other);
            }
        }
        assert!(!pool.sender_cache().contains(&hash));
    }

    #[tokio::test]
    async fn an_impersonated_transfer_is_mined_as_its_sender_after_the_cache_dropped_it() {
        let (chain, pool, rpc, maintainer) = dev_node(16);
        let miner = MinerConfig::default();
        let mut clock = DevClock::default();
        let (whale, to) = (Address::repeat_byte(0xcc), Address::repeat_byte(0xdd));
        let ether = U256::from(10u64).pow(U256::from(18));
        seal_edits(
            &chain,
            &maintainer,
            &rpc,
            &miner,
            &mut clock,
            vec![StateEdit::Balance(whale, ether)],
        )
        .await
        .unwrap();
        // What eth_sendTransaction does for an impersonated sender.
        let tx = Transaction::Eip1559(Eip1559Tx {
            chain_id: DEV_CHAIN_ID,
            nonce: 0,
            max_priority_fee_per_gas: 1_000_000_000,
            max_fee_per_gas: 10_000_000_000,
            gas_limit: 21_000,
            to: alloy_primitives::TxKind::Call(to),
            value: U256::from(5),
            input: Bytes::new(),
            access_list: Vec::new(),
        });
        let signed = SignedTransaction::new(tx, moat_rpc::impersonated_signature(&whale));
        pool.sender_cache().insert(signed.hash(), whale);
        pool.submit_local(TxInput::Raw(Bytes::from(signed.encoded_2718())))
            .await
            .unwrap();
        push_out_of_sender_cache(&pool, signed.hash());

        let sealed = produce_block(&chain, &pool, &maintainer, &rpc, &miner, &mut clock).await;
        assert_eq!(sealed, Ok(Some((2, 1))));
        assert_eq!(account(&chain, to), (U256::from(5), 0));
        let (balance, nonce) = account(&chain, whale);
        assert_eq!(nonce, 1);
        assert!(balance < ether - U256::from(5));
    }

    #[tokio::test]
    async fn a_revert_gives_the_pool_back_an_impersonated_transfer_the_cache_dropped() {
        let (chain, pool, rpc, maintainer) = dev_node(16);
        let miner = MinerConfig::default();
        let mut clock = DevClock::default();
        let whale = Address::repeat_byte(0xcc);
        let ether = U256::from(10u64).pow(U256::from(18));
        let edit = vec![StateEdit::Balance(whale, ether)];
        seal_edits(&chain, &maintainer, &rpc, &miner, &mut clock, edit)
            .await
            .unwrap();
        let signed = SignedTransaction::new(
            Transaction::Eip1559(Eip1559Tx {
                chain_id: DEV_CHAIN_ID,
                nonce: 0,
                max_priority_fee_per_gas: 1_000_000_000,
                max_fee_per_gas: 10_000_000_000,
                gas_limit: 21_000,
                to: alloy_primitives::TxKind::Call(Address::repeat_byte(0xdd)),
                value: U256::from(5),
                input: Bytes::new(),
                access_list: Vec::new(),
            }),
            moat_rpc::impersonated_signature(&whale),
        );
        pool.sender_cache().insert(signed.hash(), whale);
        pool.submit_local(TxInput::Raw(Bytes::from(signed.encoded_2718())))
            .await
            .unwrap();
        let head = chain.head_header().unwrap();
        let mut snapshots = vec![Snapshot {
            id: 0,
            number: head.number,
            hash: head.hash(),
            pool: pool_transactions(&pool),
        }];
        assert_eq!(snapshots[0].pool.len(), 1);
        produce_block(&chain, &pool, &maintainer, &rpc, &miner, &mut clock)
            .await
            .unwrap();
        assert!(pool.get(&signed.hash()).is_none(), "mined");
        push_out_of_sender_cache(&pool, signed.hash());

        assert_eq!(
            revert(&chain, &pool, &maintainer, &mut snapshots, 0).await,
            Ok(true)
        );
        let back = pool
            .get(&signed.hash())
            .expect("the transfer is pending again");
        assert_eq!(back.sender, whale);
    }

    #[tokio::test]
    async fn a_revert_past_the_undo_depth_fails_and_keeps_its_snapshots() {
        use moat_blockchain::undo::UNDO_DEPTH;
        let (chain, pool, rpc, maintainer) = dev_node(1024);
        let miner = MinerConfig::default();
        let mut clock = DevClock::default();
        let snapshot = |id: u64| {
            let head = chain.head_header().unwrap();
            Snapshot {
                id,
                number: head.number,
                hash: head.hash(),
                pool: Vec::new(),
            }
        };
        let mut snapshots = vec![snapshot(0)];
        for _ in 0..=UNDO_DEPTH {
            let sealed = produce_block(&chain, &pool, &maintainer, &rpc, &miner, &mut clock).await;
            assert!(matches!(sealed, Ok(Some(_))), "{sealed:?}");
        }
        snapshots.push(snapshot(1));
        produce_block(&chain, &pool, &maintainer, &rpc, &miner, &mut clock)
            .await
            .unwrap();
        let head = UNDO_DEPTH + 2;
        assert_eq!(chain.head().unwrap().0, head);

        // Block 0 is past the undo records: refused, the chain and snapshots as they were.
        let e = revert(&chain, &pool, &maintainer, &mut snapshots, 0)
            .await
            .unwrap_err();
        assert!(
            e.starts_with("snapshot 0 (block 0) cannot be restored"),
            "{e}"
        );
        assert_eq!(chain.head().unwrap().0, head);
        assert_eq!(snapshots.len(), 2);
        // The later snapshot is in reach; it is used up by the revert.
        assert_eq!(
            revert(&chain, &pool, &maintainer, &mut snapshots, 1).await,
            Ok(true)
        );
        assert_eq!(chain.head().unwrap().0, head - 1);
        assert_eq!(snapshots.iter().map(|s| s.id).collect::<Vec<_>>(), [0]);
        // As geth's dev mode: the head is safe, the last multiple of 32 final.
        use moat_blockchain::chain::Mark;
        let number = |m| chain.mark(m).unwrap().map(|(n, _)| n);
        assert_eq!(number(Mark::Safe), Some(head - 1));
        assert_eq!(number(Mark::Finalized), Some((head - 1) / 32 * 32));
        assert_eq!(
            revert(&chain, &pool, &maintainer, &mut snapshots, 1).await,
            Ok(false)
        );
    }

    #[tokio::test]
    async fn a_mine_request_carries_its_block_time_to_the_producer() {
        let (chain, pool, rpc, maintainer) = dev_node(1024);
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let producer = tokio::spawn(run_producer(
            chain.clone(),
            pool,
            maintainer,
            rpc,
            Duration::from_secs(3600),
            MinerConfig::default(),
            rx,
        ));
        let mine = |at: MineTime| {
            let tx = tx.clone();
            async move {
                let (reply, answer) = tokio::sync::oneshot::channel();
                tx.send(DevRequest::Mine(at, reply)).await.unwrap();
                answer.await.unwrap()
            }
        };
        let far = 4_000_000_000;
        assert_eq!(mine(MineTime::At(far)).await, Ok(Some(1)));
        assert_eq!(chain.head_header().unwrap().timestamp, far);
        assert_eq!(mine(MineTime::AfterHead(10)).await, Ok(Some(2)));
        assert_eq!(chain.head_header().unwrap().timestamp, far + 10);
        // Not after the head's: refused, nothing sealed.
        assert!(mine(MineTime::At(far)).await.is_err());
        assert_eq!(chain.head().unwrap().0, 2);
        // The clock's time is never before the head's.
        assert_eq!(mine(MineTime::Clock).await, Ok(Some(3)));
        assert_eq!(chain.head_header().unwrap().timestamp, far + 11);
        producer.abort();
    }

    #[test]
    fn a_head_at_the_last_timestamp_has_no_next_block() {
        let mut clock = DevClock {
            shift: u64::MAX,
            next: None,
        };
        let mut head = moat_common::block::Header {
            timestamp: u64::MAX - 1,
            ..Default::default()
        };
        assert_eq!(clock.next_timestamp(&head), Ok(u64::MAX));
        head.timestamp = u64::MAX;
        assert!(clock.next_timestamp(&head).is_err());
        // A set timestamp not after the head's gives way to the head's next second.
        clock.next = Some(5);
        head.timestamp = 9;
        assert_eq!(clock.next_timestamp(&head), Ok(10));
    }
}
