//! moat-sched: how moat's work meets the OS scheduler, so that honest work never waits
//! behind attack work.
//!
//! Budgets (`moat_mempool::budget`) bound an origin's share of the CPU over a second, not
//! the queueing delay an honest transaction meets when attack work holds the cores. So
//! each unit of admission work (a peer message's chunk, an announcement, an RPC request)
//! is put in a [`Lane`] when it is scheduled. Which lane an origin's standing earns is the
//! pool's rule (`moat_mempool::Standing::lane`, one exhaustive table); this crate only
//! runs the lanes:
//! - the trusted lane runs where it always ran, on the node's runtime;
//! - the untrusted lane runs on its own runtime, whose threads (workers and blocking pool
//!   alike, so the ECDSA and KZG done for it too) run at the lowest priority the kernel
//!   has (`SCHED_IDLE`; nice 19 where that is refused): the kernel preempts them as soon
//!   as trusted work is runnable, and trusted work never sits in a queue behind untrusted
//!   work.
//!
//! A lane is chosen per unit, so an origin moves between lanes as its record and budget
//! change; one origin's units still run one after the other, in order. The lanes can be
//! switched off (`BudgetConfig::lanes`, `--txpool.nolanes`): then everything runs in the
//! trusted lane. Prometheus: `moat_pool_lane_units_total` and
//! `moat_pool_lane_cpu_us_total`, by lane.
//!
//! Where to start reading:
//! - [`lane`]: [`Lane`], [`run`] (one unit in a lane), [`spawn_blocking_idle`], [`units`],
//!   and the untrusted lane's runtime, made on the first unit that needs it;
//! - [`priority`]: `SCHED_IDLE` and nice ([`set_idle`], [`nice_this_thread`]), and
//!   [`Raised`], normal priority for a critical section on a lowered thread;
//! - [`ceiling`]: [`CeilingMutex`] and [`CeilingRwLock`], locks whose sections are raised
//!   (the pool's, the budgets' ledger, p2p's peer table and fetcher), and their wait
//!   metrics;
//! - [`give_way`](mod@give_way): [`give_way`](fn@give_way) between bounded steps, and
//!   [`preemptible`] for work in one piece, which a per-thread timer's signal interrupts;
//! - [`rpc_lane`]: [`run_rpc_untrusted`], the untrusted lane's RPC requests within one
//!   CPU budget ([`RpcLaneBudget`]);
//! - [`clock`]: [`thread_cpu_ns`], the per-thread CPU clock budgets charge and lanes
//!   count.
//!
//! Configuration: the node builds a [`SchedConfig`] from its flags and environment and
//! [`install`]s it once at start-up, before any work is scheduled; this crate reads no
//! environment. Tests and tools that install nothing get [`SchedConfig::default`].

pub mod ceiling;
pub mod clock;
pub mod give_way;
pub mod lane;
pub mod priority;
pub mod rpc_lane;

pub use ceiling::{
    Ceiling, CeilingGuard, CeilingMutex, CeilingReadGuard, CeilingRwLock, CeilingWriteGuard,
};
pub use clock::thread_cpu_ns;
pub use give_way::{give_way, preemptible};
pub use lane::{Lane, current, run, spawn_blocking_idle, units};
pub use priority::{Raised, nice_this_thread, set_idle};
pub use rpc_lane::{RpcLaneBudget, run_rpc_untrusted};

use std::sync::OnceLock;
use std::time::Duration;

/// The scheduling settings, installed once at start-up ([`install`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SchedConfig {
    /// How often work in one piece on the untrusted lane gives way ([`preemptible`]):
    /// 0.5 ms by default (the node takes 50 µs to 100 ms from `MOAT_LANE_GIVE_WAY_US`,
    /// for measuring).
    pub give_way: Duration,
    /// The CPU budget of the RPC requests in the untrusted lane, all connections together
    /// ([`run_rpc_untrusted`]; `--txpool.rpclanecpu`).
    pub rpc_lane_budget: RpcLaneBudget,
}

impl SchedConfig {
    /// The default give-way time.
    pub const GIVE_WAY: Duration = Duration::from_micros(500);

    /// The defaults for a machine of `cores` cores.
    pub fn for_cores(cores: usize) -> Self {
        Self {
            give_way: Self::GIVE_WAY,
            rpc_lane_budget: RpcLaneBudget::for_cores(cores),
        }
    }

    /// The defaults for this machine.
    pub fn for_this_machine() -> Self {
        Self::for_cores(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
}

impl Default for SchedConfig {
    fn default() -> Self {
        Self::for_this_machine()
    }
}

static CONFIG: OnceLock<SchedConfig> = OnceLock::new();

/// Installs the settings. Once only, before anything is scheduled: the settings are
/// read when first needed ([`config`]) and stay for the process's life. `Err` with the
/// settings in force if they were installed or read before.
pub fn install(cfg: SchedConfig) -> Result<(), SchedConfig> {
    let mut fresh = false;
    let now = CONFIG.get_or_init(|| {
        fresh = true;
        cfg
    });
    if fresh { Ok(()) } else { Err(*now) }
}

/// The settings in force: the installed ones, else (nothing installed: tests, tools) the
/// defaults for this machine, which then stay.
pub fn config() -> &'static SchedConfig {
    CONFIG.get_or_init(SchedConfig::default)
}
