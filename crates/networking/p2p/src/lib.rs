//! moat's devp2p stack, from the TCP stream to the pool.
//!
//! - [`rlpx`]: the encrypted transport (ECIES handshake with EIP-8, frame codec with
//!   keccak MACs).
//! - [`p2p`]: the base protocol (Hello, Disconnect, Ping/Pong) and snappy.
//! - [`eth`]: eth/68 to eth/73 messages (eth/72's cells, eth/73's senders and nonces).
//! - [`session`]: Hello and Status handshakes and message framing, shared by the node and
//!   by anything that plays a peer of it (tests, load tools).
//! - [`fetcher`]: announcements → `GetPooledTransactions`, and `validate_requested`.
//! - [`serve`]: headers, bodies and receipts from the store.
//! - [`snap`]: snap/1 messages, and account and storage ranges, bytecodes and trie
//!   nodes served from the last 128 state roots with their boundary proofs.
//! - [`requests`]: headers and bodies asked of peers (for sync), with the checks their
//!   answers pass.
//! - [`network`]: the service: peers, gossip, admission of peers' transactions, chain
//!   requests matched to their answers by request id, and the consequences of faults.
//! - [`gate`]: who may start an inbound handshake and for how long (caps per address and
//!   per subnet, slots kept for peers seen before, short timeouts under load).

pub mod client;
pub mod eth;
pub mod fetcher;
pub mod gate;
pub mod network;
pub mod p2p;
pub mod requests;
pub mod rlpx;
pub mod serve;
pub mod session;
pub mod snap;

pub use gate::{GateConfig, HandshakeGate};
pub use network::{
    MAX_STATIC_PEERS, Network, NetworkConfig, NetworkError, PeerInfo, StaticPeersFull,
};
pub use requests::{HeadersRequest, RequestError, SealedHeader, SyncPeer};

use moat_common::enode::EnodeUrl;
use rlpx::PeerId;
use std::net::SocketAddr;

/// A node address: `enode://<128 hex id>@<ip>:<port>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Enode {
    /// The node id (secp256k1 public key, 64 bytes).
    pub id: PeerId,
    /// Its RLPx TCP address.
    pub addr: SocketAddr,
}

pub use moat_common::enode::EnodeError;

impl std::str::FromStr for Enode {
    type Err = EnodeError;

    /// Reads an enode URL ([`moat_common::enode`]); a `?discport=` is checked and
    /// dropped: RLPx needs only the TCP address.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let url: EnodeUrl = s.parse()?;
        Ok(Enode {
            id: url.id,
            addr: url.addr,
        })
    }
}

impl std::fmt::Display for Enode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        EnodeUrl::new(self.id, self.addr).fmt(f)
    }
}

/// Reads a node key: 64 hex characters (geth's `nodekey` file format).
pub fn parse_node_key(text: &str) -> Result<secp256k1::SecretKey, String> {
    let text = text.trim();
    let text = text.strip_prefix("0x").unwrap_or(text);
    let bytes = hex::decode(text).map_err(|_| "node key is not hex".to_string())?;
    let bytes: [u8; 32] = bytes
        .try_into()
        .map_err(|_| "node key must be 32 bytes".to_string())?;
    secp256k1::SecretKey::from_byte_array(bytes).map_err(|_| "node key is out of range".to_string())
}

/// Loads the node key from `path`, creating a random one there the first time.
pub fn load_or_create_node_key(path: &std::path::Path) -> Result<secp256k1::SecretKey, String> {
    if path.exists() {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        return parse_node_key(&text).map_err(|e| format!("{}: {e}", path.display()));
    }
    let key = loop {
        let mut b = [0u8; 32];
        getrandom::fill(&mut b).map_err(|e| format!("no randomness for a node key: {e}"))?;
        if let Ok(k) = secp256k1::SecretKey::from_byte_array(b) {
            break k;
        }
    };
    std::fs::write(path, hex::encode(key.secret_bytes()))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enode_round_trip_and_errors() {
        let key = parse_node_key(&"11".repeat(32)).unwrap();
        let id = rlpx::peer_id(&key.public_key(secp256k1::SECP256K1));
        let url = format!("enode://{}@127.0.0.1:30303?discport=0", hex::encode(id));
        let e: Enode = url.parse().unwrap();
        assert_eq!(e.id, id);
        assert_eq!(e.to_string(), url.split('?').next().unwrap());
        assert_eq!("http://x".parse::<Enode>(), Err(EnodeError::Scheme));
        assert_eq!(
            "enode://abcd@1.2.3.4:1".parse::<Enode>(),
            Err(EnodeError::Id)
        );
        let bad_key = format!("enode://{}@1.2.3.4:1", "00".repeat(64));
        assert_eq!(bad_key.parse::<Enode>(), Err(EnodeError::Key));
        let no_port = format!("enode://{}@1.2.3.4", hex::encode(id));
        assert_eq!(no_port.parse::<Enode>(), Err(EnodeError::Addr));
        assert!(parse_node_key("zz").is_err());
        assert!(parse_node_key(&"00".repeat(32)).is_err());
    }
}
