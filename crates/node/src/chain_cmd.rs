//! `moat init` and `moat import`: write genesis, replay `chain.rlp` files into a datadir.

use moat_blockchain::chain::{Chain, ChainError, ImportOutcome};
use moat_common::block::Block;
use moat_common::config::Network;
use moat_storage::Store;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub(crate) struct NetworkArgs {
    /// A geth-style genesis.json, or a built-in network name (mainnet, sepolia, hoodi).
    #[arg(long)]
    network: String,
    /// Where the database lives.
    #[arg(long)]
    datadir: PathBuf,
    /// Megabytes of memory for the database, split as the node's `--cache` (geth's flag
    /// and default).
    #[arg(long, default_value_t = moat_storage::DEFAULT_CACHE_BYTES >> 20)]
    cache: usize,
}

#[derive(clap::Args, Debug)]
pub(crate) struct ImportArgs {
    #[command(flatten)]
    net: NetworkArgs,
    /// Files of concatenated RLP blocks, imported in order.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

/// Checks that `network` names a built-in network or a readable file, before a datadir
/// is made for it.
pub(crate) fn check_network(network: &str) -> Result<(), String> {
    if Network::from_name(network).is_some() {
        return Ok(());
    }
    std::fs::File::open(network)
        .map(drop)
        .map_err(|e| format!("cannot load genesis {network}: {e}"))
}

/// Opens the chain of `network` in `store`: a built-in network from its embedded
/// genesis, a genesis file streamed (`<datadir>/genesis-sort` holds the account leaves
/// on their way to the trie while an empty datadir is initialised, then goes).
pub(crate) fn open_chain_in(store: Store, network: &str, datadir: &Path) -> Result<Chain, String> {
    if let Some(net) = Network::from_name(network) {
        return Chain::init(store, &net.genesis()).map_err(|e| e.to_string());
    }
    Chain::init_from_file(store, Path::new(network), &datadir.join("genesis-sort"))
        .map_err(|e| e.to_string())
}

fn open_chain(args: &NetworkArgs) -> Result<Chain, String> {
    check_network(&args.network)?;
    let store =
        Store::open_with_cache(&args.datadir, None, args.cache << 20).map_err(|e| e.to_string())?;
    open_chain_in(store, &args.network, &args.datadir)
}

fn fail(message: String) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(1)
}

pub(crate) fn init(args: &NetworkArgs) -> ExitCode {
    match open_chain(args).and_then(|c| c.head().map_err(|e| e.to_string()).map(|h| (c, h))) {
        Ok((chain, (number, hash))) => {
            println!(
                "genesis {} written to {} (head #{number} {hash})",
                chain.genesis_hash(),
                args.datadir.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

/// Throughput counters for progress lines.
struct Progress {
    started: Instant,
    last_report: Instant,
    blocks: u64,
    gas: u64,
    skipped: u64,
    side: u64,
}

impl Progress {
    fn line(&self, head: u64) -> String {
        let secs = self.started.elapsed().as_secs_f64().max(1e-9);
        format!(
            "imported {} blocks ({} already present), {} side-chain blocks stored, head #{head}, {:.1} blocks/s, {:.1} Mgas/s",
            self.blocks,
            self.skipped,
            self.side,
            self.blocks as f64 / secs,
            self.gas as f64 / 1e6 / secs
        )
    }
}

pub(crate) fn import(args: &ImportArgs) -> ExitCode {
    // SIGINT or SIGTERM stops the import between two blocks, flushed, with exit code 0.
    let shutdown = match crate::shutdown::Shutdown::install() {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let chain = match open_chain(&args.net) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let now = Instant::now();
    let mut p = Progress {
        started: now,
        last_report: now,
        blocks: 0,
        gas: 0,
        skipped: 0,
        side: 0,
    };
    let mut head = chain.head().map(|h| h.0).unwrap_or_default();
    for file in &args.files {
        let bytes = match std::fs::read(file) {
            Ok(b) => b,
            Err(e) => return fail(format!("cannot read {}: {e}", file.display())),
        };
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            if shutdown.requested() {
                return match chain.store().flush() {
                    Ok(()) => {
                        println!("{}", p.line(head));
                        println!("import stopped by a signal at #{head}");
                        ExitCode::SUCCESS
                    }
                    Err(e) => fail(format!("cannot make the import durable: {e}")),
                };
            }
            let block = match Block::decode(&mut rest) {
                Ok(b) => b,
                Err(e) => {
                    return fail(format!(
                        "{}: undecodable block after #{head}: {e}",
                        file.display()
                    ));
                }
            };
            match chain.import(&block) {
                Ok(ImportOutcome::Imported {
                    number, gas_used, ..
                }) => {
                    p.blocks += 1;
                    p.gas += gas_used;
                    head = number;
                }
                Ok(ImportOutcome::AlreadyKnown) => p.skipped += 1,
                // A block of another branch (an ommer's chain, a fork in the file) is
                // kept, unexecuted, as the engine API keeps one.
                Err(ChainError::NotOnHead { .. }) => match chain.store_side_block(&block) {
                    Ok(()) => p.side += 1,
                    Err(e) => {
                        let _ = chain.store().flush();
                        println!("{}", p.line(head));
                        return fail(format!("import stopped: {e}"));
                    }
                },
                Err(e) => {
                    let _ = chain.store().flush();
                    println!("{}", p.line(head));
                    return fail(format!("import stopped: {e}"));
                }
            }
            if p.last_report.elapsed() >= Duration::from_secs(2) {
                println!("{}", p.line(head));
                p.last_report = Instant::now();
            }
        }
    }
    if let Err(e) = chain.store().flush() {
        return fail(format!("cannot make the import durable: {e}"));
    }
    println!("{}", p.line(head));
    ExitCode::SUCCESS
}
