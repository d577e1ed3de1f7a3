//! The flags operators bring from geth that are about running the node rather than what
//! it serves: `--mainnet` / `--sepolia` / `--hoodi` (beside `--network`), `--syncmode`,
//! `--history.state` and `--log.format`; the JSON log format itself; and the grouping of
//! `moat --help` under geth's headings.
//!
//! `--verbosity`, `--metrics.addr` and `--metrics.port` live with the node's other flags
//! (run.rs); the metrics listener answers on every path, geth's `/debug/metrics/prometheus`
//! included.

use clap::ValueEnum;
use std::fmt;
use tracing::field::{Field, Visit};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Bucket bounds (seconds) of the newPayload latency histogram: a few ms for an empty
/// block up to seconds for a full mainnet one.
pub(crate) const NEW_PAYLOAD_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0,
];

/// geth's sync modes. Only full sync is built (every block executed, from the
/// consensus client's head back to where the chain joins); snap sync is refused at
/// start with an error that says so, rather than accepted and ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum SyncMode {
    /// Download and execute every block.
    Full,
    /// Download the state at a block 64 below the consensus client's head, then
    /// execute from there (a datadir past genesis syncs in full either way).
    Snap,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines with colours on a terminal.
    #[default]
    Terminal,
    /// One JSON object a line, with geth's keys `t`, `lvl` and `msg` and each field.
    Json,
}

/// Flags of geth's that choose the network, the sync mode and the log format.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct OpsArgs {
    /// Ethereum mainnet (as --network mainnet).
    #[arg(long, help_heading = "ETHEREUM", conflicts_with_all = ["network", "sepolia", "hoodi"])]
    pub mainnet: bool,
    /// The Sepolia test network (as --network sepolia).
    #[arg(long, help_heading = "ETHEREUM", conflicts_with_all = ["network", "hoodi"])]
    pub sepolia: bool,
    /// The Hoodi test network (as --network hoodi).
    #[arg(long, help_heading = "ETHEREUM", conflicts_with_all = ["network"])]
    pub hoodi: bool,
    /// How to catch up with the network: `snap` (the default) downloads the state at a
    /// recent block when the datadir holds nothing past genesis; `full` executes every
    /// block.
    #[arg(long, value_enum, default_value_t = SyncMode::Snap, help_heading = "ETHEREUM")]
    pub syncmode: SyncMode,
    /// Snap sync: the byte budget asked of a peer per request (snap/1's
    /// `responseBytes`; servers cap it at 2 MiB, as geth does).
    #[arg(
        long = "snap.responsebytes",
        default_value_t = 512 * 1024,
        value_parser = clap::value_parser!(u64).range(1..=2 * 1024 * 1024),
        help_heading = "ETHEREUM"
    )]
    pub snap_response_bytes: u64,
    /// Blocks behind the head whose undo records (and so whose state, and the reorgs
    /// reaching them) are kept at most while finality lags: the last 128 blocks are
    /// always kept, and every block above the finalized one up to this many (0: no
    /// limit). geth's flag and default.
    #[arg(
        long = "history.state",
        default_value_t = moat_blockchain::undo::DEFAULT_UNDO_CEILING,
        value_parser = parse_history_state,
        help_heading = "ETHEREUM"
    )]
    pub history_state: u64,
    /// Log format: `terminal` or `json` (one object a line).
    #[arg(long = "log.format", value_enum, default_value_t = LogFormat::Terminal, help_heading = "LOGGING AND DEBUGGING")]
    pub log_format: LogFormat,
}

impl OpsArgs {
    /// The network `--mainnet`, `--sepolia` or `--hoodi` names, if one was given (clap
    /// already refused more than one, or one beside `--network`).
    pub(crate) fn named_network(&self) -> Option<&'static str> {
        match (self.mainnet, self.sepolia, self.hoodi) {
            (true, _, _) => Some("mainnet"),
            (false, true, _) => Some("sepolia"),
            (false, false, true) => Some("hoodi"),
            (false, false, false) => None,
        }
    }

    /// Settles `--network` from the shortcut flags and checks the sync mode; an error
    /// is for the user.
    pub(crate) fn apply(&self, network: &mut Option<String>) -> Result<(), String> {
        if let Some(name) = self.named_network() {
            *network = Some(name.to_string());
        }
        Ok(())
    }

    /// The undo records `--history.state` keeps.
    pub(crate) fn undo_window(&self) -> moat_blockchain::undo::UndoWindow {
        moat_blockchain::undo::UndoWindow::with_ceiling(self.history_state)
    }

    /// Whether a fresh datadir syncs its state by snap.
    pub(crate) fn snap_sync(&self) -> bool {
        match self.syncmode {
            SyncMode::Snap => true,
            SyncMode::Full => false,
        }
    }
}

/// `--history.state`: 0 (no limit) or at least the 128 blocks always kept.
fn parse_history_state(s: &str) -> Result<u64, String> {
    let n: u64 = s.parse().map_err(|e| format!("{e}"))?;
    let least = moat_blockchain::undo::UNDO_DEPTH;
    if n != 0 && n < least {
        return Err(format!(
            "at least {least} (the blocks always kept), or 0 for no limit"
        ));
    }
    Ok(n)
}

/// geth's `--verbosity` levels: 0 silent, 1 error, 2 warn, 3 info, 4 debug, 5 trace.
pub(crate) fn verbosity_level(verbosity: u8) -> tracing::level_filters::LevelFilter {
    use tracing::level_filters::LevelFilter;
    match verbosity {
        0 => LevelFilter::OFF,
        1 => LevelFilter::ERROR,
        2 => LevelFilter::WARN,
        3 => LevelFilter::INFO,
        4 => LevelFilter::DEBUG,
        5.. => LevelFilter::TRACE,
    }
}

/// Installs the global logger at `level` in `format` (to stderr for JSON, stdout for
/// the terminal format, as before).
pub(crate) fn init_logging(level: tracing::level_filters::LevelFilter, format: LogFormat) {
    match format {
        LogFormat::Terminal => {
            let _ = tracing_subscriber::fmt()
                .with_max_level(level)
                .with_target(false)
                .with_ansi(colour_wanted())
                .try_init();
        }
        LogFormat::Json => {
            let _ = tracing_subscriber::fmt()
                .with_max_level(level)
                .with_ansi(false)
                .event_format(JsonLines)
                .try_init();
        }
    }
}

/// Whether the terminal format colours its lines: only when stdout is a terminal and
/// `NO_COLOR` is unset or empty (no-color.org), as geth and reth do; a log redirected
/// to a file gets no escape codes.
fn colour_wanted() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// One JSON object a log line: `{"t":…,"lvl":"info","msg":…, field: value, …}`.
struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        let mut time = String::new();
        tracing_subscriber::fmt::time::SystemTime.format_time(&mut Writer::new(&mut time))?;
        let level = match *event.metadata().level() {
            tracing::Level::ERROR => "error",
            tracing::Level::WARN => "warn",
            tracing::Level::INFO => "info",
            tracing::Level::DEBUG => "debug",
            tracing::Level::TRACE => "trace",
        };
        let mut fields = JsonFields(serde_json::Map::new());
        fields.0.insert("t".into(), time.into());
        fields.0.insert("lvl".into(), level.into());
        fields.0.insert("msg".into(), "".into());
        event.record(&mut fields);
        let line = serde_json::Value::Object(fields.0).to_string();
        writeln!(writer, "{line}")
    }
}

/// Collects an event's fields; `message` becomes `msg`.
struct JsonFields(serde_json::Map<String, serde_json::Value>);

impl JsonFields {
    fn put(&mut self, field: &Field, value: serde_json::Value) {
        let key = match field.name() {
            "message" => "msg",
            name => name,
        };
        self.0.insert(key.to_string(), value);
    }
}

impl Visit for JsonFields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, format!("{value:?}").into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value.into());
    }
}

/// geth's help headings, by the long flag's name: flags of every part of the node (the
/// ones other modules define included) land under the heading geth gives them.
pub(crate) fn heading_of(long: &str) -> Option<&'static str> {
    let prefix = long.split('.').next().unwrap_or(long);
    Some(match prefix {
        "datadir" | "network" | "networkid" | "mainnet" | "sepolia" | "hoodi" | "syncmode"
        | "snap" => "ETHEREUM",
        "http" | "ws" | "authrpc" | "rpc" | "graphql" => "API AND CONSOLE",
        "port" | "p2p" | "bootnodes" | "maxpeers" | "maxpendpeers" | "nodekey" | "nodekeyhex"
        | "nodiscover" | "discovery" | "nat" | "netrestrict" => "NETWORKING",
        "txpool" => "TRANSACTION POOL (EVM)",
        "blobpool" => "TRANSACTION POOL (BLOB)",
        "cache" => "PERFORMANCE TUNING",
        "miner" => "MINER",
        "dev" => "DEVELOPER CHAIN",
        "log" | "verbosity" => "LOGGING AND DEBUGGING",
        "metrics" => "METRICS AND STATS",
        _ => return None,
    })
}

/// The command with each top-level flag under its geth heading (flags no heading fits
/// stay under "Options").
pub(crate) fn with_geth_headings(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|arg| match arg.get_long().and_then(heading_of) {
        Some(heading) => arg.help_heading(heading),
        None => arg,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geth_verbosity_numbers_map_to_levels() {
        use tracing::level_filters::LevelFilter;
        let levels: Vec<LevelFilter> = (0..=6).map(verbosity_level).collect();
        assert_eq!(
            levels,
            [
                LevelFilter::OFF,
                LevelFilter::ERROR,
                LevelFilter::WARN,
                LevelFilter::INFO,
                LevelFilter::DEBUG,
                LevelFilter::TRACE,
                LevelFilter::TRACE
            ]
        );
    }

    #[test]
    fn headings_follow_geths_categories() {
        assert_eq!(heading_of("http.vhosts"), Some("API AND CONSOLE"));
        assert_eq!(heading_of("authrpc.jwtsecret"), Some("API AND CONSOLE"));
        assert_eq!(
            heading_of("txpool.pricelimit"),
            Some("TRANSACTION POOL (EVM)")
        );
        assert_eq!(
            heading_of("blobpool.datacap"),
            Some("TRANSACTION POOL (BLOB)")
        );
        assert_eq!(heading_of("metrics.addr"), Some("METRICS AND STATS"));
        assert_eq!(heading_of("discovery.port"), Some("NETWORKING"));
        assert_eq!(heading_of("mainnet"), Some("ETHEREUM"));
        assert_eq!(heading_of("verbosity"), Some("LOGGING AND DEBUGGING"));
        assert_eq!(heading_of("help"), None);
    }

    fn parse(args: &[&str]) -> Result<crate::Cli, clap::Error> {
        use clap::{CommandFactory, FromArgMatches};
        let m = with_geth_headings(crate::Cli::command())
            .try_get_matches_from(std::iter::once("moat").chain(args.iter().copied()))?;
        crate::Cli::from_arg_matches(&m)
    }

    /// The command line EXPB gives geth (execution-payloads-benchmarks'
    /// `clients/geth.py`), with the flags moat has.
    const EXPB_GETH: &[&str] = &[
        "--datadir=/execution-data",
        "--port=30303",
        "--http",
        "--http.addr=0.0.0.0",
        "--http.port=8545",
        "--http.vhosts=*",
        "--http.api=eth,net,web3,debug,admin",
        "--authrpc.addr=0.0.0.0",
        "--authrpc.port=8551",
        "--authrpc.vhosts=*",
        "--authrpc.jwtsecret=/jwtsecret.hex",
        "--metrics",
        "--metrics.port=6060",
        "--metrics.addr=0.0.0.0",
        "--ws",
        "--ws.addr=0.0.0.0",
        "--ws.port=8545",
        "--ws.api=eth,web3,net,debug,admin",
        "--nodiscover",
        "--maxpeers=0",
        "--mainnet",
        "--syncmode=full",
    ];

    #[test]
    fn expbs_geth_command_line_parses_and_means_what_it_says() {
        let cli = parse(EXPB_GETH).unwrap_or_else(|e| panic!("{e}"));
        assert!(cli.command.is_none());
        let n = cli.node;
        assert_eq!(
            n.datadir.as_deref(),
            Some(std::path::Path::new("/execution-data"))
        );
        assert_eq!(n.port, 30303);
        assert_eq!(n.authrpc_port, 8551);
        assert_eq!(n.authrpc_addr.to_string(), "0.0.0.0");
        assert_eq!(
            n.authrpc_jwtsecret.as_deref(),
            Some(std::path::Path::new("/jwtsecret.hex"))
        );
        assert!(n.metrics);
        assert_eq!(
            (n.metrics_addr.to_string(), n.metrics_port),
            ("0.0.0.0".into(), 6060)
        );
        assert!(n.ws);
        assert_eq!(n.ws_port, 8545);
        assert!(n.nodiscover);
        assert_eq!(n.maxpeers, Some(0));
        assert_eq!(n.ops.syncmode, SyncMode::Full);
        let mut network = n.network.clone();
        n.ops.apply(&mut network).unwrap();
        assert_eq!(network.as_deref(), Some("mainnet"));
    }

    #[test]
    fn network_shortcuts_sync_modes_and_log_formats_are_checked() {
        assert!(parse(&["--mainnet", "--network", "sepolia"]).is_err());
        assert!(parse(&["--mainnet", "--hoodi"]).is_err());
        assert!(parse(&["--syncmode", "light"]).is_err());
        assert!(parse(&["--log.format", "logfmt"]).is_err());
        let cli = parse(&["--hoodi", "--log.format", "json", "--verbosity", "4"]).unwrap();
        assert_eq!(cli.node.ops.log_format, LogFormat::Json);
        assert_eq!(cli.node.ops.named_network(), Some("hoodi"));
        // Snap is the default, as geth's.
        let cli = parse(&["--syncmode=snap"]).unwrap();
        assert!(cli.node.ops.snap_sync());
        assert!(parse(&[]).unwrap().node.ops.snap_sync());
        assert!(!parse(&["--syncmode", "full"]).unwrap().node.ops.snap_sync());
        assert_eq!(parse(&[]).unwrap().node.ops.snap_response_bytes, 512 * 1024);
        let small = parse(&["--snap.responsebytes", "2048"]).unwrap();
        assert_eq!(small.node.ops.snap_response_bytes, 2048);
        for bad in ["0", "2097153", "lots"] {
            assert!(parse(&["--snap.responsebytes", bad]).is_err(), "{bad}");
        }
        let window = |args: &[&str]| parse(args).unwrap().node.ops.undo_window();
        assert_eq!(window(&[]).ceiling, 90_000);
        assert_eq!(window(&["--history.state", "200000"]).ceiling, 200_000);
        assert_eq!(window(&["--history.state", "0"]).ceiling, u64::MAX);
        assert_eq!(window(&["--history.state", "128"]).ceiling, 128);
        for bad in ["127", "1", "-1", "lots"] {
            assert!(parse(&["--history.state", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn sync_modes_are_accepted_and_shortcuts_name_the_network() {
        let ops = |mainnet, syncmode| OpsArgs {
            mainnet,
            sepolia: false,
            hoodi: false,
            syncmode,
            snap_response_bytes: 512 * 1024,
            history_state: 90_000,
            log_format: LogFormat::Terminal,
        };
        let mut network = None;
        ops(true, SyncMode::Full).apply(&mut network).unwrap();
        assert_eq!(network.as_deref(), Some("mainnet"));
        ops(false, SyncMode::Snap).apply(&mut network).unwrap();
    }
}
