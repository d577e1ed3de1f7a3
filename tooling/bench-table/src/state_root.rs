//! The state-root rows: the update of a 1,500-account, 2,000-slot block on synthetic
//! states of 10k and 1M accounts (100k with `--quick`), measured by the same binaries and
//! commands as docs/BENCHMARKS.md's state-at-scale section: `moat-state-bench genesis`,
//! `moat init`, then `moat-state-bench root --json` (the median of 20 runs on one block).
//! The update runs on one thread (`--workers 1`): the rows gate the work a block costs,
//! which the baseline measured so; what a second thread saves depends on an idle core,
//! which a shared machine does not promise (docs/bench-history/state-at-scale.md has both).
//! The binaries are looked up beside this one (`make bench-table` builds them); the
//! datadirs live in a temporary directory removed afterwards.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A synthetic state built and measured: the median update in nanoseconds.
fn measure_at(bin: &Path, work: &Path, accounts: u64) -> Result<f64, String> {
    let genesis = work.join(format!("g{accounts}.json"));
    let datadir = work.join(format!("m{accounts}"));
    let run = |cmd: &mut Command| -> Result<Vec<u8>, String> {
        let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{cmd:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(out.stdout)
    };
    run(Command::new(bin.join("moat-state-bench"))
        .args(["genesis", "--accounts", &accounts.to_string(), "--out"])
        .arg(&genesis))?;
    run(Command::new(bin.join("moat"))
        .args(["init", "--network"])
        .arg(&genesis)
        .arg("--datadir")
        .arg(&datadir))?;
    let out = run(Command::new(bin.join("moat-state-bench"))
        .args(["root", "--json", "--workers", "1", "--datadir"])
        .arg(&datadir))?;
    let line: serde_json::Value =
        serde_json::from_slice(&out).map_err(|e| format!("root --json: {e}"))?;
    line["p50_us"]
        .as_f64()
        .map(|us| us * 1e3)
        .ok_or_else(|| "root --json gave no p50_us".to_string())
}

/// The update at 10k accounts and at `large` accounts, or why they could not be measured.
pub(crate) fn measure(large: u64) -> Result<(f64, f64), String> {
    let bin = std::env::current_exe()
        .map_err(|e| e.to_string())?
        .parent()
        .map(Path::to_path_buf)
        .ok_or("no directory for the running binary")?;
    let work: PathBuf =
        std::env::temp_dir().join(format!("moat-bench-table-state-{}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    let result = measure_at(&bin, &work, 10_000)
        .and_then(|small| Ok((small, measure_at(&bin, &work, large)?)));
    let _ = std::fs::remove_dir_all(&work);
    result
}
