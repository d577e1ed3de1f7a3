//! `moat-devnet`: moat under a real consensus client, on loopback, in the scenarios an
//! operator meets. A consensus-client kit from ../shared/devnet (Lodestar v1.22 at Deneb,
//! or Prysm v7.1.6 at Fulu/Osaka) must be built first, as its README says; the tool says
//! how when it is not.
//!
//! Scenarios (`moat-devnet SCENARIO`):
//! 1. `finality` — moat alone under the CL: N epochs finalized; `latest`, `safe` and
//!    `finalized` equal to the CL's head, justified and finalized blocks at every poll
//!    ("not found" before the CL names one); transfers sent over JSON-RPC and over devp2p
//!    and a blob tx mined; kill -9 mid-epoch, the finalized block kept through the crash,
//!    and the chain going on after the restart.
//! 2. `pair` — moat and go-ethereum peered over devp2p, each under its own beacon node,
//!    the two beacon nodes peered; run once with moat under the proposing one and once
//!    with geth. Both at the same head every slot; a transfer sent to the non-proposing
//!    EL gossips and is included; a blob tx sent to either is included and
//!    `engine_getBlobsV1` serves its blobs from the pool it reached.
//! 3. `faults` (Lodestar) — moat under a beacon node with 3 of the 8 validators, geth
//!    under one with 5: moat killed (-9) mid-epoch and restarted; moat stopped for three
//!    epochs and catching up through the CL's forkchoice (from geth over devp2p); the
//!    two halves partitioned so that each builds its own branch, then joined: moat's
//!    branch loses, moat reorgs, and a tx mined only on its branch is back in its pool
//!    and mined on the winning chain.
//! 4. `full-pool` — moat and geth each under a beacon node with half the validators,
//!    10,000 pending transfers from 1,000 senders kept in both pools; every proposal's
//!    `engine_getPayload` time (through a timing proxy in front of each engine API),
//!    p50/p99 per client, and each block's tip value beside the best block the pool
//!    could have given.
//!
//! Everything listens on and dials 127.0.0.1 only: execution clients run with
//! `--nodiscover` and no bootnodes and peer only as the tool peers them; beacon nodes run
//! without discovery. Every wait is bounded; the exit status is 0 when every check
//! passed, 1 when one failed, 2 when the devnet could not be run (kit missing, a
//! process died at start).
//!
//! ```text
//! cargo build --release -p moat -p moat-devnet
//! target/release/moat-devnet finality --epochs 10
//! target/release/moat-devnet pair --geth ~/geth-bin/geth
//! target/release/moat-devnet faults --geth ~/geth-bin/geth
//! target/release/moat-devnet full-pool --geth ~/geth-bin/geth
//! target/release/moat-devnet finality --cl prysm
//! ```

mod cl;
mod el;
mod full_pool;
mod net;
mod proxy;
mod prysm;
mod scenarios;
mod txs;

use clap::{Parser, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Scenario {
    Finality,
    Pair,
    Faults,
    FullPool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Cl {
    Lodestar,
    Prysm,
}

#[derive(Parser, Debug)]
#[command(
    name = "moat-devnet",
    about = "moat under a real consensus client (Lodestar, Prysm) on loopback, alone or beside go-ethereum"
)]
pub(crate) struct Args {
    #[arg(value_enum)]
    scenario: Scenario,
    /// The consensus client.
    #[arg(long, value_enum, default_value = "lodestar")]
    cl: Cl,
    /// The moat binary.
    #[arg(long, default_value = "target/release/moat")]
    moat: PathBuf,
    /// go-ethereum (needed by pair, faults and full-pool).
    #[arg(long)]
    geth: Option<PathBuf>,
    /// Epochs to finalize (finality, pair), or to run under load (full-pool).
    #[arg(long, default_value_t = 4)]
    epochs: u64,
    /// Epochs to run after moat's restart (finality).
    #[arg(long, default_value_t = 2)]
    restart_epochs: u64,
    /// Seconds a slot.
    #[arg(long, default_value_t = 4)]
    slot_seconds: u64,
    /// First port: execution clients at BASE, BASE+10, …; beacon nodes at BASE+100, …;
    /// timing proxies at BASE+200, ….
    #[arg(long, default_value_t = 47000)]
    ports: u16,
    /// Pending transfers kept in the pools (full-pool).
    #[arg(long, default_value_t = 10_000)]
    pending: usize,
    /// Senders they come from (full-pool).
    #[arg(long, default_value_t = 1_000)]
    senders: usize,
    /// Copy every log here at the end.
    #[arg(long)]
    log_dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let repo = std::env::current_dir().unwrap_or_default();
    let kind = match args.cl {
        Cl::Lodestar => cl::ClKind::Lodestar,
        Cl::Prysm => cl::ClKind::Prysm,
    };
    let kit = cl::Kit::locate(kind, &repo);
    if let Err(e) = kit.check() {
        eprintln!("moat-devnet: {e}");
        return ExitCode::from(2);
    }
    if !args.moat.is_file() {
        eprintln!(
            "moat-devnet: no moat binary at {} (--moat)",
            args.moat.display()
        );
        return ExitCode::from(2);
    }
    let needs_geth = !matches!(args.scenario, Scenario::Finality);
    if needs_geth && args.geth.as_ref().is_none_or(|g| !g.is_file()) {
        eprintln!("moat-devnet: this scenario runs go-ethereum beside moat: give --geth PATH");
        return ExitCode::from(2);
    }
    let outcome = match args.scenario {
        Scenario::Finality => scenarios::finality(&args, kit),
        Scenario::Pair => scenarios::pair(&args, kit),
        Scenario::Faults => scenarios::faults(&args, kit),
        Scenario::FullPool => scenarios::full_pool(&args, kit),
    };
    match outcome {
        Ok(report) => {
            if report.print() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("moat-devnet: the devnet could not be run: {e}");
            ExitCode::from(2)
        }
    }
}
