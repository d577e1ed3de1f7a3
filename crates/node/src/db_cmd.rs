//! `moat db verify`: a stopped node's datadir checked against itself (the head's state
//! tries against its state root and the flat state, the canonical chain, the journal).
//! The checks live in moat-blockchain ([`moat_blockchain::verify`]); this prints them.

use moat_blockchain::verify::{VerifyOptions, verify};
use moat_storage::{DB_FILE, Store};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub(crate) struct VerifyArgs {
    /// The datadir of a stopped node.
    #[arg(long)]
    datadir: PathBuf,
    /// The pool's journal, relative to the datadir (as the node's flag).
    #[arg(long = "txpool.journal", default_value = "txpool.journal")]
    txpool_journal: PathBuf,
    /// Problems printed at most (all are counted).
    #[arg(long, default_value_t = 100)]
    max_findings: usize,
    /// Megabytes of memory for the database's page cache (geth's flag): the check reads
    /// each page once, so a small cache costs it little.
    #[arg(long, default_value_t = 256)]
    cache: usize,
}

/// Exit 0: nothing wrong; 1: problems found (printed); 2: the datadir cannot be read.
pub(crate) fn verify_cmd(args: &VerifyArgs) -> ExitCode {
    if !args.datadir.join(DB_FILE).exists() {
        eprintln!(
            "error: {} holds no {DB_FILE}: not a datadir",
            args.datadir.display()
        );
        return ExitCode::from(2);
    }
    let store = match Store::open_with_cache(&args.datadir, None, args.cache << 20) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: cannot open {}: {e}", args.datadir.display());
            return ExitCode::from(2);
        }
    };
    let options = VerifyOptions {
        journal: Some(args.datadir.join(&args.txpool_journal)),
        max_findings: args.max_findings,
    };
    let started = Instant::now();
    let report = match verify(&store, &options, |line| {
        eprintln!("[{:>6.1}s] {line}", started.elapsed().as_secs_f64())
    }) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: the store cannot be read: {e}");
            return ExitCode::from(2);
        }
    };
    for f in &report.findings {
        println!("{}: {}", f.area.name(), f.message);
    }
    if report.problems > report.findings.len() as u64 {
        println!(
            "... and {} more",
            report.problems - report.findings.len() as u64
        );
    }
    for note in &report.notes {
        println!("note: {note}");
    }
    let head = report
        .head
        .map_or("none".to_string(), |(n, h)| format!("#{n} {h}"));
    println!(
        "head {head}: {} blocks ({:.1}s), {} accounts, {} slots, {} codes ({:.1}s), {} journal records",
        report.blocks,
        report.chain_time.as_secs_f64(),
        report.accounts,
        report.slots,
        report.codes,
        report.state_time.as_secs_f64(),
        report.journal_records,
    );
    if report.is_clean() {
        println!("ok: no problem found");
        ExitCode::SUCCESS
    } else {
        println!("{} problems found", report.problems);
        ExitCode::from(1)
    }
}
