//! `moat-inclusion-bench`: what inclusion lists (EIP-7805) force past a censoring builder.
//!
//! One seeded stream of transfers (senders, tips and gas drawn per block; a share of the
//! senders censored) runs block by block through a moat pool, three times, once per
//! list rule:
//! - `moat`: the pool's own list (`Pool::inclusion_list`: appendable runs, senders the
//!   recent blocks passed over first, round-robin);
//! - `reth`: reth's `get_inclusion_list_v1`: the best txs in tip order, blob txs left out,
//!   stopping at the first that does not fit;
//! - `nethermind`: Nethermind's builder: up to 256 pending senders drawn at random, each
//!   one's run that pays the base fee, round-robin, a tx that does not fit skipped;
//! - and, as a reference no node can run, the censored senders' runs alone, round-robin
//!   (the bench knows who they are).
//!
//! Each slot, the list is drawn from the pool before the block, then a builder that
//! leaves out every censored sender (and gives their gas back to the block) fills the
//! block from the pool's best txs and, to
//! satisfy the list (`moat_blockchain::inclusion`), appends the list's txs it must: those
//! that fit the gas left and whose nonce and funds are right, until none is left. The
//! block is applied (nonces, balances) and the pool follows it. Demand swings around the
//! block's capacity, so some blocks are full (no list can force anything into them) and
//! some have room. Printed per rule: the share of the censored txs mined and their delay
//! in blocks, beside the uncensored ones.
//!
//! ```sh
//! cargo run --release -p moat-inclusion-bench -- --seed 1
//! cargo run --release -p moat-inclusion-bench -- --seed 1 --gas-limit 3000000 --arrivals 50 --senders 400 --blocks 200
//! ```

use alloy_primitives::{Address, B256, Bytes, TxKind, U256};
use clap::Parser;
use moat_common::SignedTransaction;
use moat_common::config::{ChainConfig, Fork};
use moat_common::transaction::{Eip1559Tx, PooledTransaction, Transaction};
use moat_crypto::secp::Signer;
use moat_mempool::bench_support::{block_on, roomy_config};
use moat_mempool::inclusion::{self, MAX_BYTES_PER_INCLUSION_LIST, MinedBlock};
use moat_mempool::{
    BlockBudget, HeadInfo, HeadUpdate, InMemoryState, Pool, StateView, SubPool, TxInput, TxOrigin,
};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

#[derive(Parser, Debug)]
#[command(about = "Inclusion-list rules against a censoring builder, on one seeded stream")]
struct Args {
    /// Seed of the stream.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Blocks to run.
    #[arg(long, default_value_t = 100)]
    blocks: u64,
    /// Distinct senders.
    #[arg(long, default_value_t = 4_000)]
    senders: u64,
    /// Percent of the senders the builder censors.
    #[arg(long, default_value_t = 10)]
    censored_percent: u64,
    /// Mean new txs a block.
    #[arg(long, default_value_t = 500)]
    arrivals: u64,
    /// Gas limit of a block (30M: ~580 of these txs, against ~70 in an 8 KiB list, as
    /// on mainnet; with 3M a list holds a whole block and every rule does the same).
    #[arg(long, default_value_t = 30_000_000)]
    gas_limit: u64,
}

const BASE_FEE: u64 = 7;
/// The last blocks' arrivals are not counted (they had no time to be mined).
const SETTLE: u64 = 10;
const CHAIN_ID: u64 = moat_common::testing::SAMPLE_CHAIN_ID;

/// splitmix64: the stream's only randomness.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    Moat,
    Reth,
    Nethermind,
    /// A reference no node can run: the censored senders' pending runs, round-robin
    /// (the bench knows who is censored).
    Oracle,
}

impl Rule {
    fn name(self) -> &'static str {
        match self {
            Rule::Moat => "moat",
            Rule::Reth => "reth (best tips)",
            Rule::Nethermind => "nethermind (random senders)",
            Rule::Oracle => "censored only (knows them)",
        }
    }
}

/// One tx of the stream: the block it arrives before, and its envelope.
struct Arrival {
    block: u64,
    hash: B256,
    sender: Address,
    raw: Bytes,
    censored: bool,
}

/// The seeded stream, signed once for the three runs.
fn stream(args: &Args) -> (Vec<Signer>, Vec<Arrival>) {
    let mut rng = Rng(args.seed);
    let signers: Vec<Signer> = (0..args.senders)
        .map(|i| Signer::from_seed(10_000 + i))
        .collect();
    let censored_count = args.senders * args.censored_percent / 100;
    let mut nonces = vec![0u64; signers.len()];
    let mut out = Vec::new();
    for block in 0..args.blocks {
        // Demand swings: quiet, normal and busy blocks.
        let n = match rng.below(3) {
            0 => args.arrivals / 3,
            1 => args.arrivals,
            _ => args.arrivals * 5 / 3,
        };
        for _ in 0..n {
            let s = rng.below(args.senders) as usize;
            let tip = 1 + rng.below(100) as u128;
            let gas = 21_000 + rng.below(60_000);
            let tx = Transaction::Eip1559(Eip1559Tx {
                chain_id: CHAIN_ID,
                nonce: nonces[s],
                max_priority_fee_per_gas: tip,
                max_fee_per_gas: 1_000,
                gas_limit: gas,
                to: TxKind::Call(Address::repeat_byte(9)),
                value: U256::from(1),
                ..Default::default()
            });
            nonces[s] += 1;
            let p = PooledTransaction::new(SignedTransaction::sign(tx, &signers[s]), None);
            out.push(Arrival {
                block,
                hash: p.hash(),
                sender: signers[s].address(),
                raw: p.encoded_2718().into(),
                censored: (s as u64) < censored_count,
            });
        }
    }
    (signers, out)
}

/// What one run measured.
#[derive(Debug, Default)]
struct Outcome {
    /// Per censored tx counted: the blocks it waited (to the run's end if never mined).
    censored_waits: Vec<u64>,
    censored: (usize, usize, u64),
    others: (usize, usize, u64),
    list_txs: usize,
    censored_in_lists: usize,
    forced: usize,
    full_blocks: u64,
}

fn head(number: u64) -> HeadInfo {
    HeadInfo {
        number,
        timestamp: 1_000 + number * 12,
        base_fee: BASE_FEE,
        blob_base_fee: 1,
        gas_limit: 0,
    }
}

fn run(args: &Args, signers: &[Signer], arrivals: &[Arrival], rule: Rule) -> Outcome {
    let state = Arc::new(InMemoryState::new(head(0)));
    for s in signers {
        state.set_balance(s.address(), U256::from(10u128.pow(21)));
    }
    let mut cfg = roomy_config();
    cfg.chain = ChainConfig::all_forks_at_genesis(CHAIN_ID, Fork::Prague);
    let pool = Pool::new(cfg, state.clone());
    let censored: HashSet<Address> = arrivals
        .iter()
        .filter(|a| a.censored)
        .map(|a| a.sender)
        .collect();
    let arrived_at: HashMap<B256, (u64, bool)> = arrivals
        .iter()
        .map(|a| (a.hash, (a.block, a.censored)))
        .collect();
    let mut rng = Rng(args.seed ^ 0x5eed);
    let mut out = Outcome::default();
    let mut mined_at: HashMap<B256, u64> = HashMap::new();
    let mut next = 0;
    for block in 0..args.blocks {
        block_on(async {
            while next < arrivals.len() && arrivals[next].block == block {
                let a = &arrivals[next];
                let _ = pool
                    .add_transaction(TxInput::Raw(a.raw.clone()), TxOrigin::Local)
                    .await;
                next += 1;
            }
        });
        let list = match rule {
            Rule::Moat => pool.inclusion_list(MAX_BYTES_PER_INCLUSION_LIST),
            Rule::Reth => reth_list(&pool),
            Rule::Nethermind => nethermind_list(&pool, &mut rng),
            Rule::Oracle => {
                let runs: Vec<Vec<Bytes>> = pool
                    .content()
                    .into_iter()
                    .filter(|(a, _)| censored.contains(a))
                    .map(|(_, txs)| {
                        txs.iter()
                            .take_while(|(_, sub)| *sub == SubPool::Pending)
                            .map(|(t, _)| Bytes::from(t.tx.encoded_2718()))
                            .collect()
                    })
                    .collect();
                inclusion::round_robin(&runs, MAX_BYTES_PER_INCLUSION_LIST)
            }
        };
        out.list_txs += list.len();
        // The censoring builder.
        let mut gas_left = args.gas_limit;
        let mut mined: Vec<B256> = Vec::new();
        let mut nonces: HashMap<Address, u64> = HashMap::new();
        let mut best = pool.best_transactions(BlockBudget {
            base_fee: BASE_FEE,
            blob_base_fee: 1,
            gas_limit: args.gas_limit,
            max_blob_gas: 0,
            min_tip: 0,
        });
        while let Some(tx) = best.next() {
            let gas = tx.tx.tx().tx().gas_limit();
            if censored.contains(&tx.sender) || gas > gas_left {
                // Left out: the sender's later txs too, and its gas is not used.
                best.mark_invalid(&tx.hash());
                best.refund_gas(gas);
                continue;
            }
            gas_left -= gas;
            mined.push(tx.hash());
            nonces.insert(tx.sender, tx.nonce() + 1);
        }
        // Then what the list makes it append.
        let decoded: Vec<(B256, Address, u64, u64, bool)> = list
            .iter()
            .filter_map(|raw| {
                let tx = SignedTransaction::decode_2718(raw).ok()?;
                let sender = tx.recover_sender().ok()?;
                Some((
                    tx.hash(),
                    sender,
                    tx.tx().nonce(),
                    tx.tx().gas_limit(),
                    censored.contains(&sender),
                ))
            })
            .collect();
        out.censored_in_lists += decoded.iter().filter(|d| d.4).count();
        loop {
            let in_block: HashSet<B256> = mined.iter().copied().collect();
            let nonce_of = |a: &Address| {
                nonces
                    .get(a)
                    .copied()
                    .unwrap_or_else(|| state.account(a).nonce)
            };
            let missing =
                moat_blockchain::inclusion::unsatisfied_by(&list, &in_block, gas_left, |a| {
                    (nonce_of(a), U256::from(10u128.pow(21)))
                });
            let Some(hash) = missing else { break };
            let d = decoded.iter().find(|d| d.0 == hash).expect("listed");
            gas_left -= d.3;
            mined.push(hash);
            nonces.insert(d.1, d.2 + 1);
            out.forced += 1;
        }
        if gas_left < 21_000 {
            out.full_blocks += 1;
        }
        for h in &mined {
            if let Some((at, c)) = arrived_at.get(h)
                && *at < args.blocks.saturating_sub(SETTLE)
            {
                let o = if *c {
                    &mut out.censored
                } else {
                    &mut out.others
                };
                o.0 += 1;
                o.2 += block - at;
                if *c {
                    mined_at.insert(*h, block - at);
                }
            }
        }
        // Apply the block and let the pool follow it.
        for (a, n) in &nonces {
            state.set_nonce(*a, *n);
        }
        let number = block + 1;
        let least = mined
            .iter()
            .filter_map(|h| pool.get(h))
            .filter_map(|t| {
                let tx = t.tx.tx().tx();
                Some((tx.effective_tip_per_gas(BASE_FEE)?, tx.gas_limit()))
            })
            .min_by_key(|(tip, _)| *tip);
        let mined_block = MinedBlock {
            number,
            base_fee: BASE_FEE,
            gas_left,
            min_tip: least.map(|(tip, _)| tip),
            min_tip_gas: least.map_or(0, |(_, gas)| gas),
        };
        state.set_head(head(number));
        block_on(pool.on_head_change(HeadUpdate {
            head: head(number),
            mined,
            touched: nonces.keys().copied().collect(),
            reorged: Vec::new(),
        }));
        pool.note_mined_block(mined_block);
    }
    // Txs that arrived in the last blocks had no time to be mined: left out of the shares.
    let settled = args.blocks.saturating_sub(SETTLE);
    for a in arrivals.iter().filter(|a| a.block < settled && a.censored) {
        out.censored_waits.push(
            mined_at
                .get(&a.hash)
                .copied()
                .unwrap_or(args.blocks - a.block),
        );
    }
    out.censored_waits.sort_unstable();
    for a in arrivals.iter().filter(|a| a.block < settled) {
        if a.censored {
            out.censored.1 += 1;
        } else {
            out.others.1 += 1;
        }
    }
    out
}

/// reth's rule: best txs in the pool's order, no blob txs, until the first that does not
/// fit.
fn reth_list(pool: &Pool) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut payload = 0;
    let best = pool.best_transactions(BlockBudget {
        base_fee: BASE_FEE,
        blob_base_fee: 1,
        gas_limit: u64::MAX,
        max_blob_gas: 0,
        min_tip: 0,
    });
    for tx in best {
        if tx.is_blob() {
            continue;
        }
        let raw = Bytes::from(tx.tx.encoded_2718());
        let item = raw.len() + if raw.len() < 56 { 1 } else { 3 };
        if inclusion::rlp_list_len(payload + item) > MAX_BYTES_PER_INCLUSION_LIST {
            break;
        }
        payload += item;
        out.push(raw);
    }
    out
}

/// Nethermind's rule: up to 256 pending senders drawn uniformly (reservoir), shuffled,
/// each one's run that pays the base fee, round-robin, a tx that does not fit skipped.
fn nethermind_list(pool: &Pool, rng: &mut Rng) -> Vec<Bytes> {
    let mut reservoir: Vec<Vec<Bytes>> = Vec::new();
    let mut seen = 0u64;
    for (_, txs) in pool.content() {
        let run: Vec<Bytes> = txs
            .iter()
            .take_while(|(t, sub)| *sub == SubPool::Pending && !t.is_blob())
            .map(|(t, _)| Bytes::from(t.tx.encoded_2718()))
            .collect();
        if run.is_empty() {
            continue;
        }
        seen += 1;
        if reservoir.len() < 256 {
            reservoir.push(run);
        } else {
            let j = rng.below(seen) as usize;
            if j < 256 {
                reservoir[j] = run;
            }
        }
    }
    // Fisher-Yates.
    for i in (1..reservoir.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        reservoir.swap(i, j);
    }
    inclusion::round_robin(&reservoir, MAX_BYTES_PER_INCLUSION_LIST)
}

fn main() {
    let args = Args::parse();
    let (signers, arrivals) = stream(&args);
    println!(
        "seed {}: {} blocks of {} gas, {} senders ({}% censored), {} txs",
        args.seed,
        args.blocks,
        args.gas_limit,
        args.senders,
        args.censored_percent,
        arrivals.len()
    );
    println!(
        "{:<28} {:>9} {:>6} {:>5} {:>5} {:>9} {:>6} {:>9} {:>7} {:>5}",
        "rule", "censored", "delay", "p90", "max", "others", "delay", "in lists", "forced", "full"
    );
    for rule in [Rule::Moat, Rule::Reth, Rule::Nethermind, Rule::Oracle] {
        let o = run(&args, &signers, &arrivals, rule);
        let share = |x: (usize, usize, u64)| 100.0 * x.0 as f64 / x.1.max(1) as f64;
        let delay = |x: (usize, usize, u64)| x.2 as f64 / x.0.max(1) as f64;
        println!(
            "{:<28} {:>8.1}% {:>6.1} {:>5} {:>5} {:>8.1}% {:>6.1} {:>8.1}% {:>7} {:>5}",
            rule.name(),
            share(o.censored),
            delay(o.censored),
            o.censored_waits
                .get(o.censored_waits.len() * 9 / 10)
                .copied()
                .unwrap_or(0),
            o.censored_waits.last().copied().unwrap_or(0),
            share(o.others),
            delay(o.others),
            100.0 * o.censored_in_lists as f64 / o.list_txs.max(1) as f64,
            o.forced,
            o.full_blocks,
        );
    }
}
