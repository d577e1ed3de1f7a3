//! A short whole-node soak: `moat-soak` (tooling/soak) runs this package's `moat` for 30
//! seconds under a light load with two reorgs; both are built for the run (`moat` by
//! cargo for this package's tests, `moat-soak` by `common::workspace_bin`). The run must
//! complete, carry its load, stop the node cleanly and leave nothing in the temporary
//! directory.

mod common;

use std::path::PathBuf;
use std::process::Command;

#[test]
fn a_short_soak_of_moat_runs_end_to_end_and_cleans_up() {
    let tool = common::workspace_bin("moat-soak", "moat-soak");
    let moat = PathBuf::from(env!("CARGO_BIN_EXE_moat"));
    let tmp = tempfile::tempdir().unwrap();
    let csv = tmp.path().join("samples.csv");
    let scratch = tmp.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let out = Command::new(&tool)
        .arg("--moat")
        .arg(&moat)
        .args(["--minutes", "0.5", "--sample", "2", "--reorg-every", "0.2"])
        .args([
            "--rpc-rate",
            "40",
            "--rpc-senders",
            "40",
            "--rpc-connections",
            "2",
        ])
        .args([
            "--gossip-rate",
            "20",
            "--gossip-senders",
            "40",
            "--gossip-batch",
            "5",
        ])
        .args(["--nonce-check", "10", "--ports", "38700"])
        .arg("--csv")
        .arg(&csv)
        // The run's temporary directory goes here, to see that it is removed.
        .env("TMPDIR", &scratch)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let all = format!("{stdout}\n{stderr}");
    // 0: everything levels off; 2: something does not (30 s is mostly warm-up). Not 1.
    assert!(
        matches!(out.status.code(), Some(0 | 2)),
        "status {:?}\n{all}",
        out.status
    );
    assert!(stdout.contains("node stopped: exit status: 0"), "{all}");
    // The number just before `suffix` on the report line that starts with `prefix`.
    let number = |prefix: &str, suffix: &str| -> u64 {
        let line = stdout
            .lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} line\n{all}"));
        let at = line
            .find(suffix)
            .unwrap_or_else(|| panic!("no {suffix:?} in {line}"));
        line[..at]
            .split_whitespace()
            .last()
            .and_then(|w| w.trim_matches(|c: char| !c.is_ascii_digit()).parse().ok())
            .unwrap_or_else(|| panic!("no number before {suffix:?} in {line}"))
    };
    assert!(number("rpc:", " accepted") > 500, "{all}");
    assert_eq!(number("rpc:", " errors"), 0, "{all}");
    assert!(number("gossip:", " txs in") > 200, "{all}");
    assert!(number("blocks:", " built") >= 10, "{all}");
    assert!(number("blocks:", " txs,") > 500, "{all}");
    assert!(number("blocks:", " reorgs") >= 2, "{all}");
    assert_eq!(number("blocks:", " engine errors"), 0, "{all}");
    for metric in ["RSS (MiB)", "fds (count)", "threads (count)", "pool (txs)"] {
        assert!(stdout.contains(metric), "{metric}\n{all}");
    }
    let samples = std::fs::read_to_string(&csv).unwrap();
    let lines: Vec<&str> = samples.lines().collect();
    assert_eq!(
        lines[0],
        "t_s,rss_kb,fds,threads,pending,queued,pool,head,cpu_s,disk_kb"
    );
    assert!(lines.len() >= 15, "{samples}");
    assert_eq!(
        std::fs::read_dir(&scratch).unwrap().count(),
        0,
        "the run's directory is left behind"
    );
}
