//! `moat`: the node binary. `moat` runs the node (beside a consensus client, or `--dev`);
//! `moat init` and `moat import` build a datadir from a genesis and `chain.rlp` files;
//! `moat tx decode` prints what a raw transaction is and which stateless rules of a fork it
//! breaks.

mod chain_cmd;
mod db_cmd;
mod dev;
mod discovery;
mod disk;
mod fdlimit;
mod metrics_catalog;
mod ops_flags;
mod p2p_admin;
mod pool_flags;
mod rpc_flags;
mod run;
mod shutdown;
mod sync;
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
    /// Database tools.
    #[command(subcommand)]
    Db(DbCommand),
}

#[derive(Subcommand, Debug)]
enum DbCommand {
    /// Check a stopped node's datadir: the head's state tries against its state root and
    /// the flat state, the canonical chain, code, the journal. Exit 1 when something is
    /// wrong (each problem is printed), 2 when it cannot be read.
    Verify(db_cmd::VerifyArgs),
    /// How each table of a stopped node's datadir lies in its database file (geth's
    /// `db inspect`): entries, leaf pages, bytes stored, and bytes of its pages left
    /// empty (a table written out of key order leaves pages half empty).
    Inspect(db_cmd::InspectArgs),
}

#[derive(Subcommand, Debug)]
enum TxCommand {
    /// Decode a raw transaction (EIP-2718 envelope, blob txs with or without sidecar) and
    /// print it as JSON with its sender, intrinsic gas and the stateless rules it breaks.
    Decode(tx_decode::DecodeArgs),
}

/// Transparent huge pages off for this process (`PR_SET_THP_DISABLE`), unless
/// `MIMALLOC_ALLOW_THP` is set (then mimalloc's own option decides). mimalloc asks for
/// huge pages on its arenas (`MADV_HUGEPAGE`), so the first touch of fresh memory made
/// the kernel zero a whole 2 MiB page inside the faulting allocation; on this VM such a
/// fault took up to milliseconds, and the runtime worker taking it stalled every task
/// queued behind it (the honest transactions' tail, docs/bench-history/attack.md).
fn no_huge_pages() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // SAFETY: prctl with PR_SET_THP_DISABLE takes plain integers and touches no
        // memory of ours; failure (an old kernel) leaves THP as it was.
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
    }
}

fn main() -> ExitCode {
    no_huge_pages();
    quiet_store_panics();
    // geth's help headings; flags are parsed as derived.
    let matches = ops_flags::with_geth_headings(Cli::command()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match cli.command {
        None => run::run(cli.node),
        Some(Command::Tx(TxCommand::Decode(args))) => tx_decode::run(&args),
        Some(Command::Init(args)) => chain_cmd::init(&args),
        Some(Command::Import(args)) => chain_cmd::import(&args),
        Some(Command::Db(DbCommand::Verify(args))) => db_cmd::verify_cmd(&args),
        Some(Command::Db(DbCommand::Inspect(args))) => db_cmd::inspect_cmd(&args),
    }
}

/// A panic the store turns into an error (redb's on a damaged page) is reported as that
/// error where it is met: here it is one warning line with its message and place, not
/// the usual panic report. Every other panic is printed as before.
fn quiet_store_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if moat_storage::in_guarded_read() {
            tracing::warn!(panic = %info, "a database operation panicked: it fails with an error");
        } else {
            default(info);
        }
    }));
}
