//! `admin_` methods and `net_peerCount`: the p2p layer seen from JSON-RPC.
//!
//! The RPC crate does not depend on the p2p crate; the node hands it a [`PeerAdmin`].

use crate::RpcContext;
use crate::json::q;
use crate::params::{RpcResult, invalid_params, server_error};
use jsonrpsee::types::Params;
use serde_json::Value;

/// Why `admin_addPeer` refused a peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddPeerError {
    /// The text is not a valid `enode://` URL; the p2p layer's reason.
    #[error("invalid enode: {0}")]
    InvalidEnode(String),
    /// The static-peer list is full.
    #[error("too many static peers: at most {0}; remove some with admin_removePeer")]
    Full(usize),
}

/// What the `admin_` namespace asks of the p2p layer.
pub trait PeerAdmin: Send + Sync + std::fmt::Debug {
    /// Adds a static peer and dials it; the error says why it is refused.
    fn add_peer(&self, enode: &str) -> Result<(), AddPeerError>;
    /// Disconnects a peer and forgets it as static; whether it was connected.
    fn remove_peer(&self, enode: &str) -> Result<bool, String>;
    /// geth's `admin_peers` list.
    fn peers(&self) -> Value;
    /// geth's `admin_nodeInfo` object.
    fn node_info(&self) -> Value;
    /// Peers connected now (`net_peerCount`).
    fn peer_count(&self) -> usize;
}

fn admin(ctx: &RpcContext) -> RpcResult<&dyn PeerAdmin> {
    ctx.admin
        .as_deref()
        .ok_or_else(|| server_error("p2p networking is disabled"))
}

fn enode_param(params: &Params<'_>) -> RpcResult<String> {
    params
        .parse::<(String,)>()
        .map(|(s,)| s)
        .map_err(|e| invalid_params(e.to_string()))
}

pub(crate) fn add_peer(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let enode = enode_param(&params)?;
    admin(ctx)?.add_peer(&enode).map_err(|e| match e {
        AddPeerError::InvalidEnode(_) => invalid_params(e.to_string()),
        AddPeerError::Full(_) => server_error(e.to_string()),
    })?;
    Ok(Value::Bool(true))
}

pub(crate) fn remove_peer(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let enode = enode_param(&params)?;
    admin(ctx)?
        .remove_peer(&enode)
        .map(Value::Bool)
        .map_err(|e| invalid_params(format!("invalid enode: {e}")))
}

pub(crate) fn peers(ctx: &RpcContext, _: Params<'_>) -> RpcResult<Value> {
    Ok(admin(ctx)?.peers())
}

pub(crate) fn node_info(ctx: &RpcContext, _: Params<'_>) -> RpcResult<Value> {
    Ok(admin(ctx)?.node_info())
}

pub(crate) fn peer_count(ctx: &RpcContext, _: Params<'_>) -> RpcResult<Value> {
    Ok(q(ctx.admin.as_ref().map_or(0, |a| a.peer_count()) as u64))
}
