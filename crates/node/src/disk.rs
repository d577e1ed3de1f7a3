//! The datadir's disk: when it can no longer take writes, or its database is found
//! damaged, the node stops cleanly.
//!
//! A write the store could not make for a reason of the disk (full, or an I/O error)
//! leaves the database unwritable until it is closed and reopened, and every later write
//! refused (`Store::write_failure`). Running on would answer reads from a database that
//! takes no block, so the node stops instead, with a message saying why; once there is
//! space it is started again and reopens at its last durable commit. With
//! `--datadir.minfreedisk` it stops before that, when free space falls under the floor,
//! as geth does.
//!
//! A damaged database (a page the engine cannot read, a value that does not decode, a
//! trie node that does not hash to what its parent names: `Store::damage`) failed the
//! work that met it with an error; the node then stops too, rather than build on a
//! rotted file, and says to run `moat db verify`.

use moat_storage::Store;
use std::path::Path;
use std::time::Duration;

/// Why the node must stop for its datadir.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Trouble {
    /// The disk takes no more writes (full, an I/O error, under the free-space floor).
    Unwritable(String),
    /// The database file is damaged.
    Damaged(String),
}

/// The thread that writes the store's relaxed commits (blocks, written behind) into the
/// database file and makes them durable: woken by each block's commit, it writes every
/// waiting one in one durable transaction at once, beside the next block's execution,
/// so that no block's newPayload carries the writes and the sync of the blocks before
/// it (`Store::wait_for_flush`). Exports `moat_store_pending_commits` (how many waited
/// when it woke), `moat_store_flush_seconds`, `moat_store_flushes_total`, and the block
/// commits held back to its pace (`moat_store_slowed_commits_total`,
/// `moat_store_commit_slowdown_milliseconds_total`).
/// A failure of the disk or damage is latched like any write's, for [`trouble`] to see;
/// any other failure is retried each round, logged once a streak and counted in
/// `moat_store_flush_failures_total`.
pub(crate) struct Flusher {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Flusher {
    pub(crate) fn start(store: Store) -> std::io::Result<Flusher> {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("moat-flusher".into())
            .spawn(move || {
                // Failures in a row: the first of a streak is logged, and its end.
                let mut failing = 0u64;
                while !stopping.load(std::sync::atomic::Ordering::Relaxed) {
                    if store.wait_for_flush(Duration::from_millis(250)) {
                        let (waiting, _) = store.pending_commits();
                        metrics::gauge!("moat_store_pending_commits").set(waiting as f64);
                        let started = std::time::Instant::now();
                        let flushed = store.flush_round();
                        metrics::histogram!("moat_store_flush_seconds")
                            .record(started.elapsed().as_secs_f64());
                        metrics::counter!("moat_store_flushes_total").increment(1);
                        let (slowed, held) = store.slowed_commits();
                        metrics::counter!("moat_store_slowed_commits_total").absolute(slowed);
                        metrics::counter!("moat_store_commit_slowdown_milliseconds_total")
                            .absolute(held.as_millis() as u64);
                        match flushed {
                            // A disk failure or damage is latched: `trouble` reports it.
                            Err(e) if store.write_failure().is_none() => {
                                metrics::counter!("moat_store_flush_failures_total")
                                    .increment(1);
                                if failing == 0 {
                                    tracing::error!(error = %e, waiting, "writing blocks into the database failed; retrying each round");
                                }
                                failing += 1;
                            }
                            Err(_) => {}
                            Ok(()) => {
                                if failing > 0 {
                                    tracing::warn!(failed_rounds = failing, "blocks written into the database again");
                                }
                                failing = 0;
                            }
                        }
                    }
                }
            })?;
        Ok(Flusher {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread (within a quarter of a second); the caller flushes last.
    pub(crate) fn stop(mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Resolves once the store has refused a write for a reason of the disk, the datadir's
/// free space has fallen under `min_free_mb` (0: not checked), or the database was found
/// damaged; says which.
pub(crate) async fn trouble(store: &Store, datadir: &Path, min_free_mb: u64) -> Trouble {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        // Damage first: a damaged page that failed a commit latches both.
        if let Some(why) = store.damage() {
            return Trouble::Damaged(why.to_string());
        }
        if let Some(why) = store.write_failure() {
            return Trouble::Unwritable(why.to_string());
        }
        if min_free_mb > 0
            && let Some(free) = free_bytes(datadir)
            && free < min_free_mb << 20
        {
            return Trouble::Unwritable(format!(
                "{} MB free, under --datadir.minfreedisk {min_free_mb} MB",
                free >> 20
            ));
        }
    }
}

/// Bytes an unprivileged writer may still use on the file system of `path`.
pub(crate) fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a writable statvfs.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_space_of_an_existing_directory_is_known() {
        let here = std::env::current_dir().unwrap();
        assert!(free_bytes(&here).is_some_and(|b| b > 0));
        assert_eq!(free_bytes(Path::new("/no/such/directory/here")), None);
    }
}
