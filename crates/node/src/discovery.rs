//! Peer discovery for the node: discv4 on the p2p port (or `--discovery.port`) and
//! discv5 on a port of its own (`--discovery.v5.port`), one node key and one record
//! (same sequence number, `ip`, `tcp` and `eth` fork id; each serves its own `udp`
//! port), and a dialer that offers what both find to the p2p network.
//!
//! Discovery runs only when p2p does (`--maxpeers` > 0), unless `--nodiscover`. It
//! starts from `--bootnodes` when given (enode URLs for discv4, `enr:` records for
//! both); otherwise from the built-in bootnodes of `--network mainnet|sepolia|hoodi`
//! ([`moat_discovery::bootnodes`]); a genesis file has none, so such a node answers
//! other nodes but looks for nobody. Records discv4 fetches are offered to discv5 too.

use crate::run::NodeArgs;
use moat_blockchain::chain::Chain;
use moat_discovery::bootnodes::PublicNetwork;
use moat_discovery::dialer::{DialTarget, DialerConfig, ForkCheck, NodeSource, spawn_dialer};
use moat_discovery::enr::EnrFields;
use moat_discovery::{Discv4, Discv4Config, Discv5, Discv5Config, Enr, ForkId, NodeId, NodeRecord};
use moat_p2p::{Enode, Network};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// discv5's flags (geth's `--discovery.v5`; the port flag is reth's, since the discv5
/// crate cannot share discv4's socket as geth's two protocols do).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct DiscoveryV5Args {
    /// Run discv5 discovery (geth's default: on; off with --discovery.v5=false or
    /// --nodiscover).
    #[arg(long = "discovery.v5", default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub discovery_v5: bool,
    /// UDP port of discv5 (0: any free port) [default: 9200 as reth's, or any free
    /// port when discv4's port is 0].
    #[arg(long = "discovery.v5.port")]
    pub discovery_v5_port: Option<u16>,
}

/// reth's default discv5 port.
const DEFAULT_V5_PORT: u16 = 9200;

/// The discv5 port: the flag, else 9200, else (discv4 on any free port) any free port.
fn v5_port(args: &NodeArgs) -> u16 {
    let v4_port = args.discovery_port.unwrap_or(args.port);
    args.v5
        .discovery_v5_port
        .unwrap_or(if v4_port == 0 { 0 } else { DEFAULT_V5_PORT })
}

/// The discovery services that run.
#[derive(Debug, Default)]
pub(crate) struct Discovery {
    pub v4: Option<Discv4>,
    pub v5: Option<Discv5>,
}

impl Drop for Discovery {
    /// Stops discv4's tasks when the node ends (discv5 stops with its socket).
    fn drop(&mut self) {
        let v5_nodes = self.v5.as_ref().map(Discv5::table_len);
        if let Some(v4) = &self.v4 {
            tracing::debug!(v4_nodes = v4.table_len(), ?v5_nodes, "discovery stops");
            v4.shutdown();
        }
    }
}

/// A `--bootnodes` item as a peer to keep connected: an enode URL, or an `enr:` record
/// with an IP and a TCP port (one without a TCP port is for discovery only: `None`).
pub(crate) fn bootnode_peer(url: &str) -> Result<Option<Enode>, String> {
    let node: NodeRecord = url
        .trim()
        .parse()
        .map_err(|e| format!("--bootnodes: {url}: {e}"))?;
    Ok((node.tcp != 0).then(|| Enode {
        id: node.id,
        addr: node.tcp_addr(),
    }))
}

/// The bootnodes: `--bootnodes` if given, else the named network's built-in lists.
/// Returns (discv4 nodes, discv5 records).
fn bootnodes(args: &NodeArgs) -> Result<(Vec<NodeRecord>, Vec<Enr>), String> {
    let given: Vec<&str> = args
        .bootnodes
        .iter()
        .map(|u| u.trim())
        .filter(|u| !u.is_empty())
        .collect();
    let (v4_urls, v5_urls): (Vec<&str>, Vec<&str>) = if given.is_empty() {
        match args.network.as_deref().and_then(PublicNetwork::from_name) {
            Some(net) => (net.v4_bootnodes().to_vec(), net.v5_bootnodes().to_vec()),
            None => (Vec::new(), Vec::new()),
        }
    } else {
        (given.clone(), given)
    };
    let mut v4 = Vec::new();
    for url in v4_urls {
        let node: NodeRecord = url
            .parse()
            .map_err(|e| format!("--bootnodes: {url}: {e}"))?;
        v4.push(node);
    }
    let mut v5 = Vec::new();
    for url in v5_urls.into_iter().filter(|u| u.starts_with("enr:")) {
        let node: NodeRecord = url
            .parse()
            .map_err(|e| format!("--bootnodes: {url}: {e}"))?;
        v5.extend(node.enr);
    }
    Ok((v4, v5))
}

/// How often our record's fork id is compared with the chain's (it changes when the
/// head passes a fork).
const FORK_ID_CHECK: Duration = Duration::from_secs(30);

/// `--nat`: `none` or `extip:<IP>`.
pub(crate) fn parse_nat(text: &str) -> Result<Option<IpAddr>, String> {
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

/// Starts discv4, discv5 and the dialer as the flags say.
pub(crate) async fn start_discovery(
    args: &NodeArgs,
    datadir: &Path,
    chain: &Chain,
    network: Option<&Network>,
) -> Result<Discovery, String> {
    let external_ip = parse_nat(&args.nat)?;
    let Some(network) = network else {
        return Ok(Discovery::default());
    };
    let (v4_on, v5_on) = (
        !args.nodiscover && args.discovery_v4,
        !args.nodiscover && args.v5.discovery_v5,
    );
    if !v4_on && !v5_on {
        tracing::info!("peer discovery off");
        return Ok(Discovery::default());
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
    let tcp_port = network.listen_addr().map_or(args.port, |a| a.port());
    let (v4_boot, v5_boot) = bootnodes(args)?;
    if args.bootnodes.iter().all(|u| u.trim().is_empty()) && !v4_boot.is_empty() {
        tracing::info!(
            network = args.network.as_deref().unwrap_or_default(),
            v4 = v4_boot.len(),
            v5 = v5_boot.len(),
            "discovery starts from the built-in bootnodes"
        );
    }

    let v4 = if v4_on {
        let port = args.discovery_port.unwrap_or(args.port);
        let mut cfg = Discv4Config::new(key, SocketAddr::new(args.p2p_addr, port));
        cfg.external_ip = external_ip;
        cfg.tcp_port = tcp_port;
        cfg.fork_id = Some(fork_id(chain, genesis_timestamp));
        cfg.bootnodes = v4_boot;
        let disc = Discv4::spawn(cfg).await.map_err(|e| e.to_string())?;
        if disc.local_addr().port() != tcp_port {
            println!("discovery: {}", disc.local_enode());
        }
        tracing::info!(enr = %disc.local_enr(), "node record (discv4)");
        Some(disc)
    } else {
        None
    };

    let v5 = if v5_on {
        // The discv4 record's fields and sequence number, or the same choices without it.
        let (fields, seq) = match &v4 {
            Some(v4) => {
                let r = v4.local_enr();
                let fields = EnrFields {
                    ip: r.ip(),
                    tcp: r.tcp(),
                    udp: None,
                    fork_id: r.eth_fork_id(),
                };
                (fields, r.seq())
            }
            None => {
                let ip = external_ip
                    .or_else(|| (!args.p2p_addr.is_unspecified()).then_some(args.p2p_addr))
                    .unwrap_or(IpAddr::from([127, 0, 0, 1]));
                let fields = EnrFields {
                    ip: Some(ip),
                    tcp: Some(tcp_port),
                    udp: None,
                    fork_id: Some(fork_id(chain, genesis_timestamp)),
                };
                let now_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_millis() as u64);
                (fields, now_ms)
            }
        };
        let disc = Discv5::spawn(Discv5Config {
            secret_key: key,
            listen: SocketAddr::new(args.p2p_addr, v5_port(args)),
            fields,
            seq,
            bootnodes: v5_boot,
        })
        .await
        .map_err(|e| format!("{e} (--discovery.v5.port {})", v5_port(args)))?;
        println!("discv5: {}", disc.local_enr());
        tracing::info!(addr = %disc.local_addr(), enr = %disc.local_enr(), "discv5 listening");
        Some(disc)
    } else {
        None
    };

    // Records discv4 fetches go to discv5's table too (geth answers both on one port).
    if let (Some(v4), Some(v5)) = (&v4, &v5) {
        let (mut found, v5) = (v4.subscribe(), v5.clone());
        tokio::spawn(async move {
            loop {
                match found.recv().await {
                    Ok(node) => {
                        if let Some(enr) = &node.enr {
                            v5.add_node(enr);
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                }
            }
        });
    }

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
    let mut sources: Vec<Arc<dyn NodeSource>> = Vec::new();
    if let Some(v4) = &v4 {
        sources.push(Arc::new(v4.clone()));
    }
    if let Some(v5) = &v5 {
        sources.push(Arc::new(v5.clone()));
    }
    spawn_dialer(
        sources,
        Arc::new(NetTarget(network.clone())),
        fork_ok,
        DialerConfig::default(),
    );

    // Our record follows the chain across forks (and discv4's learned IP).
    let (v4c, v5c, chain) = (v4.clone(), v5.clone(), chain.clone());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(FORK_ID_CHECK).await;
            let fork = fork_id(&chain, genesis_timestamp);
            if let Some(v4) = &v4c {
                v4.set_fork_id(fork);
                if let Some(v5) = &v5c {
                    v5.sync_record(&v4.local_enr());
                }
            } else if let Some(v5) = &v5c {
                v5.set_fork_id(fork);
            }
        }
    });
    Ok(Discovery { v4, v5 })
}

#[cfg(test)]
mod tests {
    use super::{bootnodes, parse_nat, v5_port};
    use crate::run::NodeArgs;
    use clap::Parser;
    use moat_discovery::bootnodes::{HOODI, MAINNET, SEPOLIA, V5};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        node: NodeArgs,
    }

    fn args(flags: &[&str]) -> NodeArgs {
        let mut argv = vec!["moat"];
        argv.extend_from_slice(flags);
        Cli::try_parse_from(argv).unwrap().node
    }

    #[test]
    fn builtin_bootnodes_only_for_the_named_networks_and_replaced_by_the_flag() {
        for (name, list) in [("mainnet", MAINNET), ("sepolia", SEPOLIA), ("hoodi", HOODI)] {
            let (v4, v5) = bootnodes(&args(&["--network", name])).unwrap();
            assert_eq!(v4.len(), list.len(), "{name}");
            assert_eq!(v5.len(), V5.len(), "{name}");
        }
        // A genesis file: none, so a test chain never reaches out.
        let (v4, v5) = bootnodes(&args(&["--network", "../genesis.json"])).unwrap();
        assert!(v4.is_empty() && v5.is_empty());
        // --bootnodes replaces the list: enode URLs for discv4, records for both.
        let key = secp256k1::SecretKey::from_byte_array([3; 32]).unwrap();
        let enr = moat_discovery::Enr::build(
            &key,
            1,
            &moat_discovery::EnrFields {
                ip: Some([127, 0, 0, 1].into()),
                udp: Some(30304),
                tcp: Some(30303),
                fork_id: None,
            },
        )
        .unwrap()
        .to_text();
        let other = secp256k1::SecretKey::from_byte_array([4; 32]).unwrap();
        let id = moat_discovery::node_id(&other.public_key(secp256k1::SECP256K1));
        let enode = format!(
            "enode://{}@127.0.0.1:30305",
            alloy_primitives::hex::encode(id)
        );
        let given = format!("{enode},{enr}");
        let (v4, v5) = bootnodes(&args(&["--network", "hoodi", "--bootnodes", &given])).unwrap();
        assert_eq!(v4.len(), 2);
        assert!(v4.iter().all(|n| n.ip.is_loopback()));
        assert_eq!(v5.len(), 1, "an enode URL carries no record for discv5");
        assert!(bootnodes(&args(&["--network", "hoodi", "--bootnodes", "enode://x"])).is_err());
    }

    #[test]
    fn bootnodes_as_peers() {
        let key = secp256k1::SecretKey::from_byte_array([5; 32]).unwrap();
        let id = moat_discovery::node_id(&key.public_key(secp256k1::SECP256K1));
        let record = |tcp| {
            moat_discovery::Enr::build(
                &key,
                1,
                &moat_discovery::EnrFields {
                    ip: Some([127, 0, 0, 1].into()),
                    udp: Some(30304),
                    tcp,
                    fork_id: None,
                },
            )
            .unwrap()
            .to_text()
        };
        let peer = super::bootnode_peer(&record(Some(30303))).unwrap().unwrap();
        assert_eq!((peer.id, peer.addr.port()), (id, 30303));
        assert_eq!(super::bootnode_peer(&record(None)).unwrap(), None);
        let url = format!(
            "enode://{}@127.0.0.1:30305?discport=1",
            alloy_primitives::hex::encode(id)
        );
        assert_eq!(
            super::bootnode_peer(&url).unwrap().unwrap().addr.port(),
            30305
        );
        assert!(super::bootnode_peer("enr:nope").is_err());
    }

    #[test]
    fn discv5_port_defaults() {
        assert_eq!(v5_port(&args(&["--port", "30303"])), 9200);
        assert_eq!(v5_port(&args(&["--port", "0"])), 0);
        assert_eq!(
            v5_port(&args(&["--port", "0", "--discovery.v5.port", "9300"])),
            9300
        );
        assert!(args(&[]).v5.discovery_v5);
        assert!(!args(&["--discovery.v5=false"]).v5.discovery_v5);
    }

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
