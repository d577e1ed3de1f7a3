//! The syncer wired to the rest of the node: the engine API and `eth_syncing` reach it
//! through moat-rpc's `SyncService`. The heads it imports are published by the chain:
//! the pool follows them, and newHeads subscribers and the p2p layer hear of them from
//! the pool's upkeep task (run.rs).

use alloy_primitives::B256;
use moat_blockchain::chain::Chain;
use moat_p2p::Network;
use moat_rpc::{RpcContext, SyncService, SyncStatus};
use moat_sync::snap::SnapConfig;
use moat_sync::{SyncConfig, SyncHandle};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

#[derive(Debug)]
pub(crate) struct Sync(pub SyncHandle);

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
            synced_accounts: p.snap.map_or(0, |s| s.accounts),
            synced_storage: p.snap.map_or(0, |s| s.slots),
            synced_bytecodes: p.snap.map_or(0, |s| s.codes),
            healed_trienodes: p.snap.map_or(0, |s| s.heal.nodes),
            healed_trienode_bytes: p.snap.map_or(0, |s| s.heal.node_bytes),
            healed_bytecodes: p.snap.map_or(0, |s| s.heal.codes),
            healing_trienodes: p.snap.map_or(0, |s| s.heal.pending_nodes),
            healing_bytecode: p.snap.map_or(0, |s| s.heal.pending_codes),
        })
    }
}

/// Starts the syncer over the network's peers; `synced` is the node's "at the head"
/// flag, which it clears while behind and sets once at the target. With `snap`, a
/// datadir at genesis downloads the state at a pivot first (`--syncmode snap`), asking
/// `snap_response_bytes` per request (`--snap.responsebytes`).
pub(crate) fn start(
    chain: &Chain,
    net: &Network,
    synced: Arc<AtomicBool>,
    rpc: RpcContext,
    snap: bool,
    snap_response_bytes: u64,
) -> Arc<Sync> {
    let handle = moat_sync::spawn(
        chain.clone(),
        Arc::new(net.clone()),
        synced,
        SyncConfig {
            // The chain reads senders from the pool's cache (see run.rs): the syncer
            // recovers them into it ahead of the importer.
            senders: Some(rpc.pool.sender_cache().clone()),
            snap,
            snap_cfg: SnapConfig {
                response_bytes: snap_response_bytes,
                ..SnapConfig::default()
            },
            ..SyncConfig::default()
        },
    );
    Arc::new(Sync(handle))
}
