//! The operator-facing metrics that only events write (a throttle, a fault, a sync, a
//! reorg), exported at zero from the start, and the pool's content by subpool
//! (`moat_pool_txs`, `moat_pool_bytes`, read every few seconds): a dashboard panel (etc/grafana) reads 0
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
    "moat_store_flushes_total",
    "moat_store_flush_failures_total",
    "moat_store_slowed_commits_total",
    "moat_store_commit_slowdown_milliseconds_total",
    "moat_block_prewarm_reads_total",
];

/// Gauges written only on events.
const EVENT_GAUGES: &[&str] = &[
    "moat_p2p_peers",
    "moat_engine_new_payload_gas_per_second",
    "moat_store_damaged",
    "moat_store_write_failed",
    "moat_store_pending_commits",
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

/// How often the pool's content is read into its gauges.
const POOL_GAUGES_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Keeps `moat_pool_txs{subpool}` and `moat_pool_bytes{subpool}` (pending, basefee,
/// queued, blob) at the pool's content, read every [`POOL_GAUGES_EVERY`] (one short
/// lock of the pool's state each time).
pub(crate) fn spawn_pool_gauges(pool: moat_mempool::Pool) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(POOL_GAUGES_EVERY);
        loop {
            tick.tick().await;
            let status = pool.status();
            for (name, usage) in [
                ("pending", status.pending),
                ("basefee", status.basefee),
                ("queued", status.queued),
                ("blob", status.blob),
            ] {
                metrics::gauge!("moat_pool_txs", "subpool" => name).set(usage.txs as f64);
                metrics::gauge!("moat_pool_bytes", "subpool" => name).set(usage.bytes as f64);
            }
        }
    });
}
