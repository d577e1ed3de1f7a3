//! `moat`: the node binary. For now it carries the offline tools; `moat tx decode` prints
//! what a raw transaction is and which stateless rules of a fork it breaks.

mod tx_decode;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "moat",
    version,
    about = "An Ethereum execution node whose transaction pool holds up under attack"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Transaction tools.
    #[command(subcommand)]
    Tx(TxCommand),
}

#[derive(Subcommand, Debug)]
enum TxCommand {
    /// Decode a raw transaction (EIP-2718 envelope, blob txs with or without sidecar) and
    /// print it as JSON with its sender, intrinsic gas and the stateless rules it breaks.
    Decode(tx_decode::DecodeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Tx(TxCommand::Decode(args)) => tx_decode::run(&args),
    }
}
