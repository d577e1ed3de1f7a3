//! Thread priorities: the untrusted lane's threads run at `SCHED_IDLE` (nice 19 where
//! that is refused), and are raised back to normal priority for critical sections
//! ([`Raised`]) of locks that trusted work takes too.

use std::cell::Cell;

thread_local! {
    /// Set on the untrusted lane's threads.
    pub(crate) static UNTRUSTED_THREAD: Cell<bool> = const { Cell::new(false) };
    /// Set on the untrusted lane's threads that run at `SCHED_IDLE` and can be raised
    /// back to normal priority ([`Raised`]).
    pub(crate) static RAISABLE: Cell<bool> = const { Cell::new(false) };
    /// [`Raised`] guards alive on this thread.
    pub(crate) static RAISED_DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Normal priority for as long as it lives, on an untrusted lane's thread (elsewhere it
/// does nothing): held across a critical section of a lock that trusted work takes too
/// (the pool's, the budgets' ledger, the fetcher's). At `SCHED_IDLE` a thread preempted
/// inside such a section would keep the lock until no normal thread wanted a core, and
/// a trusted thread waiting for it would wait that long: a priority inversion. Raised,
/// the holder competes as an equal and leaves the section within a time slice. Costs
/// two `sched_setscheduler` calls (under 1 µs together here) and a `sched_yield` per
/// outermost section on those threads only: lowered, the thread gives the core to a
/// thread that woke meanwhile (`yield_to_waiting`). Guards nest; declare the guard
/// before the lock's guard, so that the lock is released first.
#[must_use]
pub struct Raised(());

impl Raised {
    /// Raises this thread to normal priority if it is a lowered untrusted-lane thread
    /// (the outermost guard only); elsewhere a no-op guard.
    pub fn new() -> Self {
        if RAISABLE.with(Cell::get) {
            let depth = RAISED_DEPTH.with(|d| {
                let v = d.get();
                d.set(v + 1);
                v
            });
            if depth == 0 {
                set_idle(false);
            }
        }
        Raised(())
    }
}

impl Default for Raised {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Raised {
    fn drop(&mut self) {
        if RAISABLE.with(Cell::get) {
            let depth = RAISED_DEPTH.with(|d| {
                let v = d.get().saturating_sub(1);
                d.set(v);
                v
            });
            if depth == 0 {
                set_idle(true);
                yield_to_waiting();
            }
        }
    }
}

/// Gives the core to a runnable thread, if there is one, on a thread that has just
/// lowered itself. Lowering the running thread's policy makes the kernel reschedule
/// nothing: the thread, now at `SCHED_IDLE`, keeps the core until it blocks or the next
/// scheduler tick (4 ms at `HZ=250`), while a trusted thread that woke on that core
/// during the raised section (it does not preempt a raised thread) waits behind it.
/// With nothing else runnable `sched_yield` returns at once (~0.3 µs).
pub(crate) fn yield_to_waiting() {
    #[cfg(target_os = "linux")]
    // SAFETY: a plain syscall with no arguments about the calling thread.
    unsafe {
        libc::sched_yield();
    }
}

/// Sets the calling thread's policy: `SCHED_IDLE` when `idle`, else `SCHED_OTHER`.
/// Whether it took.
pub fn set_idle(idle: bool) -> bool {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        let policy = if idle {
            libc::SCHED_IDLE
        } else {
            libc::SCHED_OTHER
        };
        // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param.
        unsafe { libc::sched_setscheduler(0, policy, &param) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = idle;
        false
    }
}

/// Puts the calling thread at the lowest priority: `SCHED_IDLE` (it runs only when no
/// normal thread wants the core), else nice 19. Whether either took.
pub(crate) fn lower_this_thread() -> bool {
    set_idle(true) || nice_this_thread()
}

/// Sets the calling thread's nice value to 19 (below every normal thread, above
/// `SCHED_IDLE`). Whether it took.
pub fn nice_this_thread() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid takes no arguments; setpriority on a tid sets that thread's nice.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::id_t;
        // SAFETY: a plain syscall on this thread's own id.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, 19) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}
