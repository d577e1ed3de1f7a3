//! geth's `--txpool.*`, `--blobpool.*` and `--miner.*` flags, and what they set in the
//! pool's and the block builder's configuration.

use alloy_primitives::{Address, Bytes};
use moat_blockchain::payload::MinerConfig;
use moat_common::config::ChainConfig;
use moat_mempool::{JournalOptions, PoolConfig};
use moat_sched::RpcLaneBudget;
use std::time::Duration;

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct PoolArgs {
    /// Least tip (wei) a remote transaction, or a blob transaction from anywhere, must
    /// pay to be pooled.
    #[arg(long = "txpool.pricelimit", default_value_t = 1)]
    pub price_limit: u128,
    /// Percent a replacement must raise every fee by.
    #[arg(long = "txpool.pricebump", default_value_t = 10)]
    pub price_bump: u128,
    /// Executable transactions each account is sure to keep.
    #[arg(long = "txpool.accountslots", default_value_t = 16)]
    pub account_slots: usize,
    /// Executable transactions the pool holds (its pending and base-fee subpools each).
    #[arg(long = "txpool.globalslots", default_value_t = 5120)]
    pub global_slots: usize,
    /// Transactions behind a nonce gap each account may have.
    #[arg(long = "txpool.accountqueue", default_value_t = 64)]
    pub account_queue: usize,
    /// Transactions behind nonce gaps the pool holds.
    #[arg(long = "txpool.globalqueue", default_value_t = 1024)]
    pub global_queue: usize,
    /// How long a queued transaction may wait (Go-style duration: 3h, 90m).
    #[arg(long = "txpool.lifetime", default_value = "3h", value_parser = crate::run::parse_duration)]
    pub lifetime: Duration,
    /// Comma-separated accounts whose transactions count as local from any origin.
    #[arg(long = "txpool.locals", value_delimiter = ',')]
    pub locals: Vec<Address>,
    /// Comma-separated accounts whose transactions are private: pooled and mined by this
    /// node, never announced or sent to a peer.
    #[arg(long = "txpool.private", value_delimiter = ',')]
    pub private: Vec<Address>,
    /// Give local transactions no exemption (least tip, allowance, eviction); they are
    /// still journaled.
    #[arg(long = "txpool.nolocals")]
    pub no_locals: bool,
    /// Executable transactions a local account may have (moat's: geth sets no bound).
    #[arg(long = "txpool.localslots", default_value_t = 1024)]
    pub local_slots: usize,
    /// Queued transactions a local account may have (moat's).
    #[arg(long = "txpool.localqueue", default_value_t = 256)]
    pub local_queue: usize,
    /// Percent of each subpool that local transactions may hold exempt from eviction;
    /// past it they are evicted by price as remote ones are (moat's: geth 1.17 evicts
    /// locals by price and resubmits them from its journal).
    #[arg(long = "txpool.localshare", default_value_t = 50,
          value_parser = clap::value_parser!(u8).range(0..=100))]
    pub local_share: u8,
    /// Transactions let go for room that the pool remembers (oldest forgotten first), so
    /// that a later nonce of their sender can bring them back as a package worth its
    /// room; 0 turns it off (moat's: geth forgets them).
    #[arg(long = "txpool.letgo", default_value_t = 16_384)]
    pub let_go: usize,
    /// Bytes of blob transactions (sidecars included) the pool holds.
    #[arg(long = "blobpool.datacap", default_value_t = 10 * 1024 * 1024 * 1024 / 4)]
    pub blob_datacap: usize,
    /// Directory of the blob pool's store, relative to the datadir: every pooled blob
    /// transaction with its sidecar, back after a restart without KZG run again.
    #[arg(long = "blobpool.datadir", default_value = "blobpool")]
    pub blob_datadir: std::path::PathBuf,
    /// How long a blob transaction whose nonce is ahead of its sender's next waits for
    /// the gap to fill, without KZG, before it is dropped (Go-style duration; geth's
    /// fixed one minute).
    #[arg(long = "blobpool.gappedlifetime", default_value = "1m", value_parser = crate::run::parse_duration)]
    pub blob_gapped_lifetime: Duration,
    /// The cells of each blob this node keeps of a sampled blob transaction (EIP-8070,
    /// eth/72's sparse blobpool): the consensus client's custody columns, as 16 bytes of
    /// hex, bit `i` (of byte `i / 8`, least significant first) for cell `i`. Fewer than
    /// 64 makes the node a sampler: most blob txs are pooled with these cells only.
    /// Default: every cell (every blob tx fetched whole, as go-ethereum does until its
    /// consensus client names a custody).
    #[arg(long = "blobpool.custody", value_parser = parse_cell_mask)]
    pub blob_custody: Option<moat_common::transaction::CellMask>,
    /// Percent of blob transactions a sampler fetches whole all the same (EIP-8070's
    /// provider probability; go-ethereum's default 15).
    #[arg(long = "blobpool.fetchprobability", default_value_t = 15,
          value_parser = clap::value_parser!(u8).range(0..=100))]
    pub blob_fetch_probability: u8,
    /// Percent a blob transaction's replacement must raise every fee by.
    #[arg(long = "blobpool.pricebump", default_value_t = 100)]
    pub blob_price_bump: u128,
    /// Gas limit that built blocks move toward.
    #[arg(long = "miner.gaslimit", default_value_t = 60_000_000)]
    pub miner_gas_limit: u64,
    /// Least effective tip (wei) a transaction must pay to go into a built block.
    /// [default: 1000000, or 1 with --dev]
    #[arg(long = "miner.gasprice")]
    pub miner_gas_price: Option<u128>,
    /// Extra data of built blocks (at most 32 bytes).
    #[arg(long = "miner.extradata", default_value = "moat")]
    pub miner_extra_data: String,
    /// Admission CPU each peer may use, in CPU-µs per second (moat's).
    /// [default: an eighth of the machine: cores × 125000]
    #[arg(long = "txpool.peercpu")]
    pub peer_cpu: Option<u64>,
    /// How much admission CPU (µs) a peer may use at once before it is slowed.
    /// [default: half a second of --txpool.peercpu]
    #[arg(long = "txpool.peercpuburst")]
    pub peer_cpu_burst: Option<u64>,
    /// Admission CPU all peers together may use, in CPU-µs per second; past it, peers
    /// that have been spending wait. [default: half the machine: cores × 500000]
    #[arg(long = "txpool.peerscpu")]
    pub peers_cpu: Option<u64>,
    /// Admission CPU of local RPC submissions, in CPU-µs per second (peers cannot use
    /// it). [default: a quarter of the machine: cores × 250000]
    #[arg(long = "txpool.rpccpu")]
    pub rpc_cpu: Option<u64>,
    /// CPU of the RPC requests that run in the low-priority lane (connections whose
    /// submissions are mostly refused), all together, in CPU-µs per second; bursts of a
    /// quarter second of it (moat's). [default: an eighth of the machine: cores × 125000]
    #[arg(long = "txpool.rpclanecpu")]
    pub rpc_lane_cpu: Option<u64>,
    /// Window (Go-style duration) over which a peer whose admission CPU buys almost no
    /// admitted transactions is dropped.
    #[arg(long = "txpool.uselesswindow", default_value = "10s", value_parser = crate::run::parse_duration)]
    pub useless_window: Duration,
    /// CPU-µs per admitted transaction (KZG of admitted blob transactions aside) past
    /// which a peer that spent 100 ms in a window is dropped.
    #[arg(long = "txpool.uselesscpu", default_value_t = 2_000)]
    pub useless_cpu: u64,
    /// Run all admission work at normal priority: no low-priority lane for new, poor or
    /// over-budget peers and RPC connections (moat's).
    #[arg(long = "txpool.nolanes")]
    pub no_lanes: bool,
    /// Longest a batch of the journal waits for local transactions being admitted when it
    /// starts, so that they share its sync (Go-style duration: 200us, 1ms; 0 turns the
    /// wait off) (moat's).
    #[arg(long = "txpool.journal.gather", default_value = "200us", value_parser = parse_short_duration)]
    pub journal_gather: Duration,
    /// Batches of the journal being synced at once: the next batch is written and synced
    /// while earlier syncs are on the disk, answered after them; more than one pays off on
    /// a disk whose lone syncs are slow (moat's).
    #[arg(long = "txpool.journal.syncs", default_value_t = 1,
          value_parser = clap::value_parser!(u8).range(1..=16))]
    pub journal_syncs: u8,
    /// Age a journal sync in flight must reach before the next batch's sync starts beside
    /// it (Go-style duration: 200us, 1ms; 0: at once); until then the batch waits for it
    /// and grows (moat's).
    #[arg(long = "txpool.journal.overlap", default_value = "200us", value_parser = parse_short_duration)]
    pub journal_overlap: Duration,
    /// Longest a thread of the lowest scheduling class spins while a journal sync is in
    /// flight, so that a CPU is running, not halted, when the disk answers (on a mostly
    /// idle VM a lone sync took ~100 µs instead of ~160 µs; under load it bought no rate
    /// and cost CPU) (Go-style duration, e.g. 2ms; 0, the default: no such thread)
    /// (moat's).
    #[arg(long = "txpool.journal.awake", default_value = "0", value_parser = parse_short_duration)]
    pub journal_awake: Duration,
    /// Shortest time from the start of a journal sync of three transactions or more to the
    /// next sync's start (Go-style duration, e.g. 1ms; 0: none). Many concurrent
    /// submissions then take at most one sync per interval, each for more of them, at the
    /// cost of up to that much more latency; after a smaller sync nothing waits, so one or
    /// two clients sending one tx after another are not slowed. On a 2-vCPU VM whose host
    /// stalled it while syncs ran, 500us cut the syncs by ~45 % and the p99 under load by
    /// ~25 % (moat's).
    #[arg(long = "txpool.journal.interval", default_value = "500us", value_parser = parse_short_duration)]
    pub journal_interval: Duration,
}

/// A cell bitmap: 16 bytes of hex, `0x` optional.
fn parse_cell_mask(text: &str) -> Result<moat_common::transaction::CellMask, String> {
    let text = text.trim();
    let hex = text.strip_prefix("0x").unwrap_or(text);
    alloy_primitives::hex::decode(hex)
        .ok()
        .and_then(|b| <[u8; 16]>::try_from(b).ok())
        .filter(|m| m.iter().any(|b| *b != 0))
        .ok_or_else(|| format!("not a cell bitmap: {text:?} (16 bytes of hex, a cell at least)"))
}

/// A Go-style duration down to microseconds (`200us`, `1ms`, `1.5ms` not: integers
/// only), or `0`.
fn parse_short_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("not a duration: {text:?} (use e.g. 200us, 1ms, 0)");
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let digits = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let n: u64 = text[..digits].parse().map_err(|_| bad())?;
    match &text[digits..] {
        "ns" => Ok(Duration::from_nanos(n)),
        "us" | "µs" => Ok(Duration::from_micros(n)),
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        _ => Err(bad()),
    }
}

impl PoolArgs {
    /// How the journal's writers batch and sync.
    pub(crate) fn journal_options(&self) -> JournalOptions {
        JournalOptions {
            gather: self.journal_gather,
            syncs_in_flight: usize::from(self.journal_syncs),
            overlap_after: self.journal_overlap,
            awake: self.journal_awake,
            interval: self.journal_interval,
        }
    }

    /// The pool's configuration for `chain` with these flags.
    pub(crate) fn pool_config(&self, chain: ChainConfig) -> PoolConfig {
        let mut cfg = PoolConfig::new(chain);
        cfg.min_tip = self.price_limit;
        cfg.price_bump = self.price_bump;
        cfg.max_account_slots = self.account_slots;
        cfg.pending.max_txs = self.global_slots;
        cfg.basefee.max_txs = self.global_slots;
        cfg.max_account_queue = self.account_queue;
        cfg.queued.max_txs = self.global_queue;
        cfg.queued_lifetime = self.lifetime;
        cfg.gapped.lifetime = self.blob_gapped_lifetime;
        cfg.locals = self.locals.iter().copied().collect();
        cfg.private = self.private.iter().copied().collect();
        cfg.no_locals = self.no_locals;
        cfg.local_account_slots = self.local_slots;
        cfg.local_account_queue = self.local_queue;
        cfg.local_share = usize::from(self.local_share);
        cfg.let_go.max_txs = self.let_go;
        cfg.blob.max_bytes = self.blob_datacap;
        cfg.blob_price_bump = self.blob_price_bump;
        let b = &mut cfg.budget;
        if let Some(rate) = self.peer_cpu {
            b.peer_rate_us = rate;
            b.peer_burst_us = rate / 2;
        }
        if let Some(burst) = self.peer_cpu_burst {
            b.peer_burst_us = burst;
        }
        if let Some(rate) = self.peers_cpu {
            b.peers_rate_us = rate;
        }
        if let Some(rate) = self.rpc_cpu {
            b.rpc_rate_us = rate;
            b.rpc_burst_us = rate / 2;
        }
        b.window = self.useless_window;
        b.useless_cpu_per_admitted_us = self.useless_cpu;
        b.lanes = !self.no_lanes;
        cfg
    }

    /// The CPU budget of the RPC requests in the untrusted lane.
    pub(crate) fn rpc_lane_budget(&self) -> RpcLaneBudget {
        match self.rpc_lane_cpu {
            Some(rate) => RpcLaneBudget {
                rate_us: rate,
                burst_us: rate / 4,
            },
            None => RpcLaneBudget::for_cores(
                std::thread::available_parallelism().map_or(1, |n| n.get()),
            ),
        }
    }

    /// The block builder's settings; the extra data must fit a header. A dev chain
    /// includes any tip unless told otherwise, as geth's dev mode does.
    pub(crate) fn miner_config(&self, dev: bool) -> Result<MinerConfig, String> {
        let extra = self.miner_extra_data.as_bytes();
        if extra.len() > moat_blockchain::header::MAX_EXTRA_DATA {
            return Err(format!(
                "--miner.extradata: {} bytes, at most {}",
                extra.len(),
                moat_blockchain::header::MAX_EXTRA_DATA
            ));
        }
        Ok(MinerConfig {
            gas_limit: Some(self.miner_gas_limit),
            min_tip: self.miner_gas_price.unwrap_or(if dev {
                1
            } else {
                MinerConfig::geth_defaults().min_tip
            }),
            extra_data: Bytes::copy_from_slice(extra),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        pool: PoolArgs,
    }

    #[test]
    fn the_journal_flags_set_its_options() {
        let cli = Cli::parse_from(["moat"]);
        assert_eq!(cli.pool.journal_options(), JournalOptions::default());
        let cli = Cli::parse_from([
            "moat",
            "--txpool.journal.gather",
            "0",
            "--txpool.journal.syncs",
            "3",
            "--txpool.journal.overlap",
            "0",
            "--txpool.journal.awake",
            "0",
        ]);
        let o = cli.pool.journal_options();
        assert_eq!(
            (o.gather, o.syncs_in_flight, o.overlap_after, o.awake),
            (Duration::ZERO, 3, Duration::ZERO, Duration::ZERO)
        );
        let cli = Cli::parse_from(["moat", "--txpool.journal.gather", "1ms"]);
        assert_eq!(cli.pool.journal_options().gather, Duration::from_millis(1));
        let cli = Cli::parse_from(["moat", "--txpool.journal.interval", "1ms"]);
        assert_eq!(
            cli.pool.journal_options().interval,
            Duration::from_millis(1)
        );
        let cli = Cli::parse_from(["moat", "--txpool.journal.awake", "2ms"]);
        assert_eq!(cli.pool.journal_options().awake, Duration::from_millis(2));
        assert_eq!(
            Cli::parse_from(["moat"]).pool.journal_options().awake,
            Duration::ZERO
        );
        for bad in ["200", "1.5ms", "-1us", "2x"] {
            assert!(parse_short_duration(bad).is_err(), "{bad}");
        }
        assert!(Cli::try_parse_from(["moat", "--txpool.journal.syncs", "0"]).is_err());
    }

    #[test]
    fn the_sparse_blobpool_flags_set_custody_and_fetch_probability() {
        let cli = Cli::parse_from(["moat"]);
        assert_eq!(cli.pool.blob_custody, None);
        assert_eq!(cli.pool.blob_fetch_probability, 15);
        let cli = Cli::parse_from([
            "moat",
            "--blobpool.custody",
            "0x01000000000000000000000000000080",
            "--blobpool.fetchprobability",
            "0",
        ]);
        let custody = cli.pool.blob_custody.unwrap();
        assert_eq!(
            moat_common::transaction::mask_indices(&custody),
            vec![0, 127]
        );
        assert_eq!(cli.pool.blob_fetch_probability, 0);
        for bad in ["0x01", "zz", "", "0x00000000000000000000000000000000"] {
            assert!(parse_cell_mask(bad).is_err(), "{bad}");
        }
        assert!(Cli::try_parse_from(["moat", "--blobpool.fetchprobability", "101"]).is_err());
    }

    #[test]
    fn gethes_flags_set_the_pool_and_the_builder() {
        let cli = Cli::parse_from([
            "moat",
            "--txpool.pricelimit",
            "7",
            "--txpool.accountslots",
            "4",
            "--txpool.accountqueue",
            "9",
            "--txpool.globalslots",
            "100",
            "--txpool.globalqueue",
            "50",
            "--txpool.lifetime",
            "90m",
            "--txpool.locals",
            "0x00000000000000000000000000000000000000aa,0x00000000000000000000000000000000000000bb",
            "--txpool.nolocals",
            "--txpool.private",
            "0x00000000000000000000000000000000000000cc",
            "--txpool.localshare",
            "25",
            "--txpool.letgo",
            "0",
            "--blobpool.datacap",
            "1000",
            "--blobpool.pricebump",
            "50",
            "--miner.gaslimit",
            "36000000",
            "--miner.gasprice",
            "5",
            "--miner.extradata",
            "hello",
            "--txpool.peercpu",
            "40000",
            "--txpool.peerscpu",
            "300000",
            "--txpool.rpccpu",
            "90000",
            "--txpool.uselesswindow",
            "30s",
            "--txpool.uselesscpu",
            "500",
        ]);
        let cfg = cli.pool.pool_config(ChainConfig::all_forks_at_genesis(
            1,
            moat_common::config::Fork::Prague,
        ));
        assert_eq!(cfg.min_tip, 7);
        assert_eq!(cfg.max_account_slots, 4);
        assert_eq!(cfg.max_account_queue, 9);
        assert_eq!(cfg.pending.max_txs, 100);
        assert_eq!(cfg.queued.max_txs, 50);
        assert_eq!(cfg.queued_lifetime, Duration::from_secs(5400));
        assert_eq!(cfg.locals.len(), 2);
        assert!(cfg.private.contains(&Address::with_last_byte(0xcc)));
        assert!(cfg.no_locals);
        assert_eq!(cfg.local_share, 25);
        assert_eq!(cfg.let_go.max_txs, 0);
        assert_eq!(cfg.blob.max_bytes, 1000);
        assert_eq!(cfg.blob_price_bump, 50);
        let b = &cfg.budget;
        assert_eq!((b.peer_rate_us, b.peer_burst_us), (40_000, 20_000));
        assert_eq!(b.peers_rate_us, 300_000);
        assert_eq!((b.rpc_rate_us, b.rpc_burst_us), (90_000, 45_000));
        assert_eq!(b.window, Duration::from_secs(30));
        assert_eq!(b.useless_cpu_per_admitted_us, 500);
        let miner = cli.pool.miner_config(false).unwrap();
        assert_eq!(miner.gas_limit, Some(36_000_000));
        assert_eq!(miner.min_tip, 5);
        assert_eq!(&miner.extra_data[..], b"hello");

        let defaults = Cli::parse_from(["moat"]);
        // Budgets default to shares of this machine's cores.
        let chain = ChainConfig::all_forks_at_genesis(1, moat_common::config::Fork::Prague);
        assert_eq!(
            defaults.pool.pool_config(chain.clone()).budget,
            moat_mempool::BudgetConfig::for_this_machine()
        );
        let miner = defaults.pool.miner_config(false).unwrap();
        assert_eq!(miner, MinerConfig::geth_defaults());
        assert_eq!(defaults.pool.miner_config(true).unwrap().min_tip, 1);
        assert_eq!(
            defaults.pool.pool_config(chain.clone()).local_share,
            PoolConfig::new(chain).local_share
        );
        assert!(Cli::try_parse_from(["moat", "--txpool.localshare", "101"]).is_err());
        let long = Cli::parse_from(["moat", "--miner.extradata", &"x".repeat(33)]);
        assert!(long.pool.miner_config(false).is_err());
    }

    #[test]
    fn the_rpc_lane_cpu_flag_sets_the_untrusted_rpc_budget() {
        let set = Cli::parse_from(["moat", "--txpool.rpclanecpu", "60000"]);
        assert_eq!(
            set.pool.rpc_lane_budget(),
            RpcLaneBudget {
                rate_us: 60_000,
                burst_us: 15_000
            }
        );
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(
            Cli::parse_from(["moat"]).pool.rpc_lane_budget(),
            RpcLaneBudget::for_cores(cores)
        );
        assert!(Cli::try_parse_from(["moat", "--txpool.rpclanecpu", "-1"]).is_err());
    }

    #[test]
    fn admission_lanes_are_on_unless_turned_off() {
        let chain = ChainConfig::all_forks_at_genesis(1, moat_common::config::Fork::Prague);
        let on = Cli::parse_from(["moat"]).pool.pool_config(chain.clone());
        assert!(on.budget.lanes);
        let off = Cli::parse_from(["moat", "--txpool.nolanes"])
            .pool
            .pool_config(chain);
        assert!(!off.budget.lanes);
    }
}
