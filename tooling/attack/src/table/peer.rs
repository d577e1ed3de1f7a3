//! devp2p connections to the node: a probe that learns the node's own Status, and a
//! connection with a seeded key from a chosen local address (attackers keep theirs, or
//! come back from new /24s).

use alloy_primitives::{B256, U256};
use moat_p2p::Enode;
use moat_p2p::client::Client;
use moat_p2p::eth::Status;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;
/// Status mirroring the node's own (same genesis, fork id and head): always accepted.
pub(crate) async fn node_status(target: &Enode) -> Result<Status, String> {
    let key = secp256k1::SecretKey::from_byte_array([0x77; 32]).map_err(|e| e.to_string())?;
    let probe = Status {
        version: 70,
        network_id: 0,
        total_difficulty: U256::ZERO,
        head: B256::ZERO,
        genesis: B256::ZERO,
        fork_id: moat_common::config::ForkId {
            hash: [0; 4],
            next: 0,
        },
        earliest: 0,
        latest: 0,
    };
    let mut c = Client::connect(target, key, &[70, 69, 68], probe)
        .await
        .map_err(|e| format!("probe handshake: {e}"))?;
    let s = c.remote_status().clone();
    c.disconnect(moat_p2p::p2p::DisconnectReason::ClientQuitting)
        .await;
    Ok(s)
}

/// Connects with the key made from `seed`, from the local address `local` when given
/// (any 127.0.0.x is loopback on Linux), else from whatever the OS picks (127.0.0.1).
pub(crate) async fn connect_from(
    target: &Enode,
    seed: u64,
    status: &Status,
    local: Option<Ipv4Addr>,
) -> Option<Client> {
    let mut k = [0u8; 32];
    k[..8].copy_from_slice(&seed.to_be_bytes());
    k[31] = 7;
    let key = secp256k1::SecretKey::from_byte_array(k).ok()?;
    let connect = async {
        let Some(ip) = local else {
            return Client::connect(target, key, &[status.version], status.clone())
                .await
                .ok();
        };
        let sock = tokio::net::TcpSocket::new_v4().ok()?;
        sock.bind(SocketAddr::from((ip, 0))).ok()?;
        let stream = sock.connect(target.addr).await.ok()?;
        Client::connect_stream(stream, target.id, key, &[status.version], status.clone())
            .await
            .ok()
    };
    tokio::time::timeout(Duration::from_secs(5), connect)
        .await
        .ok()?
}
