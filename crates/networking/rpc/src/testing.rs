//! `testing_buildBlockV1(parentHash, attributes, transactions | null, extraData)`: builds
//! a block on the head as a payload job would, from the given transactions (all of them,
//! in order, or an error) or, with `null`, from the pool, and answers it as
//! `engine_getPayloadV4` would. Nothing is imported.

use crate::RpcContext;
use crate::blocks::hash_param;
use crate::engine::types::{Version, envelope_json};
use crate::eth::positional;
use crate::params::{RpcResult, internal, invalid_params, server_error};
use alloy_primitives::Bytes;
use jsonrpsee::types::Params;
use moat_blockchain::chain::ChainError;
use moat_blockchain::payload::MinerConfig;
use moat_common::SignedTransaction;
use serde_json::Value;

/// geth's default `--miner.gaslimit`, the target built blocks move toward.
const GAS_LIMIT_TARGET: u64 = 60_000_000;

pub(crate) fn build_block(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [p, a, t, e] = positional::<4>(&params)?;
    let parent = hash_param(p)?;
    let a = a.ok_or_else(|| invalid_params("missing value for required argument 1"))?;
    let attrs = crate::engine::api::parse_attributes(&a, Version::V3)?;
    let extra_data: Bytes = match e {
        None | Some(Value::Null) => Bytes::new(),
        Some(v) => serde_json::from_value(v)
            .map_err(|e| invalid_params(format!("invalid argument 3: {e}")))?,
    };
    if extra_data.len() > 32 {
        return Err(invalid_params("extra data longer than 32 bytes"));
    }
    let miner = MinerConfig {
        gas_limit: Some(GAS_LIMIT_TARGET),
        min_tip: 0,
        extra_data,
    };
    let built = match t {
        None | Some(Value::Null) => ctx
            .chain
            .build_payload_with(&ctx.pool, parent, &attrs, &miner),
        Some(Value::Array(raw)) => {
            let mut txs = Vec::with_capacity(raw.len());
            for (i, v) in raw.into_iter().enumerate() {
                let bytes: Bytes = serde_json::from_value(v)
                    .map_err(|e| invalid_params(format!("transaction {i}: {e}")))?;
                let tx = SignedTransaction::decode_2718(&bytes)
                    .map_err(|e| invalid_params(format!("transaction {i}: {e}")))?;
                let sender = tx
                    .recover_sender()
                    .map_err(|e| invalid_params(format!("transaction {i}: {e}")))?;
                txs.push((tx, sender));
            }
            ctx.chain
                .build_payload_from_transactions(parent, &attrs, &miner, txs)
        }
        Some(_) => return Err(invalid_params("invalid argument 2: expected an array")),
    };
    match built {
        Ok(built) => Ok(envelope_json(&built, Version::V4)),
        Err(ChainError::Invalid { reason, .. }) => Err(server_error(reason)),
        Err(e @ (ChainError::NotOnHead { .. } | ChainError::UnknownBlock(_))) => {
            Err(server_error(e.to_string()))
        }
        Err(e) => Err(internal(e)),
    }
}

/// Registers this module's methods.
pub(crate) fn register(
    m: &mut jsonrpsee::RpcModule<RpcContext>,
) -> Result<(), jsonrpsee::core::RegisterMethodError> {
    crate::blocking(m, "testing_buildBlockV1", build_block)?;
    Ok(())
}
