//! The syncer seen from JSON-RPC: `eth_syncing`, and the engine API handing it heads
//! the node does not hold.
//!
//! The RPC crate does not depend on the sync crate; the node hands it a [`SyncService`].

use crate::RpcContext;
use crate::json::q;
use crate::params::RpcResult;
use alloy_primitives::B256;
use jsonrpsee::types::Params;
use serde_json::{Value, json};

/// Where a running sync stands (`eth_syncing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncStatus {
    /// The head's number when this sync started (`startingBlock`).
    pub starting_block: u64,
    /// The head's number now (`currentBlock`).
    pub current_block: u64,
    /// The sync target's number (`highestBlock`).
    pub highest_block: u64,
    /// Accounts a snap sync downloaded (`syncedAccounts`; zero when the state was not
    /// downloaded, as for the other snap figures).
    pub synced_accounts: u64,
    /// Storage slots a snap sync downloaded (`syncedStorage`).
    pub synced_storage: u64,
    /// Contract codes a snap sync downloaded (`syncedBytecodes`).
    pub synced_bytecodes: u64,
    /// Trie nodes fetched by healing after a pivot move (`healedTrienodes`).
    pub healed_trienodes: u64,
    /// Bytes of those trie nodes (`healedTrienodeBytes`).
    pub healed_trienode_bytes: u64,
    /// Contract codes fetched by healing (`healedBytecodes`).
    pub healed_bytecodes: u64,
    /// Trie nodes healing still has to fetch (`healingTrienodes`).
    pub healing_trienodes: u64,
    /// Contract codes healing still has to fetch (`healingBytecode`).
    pub healing_bytecode: u64,
}

/// What the RPC and engine servers ask of the node's syncer.
pub trait SyncService: Send + Sync + std::fmt::Debug {
    /// The consensus client's head: fetch the chain up to it from peers if this node
    /// does not hold it. A later call replaces the target, so a head the node holds
    /// also ends a sync towards an older one.
    fn sync_to(&self, head: B256);
    /// `None` unless a sync is running.
    fn status(&self) -> Option<SyncStatus>;
    /// Whether the syncer refused `hash` (a target or block whose chain holds a block
    /// that failed validation): the latest valid hash and why. The engine API answers
    /// INVALID for it rather than SYNCING.
    fn invalid(&self, _hash: B256) -> Option<(Option<B256>, String)> {
        None
    }
}

/// `eth_syncing`: `false`, or geth's object while a sync runs.
pub(crate) fn syncing(ctx: &RpcContext, _: Params<'_>) -> RpcResult<Value> {
    let Some(s) = ctx.sync.as_ref().and_then(|s| s.status()) else {
        return Ok(Value::Bool(false));
    };
    Ok(json!({
        "startingBlock": q(s.starting_block),
        "currentBlock": q(s.current_block),
        "highestBlock": q(s.highest_block),
        "syncedAccounts": q(s.synced_accounts),
        "syncedStorage": q(s.synced_storage),
        "syncedBytecodes": q(s.synced_bytecodes),
        "healedTrienodes": q(s.healed_trienodes),
        "healedTrienodeBytes": q(s.healed_trienode_bytes),
        "healedBytecodes": q(s.healed_bytecodes),
        "healingTrienodes": q(s.healing_trienodes),
        "healingBytecode": q(s.healing_bytecode),
    }))
}
