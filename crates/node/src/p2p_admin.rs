//! The p2p network as the RPC server's `admin_` namespace sees it.

use moat_p2p::{Enode, Network};
use moat_rpc::AddPeerError;
use serde_json::{Value, json};

#[derive(Debug)]
pub(crate) struct Admin(pub Network);

impl moat_rpc::PeerAdmin for Admin {
    fn add_peer(&self, enode: &str) -> Result<(), AddPeerError> {
        let enode: Enode = enode
            .parse()
            .map_err(|e: moat_p2p::EnodeError| AddPeerError::InvalidEnode(e.to_string()))?;
        self.0
            .add_peer(enode)
            .map_err(|full| AddPeerError::Full(full.0))
    }

    fn remove_peer(&self, enode: &str) -> Result<bool, String> {
        let enode: Enode = enode
            .parse()
            .map_err(|e: moat_p2p::EnodeError| e.to_string())?;
        Ok(self.0.remove_peer(&enode.id))
    }

    fn peers(&self) -> Value {
        let peers: Vec<Value> = self
            .0
            .peers()
            .into_iter()
            .map(|p| {
                json!({
                    "id": alloy_primitives::hex::encode(alloy_primitives::keccak256(p.id)),
                    "enode": Enode { id: p.id, addr: p.addr }.to_string(),
                    "name": p.client_id,
                    "caps": [format!("eth/{}", p.eth_version)],
                    "network": {
                        "remoteAddress": p.addr.to_string(),
                        "inbound": p.inbound,
                        "static": !p.inbound,
                    },
                    "protocols": { "eth": { "version": p.eth_version, "reputation": p.reputation } },
                    // moat's: the peer's admission CPU account.
                    "admission": p.budget.map(|b| json!({
                        "cpuMicros": b.cpu_us,
                        "txsAdmitted": b.admitted,
                        "txsRejected": b.rejected,
                        "budgetMicros": b.tokens_us,
                        "budgetRateMicrosPerSec": b.rate_us,
                        "throttled": b.throttled,
                        "state": b.state.as_str(),
                    })),
                    // moat's: the delivery tracker's moving averages of its txs that
                    // blocks included and finality confirmed (a cull spares the best).
                    "delivered": p.delivered.map(|(included, finalized)| json!({
                        "included": included,
                        "finalized": finalized,
                    })),
                })
            })
            .collect();
        Value::Array(peers)
    }

    fn node_info(&self) -> Value {
        let id = self.0.local_id();
        let port = self.0.listen_addr().map_or(0, |a| a.port());
        json!({
            "id": alloy_primitives::hex::encode(alloy_primitives::keccak256(id)),
            "name": self.0.client_id(),
            "enode": self.0.enode(),
            "ip": self.0.listen_addr().map(|a| a.ip().to_string()),
            "ports": { "discovery": 0, "listener": port },
            "listenAddr": self.0.listen_addr().map(|a| a.to_string()),
            "protocols": { "eth": { "network": self.0.network_id(), "genesis": self.0.genesis_hash() } },
        })
    }

    fn peer_count(&self) -> usize {
        self.0.peer_count()
    }
}
