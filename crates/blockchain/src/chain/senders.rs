//! A block's senders, recovered while the block executes.
//!
//! Recovering a sender (ECDSA) costs about twice what executing an average transaction
//! does, so a 60M-gas block of a thousand txs spent a fifth of its import recovering
//! them all before its first tx ran. [`Recovering`] hands them to the executor as it
//! reaches each tx instead: helper threads take chunks of txs in order from the front,
//! and the executor, when the sender it needs is not there yet, takes the next chunk
//! nobody has taken (work it would wait for anyway), or, once every chunk is taken,
//! recovers that one sender itself. The sender cache (the pool's) is read first and
//! filled, as before.
//!
//! ```text
//!  helpers:   [0..8)  [16..24)  [32..40) …        each chunk once, in order
//!  executor:  [8..16) run 0..16 run 16..24 …      runs tx i once sender i is there
//! ```

use super::Chain;
use crate::vm::{Senders, VmError};
use alloy_primitives::Address;
use moat_common::block::Block;
use moat_mempool::SenderCache;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

/// Txs a thread takes at once.
const CHUNK: usize = 8;

/// The senders of one block's txs, recovered by whoever gets to each first.
pub(super) struct Recovering<'a> {
    block: &'a Block,
    cache: Option<&'a SenderCache>,
    /// Tx i's sender, or why its signature does not recover.
    found: Vec<OnceLock<Result<Address, String>>>,
    /// The first tx no thread has taken.
    next: AtomicUsize,
    /// Set when the block is done with them (executed, or failed): helpers stop.
    done: AtomicBool,
    /// The executor's thread (the one that made this).
    executor: std::thread::ThreadId,
    /// Time the executor spent recovering or waiting for senders, in ns.
    waited_ns: AtomicU64,
}

impl<'a> Recovering<'a> {
    pub(super) fn new(block: &'a Block, cache: Option<&'a SenderCache>) -> Self {
        Recovering {
            block,
            cache,
            found: (0..block.transactions.len())
                .map(|_| OnceLock::new())
                .collect(),
            next: AtomicUsize::new(0),
            done: AtomicBool::new(false),
            executor: std::thread::current().id(),
            waited_ns: AtomicU64::new(0),
        }
    }

    /// Tx `index`'s sender from the cache, else recovered (and then cached).
    fn recover(&self, index: usize) -> Result<Address, String> {
        let tx = &self.block.transactions[index];
        if let Some(sender) = self.cache.and_then(|c| c.get(&tx.hash())) {
            return Ok(sender);
        }
        let sender = tx
            .recover_sender()
            .map_err(|e| format!("invalid signature: {e}"))?;
        if let Some(c) = self.cache {
            c.insert(tx.hash(), sender);
        }
        Ok(sender)
    }

    /// Takes the next chunk nobody has taken and recovers it. False when none is left.
    fn take_chunk(&self) -> bool {
        let start = self.next.fetch_add(CHUNK, Ordering::Relaxed);
        if start >= self.found.len() {
            return false;
        }
        for index in start..(start + CHUNK).min(self.found.len()) {
            if self.found[index].get().is_none() {
                let _ = self.found[index].set(self.recover(index));
            }
        }
        true
    }

    /// A helper thread's loop: chunks from the front until none is left or the block
    /// is done with them.
    pub(super) fn help(&self) {
        loop {
            if self.done.load(Ordering::Relaxed) || !self.take_chunk() {
                return;
            }
        }
    }

    /// Tells the helpers to stop after their chunk.
    pub(super) fn finish(&self) {
        self.done.store(true, Ordering::Relaxed);
    }

    /// How long the executor (not a prewarm thread asking ahead) spent recovering or
    /// waiting for senders.
    pub(super) fn waited(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.waited_ns.load(Ordering::Relaxed))
    }

    /// Every sender, in order, or the first that does not recover.
    #[cfg(test)]
    fn all(&self) -> Result<Vec<Address>, (usize, String)> {
        (0..self.found.len())
            .map(|index| self.get(index).map_err(|reason| (index, reason)))
            .collect()
    }

    /// Tx `index`'s sender, recovering chunks (or at the end that one sender) until it
    /// is there.
    fn get(&self, index: usize) -> Result<Address, String> {
        let slot = &self.found[index];
        if let Some(found) = slot.get() {
            return found.clone();
        }
        let started = Instant::now();
        while slot.get().is_none() {
            // A chunk nobody has taken is work someone has to do before the block is
            // done; once all are taken, the one still under way is recovered here too
            // (at most a chunk's worth twice, once a block).
            if !self.take_chunk() {
                let _ = slot.set(self.recover(index));
            }
        }
        if std::thread::current().id() == self.executor {
            self.waited_ns
                .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        slot.get().cloned().unwrap_or_else(|| self.recover(index))
    }
}

impl Senders for Recovering<'_> {
    fn count(&self) -> usize {
        self.found.len()
    }

    fn sender(&self, index: usize) -> Result<Address, VmError> {
        if index >= self.found.len() {
            return Err(VmError::InvalidTransaction {
                index,
                reason: "no sender".into(),
            });
        }
        self.get(index)
            .map_err(|reason| VmError::InvalidTransaction { index, reason })
    }
}

impl Chain {
    /// Runs `with` on `block`'s senders as they are recovered: helper threads (one core
    /// fewer than the machine has, one fewer again when `prewarm` runs, whose thread asks
    /// for senders ahead of the executor and so recovers them too) for a block of
    /// [`super::PARALLEL_MIN_SENDERS`] txs or more; below that the executor recovers
    /// each as it needs it.
    pub(super) fn with_senders<R>(
        &self,
        block: &Block,
        prewarm: bool,
        with: impl FnOnce(&Recovering<'_>) -> R,
    ) -> R {
        let senders = Recovering::new(block, self.senders.as_ref());
        let helpers = if block.transactions.len() < super::PARALLEL_MIN_SENDERS {
            0
        } else {
            let cores = crate::cores().min(8);
            cores.saturating_sub(if prewarm { 2 } else { 1 })
        };
        if helpers == 0 {
            return with(&senders);
        }
        std::thread::scope(|scope| {
            for _ in 0..helpers {
                // A helper that cannot start leaves its share to the executor.
                let _ = std::thread::Builder::new()
                    .name("moat-senders".into())
                    .spawn_scoped(scope, || senders.help());
            }
            /// Stops the helpers however `with` leaves (an error, a panic), so the
            /// scope's join waits for one chunk at most.
            struct Finish<'s, 'b>(&'s Recovering<'b>);
            impl Drop for Finish<'_, '_> {
                fn drop(&mut self) {
                    self.0.finish();
                }
            }
            let _finish = Finish(&senders);
            with(&senders)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::{TxKind, U256};
    use moat_common::SignedTransaction;
    use moat_common::transaction::{Eip1559Tx, Transaction};
    use moat_crypto::secp::Signer;

    /// A block of `count` transfers from a few signers, and who signed each.
    fn block_of(count: usize) -> (Block, Vec<Address>) {
        let signers: Vec<Signer> = (1..=5).map(Signer::from_seed).collect();
        let (transactions, senders) = (0..count)
            .map(|i| {
                let signer = &signers[i % signers.len()];
                let tx = Transaction::Eip1559(Eip1559Tx {
                    chain_id: 1,
                    nonce: i as u64,
                    max_fee_per_gas: 1_000_000_000,
                    gas_limit: 21_000,
                    to: TxKind::Call(Address::repeat_byte(0x44)),
                    value: U256::from(i),
                    ..Default::default()
                });
                (SignedTransaction::sign(tx, signer), signer.address())
            })
            .unzip();
        let block = Block {
            header: Default::default(),
            hash: Default::default(),
            transactions,
            ommers: Vec::new(),
            withdrawals: None,
        };
        (block, senders)
    }

    #[test]
    fn every_sender_comes_out_right_however_the_threads_race() {
        let (block, expected) = block_of(203);
        for helpers in [0, 1, 3] {
            for _ in 0..10 {
                let senders = Recovering::new(&block, None);
                let got: Vec<Address> = std::thread::scope(|scope| {
                    for _ in 0..helpers {
                        scope.spawn(|| senders.help());
                    }
                    let got = (0..block.transactions.len())
                        .map(|i| senders.sender(i).unwrap())
                        .collect();
                    senders.finish();
                    got
                });
                assert_eq!(got, expected, "{helpers} helpers");
                assert_eq!(senders.all().unwrap(), expected);
            }
        }
        // Asked out of order, and past the end.
        let senders = Recovering::new(&block, None);
        assert_eq!(senders.sender(150).unwrap(), expected[150]);
        assert_eq!(senders.sender(3).unwrap(), expected[3]);
        assert!(matches!(
            senders.sender(203),
            Err(VmError::InvalidTransaction { index: 203, .. })
        ));
    }

    #[test]
    fn a_signature_that_does_not_recover_is_that_tx_s_error_alone() {
        let (mut block, expected) = block_of(40);
        let tx = &block.transactions[17];
        let mut signature = *tx.signature();
        signature.s = U256::ZERO;
        block.transactions[17] = SignedTransaction::new(tx.tx().clone(), signature);
        let senders = Recovering::new(&block, None);
        std::thread::scope(|scope| {
            scope.spawn(|| senders.help());
            for (i, want) in expected.iter().enumerate() {
                match senders.sender(i) {
                    Ok(sender) => assert_eq!(sender, *want),
                    Err(VmError::InvalidTransaction { index, reason }) => {
                        assert_eq!(index, 17);
                        assert!(reason.starts_with("invalid signature"), "{reason}");
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            senders.finish();
        });
        assert_eq!(senders.all().unwrap_err().0, 17);
    }
}
