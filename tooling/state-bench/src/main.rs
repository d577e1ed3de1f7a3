//! `moat-state-bench`: the state at scale, in three commands.
//!
//! - `genesis --accounts N --out FILE` writes a geth-style genesis.json: the ethtest genesis
//!   (its config, header fields, system contracts and funded keys) plus N synthetic
//!   accounts at deterministic addresses (`keccak256(i as 8 big-endian bytes)[12..]`), each
//!   with 1 ether; every `--storage-every`-th one (i % k == 0) is a contract with the
//!   one-byte code `0x00` and `--slots-per-contract` storage slots (keys 0, 1, …; non-zero
//!   values). The JSON is streamed: no account is held in memory, so 10M accounts cost
//!   what one does.
//! - `root --datadir DIR` opens a moat datadir initialised from such a genesis (node
//!   stopped) and times `moat_blockchain::state_root::state_update` for a synthetic block:
//!   `--touch` existing accounts with a new balance and `--slots` existing storage slots of
//!   existing contracts with new values, built by hand as `AccountChange`s (each account
//!   read first, so nonce and code hash are kept). Nothing is committed, so every
//!   repetition sees the same state; the first (cold) run is reported apart from the
//!   median and p90 of all of them.
//! - `engine --engine HOST:PORT --jwtsecret FILE` drives any node (moat, go-ethereum)
//!   as a consensus client would for `--blocks` empty blocks (with `--txs N`, blocks of N
//!   transfers sent to its pool first): forkchoiceUpdatedV3 on the
//!   head with payload attributes, getPayloadV4, newPayloadV4 of that payload (timed: the
//!   figure), forkchoiceUpdatedV3 to it. Attribute timestamps are at least 120 (Prague on
//!   the ethtest schedule) from the first block on.
//!
//! ```text
//! moat-state-bench genesis --accounts 1000000 --out /tmp/g1m.json
//! moat init --network /tmp/g1m.json --datadir /tmp/m1m
//! moat-state-bench root --datadir /tmp/m1m
//! moat --network /tmp/g1m.json --datadir /tmp/m1m --maxpeers 0 --authrpc.jwtsecret jwt.hex &
//! moat-state-bench engine --engine 127.0.0.1:8551 --rpc 127.0.0.1:8545 --jwtsecret jwt.hex
//! ```
//!
//! - `hash-root --genesis FILE` computes the state root of a genesis file's allocation
//!   with alloy-trie's `HashBuilder` (not moat-trie) and the genesis hash it gives: an
//!   independent check of the root `moat init` writes.
//!
//! Plain tables by default, one JSON line with `--json`. Exit status 0 on success, 1 when
//! the run could not start or failed, 2 when the node answered a payload with anything
//! but VALID.

mod engine;
mod genesis;
mod hashroot;
mod root;
#[cfg(test)]
mod tests;

use alloy_primitives::{Address, B256, U256, keccak256};
/// The node's allocator, so that the state-root figures are the node's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "moat-state-bench",
    about = "Big-state genesis files, the state-root update, and newPayload latency"
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Write a genesis.json: a base genesis plus N synthetic accounts, streamed.
    Genesis(genesis::GenesisArgs),
    /// Time the state-root update of a synthetic block on a moat datadir (node stopped).
    Root(root::RootArgs),
    /// Time newPayload of empty blocks over any node's engine API.
    Engine(engine::EngineArgs),
    /// The state root of a genesis allocation through alloy-trie, not moat-trie.
    HashRoot(hashroot::HashRootArgs),
}

/// How the synthetic accounts are laid out; `genesis` writes it and `root` relies on it.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct Layout {
    /// Every k-th synthetic account (index % k == 0) is a contract with storage; 0: none.
    #[arg(long, default_value_t = 10)]
    pub storage_every: u64,
    /// Storage slots of each such contract (keys 0, 1, …).
    #[arg(long, default_value_t = 4)]
    pub slots_per_contract: u64,
}

impl Layout {
    /// Whether synthetic account `index` is a contract with storage.
    pub fn is_contract(&self, index: u64) -> bool {
        self.storage_every > 0 && index.is_multiple_of(self.storage_every)
    }
}

/// The address of synthetic account `index`.
pub fn synthetic_address(index: u64) -> Address {
    Address::from_slice(&keccak256(index.to_be_bytes())[12..])
}

/// The key of storage slot `j` of a synthetic contract.
pub fn slot_key(j: u64) -> B256 {
    B256::from(U256::from(j))
}

/// The genesis value of slot `j` of synthetic contract `index` (never zero).
pub fn slot_value(index: u64, j: u64) -> U256 {
    U256::from(index) * U256::from(256) + U256::from(j + 1)
}

/// splitmix64: a small, seeded, reproducible generator (no dependency).
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`: the same seed, the same sequence.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0; the modulo bias is irrelevant at these sizes).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// The `q` quantile of sorted durations (nearest rank).
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match args.command {
        Command::Genesis(a) => genesis::run(&a),
        Command::Root(a) => root::run(&a),
        Command::Engine(a) => engine::run(&a),
        Command::HashRoot(a) => hashroot::run(&a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
