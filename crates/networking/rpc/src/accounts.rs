//! The dev node's accounts: `eth_accounts` and `eth_sign` with the keys the node holds.
//! Only the dev node holds keys; elsewhere `eth_accounts` is empty and signing gets geth's
//! "unknown account", as geth without a keystore answers.

use crate::RpcContext;
use crate::eth::positional;
use crate::params::{RpcResult, invalid_params, server_error};
use alloy_primitives::{Address, Bytes, keccak256};
use jsonrpsee::types::Params;
use moat_crypto::secp::Signer;
use serde_json::{Value, json};

/// `eth_accounts`: the addresses of the keys the node holds.
pub fn accounts(ctx: &RpcContext, _: Params<'_>) -> RpcResult<Value> {
    Ok(json!(
        ctx.dev_keys.iter().map(Signer::address).collect::<Vec<_>>()
    ))
}

/// The held key of `address`, or geth's "unknown account".
pub(crate) fn key_of(ctx: &RpcContext, address: &Address) -> RpcResult<Signer> {
    ctx.dev_keys
        .iter()
        .find(|s| s.address() == *address)
        .cloned()
        .ok_or_else(|| server_error("unknown account"))
}

/// EIP-191's personal-message digest: keccak256("\x19Ethereum Signed Message:\n" ‖ len ‖ data).
pub fn personal_digest(data: &[u8]) -> alloy_primitives::B256 {
    let mut msg = format!("\x19Ethereum Signed Message:\n{}", data.len()).into_bytes();
    msg.extend_from_slice(data);
    keccak256(msg)
}

/// `eth_sign(address, data)`: the 65-byte r ‖ s ‖ v signature of the EIP-191 digest, v 27
/// or 28 (geth's format).
pub fn sign(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [address, data] = positional::<2>(&params)?;
    let address: Address = serde_json::from_value(
        address.ok_or_else(|| invalid_params("missing value for required argument 0"))?,
    )
    .map_err(|e| invalid_params(format!("invalid argument 0: {e}")))?;
    let data: Bytes = serde_json::from_value(
        data.ok_or_else(|| invalid_params("missing value for required argument 1"))?,
    )
    .map_err(|e| invalid_params(format!("invalid argument 1: {e}")))?;
    let key = key_of(ctx, &address)?;
    let sig = key.sign(&personal_digest(&data));
    let mut out = Vec::with_capacity(65);
    out.extend_from_slice(&sig.r.to_be_bytes::<32>());
    out.extend_from_slice(&sig.s.to_be_bytes::<32>());
    out.push(27 + u8::from(sig.y_parity));
    Ok(json!(Bytes::from(out)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn personal_digest_matches_eip191() {
        // ethers' hashMessage("hello world").
        assert_eq!(
            personal_digest(b"hello world"),
            "0xd9eba16ed0ecae432b71fe008c98cc872bb4cc214d3220a36f365326cf807d68"
                .parse::<alloy_primitives::B256>()
                .unwrap()
        );
    }
}
