//! Reading a block's pre-state on a second core while its transactions run.
//!
//! [`execute_block_prewarmed`] executes a block as [`super::execute_block`] does and runs
//! a `moat-prewarm` thread beside it, ahead of the executor. The thread first reads every
//! transaction's sender and recipient (with the recipient's code) and the access lists'
//! entries, then runs the transactions the executor has not reached yet, each alone on
//! the block's pre-state (nonce check off, gas capped at [`PREWARM_GAS`]), and throws
//! the outcomes away. What it leaves behind is the accounts, slots and code it read, in
//! a cache both threads read through ([`Warm`]).
//!
//! A third thread, `moat-trie-warm`, takes every account and slot either thread had to
//! read from the store, in that order, and reads the trie nodes on its path
//! ([`StateReader::warm_trie_path`]): the state root computed after the block then finds
//! them in the store's node cache instead of reading them from the disk one by one (at
//! ten million accounts most of a path's lower nodes are not in memory).
//!
//! Only pre-state values enter that cache: both threads read the parent's state through
//! it, and the executor's own writes stay in revm's `State` above it. So the executor
//! reads exactly the values it would have read from the store; the cost of finding them
//! (the store's B-tree, the write-behind layers, the page cache) has moved to the other
//! core. A speculative run that goes astray (a nonce or a balance an earlier transaction
//! of the block changes) reads a few values nobody asks for, nothing worse.
//!
//! ```text
//!  executor:  tx0 ─ tx1 ─ tx2 ─ tx3 ─ …        progress ──┐
//!  prewarm:   senders, recipients, code, access lists      │ runs a tx past the
//!             then tx1' ─ tx2' ─ … (skips what the executor ◀┘ executor's, discards it)
//!                  ╲      ╲
//!                   Warm: accounts, slots, code of the pre-state ◀── executor reads
//!                     │ first reads from the store, in order
//!  trie-warm:         └▶ the trie nodes on their paths ─▶ the store's node cache
//! ```

use super::{AccountChange, AccountInfo, ExecutedBlock, StateReader, VmError, db, env};
use alloy_primitives::{Address, B256, Bytes, TxKind, U256};
use moat_common::block::Block;
use moat_common::config::{ChainConfig, Fork};
use parking_lot::Mutex;
use revm::ExecuteEvm;
use revm::database::State;
use revm::primitives::KECCAK_EMPTY;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Blocks with fewer transactions run without a prewarm thread: starting one costs more
/// than it could save.
pub const PREWARM_MIN_TXS: usize = 8;

/// The gas a speculative run may spend: it bounds how long the executor, done with the
/// block, waits for the run in flight.
pub const PREWARM_GAS: u64 = 2_000_000;

/// Pre-state values read by either thread, shared between them.
#[derive(Default)]
struct Warm {
    accounts: Mutex<HashMap<Address, Option<AccountInfo>>>,
    slots: Mutex<HashMap<(Address, B256), U256>>,
    code: Mutex<HashMap<B256, Option<Bytes>>>,
    /// The accounts and slots read from the store, in the order they were first read,
    /// for the trie thread to read their trie paths ([`StateReader::warm_trie_path`]).
    paths: Mutex<std::collections::VecDeque<(Address, Option<B256>)>>,
    more: parking_lot::Condvar,
}

impl Warm {
    fn read_from_store(&self, address: &Address, slot: Option<&B256>) {
        self.paths.lock().push_back((*address, slot.copied()));
        self.more.notify_one();
    }
}

/// A thread's reader: the cache first, then the store (what it finds goes in the
/// cache). Counts the reads the cache answered and those it did not.
struct WarmReader<'a> {
    state: &'a (dyn StateReader + Sync),
    warm: &'a Warm,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl<'a> WarmReader<'a> {
    fn new(state: &'a (dyn StateReader + Sync), warm: &'a Warm) -> Self {
        WarmReader {
            state,
            warm,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn through<K: std::hash::Hash + Eq + Copy, V: Clone>(
        &self,
        map: &Mutex<HashMap<K, V>>,
        key: K,
        read: impl FnOnce() -> Result<V, VmError>,
    ) -> Result<V, VmError> {
        if let Some(v) = map.lock().get(&key) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(v.clone());
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let v = read()?;
        map.lock().insert(key, v.clone());
        Ok(v)
    }
}

impl StateReader for WarmReader<'_> {
    fn account(&self, address: &Address) -> Result<Option<AccountInfo>, VmError> {
        self.through(&self.warm.accounts, *address, || {
            self.warm.read_from_store(address, None);
            self.state.account(address)
        })
    }

    fn storage(&self, address: &Address, slot: &B256) -> Result<U256, VmError> {
        self.through(&self.warm.slots, (*address, *slot), || {
            self.warm.read_from_store(address, Some(slot));
            self.state.storage(address, slot)
        })
    }

    fn code(&self, code_hash: &B256) -> Result<Option<Bytes>, VmError> {
        self.through(&self.warm.code, *code_hash, || self.state.code(code_hash))
    }

    fn block_hash(&self, number: u64) -> Result<B256, VmError> {
        self.state.block_hash(number)
    }

    fn state_root_with(&self, changes: &[AccountChange]) -> Result<Option<B256>, VmError> {
        self.state.state_root_with(changes)
    }
}

/// What the prewarm thread did for a block, for the node's metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrewarmStats {
    /// Whether a prewarm thread ran ahead of the executor (speculative runs).
    pub ran: bool,
    /// The executor's reads the cache answered.
    pub warm_reads: u64,
    /// The executor's reads that went to the store.
    pub cold_reads: u64,
}

/// Whether a block is worth a prewarm thread: enough transactions, a second core, and
/// a fork whose receipts do not need a state root after each transaction.
pub(crate) fn worth_prewarming(config: &ChainConfig, block: &Block) -> bool {
    crate::cores() >= 2
        && block.transactions.len() >= PREWARM_MIN_TXS
        && crate::premerge::block_fork(config, &block.header) >= Fork::Byzantium
}

/// [`super::execute_block`] with a prewarm thread beside it (see the module's overview);
/// the same result, block for block. Blocks that are not worth one
/// ([`PREWARM_MIN_TXS`], one core) run without. `speculate: false` leaves out the prewarm
/// thread's speculative runs (the second core is busy elsewhere): it only reads every
/// transaction's sender, recipient, code and access list, and the trie thread their
/// paths, reads that mostly wait for the disk.
pub fn execute_block_prewarmed(
    config: &ChainConfig,
    block: &Block,
    senders: &dyn super::Senders,
    state: &(dyn StateReader + Sync),
    speculate: bool,
) -> Result<(ExecutedBlock, PrewarmStats), VmError> {
    if !worth_prewarming(config, block) || senders.count() != block.transactions.len() {
        return super::execute_block_with(config, block, senders, state)
            .map(|executed| (executed, PrewarmStats::default()));
    }
    let warm = Warm::default();
    let main = WarmReader::new(state, &warm);
    let ahead = WarmReader::new(state, &warm);
    let progress = AtomicUsize::new(0);
    let done = AtomicBool::new(false);
    let executed = std::thread::scope(|scope| {
        let helper = std::thread::Builder::new()
            .name("moat-prewarm".into())
            .spawn_scoped(scope, || {
                run_ahead(config, block, senders, &ahead, &progress, &done, speculate)
            });
        let paths = std::thread::Builder::new()
            .name("moat-trie-warm".into())
            .spawn_scoped(scope, || warm_trie_paths(state, &warm, &done));
        /// Tells the prewarm threads to stop however the executor leaves (an error, a
        /// panic), so the scope's join never waits for more than one run.
        struct Stop<'a>(&'a AtomicBool, &'a Warm);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
                let _queue = self.1.paths.lock();
                self.1.more.notify_all();
            }
        }
        let _stop = Stop(&done, &warm);
        let executed = super::execute(config, block, senders, &main, Some(&progress));
        drop(_stop);
        if let Ok(helper) = helper {
            // A panic in a speculative run is the helper's alone: the block's result
            // stands on the executor's reads.
            let _ = helper.join();
        }
        if let Ok(paths) = paths {
            let _ = paths.join();
        }
        executed
    })?;
    Ok((
        executed,
        PrewarmStats {
            ran: speculate,
            warm_reads: main.hits.load(Ordering::Relaxed),
            cold_reads: main.misses.load(Ordering::Relaxed),
        },
    ))
}

/// The trie thread: reads the trie paths of the accounts and slots the block reads from
/// the store, in the order they were first read, until the executor is done (what is
/// left then, the state root reads itself).
fn warm_trie_paths(state: &(dyn StateReader + Sync), warm: &Warm, done: &AtomicBool) {
    loop {
        let next = {
            let mut queue = warm.paths.lock();
            loop {
                if done.load(Ordering::Acquire) {
                    return;
                }
                if let Some(next) = queue.pop_front() {
                    break next;
                }
                warm.more.wait(&mut queue);
            }
        };
        state.warm_trie_path(&next.0, next.1.as_ref());
    }
}

/// The prewarm thread: the cheap reads for every transaction, then (`speculate`)
/// speculative runs of the transactions past the executor's, until the executor is done.
fn run_ahead(
    config: &ChainConfig,
    block: &Block,
    senders: &dyn super::Senders,
    reader: &WarmReader<'_>,
    progress: &AtomicUsize,
    done: &AtomicBool,
    speculate: bool,
) {
    let stopped = || done.load(Ordering::Acquire);
    // Read errors are the executor's to meet and report: here they only end the warming.
    // Asking for a sender the executor has not reached recovers it here, ahead of the
    // executor (a source that recovers while the block runs); one that does not recover
    // ends the warming.
    for (index, tx) in block.transactions.iter().enumerate() {
        if stopped() {
            return;
        }
        let Ok(sender) = senders.sender(index) else {
            return;
        };
        let sender = &sender;
        let t = tx.tx();
        let read = || -> Result<(), VmError> {
            reader.account(sender)?;
            if let TxKind::Call(to) = t.to()
                && let Some(info) = reader.account(&to)?
                && info.code_hash != KECCAK_EMPTY
            {
                reader.code(&info.code_hash)?;
            }
            for item in t.access_list().iter() {
                reader.account(&item.address)?;
                for key in &item.storage_keys {
                    reader.storage(&item.address, key)?;
                }
            }
            Ok(())
        };
        if read().is_err() {
            return;
        }
    }
    if !speculate {
        return;
    }

    let fork = crate::premerge::block_fork(config, &block.header);
    let Ok(mut setup) = env::BlockSetup::new(config, &block.header, fork) else {
        return;
    };
    setup.cfg_mut().disable_nonce_check = true;
    let db = State::builder()
        .with_database(db::ReaderDb::new(reader))
        .build();
    let mut evm = setup.build_evm(db);
    let mut next = 0;
    loop {
        if stopped() {
            return;
        }
        next = next.max(progress.load(Ordering::Acquire) + 1);
        let Some(tx) = block.transactions.get(next) else {
            return;
        };
        let Ok(sender) = senders.sender(next) else {
            return;
        };
        let mut tx_env = env::tx_env(tx, sender);
        tx_env.gas_limit = tx_env.gas_limit.min(PREWARM_GAS);
        // The outcome is thrown away; a run revm refuses (a balance an earlier tx
        // spends) read what it read before refusing.
        let _ = evm.transact(tx_env);
        next += 1;
    }
}
