//! `eth_getLogs`: logs of canonical blocks, filtered by address and topics.
//!
//! Each block's header bloom is checked first; receipts are read only for blocks whose
//! bloom may hold a match. A query spans at most [`MAX_BLOCK_RANGE`] blocks and returns at
//! most [`MAX_LOGS`] logs, so one request cannot make the node read its whole history.
//! The answer's size is counted as it is built: once it passes the server's response cap
//! (`--rpc.max-response-size`) the query stops with -32008 "Response is too big", instead
//! of building all of it and then finding it too big. The default cap (160 MiB) holds the
//! logs of any single block.

use crate::RpcContext;
use crate::eth::positional;
use crate::json::q;
use crate::params::{RpcResult, invalid_params, parse_block_number, server_error};
use alloy_primitives::{Address, B256, Bloom, BloomInput};
use jsonrpsee::types::error::{OVERSIZED_RESPONSE_CODE, OVERSIZED_RESPONSE_MSG};
use jsonrpsee::types::{ErrorObjectOwned, Params};
use serde_json::{Value, json};

/// Most blocks one query may cover.
pub(crate) const MAX_BLOCK_RANGE: u64 = 10_000;
/// Most logs one query may return.
pub(crate) const MAX_LOGS: usize = 10_000;

/// A parsed filter: an address set (empty: any) and per-position topic sets (empty: any).
#[derive(Debug, Default)]
struct Filter {
    addresses: Vec<Address>,
    topics: Vec<Vec<B256>>,
}

impl Filter {
    fn parse(o: &serde_json::Map<String, Value>) -> RpcResult<Self> {
        let addresses = match o.get("address") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(_)) => vec![parse::<Address>(&o["address"], "address")?],
            Some(Value::Array(list)) => list
                .iter()
                .map(|a| parse::<Address>(a, "address"))
                .collect::<RpcResult<_>>()?,
            Some(_) => return Err(invalid_params("invalid address filter")),
        };
        let topics = match o.get("topics") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(list)) => {
                if list.len() > 4 {
                    return Err(invalid_params("too many topics in filter (max 4)"));
                }
                list.iter()
                    .map(|t| match t {
                        Value::Null => Ok(Vec::new()),
                        Value::String(_) => Ok(vec![parse::<B256>(t, "topic")?]),
                        Value::Array(any) => any
                            .iter()
                            .map(|x| parse::<B256>(x, "topic"))
                            .collect::<RpcResult<_>>(),
                        _ => Err(invalid_params("invalid topic filter")),
                    })
                    .collect::<RpcResult<_>>()?
            }
            Some(_) => return Err(invalid_params("invalid topics filter")),
        };
        Ok(Self { addresses, topics })
    }

    /// Whether a block with this bloom may hold a matching log.
    fn may_match(&self, bloom: &Bloom) -> bool {
        let any = |items: &mut dyn Iterator<Item = &[u8]>| {
            let mut empty = true;
            for i in items {
                empty = false;
                if bloom.contains_input(BloomInput::Raw(i)) {
                    return true;
                }
            }
            empty
        };
        any(&mut self.addresses.iter().map(|a| a.as_slice()))
            && self
                .topics
                .iter()
                .all(|set| any(&mut set.iter().map(|t| t.as_slice())))
    }

    fn matches(&self, address: &Address, topics: &[B256]) -> bool {
        if !self.addresses.is_empty() && !self.addresses.contains(address) {
            return false;
        }
        self.topics
            .iter()
            .enumerate()
            .all(|(i, set)| set.is_empty() || topics.get(i).is_some_and(|t| set.contains(t)))
    }
}

/// Bytes one log takes in the answer, at least: the fixed fields (addresses, hashes,
/// quantities of at most 8 digits, keys and punctuation), 67 per topic and the data's hex.
fn log_json_size(topics: usize, data: usize) -> usize {
    300 + 67 * topics + 2 * data
}

/// jsonrpsee's answer to a response over the cap, given before the response is built.
fn too_big(max: usize) -> ErrorObjectOwned {
    ErrorObjectOwned::owned(
        OVERSIZED_RESPONSE_CODE,
        OVERSIZED_RESPONSE_MSG,
        Some(format!("Exceeded max limit of {max}")),
    )
}

fn parse<T: serde::de::DeserializeOwned>(v: &Value, what: &str) -> RpcResult<T> {
    serde_json::from_value(v.clone()).map_err(|e| invalid_params(format!("invalid {what}: {e}")))
}

pub(crate) fn get_logs(ctx: &RpcContext, params: Params<'_>) -> RpcResult<Value> {
    let [filter] = positional::<1>(&params)?;
    let Some(Value::Object(o)) = filter else {
        return Err(invalid_params("expected a filter object"));
    };
    let f = Filter::parse(&o)?;
    let store = ctx.chain.store();
    let (head, _) = ctx.head()?;
    let blocks: Vec<B256> = if let Some(h) = o.get("blockHash").filter(|v| !v.is_null()) {
        if o.contains_key("fromBlock") || o.contains_key("toBlock") {
            return Err(invalid_params(
                "cannot specify both BlockHash and FromBlock/ToBlock, choose one or the other",
            ));
        }
        let hash = parse::<B256>(h, "blockHash")?;
        if ctx
            .chain
            .header(&hash)
            .map_err(crate::params::internal)?
            .is_none()
        {
            return Err(server_error("unknown block"));
        }
        vec![hash]
    } else {
        let bound = |key: &str| -> RpcResult<u64> {
            match o.get(key).filter(|v| !v.is_null()) {
                None => Ok(head),
                Some(v) => {
                    let r = parse_block_number(v)?;
                    // As geth: a numbered block past the head is an error, not the head.
                    if let crate::params::BlockRef::Number(n) = r
                        && n > head
                    {
                        return Err(invalid_params(
                            "block range extends beyond current head block",
                        ));
                    }
                    Ok(ctx
                        .resolve(r)?
                        .and_then(|h| store.block_number(&h).ok().flatten())
                        .unwrap_or(head))
                }
            }
        };
        let (from, to) = (bound("fromBlock")?, bound("toBlock")?.min(head));
        if from > to {
            return Err(invalid_params("invalid block range params"));
        }
        if to - from >= MAX_BLOCK_RANGE {
            return Err(server_error(format!(
                "block range too large: {} blocks, limit {MAX_BLOCK_RANGE}",
                to - from + 1
            )));
        }
        let mut hashes = Vec::new();
        for n in from..=to {
            if let Some(h) = store.canonical_hash(n).map_err(crate::params::internal)? {
                hashes.push(h);
            }
        }
        hashes
    };

    let mut out = Vec::new();
    let mut size = 2usize;
    for hash in blocks {
        let Some(header) = ctx.chain.header(&hash).map_err(crate::params::internal)? else {
            continue;
        };
        if !f.may_match(&header.logs_bloom) {
            continue;
        }
        let (Some(receipts), Some(block)) = (
            ctx.chain.receipts(&hash).map_err(crate::params::internal)?,
            ctx.block(&hash)?,
        ) else {
            continue;
        };
        let mut log_index = 0u64;
        for (i, (receipt, tx)) in receipts.iter().zip(&block.transactions).enumerate() {
            for log in &receipt.logs {
                if f.matches(&log.address, log.data.topics()) {
                    if out.len() >= MAX_LOGS {
                        return Err(server_error(format!(
                            "query returned more than {MAX_LOGS} results"
                        )));
                    }
                    size += log_json_size(log.data.topics().len(), log.data.data.len()) + 1;
                    if size > ctx.max_response_size {
                        metrics::counter!("moat_rpc_response_too_big_total", "method" => "eth_getLogs")
                            .increment(1);
                        return Err(too_big(ctx.max_response_size));
                    }
                    out.push(json!({
                        "address": log.address,
                        "topics": log.data.topics(),
                        "data": log.data.data,
                        "blockNumber": q(header.number),
                        "transactionHash": tx.hash(),
                        "transactionIndex": q(i as u64),
                        "blockHash": hash,
                        "blockTimestamp": q(header.timestamp),
                        "logIndex": q(log_index),
                        "removed": false,
                    }));
                }
                log_index += 1;
            }
        }
    }
    Ok(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_match_like_geth() {
        let a = Address::repeat_byte(1);
        let (t1, t2) = (B256::repeat_byte(2), B256::repeat_byte(3));
        let f = Filter::parse(
            json!({ "address": [a], "topics": [null, [t1, t2]] })
                .as_object()
                .unwrap(),
        )
        .unwrap();
        assert!(f.matches(&a, &[t2, t1]));
        assert!(!f.matches(&a, &[t1]), "position 1 is required");
        assert!(!f.matches(&Address::ZERO, &[t1, t1]));
        let mut bloom = Bloom::ZERO;
        bloom.accrue(BloomInput::Raw(a.as_slice()));
        bloom.accrue(BloomInput::Raw(t1.as_slice()));
        assert!(f.may_match(&bloom));
        assert!(!f.may_match(&Bloom::ZERO));
        assert!(Filter::default().may_match(&Bloom::ZERO));
        assert!(
            Filter::parse(
                json!({ "topics": [null, null, null, null, null] })
                    .as_object()
                    .unwrap()
            )
            .is_err()
        );
    }
}
