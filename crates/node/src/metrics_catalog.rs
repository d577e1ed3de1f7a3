//! The operator-facing metrics that only events write (a throttle, a fault, a sync, a
//! reorg), exported at zero from the start: a dashboard panel (etc/grafana) reads 0
//! rather than "no data" on a node where nothing of the kind happened yet. The pool's
//! counters register themselves (`moat_mempool::PoolMetrics`); histograms appear with
//! their first observation.

/// Counters written only on events.
const EVENT_COUNTERS: &[&str] = &[
    "moat_pool_budget_throttles_total",
    "moat_pool_budget_disconnects_total",
    "moat_pool_lane_cpu_us_total",
    "moat_pool_admission_cpu_us_total",
    "moat_pool_journal_syncs_total",
    "moat_pool_journal_records_total",
    "moat_p2p_peer_faults_total",
    "moat_p2p_cells_received_total",
    "moat_p2p_cells_served_total",
    "moat_engine_new_payload_gas_total",
    "moat_engine_invalid_payloads_total",
    "moat_engine_reorgs_total",
    "moat_sync_blocks_imported_total",
];

/// Gauges written only on events.
const EVENT_GAUGES: &[&str] = &[
    "moat_p2p_peers",
    "moat_engine_new_payload_gas_per_second",
    "moat_store_damaged",
    "moat_store_write_failed",
];

/// Registers the event-driven metrics at zero, and the highest block seen at `head`
/// (what the node has before any sync). Call once the recorder is installed.
pub(crate) fn register(head: u64) {
    for name in EVENT_COUNTERS {
        metrics::counter!(*name).increment(0);
    }
    for name in EVENT_GAUGES {
        metrics::gauge!(*name).increment(0.0);
    }
    metrics::gauge!("moat_sync_highest_block").set(head as f64);
}
