//! The RPC servers' access and timeout flags, with go-ethereum's names and defaults.
//!
//! `--http` turns the HTTP server on, as in geth. moat's dev mode (`--dev`) turns it on
//! by itself, since a dev node is there to be called; `--http=false` turns it off there
//! too. Without `--http` (and outside dev mode) the node serves no HTTP JSON-RPC;
//! `--ws` still serves WebSocket on its own port.

use crate::fdlimit::Budget;
use crate::run::parse_duration;
use moat_rpc::engine::EngineConfig;
use moat_rpc::{AllowedOrigins, CorsDomains, HttpTimeouts, Namespaces, RpcConfig, VirtualHosts};
use std::time::Duration;

/// This machine's name, for geth's default WebSocket origins (`http://<hostname>`): the
/// kernel's, else `HOSTNAME`'s.
fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
}

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct RpcArgs {
    /// Serve HTTP JSON-RPC (geth's flag; on by default with --dev, off with
    /// --http=false).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub http: Option<bool>,
    /// API namespaces served over HTTP, comma-separated: eth, net, web3, txpool, admin,
    /// debug.
    #[arg(
        long = "http.api",
        value_delimiter = ',',
        default_value = "eth,net,web3"
    )]
    pub http_api: Vec<String>,
    /// API namespaces served over WebSocket, comma-separated.
    #[arg(long = "ws.api", value_delimiter = ',', default_value = "eth,net,web3")]
    pub ws_api: Vec<String>,
    /// Host names HTTP requests may name, comma-separated ("*": any); a request naming
    /// another gets 403 (guards against DNS rebinding). IP addresses are always served.
    #[arg(
        long = "http.vhosts",
        value_delimiter = ',',
        default_value = "localhost"
    )]
    pub http_vhosts: Vec<String>,
    /// Host names engine API requests may name, comma-separated ("*": any).
    #[arg(
        long = "authrpc.vhosts",
        value_delimiter = ',',
        default_value = "localhost"
    )]
    pub authrpc_vhosts: Vec<String>,
    /// Origins WebSocket connections are accepted from, comma-separated ("*": any)
    /// [default: http://localhost and http://<this host's name>].
    #[arg(long = "ws.origins", value_delimiter = ',')]
    pub ws_origins: Vec<String>,
    /// Origins browsers may call HTTP JSON-RPC from (CORS), comma-separated ("*": any)
    /// [default: none].
    #[arg(long = "http.corsdomain", value_delimiter = ',')]
    pub http_corsdomain: Vec<String>,
    /// Most time to read a whole request, headers and body, on the HTTP, WebSocket and
    /// engine ports; a slower client is dropped.
    #[arg(long = "http.readtimeout", default_value = "30s", value_parser = parse_timeout)]
    pub http_readtimeout: Duration,
    /// Most time a call may run before it is answered -32002 "request timed out", and a
    /// response may wait for a client that does not read it.
    #[arg(long = "http.writetimeout", default_value = "30s", value_parser = parse_timeout)]
    pub http_writetimeout: Duration,
    /// Most time a connection may wait for its next request.
    #[arg(long = "http.idletimeout", default_value = "2m0s", value_parser = parse_timeout)]
    pub http_idletimeout: Duration,
    /// Largest answer to one JSON-RPC call, in MiB; bigger gets -32008 "Response is too
    /// big". The default holds the logs of any block up to ~150 Mgas.
    #[arg(long = "rpc.max-response-size", default_value_t = moat_rpc::DEFAULT_MAX_RESPONSE_SIZE >> 20, value_parser = clap::value_parser!(u32).range(1..4096))]
    pub rpc_max_response_size: u32,
}

/// A Go-style duration of at least one second (geth replaces shorter HTTP timeouts
/// by its default).
fn parse_timeout(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d < Duration::from_secs(1) {
        return Err(format!("{text}: a timeout is at least 1s"));
    }
    Ok(d)
}

impl RpcArgs {
    /// Whether HTTP JSON-RPC is served.
    pub(crate) fn http_enabled(&self, dev: bool) -> bool {
        self.http.unwrap_or(dev)
    }

    fn timeouts(&self) -> HttpTimeouts {
        HttpTimeouts {
            read: self.http_readtimeout,
            // net/http's rule, which geth's defaults follow: the header timeout is the
            // read timeout unless set apart.
            read_header: self.http_readtimeout,
            write: self.http_writetimeout,
            idle: self.http_idletimeout,
        }
    }

    /// `base` (addresses and request limits) with these flags and the caps of `budget`.
    pub(crate) fn rpc_config(&self, dev: bool, budget: &Budget, base: RpcConfig) -> RpcConfig {
        RpcConfig {
            serve_http: self.http_enabled(dev),
            http_api: dev_api(dev, Namespaces::new(&self.http_api)),
            ws_api: dev_api(dev, Namespaces::new(&self.ws_api)),
            vhosts: VirtualHosts::new(&self.http_vhosts),
            ws_origins: AllowedOrigins::on_host(&self.ws_origins, host_name().as_deref()),
            cors: CorsDomains::new(&self.http_corsdomain),
            timeouts: self.timeouts(),
            connections: budget.rpc,
            ws_connections: budget.ws,
            max_response_body_size: self.rpc_max_response_size << 20,
            ..base
        }
    }

    /// `base` (address and secret) with the engine port's Host list, timeouts and caps.
    pub(crate) fn engine_config(&self, budget: &Budget, base: EngineConfig) -> EngineConfig {
        EngineConfig {
            vhosts: VirtualHosts::new(&self.authrpc_vhosts),
            timeouts: self.timeouts(),
            connections: budget.engine,
            ..base
        }
    }
}

/// The dev node also serves `evm_` (`evm_mine`, `evm_snapshot`, ...), `anvil_`
/// (`anvil_setBalance`, ...), their `hardhat_` names and `personal_sign`, as anvil and
/// hardhat do.
fn dev_api(dev: bool, api: Namespaces) -> Namespaces {
    if dev {
        api.with("evm")
            .with("anvil")
            .with("hardhat")
            .with("personal")
    } else {
        api
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        rpc: RpcArgs,
    }

    fn parse(args: &[&str]) -> RpcArgs {
        Cli::try_parse_from(std::iter::once("moat").chain(args.iter().copied()))
            .unwrap()
            .rpc
    }

    #[test]
    fn http_is_on_with_the_flag_or_in_dev_mode() {
        assert!(!parse(&[]).http_enabled(false));
        assert!(parse(&[]).http_enabled(true));
        assert!(parse(&["--http"]).http_enabled(false));
        assert!(parse(&["--http=true"]).http_enabled(false));
        assert!(!parse(&["--http=false"]).http_enabled(true));
    }

    #[test]
    fn geth_style_values_parse() {
        let a = parse(&[
            "--http",
            "--http.api=eth,net,web3,txpool,admin,debug",
            "--http.vhosts=*",
            "--ws.origins",
            "http://a.example,https://b.example",
            "--http.corsdomain=*",
            "--authrpc.vhosts=localhost,cl.internal",
            "--http.readtimeout=5s",
            "--http.idletimeout=1m30s",
        ]);
        assert_eq!(a.http_api.len(), 6);
        assert_eq!(a.ws_origins.len(), 2);
        assert_eq!(a.http_readtimeout, Duration::from_secs(5));
        assert_eq!(a.http_idletimeout, Duration::from_secs(90));
        let budget = Budget::new(20_000, 50);
        let c = a.rpc_config(false, &budget, RpcConfig::default());
        assert!(c.serve_http);
        assert!(c.http_api.allows("admin_peers"));
        assert!(!c.ws_api.allows("admin_peers"));
        assert!(!c.http_api.allows("evm_mine"));
        assert!(!c.http_api.allows("anvil_setBalance"));
        assert!(!c.http_api.allows("personal_sign"));
        assert!(c.vhosts.allows(Some("anything.example")));
        assert_eq!(c.timeouts.read, Duration::from_secs(5));
        assert_eq!(c.connections, budget.rpc);
        let e = a.engine_config(&budget, EngineConfig::new([0; 32]));
        assert!(e.vhosts.allows(Some("cl.internal:8551")));
        assert!(!e.vhosts.allows(Some("evil.example")));
        assert!(Cli::try_parse_from(["moat", "--http.readtimeout", "500ms"]).is_err());
    }

    #[test]
    fn defaults_are_geths() {
        let a = parse(&[]);
        let c = a.rpc_config(true, &Budget::new(20_000, 0), RpcConfig::default());
        assert!(c.http_api.allows("eth_call"));
        assert!(!c.http_api.allows("admin_nodeInfo"));
        assert!(!c.http_api.allows("txpool_content"));
        assert!(c.http_api.allows("evm_mine"));
        assert!(c.http_api.allows("anvil_setBalance"));
        assert!(!c.vhosts.allows(Some("evil.example")));
        assert!(c.vhosts.allows(Some("localhost:8545")));
        assert!(!c.ws_origins.allows(Some("http://evil.example")));
        assert!(c.cors.is_empty());
        assert_eq!(c.timeouts, HttpTimeouts::default());
        assert_eq!(
            c.max_response_body_size,
            moat_rpc::DEFAULT_MAX_RESPONSE_SIZE
        );
    }
}
