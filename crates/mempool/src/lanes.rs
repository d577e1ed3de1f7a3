//! Admission lanes: honest work never waits behind attack work.
//!
//! Budgets ([`super::budget`]) bound an origin's share of the CPU over a second, not the
//! queueing delay an honest transaction meets when attack work holds the cores. So each
//! unit of admission work (a peer message's chunk, an announcement, an RPC request) is
//! put in a lane by its origin's standing when it is scheduled ([`Standing::lane`], one
//! exhaustive table):
//! - the trusted lane runs where it always ran, on the node's runtime;
//! - the untrusted lane runs on its own runtime, whose threads (workers and blocking
//!   pool alike, so the ECDSA and KZG done for it too) run at the lowest priority the
//!   kernel has (`SCHED_IDLE`; nice 19 where that is refused): the kernel preempts them
//!   as soon as trusted work is runnable, and trusted work never sits in a queue behind
//!   untrusted work. KZG batches are per lane for the same reason
//!   ([`super::Pool`] keeps one batcher per lane).
//!
//! A lane is chosen per unit, so an origin moves between lanes as its record and budget
//! change; one origin's units still run one after the other, in order. The lanes can be
//! switched off (`BudgetConfig::lanes`, `--txpool.nolanes`): then everything runs in the
//! trusted lane. Prometheus: `moat_pool_lane_units_total` and
//! `moat_pool_lane_cpu_us_total`, by lane.

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
    pub const ALL: [Lane; 2] = [Lane::Trusted, Lane::Untrusted];

    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Trusted => "trusted",
            Lane::Untrusted => "untrusted",
        }
    }

    fn index(self) -> usize {
        match self {
            Lane::Trusted => 0,
            Lane::Untrusted => 1,
        }
    }
}

/// What the node knows of an origin when it schedules the origin's next unit of work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// A local RPC connection whose record is not poor.
    LocalRpc,
    /// A local RPC connection whose submissions are mostly refused ([`is_poor`]).
    LocalRpcPoor,
    /// A peer with admitted transactions ([`PROVEN_ADMITTED`]), a record that is not poor,
    /// within its budget.
    PeerProven,
    /// A peer with (almost) no admitted transactions yet: new, or silent so far.
    PeerNew,
    /// A peer in debt, or spending while all peers are over their budget.
    PeerOverBudget,
    /// A peer whose transactions are mostly refused, or judged useless.
    PeerPoor,
    /// The node's own work (reorged-out and journaled transactions).
    Node,
}

impl Standing {
    /// The rule table: standing → lane.
    pub fn lane(self) -> Lane {
        match self {
            // The operator's own clients: trusted while they behave.
            Standing::LocalRpc => Lane::Trusted,
            // An RPC client flooding invalid or underpriced txs gets what is left over.
            Standing::LocalRpcPoor => Lane::Untrusted,
            // A peer whose transactions have been admitted relays real traffic.
            Standing::PeerProven => Lane::Trusted,
            // Anyone can open a connection with a fresh key: it earns its place first.
            Standing::PeerNew => Lane::Untrusted,
            // Past its budget a peer is being slowed; what it still gets, it gets last.
            Standing::PeerOverBudget => Lane::Untrusted,
            // Spending CPU that buys nothing.
            Standing::PeerPoor => Lane::Untrusted,
            // Head changes and restarts: the node's own bookkeeping.
            Standing::Node => Lane::Trusted,
        }
    }

    /// A peer's standing from its record (admitted and rejected transactions, history of
    /// its subnet included) and its budget's state.
    pub fn of_peer(admitted: u64, rejected: u64, over_budget: bool, useless: bool) -> Self {
        if useless || is_poor(admitted, rejected) {
            Standing::PeerPoor
        } else if over_budget {
            Standing::PeerOverBudget
        } else if admitted < PROVEN_ADMITTED {
            Standing::PeerNew
        } else {
            Standing::PeerProven
        }
    }

    /// A local RPC connection's standing from its record.
    pub fn of_rpc(admitted: u64, rejected: u64) -> Self {
        if is_poor(admitted, rejected) {
            Standing::LocalRpcPoor
        } else {
            Standing::LocalRpc
        }
    }
}

/// Admitted transactions that make a peer proven.
pub const PROVEN_ADMITTED: u64 = 8;
/// Rejections forgiven whatever the record (an honest client's nonce races, replacements
/// too cheap, txs a relay sent twice).
const POOR_SLACK: u64 = 64;
/// A record is poor past this many rejections per admitted transaction.
const POOR_RATIO: u64 = 4;

/// Whether a record of submissions is mostly refusals: more than [`POOR_RATIO`] per
/// admitted transaction, past [`POOR_SLACK`].
pub fn is_poor(admitted: u64, rejected: u64) -> bool {
    rejected > POOR_SLACK.saturating_add(admitted.saturating_mul(POOR_RATIO))
}

/// What one origin's submissions bought so far (an RPC connection's: peers keep theirs
/// in [`super::Budgets`]).
#[derive(Debug, Default)]
pub struct Record {
    admitted: AtomicU64,
    rejected: AtomicU64,
}

impl Record {
    pub fn note(&self, admitted: bool) {
        let counter = if admitted {
            &self.admitted
        } else {
            &self.rejected
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// (admitted, rejected).
    pub fn counts(&self) -> (u64, u64) {
        (
            self.admitted.load(Ordering::Relaxed),
            self.rejected.load(Ordering::Relaxed),
        )
    }

    /// The lane of an RPC connection with this record.
    pub fn rpc_lane(&self) -> Lane {
        let (admitted, rejected) = self.counts();
        Standing::of_rpc(admitted, rejected).lane()
    }
}

thread_local! {
    /// Set on the untrusted lane's threads.
    static UNTRUSTED_THREAD: Cell<bool> = const { Cell::new(false) };
    /// Set on the untrusted lane's threads that run at `SCHED_IDLE` and can be raised
    /// back to normal priority ([`Raised`]).
    static RAISABLE: Cell<bool> = const { Cell::new(false) };
    /// [`Raised`] guards alive on this thread.
    static RAISED_DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Normal priority for as long as it lives, on an untrusted lane's thread (elsewhere it
/// does nothing): held across a critical section of a lock that trusted work takes too
/// (the pool's, the budgets' ledger, the fetcher's). At `SCHED_IDLE` a thread preempted
/// inside such a section would keep the lock until no normal thread wanted a core, and
/// a trusted thread waiting for it would wait that long: a priority inversion. Raised,
/// the holder competes as an equal and leaves the section within a time slice. Costs
/// two `sched_setscheduler` calls (under 1 µs together here) and a `sched_yield` per
/// outermost section on those threads only: lowered, the thread gives the core to a
/// thread that woke meanwhile ([`yield_to_waiting`]). Guards nest; declare the guard
/// before the lock's guard, so that the lock is released first.
#[must_use]
pub struct Raised(());

impl Raised {
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
fn yield_to_waiting() {
    #[cfg(target_os = "linux")]
    // SAFETY: a plain syscall with no arguments about the calling thread.
    unsafe {
        libc::sched_yield();
    }
}

/// A point where long work on the untrusted lane gives way: on that lane's threads,
/// outside a raised section, yields the core to a runnable thread ([`yield_to_waiting`]);
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
fn lowered_now() -> bool {
    UNTRUSTED_THREAD.with(Cell::get) && RAISED_DEPTH.with(Cell::get) == 0
}

/// How often work in one piece on the untrusted lane gives way ([`preemptible`]), unless
/// `MOAT_LANE_GIVE_WAY_US` says otherwise (microseconds, 50 to 100,000; for measuring).
const GIVE_WAY_EVERY_NS: i64 = 500_000;

fn give_way_every_ns() -> i64 {
    static EVERY: OnceLock<i64> = OnceLock::new();
    *EVERY.get_or_init(|| {
        std::env::var("MOAT_LANE_GIVE_WAY_US")
            .ok()
            .and_then(|v| v.parse::<i64>().ok())
            .filter(|us| (50..=100_000).contains(us))
            .map_or(GIVE_WAY_EVERY_NS, |us| us * 1_000)
    })
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
/// gives way every 0.5 ms: a timer of this thread's signals it (`SIGURG`) and the handler
/// yields ([`yield_to_waiting`]). Traced under blob spam, a trusted thread woken from the
/// other core did not preempt such a batch at `SCHED_IDLE` and waited for the scheduler
/// tick (3.6-3.9 ms, docs/bench-history/attack.md). Elsewhere (trusted threads, raised sections,
/// no timer to be had) it runs `f` as it is.
pub fn preemptible<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_os = "linux")]
    let _timer = lowered_now().then(GiveWayTimer::start).flatten();
    f()
}

/// A mutex whose sections run at normal priority on any thread ([`Raised`]): for state
/// that the untrusted lane's threads and trusted work both lock.
///
/// A lock that is found held is timed: `moat_lock_wait_seconds{lock,lane}` (the waiter's
/// lane) and `moat_lock_waits_total`; the uncontended path reads no clock.
#[derive(Debug, Default)]
pub struct CeilingMutex<T> {
    lock: parking_lot::Mutex<T>,
    name: &'static str,
}

/// Takes a lock through `try_take` when it is free; otherwise waits in `take` and records
/// the wait ([`waited`]).
fn take_timed<G>(
    name: &'static str,
    try_take: impl FnOnce() -> Option<G>,
    take: impl FnOnce() -> G,
) -> G {
    if let Some(guard) = try_take() {
        return guard;
    }
    let since = std::time::Instant::now();
    let guard = take();
    waited(name, since);
    guard
}

/// Records a wait for a contended lock ([`CeilingMutex`], [`CeilingRwLock`]).
fn waited(name: &'static str, since: std::time::Instant) {
    let lane = current().as_str();
    metrics::histogram!("moat_lock_wait_seconds", "lock" => name, "lane" => lane)
        .record(since.elapsed());
    metrics::counter!("moat_lock_waits_total", "lock" => name, "lane" => lane).increment(1);
}

/// A lock guard `G` of a ceiling lock, held at normal priority: the priority goes back
/// down after the lock is free. One type for [`CeilingMutex`]'s and [`CeilingRwLock`]'s
/// guards.
pub struct Ceiling<G> {
    // Field order is drop order: the lock first, then the priority.
    guard: G,
    _raised: Raised,
}

impl<G> Ceiling<G> {
    /// Raises the thread, then takes the lock ([`take_timed`]).
    fn take(
        name: &'static str,
        try_take: impl FnOnce() -> Option<G>,
        take: impl FnOnce() -> G,
    ) -> Self {
        let raised = Raised::new();
        Ceiling {
            guard: take_timed(name, try_take, take),
            _raised: raised,
        }
    }

    /// Raises the thread and takes the lock if it is free (lowered again if not).
    fn try_take(try_take: impl FnOnce() -> Option<G>) -> Option<Self> {
        let raised = Raised::new();
        Some(Ceiling {
            guard: try_take()?,
            _raised: raised,
        })
    }
}

impl<G: std::ops::Deref> std::ops::Deref for Ceiling<G> {
    type Target = G::Target;
    fn deref(&self) -> &G::Target {
        &self.guard
    }
}

impl<G: std::ops::DerefMut> std::ops::DerefMut for Ceiling<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.guard
    }
}

/// The lock of a [`CeilingMutex`].
pub type CeilingGuard<'a, T> = Ceiling<parking_lot::MutexGuard<'a, T>>;
/// A read lock of a [`CeilingRwLock`].
pub type CeilingReadGuard<'a, T> = Ceiling<parking_lot::RwLockReadGuard<'a, T>>;
/// A write lock of a [`CeilingRwLock`].
pub type CeilingWriteGuard<'a, T> = Ceiling<parking_lot::RwLockWriteGuard<'a, T>>;

impl<T> CeilingMutex<T> {
    pub fn new(value: T) -> Self {
        Self::named("other", value)
    }

    /// A mutex whose waits are reported under `name`.
    pub fn named(name: &'static str, value: T) -> Self {
        Self {
            lock: parking_lot::Mutex::new(value),
            name,
        }
    }

    pub fn lock(&self) -> CeilingGuard<'_, T> {
        Ceiling::take(self.name, || self.lock.try_lock(), || self.lock.lock())
    }

    pub fn try_lock(&self) -> Option<CeilingGuard<'_, T>> {
        Ceiling::try_take(|| self.lock.try_lock())
    }
}

/// A read-write lock whose sections run at normal priority on any thread ([`Raised`]):
/// the peer table, which the untrusted lane reads and the runtime writes (a peer
/// arriving or leaving). A writer waiting for a preempted reader would hold up every
/// later reader behind it.
#[derive(Debug, Default)]
pub struct CeilingRwLock<T> {
    lock: parking_lot::RwLock<T>,
    name: &'static str,
}

impl<T> CeilingRwLock<T> {
    pub fn new(value: T) -> Self {
        Self::named("other", value)
    }

    /// A lock whose waits are reported under `name` (as [`CeilingMutex`]'s).
    pub fn named(name: &'static str, value: T) -> Self {
        Self {
            lock: parking_lot::RwLock::new(value),
            name,
        }
    }

    pub fn read(&self) -> CeilingReadGuard<'_, T> {
        Ceiling::take(self.name, || self.lock.try_read(), || self.lock.read())
    }

    pub fn write(&self) -> CeilingWriteGuard<'_, T> {
        Ceiling::take(self.name, || self.lock.try_write(), || self.lock.write())
    }
}

/// Sets the calling thread's policy: `SCHED_IDLE` when `idle`, else `SCHED_OTHER`.
/// Whether it took.
pub(crate) fn set_idle(idle: bool) -> bool {
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

/// The lane the calling thread belongs to.
pub fn current() -> Lane {
    if UNTRUSTED_THREAD.with(Cell::get) {
        Lane::Untrusted
    } else {
        Lane::Trusted
    }
}

/// Puts the calling thread at the lowest priority: `SCHED_IDLE` (it runs only when no
/// normal thread wants the core), else nice 19. Whether either took.
fn lower_this_thread() -> bool {
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
/// batch ([`super::Pool::warm_senders`]), which admission would otherwise do in order.
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
        let started = super::budget::thread_cpu_ns();
        let r = self.inner.as_mut().poll(cx);
        self.ns += super::budget::thread_cpu_ns().saturating_sub(started);
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

/// A future that returns its output with the thread CPU its polls took (ns).
struct CpuCounted<F> {
    inner: Pin<Box<F>>,
    ns: u64,
}

impl<F: Future> Future for CpuCounted<F> {
    type Output = (F::Output, u64);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let started = super::budget::thread_cpu_ns();
        let r = self.inner.as_mut().poll(cx);
        self.ns += super::budget::thread_cpu_ns().saturating_sub(started);
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
    pub rate_us: u64,
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

/// Sets the budget of the RPC requests in the untrusted lane (`--txpool.rpclanecpu`),
/// in place of [`RpcLaneBudget::for_cores`]; the bucket starts again full.
pub fn set_rpc_lane_budget(budget: RpcLaneBudget) {
    rpc_lane_bucket()
        .lock()
        .set_budget(budget, std::time::Instant::now());
}

/// The budget of the RPC requests in the untrusted lane now in force.
pub fn rpc_lane_budget() -> RpcLaneBudget {
    rpc_lane_bucket().lock().budget
}

/// A token bucket of CPU-µs for [`run_rpc_untrusted`].
#[derive(Debug)]
struct LaneBucket {
    tokens: f64,
    budget: RpcLaneBudget,
    at: std::time::Instant,
}

impl LaneBucket {
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

fn rpc_lane_bucket() -> &'static CeilingMutex<LaneBucket> {
    static BUCKET: OnceLock<CeilingMutex<LaneBucket>> = OnceLock::new();
    BUCKET.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let budget = RpcLaneBudget::for_cores(cores);
        CeilingMutex::named(
            "rpc_lane_budget",
            LaneBucket {
                tokens: budget.burst_us as f64,
                budget,
                at: std::time::Instant::now(),
            },
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
    use std::sync::Arc;

    #[test]
    fn the_table_puts_only_behaving_origins_in_the_trusted_lane() {
        let trusted = [Standing::LocalRpc, Standing::PeerProven, Standing::Node];
        let untrusted = [
            Standing::LocalRpcPoor,
            Standing::PeerNew,
            Standing::PeerOverBudget,
            Standing::PeerPoor,
        ];
        for s in trusted {
            assert_eq!(s.lane(), Lane::Trusted, "{s:?}");
        }
        for s in untrusted {
            assert_eq!(s.lane(), Lane::Untrusted, "{s:?}");
        }
        // Peers: a record of admitted txs is what earns trust; a poor record or being
        // over budget loses it, whatever was admitted before.
        assert_eq!(Standing::of_peer(0, 0, false, false), Standing::PeerNew);
        assert_eq!(Standing::of_peer(7, 0, false, false), Standing::PeerNew);
        assert_eq!(Standing::of_peer(8, 0, false, false), Standing::PeerProven);
        assert_eq!(
            Standing::of_peer(100, 400, false, false),
            Standing::PeerProven
        );
        assert_eq!(
            Standing::of_peer(100, 465, false, false),
            Standing::PeerPoor
        );
        assert_eq!(
            Standing::of_peer(100, 0, true, false),
            Standing::PeerOverBudget
        );
        assert_eq!(Standing::of_peer(100, 0, false, true), Standing::PeerPoor);
        assert_eq!(Standing::of_peer(0, 65, false, false), Standing::PeerPoor);
        // RPC connections start trusted and lose it by a poor record.
        assert_eq!(Standing::of_rpc(0, 0), Standing::LocalRpc);
        assert_eq!(Standing::of_rpc(0, 64), Standing::LocalRpc);
        assert_eq!(Standing::of_rpc(0, 65), Standing::LocalRpcPoor);
        assert_eq!(Standing::of_rpc(1_000, 3_000), Standing::LocalRpc);
        let r = Record::default();
        for _ in 0..70 {
            r.note(false);
        }
        assert_eq!(r.counts(), (0, 70));
        assert_eq!(r.rpc_lane(), Lane::Untrusted);
    }

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

    /// [`trusted_unit_waits_behind`] with real admissions: 4 attacking peers' fresh
    /// unfunded transfers (an ECDSA each) flood the pool while an honest funded transfer
    /// is admitted; how many flood admissions ran on the node's runtime thread between
    /// its arrival and its admission.
    fn trusted_admission_waits_behind(untrusted: Lane) -> u64 {
        use crate::bench_support::{funded_state, roomy_config, signed_transfers};
        use crate::{Pool, TxInput, TxOrigin};
        let flood = signed_transfers(200, 0xf100d, 2);
        let honest = signed_transfers(1, 0x40e57, 2);
        let pool = Pool::new(roomy_config(), funded_state(&[&honest]));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let on_trusted = Arc::new(AtomicU64::new(0));
            let mut attackers = Vec::new();
            for (a, part) in flood.chunks(50).enumerate() {
                let (pool, part, on_trusted) = (pool.clone(), part.to_vec(), on_trusted.clone());
                let origin = TxOrigin::Peer(alloy_primitives::B512::repeat_byte(a as u8 + 1));
                attackers.push(tokio::spawn(async move {
                    for tx in part {
                        let (pool, on_trusted) = (pool.clone(), on_trusted.clone());
                        let unit = async move {
                            let r = pool.add_transaction(TxInput::Raw(tx.raw), origin).await;
                            if current() == Lane::Trusted {
                                on_trusted.fetch_add(1, Ordering::Relaxed);
                            }
                            r.is_err()
                        };
                        assert_eq!(run(untrusted, unit).await, Some(true), "unfunded");
                        tokio::task::yield_now().await;
                    }
                }));
            }
            tokio::task::yield_now().await;
            let before = on_trusted.load(Ordering::Relaxed);
            let tx = honest[0].raw.clone();
            let p = pool.clone();
            let admitted = tokio::spawn(run(Lane::Trusted, async move {
                p.add_transaction(TxInput::Raw(tx), TxOrigin::Local).await
            }));
            let admitted = admitted.await.unwrap().unwrap();
            let waited = on_trusted.load(Ordering::Relaxed) - before;
            assert!(admitted.is_ok(), "{admitted:?}");
            for a in attackers {
                a.await.unwrap();
            }
            waited
        })
    }

    #[test]
    fn an_untrusted_flood_does_not_delay_a_trusted_admission() {
        assert_eq!(trusted_admission_waits_behind(Lane::Untrusted), 0);
        assert!(trusted_admission_waits_behind(Lane::Trusted) >= 4);
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
            let started = crate::budget::thread_cpu_ns();
            let mut x = [1u8; 32];
            while crate::budget::thread_cpu_ns() - started < 20_000_000 {
                x = *alloy_primitives::keccak256(std::hint::black_box(x));
            }
            (current(), x[0])
        }));
        let after = rpc_lane_bucket().lock().tokens;
        assert_eq!(out.map(|o| o.0), Some(Lane::Untrusted));
        // Charged at least the 20 ms (refills over the test's own time aside).
        assert!(before - after > 10_000.0, "{before} -> {after}");
    }

    /// Thread CPU time spent spinning until `ms` of it have passed.
    fn spin_cpu_ms(ms: u64) {
        let start = super::super::budget::thread_cpu_ns();
        while super::super::budget::thread_cpu_ns().saturating_sub(start) < ms * 1_000_000 {
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
