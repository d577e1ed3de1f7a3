//! Entry points for the fuzz targets (`fuzz/`): the request decoders that run before the
//! method tables (the plain `eth_sendRawTransaction` path, the batch count, the engine
//! API's JWT check), the EIP-712 parser, and the engine API's payload parser with the
//! encoder its round trip needs.
//! The method tables themselves are reached as a client reaches them, through
//! [`crate::module`] and [`crate::engine::methods`]. Not part of the crate's API.

use alloy_primitives::{B256, Bytes};
use jsonrpsee::types::Id;
use serde_json::Value;

pub use crate::engine::auth::verify_token;
pub use crate::engine::types::{NewPayload, Version, parse_new_payload, payload_json};

/// The id and transaction bytes of a body that [`crate::RawTxLayer`] answers itself.
pub fn raw_send_transaction(body: &[u8]) -> Option<(Id<'_>, Bytes)> {
    crate::raw_tx::parse(body)
}

/// The id put on geth's "batch too large" answer when `body` is a batch of more than
/// `limit` calls.
pub fn batch_over_limit(body: &[u8], limit: usize) -> Option<Id<'static>> {
    crate::limits::batch_over_limit(body, limit)
}

/// The EIP-712 signing hash of `eth_signTypedData_v4`'s typed data.
pub fn typed_data_hash(typed: &Value) -> Result<B256, String> {
    crate::typed_data::signing_hash(typed).map_err(|e| e.to_string())
}
