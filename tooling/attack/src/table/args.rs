//! The command line: the node to measure, the honest traffic's keys and rates, and the
//! attack scenarios to run (each with its row name, blob sidecar version, and whether it
//! needs devp2p).

use clap::{Parser, ValueEnum};
use moat_common::transaction::SidecarVersion;
use moat_p2p::Enode;
use std::net::SocketAddr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Scenario {
    FreshKeys,
    CacheChurn,
    Repeat,
    RpcFlood,
    Announce,
    BlobV0,
    BlobV1,
    /// Blob spam over eth/72: bodies without blobs, then data cells that fail the proofs.
    Cells,
    Invalidation,
}

impl Scenario {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Scenario::FreshKeys => "1 fresh-key flood",
            Scenario::CacheChurn => "2 cache exhaustion",
            Scenario::Repeat => "3 repeated failures",
            Scenario::RpcFlood => "7 RPC flood",
            Scenario::Announce => "6 announcement flood",
            Scenario::BlobV0 => "4 blob spam (v0 proofs)",
            Scenario::BlobV1 => "4 blob spam (v1 cell proofs)",
            Scenario::Cells => "4 blob spam (eth/72 bad cells)",
            Scenario::Invalidation => "5 invalidation storm",
        }
    }

    /// The sidecar version of a blob scenario.
    pub(crate) fn blob_version(self) -> Option<SidecarVersion> {
        match self {
            Scenario::BlobV0 => Some(SidecarVersion::V0),
            Scenario::BlobV1 | Scenario::Cells => Some(SidecarVersion::V1),
            Scenario::FreshKeys
            | Scenario::CacheChurn
            | Scenario::Repeat
            | Scenario::RpcFlood
            | Scenario::Announce
            | Scenario::Invalidation => None,
        }
    }

    pub(crate) fn gossip(self) -> bool {
        match self {
            Scenario::FreshKeys
            | Scenario::CacheChurn
            | Scenario::Repeat
            | Scenario::Announce
            | Scenario::BlobV0
            | Scenario::BlobV1
            | Scenario::Cells
            | Scenario::Invalidation => true,
            Scenario::RpcFlood => false,
        }
    }
}

#[derive(Parser, Debug)]
#[command(about = "Attack scenarios beside honest traffic: what the honest traffic got")]
pub(crate) struct Args {
    /// The node's HTTP JSON-RPC address.
    #[arg(long)]
    pub(crate) rpc: SocketAddr,
    /// The node's devp2p enode; without it only the RPC forms run.
    #[arg(long)]
    pub(crate) target: Option<Enode>,
    /// The node's process id (its CPU from /proc).
    #[arg(long)]
    pub(crate) pid: u32,
    /// Hex key of a funded account for the honest peer.
    #[arg(long)]
    pub(crate) peer_key: String,
    /// Hex key of another funded account for the honest RPC client.
    #[arg(long)]
    pub(crate) rpc_key: String,
    /// Senders of the honest peer's transfers. With more than one, `--peer-key` funds
    /// that many fresh keys by RPC first and waits until a block has the funding (a node
    /// that mines: dev mode), and the peer sends from each in turn, as gossip from a
    /// network's many senders comes; with one, from `--peer-key` itself.
    #[arg(long, default_value_t = 1)]
    pub(crate) peer_senders: usize,
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "fresh-keys,cache-churn,repeat,rpc-flood,announce"
    )]
    pub(crate) scenarios: Vec<Scenario>,
    /// Attacking peers (or RPC connections for `rpc-flood`).
    #[arg(long, default_value_t = 4)]
    pub(crate) attackers: usize,
    /// Seconds of each phase (reference, attack).
    #[arg(long, default_value_t = 5)]
    pub(crate) seconds: u64,
    /// Honest peer's transactions per second.
    #[arg(long, default_value_t = 200)]
    pub(crate) peer_rate: u64,
    /// Honest RPC client's transactions per second.
    #[arg(long, default_value_t = 100)]
    pub(crate) rpc_rate: u64,
    /// Share of the node's CPU the budgets allow all attackers together.
    #[arg(long, default_value_t = 0.5)]
    pub(crate) budget_share: f64,
    /// Name of the node in the table's title.
    #[arg(long, default_value = "node")]
    pub(crate) label: String,
    /// Hex keys of funded accounts for the blob spammers (comma-separated; attacker `i`
    /// signs with key `i % n`). Without them the blob scenarios are skipped.
    #[arg(long, value_delimiter = ',')]
    pub(crate) blob_keys: Vec<String>,
    /// The node's Prometheus address (moat: KZG checks per blob scenario).
    #[arg(long)]
    pub(crate) metrics: Option<SocketAddr>,
    /// Attackers all connect from 127.0.0.1 (by default attacker `i` binds 127.0.0.(10+i)
    /// and keeps that address across its identities).
    #[arg(long)]
    pub(crate) same_ip: bool,
    /// Hex key of a funded account that funds the invalidation storm's senders.
    #[arg(long)]
    pub(crate) storm_key: Option<String>,
    /// Senders of the invalidation storm (each sends four transfers).
    #[arg(long, default_value_t = 2_000)]
    pub(crate) storm_senders: usize,
    /// A JSON-RPC request to send to the engine API first (a node that imported a chain
    /// takes transactions once a forkchoice update names its head): the file's content.
    #[arg(long, requires_all = ["engine", "jwt_secret"])]
    pub(crate) fcu: Option<std::path::PathBuf>,
    /// The genesis file the node runs: peers then send a Status at its genesis (which
    /// go-ethereum accepts) instead of mirroring the node's (found with a probe that
    /// go-ethereum refuses).
    #[arg(long)]
    pub(crate) network: Option<std::path::PathBuf>,
    /// The node's engine API address (for `--fcu`).
    #[arg(long)]
    pub(crate) engine: Option<SocketAddr>,
    /// The engine API's JWT secret file (hex).
    #[arg(long)]
    pub(crate) jwt_secret: Option<std::path::PathBuf>,
}
