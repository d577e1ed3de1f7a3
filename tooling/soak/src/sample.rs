//! One sample of the node: what `/proc/<pid>` says of its memory, files, threads and CPU,
//! and what its JSON-RPC says of its pool and head.

use moat_harness::http::{RpcClient, quantity};
use serde_json::json;

/// One reading, `t` seconds into the run.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Sample {
    pub t: f64,
    /// Resident set size (`VmRSS`), kB.
    pub rss_kb: u64,
    /// Entries of `/proc/<pid>/fd`.
    pub fds: u64,
    /// `Threads` of `/proc/<pid>/status`.
    pub threads: u64,
    /// `txpool_status`: pending and queued (`None` when the call failed).
    pub pending: Option<u64>,
    pub queued: Option<u64>,
    /// `eth_blockNumber`.
    pub head: Option<u64>,
    /// User + system CPU seconds since the node started.
    pub cpu_s: f64,
    /// Bytes of the files under the datadir, kB (what a cache of the database can grow
    /// toward).
    pub disk_kb: u64,
}

impl Sample {
    pub(crate) fn pool(&self) -> Option<u64> {
        Some(self.pending? + self.queued?)
    }

    pub(crate) const CSV_HEADER: &'static str =
        "t_s,rss_kb,fds,threads,pending,queued,pool,head,cpu_s,disk_kb";

    pub(crate) fn csv_line(&self) -> String {
        let opt = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
        format!(
            "{:.1},{},{},{},{},{},{},{},{:.2},{}",
            self.t,
            self.rss_kb,
            self.fds,
            self.threads,
            opt(self.pending),
            opt(self.queued),
            opt(self.pool()),
            opt(self.head),
            self.cpu_s,
            self.disk_kb
        )
    }

    pub(crate) fn line(&self) -> String {
        let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        format!(
            "{:>7.0} s  rss {:>8.1} MiB  fds {:>5}  threads {:>4}  pool {:>6} (pending {:>6}, queued {:>5})  head {:>6}  cpu {:>8.1} s  disk {:>7.1} MiB",
            self.t,
            self.rss_kb as f64 / 1024.0,
            self.fds,
            self.threads,
            opt(self.pool()),
            opt(self.pending),
            opt(self.queued),
            opt(self.head),
            self.cpu_s,
            self.disk_kb as f64 / 1024.0
        )
    }
}

/// Bytes of the files under `dir` (apparent sizes, not following links), kB; what cannot
/// be read counts nothing.
pub(crate) fn dir_kb(dir: &std::path::Path) -> u64 {
    fn walk(dir: &std::path::Path, depth: u32) -> u64 {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return 0;
        };
        entries
            .flatten()
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() && depth < 16 => walk(&e.path(), depth + 1),
                Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
                _ => 0,
            })
            .sum()
    }
    walk(dir, 0) / 1024
}

/// `VmRSS` (kB) and `Threads` of a `/proc/<pid>/status` text.
pub(crate) fn parse_status(text: &str) -> Result<(u64, u64), String> {
    let field = |name: &str| -> Result<u64, String> {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .ok_or_else(|| format!("no {name} line"))?;
        let mut words = line.split_whitespace();
        let value = words
            .next()
            .and_then(|w| w.parse().ok())
            .ok_or_else(|| format!("{name}: not a number: {line:?}"))?;
        match words.next() {
            None | Some("kB") => Ok(value),
            Some(unit) => Err(format!("{name}: unexpected unit {unit}")),
        }
    };
    Ok((field("VmRSS")?, field("Threads")?))
}

/// User + system clock ticks of a `/proc/<pid>/stat` text (fields 14 and 15; the command
/// name in parentheses may hold spaces, so fields count from its closing parenthesis).
pub(crate) fn parse_stat_ticks(text: &str) -> Result<u64, String> {
    let rest = text.rsplit_once(')').ok_or("no ')' in stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ")": state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let tick = |i: usize| -> Result<u64, String> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| format!("stat field {} missing", i + 3))
    };
    Ok(tick(11)? + tick(12)?)
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf reads a configuration value and has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// What `/proc/<pid>` says now: (RSS kB, fds, threads, CPU seconds).
pub(crate) fn read_proc(pid: u32) -> Result<(u64, u64, u64, f64), String> {
    let dir = format!("/proc/{pid}");
    let status = std::fs::read_to_string(format!("{dir}/status"))
        .map_err(|e| format!("{dir}/status: {e}"))?;
    let (rss, threads) = parse_status(&status)?;
    let fds = std::fs::read_dir(format!("{dir}/fd"))
        .map_err(|e| format!("{dir}/fd: {e}"))?
        .count() as u64;
    let stat =
        std::fs::read_to_string(format!("{dir}/stat")).map_err(|e| format!("{dir}/stat: {e}"))?;
    let cpu = parse_stat_ticks(&stat)? as f64 / clock_ticks_per_second();
    Ok((rss, fds, threads, cpu))
}

/// A whole sample: `/proc` (an error when the process is gone), the RPC figures (left
/// empty when a call fails) and the size of the datadir `db`.
pub(crate) fn take(
    pid: u32,
    rpc: &mut RpcClient,
    db: &std::path::Path,
    t: f64,
) -> Result<Sample, String> {
    let (rss_kb, fds, threads, cpu_s) = read_proc(pid)?;
    let (pending, queued) = match rpc.call("txpool_status", json!([])) {
        Ok(v) => (quantity(&v["pending"]), quantity(&v["queued"])),
        Err(_) => (None, None),
    };
    let head = rpc
        .call("eth_blockNumber", json!([]))
        .ok()
        .and_then(|v| quantity(&v));
    Ok(Sample {
        t,
        rss_kb,
        fds,
        threads,
        pending,
        queued,
        head,
        cpu_s,
        disk_kb: dir_kb(db),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tmoat\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\n\
        VmPeak:\t  812344 kB\nVmRSS:\t  153600 kB\nRssAnon:\t  120000 kB\nThreads:\t37\n\
        SigQ:\t0/93668\n";

    #[test]
    fn status_gives_rss_and_threads() {
        assert_eq!(parse_status(STATUS).unwrap(), (153_600, 37));
        // VmRSS must not be mistaken for RssAnon or VmPeak, whatever the order.
        let reordered = "Threads:\t5\nRssAnon:\t1 kB\nVmRSS:\t2048 kB\n";
        assert_eq!(parse_status(reordered).unwrap(), (2048, 5));
        assert!(
            parse_status("Name:\tx\nThreads:\t3\n").is_err(),
            "no VmRSS (a zombie)"
        );
        assert!(parse_status("VmRSS:\t12 MB\nThreads:\t3\n").is_err());
    }

    #[test]
    fn stat_ticks_survive_spaces_and_parentheses_in_the_name() {
        let stat = "4242 (geth (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 37 0 \
            1000 812344000 38400 18446744073709551615";
        assert_eq!(parse_stat_ticks(stat).unwrap(), 325);
        assert!(parse_stat_ticks("4242 (moat) S 1 2").is_err());
    }

    #[test]
    fn the_csv_line_leaves_failed_calls_empty() {
        let s = Sample {
            t: 10.0,
            rss_kb: 2048,
            fds: 40,
            threads: 20,
            pending: Some(500),
            queued: Some(3),
            head: None,
            cpu_s: 1.5,
            disk_kb: 9,
        };
        assert_eq!(s.csv_line(), "10.0,2048,40,20,500,3,503,,1.50,9");
        assert_eq!(
            Sample::CSV_HEADER.split(',').count(),
            s.csv_line().split(',').count()
        );
    }

    #[test]
    fn the_datadir_size_adds_up_its_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), vec![0u8; 3 * 1024]).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b"), vec![0u8; 5 * 1024]).unwrap();
        assert_eq!(dir_kb(dir.path()), 8);
        assert_eq!(dir_kb(&dir.path().join("missing")), 0);
    }
}
