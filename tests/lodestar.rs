//! moat under a real consensus client: the `finality` scenario of `moat-devnet`
//! (tooling/devnet) with Lodestar v1.22 from ../shared/devnet/lodestar — two epochs
//! finalized with `safe` and `finalized` equal to the CL's at every poll, transfers over
//! JSON-RPC and devp2p and a blob tx mined, kill -9 mid-epoch with the finalized block kept,
//! and the chain going on after the restart.
//!
//! The kit is built outside the repository (its README: a git copy of ChainSafe/lodestar,
//! then its build.sh); when it is not built here the test says so and passes without
//! running. Both binaries are built for the run: `moat` by cargo for this package's tests,
//! `moat-devnet` by `common::workspace_bin`. The other scenarios (go-ethereum beside
//! moat, faults, a full pool, Prysm at Fulu) run by hand: `moat-devnet --help`,
//! docs/BENCHMARKS.md.

mod common;

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn moat_under_lodestar_serves_the_cls_safe_and_finalized_blocks_through_a_crash() {
    let home = PathBuf::from(std::env::var("HOME").unwrap_or_default());
    let built = std::env::var_os("LSDEVNET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".cache/lodestar-devnet"))
        .join("ls/packages/cli/lib/index.js");
    if !built.is_file() {
        eprintln!(
            "skipped: the Lodestar kit is not built ({} is missing). Build it once as \
             ../shared/devnet/lodestar/README.md says (a git copy of ChainSafe/lodestar, then \
             LSDEVNET_GIT=<its git dir> ./build.sh) to run moat under a real consensus client.",
            built.display()
        );
        return;
    }
    // The kit is optional (built outside the repository); the binaries are built now.
    let moat = PathBuf::from(env!("CARGO_BIN_EXE_moat"));
    let devnet = common::workspace_bin("moat-devnet", "moat-devnet");
    let out = Command::new(&devnet)
        .current_dir(repo())
        .args(["finality", "--epochs", "2", "--restart-epochs", "1"])
        .arg("--moat")
        .arg(&moat)
        // Ports apart from the other tests' and from the tool's default, and below the
        // kernel's ephemeral range (32768–60999): a fixed port in it can be taken by any
        // outbound connection of another process (a full run once lost Lodestar's
        // libp2p port so).
        .args(["--ports", "26000"])
        .output()
        .expect("moat-devnet runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("RESULT: PASS"),
        "moat-devnet finality failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    for check in [
        "before any CL: safe and finalized are \"not found\"",
        "the CL finalizes epoch 2",
        "devp2p transfer mined",
        "blob tx mined",
        "the finalized block survives kill -9",
    ] {
        assert!(
            stdout.contains(&format!("[ ok ] {check}")),
            "no passing check {check:?}:\n{stdout}"
        );
    }
}
