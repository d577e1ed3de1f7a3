//! moat's node discovery: how the node finds peers on its own.
//!
//! Start with [`Discv4::spawn`]: give it the node key, a UDP address, bootnodes and the
//! chain's fork id; it answers other nodes, fills a Kademlia table and hands out what it
//! found ([`Discv4::random_nodes`], [`Discv4::subscribe`]). The node offers those to the
//! p2p network through [`dialer`].
//!
//! ```text
//!  UDP ─▶ packet::decode ─▶ Ping ─▶ Pong (+ Ping back if unbonded) ─▶ table (inbound)
//!   (hash, sig, rlp)      ├ Pong ─▶ pending request? ─▶ bond (12 h) ─▶ ENRRequest if newer
//!                         ├ FindNode ─▶ bonded? ─▶ Neighbors (≤ 12 per packet)
//!                         ├ ENRRequest ─▶ bonded? ─▶ ENRResponse (our ENR)
//!                         └ Neighbors / ENRResponse ─▶ pending request? ─▶ lookup
//!  refresh loop: bootnodes ─▶ lookup(self) + lookup(random) ─▶ table ─▶ subscribers
//!  revalidation loop: ping one node every few seconds; dead ones give way to replacements
//! ```
//!
//! The modules, bottom up:
//! - [`enr`]: node records (EIP-778, "v4" scheme) and their `eth` fork id entry
//!   (`[[hash, next]]`, EIP-2124), written here rather than taken from a
//!   crate so they use the workspace's secp256k1.
//! - [`packet`]: the discv4 codec, all six packet types; typed errors, never panics.
//! - [`table`]: the node table: 256 buckets by log distance, 16 entries each, ten
//!   replacements, and geth's IP limits against table poisoning.
//! - [`discv4`]: the service: bonding (endpoint proof), request/reply matching,
//!   iterative lookups, revalidation, refresh, metrics.
//! - [`discv5`]: discv5 through sigp's crate, on a port of its own, serving the same
//!   record (key, sequence number, `ip`, `tcp`, `eth`) with its own `udp` port.
//! - [`dialer`]: which found nodes the p2p network should dial, and when (fork id
//!   filter, backoff, rate limit), from any [`dialer::NodeSource`]; the network itself
//!   stays behind a trait.
//! - [`bootnodes`]: the public networks' bootnodes, as geth lists them.

pub mod bootnodes;
pub mod dialer;
pub mod discv4;
pub mod discv5;
pub mod enr;
pub mod packet;
mod rlp;
pub mod table;

pub use discv4::{Discv4, Discv4Config, Discv4Error};
pub use discv5::{Discv5, Discv5Config, Discv5Error};
pub use enr::{Enr, EnrError, EnrFields};
pub use moat_common::config::ForkId;

use alloy_primitives::{B256, B512, keccak256};
use std::net::{IpAddr, SocketAddr};

/// A node's identity: its uncompressed secp256k1 public key without the `0x04` prefix
/// (what enode URLs and discv4 packets carry).
pub type NodeId = B512;

/// [`node_id`] gives the [`NodeId`] of a public key, [`public_key`] the key behind an
/// id if it is a point on the curve.
pub use moat_common::enode::{EnodeError, EnodeUrl, node_id, public_key};

/// `keccak256(id)`: where a node sits in the Kademlia keyspace.
pub fn node_hash(id: &NodeId) -> B256 {
    keccak256(id)
}

/// The logarithmic distance of two keyspace positions: the bit length of `a xor b`
/// (0 for equal, 256 for the farthest).
pub fn log_distance(a: &B256, b: &B256) -> usize {
    for (i, (x, y)) in a.iter().zip(b.iter()).enumerate() {
        let d = x ^ y;
        if d != 0 {
            return 256 - i * 8 - d.leading_zeros() as usize;
        }
    }
    0
}

/// A node discovery knows of: its id, endpoints, and its record when it has fetched
/// it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRecord {
    /// The node's public key (64 bytes, uncompressed without the prefix).
    pub id: NodeId,
    /// The IP address discovery reaches it at.
    pub ip: IpAddr,
    /// Its discovery (UDP) port.
    pub udp: u16,
    /// Its RLPx (TCP) port; 0 when it announces none.
    pub tcp: u16,
    /// Its signed record (EIP-778), once fetched or received.
    pub enr: Option<Enr>,
}

impl NodeRecord {
    /// A node known by its endpoints only, without a record.
    pub fn new(id: NodeId, ip: IpAddr, udp: u16, tcp: u16) -> Self {
        NodeRecord {
            id,
            ip,
            udp,
            tcp,
            enr: None,
        }
    }

    /// A node from its record: needs an IP address and a UDP port.
    pub fn from_enr(enr: Enr) -> Option<Self> {
        let ip = enr.ip()?;
        let udp = enr.udp()?;
        let tcp = enr.tcp().unwrap_or(0);
        Some(NodeRecord {
            id: enr.id(),
            ip,
            udp,
            tcp,
            enr: Some(enr),
        })
    }

    /// Where to send it discovery packets.
    pub fn udp_addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.udp)
    }

    /// Where to dial it for RLPx.
    pub fn tcp_addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.tcp)
    }

    /// The fork id the node's record announces, if we have its record and it has one.
    pub fn fork_id(&self) -> Option<ForkId> {
        self.enr.as_ref().and_then(Enr::eth_fork_id)
    }

    /// `enode://<id>@<ip>:<tcp>`, with `?discport=<udp>` when the ports differ.
    pub fn enode_url(&self) -> String {
        EnodeUrl {
            id: self.id,
            addr: self.tcp_addr(),
            udp: self.udp,
        }
        .to_string()
    }
}

impl std::fmt::Display for NodeRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.enode_url())
    }
}

/// Why a bootnode string is neither an enode URL nor a usable ENR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeParseError {
    /// The string starts with neither `enode://` nor `enr:`.
    #[error("expected enode://<id>@<ip>:<port> or enr:...")]
    Scheme,
    /// The enode URL is malformed.
    #[error(transparent)]
    Enode(#[from] EnodeError),
    /// The `enr:` record does not decode or verify.
    #[error("{0}")]
    Enr(#[from] EnrError),
    /// The record names no IP address or UDP port to reach the node at.
    #[error("record has no IP address and UDP port")]
    EnrNoEndpoint,
}

impl std::str::FromStr for NodeRecord {
    type Err = NodeParseError;

    /// Reads `enode://<id>@<ip>:<tcp>[?discport=<udp>]` or an `enr:` record.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.starts_with("enr:") {
            let enr: Enr = s.parse()?;
            return NodeRecord::from_enr(enr).ok_or(NodeParseError::EnrNoEndpoint);
        }
        if !s.starts_with("enode://") {
            return Err(NodeParseError::Scheme);
        }
        let url: EnodeUrl = s.parse()?;
        Ok(NodeRecord::new(
            url.id,
            url.addr.ip(),
            url.udp,
            url.addr.port(),
        ))
    }
}

/// Whether an address is on a local network (loopback, private, link-local): such
/// addresses are exempt from the table's IP limits and are not relayed to nodes
/// outside local networks (geth's `netutil.AddrIsLAN`).
pub fn is_lan(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_private() || v4.is_link_local(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_lan(&IpAddr::V4(v4)),
            None => {
                v6.is_loopback()
                    || (v6.segments()[0] & 0xfe00) == 0xfc00
                    || (v6.segments()[0] & 0xffc0) == 0xfe80
            }
        },
    }
}

/// Whether a node at `addr` may be sent to a node at `sender` (geth's
/// `netutil.CheckRelayAddr`): never unspecified, multicast or documentation addresses;
/// loopback only to loopback senders; LAN only to LAN senders.
pub fn relay_allowed(sender: &IpAddr, addr: &IpAddr) -> bool {
    if addr.is_unspecified() || addr.is_multicast() || is_special(addr) {
        return false;
    }
    if addr.is_loopback() && !sender.is_loopback() {
        return false;
    }
    if is_lan(addr) && !is_lan(sender) {
        return false;
    }
    true
}

/// Special-use ranges no node should be at (broadcast, documentation, reserved).
fn is_special(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_broadcast()
                || v4.is_documentation()
                || o[0] == 0
                || o[0] >= 240
                || (o[0] == 198 && (o[1] & 0xfe) == 18)
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            (s[0] == 0x2001 && s[1] == 0x0db8) || v6.is_multicast()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secp256k1::{SECP256K1, SecretKey};

    #[test]
    fn enode_urls_parse_with_discport() {
        let key = SecretKey::from_byte_array([5; 32]).unwrap();
        let id = node_id(&key.public_key(SECP256K1));
        let hex = alloy_primitives::hex::encode(id);
        let n: NodeRecord = format!("enode://{hex}@127.0.0.1:30303?discport=30301")
            .parse()
            .unwrap();
        assert_eq!((n.tcp, n.udp), (30303, 30301));
        assert_eq!(
            n.enode_url(),
            format!("enode://{hex}@127.0.0.1:30303?discport=30301")
        );
        let n: NodeRecord = format!("enode://{hex}@[::1]:1").parse().unwrap();
        assert_eq!((n.tcp, n.udp), (1, 1));
        assert_eq!("x".parse::<NodeRecord>(), Err(NodeParseError::Scheme));
        assert_eq!(
            format!("enode://{}@1.2.3.4:1", "00".repeat(64)).parse::<NodeRecord>(),
            Err(NodeParseError::Enode(EnodeError::Key))
        );
        let enr = Enr::build(
            &key,
            1,
            &EnrFields {
                ip: Some(IpAddr::from([127, 0, 0, 1])),
                udp: Some(9),
                tcp: Some(10),
                fork_id: None,
            },
        )
        .unwrap();
        let n: NodeRecord = enr.to_text().parse().unwrap();
        assert_eq!((n.id, n.udp, n.tcp), (id, 9, 10));
    }

    #[test]
    fn distances() {
        let a = B256::ZERO;
        let mut b = B256::ZERO;
        assert_eq!(log_distance(&a, &b), 0);
        b.0[31] = 1;
        assert_eq!(log_distance(&a, &b), 1);
        b.0[0] = 0x80;
        assert_eq!(log_distance(&a, &b), 256);
        b.0[0] = 0x01;
        assert_eq!(log_distance(&a, &b), 249);
    }

    #[test]
    fn relay_rules() {
        let lo = IpAddr::from([127, 0, 0, 1]);
        let lan = IpAddr::from([192, 168, 1, 2]);
        let wan = IpAddr::from([8, 8, 8, 8]);
        assert!(relay_allowed(&lo, &lo));
        assert!(!relay_allowed(&wan, &lo));
        assert!(!relay_allowed(&wan, &lan));
        assert!(relay_allowed(&lan, &wan));
        assert!(!relay_allowed(&wan, &IpAddr::from([0, 0, 0, 0])));
        assert!(!relay_allowed(&wan, &IpAddr::from([192, 0, 2, 1])));
        assert!(is_lan(&lo) && is_lan(&lan) && !is_lan(&wan));
    }
}
