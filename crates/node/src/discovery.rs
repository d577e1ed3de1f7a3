//! Peer discovery for the node: discv4 on the p2p port (or `--discovery.port`), with our
//! fork id in the record, and a dialer that offers what it finds to the p2p network.
//!
//! Discovery runs only when p2p does (`--maxpeers` > 0), unless `--nodiscover` or
//! `--discovery.v4=false`. It starts from `--bootnodes` only: with none it answers
//! other nodes but looks for nobody.

use crate::run::NodeArgs;
use moat_blockchain::chain::Chain;
use moat_discovery::dialer::{DialTarget, DialerConfig, ForkCheck, spawn_dialer};
use moat_discovery::{Discv4, Discv4Config, ForkId, NodeId, NodeRecord};
use moat_p2p::{Enode, Network};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How often our record's fork id is compared with the chain's (it changes when the
/// head passes a fork).
const FORK_ID_CHECK: Duration = Duration::from_secs(30);

/// `--nat`: `none` or `extip:<IP>`.
pub fn parse_nat(text: &str) -> Result<Option<IpAddr>, String> {
    match text.trim() {
        "" | "none" => Ok(None),
        other => match other.strip_prefix("extip:") {
            Some(ip) => ip
                .parse()
                .map(Some)
                .map_err(|_| format!("--nat: {ip:?} is not an IP address")),
            None => Err(format!(
                "--nat {other}: only \"none\" and \"extip:<IP>\" are supported"
            )),
        },
    }
}

/// The fork id at the chain's head.
fn fork_id(chain: &Chain, genesis_timestamp: u64) -> ForkId {
    let (number, timestamp) = chain
        .head_header()
        .map(|h| (h.number, h.timestamp))
        .unwrap_or((0, genesis_timestamp));
    chain
        .config()
        .fork_id(chain.genesis_hash(), genesis_timestamp, number, timestamp)
}

/// The p2p network as the dialer sees it.
struct NetTarget(Network);

impl DialTarget for NetTarget {
    fn free_outbound_slots(&self) -> usize {
        self.0.free_outbound_slots()
    }

    fn is_connected(&self, id: &NodeId) -> bool {
        self.0.is_connected(id)
    }

    fn dial(&self, node: &NodeRecord) {
        self.0.dial_once(Enode {
            id: node.id,
            addr: node.tcp_addr(),
        });
    }
}

/// Starts discv4 and the dialer if discovery is on; `None` when it is off.
pub async fn start_discovery(
    args: &NodeArgs,
    datadir: &Path,
    chain: &Chain,
    network: Option<&Network>,
) -> Result<Option<Discv4>, String> {
    let external_ip = parse_nat(&args.nat)?;
    let Some(network) = network else {
        return Ok(None);
    };
    if args.nodiscover || !args.discovery_v4 {
        tracing::info!("peer discovery off");
        return Ok(None);
    }
    let key = match (&args.nodekeyhex, &args.nodekey) {
        (Some(hex), _) => moat_p2p::parse_node_key(hex)?,
        (None, Some(path)) => moat_p2p::load_or_create_node_key(path)?,
        (None, None) => moat_p2p::load_or_create_node_key(&datadir.join("nodekey"))?,
    };
    let genesis_timestamp = chain
        .header_by_number(0)
        .ok()
        .flatten()
        .map_or(0, |h| h.timestamp);
    let port = args.discovery_port.unwrap_or(args.port);
    let mut cfg = Discv4Config::new(key, SocketAddr::new(args.p2p_addr, port));
    cfg.external_ip = external_ip;
    let tcp_port = network.listen_addr().map_or(args.port, |a| a.port());
    cfg.tcp_port = tcp_port;
    cfg.fork_id = Some(fork_id(chain, genesis_timestamp));
    for url in args.bootnodes.iter().filter(|u| !u.is_empty()) {
        let node: NodeRecord = url
            .parse()
            .map_err(|e| format!("--bootnodes: {url}: {e}"))?;
        cfg.bootnodes.push(node);
    }
    let disc = Discv4::spawn(cfg).await.map_err(|e| e.to_string())?;
    if disc.local_addr().port() != tcp_port {
        println!("discovery: {}", disc.local_enode());
    }
    tracing::info!(enr = %disc.local_enr(), "node record");

    // Found nodes fill the network's outbound slots, if their fork id fits our chain.
    let filter = chain
        .config()
        .fork_filter(chain.genesis_hash(), genesis_timestamp);
    let head_chain = chain.clone();
    let fork_ok: ForkCheck = Arc::new(move |remote: &ForkId| {
        let (number, timestamp) = head_chain
            .head_header()
            .map(|h| (h.number, h.timestamp))
            .unwrap_or((0, genesis_timestamp));
        filter.validate(*remote, number, timestamp).is_ok()
    });
    spawn_dialer(
        disc.clone(),
        Arc::new(NetTarget(network.clone())),
        fork_ok,
        DialerConfig::default(),
    );

    // Our record follows the chain across forks.
    let (updater, chain) = (disc.clone(), chain.clone());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(FORK_ID_CHECK).await;
            updater.set_fork_id(fork_id(&chain, genesis_timestamp));
        }
    });
    Ok(Some(disc))
}

#[cfg(test)]
mod tests {
    use super::parse_nat;

    #[test]
    fn nat_values() {
        assert_eq!(parse_nat("none"), Ok(None));
        assert_eq!(
            parse_nat("extip:1.2.3.4"),
            Ok(Some("1.2.3.4".parse().unwrap()))
        );
        assert!(parse_nat("extip:nope").is_err());
        assert!(parse_nat("upnp").is_err());
    }
}
