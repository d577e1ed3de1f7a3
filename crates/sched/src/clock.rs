//! The thread CPU clock: what budgets charge and the lanes count.

/// CPU time (ns) this thread has run, from the kernel's per-thread clock.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel
    // knows. On failure the timespec stays zero, which only under-counts.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_thread_clock_counts_work_not_sleep() {
        // The least of three sleeps: a busy host can charge an interrupt's time to
        // whichever thread it lands on (3.7 ms once, during a CI run with disk I/O).
        let slept = (0..3)
            .map(|_| {
                let t0 = thread_cpu_ns();
                std::thread::sleep(Duration::from_millis(30));
                thread_cpu_ns() - t0
            })
            .min()
            .unwrap_or(0);
        let t1 = thread_cpu_ns();
        let mut x = [0u8; 32];
        for _ in 0..20_000 {
            x = *alloy_primitives::keccak256(std::hint::black_box(x));
        }
        std::hint::black_box(x);
        let worked = thread_cpu_ns() - t1;
        // 20,000 hashes take some milliseconds of CPU whatever else the machine runs;
        // 30 ms of sleep take next to none.
        assert!(slept < 2_000_000, "sleeping counted {slept} ns");
        assert!(worked > 2_000_000, "hashing counted only {worked} ns");
    }
}
