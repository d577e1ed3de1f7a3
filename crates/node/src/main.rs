//! `moat`: the node binary. `moat` runs the node (beside a consensus client, or `--dev`);
//! `moat init` and `moat import` build a datadir from a genesis and `chain.rlp` files;
//! `moat tx decode` prints what a raw transaction is and which stateless rules of a fork it
//! breaks.

mod chain_cmd;
mod dev;
mod discovery;
mod fdlimit;
mod ops_flags;
mod p2p_admin;
mod pool_flags;
mod rpc_flags;
mod run;
mod shutdown;
mod sync;
mod system_contracts;
mod tx_decode;

/// mimalloc: the state-root update and the pool allocate many small, short-lived
/// buffers, which glibc's allocator served at about half the speed.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "moat",
    version,
    about = "An Ethereum execution node whose transaction pool holds up under attack"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    node: run::NodeArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Transaction tools.
    #[command(subcommand)]
    Tx(TxCommand),
    /// Write the genesis block and state of a network into a datadir.
    Init(chain_cmd::NetworkArgs),
    /// Import and execute blocks from RLP files (as hive prepares a client).
    Import(chain_cmd::ImportArgs),
}

#[derive(Subcommand, Debug)]
enum TxCommand {
    /// Decode a raw transaction (EIP-2718 envelope, blob txs with or without sidecar) and
    /// print it as JSON with its sender, intrinsic gas and the stateless rules it breaks.
    Decode(tx_decode::DecodeArgs),
}

fn main() -> ExitCode {
    // geth's help headings; flags are parsed as derived.
    let matches = ops_flags::with_geth_headings(Cli::command()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match cli.command {
        None => run::run(cli.node),
        Some(Command::Tx(TxCommand::Decode(args))) => tx_decode::run(&args),
        Some(Command::Init(args)) => chain_cmd::init(&args),
        Some(Command::Import(args)) => chain_cmd::import(&args),
    }
}
