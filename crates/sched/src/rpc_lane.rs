//! The untrusted lane's RPC budget: requests of RPC connections with a poor record run
//! in the untrusted lane ([`run_rpc_untrusted`]) within one token bucket of CPU-µs,
//! [`crate::SchedConfig::rpc_lane_budget`].

use crate::{CeilingMutex, Lane, run, thread_cpu_ns};
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

/// A future that returns its output with the thread CPU its polls took (ns).
struct CpuCounted<F> {
    inner: Pin<Box<F>>,
    ns: u64,
}

impl<F: Future> Future for CpuCounted<F> {
    type Output = (F::Output, u64);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let started = thread_cpu_ns();
        let r = self.inner.as_mut().poll(cx);
        self.ns += thread_cpu_ns().saturating_sub(started);
        match r {
            Poll::Ready(out) => Poll::Ready((out, self.ns)),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The CPU budget of the RPC requests that run in the untrusted lane, all connections
/// together: CPU-µs per second and how far the bucket fills. At `SCHED_IDLE` such work
/// costs honest work nothing, but it soaks up every idle cycle (a flood of invalid
/// transactions took 72 % of the machine); this bounds it to its share.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RpcLaneBudget {
    /// Refill rate, in CPU-µs per second of wall time.
    pub rate_us: u64,
    /// Bucket capacity, in CPU-µs (the largest burst after an idle spell).
    pub burst_us: u64,
}

impl RpcLaneBudget {
    /// An eighth of the machine (a peer's share), bursts of a quarter second of it.
    pub fn for_cores(cores: usize) -> Self {
        let machine = cores.max(1) as u64 * 1_000_000;
        Self {
            rate_us: machine / 8,
            burst_us: machine / 32,
        }
    }
}

/// A token bucket of CPU-µs for [`run_rpc_untrusted`].
#[derive(Debug)]
struct LaneBucket {
    tokens: f64,
    budget: RpcLaneBudget,
    at: std::time::Instant,
}

impl LaneBucket {
    /// A full bucket of `budget`.
    fn new(budget: RpcLaneBudget, now: std::time::Instant) -> Self {
        let mut bucket = LaneBucket {
            tokens: 0.0,
            budget,
            at: now,
        };
        bucket.set_budget(budget, now);
        bucket
    }

    /// Sets the budget; the bucket starts again full.
    fn set_budget(&mut self, budget: RpcLaneBudget, now: std::time::Instant) {
        self.budget = budget;
        self.tokens = budget.burst_us as f64;
        self.at = now;
    }

    fn refill(&mut self, now: std::time::Instant) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        let rate = self.budget.rate_us.max(1) as f64;
        self.tokens = (self.tokens + dt * rate).min(self.budget.burst_us as f64);
        self.at = now;
    }

    /// How long until its debt is repaid, if in debt.
    fn wait(&mut self, now: std::time::Instant) -> Option<std::time::Duration> {
        self.refill(now);
        let rate = self.budget.rate_us.max(1) as f64;
        (self.tokens < -0.5)
            .then(|| std::time::Duration::from_nanos((-self.tokens * 1e9 / rate).ceil() as u64))
    }
}

/// The bucket, made on first use with the configured budget ([`crate::config`]).
fn rpc_lane_bucket() -> &'static CeilingMutex<LaneBucket> {
    static BUCKET: OnceLock<CeilingMutex<LaneBucket>> = OnceLock::new();
    BUCKET.get_or_init(|| {
        let budget = crate::config().rpc_lane_budget;
        CeilingMutex::named(
            "rpc_lane_budget",
            LaneBucket::new(budget, std::time::Instant::now()),
        )
    })
}

/// The longest a request waits at once before the bucket is asked again.
const MAX_RPC_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Runs one RPC request of a connection in the untrusted lane ([`run`]), within the
/// lane's RPC budget: while the bucket is in debt the request waits (its connection's
/// next request with it), then its CPU is charged. Honest connections, in the trusted
/// lane, never meet this bucket.
pub async fn run_rpc_untrusted<F>(unit: F) -> Option<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    loop {
        let wait = rpc_lane_bucket().lock().wait(std::time::Instant::now());
        let Some(d) = wait else { break };
        metrics::counter!("moat_pool_budget_throttles_total", "origin" => "rpc", "reason" => "untrusted_lane")
            .increment(1);
        tokio::time::sleep(d.min(MAX_RPC_WAIT)).await;
    }
    let counted = CpuCounted {
        inner: Box::pin(unit),
        ns: 0,
    };
    let (out, ns) = run(Lane::Untrusted, counted).await?;
    let mut b = rpc_lane_bucket().lock();
    let now = std::time::Instant::now();
    b.refill(now);
    b.tokens -= (ns / 1_000) as f64;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::current;

    #[test]
    fn the_untrusted_rpc_lane_waits_out_its_debt() {
        let budget = RpcLaneBudget::for_cores(2);
        assert_eq!((budget.rate_us, budget.burst_us), (250_000, 62_500));
        let t0 = std::time::Instant::now();
        let mut b = LaneBucket {
            tokens: budget.burst_us as f64,
            budget,
            at: t0,
        };
        assert_eq!(b.wait(t0), None, "a full bucket lets a request in");
        // A request that took 112.5 ms of CPU: 50 ms in debt, repaid in 200 ms.
        b.tokens -= 112_500.0;
        assert_eq!(b.wait(t0), Some(std::time::Duration::from_millis(200)));
        let later = t0 + std::time::Duration::from_millis(100);
        assert_eq!(b.wait(later), Some(std::time::Duration::from_millis(100)));
        assert_eq!(b.wait(t0 + std::time::Duration::from_millis(200)), None);
        // It never fills past its burst.
        assert_eq!(b.wait(t0 + std::time::Duration::from_secs(60)), None);
        assert_eq!(b.tokens, budget.burst_us as f64);
    }

    #[test]
    fn a_new_rpc_lane_budget_sets_the_rate_and_refills_to_its_burst() {
        let t0 = std::time::Instant::now();
        let mut b = LaneBucket {
            tokens: -50_000.0,
            budget: RpcLaneBudget::for_cores(2),
            at: t0,
        };
        let budget = RpcLaneBudget {
            rate_us: 10_000,
            burst_us: 2_500,
        };
        b.set_budget(budget, t0);
        assert_eq!(b.budget, budget);
        // Out of debt at once, and never fuller than the new burst.
        assert_eq!(b.wait(t0), None);
        assert_eq!(b.tokens, 2_500.0);
        b.tokens = -1_000.0;
        // 1,000 µs of debt at 10,000 µs per second: repaid in 100 ms.
        assert_eq!(b.wait(t0), Some(std::time::Duration::from_millis(100)));
    }

    #[test]
    fn a_request_in_the_untrusted_rpc_lane_is_charged_its_cpu() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let before = rpc_lane_bucket().lock().tokens;
        let out = rt.block_on(run_rpc_untrusted(async {
            // ~20 ms of CPU.
            let started = crate::thread_cpu_ns();
            let mut x = [1u8; 32];
            while crate::thread_cpu_ns() - started < 20_000_000 {
                x = *alloy_primitives::keccak256(std::hint::black_box(x));
            }
            (current(), x[0])
        }));
        let after = rpc_lane_bucket().lock().tokens;
        assert_eq!(out.map(|o| o.0), Some(Lane::Untrusted));
        // Charged at least the 20 ms (refills over the test's own time aside).
        assert!(before - after > 10_000.0, "{before} -> {after}");
    }
}
