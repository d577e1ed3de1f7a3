//! The syncer wired to the rest of the node: the engine API and `eth_syncing` reach it
//! through moat-rpc's `SyncService`, and the heads it imports reach newHeads
//! subscribers and the p2p layer (block range updates).

use alloy_primitives::B256;
use moat_blockchain::chain::Chain;
use moat_p2p::Network;
use moat_rpc::{RpcContext, SyncService, SyncStatus};
use moat_sync::{SyncConfig, SyncHandle};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

#[derive(Debug)]
pub struct Sync(pub SyncHandle);

impl SyncService for Sync {
    fn sync_to(&self, head: B256) {
        self.0.set_target(head);
    }

    fn invalid(&self, hash: B256) -> Option<(Option<B256>, String)> {
        self.0.invalid(&hash).map(|v| (v.latest_valid, v.why))
    }

    fn status(&self) -> Option<SyncStatus> {
        self.0.progress().map(|p| SyncStatus {
            starting_block: p.starting_block,
            current_block: p.current_block,
            highest_block: p.highest_block,
        })
    }
}

/// Starts the syncer over the network's peers; `synced` is the node's "at the head"
/// flag, which it clears while behind and sets once at the target.
pub fn start(chain: &Chain, net: &Network, synced: Arc<AtomicBool>, rpc: RpcContext) -> Arc<Sync> {
    let handle = moat_sync::spawn(
        chain.clone(),
        Arc::new(net.clone()),
        synced,
        SyncConfig {
            // The chain reads senders from the pool's cache (see run.rs): the syncer
            // recovers them into it ahead of the importer.
            senders: Some(rpc.pool.sender_cache().clone()),
            ..SyncConfig::default()
        },
    );
    let mut heads = handle.subscribe_heads();
    let (chain, net) = (chain.clone(), net.clone());
    tokio::spawn(async move {
        while heads.changed().await.is_ok() {
            let hash = *heads.borrow_and_update();
            if let Ok(Some(header)) = chain.header(&hash) {
                rpc.notify_new_head(&header);
            }
            net.on_new_head();
        }
    });
    Arc::new(Sync(handle))
}
