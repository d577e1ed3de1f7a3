//! `root`: the state-root update of a synthetic block on a real datadir.
//!
//! The block's changes are built by hand the way execution hands them over
//! (`AccountChange`s sorted by address): `--touch` synthetic accounts get a new balance
//! (nonce and code hash as read), and `--slots` existing slots of synthetic contracts get a
//! new value (`--slots-per-contract` per contract, so slots / slots-per-contract
//! contracts, their balances unchanged). Contracts and balance-only accounts are distinct.
//! `state_update` is timed as the block import calls it, nothing is committed.

use crate::{Layout, Rng, percentile, slot_key, synthetic_address};
use alloy_primitives::{B256, U256};
use moat_blockchain::state_root::state_update;
use moat_blockchain::vm::{AccountChange, AccountInfo};
use moat_common::block::Header;
use moat_storage::Store;
use serde_json::json;
use std::collections::HashSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The storage root of an account without storage.
const EMPTY_ROOT: B256 =
    alloy_primitives::b256!("56e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421");

#[derive(clap::Args, Debug)]
pub(crate) struct RootArgs {
    /// The moat datadir (its node stopped: the database is opened exclusively).
    #[arg(long)]
    pub(crate) datadir: PathBuf,
    /// Synthetic accounts in the state; found by probing the datadir when not given.
    #[arg(long)]
    pub(crate) accounts: Option<u64>,
    #[command(flatten)]
    pub(crate) layout: Layout,
    /// Accounts whose balance the block changes.
    #[arg(long, default_value_t = 1_000)]
    pub(crate) touch: u64,
    /// Existing storage slots of synthetic contracts the block changes.
    #[arg(long, default_value_t = 2_000)]
    pub(crate) slots: u64,
    /// Repetitions of `state_update`, each on the same state.
    #[arg(long, default_value_t = 20)]
    pub(crate) reps: usize,
    /// Draw new accounts and contracts for every repetition (trie paths not visited
    /// before) instead of repeating one block.
    #[arg(long)]
    pub(crate) fresh: bool,
    /// Seed of the choice of accounts.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Print the figures as one JSON line.
    #[arg(long)]
    pub(crate) json: bool,
    /// Megabytes of memory for the store, split as the node splits its `--cache`: a
    /// quarter for the trie-node cache, the rest for the database's page cache.
    #[arg(long, default_value_t = 1024)]
    pub(crate) cache: usize,
    /// Turn the trie-node cache off (all of `--cache` to the page cache): the figures
    /// before and after that cache, from one binary.
    #[arg(long)]
    pub(crate) no_node_cache: bool,
    /// Threads of the state-root update (the node's `--state-root-workers`): 0 for one
    /// per core, 1 for the single-threaded update.
    #[arg(long, default_value_t = 0)]
    pub(crate) workers: usize,
}

/// This thread's time on a CPU so far (Linux's schedstat), to compare runs on a machine
/// other work keeps busy; `None` where it is not available.
fn thread_cpu() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// The whole process's time on a CPU so far, every thread's (the update's workers
/// included, also those that have exited).
fn process_cpu() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

fn store_err(e: impl std::fmt::Display) -> String {
    format!("store: {e}")
}

/// The number of synthetic accounts: indices 0..n all exist, n does not.
fn count_accounts(store: &Store) -> Result<u64, String> {
    let exists = |i: u64| -> Result<bool, String> {
        Ok(store
            .account(&synthetic_address(i))
            .map_err(store_err)?
            .is_some())
    };
    if !exists(0)? {
        return Ok(0);
    }
    // exists(lo), !exists(hi)
    let mut hi = 1u64;
    while exists(hi)? {
        hi *= 2;
    }
    let mut lo = hi / 2;
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if exists(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(hi)
}

/// One synthetic block's changes, and the flat reads it needed.
struct Block {
    changes: Vec<AccountChange>,
    accounts: usize,
    slots: usize,
}

fn make_block(store: &Store, args: &RootArgs, n: u64, rng: &mut Rng) -> Result<Block, String> {
    let layout = args.layout;
    let per_contract = layout.slots_per_contract.max(1);
    let contracts_needed = args.slots.div_ceil(per_contract);
    let contract_count = if layout.storage_every == 0 {
        0
    } else {
        n.div_ceil(layout.storage_every)
    };
    if contracts_needed > 0 && (layout.slots_per_contract == 0 || contracts_needed > contract_count)
    {
        return Err(format!(
            "{} slots need {contracts_needed} contracts of {} slots; the state has {contract_count}",
            args.slots, layout.slots_per_contract
        ));
    }
    if args.touch + contracts_needed > n {
        return Err(format!(
            "{} accounts and {contracts_needed} contracts asked of {n} accounts",
            args.touch
        ));
    }
    let mut chosen: HashSet<u64> = HashSet::new();
    let mut contracts = Vec::with_capacity(contracts_needed as usize);
    while (contracts.len() as u64) < contracts_needed {
        let i = rng.below(contract_count) * layout.storage_every;
        if chosen.insert(i) {
            contracts.push(i);
        }
    }
    let mut touched = Vec::with_capacity(args.touch as usize);
    while (touched.len() as u64) < args.touch {
        let i = rng.below(n);
        if chosen.insert(i) {
            touched.push(i);
        }
    }

    let mut changes = Vec::with_capacity(touched.len() + contracts.len());
    let mut slot_reads = 0;
    for &i in &touched {
        let address = synthetic_address(i);
        let account = store
            .account(&address)
            .map_err(store_err)?
            .ok_or_else(|| format!("synthetic account {i} ({address}) is not in the state"))?;
        changes.push(AccountChange {
            address,
            info: Some(AccountInfo {
                nonce: account.nonce,
                balance: account.balance + U256::from(1_000_000_007u64),
                code_hash: account.code_hash,
            }),
            ..AccountChange::default()
        });
    }
    let mut left = args.slots;
    for &i in &contracts {
        let address = synthetic_address(i);
        let account = store
            .account(&address)
            .map_err(store_err)?
            .ok_or_else(|| format!("synthetic contract {i} ({address}) is not in the state"))?;
        if account.storage_root == EMPTY_ROOT {
            return Err(format!(
                "synthetic account {i} ({address}) has no storage: is --storage-every {} the genesis' layout?",
                layout.storage_every
            ));
        }
        let mut storage = Vec::new();
        for j in 0..per_contract.min(left) {
            let key = slot_key(j);
            let old = store.storage(&address, &key).map_err(store_err)?;
            slot_reads += 1;
            if old.is_zero() {
                return Err(format!(
                    "slot {j} of synthetic contract {i} ({address}) is empty: is --slots-per-contract {} the genesis' layout?",
                    layout.slots_per_contract
                ));
            }
            storage.push((key, old + U256::from(1)));
        }
        left -= storage.len() as u64;
        storage.sort_by_key(|(k, _)| *k);
        changes.push(AccountChange {
            address,
            info: Some(AccountInfo {
                nonce: account.nonce,
                balance: account.balance,
                code_hash: account.code_hash,
            }),
            storage,
            ..AccountChange::default()
        });
    }
    changes.sort_by_key(|c| c.address);
    Ok(Block {
        accounts: changes.len(),
        changes,
        slots: slot_reads,
    })
}

/// The flat reads `state_update` makes besides trie nodes (each account, each slot's old
/// value), alone: how much of its time is the database's point reads.
fn flat_reads(store: &Store, block: &Block) -> Result<Duration, String> {
    let t = Instant::now();
    for c in &block.changes {
        std::hint::black_box(store.account(&c.address).map_err(store_err)?);
        for (slot, _) in &c.storage {
            std::hint::black_box(store.storage(&c.address, slot).map_err(store_err)?);
        }
    }
    Ok(t.elapsed())
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub(crate) fn run(args: &RootArgs) -> Result<ExitCode, String> {
    moat_blockchain::state_root::set_state_root_workers(args.workers);
    let bytes = args.cache << 20;
    let (pages, nodes) = if args.no_node_cache {
        (bytes, 0)
    } else {
        (bytes - bytes / 4, bytes / 4)
    };
    let store = Store::open_with_caches(&args.datadir, None, pages, nodes)
        .map_err(|e| format!("cannot open {}: {e}", args.datadir.display()))?;
    let (number, head) = store
        .head()
        .map_err(store_err)?
        .ok_or_else(|| format!("{} holds no chain", args.datadir.display()))?;
    let rlp = store
        .header_rlp(&head)
        .map_err(store_err)?
        .ok_or_else(|| format!("head header {head} missing"))?;
    let header = Header::decode(&mut rlp.as_slice()).map_err(|e| format!("head header: {e}"))?;
    let n = match args.accounts {
        Some(n) => n,
        None => count_accounts(&store)?,
    };
    if n == 0 {
        return Err(format!(
            "{} holds no synthetic account (a genesis from `moat-state-bench genesis`?)",
            args.datadir.display()
        ));
    }

    // An empty block: the update must give back the head's root (and costs the floor).
    let t = Instant::now();
    let empty = state_update(&store, &[]).map_err(store_err)?;
    let empty_time = t.elapsed();
    if empty.root != header.state_root {
        return Err(format!(
            "no change gives root {}, the head #{number} says {}",
            empty.root, header.state_root
        ));
    }

    let mut rng = Rng::new(args.seed);
    let reps = args.reps.max(1);
    let blocks: Vec<Block> = if args.fresh {
        (0..reps)
            .map(|_| make_block(&store, args, n, &mut rng))
            .collect::<Result<_, _>>()?
    } else {
        vec![make_block(&store, args, n, &mut rng)?]
    };

    let mut times = Vec::with_capacity(reps);
    let mut cpu = Vec::with_capacity(reps);
    let mut proc_cpu = Vec::with_capacity(reps);
    let mut roots = HashSet::new();
    let (mut trie_writes, mut undo_nodes, mut trie_bytes) = (0, 0, 0);
    for r in 0..reps {
        let block = &blocks[r % blocks.len()];
        let c = thread_cpu();
        let pc = process_cpu();
        let t = Instant::now();
        let update = state_update(&store, &block.changes).map_err(store_err)?;
        times.push(t.elapsed());
        if let (Some(before), Some(after)) = (pc, process_cpu()) {
            proc_cpu.push(after.saturating_sub(before));
        }
        if let (Some(before), Some(after)) = (c, thread_cpu()) {
            cpu.push(after.saturating_sub(before));
        }
        roots.insert(update.root);
        trie_writes = update.trie_writes.len();
        // What the update hashed: the RLP of every node it wrote.
        trie_bytes = update
            .trie_writes
            .iter()
            .map(|(_, w)| w.node.as_ref().map_or(0, Vec::len))
            .sum::<usize>();
        undo_nodes = update.undo.trie.len();
    }
    if !args.fresh && roots.len() != 1 {
        return Err(format!(
            "one block gave {} different roots over {reps} runs",
            roots.len()
        ));
    }
    let reads = flat_reads(&store, &blocks[0])?;
    let first = times[0];
    let mut sorted = times.clone();
    sorted.sort();
    let (p50, p90) = (percentile(&sorted, 0.5), percentile(&sorted, 0.9));
    let (min, max) = (sorted[0], sorted[sorted.len() - 1]);
    let block = &blocks[0];
    cpu.sort();
    let cpu_p50 = (!cpu.is_empty()).then(|| us(percentile(&cpu, 0.5)));
    proc_cpu.sort();
    let proc_cpu_p50 = (!proc_cpu.is_empty()).then(|| us(percentile(&proc_cpu, 0.5)));
    let workers = moat_blockchain::state_root::state_root_workers();

    if args.json {
        let line = json!({
            "datadir": args.datadir.display().to_string(),
            "head": number,
            "synthetic_accounts": n,
            "changed_accounts": block.accounts,
            "balance_changes": args.touch,
            "changed_slots": block.slots,
            "fresh": args.fresh,
            "reps": reps,
            "trie_writes": trie_writes,
            "trie_write_bytes": trie_bytes,
            "undo_nodes": undo_nodes,
            "first_us": us(first),
            "p50_us": us(p50),
            "p90_us": us(p90),
            "cpu_p50_us": cpu_p50,
            "proc_cpu_p50_us": proc_cpu_p50,
            "workers": workers,
            "min_us": us(min),
            "max_us": us(max),
            "empty_block_us": us(empty_time),
            "flat_reads_us": us(reads),
            "runs_us": times.iter().map(|d| us(*d).round()).collect::<Vec<_>>(),
            "root": roots.iter().next().filter(|_| !args.fresh).map(|r| r.to_string()),
        });
        println!("{line}");
    } else {
        println!(
            "datadir:            {} (head #{number})",
            args.datadir.display()
        );
        println!("synthetic accounts: {n}");
        println!(
            "block:              {} accounts changed ({} balances, {} contracts with {} slots){}",
            block.accounts,
            args.touch,
            block.accounts as u64 - args.touch,
            block.slots,
            if args.fresh {
                ", new accounts every repetition"
            } else {
                ", the same every repetition"
            }
        );
        println!(
            "trie writes:        {trie_writes} nodes, {trie_bytes} bytes ({undo_nodes} old nodes in the undo record)"
        );
        println!(
            "state_update:       first {:.0} µs, p50 {:.0} µs, p90 {:.0} µs, min {:.0} µs, max {:.0} µs ({reps} runs)",
            us(first),
            us(p50),
            us(p90),
            us(min),
            us(max)
        );
        if let Some(cpu) = cpu_p50 {
            println!("state_update CPU:   p50 {cpu:.0} µs (the calling thread's time on a CPU)");
        }
        if let Some(cpu) = proc_cpu_p50 {
            println!(
                "state_update CPU:   p50 {cpu:.0} µs (all threads', {workers} worker(s) at most)"
            );
        }
        println!(
            "flat reads alone:   {:.0} µs (the same accounts and old slot values, read again)",
            us(reads)
        );
        println!(
            "empty block:        {:.0} µs (no change; root = head's)",
            us(empty_time)
        );
    }
    Ok(ExitCode::SUCCESS)
}
