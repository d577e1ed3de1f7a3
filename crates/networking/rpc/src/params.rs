//! Parsing what clients send: block tags, numbers, hashes, quantities, and JSON-RPC errors
//! in geth's codes.
//!
//! Everything here takes untrusted JSON and answers with an error object, never a panic.

use alloy_primitives::{B256, U256};
use jsonrpsee::types::ErrorObjectOwned;
use jsonrpsee::types::error::{INTERNAL_ERROR_CODE, INVALID_PARAMS_CODE};
use serde_json::Value;

/// geth's code for every error a method itself reports (`rpc/errors.go`, the default
/// for errors without their own code).
pub const SERVER_ERROR_CODE: i32 = -32000;

pub(crate) type RpcResult<T> = Result<T, ErrorObjectOwned>;

pub(crate) fn server_error(msg: impl Into<String>) -> ErrorObjectOwned {
    ErrorObjectOwned::owned(SERVER_ERROR_CODE, msg, None::<()>)
}

pub(crate) fn invalid_params(msg: impl Into<String>) -> ErrorObjectOwned {
    ErrorObjectOwned::owned(INVALID_PARAMS_CODE, msg, None::<()>)
}

/// A failure of our own storage, not of the request.
pub(crate) fn internal(e: impl std::fmt::Display) -> ErrorObjectOwned {
    ErrorObjectOwned::owned(
        INTERNAL_ERROR_CODE,
        format!("internal error: {e}"),
        None::<()>,
    )
}

pub(crate) fn header_not_found() -> ErrorObjectOwned {
    server_error("header not found")
}

/// Only the head state is kept; older blocks' state cannot be served.
pub(crate) fn historical_state() -> ErrorObjectOwned {
    server_error("historical state is not available")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tag {
    Earliest,
    Latest,
    Safe,
    Finalized,
    Pending,
}

/// A block as a client names it (EIP-1898 included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BlockRef {
    Tag(Tag),
    Number(u64),
    Hash(B256),
}

impl Default for BlockRef {
    fn default() -> Self {
        BlockRef::Tag(Tag::Latest)
    }
}

/// A `0x`-prefixed hex quantity that fits in a u64.
pub(crate) fn parse_quantity(s: &str) -> RpcResult<u64> {
    let digits = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .ok_or_else(|| invalid_params(format!("hex string without 0x prefix: {s:?}")))?;
    if digits.is_empty() {
        return Err(invalid_params("hex string \"0x\""));
    }
    if digits.len() > 16 {
        return Err(invalid_params("hex number > 64 bits"));
    }
    u64::from_str_radix(digits, 16)
        .map_err(|_| invalid_params(format!("invalid hex number: {s:?}")))
}

/// A quantity given as hex string or plain number (geth's `HexOrDecimal64`).
pub(crate) fn parse_u64_lenient(v: &Value) -> RpcResult<u64> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| invalid_params("expected a non-negative integer")),
        Value::String(s) if s.starts_with("0x") || s.starts_with("0X") => parse_quantity(s),
        Value::String(s) => s
            .parse()
            .map_err(|_| invalid_params(format!("invalid number: {s:?}"))),
        _ => Err(invalid_params("expected a quantity")),
    }
}

fn parse_hash(s: &str) -> RpcResult<B256> {
    s.parse()
        .map_err(|_| invalid_params(format!("invalid block hash: {s:?}")))
}

fn parse_block_string(s: &str) -> RpcResult<BlockRef> {
    Ok(match s {
        "latest" => BlockRef::Tag(Tag::Latest),
        "pending" => BlockRef::Tag(Tag::Pending),
        "earliest" => BlockRef::Tag(Tag::Earliest),
        "safe" => BlockRef::Tag(Tag::Safe),
        "finalized" => BlockRef::Tag(Tag::Finalized),
        // geth's BlockNumberOrHash takes a bare 32-byte hex string as a hash.
        s if s.len() == 66 => BlockRef::Hash(parse_hash(s)?),
        s => BlockRef::Number(parse_quantity(s)?),
    })
}

/// A block parameter: a tag, a hex number, a hash, or an EIP-1898 object.
pub(crate) fn parse_block_ref(v: &Value) -> RpcResult<BlockRef> {
    match v {
        Value::String(s) => parse_block_string(s),
        Value::Object(o) => match (o.get("blockHash"), o.get("blockNumber")) {
            (Some(Value::String(h)), None) => Ok(BlockRef::Hash(parse_hash(h)?)),
            (None, Some(Value::String(n))) => parse_block_string(n),
            _ => Err(invalid_params(
                "invalid block: need exactly one of blockHash or blockNumber",
            )),
        },
        Value::Null => Ok(BlockRef::default()),
        _ => Err(invalid_params("invalid block parameter")),
    }
}

/// A block number or tag only (no hashes), as `eth_getBlockByNumber` takes.
pub(crate) fn parse_block_number(v: &Value) -> RpcResult<BlockRef> {
    match parse_block_ref(v)? {
        BlockRef::Hash(_) => Err(invalid_params("expected a block number or tag, got a hash")),
        r => Ok(r),
    }
}

/// A storage slot: any hex string of up to 32 bytes, left-padded (geth accepts "0x0").
pub(crate) fn parse_slot(s: &str) -> RpcResult<B256> {
    let digits = s.strip_prefix("0x").unwrap_or(s);
    if digits.len() > 64 {
        return Err(invalid_params("storage slot longer than 32 bytes"));
    }
    let n = if digits.is_empty() {
        U256::ZERO
    } else {
        U256::from_str_radix(digits, 16)
            .map_err(|_| invalid_params(format!("invalid storage slot: {s:?}")))?
    };
    Ok(B256::from(n.to_be_bytes::<32>()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn block_refs_parse_like_geth() {
        assert_eq!(
            parse_block_ref(&json!("latest")).unwrap(),
            BlockRef::Tag(Tag::Latest)
        );
        assert_eq!(
            parse_block_ref(&json!("0x10")).unwrap(),
            BlockRef::Number(16)
        );
        assert_eq!(
            parse_block_ref(&json!({ "blockHash": format!("0x{}", "11".repeat(32)) })).unwrap(),
            BlockRef::Hash(B256::repeat_byte(0x11))
        );
        for bad in [
            json!("0x"),
            json!("12"),
            json!("0x1ffffffffffffffff"),
            json!(1.5),
            json!("0xzz"),
        ] {
            assert!(parse_block_ref(&bad).is_err(), "{bad}");
        }
        assert!(parse_block_number(&json!(format!("0x{}", "11".repeat(32)))).is_err());
    }

    #[test]
    fn slots_are_left_padded() {
        assert_eq!(parse_slot("0x0").unwrap(), B256::ZERO);
        assert_eq!(parse_slot("0x01").unwrap(), B256::with_last_byte(1));
        assert!(parse_slot(&format!("0x{}", "0".repeat(65))).is_err());
    }
}
