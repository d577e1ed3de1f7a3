//! The two lanes and the untrusted lane's runtime: [`run`] puts one unit of admission
//! work in a lane, [`spawn_blocking_idle`] speculative work on the untrusted lane's
//! blocking threads; [`units`] and Prometheus count what each lane ran.

use crate::priority::{RAISABLE, UNTRUSTED_THREAD, lower_this_thread, set_idle};
use crate::{Raised, thread_cpu_ns};
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

/// Where a unit of admission work runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// The node's runtime, at normal priority.
    Trusted,
    /// Low-priority threads of their own.
    Untrusted,
}

impl Lane {
    /// Both lanes, in the order of their metric slots (trusted first).
    pub const ALL: [Lane; 2] = [Lane::Trusted, Lane::Untrusted];

    /// The lane's label in metrics (`lane="trusted"` or `lane="untrusted"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Trusted => "trusted",
            Lane::Untrusted => "untrusted",
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            Lane::Trusted => 0,
            Lane::Untrusted => 1,
        }
    }
}

/// The lane the calling thread belongs to.
pub fn current() -> Lane {
    if UNTRUSTED_THREAD.with(Cell::get) {
        Lane::Untrusted
    } else {
        Lane::Trusted
    }
}

/// The untrusted lane's runtime: made on first use, as many workers as cores, every
/// thread (blocking pool included) lowered at start. `None` if it cannot be made.
fn untrusted_runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RT.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cores)
            .thread_name("moat-untrusted")
            .on_thread_start(|| {
                UNTRUSTED_THREAD.with(|t| t.set(true));
                if !lower_this_thread() {
                    tracing::warn!("untrusted admission lane: thread priority not lowered");
                } else if set_idle(false) && set_idle(true) {
                    // Back to normal priority and down again works: critical sections
                    // can be raised (`Raised`). Where it is refused (an unprivileged
                    // process past its RLIMIT_NICE, or nice 19 instead of SCHED_IDLE),
                    // they run at the lane's priority.
                    RAISABLE.with(|r| r.set(true));
                }
            })
            .enable_time()
            .build()
            .map_err(|e| tracing::warn!(error = %e, "untrusted admission lane not started"))
            .ok()
    })
    .as_ref()
}

/// Runs `f` on a blocking thread of the untrusted lane (`SCHED_IDLE`): speculative work
/// that admission does not need done first, such as warming the sender cache for a
/// batch (the pool's `warm_senders`), which admission would otherwise do in order.
/// On the node runtime's blocking pool where that lane could not be made.
pub fn spawn_blocking_idle<F, R>(f: F) -> tokio::task::JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    match untrusted_runtime() {
        Some(rt) => rt.spawn_blocking(f),
        None => tokio::task::spawn_blocking(f),
    }
}

/// Units of work run per lane, and their CPU (µs), since start; the same as Prometheus
/// has, for tests and tools.
static UNITS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
static CPU_US: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// Units run in `lane` since start.
pub fn units(lane: Lane) -> u64 {
    UNITS[lane.index()].load(Ordering::Relaxed)
}

/// A future whose polls' thread CPU is counted to its lane.
struct Metered<F> {
    inner: Pin<Box<F>>,
    lane: Lane,
    ns: u64,
}

impl<F: Future> Future for Metered<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let started = thread_cpu_ns();
        let r = self.inner.as_mut().poll(cx);
        self.ns += thread_cpu_ns().saturating_sub(started);
        // Counted by the millisecond while it runs (a peer's reader may run for hours),
        // and the rest at its end.
        if r.is_ready() || self.ns >= 1_000_000 {
            let us = self.ns / 1_000;
            self.ns = 0;
            CPU_US[self.lane.index()].fetch_add(us, Ordering::Relaxed);
            metrics::counter!("moat_pool_lane_cpu_us_total", "lane" => self.lane.as_str())
                .increment(us);
        }
        r
    }
}

/// Aborts the task when dropped: a unit whose caller went away (a dropped peer) stops.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs one unit of admission work in `lane` and waits for it: the trusted lane runs it
/// here; the untrusted lane on its low-priority threads (here if they could not be
/// started). `None` if the unit panicked or was cancelled.
pub async fn run<F>(lane: Lane, unit: F) -> Option<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    UNITS[lane.index()].fetch_add(1, Ordering::Relaxed);
    metrics::counter!("moat_pool_lane_units_total", "lane" => lane.as_str()).increment(1);
    let metered = Metered {
        inner: Box::pin(unit),
        lane,
        ns: 0,
    };
    match (lane, untrusted_runtime()) {
        (Lane::Untrusted, Some(rt)) if current() == Lane::Trusted => {
            // The result comes back through a channel whose send is raised: waking the
            // waiting task takes the node runtime's scheduler locks, which its workers
            // take too (a JoinHandle's wake would come from the task's harness, past
            // any section this code can raise).
            let (tx, rx) = tokio::sync::oneshot::channel();
            let _task = AbortOnDrop(rt.spawn(async move {
                let out = metered.await;
                let _raised = Raised::new();
                let _ = tx.send(out);
            }));
            rx.await.ok()
        }
        _ => Some(metered.await),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CeilingMutex, CeilingRwLock};
    use std::sync::Arc;

    /// One unit of work: a few thousand hashes (a few hundred µs of CPU), noting which
    /// lane's thread ran it.
    async fn work(on_trusted: Arc<AtomicU64>) {
        let mut x = [7u8; 32];
        for _ in 0..2_000 {
            x = *alloy_primitives::keccak256(std::hint::black_box(x));
        }
        std::hint::black_box(x);
        if current() == Lane::Trusted {
            on_trusted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Floods 4 × 50 untrusted units from tasks of a one-thread runtime (the node's
    /// runtime here), then admits one trusted unit; returns how many untrusted units ran
    /// on that runtime's thread between the trusted unit's arrival and its completion:
    /// the work it waited behind, in units.
    fn trusted_unit_waits_behind(untrusted: Lane) -> u64 {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let on_trusted = Arc::new(AtomicU64::new(0));
            let mut flood = Vec::new();
            for _ in 0..4 {
                let on_trusted = on_trusted.clone();
                flood.push(tokio::spawn(async move {
                    for _ in 0..50 {
                        run(untrusted, work(on_trusted.clone())).await;
                        // As the admission worker does after each message.
                        tokio::task::yield_now().await;
                    }
                }));
            }
            // The flood is under way (each attacker task has queued its first unit).
            tokio::task::yield_now().await;
            let before = on_trusted.load(Ordering::Relaxed);
            let mine = Arc::new(AtomicU64::new(0));
            let trusted = tokio::spawn(run(Lane::Trusted, work(mine.clone())));
            trusted.await.unwrap();
            let waited = on_trusted.load(Ordering::Relaxed) - before;
            assert_eq!(mine.load(Ordering::Relaxed), 1, "the trusted unit ran");
            for f in flood {
                f.await.unwrap();
            }
            waited
        })
    }

    #[test]
    fn an_untrusted_flood_does_not_delay_a_trusted_unit() {
        // With lanes, the flood runs on the untrusted lane's threads: the trusted unit
        // waits behind none of it on the node's runtime.
        assert_eq!(trusted_unit_waits_behind(Lane::Untrusted), 0);
        // Without them (everything in the trusted lane), the same flood's units run
        // before it: each of the 4 attacker tasks gets at least its turn.
        assert!(trusted_unit_waits_behind(Lane::Trusted) >= 4);
    }

    /// `SCHED_IDLE`, or nice 19 where that was refused.
    fn this_thread_is_lowered() -> bool {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: plain syscalls about the calling thread.
            unsafe {
                let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
                libc::sched_getscheduler(0) == libc::SCHED_IDLE
                    || libc::getpriority(libc::PRIO_PROCESS, tid) == 19
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            true
        }
    }

    /// The calling thread's scheduling policy.
    #[cfg(target_os = "linux")]
    fn policy() -> i32 {
        // SAFETY: a plain syscall about the calling thread.
        unsafe { libc::sched_getscheduler(0) }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_lock_held_on_the_untrusted_lane_is_held_at_normal_priority() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let lock = Arc::new(CeilingMutex::new(0u32));
        let table = Arc::new(CeilingRwLock::new(0u32));
        let (l, t) = (lock.clone(), table.clone());
        let seen = rt
            .block_on(run(Lane::Untrusted, async move {
                let idle = policy() == libc::SCHED_IDLE;
                if !RAISABLE.with(Cell::get) {
                    // Raising refused (no privilege): nothing to check. Root may.
                    // SAFETY: geteuid has no preconditions.
                    assert_ne!(unsafe { libc::geteuid() }, 0, "root could not raise");
                    return None;
                }
                let mut seen = vec![policy()];
                {
                    let mut g = l.lock();
                    *g += 1;
                    seen.push(policy());
                    // Nested sections raise once and lower once, at the outermost.
                    {
                        let _r = t.read();
                        seen.push(policy());
                    }
                    seen.push(policy());
                }
                seen.push(policy());
                *t.write() += 1;
                seen.push(policy());
                Some((idle, seen))
            }))
            .unwrap();
        let Some((idle, seen)) = seen else { return };
        assert!(idle);
        let (i, o) = (libc::SCHED_IDLE, libc::SCHED_OTHER);
        assert_eq!(seen, vec![i, o, o, o, i, i]);
        assert_eq!((*lock.lock(), *table.read()), (1, 1));
        // On a trusted thread a guard changes nothing.
        let before = policy();
        let _g = lock.lock();
        assert_eq!(policy(), before);
    }

    #[test]
    fn the_untrusted_lane_runs_on_lowered_threads_and_counts_its_units() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let before = units(Lane::Untrusted);
        let (lane, lowered) = rt
            .block_on(run(Lane::Untrusted, async {
                (current(), this_thread_is_lowered())
            }))
            .unwrap();
        assert_eq!(lane, Lane::Untrusted);
        assert!(
            lowered,
            "the untrusted lane's thread runs at normal priority"
        );
        assert!(units(Lane::Untrusted) > before);
        // And the trusted lane runs the unit where it is called.
        let here = rt
            .block_on(run(Lane::Trusted, async { current() }))
            .unwrap();
        assert_eq!(here, Lane::Trusted);
    }
}
