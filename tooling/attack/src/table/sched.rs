//! The attackers' threads stand for remote machines, so they are kept off the cores the
//! node needs: their runtime's workers run at `SCHED_IDLE` (or nice 19), and an attacker
//! gives its core away before each message or call.

/// Gives the core to any thread waiting for it (`sched_yield`): an attacker calls it
/// before each message or call. At nice 19 a busy attacker thread that the kernel does
/// not preempt when a node thread wakes on its core (the wakee waits for the next
/// scheduler tick, up to 4 ms at `HZ=250`) held the node's runtime workers off their
/// core for 2.7-3.9 ms at the start of row 2's attack (perf sched traces, 17:50 UTC
/// 2026-11-23): that was the tool's CPU, standing for remote machines, counted as the
/// node's latency. With nothing else runnable it returns at once.
pub(crate) fn yield_core() {
    // SAFETY: a plain syscall with no arguments about the calling thread.
    unsafe {
        libc::sched_yield();
    }
}

/// Lowers the calling thread (the attackers' runtime workers) to nice 19 and then to
/// `SCHED_IDLE`, unless `ATTACKERS_NICE19=1` (the policy before 2026-11-23 19:05 UTC).
/// A waking thread preempts a `SCHED_IDLE` one more readily than a nice-19 one: row 4's
/// 786 KB replies keep an attacker on its core for 1-4 ms at a time, which no yield
/// between messages splits.
pub(crate) fn lower_attacker() {
    // SAFETY: gettid takes no arguments; setpriority on a tid sets that thread's nice
    // value; sched_setscheduler(0, ..) sets the calling thread's policy from a valid
    // param. Failure leaves the thread as it was.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 19);
        if std::env::var_os("ATTACKERS_NICE19").is_none_or(|v| v != "1") {
            let param = libc::sched_param { sched_priority: 0 };
            libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
        }
    }
}
