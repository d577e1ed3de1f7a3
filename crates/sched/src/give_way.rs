//! Giving way: long work on the untrusted lane yields the core to a trusted thread that
//! woke meanwhile, between bounded steps ([`give_way`]) or, for work in one piece, from a
//! per-thread timer's signal ([`preemptible`]).

use crate::priority::{RAISED_DEPTH, UNTRUSTED_THREAD, yield_to_waiting};
use std::cell::Cell;
#[cfg(target_os = "linux")]
use std::sync::OnceLock;

/// A point where long work on the untrusted lane gives way: on that lane's threads,
/// outside a raised section, yields the core to a runnable thread (`yield_to_waiting`);
/// elsewhere (trusted threads, raised sections) does nothing. A thread at `SCHED_IDLE`
/// that runs on is not always preempted when a trusted thread wakes on its core (on this
/// kernel, a KVM guest), so work that takes milliseconds in one piece (a large frame's
/// MAC and decryption) calls this between bounded steps: a trusted thread then waits one
/// step at most, not the whole piece.
pub fn give_way() {
    if lowered_now() {
        yield_to_waiting();
    }
}

/// Whether the calling thread runs lowered now: one of the untrusted lane's threads,
/// outside a raised section.
pub(crate) fn lowered_now() -> bool {
    UNTRUSTED_THREAD.with(Cell::get) && RAISED_DEPTH.with(Cell::get) == 0
}

/// How often work in one piece on the untrusted lane gives way ([`preemptible`]), in ns:
/// [`crate::SchedConfig::give_way`].
fn give_way_every_ns() -> i64 {
    i64::try_from(crate::config().give_way.as_nanos()).unwrap_or(i64::MAX)
}

thread_local! {
    /// Times this thread gave way from [`preemptible`]'s timer signal (for tests).
    static GAVE_WAY: Cell<u64> = const { Cell::new(0) };
}

/// The timer signal's handler: give the core to a waiting thread. `sched_yield` is
/// async-signal-safe and cannot fail, so `errno` is left as it was.
#[cfg(target_os = "linux")]
extern "C" fn give_way_on_signal(_: libc::c_int) {
    GAVE_WAY.with(|n| n.set(n.get() + 1));
    yield_to_waiting();
}

/// Installs [`give_way_on_signal`] for `SIGURG` once, if nothing else handles that
/// signal (the node uses it for nothing: its default is to be ignored). Whether it is
/// installed.
#[cfg(target_os = "linux")]
fn give_way_signal_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| {
        // SAFETY: sigaction reads and writes the structs passed; the handler only makes
        // an async-signal-safe syscall and touches a const-initialised thread local.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGURG, std::ptr::null(), &mut old) != 0
                || old.sa_sigaction != libc::SIG_DFL
            {
                return false;
            }
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = give_way_on_signal as extern "C" fn(libc::c_int) as usize;
            act.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(libc::SIGURG, &act, std::ptr::null_mut()) == 0
        }
    })
}

/// A per-thread timer that signals its thread every [`give_way_every_ns`]; deleted on
/// drop.
#[cfg(target_os = "linux")]
struct GiveWayTimer(libc::timer_t);

#[cfg(target_os = "linux")]
impl GiveWayTimer {
    fn start() -> Option<Self> {
        if !give_way_signal_ready() {
            return None;
        }
        // SAFETY: gettid takes no arguments; timer_create and timer_settime read the
        // structs passed and write the new timer's id; the timer signals this thread
        // only (SIGEV_THREAD_ID).
        unsafe {
            let mut ev: libc::sigevent = std::mem::zeroed();
            ev.sigev_notify = libc::SIGEV_THREAD_ID;
            ev.sigev_signo = libc::SIGURG;
            ev.sigev_notify_thread_id = libc::syscall(libc::SYS_gettid) as libc::c_int;
            let mut id: libc::timer_t = std::mem::zeroed();
            if libc::timer_create(libc::CLOCK_MONOTONIC, &mut ev, &mut id) != 0 {
                return None;
            }
            let ns = give_way_every_ns();
            let every = libc::timespec {
                tv_sec: (ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (ns % 1_000_000_000) as libc::c_long,
            };
            let spec = libc::itimerspec {
                it_interval: every,
                it_value: every,
            };
            if libc::timer_settime(id, 0, &spec, std::ptr::null_mut()) != 0 {
                libc::timer_delete(id);
                return None;
            }
            Some(GiveWayTimer(id))
        }
    }
}

#[cfg(target_os = "linux")]
impl Drop for GiveWayTimer {
    fn drop(&mut self) {
        // SAFETY: the id came from timer_create and is deleted once.
        unsafe {
            libc::timer_delete(self.0);
        }
    }
}

/// Runs `f`, work that takes milliseconds in one piece with no point where it could give
/// way itself (a KZG batch, in c-kzg), so that on an untrusted lane's thread it still
/// gives way every [`crate::SchedConfig::give_way`] (0.5 ms unless configured): a timer
/// of this thread's signals it (`SIGURG`) and the handler yields (`yield_to_waiting`). Traced under blob spam, a trusted thread woken from the
/// other core did not preempt such a batch at `SCHED_IDLE` and waited for the scheduler
/// tick (3.6-3.9 ms, docs/bench-history/attack.md). Elsewhere (trusted threads, raised sections,
/// no timer to be had) it runs `f` as it is.
pub fn preemptible<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_os = "linux")]
    let _timer = lowered_now().then(GiveWayTimer::start).flatten();
    f()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spawn_blocking_idle;

    /// Thread CPU time spent spinning until `ms` of it have passed.
    fn spin_cpu_ms(ms: u64) {
        let start = crate::thread_cpu_ns();
        while crate::thread_cpu_ns().saturating_sub(start) < ms * 1_000_000 {
            std::hint::black_box(0u64);
        }
    }

    #[test]
    fn work_in_one_piece_gives_way_on_the_untrusted_lane_only() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        // 20 ms of this thread's CPU: its timer has fired (wall time) long before.
        let untrusted = rt
            .block_on(spawn_blocking_idle(|| {
                let before = GAVE_WAY.with(Cell::get);
                let out = preemptible(|| {
                    spin_cpu_ms(20);
                    7
                });
                let gave = GAVE_WAY.with(Cell::get) - before;
                // The timer is gone with the work.
                spin_cpu_ms(5);
                (out, gave, GAVE_WAY.with(Cell::get) - before - gave)
            }))
            .unwrap();
        assert_eq!(untrusted.0, 7);
        assert!(untrusted.1 > 0, "no timer signal in 20 ms of work");
        // At most the one signal that may have been pending when the timer went.
        assert!(untrusted.2 <= 1, "{} signals after the work", untrusted.2);
        // A trusted thread runs it as it is.
        let before = GAVE_WAY.with(Cell::get);
        assert_eq!(preemptible(|| spin_cpu_ms(5)), ());
        assert_eq!(GAVE_WAY.with(Cell::get), before);
    }
}
