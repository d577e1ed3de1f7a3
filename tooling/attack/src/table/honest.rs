//! What the honest traffic got: each gossiped or RPC-sent transfer's completion time and
//! latency, windows of them per phase, percentiles, and (on request) the slowest ones.

use alloy_primitives::B256;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};
/// What the honest traffic got: completions with their latency.
#[derive(Default)]
pub(crate) struct Honest {
    /// Gossiped tx hash → when it was sent.
    pub(crate) sent: Mutex<HashMap<B256, Instant>>,
    pub(crate) peer_done: Mutex<Vec<(Instant, Duration)>>,
    pub(crate) rpc_done: Mutex<Vec<(Instant, Duration)>>,
}

/// With `ATTACK_TABLE_SLOWEST` set: the slowest honest gossip and RPC calls of a phase,
/// each with when it was sent, as seconds into the phase and as the `CLOCK_MONOTONIC`
/// time (`Instant` on Linux, the clock of `perf record -k mono`), so that a profile of
/// the node can be read at the moment a slow one was in flight.
pub(crate) fn slowest(honest: &Honest, from: Instant, to: Instant) {
    if std::env::var_os("ATTACK_TABLE_SLOWEST").is_none() {
        return;
    }
    for (what, done) in [("peer", &honest.peer_done), ("rpc", &honest.rpc_done)] {
        let mut slow: Vec<(Instant, Duration)> = done
            .lock()
            .iter()
            .filter(|(at, _)| *at >= from && *at < to)
            .copied()
            .collect();
        slow.sort_by_key(|(_, l)| std::cmp::Reverse(*l));
        for (at, l) in slow.iter().take(6) {
            let sent = *at - *l;
            eprintln!(
                "  slow {what}: {:.2} ms, sent at +{:.3} s ({sent:?})",
                l.as_secs_f64() * 1e3,
                sent.saturating_duration_since(from).as_secs_f64(),
            );
        }
    }
}

/// Completions and latencies within [from, to).
pub(crate) fn window(
    done: &Mutex<Vec<(Instant, Duration)>>,
    from: Instant,
    to: Instant,
) -> Vec<Duration> {
    done.lock()
        .iter()
        .filter(|(at, _)| *at >= from && *at < to)
        .map(|(_, l)| *l)
        .collect()
}

pub(crate) fn percentile(lat: &mut [Duration], p: f64) -> Duration {
    if lat.is_empty() {
        return Duration::ZERO;
    }
    lat.sort_unstable();
    lat[((lat.len() - 1) as f64 * p).round() as usize]
}
