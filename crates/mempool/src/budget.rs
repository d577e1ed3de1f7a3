//! Per-origin CPU accounting and budgets for admission.
//!
//! Admission work is measured with the thread CPU clock (`CLOCK_THREAD_CPUTIME_ID`), read
//! around each unit of work rather than each transaction (a read costs about half a
//! microsecond, a duplicate's whole admission about ten):
//! - a chunk of one peer message's transactions admitted in order on one task
//!   ([`CpuMeter`], paused across every await so a task that moves threads is not
//!   mismeasured);
//! - the ECDSA recoveries done for that chunk on the blocking pool (each worker reads its
//!   own clock);
//! - a transaction's share of a KZG batch (the batch's CPU split by blob count).
//!
//! What was spent is charged to its origin in [`Budgets`]: a token bucket of CPU-µs per
//! second for each peer, one shared by all peers, and one for local RPC (one origin: the
//! RPC layer does not give admission a per-connection identity). Budgets answer, the
//! network obeys:
//! - a peer whose bucket is in debt waits until it is repaid ([`Verdict::Wait`]); its
//!   reader then stops reading, so no unpaid work is done for it;
//! - while all peers together are over their shared budget, peers that have been
//!   spending (bucket below half full) wait too, and so do peers not yet proven (fewer
//!   than [`PROVEN_ADMITTED`] admitted txs): a crowd of fresh identities, each with a full
//!   bucket of its own, cannot take the shared budget's CPU. Proven, quiet peers go on;
//! - a peer whose CPU buys almost no admitted transactions over a window is dropped
//!   ([`Verdict::Disconnect`]);
//! - a peer that leaves hands its bucket and window to its IPv4 /24 (IPv6 /64): a new
//!   identity from there starts with that history, not a clean slate;
//! - local RPC has its own bucket, which no peer can drain.
//!
//! What a peer's account says also decides where its work runs: [`Budgets::lane`] reads
//! its record and budget state through the table of [`crate::standing`].

use crate::standing::{PROVEN_ADMITTED, Standing};
use alloy_primitives::B512;
use moat_common::net::host_key;
use moat_sched::{CeilingMutex, Lane, thread_cpu_ns};
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// CPU spent on one unit of admission work for one origin, and what it bought.
///
/// Runs from [`CpuMeter::start`]; [`crate::Pool`] pauses it across awaits and
/// adds the CPU other threads spent for it (ECDSA workers, KZG batches).
#[derive(Debug)]
pub struct CpuMeter {
    /// Off: reads no clock (work whose caller measures it otherwise, or not at all).
    on: bool,
    since: Option<u64>,
    spent_ns: u64,
    /// KZG CPU of the transactions that were admitted: the price of honest blob txs.
    useful_ns: u64,
    /// KZG share of the transaction being admitted, until its outcome is known.
    pending_kzg_ns: u64,
    admitted: u64,
    rejected: u64,
}

impl CpuMeter {
    /// A meter counting this thread's CPU from now.
    pub fn start() -> Self {
        Self {
            on: true,
            since: Some(thread_cpu_ns()),
            spent_ns: 0,
            useful_ns: 0,
            pending_kzg_ns: 0,
            admitted: 0,
            rejected: 0,
        }
    }

    /// A meter that reads no clock and measures nothing.
    pub fn off() -> Self {
        Self {
            on: false,
            since: None,
            spent_ns: 0,
            useful_ns: 0,
            pending_kzg_ns: 0,
            admitted: 0,
            rejected: 0,
        }
    }

    /// Stops counting this thread's clock (before an await).
    pub(crate) fn pause(&mut self) {
        if let Some(since) = self.since.take() {
            self.spent_ns += thread_cpu_ns().saturating_sub(since);
        }
    }

    /// Counts this thread's clock again (after an await: maybe another thread).
    pub(crate) fn resume(&mut self) {
        if self.on && self.since.is_none() {
            self.since = Some(thread_cpu_ns());
        }
    }

    /// CPU another thread spent for this work.
    pub(crate) fn add_elsewhere(&mut self, ns: u64) {
        self.spent_ns += ns;
    }

    pub(crate) fn add_kzg_share(&mut self, ns: u64) {
        self.spent_ns += ns;
        self.pending_kzg_ns += ns;
    }

    pub(crate) fn outcome(&mut self, admitted: bool) {
        if admitted {
            self.admitted += 1;
            self.useful_ns += self.pending_kzg_ns;
        } else {
            self.rejected += 1;
        }
        self.pending_kzg_ns = 0;
    }

    /// Stops the meter: what it measured.
    pub fn finish(mut self) -> Spent {
        self.pause();
        Spent {
            cpu_us: self.spent_ns / 1_000,
            useful_us: self.useful_ns / 1_000,
            admitted: self.admitted,
            rejected: self.rejected,
        }
    }
}

/// What one unit of admission work cost and bought.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spent {
    /// CPU the work cost, µs: this thread's, and other threads' for it (ECDSA, KZG).
    pub cpu_us: u64,
    /// CPU of admitted blob txs' KZG, which the useless-peer rule does not count as waste.
    pub useful_us: u64,
    /// Transactions the work admitted.
    pub admitted: u64,
    /// Transactions the work rejected.
    pub rejected: u64,
}

/// Budgets of admission CPU. Rates are CPU-µs per second of wall time; bursts are how
/// far a bucket fills.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetConfig {
    /// Each peer's rate.
    pub peer_rate_us: u64,
    /// How far each peer's bucket fills, CPU-µs.
    pub peer_burst_us: u64,
    /// All peers together.
    pub peers_rate_us: u64,
    /// Local RPC (all connections together).
    pub rpc_rate_us: u64,
    /// How far local RPC's bucket fills, CPU-µs.
    pub rpc_burst_us: u64,
    /// The useless-peer rule looks at windows this long.
    pub window: Duration,
    /// A peer is judged once it has spent this much in a window...
    pub useless_min_cpu_us: u64,
    /// ...and dropped if, KZG of admitted blob txs aside, it spent more than this per
    /// admitted tx.
    pub useless_cpu_per_admitted_us: u64,
    /// How long a subnet's history is kept after its last peer left.
    pub history_ttl: Duration,
    /// Untrusted origins' admission work runs in its own low-priority lane
    /// (`moat_sched`'s lanes, by [`crate::Standing`]); off, all of it runs in the trusted lane.
    pub lanes: bool,
}

impl BudgetConfig {
    /// Defaults for a machine with `cores` cores: each peer may take an eighth of the
    /// machine, all peers together half, local RPC a quarter; bursts are half a
    /// second's worth. A peer is judged after 100 ms of CPU in 10 s, and dropped if it
    /// paid more than 2 ms per admitted transaction (a fresh sender costs ~60 µs).
    pub fn for_cores(cores: usize) -> Self {
        let machine = cores.max(1) as u64 * 1_000_000;
        Self {
            peer_rate_us: machine / 8,
            peer_burst_us: machine / 16,
            peers_rate_us: machine / 2,
            rpc_rate_us: machine / 4,
            rpc_burst_us: machine / 8,
            window: Duration::from_secs(10),
            useless_min_cpu_us: 100_000,
            useless_cpu_per_admitted_us: 2_000,
            history_ttl: Duration::from_secs(600),
            lanes: true,
        }
    }

    /// [`Self::for_cores`] with this machine's cores.
    pub fn for_this_machine() -> Self {
        Self::for_cores(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self::for_this_machine()
    }
}

/// A token bucket of CPU-µs; tokens go negative (debt) when work overruns it.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    rate: f64,
    burst: f64,
    at: Instant,
}

impl Bucket {
    fn full(rate: u64, burst: u64, now: Instant) -> Self {
        Self {
            tokens: burst as f64,
            rate: rate.max(1) as f64,
            burst: burst as f64,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        self.at = now;
    }

    fn spend(&mut self, us: u64, now: Instant) {
        self.refill(now);
        self.tokens -= us as f64;
    }

    /// How long until the debt is repaid; `None` when not in debt.
    fn debt_wait(&self) -> Option<Duration> {
        // Half a µs of debt is rounding, not debt.
        (self.tokens < -0.5)
            .then(|| Duration::from_nanos((-self.tokens * 1e9 / self.rate).ceil() as u64))
    }
}

/// Spending and outcomes over the current window.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    spent_us: u64,
    useful_us: u64,
    admitted: u64,
}

impl Window {
    fn new(now: Instant) -> Self {
        Self {
            start: now,
            spent_us: 0,
            useful_us: 0,
            admitted: 0,
        }
    }
}

/// What a peer's budget says right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Admit its next work.
    Go,
    /// Read nothing more from it for this long.
    Wait(Duration),
    /// Drop it.
    Disconnect(DropReason),
}

/// Why a budget drops a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Its CPU bought almost no admitted transactions over a window.
    Useless,
}

impl DropReason {
    /// Short label for logs and metrics (`useless`).
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Useless => "useless",
        }
    }
}

/// Where a peer's budget stands, for `admin_peers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetState {
    /// Within its budget.
    Ok,
    /// In debt, or spending while all peers are over theirs: its reads wait.
    Throttled,
    /// Judged useless: being dropped.
    Useless,
}

impl BudgetState {
    /// The label `admin_peers` shows: `ok`, `throttled` or `useless`.
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetState::Ok => "ok",
            BudgetState::Throttled => "throttled",
            BudgetState::Useless => "useless",
        }
    }
}

/// One peer's account as `admin_peers` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerBudget {
    /// Admission CPU charged to it since it connected (history carried over included).
    pub cpu_us: u64,
    /// Transactions of its admitted since it connected.
    pub admitted: u64,
    /// Transactions of its rejected since it connected.
    pub rejected: u64,
    /// Tokens left (negative: debt), CPU-µs.
    pub tokens_us: i64,
    /// Its bucket's refill rate, CPU-µs per second of wall time.
    pub rate_us: u64,
    /// Times its reads were made to wait.
    pub throttled: u64,
    /// Where its budget stands now.
    pub state: BudgetState,
}

#[derive(Debug)]
struct Account {
    subnet: Subnet,
    bucket: Bucket,
    window: Window,
    cpu_us: u64,
    admitted: u64,
    rejected: u64,
    throttled: u64,
    useless: bool,
}

/// A subnet's memory of the peers that left it.
#[derive(Debug, Clone, Copy)]
struct History {
    bucket: Bucket,
    window: Window,
    left: Instant,
    useless: bool,
}

/// An IPv4 /24 or an IPv6 /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Subnet {
    /// The first three octets of an IPv4 address (its /24).
    V4([u8; 3]),
    /// The first eight bytes of an IPv6 address (its /64).
    V6([u8; 8]),
}

impl Subnet {
    /// The subnet `ip` belongs to (an IPv4-mapped IPv6 address counts as its IPv4 address).
    pub fn of(ip: IpAddr) -> Self {
        match host_key(ip) {
            IpAddr::V4(v4) => {
                let o = v4.octets();
                Subnet::V4([o[0], o[1], o[2]])
            }
            IpAddr::V6(v6) => {
                let mut p = [0u8; 8];
                p.copy_from_slice(&v6.octets()[..8]);
                Subnet::V6(p)
            }
        }
    }
}

/// Subnets remembered at most (the oldest are forgotten first).
const MAX_HISTORY: usize = 4096;
/// A wait is never longer than this at once: the verdict is asked again after it.
const MAX_WAIT: Duration = Duration::from_millis(500);

#[derive(Debug)]
struct Ledger {
    peers: HashMap<B512, Account>,
    history: HashMap<Subnet, History>,
    all_peers: Bucket,
    rpc: Bucket,
}

/// The admission budgets of every origin. Shared by the pool (which charges) and the
/// network (which asks before reading a peer's next message).
#[derive(Debug)]
pub struct Budgets {
    cfg: BudgetConfig,
    ledger: CeilingMutex<Ledger>,
}

impl Budgets {
    /// Budgets at `cfg`'s rates, every bucket full.
    pub fn new(cfg: BudgetConfig) -> Self {
        let now = Instant::now();
        let ledger = Ledger {
            peers: HashMap::new(),
            history: HashMap::new(),
            all_peers: Bucket::full(cfg.peers_rate_us, cfg.peers_rate_us / 2, now),
            rpc: Bucket::full(cfg.rpc_rate_us, cfg.rpc_burst_us, now),
        };
        Self {
            cfg,
            ledger: CeilingMutex::named("budget_ledger", ledger),
        }
    }

    /// The rates and rules these budgets apply.
    pub fn config(&self) -> &BudgetConfig {
        &self.cfg
    }

    /// Opens a peer's account: a fresh bucket, or its subnet's history if a peer from
    /// there left recently.
    pub fn attach_peer(&self, id: B512, ip: IpAddr, now: Instant) {
        let subnet = Subnet::of(ip);
        let cfg = &self.cfg;
        let mut l = self.ledger.lock();
        let fresh = Bucket::full(cfg.peer_rate_us, cfg.peer_burst_us, now);
        let (bucket, window, useless) = match l.history.get(&subnet) {
            Some(h) if now.saturating_duration_since(h.left) < cfg.history_ttl => {
                let mut b = h.bucket;
                b.refill(now);
                // A subnet whose peer was dropped as useless gives its next one no credit.
                if h.useless {
                    b.tokens = b.tokens.min(0.0);
                }
                let w = if now.saturating_duration_since(h.window.start) < cfg.window {
                    h.window
                } else {
                    Window::new(now)
                };
                (b, w, false)
            }
            _ => (fresh, Window::new(now), false),
        };
        l.peers.insert(
            id,
            Account {
                subnet,
                bucket,
                window,
                cpu_us: window.spent_us,
                admitted: window.admitted,
                rejected: 0,
                throttled: 0,
                useless,
            },
        );
    }

    /// Closes a peer's account; its subnet remembers it.
    pub fn detach_peer(&self, id: &B512, now: Instant) {
        let mut l = self.ledger.lock();
        let Some(mut a) = l.peers.remove(id) else {
            return;
        };
        a.bucket.refill(now);
        let mine = History {
            bucket: a.bucket,
            window: a.window,
            left: now,
            useless: a.useless,
        };
        let merged = match l.history.get(&a.subnet) {
            // Of two peers of one subnet, the one deeper in debt sets its history.
            Some(h) if now.saturating_duration_since(h.left) < self.cfg.history_ttl => {
                let mut b = h.bucket;
                b.refill(now);
                History {
                    bucket: if b.tokens < mine.bucket.tokens {
                        b
                    } else {
                        mine.bucket
                    },
                    window: if h.window.spent_us > mine.window.spent_us {
                        h.window
                    } else {
                        mine.window
                    },
                    left: now,
                    useless: h.useless || mine.useless,
                }
            }
            _ => mine,
        };
        if l.history.len() >= MAX_HISTORY && !l.history.contains_key(&a.subnet) {
            let ttl = self.cfg.history_ttl;
            l.history
                .retain(|_, h| now.saturating_duration_since(h.left) < ttl);
            if l.history.len() >= MAX_HISTORY
                && let Some(oldest) = l
                    .history
                    .iter()
                    .min_by_key(|(_, h)| h.left)
                    .map(|(k, _)| *k)
            {
                l.history.remove(&oldest);
            }
        }
        l.history.insert(a.subnet, merged);
    }

    /// Whether to refuse a new connection from `ip` before any handshake: a peer of its
    /// subnet was dropped as useless less than a window ago.
    pub fn refuses(&self, ip: IpAddr, now: Instant) -> bool {
        let l = self.ledger.lock();
        l.history
            .get(&Subnet::of(ip))
            .is_some_and(|h| h.useless && now.saturating_duration_since(h.left) < self.cfg.window)
    }

    /// Charges a peer for work done for it, and judges it when its window has seen
    /// enough CPU.
    pub fn charge_peer(&self, id: &B512, spent: Spent, now: Instant) {
        metrics::counter!("moat_pool_admission_cpu_us_total", "origin" => "peer")
            .increment(spent.cpu_us);
        let cfg = &self.cfg;
        let mut l = self.ledger.lock();
        l.all_peers.spend(spent.cpu_us, now);
        let Some(a) = l.peers.get_mut(id) else {
            return;
        };
        a.bucket.spend(spent.cpu_us, now);
        a.cpu_us += spent.cpu_us;
        a.admitted += spent.admitted;
        a.rejected += spent.rejected;
        if now.saturating_duration_since(a.window.start) >= cfg.window {
            a.window = Window::new(now);
        }
        let w = &mut a.window;
        w.spent_us += spent.cpu_us;
        w.useful_us += spent.useful_us;
        w.admitted += spent.admitted;
        if !a.useless && is_useless(cfg, w) {
            a.useless = true;
            metrics::counter!("moat_pool_budget_disconnects_total", "reason" => DropReason::Useless.as_str())
                .increment(1);
        }
    }

    /// What a peer may do now. Counts a throttle each time it is told to wait.
    pub fn verdict(&self, id: &B512, now: Instant) -> Verdict {
        let mut l = self.ledger.lock();
        l.all_peers.refill(now);
        let all = l.all_peers;
        let Some(a) = l.peers.get_mut(id) else {
            return Verdict::Go;
        };
        if a.useless {
            return Verdict::Disconnect(DropReason::Useless);
        }
        a.bucket.refill(now);
        let (wait, reason) = match decide(&a.bucket, &all, proven(a)) {
            Some(w) => w,
            None => return Verdict::Go,
        };
        a.throttled += 1;
        metrics::counter!("moat_pool_budget_throttles_total", "origin" => "peer", "reason" => reason)
            .increment(1);
        Verdict::Wait(wait.min(MAX_WAIT))
    }

    /// The lane of a peer's next unit of admission work ([`crate::standing`]): by its
    /// record (its subnet's history included) and its budget's state. The trusted lane
    /// when lanes are off; an unknown peer is new.
    pub fn lane(&self, id: &B512, now: Instant) -> Lane {
        if !self.cfg.lanes {
            return Lane::Trusted;
        }
        self.standing(id, now).lane()
    }

    /// A peer's [`Standing`].
    pub fn standing(&self, id: &B512, now: Instant) -> Standing {
        let mut l = self.ledger.lock();
        l.all_peers.refill(now);
        let all = l.all_peers;
        let Some(a) = l.peers.get_mut(id) else {
            return Standing::PeerNew;
        };
        a.bucket.refill(now);
        let over = decide(&a.bucket, &all, proven(a)).is_some();
        Standing::of_peer(a.admitted, a.rejected, over, a.useless)
    }

    /// Charges local RPC for a submission.
    pub fn charge_rpc(&self, spent: Spent, now: Instant) {
        metrics::counter!("moat_pool_admission_cpu_us_total", "origin" => "rpc")
            .increment(spent.cpu_us);
        self.ledger.lock().rpc.spend(spent.cpu_us, now);
    }

    /// How long a local submission must wait before admission (its bucket's debt).
    pub fn rpc_wait(&self, now: Instant) -> Option<Duration> {
        let mut l = self.ledger.lock();
        l.rpc.refill(now);
        let wait = l.rpc.debt_wait()?;
        metrics::counter!("moat_pool_budget_throttles_total", "origin" => "rpc", "reason" => "own")
            .increment(1);
        Some(wait.min(MAX_WAIT))
    }

    /// Work done for the node itself (reorged-out and journaled txs): counted, not
    /// budgeted.
    pub fn charge_node(&self, spent: Spent) {
        metrics::counter!("moat_pool_admission_cpu_us_total", "origin" => "node")
            .increment(spent.cpu_us);
    }

    /// A peer's account, if it has one.
    pub fn peer(&self, id: &B512, now: Instant) -> Option<PeerBudget> {
        let mut l = self.ledger.lock();
        l.all_peers.refill(now);
        let all = l.all_peers;
        let a = l.peers.get_mut(id)?;
        a.bucket.refill(now);
        let state = if a.useless {
            BudgetState::Useless
        } else if decide(&a.bucket, &all, proven(a)).is_some() {
            BudgetState::Throttled
        } else {
            BudgetState::Ok
        };
        Some(PeerBudget {
            cpu_us: a.cpu_us,
            admitted: a.admitted,
            rejected: a.rejected,
            tokens_us: a.bucket.tokens as i64,
            rate_us: a.bucket.rate as u64,
            throttled: a.throttled,
            state,
        })
    }
}

/// The throttling rule: a peer in debt waits until it is repaid; while all peers are in
/// debt together, a peer that has been spending (bucket under half full) or is not yet
/// proven waits for the shared bucket, and a proven, quiet one goes on.
fn decide(own: &Bucket, all: &Bucket, proven: bool) -> Option<(Duration, &'static str)> {
    if let Some(w) = own.debt_wait() {
        return Some((w, "own"));
    }
    match all.debt_wait() {
        Some(w) if own.tokens < own.burst / 2.0 || !proven => Some((w, "all_peers")),
        _ => None,
    }
}

/// Whether a peer has had enough transactions admitted to go on while the peers' shared
/// budget is in debt (the lanes' rule of a proven peer).
fn proven(a: &Account) -> bool {
    a.admitted >= PROVEN_ADMITTED
}

/// The useless-peer rule: enough CPU in the window, and, KZG of admitted blob txs
/// aside, more than the allowed CPU per admitted transaction.
fn is_useless(cfg: &BudgetConfig, w: &Window) -> bool {
    if w.spent_us < cfg.useless_min_cpu_us {
        return false;
    }
    let wasted = w.spent_us.saturating_sub(w.useful_us);
    wasted > w.admitted.saturating_mul(cfg.useless_cpu_per_admitted_us)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> BudgetConfig {
        BudgetConfig {
            peer_rate_us: 100_000,
            peer_burst_us: 50_000,
            peers_rate_us: 1_000_000,
            rpc_rate_us: 200_000,
            rpc_burst_us: 100_000,
            window: Duration::from_secs(10),
            useless_min_cpu_us: 100_000,
            useless_cpu_per_admitted_us: 2_000,
            history_ttl: Duration::from_secs(600),
            lanes: true,
        }
    }

    fn spent(cpu_us: u64, admitted: u64, rejected: u64) -> Spent {
        Spent {
            cpu_us,
            useful_us: 0,
            admitted,
            rejected,
        }
    }

    const A: B512 = B512::repeat_byte(1);
    const B: B512 = B512::repeat_byte(2);

    #[test]
    fn a_bucket_refills_at_its_rate_up_to_its_burst() {
        let t = Instant::now();
        let mut b = Bucket::full(100_000, 50_000, t);
        b.spend(80_000, t);
        assert_eq!(b.tokens, -30_000.0);
        assert_eq!(b.debt_wait(), Some(Duration::from_millis(300)));
        b.refill(t + Duration::from_millis(300));
        assert!(b.tokens.abs() < 1e-6, "{}", b.tokens);
        assert_eq!(b.debt_wait(), None);
        b.refill(t + Duration::from_secs(10));
        assert_eq!(b.tokens, 50_000.0, "capped at the burst");
    }

    #[test]
    fn a_peer_in_debt_waits_until_repaid_and_another_goes_on() {
        let t = Instant::now();
        let budgets = Budgets::new(cfg());
        budgets.attach_peer(A, "10.0.0.1".parse().unwrap(), t);
        budgets.attach_peer(B, "10.0.1.1".parse().unwrap(), t);
        assert_eq!(budgets.verdict(&A, t), Verdict::Go);
        budgets.charge_peer(&A, spent(70_000, 100, 0), t);
        assert_eq!(
            budgets.verdict(&A, t),
            Verdict::Wait(Duration::from_millis(200))
        );
        assert_eq!(budgets.verdict(&B, t), Verdict::Go);
        let report = budgets.peer(&A, t).unwrap();
        assert_eq!(report.cpu_us, 70_000);
        assert_eq!(report.admitted, 100);
        assert_eq!(report.tokens_us, -20_000);
        assert_eq!(report.throttled, 1);
        assert_eq!(report.state, BudgetState::Throttled);
        let later = t + Duration::from_millis(200);
        assert_eq!(budgets.verdict(&A, later), Verdict::Go);
        assert_eq!(budgets.peer(&A, later).unwrap().state, BudgetState::Ok);
    }

    #[test]
    fn when_all_peers_are_over_budget_spenders_and_unproven_peers_wait_and_quiet_proven_peers_go_on()
     {
        let t = Instant::now();
        let budgets = Budgets::new(BudgetConfig {
            peers_rate_us: 100_000,
            peer_rate_us: 100_000,
            peer_burst_us: 100_000,
            ..cfg()
        });
        const C: B512 = B512::repeat_byte(3);
        budgets.attach_peer(A, "10.0.0.1".parse().unwrap(), t);
        budgets.attach_peer(B, "10.0.1.1".parse().unwrap(), t);
        budgets.attach_peer(C, "10.0.2.1".parse().unwrap(), t);
        // B has relayed real traffic: proven, and it has spent next to nothing.
        budgets.charge_peer(&B, spent(10, PROVEN_ADMITTED, 0), t);
        assert_eq!(budgets.verdict(&C, t), Verdict::Go);
        // A spends 60 % of its burst, which puts all peers in debt (their burst: 50 ms).
        budgets.charge_peer(&A, spent(60_000, 100, 0), t);
        assert!(matches!(budgets.verdict(&A, t), Verdict::Wait(_)));
        assert_eq!(budgets.verdict(&B, t), Verdict::Go);
        // C's bucket is full, but it has had nothing admitted: a fresh identity of a
        // crowd waits for the shared budget like a spender.
        assert!(matches!(budgets.verdict(&C, t), Verdict::Wait(_)));
        assert_eq!(budgets.standing(&C, t), Standing::PeerOverBudget);
        // Once the shared budget is repaid, it goes on.
        let later = t + Duration::from_secs(1);
        assert_eq!(budgets.verdict(&C, later), Verdict::Go);
    }

    #[test]
    fn a_peer_whose_cpu_buys_nothing_is_dropped_and_an_honest_one_is_not() {
        let t = Instant::now();
        let budgets = Budgets::new(cfg());
        budgets.attach_peer(A, "10.0.0.1".parse().unwrap(), t);
        budgets.attach_peer(B, "10.0.1.1".parse().unwrap(), t);
        // Below the judging threshold nothing happens, whatever the ratio.
        budgets.charge_peer(&A, spent(90_000, 0, 5_000), t);
        assert_eq!(budgets.verdict(&A, t + Duration::from_secs(1)), Verdict::Go);
        budgets.charge_peer(&A, spent(20_000, 1, 500), t + Duration::from_secs(1));
        assert_eq!(
            budgets.verdict(&A, t + Duration::from_secs(5)),
            Verdict::Disconnect(DropReason::Useless)
        );
        // 200 ms for 2,000 admitted txs: 100 µs each.
        budgets.charge_peer(&B, spent(200_000, 2_000, 10), t);
        assert_eq!(budgets.verdict(&B, t + Duration::from_secs(5)), Verdict::Go);
        // Blob txs: KZG of admitted ones is paid for, not wasted.
        let blob = Spent {
            cpu_us: 400_000,
            useful_us: 390_000,
            admitted: 3,
            rejected: 0,
        };
        budgets.charge_peer(&B, blob, t + Duration::from_secs(6));
        assert_eq!(
            budgets.verdict(&B, t + Duration::from_secs(10)),
            Verdict::Go
        );
        assert_eq!(
            budgets.peer(&A, t).map(|p| p.state),
            Some(BudgetState::Useless)
        );
    }

    #[test]
    fn the_window_forgets_old_waste() {
        let t = Instant::now();
        let budgets = Budgets::new(cfg());
        budgets.attach_peer(A, "10.0.0.1".parse().unwrap(), t);
        budgets.charge_peer(&A, spent(90_000, 0, 100), t);
        // Eleven seconds later the window has turned: 20 ms more is not enough to judge.
        budgets.charge_peer(&A, spent(20_000, 0, 10), t + Duration::from_secs(11));
        assert_eq!(
            budgets.verdict(&A, t + Duration::from_secs(12)),
            Verdict::Go
        );
    }

    #[test]
    fn a_new_identity_from_the_same_subnet_inherits_its_history() {
        let t = Instant::now();
        let budgets = Budgets::new(cfg());
        budgets.attach_peer(A, "10.0.0.1".parse().unwrap(), t);
        budgets.charge_peer(&A, spent(250_000, 0, 10_000), t);
        assert_eq!(
            budgets.verdict(&A, t),
            Verdict::Disconnect(DropReason::Useless)
        );
        budgets.detach_peer(&A, t);
        // Same /24, new key, a second later: still 100 ms in debt (200 ms less 1 s × 100
        // ms/s), and judged by the same window.
        let later = t + Duration::from_secs(1);
        budgets.attach_peer(B, "10.0.0.77".parse().unwrap(), later);
        let b = budgets.peer(&B, later).unwrap();
        assert_eq!(b.tokens_us, -100_000);
        assert_eq!(b.cpu_us, 250_000);
        assert_eq!(
            budgets.verdict(&B, later),
            Verdict::Wait(Duration::from_millis(500))
        );
        budgets.charge_peer(&B, spent(1_000, 0, 10), later);
        assert_eq!(
            budgets.verdict(&B, later),
            Verdict::Disconnect(DropReason::Useless)
        );
        // While the subnet's useless peer is fresh, new connections from it are refused.
        assert!(budgets.refuses("10.0.0.200".parse().unwrap(), later));
        assert!(!budgets.refuses("10.0.0.200".parse().unwrap(), t + Duration::from_secs(11)));
        assert!(!budgets.refuses("10.0.1.1".parse().unwrap(), later));
        // Another /24 starts clean.
        let c = B512::repeat_byte(3);
        budgets.attach_peer(c, "10.0.1.1".parse().unwrap(), later);
        let c = budgets.peer(&c, later).unwrap();
        assert_eq!((c.tokens_us, c.cpu_us), (50_000, 0));
    }

    #[test]
    fn a_useless_subnet_gives_its_next_peer_no_credit_even_after_repaying() {
        let t = Instant::now();
        let budgets = Budgets::new(cfg());
        budgets.attach_peer(A, "10.0.0.1".parse().unwrap(), t);
        budgets.charge_peer(&A, spent(150_000, 0, 10_000), t);
        budgets.detach_peer(&A, t);
        // Twenty seconds later the debt is repaid and the window has turned, but the
        // subnet was dropped as useless: the bucket starts empty, not full.
        let later = t + Duration::from_secs(20);
        budgets.attach_peer(B, "10.0.0.2".parse().unwrap(), later);
        assert_eq!(budgets.peer(&B, later).unwrap().tokens_us, 0);
        // Past the history's lifetime, a clean slate.
        let much_later = t + Duration::from_secs(700);
        let c = B512::repeat_byte(3);
        budgets.attach_peer(c, "10.0.0.3".parse().unwrap(), much_later);
        assert_eq!(budgets.peer(&c, much_later).unwrap().tokens_us, 50_000);
    }

    #[test]
    fn local_rpc_has_its_own_budget_that_peers_cannot_drain() {
        let t = Instant::now();
        let budgets = Budgets::new(cfg());
        budgets.attach_peer(A, "10.0.0.1".parse().unwrap(), t);
        budgets.charge_peer(&A, spent(5_000_000, 10, 0), t);
        assert_eq!(budgets.rpc_wait(t), None);
        budgets.charge_rpc(spent(120_000, 1_000, 0), t);
        assert_eq!(budgets.rpc_wait(t), Some(Duration::from_millis(100)));
        assert_eq!(budgets.rpc_wait(t + Duration::from_millis(100)), None);
    }

    #[test]
    fn subnets_are_a_slash_24_or_a_slash_64() {
        let s = |ip: &str| Subnet::of(ip.parse().unwrap());
        assert_eq!(s("127.0.0.1"), s("127.0.0.200"));
        assert_ne!(s("127.0.0.1"), s("127.0.1.1"));
        assert_eq!(s("::ffff:127.0.0.9"), s("127.0.0.1"));
        assert_eq!(s("2001:db8::1"), s("2001:db8::ffff:1"));
        assert_ne!(s("2001:db8::1"), s("2001:db8:0:1::1"));
        assert_eq!(BudgetConfig::for_cores(2).peer_rate_us, 250_000);
        assert_eq!(BudgetConfig::for_cores(0).peers_rate_us, 500_000);
    }
}
