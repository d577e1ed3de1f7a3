//! The pool's upkeep, driven by the chain: one task ([`spawn`]) follows the canonical
//! head the chain publishes and tells the pool what each move means. Whoever moved the
//! head — the engine API, the syncer, dev mode's block producer, a reorg — only imports
//! blocks; the pool follows the same way for all of them.
//!
//! ```text
//!  Chain::import / set_head / rewind ─▶ CanonHead (watch: seq, number, hash)
//!                                            │
//!                 maintain task ◀────────────┘
//!   catch_up: from the pool's head to the new one
//!     ├─ pool's head still canonical: the blocks above it (at most MAX_CATCH_UP, else the head's)
//!     └─ pool's head undone: the undone blocks (removed) and the new branch (added)
//!   ─▶ CanonChain::keep_blob_txs for each added block (sidecars kept for reorgs)
//!   ─▶ HeadUpdate: the head's fees, txs mined, accounts touched, undone txs back
//!   ─▶ Pool::on_head_change
//!   ─▶ Maintainer::subscribe (the pool is at this head: newHeads, peers' announcements)
//! ```
//!
//! The task reads the chain through [`CanonChain`], which the chain implements: the pool
//! does not depend on how blocks are stored. A caller that must see the pool at the head
//! it just made (newPayload, forkchoiceUpdated before a payload is built, dev mode's
//! next block) awaits [`Maintainer::caught_up`]. Heads come through a `watch`, so a task
//! that falls behind skips to the newest head and catches up in one step, never queues.

use crate::{HeadInfo, HeadUpdate, Pool};
use alloy_primitives::{Address, B256};
use moat_common::block::{Block, Header};
use moat_common::transaction::{PooledTransaction, TxType};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Blocks of one move the pool is told of one by one; past it, only the new head's (the
/// pool's nonce checks drop what the rest mined).
pub const MAX_CATCH_UP: u64 = 1024;

/// How long [`Maintainer::caught_up`] waits for the task before it gives up (and says so
/// in the log): a caller is delayed, never stuck.
pub const CATCH_UP_WAIT: Duration = Duration::from_secs(10);

/// A canonical head as the chain publishes it. `seq` grows with every publication, so a
/// waiter can tell "the pool saw this move" from "the head has this hash".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CanonHead {
    /// Publications so far (0: the head the chain was opened at).
    pub seq: u64,
    /// The head's number.
    pub number: u64,
    /// The head's hash.
    pub hash: B256,
}

/// The chain as the pool's upkeep reads it. Implemented by the chain; every method is
/// blocking (store reads and writes) and is called off the async runtime.
pub trait CanonChain: Send + Sync + 'static {
    /// The canonical block at `number`, if any.
    fn canonical_hash(&self, number: u64) -> Option<B256>;
    /// A stored block, canonical or not.
    fn block(&self, hash: &B256) -> Option<Block>;
    /// The number of stored block `hash`, canonical or not (without reading its body).
    fn block_number(&self, hash: &B256) -> Option<u64> {
        self.block(hash).map(|block| block.header.number)
    }
    /// The oldest block a reorg can have taken off the chain: below it, every stored block
    /// is canonical, so the walk back from an undone head stops there.
    fn reorg_floor(&self) -> u64;
    /// The pool's view of the block after `header`: its fees and gas limit.
    fn head_info(&self, header: &Header) -> HeadInfo;
    /// Every account a canonical block changed, when the chain still knows it (its undo
    /// record): transfers made by contracts change balances no sender or beneficiary
    /// shows.
    fn changed_accounts(&self, block: &Block) -> Option<Vec<Address>>;
    /// Keeps the blob txs `block` mines, with the sidecars the pool holds, while a reorg
    /// may take the block back (a block carries no sidecar), and forgets those of blocks
    /// that have left that window.
    fn keep_blob_txs(&self, block: &Block, pool: &Pool);
    /// A mined blob tx kept by [`CanonChain::keep_blob_txs`], sidecar included.
    fn kept_blob_tx(&self, hash: &B256) -> Option<PooledTransaction>;
}

/// The running upkeep task, as its users see it. Cloning shares it.
#[derive(Debug, Clone)]
pub struct Maintainer {
    chain_heads: watch::Receiver<CanonHead>,
    pool_heads: watch::Receiver<CanonHead>,
}

impl Maintainer {
    /// The head the pool was last brought to, each time it moves.
    pub fn subscribe(&self) -> watch::Receiver<CanonHead> {
        self.pool_heads.clone()
    }

    /// The head the pool was last brought to.
    pub fn pool_head(&self) -> CanonHead {
        *self.pool_heads.borrow()
    }

    /// Waits until the pool has followed every head the chain had published when this was
    /// called. `false` if the task is gone or took longer than [`CATCH_UP_WAIT`].
    pub async fn caught_up(&self) -> bool {
        let target = self.chain_heads.borrow().seq;
        let mut pool_heads = self.pool_heads.clone();
        let wait = pool_heads.wait_for(|h| h.seq >= target);
        match tokio::time::timeout(CATCH_UP_WAIT, wait).await {
            Ok(Ok(_)) => true,
            Ok(Err(_)) => false,
            Err(_) => {
                tracing::warn!(seq = target, "the pool's upkeep is behind the chain");
                false
            }
        }
    }
}

/// Spawns the upkeep task on the current runtime. `heads` is the chain's canonical-head
/// channel; the pool is taken to be at the head it holds now. The task holds the chain
/// (and so the channel's sender): it runs until its runtime shuts down.
pub fn spawn(
    pool: Pool,
    chain: Arc<dyn CanonChain>,
    heads: watch::Receiver<CanonHead>,
) -> Maintainer {
    let start = *heads.borrow();
    let (done, pool_heads) = watch::channel(start);
    let maintainer = Maintainer {
        chain_heads: heads.clone(),
        pool_heads,
    };
    tokio::spawn(run(pool, chain, heads, done));
    maintainer
}

/// The task's loop: each new head is caught up with in one step.
async fn run(
    pool: Pool,
    chain: Arc<dyn CanonChain>,
    mut heads: watch::Receiver<CanonHead>,
    done: watch::Sender<CanonHead>,
) {
    let mut at = *heads.borrow_and_update();
    loop {
        if heads.changed().await.is_err() {
            return;
        }
        let target = *heads.borrow_and_update();
        if target.hash != at.hash {
            let (c, p, from) = (Arc::clone(&chain), pool.clone(), at.hash);
            match tokio::task::spawn_blocking(move || catch_up(&*c, &p, from, target)).await {
                Ok(Some(update)) => {
                    pool.on_head_change(update).await;
                }
                Ok(None) => {
                    tracing::debug!(head = %target.hash, "new head not readable; pool left as it was")
                }
                Err(e) => tracing::error!(error = %e, "pool upkeep failed"),
            }
        }
        at = target;
        done.send_replace(target);
    }
}

/// What the move from the pool's head `from` to `to` tells the pool. `None` when the new
/// head's block cannot be read (a snap-synced head without its body, a store error).
pub fn catch_up(
    chain: &dyn CanonChain,
    pool: &Pool,
    from: B256,
    to: CanonHead,
) -> Option<HeadUpdate> {
    let head = chain.block(&to.hash)?;
    // Walk back from the pool's head until the canonical chain: the blocks passed were
    // undone. The walk stops at the reorg floor (no reorg reaches below it) and at a block
    // the store does not hold (the pool's head from before a snap sync). A canonical
    // block ends it by its number alone (the usual case, the pool's head the new head's
    // parent): no body is read, and the floor is asked for only once a block was undone.
    let mut floor = None;
    let mut removed = Vec::new();
    let mut at = from;
    let fork = loop {
        let Some(n) = chain.block_number(&at) else {
            break None;
        };
        if chain.canonical_hash(n) == Some(at) {
            break Some(n);
        }
        if n <= *floor.get_or_insert_with(|| chain.reorg_floor()) {
            removed.clear();
            break None;
        }
        let Some(block) = chain.block(&at) else {
            break None;
        };
        at = block.header.parent_hash;
        removed.push(block);
    };
    removed.reverse();
    let first = match fork {
        Some(fork) if to.number.saturating_sub(fork) <= MAX_CATCH_UP => fork + 1,
        _ => to.number,
    };
    // A head moved back to one of its ancestors (dev mode's revert) adds nothing.
    let header = head.header.clone();
    let mut added = Vec::new();
    if first <= to.number {
        for n in first..to.number {
            let block = chain
                .canonical_hash(n)
                .and_then(|hash| chain.block(&hash))?;
            added.push(block);
        }
        added.push(head);
    }
    for block in &added {
        pool.note_mined_block(crate::inclusion::MinedBlock::of(block));
    }
    if !removed.is_empty() {
        metrics::counter!("moat_pool_reorgs_total").increment(1);
        tracing::info!(
            removed = removed.len(),
            added = added.len(),
            head = %to.hash,
            "pool follows a reorg"
        );
    }
    Some(reorg_update(chain, pool, &removed, &added, &header))
}

/// What one new canonical block tells the pool: its head, the txs it mined, and the
/// accounts it touched. Keeps nothing (see [`reorg_update`], which does).
pub fn block_update(chain: &dyn CanonChain, pool: &Pool, block: &Block) -> HeadUpdate {
    HeadUpdate {
        head: chain.head_info(&block.header),
        mined: block.transactions.iter().map(|tx| tx.hash()).collect(),
        touched: touched_by(chain, pool, block),
        reorged: Vec::new(),
    }
}

/// Accounts `block` changed that the pool may hold txs of, sorted and distinct: its
/// senders, beneficiary and withdrawal recipients, and every account its undo record
/// names when the chain still has it. Senders whose txs the pool does not hold still
/// matter: another tx of theirs with the same nonce may be pooled, and it is stale now.
/// Senders come from the pool's cache (import filled it), else from ECDSA.
fn touched_by(chain: &dyn CanonChain, pool: &Pool, block: &Block) -> Vec<Address> {
    let cache = pool.sender_cache();
    let mut touched: Vec<Address> = block
        .transactions
        .iter()
        .filter_map(|tx| cache.get(&tx.hash()).or_else(|| tx.recover_sender().ok()))
        .collect();
    touched.push(block.header.beneficiary);
    touched.extend(block.withdrawals.iter().flatten().map(|w| w.address));
    touched.extend(chain.changed_accounts(block).into_iter().flatten());
    touched.sort_unstable();
    touched.dedup();
    touched
}

/// A move to `head`: the new blocks (`added`, oldest first) mine their txs and their blob
/// txs are kept; the accounts of both branches are touched; the undone blocks' txs
/// (`removed`) that the new ones do not hold go back to the pool, blob txs only with the
/// sidecar kept when they were mined. With nothing removed, the chain simply grew.
pub fn reorg_update(
    chain: &dyn CanonChain,
    pool: &Pool,
    removed: &[Block],
    added: &[Block],
    head: &Header,
) -> HeadUpdate {
    let mut update = HeadUpdate {
        head: chain.head_info(head),
        ..HeadUpdate::default()
    };
    for block in added.iter().chain(removed) {
        update.touched.extend(touched_by(chain, pool, block));
    }
    for block in added {
        chain.keep_blob_txs(block, pool);
        update
            .mined
            .extend(block.transactions.iter().map(|tx| tx.hash()));
    }
    update.touched.sort_unstable();
    update.touched.dedup();
    let mined: HashSet<_> = update.mined.iter().copied().collect();
    for tx in removed.iter().flat_map(|b| &b.transactions) {
        if mined.contains(&tx.hash()) {
            continue;
        }
        if tx.tx_type() != TxType::Eip4844 {
            update
                .reorged
                .push(PooledTransaction::new(tx.clone(), None));
        } else if let Some(kept) = chain.kept_blob_tx(&tx.hash()) {
            update.reorged.push(kept);
        }
    }
    update
}
