//! Stopping on SIGINT and SIGTERM alike.
//!
//! Ctrl-C sends SIGINT; systemd, docker and kubernetes send SIGTERM. Both start the same
//! graceful shutdown: the first signal sets a flag and wakes whoever waits on it (the
//! node stops intake, finishes or abandons its in-flight block, flushes the pool journal
//! and the store, and exits 0; `moat import` stops between two blocks). A second signal,
//! or a shutdown that takes longer than [`GRACE`], ends the process at once with exit
//! code 1: every store commit is atomic, so even then the datadir reopens at a
//! consistent head.
//!
//! The signals are caught on a thread of their own with its own small runtime, so the
//! same code serves the async node and the synchronous import, and a signal that comes
//! while the node is still opening its datadir is not lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// Longest a graceful shutdown may take before the process exits anyway.
pub(crate) const GRACE: Duration = Duration::from_secs(30);

/// Exit code of a forced exit (second signal, or the grace period passed).
const FORCED_EXIT: i32 = 1;

/// The first SIGINT or SIGTERM, as a flag to poll and a future to await.
#[derive(Debug, Clone)]
pub(crate) struct Shutdown {
    requested: Arc<AtomicBool>,
    rx: watch::Receiver<bool>,
}

impl Shutdown {
    /// Starts listening for SIGINT and SIGTERM. From now on neither kills the process
    /// outright.
    pub(crate) fn install() -> Result<Shutdown, String> {
        let (tx, rx) = watch::channel(false);
        let requested = Arc::new(AtomicBool::new(false));
        let flag = requested.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || listen(tx, flag, ready_tx))
            .map_err(|e| format!("cannot start the signal thread: {e}"))?;
        ready_rx
            .recv()
            .map_err(|_| "the signal thread stopped".to_string())??;
        Ok(Shutdown { requested, rx })
    }

    /// Whether a signal has come.
    pub(crate) fn requested(&self) -> bool {
        self.requested.load(Ordering::Acquire)
    }

    /// Resolves once a signal has come (at once if one already has).
    pub(crate) async fn wait(&self) {
        let mut rx = self.rx.clone();
        // An error means the signal thread is gone, which it never is while the process
        // lives; treat it as a request to stop rather than wait forever.
        let _ = rx.wait_for(|stop| *stop).await;
    }
}

/// The signal thread: registers both handlers, reports readiness, then waits.
fn listen(
    tx: watch::Sender<bool>,
    flag: Arc<AtomicBool>,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            let _ = ready.send(Err(format!("cannot start the signal runtime: {e}")));
            return;
        }
    };
    runtime.block_on(async move {
        let (mut int, mut term) = match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(i), Ok(t)) => (i, t),
            (Err(e), _) | (_, Err(e)) => {
                let _ = ready.send(Err(format!("cannot catch SIGINT/SIGTERM: {e}")));
                return;
            }
        };
        let _ = ready.send(Ok(()));
        let name = tokio::select! {
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        };
        tracing::info!(
            signal = name,
            grace_secs = GRACE.as_secs(),
            "shutting down (a second signal forces exit)"
        );
        flag.store(true, Ordering::Release);
        let _ = tx.send(true);
        let reason = tokio::select! {
            _ = int.recv() => "a second signal (SIGINT)",
            _ = term.recv() => "a second signal (SIGTERM)",
            _ = tokio::time::sleep(GRACE) => "the shutdown took too long",
        };
        eprintln!("exiting at once: {reason}");
        std::process::exit(FORCED_EXIT);
    });
}
