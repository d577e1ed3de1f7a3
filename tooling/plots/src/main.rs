//! `moat-plots`: draws docs/BENCHMARKS.md's plots, one per area, as SVG files written as
//! text (no plotting library): the attack table's honest p99s, RPC ingestion's rate and
//! p99, the state-root update against the state's size, and the pool's block value against
//! the ideal. It reads the benches' JSON (`docs/bench-baseline.json`) and the files of
//! `docs/plots/data/`, each naming the run its figures come from, and writes
//! `docs/plots/*.svg`. Run from the repository's root: `make plots`.

mod areas;
mod svg;

use std::path::PathBuf;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(about = "Writes docs/BENCHMARKS.md's plots (SVG) from the benches' JSON")]
struct Args {
    /// The plots' inputs (attack.json, rpc-ingestion.json, state-root.json, pool-quality.json).
    #[arg(long, default_value = "docs/plots/data")]
    data: PathBuf,
    /// The bench table's JSON (`make bench-baseline`); its state-root rows join that plot.
    #[arg(long, default_value = "docs/bench-baseline.json")]
    baseline: PathBuf,
    /// Where the SVG files go.
    #[arg(long, default_value = "docs/plots")]
    out: PathBuf,
}

fn main() {
    let args = Args::parse();
    match areas::write_all(&args.data, &args.baseline, &args.out) {
        Ok(written) => {
            for path in written {
                println!("wrote {path}");
            }
        }
        Err(e) => {
            eprintln!("moat-plots: {e}");
            std::process::exit(1);
        }
    }
}
