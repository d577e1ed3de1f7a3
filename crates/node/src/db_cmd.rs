//! `moat db verify`: a stopped node's datadir checked against itself (the head's state
//! tries against its state root and the flat state, the canonical chain, the journal).
//! The checks live in moat-blockchain ([`moat_blockchain::verify`]); this prints them.
//! `moat db inspect`: how each table lies in the database file
//! ([`moat_storage::Store::table_pages`]).

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
    let store = match open_stopped(&args.datadir, args.cache) {
        Ok(s) => s,
        Err(code) => return code,
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

#[derive(clap::Args, Debug)]
pub(crate) struct InspectArgs {
    /// The datadir of a stopped node.
    #[arg(long)]
    datadir: PathBuf,
}

/// Opens a stopped node's datadir; the error is printed (exit 2).
fn open_stopped(datadir: &std::path::Path, cache: usize) -> Result<Store, ExitCode> {
    if !datadir.join(DB_FILE).exists() {
        eprintln!(
            "error: {} holds no {DB_FILE}: not a datadir",
            datadir.display()
        );
        return Err(ExitCode::from(2));
    }
    Store::open_with_cache(datadir, None, cache << 20).map_err(|e| {
        eprintln!("error: cannot open {}: {e}", datadir.display());
        ExitCode::from(2)
    })
}

/// Exit 0: printed; 2: the datadir cannot be read.
pub(crate) fn inspect_cmd(args: &InspectArgs) -> ExitCode {
    let store = match open_stopped(&args.datadir, 64) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let tables = match store.table_pages() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: the store cannot be read: {e}");
            return ExitCode::from(2);
        }
    };
    print!("{}", inspect_table(&tables));
    ExitCode::SUCCESS
}

/// The printed table: one row per table with entries, then the total.
fn inspect_table(tables: &[(&str, moat_storage::TablePages)]) -> String {
    let mb = |bytes: u64| format!("{:.1}", bytes as f64 / (1u64 << 20) as f64);
    let mut out = format!(
        "{:<16} {:>12} {:>11} {:>12} {:>12} {:>7}\n",
        "table", "entries", "leaf pages", "stored MB", "unused MB", "unused"
    );
    let mut total = moat_storage::TablePages::default();
    let mut row = |name: &str, t: &moat_storage::TablePages| {
        let pages_bytes = t.stored_bytes + t.fragmented_bytes;
        let unused = if pages_bytes == 0 {
            0.0
        } else {
            100.0 * t.fragmented_bytes as f64 / pages_bytes as f64
        };
        out.push_str(&format!(
            "{:<16} {:>12} {:>11} {:>12} {:>12} {:>6.1}%\n",
            name,
            t.entries,
            t.leaf_pages,
            mb(t.stored_bytes),
            mb(t.fragmented_bytes),
            unused
        ));
    };
    for (name, t) in tables.iter().filter(|(_, t)| t.entries > 0) {
        row(name, t);
        total.entries += t.entries;
        total.leaf_pages += t.leaf_pages;
        total.stored_bytes += t.stored_bytes;
        total.fragmented_bytes += t.fragmented_bytes;
    }
    row("total", &total);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use moat_storage::TablePages;

    #[test]
    fn inspect_prints_each_table_with_entries_and_the_share_of_its_pages_unused() {
        let half = TablePages {
            entries: 20,
            leaf_pages: 2,
            stored_bytes: 4096,
            fragmented_bytes: 4096,
        };
        let empty = TablePages::default();
        let out = inspect_table(&[("trie_nodes", half), ("journal", empty)]);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert!(
            lines[1].starts_with("trie_nodes") && lines[1].ends_with("50.0%"),
            "{out}"
        );
        assert!(!out.contains("journal"), "{out}");
        assert!(
            lines[2].starts_with("total") && lines[2].contains(" 20 "),
            "{out}"
        );
    }
}
