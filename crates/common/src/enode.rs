//! Enode URLs, how devp2p names a node: `enode://<id>@<ip>:<tcp>[?discport=<udp>]`,
//! the id being the node's public key. The one reader of them: the p2p network's static
//! peers and `admin_addPeer`, and discovery's bootnodes, all parse here.

use alloy_primitives::B512;
use secp256k1::PublicKey;
use std::net::SocketAddr;

/// The id of the node with public key `pk`: the uncompressed secp256k1 key without the
/// leading `0x04` byte (64 bytes, `x || y`), as enode URLs and discv4 packets carry it.
pub fn node_id(pk: &PublicKey) -> B512 {
    let full = pk.serialize_uncompressed();
    B512::from_slice(&full[1..])
}

/// The public key a node id stands for, if it is a point on the curve.
pub fn public_key(id: &B512) -> Option<PublicKey> {
    let mut full = [0u8; 65];
    full[0] = 0x04;
    full[1..].copy_from_slice(id.as_slice());
    PublicKey::from_byte_array_uncompressed(full).ok()
}

/// An enode URL's parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EnodeUrl {
    /// The node's id (see [`node_id`]), a valid public key.
    pub id: B512,
    /// The TCP (RLPx) address.
    pub addr: SocketAddr,
    /// The UDP (discovery) port: `?discport=` when given, else the TCP port.
    pub udp: u16,
}

impl EnodeUrl {
    /// A node whose discovery port is its TCP port.
    pub fn new(id: B512, addr: SocketAddr) -> Self {
        EnodeUrl {
            id,
            addr,
            udp: addr.port(),
        }
    }
}

/// Why an enode URL does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnodeError {
    /// The URL does not start with `enode://`.
    #[error("enode URL must start with enode://")]
    Scheme,
    /// The node id is not 128 hex characters (64 bytes).
    #[error("enode id must be 128 hex characters")]
    Id,
    /// The node id is not an uncompressed secp256k1 public key on the curve.
    #[error("enode id is not a valid public key")]
    Key,
    /// The part after `@` is not `<ip>:<port>`.
    #[error("enode address must be <ip>:<port>")]
    Addr,
    /// The `?discport=` query is not a port number.
    #[error("discport must be a port number")]
    DiscPort,
}

impl std::str::FromStr for EnodeUrl {
    type Err = EnodeError;

    /// Reads `enode://<id>@<ip>:<tcp>[?discport=<udp>]`; other query pairs are ignored.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let rest = s
            .trim()
            .strip_prefix("enode://")
            .ok_or(EnodeError::Scheme)?;
        let (id, addr) = rest.split_once('@').ok_or(EnodeError::Addr)?;
        let bytes = hex::decode(id).map_err(|_| EnodeError::Id)?;
        let id: [u8; 64] = bytes.try_into().map_err(|_| EnodeError::Id)?;
        let id = B512::from(id);
        public_key(&id).ok_or(EnodeError::Key)?;
        let (addr, query) = addr.split_once('?').unwrap_or((addr, ""));
        let addr: SocketAddr = addr.parse().map_err(|_| EnodeError::Addr)?;
        let mut url = EnodeUrl::new(id, addr);
        for pair in query.split('&') {
            if let Some(v) = pair.strip_prefix("discport=") {
                url.udp = v.parse().map_err(|_| EnodeError::DiscPort)?;
            }
        }
        Ok(url)
    }
}

impl std::fmt::Display for EnodeUrl {
    /// `enode://<id>@<ip>:<tcp>`, with `?discport=<udp>` when the ports differ.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "enode://{}@{}", hex::encode(self.id), self.addr)?;
        if self.udp != self.addr.port() {
            write!(f, "?discport={}", self.udp)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enode_urls_round_trip_and_errors_are_typed() {
        let key = secp256k1::SecretKey::from_byte_array([5; 32]).unwrap();
        let pk = key.public_key(secp256k1::SECP256K1);
        let id = node_id(&pk);
        assert_eq!(public_key(&id), Some(pk));
        let hex = hex::encode(id);
        let text = format!("enode://{hex}@127.0.0.1:30303?discport=30301");
        let url: EnodeUrl = format!(" {text}\n").parse().unwrap();
        assert_eq!((url.id, url.addr.port(), url.udp), (id, 30303, 30301));
        assert_eq!(url.to_string(), text);
        let url: EnodeUrl = format!("enode://{hex}@[::1]:1?x=y").parse().unwrap();
        assert_eq!((url.addr.port(), url.udp), (1, 1));
        assert_eq!(url.to_string(), format!("enode://{hex}@[::1]:1"));
        for (bad, err) in [
            ("http://x".to_string(), EnodeError::Scheme),
            ("enode://abcd@1.2.3.4:1".to_string(), EnodeError::Id),
            (
                format!("enode://{}@1.2.3.4:1", "00".repeat(64)),
                EnodeError::Key,
            ),
            (format!("enode://{hex}"), EnodeError::Addr),
            (format!("enode://{hex}@1.2.3.4"), EnodeError::Addr),
            (
                format!("enode://{hex}@1.2.3.4:1?discport=x"),
                EnodeError::DiscPort,
            ),
        ] {
            assert_eq!(bad.parse::<EnodeUrl>(), Err(err), "{bad}");
        }
    }
}
